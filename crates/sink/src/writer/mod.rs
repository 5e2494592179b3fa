//! The writer thread: takes full batches, writes them to the output, rotates,
//! publishes and retires files, and gives the batches back.
//!
//! By file: this one has the writer's types, its thread loop, batches and
//! housekeeping (flush, rotation by time, retention); `segments` writes
//! batches and ring blocks (with room made on a full disk, salvage after
//! a failure); `output` opens, heads, closes and publishes files;
//! `recover` deals with what an interrupted capture left; `helpers` has
//! the small pure parts (units of output, compression of records).

mod helpers;
mod output;
mod recover;
pub use recover::publish_partial;
mod segments;

pub use helpers::compress_records;
use helpers::*;
use recover::recover_leftovers;

use crate::batch::Batch;
use crate::files::{self, OutputPlan, Retention, Rotation};
use crate::reason::{SinkReason, WriteFailure};
use crate::strategy::{BufferedFile, DirectFile, Output, Stream, WriteMode};
use crossbeam_channel::{Receiver, Sender};
use ringcap_format::walk::{record_at, RecordFormat};
use ringcap_format::{pcap, pcapng};
use ringcap_stats::Board;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// An interface as the output file describes it.
#[derive(Debug, Clone)]
pub struct SinkInterface {
    /// Interface name.
    pub name: String,
    /// pcap LINKTYPE.
    pub linktype: u32,
    /// Snap length.
    pub snaplen: u32,
    /// Filter expression, if any.
    pub filter: Option<String>,
    /// The board entry whose counters this interface's pcapng statistics
    /// block reports, or `None` for no statistics block (one board entry
    /// may stand for several interfaces of one input file).
    pub stats: Option<usize>,
}

/// Everything the writer needs to know.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Where the output goes.
    pub plan: OutputPlan,
    /// Record format.
    pub format: RecordFormat,
    /// The capture interfaces, in pcapng interface-id order.
    pub interfaces: Vec<SinkInterface>,
    /// Recorded in the pcapng section header (the command line).
    pub comment: String,
    /// When to start a new file.
    pub rotation: Rotation,
    /// Which old files to delete.
    pub retention: Retention,
    /// How bytes reach the disk.
    pub mode: WriteMode,
    /// How often written data is pushed towards the disk.
    pub flush_interval: Duration,
    /// How often pcapng interface statistics blocks are written.
    pub isb_interval: Duration,
    /// Shell command run on each completed file (`{}` or `$1` is the path).
    pub post_rotate: Option<String>,
    /// Replace an existing file of the same name.
    pub overwrite: bool,
    /// Permission bits of new files.
    pub file_mode: u32,
    /// Owner (uid, gid) given to files created before privileges are dropped.
    pub owner: Option<(u32, u32)>,
    /// Packets arrive now (live capture), not from files: a time-rotated
    /// file is closed when the wall clock passes its end.
    pub wall_clock: bool,
    /// Write ringcap's compressed format (`ringcap-compress`) instead of
    /// pcap. `format` must then be `RecordFormat::Pcap`: batches still
    /// hold pcap records (rotation walks them as usual), and the writer
    /// codes each written segment into whole compressed blocks, so a file
    /// always ends at a block boundary (crash safety as for pcap).
    pub compress: bool,
    /// Rung whenever the writer logs a message, completes a file or fails
    /// (what [`Shared`] then holds), for a supervisor that waits for that
    /// rather than looking every so often.
    pub notify: Option<Arc<crate::Bell>>,
    /// Told of each file published and removed (see [`crate::FileObserver`]).
    pub files: Option<crate::FileHook>,
}

/// State shared between the writer thread and the rest of the program.
#[derive(Debug)]
pub struct Shared {
    /// Set to close the current file and start a new one; use
    /// [`request_rotation`](Self::request_rotation), which also wakes the
    /// writer (an idle writer waits for work, not for a timer).
    pub rotate_now: AtomicBool,
    /// When the last rotation was asked for (ns since the epoch): in a live
    /// capture the file ends there, by packet time, not when the writer
    /// gets to it (packets of before may still be in the ring).
    rotate_at_ns: AtomicU64,
    /// Wakes the writer (holds at most one wake-up).
    wake: Sender<()>,
    /// Set when the writer has failed: why.
    pub failure: Mutex<Option<WriteFailure>>,
    /// Path of the file being written (final name), for the status line.
    pub current: Mutex<Option<String>>,
    /// Files completed and published, in order.
    pub completed: Mutex<Vec<PathBuf>>,
    /// Messages for the operator (deletions, recoveries), drained by the caller.
    pub log: Mutex<Vec<String>>,
    /// Registered ring memory offered to the writer
    /// ([`WriterHandle::offer_fixed`]), taken at its next ring block.
    fixed_offer: Mutex<Option<crate::FixedWrites>>,
}

impl Shared {
    fn new(wake: Sender<()>) -> Shared {
        Shared {
            rotate_now: AtomicBool::new(false),
            rotate_at_ns: AtomicU64::new(0),
            wake,
            failure: Mutex::new(None),
            current: Mutex::new(None),
            completed: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            fixed_offer: Mutex::new(None),
        }
    }

    /// Closes the current file of a series and starts a new one at the next
    /// packet (SIGHUP), now.
    pub fn request_rotation(&self) {
        self.rotate_at_ns.store(now_ns(), Ordering::Relaxed);
        self.rotate_now.store(true, Ordering::Relaxed);
        let _ = self.wake.try_send(());
    }
}

/// A TPACKET_V3 ring block whose first `len` bytes a capture thread has
/// turned into pcapng blocks in place (`ringcap_source::inplace`), for the
/// writer to write as they are. Dropping it gives the block back to the
/// kernel, so it is dropped only once written (or once its packets are
/// counted as lost to a failed writer).
#[derive(Debug)]
pub struct RingWrite {
    /// The block, held away from the kernel.
    pub block: ringcap_source::HeldBlock,
    /// Bytes of pcapng blocks from its start (a multiple of 4096).
    pub len: usize,
    /// Packets (EPBs) in them.
    pub packets: u64,
    /// Board entry (capture interface) of the packets.
    pub interface: usize,
    /// Timestamp of the first packet, ns.
    pub first_ts: u64,
    /// Timestamp of the last packet, ns (for time rotation).
    pub last_ts: u64,
}

/// The running writer.
pub struct WriterHandle {
    thread: Option<JoinHandle<()>>,
    /// Shared state.
    pub shared: Arc<Shared>,
    /// Per producer: where its next batch will land in the output, for
    /// [`crate::Encoder::set_placement`].
    pub placement: Arc<Vec<AtomicU64>>,
}

impl WriterHandle {
    /// Waits for the writer to finish (all encoders must be closed first).
    pub fn join(mut self) -> Arc<Shared> {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.clone()
    }

    /// Ring blocks written in place go out from the rings' memory
    /// registered with io_uring (see [`crate::FixedWrites`]) from the next
    /// one on, when files are written with O_DIRECT.
    pub fn offer_fixed(&self, fixed: crate::FixedWrites) {
        *self
            .shared
            .fixed_offer
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(fixed);
    }

    /// Why the writer failed, if it has.
    pub fn failure(&self) -> Option<WriteFailure> {
        self.shared.failure.lock().ok().and_then(|f| f.clone())
    }
}

/// What the writer's wait brought.
enum Got {
    Batch(Batch),
    Ring(RingWrite),
    FullGone,
    RingsGone,
    Nothing,
}

struct OpenFile {
    out: Box<dyn Output>,
    final_path: Option<PathBuf>,
    partial_path: Option<PathBuf>,
    packets: u64,
    boundary_ns: Option<u64>,
    started_ns: u64,
    /// `out.len()` at the last flush: more means a flush is due.
    flushed_len: u64,
}

/// The writer thread's state.
pub struct Writer {
    cfg: WriterConfig,
    board: Arc<Board>,
    pools: Vec<Sender<Batch>>,
    shared: Arc<Shared>,
    /// Registered ring memory for in-place blocks, once offered.
    fixed: Option<Arc<Mutex<crate::FixedWrites>>>,
    current: Option<OpenFile>,
    seq: u64,
    /// Time rotation boundaries are `anchor + k * seconds`: 0 with --align
    /// (whole wall-clock periods), else the first packet's time.
    anchor_ns: Option<u64>,
    last_tick: Instant,
    last_isb: Instant,
    failed: bool,
    placement: Arc<Vec<AtomicU64>>,
    consumed: Vec<u64>,
    /// With `compress`: the encoder and its output buffer (reused).
    zenc: Option<ringcap_compress::Encoder>,
    zbuf: Vec<u8>,
    /// A live capture's rotation asked for while no file was open: the next
    /// file ends there if it starts before (its packets of before the
    /// request were still on their way).
    rotate_pending_ns: Option<u64>,
}

impl Writer {
    /// Checks the output, opens the first file (so that errors show before the
    /// capture starts and the first file is created with the current
    /// privileges) and starts the writer thread. `full` receives batches from
    /// every encoder; `pools[i]` takes batches back to capture thread `i`.
    pub fn spawn(
        cfg: WriterConfig,
        board: Arc<Board>,
        full: Receiver<Batch>,
        pools: Vec<Sender<Batch>>,
    ) -> io::Result<WriterHandle> {
        Self::spawn_with_rings(cfg, board, full, pools, None)
    }

    /// [`spawn`](Self::spawn), also taking ring blocks already turned into
    /// pcapng in place from `rings` (pcapng only): each is written as it is
    /// and given back to the kernel once written (see [`RingWrite`]).
    pub fn spawn_with_rings(
        cfg: WriterConfig,
        board: Arc<Board>,
        full: Receiver<Batch>,
        pools: Vec<Sender<Batch>>,
        rings: Option<Receiver<RingWrite>>,
    ) -> io::Result<WriterHandle> {
        if rings.is_some() && (cfg.format != RecordFormat::Pcapng || cfg.compress) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring blocks are written in place only as pcapng",
            ));
        }
        let (wake_tx, wake) = crossbeam_channel::bounded(1);
        let shared = Arc::new(Shared::new(wake_tx));
        let placement: Arc<Vec<AtomicU64>> =
            Arc::new(pools.iter().map(|_| AtomicU64::new(0)).collect());
        let consumed = vec![0; pools.len()];
        if cfg.compress && !matches!(cfg.format, RecordFormat::Pcap(_)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "compressed output is coded from pcap records",
            ));
        }
        let zenc = cfg.compress.then(|| {
            ringcap_compress::Encoder::new(cfg.interfaces.first().map_or(1, |i| i.linktype))
        });
        let mut w = Writer {
            zenc,
            zbuf: Vec::new(),
            placement: placement.clone(),
            consumed,
            anchor_ns: cfg.rotation.align.then_some(0),
            cfg,
            board,
            pools,
            shared: shared.clone(),
            fixed: None,
            current: None,
            seq: 0,
            last_tick: Instant::now(),
            last_isb: Instant::now(),
            failed: false,
            rotate_pending_ns: None,
        };
        if let Some(dir) = w.cfg.plan.dir() {
            // (With the trailing slash of `-w DIR/`, a file there is
            // ENOTDIR to stat, not "exists".)
            let not_dir = match std::fs::metadata(&dir) {
                Ok(m) => !m.is_dir(),
                Err(e) => e.kind() == io::ErrorKind::NotADirectory,
            };
            if not_dir {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not a directory", dir.display()),
                ));
            }
            if !dir.exists() {
                std::fs::create_dir_all(&dir).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("creating output directory {}: {e}", dir.display()),
                    )
                })?;
                if let Some((uid, gid)) = w.cfg.owner {
                    std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
                }
            } else if let Some((uid, gid)) = w.cfg.owner {
                check_writable_by(&dir, uid, gid)?;
            }
            // A series opens its first file at its first packet: a
            // directory no file can be made in (read-only, /proc) must fail
            // now, not when packets come.
            probe_dir(&dir)?;
            for msg in recover_leftovers(&dir, &w.cfg.plan) {
                w.log(msg);
            }
        }
        // One file or a stream: opened now, so a clobbered name or a bad path
        // fails before the capture starts. A series opens each file at its
        // first packet (named by that packet's time): no empty files.
        if matches!(
            w.cfg.plan,
            OutputPlan::Single(_) | OutputPlan::Stdout | OutputPlan::Device(_)
        ) {
            w.open(now_ns())?;
        }
        w.publish_placement(None);
        let thread = std::thread::Builder::new()
            .name("ringcap-writer".into())
            .spawn(move || w.run(full, rings, wake))?;
        Ok(WriterHandle {
            thread: Some(thread),
            shared,
            placement,
        })
    }

    fn log(&self, msg: String) {
        if let Ok(mut l) = self.shared.log.lock() {
            l.push(msg);
        }
        self.notify();
    }

    fn notify(&self) {
        if let Some(b) = &self.cfg.notify {
            b.ring();
        }
    }

    fn run(
        mut self,
        full: Receiver<Batch>,
        rings: Option<Receiver<RingWrite>>,
        wake: Receiver<()>,
    ) {
        let mut full = Some(full);
        let mut rings = rings;
        while full.is_some() || rings.is_some() {
            // Waits for work; with a timeout only when something is due at
            // a time of its own (a flush, statistics, the end of a
            // time-rotated file): an idle writer with everything flushed
            // sleeps until a batch comes, the producers are gone or a
            // rotation is asked for.
            let got = {
                let mut sel = crossbeam_channel::Select::new();
                let from_full = full.as_ref().map(|r| sel.recv(r));
                let from_rings = rings.as_ref().map(|r| sel.recv(r));
                let from_wake = sel.recv(&wake);
                let op = match self.next_due() {
                    Some(due) => sel.select_deadline(due).ok(),
                    None => Some(sel.select()),
                };
                match (op, full.as_ref(), rings.as_ref()) {
                    (Some(op), Some(r), _) if Some(op.index()) == from_full => {
                        op.recv(r).map_or(Got::FullGone, Got::Batch)
                    }
                    (Some(op), _, Some(r)) if Some(op.index()) == from_rings => {
                        op.recv(r).map_or(Got::RingsGone, Got::Ring)
                    }
                    (Some(op), _, _) => {
                        debug_assert_eq!(op.index(), from_wake);
                        let _ = op.recv(&wake);
                        Got::Nothing
                    }
                    (None, _, _) => Got::Nothing,
                }
            };
            match got {
                Got::Batch(batch) => self.handle(batch),
                Got::Ring(ring) => self.handle_ring(ring),
                Got::FullGone => full = None,
                Got::RingsGone => rings = None,
                Got::Nothing => {}
            }
            self.housekeeping();
        }
        if let Err(e) = self.close() {
            self.fail(WriteFailure::other(format!("closing the output: {e}")));
        }
    }

    /// When [`housekeeping`](Self::housekeeping) next has something to do
    /// by the clock, if it has anything: a flush of what was written since
    /// the last one, the next statistics blocks, the end of a time-rotated
    /// file's period.
    fn next_due(&self) -> Option<Instant> {
        let f = self.current.as_ref()?;
        let mut due: Option<Instant> = None;
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t {
                due = Some(due.map_or(t, |d| d.min(t)));
            }
        };
        if f.out.len() != f.flushed_len {
            at(self.last_tick.checked_add(self.cfg.flush_interval));
        }
        if self.cfg.format == RecordFormat::Pcapng {
            at(self.last_isb.checked_add(self.cfg.isb_interval));
        }
        if let Some(b) = f.boundary_ns.filter(|_| self.cfg.wall_clock) {
            let end = b.saturating_add(late_ns(self.cfg.flush_interval));
            at(Instant::now().checked_add(Duration::from_nanos(end.saturating_sub(now_ns()))));
        }
        due
    }

    fn housekeeping(&mut self) {
        if self.shared.rotate_now.swap(false, Ordering::Relaxed)
            && matches!(self.cfg.plan, OutputPlan::Series { .. })
        {
            let at = self.shared.rotate_at_ns.load(Ordering::Relaxed);
            if self.cfg.wall_clock {
                // Live: the file ends at the request's time, by packet
                // time (and is closed once packets of before can no longer
                // be on their way, as a -G period is).
                match self.current.as_mut() {
                    Some(f) => f.boundary_ns = Some(f.boundary_ns.map_or(at, |b| b.min(at))),
                    None => self.rotate_pending_ns = Some(at),
                }
            } else if let Err(e) = self.close() {
                // Files read: their packets carry old times; now is now.
                self.fail(WriteFailure::other(format!("rotating: {e}")));
            }
        }
        // A flush when something was written since the last one, at most
        // once per flush interval.
        if self.last_tick.elapsed() >= self.cfg.flush_interval
            && self
                .current
                .as_ref()
                .is_some_and(|f| f.out.len() != f.flushed_len)
        {
            self.last_tick = Instant::now();
            let r = self.with_room(|f| {
                f.out.tick()?;
                f.flushed_len = f.out.len();
                Ok(())
            });
            if let Err(e) = r {
                let name = self
                    .current
                    .as_ref()
                    .map(|f| display(&f.final_path))
                    .unwrap_or_default();
                self.fail(WriteFailure::other(format!("flushing {name}: {e}")));
                let _ = self.close();
            }
        }
        if self.cfg.format == RecordFormat::Pcapng
            && self.last_isb.elapsed() >= self.cfg.isb_interval
            && self.current.is_some()
        {
            self.last_isb = Instant::now();
            if let Err(e) = self.write_isbs() {
                self.fail(WriteFailure::other(format!("writing statistics: {e}")));
            }
        }
        // Time rotation with sparse live traffic: close the file once its
        // period is over and packets of it can no longer be on their way.
        // Packets read from files carry their own time: only they decide.
        let late = late_ns(self.cfg.flush_interval);
        if let Some(b) = self
            .current
            .as_ref()
            .and_then(|f| f.boundary_ns)
            .filter(|_| self.cfg.wall_clock)
        {
            if now_ns() >= b + late {
                if let Err(e) = self.close() {
                    self.fail(WriteFailure::other(format!("rotating: {e}")));
                }
            }
        }
    }

    fn fail(&mut self, why: impl Into<WriteFailure>) {
        self.failed = true;
        if let Ok(mut f) = self.shared.failure.lock() {
            if f.is_none() {
                *f = Some(why.into());
            }
        }
        self.notify();
    }

    fn give_back(&self, mut batch: Batch) {
        batch.clear();
        if let Some(p) = self.pools.get(batch.pool) {
            let _ = p.send(batch);
        }
    }

    /// Tells the producers where their next batch will land: only exact
    /// while one producer writes, which is when it matters.
    fn publish_placement(&self, producer: Option<usize>) {
        let len = self.current.as_ref().map(|f| f.out.len()).unwrap_or(0);
        match producer {
            Some(p) => self.placement[p].store(
                crate::encode::placement_word(self.consumed[p], len),
                Ordering::Release,
            ),
            None => {
                for (p, h) in self.placement.iter().enumerate() {
                    h.store(
                        crate::encode::placement_word(self.consumed[p], len),
                        Ordering::Release,
                    );
                }
            }
        }
    }

    fn handle(&mut self, mut batch: Batch) {
        if self.failed || self.cfg.plan == OutputPlan::Discard {
            if self.failed {
                self.board.add_write_failed(batch.interface, batch.packets);
            } else {
                self.board
                    .add_written(batch.interface, batch.packets, batch.len() as u64);
            }
            return self.give_back(batch);
        }
        if batch.coded && self.zenc.is_none() {
            // A caller bug: coded blocks are for compressed outputs only.
            self.fail(WriteFailure::other(
                "compressed blocks were handed to an output that is not compressed".into(),
            ));
            self.board.add_write_failed(batch.interface, batch.packets);
            return self.give_back(batch);
        }
        let len = batch.len();
        let mut off = 0;
        let mut left = batch.packets;
        while off < len {
            if self.failed {
                self.board.add_write_failed(batch.interface, left);
                break;
            }
            if self.current.is_none() {
                let ts = unit_at(self.cfg.format, batch.coded, batch.bytes(), off)
                    .and_then(|(_, ts, _)| ts)
                    .unwrap_or_else(now_ns);
                if let Err(e) = self.open(ts) {
                    self.fail(WriteFailure::io("opening the next output file", &e));
                    self.board.add_write_failed(batch.interface, left);
                    break;
                }
            }
            let (end, n) = self.segment(batch.bytes(), off, left, batch.last_ts, batch.coded);
            if n == 0 {
                if let Err(e) = self.close() {
                    self.fail(WriteFailure::other(format!("rotating: {e}")));
                }
                continue;
            }
            let wrote = match self.write_segment(&mut batch, off, end) {
                Ok(wrote) => wrote,
                Err((e, salvaged, salvaged_bytes)) => {
                    self.fail(e);
                    self.board
                        .add_written(batch.interface, salvaged, salvaged_bytes);
                    self.board
                        .add_write_failed(batch.interface, left - salvaged);
                    self.close_after_failure(batch.interface);
                    break;
                }
            };
            if let Some(f) = self.current.as_mut() {
                f.packets += n;
            }
            self.board.add_written(batch.interface, n, wrote);
            off = end;
            left -= n;
        }
        if let Some(c) = self.consumed.get_mut(batch.pool) {
            *c += len as u64;
            self.publish_placement(Some(batch.pool));
        }
        self.give_back(batch);
    }
}
