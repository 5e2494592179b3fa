//! The writer thread: takes full batches, writes them to the output, rotates,
//! publishes and retires files, and gives the batches back.

use crate::batch::Batch;
use crate::files::{self, OutputPlan, Retention, Rotation};
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
}

/// State shared between the writer thread and the rest of the program.
#[derive(Debug)]
pub struct Shared {
    /// Set to close the current file and start a new one; use
    /// [`request_rotation`](Self::request_rotation), which also wakes the
    /// writer (an idle writer waits for work, not for a timer).
    pub rotate_now: AtomicBool,
    /// Wakes the writer (holds at most one wake-up).
    wake: Sender<()>,
    /// Set when the writer has failed; the message says why.
    pub failure: Mutex<Option<String>>,
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

    /// The failure message, if the writer has failed.
    pub fn failure(&self) -> Option<String> {
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

/// How long after the end of a time-rotated file's period a live packet of
/// that period can still reach the writer: the kernel retires a ring block
/// within a flush interval (or 50 ms), a capture thread ships a partial
/// batch within a flush interval, and scheduling adds a little. Closing
/// sooner would open a second file for the same period when one comes.
fn late_ns(flush_interval: Duration) -> u64 {
    let f = flush_interval.as_nanos() as u64;
    2 * f + 100_000_000
}

/// Recovers the hidden partial files an interrupted capture left in `dir`:
/// each is cut after its last whole record and published under its final
/// name, or removed if it is empty (it holds nothing). Returns the messages for the operator, one per file acted on or
/// left alone (files another capture is writing are skipped silently).
fn recover_leftovers(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    for partial in files::leftover_partials(dir) {
        let Some(final_path) = files::final_path_of_partial(&partial) else {
            continue;
        };
        if !std::fs::symlink_metadata(&partial).is_ok_and(|m| m.file_type().is_file()) {
            log.push(format!(
                "left {} alone: not a regular file",
                partial.display()
            ));
            continue;
        }
        // Killed before its first write: nothing to recover.
        match files::remove_if_empty_partial(&partial) {
            Ok(files::EmptyPartial::Removed) => {
                log.push(format!(
                    "removed {}: an empty partial file left by an interrupted capture",
                    partial.display()
                ));
                continue;
            }
            // Another capture has just created it.
            Ok(files::EmptyPartial::InUse) => continue,
            Ok(files::EmptyPartial::Kept) => {}
            Err(e) => {
                log.push(format!("left {} alone: {e}", partial.display()));
                continue;
            }
        }
        match ringcap_format::repair::repair(&partial) {
            Ok(report) => {
                let target = if final_path.exists() {
                    final_path.with_extension(format!(
                        "recovered.{}",
                        final_path
                            .extension()
                            .and_then(|e| e.to_str())
                            .unwrap_or("pcap")
                    ))
                } else {
                    final_path.clone()
                };
                match std::fs::rename(&partial, &target) {
                    Ok(()) => log.push(format!(
                        "recovered {} from an interrupted capture: {} packets, {} bytes cut",
                        target.display(),
                        report.packets,
                        report.original_len - report.valid_len
                    )),
                    Err(e) => log.push(format!(
                        "could not publish recovered {}: {e}",
                        partial.display()
                    )),
                }
            }
            // Another capture's file in progress: not a leftover.
            Err(ringcap_format::repair::RepairError::InUse) => {}
            Err(e) => log.push(format!("left {} alone: {e}", partial.display())),
        }
    }
    log
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
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
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
        };
        if let Some(dir) = w.cfg.plan.dir() {
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
            for msg in recover_leftovers(&dir) {
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
            self.fail(format!("closing the output: {e}"));
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
            if let Err(e) = self.close() {
                self.fail(format!("rotating: {e}"));
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
                self.fail(format!("flushing {name}: {e}"));
                let _ = self.close();
            }
        }
        if self.cfg.format == RecordFormat::Pcapng
            && self.last_isb.elapsed() >= self.cfg.isb_interval
            && self.current.is_some()
        {
            self.last_isb = Instant::now();
            if let Err(e) = self.write_isbs() {
                self.fail(format!("writing statistics: {e}"));
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
                    self.fail(format!("rotating: {e}"));
                }
            }
        }
    }

    fn fail(&mut self, msg: String) {
        self.failed = true;
        if let Ok(mut f) = self.shared.failure.lock() {
            if f.is_none() {
                *f = Some(msg);
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
            self.fail("compressed blocks were handed to an output that is not compressed".into());
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
                    self.fail(format!("opening the next output file: {e}"));
                    self.board.add_write_failed(batch.interface, left);
                    break;
                }
            }
            let (end, n) = self.segment(batch.bytes(), off, left, batch.last_ts, batch.coded);
            if n == 0 {
                if let Err(e) = self.close() {
                    self.fail(format!("rotating: {e}"));
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

    /// Takes the registered ring memory the engine offered, for this file
    /// and the next.
    fn take_fixed(&mut self) {
        let offer = self
            .shared
            .fixed_offer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(f) = offer {
            let f = Arc::new(Mutex::new(f));
            if let Some(cur) = self.current.as_mut() {
                cur.out.use_fixed(f.clone());
            }
            self.fixed = Some(f);
        }
    }

    /// Writes a ring block turned into pcapng in place. When all of it goes
    /// into the current file it is written from the ring memory as it is
    /// (after a padding block, if the file does not end at a page boundary:
    /// ISBs, or the part of a block split by rotation, leave it elsewhere);
    /// a block split by rotation is written part by part through the
    /// output's copy path. The block goes back to the kernel when `ring` is
    /// dropped, after the write.
    fn handle_ring(&mut self, ring: RingWrite) {
        if self.fixed.is_none() {
            self.take_fixed();
        }
        let interface = ring.interface;
        if self.failed || self.cfg.plan == OutputPlan::Discard {
            if self.failed {
                self.board.add_write_failed(interface, ring.packets);
            } else {
                self.board
                    .add_written(interface, ring.packets, ring.len as u64);
            }
            return;
        }
        let bytes = &ring.block.bytes()[..ring.len.min(ring.block.bytes().len())];
        let mut off = 0;
        let mut left = ring.packets;
        while off < bytes.len() {
            if self.failed {
                self.board.add_write_failed(interface, left);
                break;
            }
            if self.current.is_none() {
                let ts = first_packet_ts(bytes, off).unwrap_or(ring.first_ts);
                if let Err(e) = self.open(ts) {
                    self.fail(format!("opening the next output file: {e}"));
                    self.board.add_write_failed(interface, left);
                    break;
                }
            }
            let (end, n) = self.segment(bytes, off, left, ring.last_ts, false);
            if end == off {
                if let Err(e) = self.close() {
                    self.fail(format!("rotating: {e}"));
                }
                continue;
            }
            let whole = off == 0 && end == bytes.len();
            let mut padded = 0u64;
            let r = self.with_room(|f| {
                let before = f.out.len();
                let pad = pcapng::pad_to(before, crate::batch::ALIGN as u64);
                padded = pad.len() as u64;
                let r = if !whole {
                    f.out.write(&bytes[off..end])
                } else if pad.is_empty() {
                    f.out.write_pages(bytes)
                } else {
                    f.out.write(&pad).and_then(|()| f.out.write_pages(bytes))
                };
                r.inspect_err(|_| {
                    let _ = f.out.truncate(before);
                })
            });
            if let Err(e) = r {
                let name = self
                    .current
                    .as_ref()
                    .map(|f| display(&f.final_path))
                    .unwrap_or_default();
                let (why, kept) = if is_disk_full(&e) {
                    // As the copy path: what fits of the block is kept,
                    // packet by packet.
                    let (kept, kept_bytes) = self.salvage(bytes, off, end, false);
                    self.board.add_written(interface, kept, kept_bytes);
                    (format!("writing {name}: the disk is full ({e}); the file was closed valid. Free space, or set --max-total/--min-free so ringcap deletes old files"), kept)
                } else {
                    (format!("writing {name}: {e}; the file was closed valid"), 0)
                };
                self.fail(why);
                self.board.add_write_failed(interface, left - kept);
                self.close_after_failure(interface);
                break;
            }
            if let Some(f) = self.current.as_mut() {
                f.packets += n;
            }
            if whole && padded > 0 {
                self.board
                    .overhead_bytes
                    .fetch_add(padded, Ordering::Relaxed);
            }
            self.board.add_written(interface, n, (end - off) as u64);
            off = end;
            left -= n;
        }
        drop(ring);
    }

    /// How much of `bytes[off..]` (`coded`: compressed blocks, see
    /// [`Batch::coded`]) goes into the current file: (end offset, packets).
    fn segment(
        &self,
        bytes: &[u8],
        off: usize,
        left: u64,
        last_ts: u64,
        coded: bool,
    ) -> (usize, u64) {
        let Some(f) = self.current.as_ref() else {
            return (off, 0);
        };
        let r = self.cfg.rotation;
        let size = f.out.len();
        let need_walk = r.packets.is_some_and(|m| f.packets + left > m)
            || r.bytes
                .is_some_and(|m| size + (bytes.len() - off) as u64 > m)
            || f.boundary_ns.is_some_and(|b| last_ts >= b);
        if !need_walk {
            return (bytes.len(), left);
        }
        let mut p = off;
        let mut n = 0u64;
        while p < bytes.len() {
            let Some((rl, ts, k)) = unit_at(self.cfg.format, coded, bytes, p) else {
                // Never for what the encoder or the converter made; should
                // it happen, what cannot be walked goes out whole rather
                // than opening file after file.
                if p == off {
                    return (bytes.len(), left);
                }
                break;
            };
            if let Some(ts) = ts {
                let first = f.packets + n == 0;
                if !first
                    && (r.packets.is_some_and(|m| f.packets + n >= m)
                        || r.bytes.is_some_and(|m| size + (p - off + rl) as u64 > m)
                        || f.boundary_ns.is_some_and(|b| ts >= b))
                {
                    break;
                }
                n += k;
            }
            p += rl;
        }
        (p, n)
    }

    /// Runs `op` on the open file; when the disk is full and retention is
    /// on, deletes the oldest completed file and tries again.
    fn with_room(&mut self, mut op: impl FnMut(&mut OpenFile) -> io::Result<()>) -> io::Result<()> {
        loop {
            let Some(f) = self.current.as_mut() else {
                return Ok(());
            };
            match op(f) {
                Ok(()) => return Ok(()),
                Err(e) if is_disk_full(&e) && self.make_room() => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes data bytes `from..to` of a batch. On failure nothing of the
    /// segment is left half-written; on a full disk as many whole records as
    /// fit are kept. Returns, on failure, the message and the records (and
    /// bytes) of the segment that were kept.
    fn write_segment(
        &mut self,
        batch: &mut Batch,
        from: usize,
        to: usize,
    ) -> Result<u64, (String, u64, u64)> {
        let mut wrote = (to - from) as u64;
        let r = if let (Some(enc), false) = (self.zenc.as_mut(), batch.coded) {
            let mut z = std::mem::take(&mut self.zbuf);
            z.clear();
            compress_records(
                enc,
                self.cfg.format,
                batch.bytes(),
                from,
                to,
                usize::MAX,
                &mut z,
            );
            wrote = z.len() as u64;
            let r = self.with_room(|f| {
                let before = f.out.len();
                f.out.write(&z).inspect_err(|_| {
                    let _ = f.out.truncate(before);
                })
            });
            self.zbuf = z;
            r
        } else {
            self.with_room(|f| {
                let before = f.out.len();
                f.out.write_batch(batch, from, to).inspect_err(|_| {
                    // Never leave half a record: cut back to the last whole one.
                    let _ = f.out.truncate(before);
                })
            })
        };
        let Err(e) = r else { return Ok(wrote) };
        let name = self
            .current
            .as_ref()
            .map(|f| display(&f.final_path))
            .unwrap_or_default();
        if !is_disk_full(&e) {
            return Err((
                format!("writing {name}: {e}; the file was closed valid"),
                0,
                0,
            ));
        }
        let (kept, kept_bytes) = self.salvage(batch.bytes(), from, to, batch.coded);
        Err((
            format!("writing {name}: the disk is full ({e}); the file was closed valid. Free space, or set --max-total/--min-free so ringcap deletes old files"),
            kept,
            kept_bytes,
        ))
    }

    /// After a full disk: writes the segment's records in small groups, each
    /// forced to the file, until one does not fit; keeps those that did.
    fn salvage(&mut self, bytes: &[u8], from: usize, to: usize, coded: bool) -> (u64, u64) {
        let format = self.cfg.format;
        let Some(f) = self.current.as_mut() else {
            return (0, 0);
        };
        let start = f.out.len();
        let mut good = (start, 0u64);
        let mut n = 0u64;
        let mut p = from;
        let mut z = Vec::new();
        while p < to {
            let Some((len, _, k)) = unit_at(format, coded, bytes, p) else {
                break;
            };
            let written = if let (Some(enc), false) = (self.zenc.as_mut(), coded) {
                // A block per record: each write leaves a whole file.
                z.clear();
                compress_records(enc, format, bytes, p, p + len, 1, &mut z);
                f.out.write(&z)
            } else {
                f.out.write(&bytes[p..p + len])
            };
            if written.is_err() {
                break;
            }
            n += k;
            p += len;
            if f.out.len() - good.0 >= 16 << 10 || p >= to {
                if f.out.tick().is_err() {
                    break;
                }
                good = (f.out.len(), n);
            }
        }
        let _ = f.out.truncate(good.0);
        f.packets += good.1;
        (good.1, good.0 - start)
    }

    /// Closes the current file after a write failure: if even that fails, the
    /// file is cut at its last complete record before it is published, and
    /// packets counted as written that are not in it are moved to the
    /// writer's drops.
    fn close_after_failure(&mut self, interface: usize) {
        let Some(f) = self.current.as_ref() else {
            return;
        };
        let claimed = f.packets;
        let partial = f.partial_path.clone();
        if self.close().is_err() {
            if let Some(p) = partial
                .as_ref()
                .and_then(|p| files::final_path_of_partial(p))
                .or(partial)
            {
                if let Ok(rep) = ringcap_format::repair::check(&p) {
                    if rep.packets < claimed {
                        self.board.unwrite(interface, claimed - rep.packets);
                    }
                }
            }
        }
    }

    /// Deletes the oldest completed file of a series to make room; true if one went.
    fn make_room(&mut self) -> bool {
        let OutputPlan::Series { dir, template } = &self.cfg.plan else {
            return false;
        };
        if !self.cfg.retention.any() {
            return false;
        }
        let files = files::completed_files(dir, template);
        let Some((oldest, _)) = files.first() else {
            return false;
        };
        if std::fs::remove_file(oldest).is_ok() {
            files::remove_index_of(oldest);
            self.log(format!(
                "deleted {} to make room (disk full)",
                oldest.display()
            ));
            true
        } else {
            false
        }
    }

    fn header_bytes(&self) -> Vec<u8> {
        if let (true, RecordFormat::Pcap(res)) = (self.cfg.compress, self.cfg.format) {
            let i = &self.cfg.interfaces[0];
            return ringcap_compress::FileHeader {
                version: ringcap_compress::VERSION,
                resolution: match res {
                    ringcap_format::TsResolution::Micro => ringcap_compress::Resolution::Micro,
                    ringcap_format::TsResolution::Nano => ringcap_compress::Resolution::Nano,
                },
                linktype: i.linktype,
                snaplen: self
                    .cfg
                    .interfaces
                    .iter()
                    .map(|i| i.snaplen)
                    .max()
                    .unwrap_or(i.snaplen),
            }
            .to_bytes()
            .to_vec();
        }
        match self.cfg.format {
            RecordFormat::Pcap(res) => {
                let i = &self.cfg.interfaces[0];
                let snap = self
                    .cfg
                    .interfaces
                    .iter()
                    .map(|i| i.snaplen)
                    .max()
                    .unwrap_or(i.snaplen);
                pcap::file_header(i.linktype, snap, res).to_vec()
            }
            RecordFormat::Pcapng => {
                let mut v = pcapng::section_header(
                    &os_name(),
                    &format!("ringcap {}", env!("CARGO_PKG_VERSION")),
                    Some(&self.cfg.comment),
                );
                for i in &self.cfg.interfaces {
                    v.extend_from_slice(&pcapng::interface_description(
                        &pcapng::InterfaceDescription {
                            linktype: i.linktype as u16,
                            snaplen: i.snaplen,
                            name: &i.name,
                            filter: i.filter.as_deref(),
                            description: None,
                        },
                    ));
                }
                v
            }
        }
    }

    fn open(&mut self, first_ts: u64) -> io::Result<()> {
        let header = self.header_bytes();
        let (out, final_path, partial_path): (Box<dyn Output>, _, _) = match &self.cfg.plan {
            OutputPlan::Discard => return Ok(()),
            OutputPlan::Stdout => (Box::new(Stream::stdout()?), None, None),
            OutputPlan::Device(p) => (Box::new(Stream::device(p)?), None, None),
            OutputPlan::Single(p) => {
                let (out, partial) = self.create(p)?;
                (out, Some(p.clone()), Some(partial))
            }
            OutputPlan::Series { dir, template } => {
                self.seq += 1;
                let time = UNIX_EPOCH + Duration::from_nanos(first_ts);
                let p = dir.join(files::expand_template(template, time, self.seq));
                let (out, partial) = self.create(&p)?;
                (out, Some(p), Some(partial))
            }
        };
        let anchor = *self.anchor_ns.get_or_insert(first_ts);
        let boundary_ns = self.cfg.rotation.seconds.filter(|s| *s > 0).map(|s| {
            let s = s * 1_000_000_000;
            let ts = first_ts.max(anchor);
            anchor + ((ts - anchor) / s + 1) * s
        });
        let mut f = OpenFile {
            out,
            final_path,
            partial_path,
            packets: 0,
            boundary_ns,
            started_ns: first_ts,
            flushed_len: 0,
        };
        f.out.write(&header)?;
        self.board
            .overhead_bytes
            .fetch_add(header.len() as u64, Ordering::Relaxed);
        if let Ok(mut c) = self.shared.current.lock() {
            *c = f.final_path.as_ref().map(|p| p.display().to_string());
        }
        self.current = Some(f);
        self.last_isb = Instant::now();
        Ok(())
    }

    fn create(&self, final_path: &Path) -> io::Result<(Box<dyn Output>, PathBuf)> {
        files::check_target(final_path, self.cfg.overwrite)?;
        let partial = files::partial_path(final_path);
        let direct = self.cfg.mode != WriteMode::Buffered;
        let file = match files::create_exclusive(&partial, self.cfg.file_mode, direct) {
            Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                // The filesystem has no O_DIRECT (tmpfs): fall back, say so once.
                self.log(format!(
                    "{}: no O_DIRECT on this filesystem; writing buffered",
                    partial.display()
                ));
                let f = files::create_exclusive(&partial, self.cfg.file_mode, false)?;
                return Ok((Box::new(BufferedFile::new(f)), partial));
            }
            r => r.map_err(|e| {
                io::Error::new(e.kind(), format!("creating {}: {e}", partial.display()))
            })?,
        };
        if let Some((uid, gid)) = self.cfg.owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
        }
        let mut out: Box<dyn Output> = match self.cfg.mode {
            WriteMode::Buffered => Box::new(BufferedFile::new(file)),
            WriteMode::Direct => Box::new(DirectFile::new(file)),
            WriteMode::Uring => match file.try_clone().and_then(DirectFile::with_uring) {
                Ok(d) => Box::new(d),
                Err(e) => {
                    self.log(format!(
                        "{}: io_uring is not available ({e}); writing as --write-mode direct does",
                        partial.display()
                    ));
                    Box::new(DirectFile::new(file))
                }
            },
        };
        if let Some(f) = &self.fixed {
            out.use_fixed(f.clone());
        }
        Ok((out, partial))
    }

    fn write_isbs(&mut self) -> io::Result<()> {
        let Some(started_ns) = self.current.as_ref().map(|f| f.started_ns) else {
            return Ok(());
        };
        let now = now_ns();
        let mut bytes = Vec::new();
        for (i, iface) in self.cfg.interfaces.iter().enumerate() {
            let Some(entry) = iface.stats else {
                continue;
            };
            let c = self.board.interface(entry);
            bytes.extend_from_slice(&pcapng::interface_statistics(
                &pcapng::InterfaceStatistics {
                    interface_id: i as u32,
                    ts_ns: now,
                    starttime_ns: Some(started_ns),
                    endtime_ns: Some(now),
                    ifrecv: Some(c.packets_seen_by_interface),
                    ifdrop: Some(c.packets_dropped_by_interface),
                    filteraccept: Some(c.packets_filter_accepted),
                    osdrop: Some(c.packets_dropped_ring),
                    usrdeliv: Some(c.packets_delivered),
                    comment: Some(format!(
                        "written {} dropped_writer {} sampled_out {}",
                        c.packets_written, c.packets_dropped_writer, c.packets_sampled_out
                    )),
                },
            ));
        }
        self.with_room(|f| {
            let before = f.out.len();
            f.out.write(&bytes).inspect_err(|_| {
                let _ = f.out.truncate(before);
            })
        })?;
        self.board
            .overhead_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Completes the current file: statistics, sync, rename, post-rotate,
    /// retention. The file is published valid even when this fails: whatever
    /// did not reach it is cut at its last complete record first.
    fn close(&mut self) -> io::Result<()> {
        let mut result = Ok(());
        if self.cfg.format == RecordFormat::Pcapng && self.current.is_some() {
            result = self.write_isbs();
        }
        let finished = self.with_room(|f| f.out.finish());
        if result.is_ok() {
            result = finished;
        }
        let Some(f) = self.current.take() else {
            return result;
        };
        drop(f.out);
        let (Some(partial), Some(final_path)) = (f.partial_path, f.final_path) else {
            return result;
        };
        if result.is_err() {
            if let Err(e) = ringcap_format::repair::repair(&partial) {
                self.log(format!(
                    "could not cut {} at its last complete record: {e}",
                    partial.display()
                ));
            }
        }
        std::fs::rename(&partial, &final_path)?;
        let dir = final_path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        if let Ok(mut c) = self.shared.completed.lock() {
            c.push(final_path.clone());
        }
        self.notify();
        if let Some(cmd) = &self.cfg.post_rotate {
            run_post_rotate(cmd, &final_path);
        }
        if let OutputPlan::Series { dir, template } = &self.cfg.plan {
            for gone in files::enforce_retention(dir, template, &self.cfg.retention, 0) {
                self.log(format!("retention: deleted {}", gone.display()));
            }
        }
        result
    }
}

/// The unit of output at `bytes[p..]` in `format`, if whole: (length,
/// timestamp in ns, packets). A unit is a record (a packet if it has a
/// timestamp: a converted ring block's padding blocks are not), or with
/// `coded` a compressed block coded elsewhere (see [`Batch::coded`]).
fn unit_at(
    format: RecordFormat,
    coded: bool,
    bytes: &[u8],
    p: usize,
) -> Option<(usize, Option<u64>, u64)> {
    if !coded {
        let (len, ts) = record_at(format, bytes, p)?;
        return Some((len, ts, u64::from(ts.is_some())));
    }
    let rest = bytes.get(p..)?;
    let b = ringcap_compress::peek_block(rest, 0).ok()?;
    let ns = match format {
        RecordFormat::Pcap(ringcap_format::TsResolution::Micro) => b.first_ts * 1_000,
        _ => b.first_ts,
    };
    (b.len <= rest.len()).then_some((b.len, Some(ns), u64::from(b.records)))
}

/// Codes the pcap records `bytes[from..to]` (in `format`, which is pcap)
/// into compressed blocks appended to `out`, ending a block after every
/// `per_block` records and at the end. Returns the records coded.
pub fn compress_records(
    enc: &mut ringcap_compress::Encoder,
    format: RecordFormat,
    bytes: &[u8],
    from: usize,
    to: usize,
    per_block: usize,
    out: &mut Vec<u8>,
) -> u64 {
    let RecordFormat::Pcap(res) = format else {
        return 0;
    };
    let mut p = from;
    let mut n = 0u64;
    while p + pcap::RECORD_HEADER_LEN <= to {
        let h = &bytes[p..p + pcap::RECORD_HEADER_LEN];
        let word = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let (secs, frac, caplen, wire) =
            (word(0) as u64, word(4) as u64, word(8) as usize, word(12));
        let ts = match res {
            ringcap_format::TsResolution::Micro => secs * 1_000_000 + frac,
            ringcap_format::TsResolution::Nano => secs * 1_000_000_000 + frac,
        };
        let start = p + pcap::RECORD_HEADER_LEN;
        let Some(data) = bytes
            .get(start..start + caplen)
            .filter(|_| start + caplen <= to)
        else {
            break;
        };
        n += 1;
        if enc.push(ts, wire, data) || (n as usize).is_multiple_of(per_block) {
            enc.finish_block(out);
        }
        p = start + caplen;
    }
    enc.finish_block(out);
    n
}

/// Timestamp of the first packet (EPB) at or after `off` in pcapng blocks.
fn first_packet_ts(bytes: &[u8], mut off: usize) -> Option<u64> {
    while let Some((len, ts)) = record_at(RecordFormat::Pcapng, bytes, off) {
        if ts.is_some() {
            return ts;
        }
        off += len;
    }
    None
}

/// ENOSPC or EDQUOT.
fn is_disk_full(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// With `-Z`, files are created and renamed after privileges are dropped
/// (tcpdump's -Z breaks rotation this way): refuse up front a directory the
/// user cannot write to.
fn check_writable_by(dir: &Path, uid: u32, gid: u32) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir)?;
    let mode = m.mode();
    let ok = (m.uid() == uid && mode & 0o300 == 0o300)
        || (m.gid() == gid && mode & 0o030 == 0o030)
        || mode & 0o003 == 0o003;
    if ok {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} is not writable by uid {uid}, which -Z switches to before files are renamed and rotated: make it writable (chown {uid}:{gid} {}) or name a directory that does not exist yet (ringcap then creates it for that user)",
            dir.display(),
            dir.display()
        ),
    ))
}

fn display(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "standard output".into())
}

fn os_name() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("Linux {}", release.trim())
}

/// Runs `cmd FILE` through the shell in the background; a thread reaps it so
/// capture never waits for it.
fn run_post_rotate(cmd: &str, file: &Path) {
    let child = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{cmd} \"$1\""))
        .arg("ringcap-post-rotate")
        .arg(file)
        .stdin(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = child {
        std::thread::spawn(move || {
            let _ = child.wait();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn empty_leftover_partial_is_removed_and_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A capture killed before its first write: an empty partial file.
        let empty = files::partial_path(&d.join("x-000001.pcap"));
        fs::write(&empty, b"").unwrap();
        // A partial file of ringcap's naming that is not a capture file.
        let garbage = files::partial_path(&d.join("x-000002.pcap"));
        fs::write(&garbage, b"not a capture file at all").unwrap();
        // Empty files not of ringcap's partial naming.
        let unrelated = [
            ".x-000003.pcap",
            "x-000004.pcap",
            ".ringcap-partial",
            "notes",
        ];
        for name in unrelated {
            fs::write(d.join(name), b"").unwrap();
        }
        let log = recover_leftovers(d);
        assert!(!empty.exists(), "empty partial not removed; log: {log:?}");
        assert!(garbage.exists(), "garbage partial touched; log: {log:?}");
        assert_eq!(
            fs::read(&garbage).unwrap(),
            b"not a capture file at all",
            "garbage partial changed"
        );
        for name in unrelated {
            let p = d.join(name);
            assert!(p.exists(), "{name} removed");
            assert_eq!(fs::metadata(&p).unwrap().len(), 0, "{name} changed");
        }
        // Nothing published for either partial file.
        assert!(!d.join("x-000001.pcap").exists());
        assert!(!d.join("x-000002.pcap").exists());
        // Said so, as the other recovery messages do; the garbage is left alone.
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(
            log.iter()
                .any(|m| m.starts_with("removed ") && m.contains(&*empty.to_string_lossy())),
            "{log:?}"
        );
        assert!(
            log.iter().any(|m| m.starts_with("left ")
                && m.contains(&*garbage.to_string_lossy())
                && m.contains("not a capture file")),
            "{log:?}"
        );
        // A second start finds nothing new to say about the removed file.
        let log = recover_leftovers(d);
        assert_eq!(log.len(), 1, "{log:?}");
        assert!(garbage.exists());
    }

    #[test]
    fn empty_partial_being_written_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let partial = files::partial_path(&dir.path().join("x-000001.pcap"));
        // A running capture that has created the file and holds its lock.
        let writing = files::create_exclusive(&partial, 0o600, false).unwrap();
        let log = recover_leftovers(dir.path());
        assert!(partial.exists());
        assert!(log.is_empty(), "{log:?}");
        drop(writing);
        // Once that capture is gone, the file is a leftover.
        recover_leftovers(dir.path());
        assert!(!partial.exists());
    }

    #[test]
    fn partial_symlink_to_an_empty_file_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::write(&target, b"").unwrap();
        let partial = files::partial_path(&dir.path().join("x-000001.pcap"));
        std::os::unix::fs::symlink(&target, &partial).unwrap();
        let log = recover_leftovers(dir.path());
        assert!(fs::symlink_metadata(&partial).is_ok());
        assert!(target.exists());
        assert_eq!(log.len(), 1, "{log:?}");
        assert_eq!(
            files::remove_if_empty_partial(&partial).unwrap(),
            files::EmptyPartial::Kept
        );
    }
}
