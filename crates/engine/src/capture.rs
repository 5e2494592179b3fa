//! One capture: [`Capture::start`] checks a [`CaptureSpec`], opens everything
//! (so every error shows before a packet is read), starts the threads and
//! hands back a handle. The handle stops this capture only, snapshots its
//! counters, streams its [`Event`]s and joins it. Many captures may run in
//! one process, on the same interfaces or not.
//!
//! Threads: one per (interface, fanout member) for a live capture, one for
//! all the files of an offline capture; the sink's writer thread; and a
//! supervisor that enforces the duration, watches the writer, turns the
//! writer's log into events and, at the end, joins everything.
//!
//! Nothing wakes on a timer while a capture is idle: capture threads wait
//! for their ring and the capture's [`Stop`] bell, the writer for batches
//! (and for a flush only when it wrote something), the supervisor for the
//! stop bell, the writer's bell (log, failure, completed file), the
//! rotation bell and the end of `duration`. A capture thread that ends, for
//! whatever reason, rings the stop bell on its way out.

use crate::error::EngineError;
use crate::event::Event;
use crate::interfaces::Lease;
use crate::source::file::{self, FileSource};
use crate::source::hook::HookSource;
use crate::source::live::LiveSource;
use crate::source::SourceError;
use crate::spec::{CaptureSpec, LiveSpec, SinkSpec, SourceSpec, ZeroCopy};
use crate::stages::Stages;
use crate::stop::Stop;
use crate::worker::{InPlaceWorker, Worker};
use crossbeam_channel::{Receiver, Sender};
use ringcap_hook::{Hook, HookCapture, HookError};
use ringcap_sink::bell::wait_readable;
use ringcap_sink::writer::Shared;
use ringcap_sink::{
    Batch, Bell, Encoder, RecordFormat, RingWrite, SinkInterface, Writer, WriterConfig,
};
use ringcap_source::socket::CountingSocket;
use ringcap_source::{
    CaptureSocket, CounterFiles, Fanout, Interface, RingGeometry, SocketOptions, TimestampSource,
};
use ringcap_stages::filter::Target;
use ringcap_stages::{CheckedProgram, Program, Snap, UserSampler};
use ringcap_stats::{Board, Counters};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes per ring block (rings smaller than 32 MiB get smaller blocks, so
/// they still have eight; see `RingGeometry::with_total`). Measured on the
/// testbed (4 M x 64-byte frames at ~0.5 Mpps, snaplen 64, to disk, CPU of
/// the capture process per packet):
/// 128 KiB 170 ns, 1 MiB 85-110 ns, 4 MiB 67-72 ns, 16 MiB 67-70 ns. Larger
/// blocks mean fewer hand-overs and wake-ups; beyond 4 MiB nothing is gained
/// and a ring of a few blocks holds packets back longer.
pub const BLOCK_SIZE: u32 = 4 << 20;
/// Block retire timeout: the longest a packet waits in a partly filled block
/// at low rates (at high rates blocks fill long before it).
pub const RETIRE_TIMEOUT_MS: u32 = 50;
/// Block retire timeout of a capture whose blocks are written in place
/// (zero copy), at most the flush interval: each retired block is one
/// write (and one hand-over to the writer and back), so half-full blocks
/// retired early cost that much more per packet (64-byte packets at 260
/// kpps: 2.1 MB blocks every 50 ms, 4 MiB ones every 110 ms), and at low
/// rates each is padded to a page in the file. It is the flush interval
/// when that is shorter (but not below [`RETIRE_TIMEOUT_MS`]), so packets
/// still reach the disk within it, as copied ones do.
pub const IN_PLACE_RETIRE_TIMEOUT_MS: u32 = 200;
/// Size of one output batch.
pub const BATCH_SIZE: usize = 4 << 20;
/// Output buffer per input file: reading a file waits for free buffers
/// instead of dropping, so a few batches are enough, and a big pool only
/// costs time to set up.
const FILE_BUFFER_BYTES: u64 = 32 << 20;
/// How long the supervisor waits before it looks again when it cannot
/// wait for its bells (poll failed: never seen).
const SUPERVISE_FALLBACK: Duration = Duration::from_millis(250);

/// What a started capture is doing, for a front end to show.
#[derive(Debug, Clone)]
pub struct Started {
    /// Interface names, or input file paths.
    pub inputs: Vec<String>,
    /// Link type of the first input.
    pub linktype: u32,
    /// Truncation.
    pub snap: Snap,
    /// Threads per interface (1 for files).
    pub threads: u32,
    /// Kernel ring bytes per interface (0 for files).
    pub ring_bytes: u64,
    /// True for interfaces, false for files.
    pub live: bool,
}

/// How a capture ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Counters per input, and their sum.
    pub per_input: Vec<(String, Counters)>,
    /// Sum of all inputs.
    pub total: Counters,
    /// Seconds from start to end.
    pub seconds: f64,
    /// Why it ended early, if it failed: a write or socket failure
    /// (`Runtime`), or a malformed input file (`Usage`; the packets before the
    /// damage were written).
    pub error: Option<EngineError>,
}

struct LiveState {
    /// Each interface's statistics files (read at every status line).
    counter_files: Vec<CounterFiles>,
    counting: Mutex<Vec<Option<CountingSocket>>>,
}

impl LiveState {
    fn refresh(&self, board: &Board) {
        for (i, files) in self.counter_files.iter().enumerate() {
            let c = files.read();
            board.set_interface_now(i, c.packets, c.dropped);
        }
        if let Ok(counting) = self.counting.lock() {
            for (i, c) in counting.iter().enumerate() {
                if let Some(Ok(n)) = c.as_ref().map(|c| c.accepted()) {
                    board.set_filter_count(i, n);
                }
            }
        }
    }
}

struct Inner {
    board: Arc<Board>,
    stop: Stop,
    /// Rung by the writer (log, failure, completed file).
    attention: Arc<Bell>,
    /// Rung to start a new file (SIGHUP).
    rotate: Bell,
    writer: Arc<Shared>,
    live: Option<LiveState>,
}

/// The bells a capture's parts share, made before anything starts.
struct Bells {
    stop: Stop,
    attention: Arc<Bell>,
}

/// A running capture.
pub struct Capture {
    inner: Arc<Inner>,
    events: Receiver<Event>,
    started: Started,
    began: Instant,
    supervisor: Option<JoinHandle<Option<EngineError>>>,
}

fn sock_filter(p: &Program) -> Vec<libc::sock_filter> {
    p.instructions
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// What the writer takes besides batches: ring blocks written in place, and
/// the bell it rings for the supervisor.
#[derive(Default)]
struct WriterLinks {
    rings: Option<Receiver<RingWrite>>,
    notify: Option<Arc<Bell>>,
}

/// The writer and what the producers need to reach it.
struct SinkSetup {
    writer: ringcap_sink::WriterHandle,
    full: Sender<Batch>,
    pools: Vec<Receiver<Batch>>,
}

fn start_sink(
    sink: &SinkSpec,
    interfaces: Vec<SinkInterface>,
    producers: &[usize],
    buffer_bytes: u64,
    board: Arc<Board>,
    live: bool,
    links: WriterLinks,
) -> Result<SinkSetup, EngineError> {
    let WriterLinks { rings, notify } = links;
    let per_pool = ((buffer_bytes / BATCH_SIZE as u64) as usize).max(2);
    let mut senders = Vec::new();
    let mut pools = Vec::new();
    for (pool, entry) in producers.iter().enumerate() {
        let (tx, rx) = crossbeam_channel::unbounded();
        for _ in 0..per_pool {
            let _ = tx.send(Batch::new(BATCH_SIZE, *entry, pool));
        }
        senders.push(tx);
        pools.push(rx);
    }
    let (full, full_rx) = crossbeam_channel::unbounded();
    let cfg = WriterConfig {
        plan: sink.output.clone(),
        format: sink.format,
        interfaces,
        comment: sink.comment.clone(),
        rotation: sink.rotation,
        retention: sink.retention,
        mode: sink.write_mode,
        flush_interval: sink.flush_interval,
        isb_interval: Duration::from_secs(60).min(
            sink.rotation
                .seconds
                .map(Duration::from_secs)
                .unwrap_or(Duration::MAX),
        ),
        post_rotate: sink.post_rotate.clone(),
        overwrite: sink.overwrite,
        file_mode: sink.file_mode,
        owner: sink.owner,
        wall_clock: live,
        compress: sink.compress,
        notify,
    };
    let writer = Writer::spawn_with_rings(cfg, board, full_rx, senders, rings).map_err(|e| {
        let msg = format!("cannot write the output: {e}");
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            EngineError::usage(msg)
        } else {
            EngineError::runtime(msg)
        }
    })?;
    Ok(SinkSetup {
        writer,
        full,
        pools,
    })
}

/// Why the ring blocks of a live capture cannot be written to the file in
/// place as pcapng (`--zero-copy`), or `None` when they can: every packet
/// must go out as the kernel left it in the ring (filtered, sampled and cut
/// there), to a pcapng file written with O_DIRECT.
pub fn in_place_blocker(spec: &CaptureSpec) -> Option<&'static str> {
    let sink = &spec.sink;
    match &spec.source {
        SourceSpec::Files(_) => return Some("packets are read from files, not a ring"),
        SourceSpec::Live(l) if l.hook != Hook::Packet => {
            return Some("--hook xdp and netfilter have no TPACKET_V3 ring")
        }
        SourceSpec::Live(_) => {}
    }
    if spec.stream.is_some() {
        return Some("packets go to the front end's own sink");
    }
    if sink.format != RecordFormat::Pcapng || sink.compress {
        return Some("only pcapng files can be written from ring blocks (use --format pcapng)");
    }
    if !matches!(
        sink.output,
        ringcap_sink::OutputPlan::Single(_) | ringcap_sink::OutputPlan::Series { .. }
    ) {
        return Some("the output is not a file");
    }
    if sink.write_mode == ringcap_sink::WriteMode::Buffered {
        return Some("--write-mode buffered");
    }
    if matches!(spec.snap, Snap::Headers { .. }) {
        return Some("-s headers cuts each packet in user space");
    }
    if !UserSampler::live(spec.sampling).keeps_all() {
        return Some("this sampling runs in user space");
    }
    if !spec.transforms.is_empty() {
        return Some("masks and anonymization rewrite packets");
    }
    if spec.count.is_some() {
        return Some("-c stops in the middle of a ring block");
    }
    if spec.observer.is_some() {
        return Some("flow records (or another observer) look at each packet in user space");
    }
    None
}

/// The observer of capture thread `thread` on interface `interface`, if
/// the spec has an observer stage.
fn observer_for(
    spec: &CaptureSpec,
    live: bool,
    interface: usize,
    thread: usize,
) -> Option<Box<dyn crate::stages::Observer>> {
    spec.observer.as_ref().map(|f| {
        f(crate::stages::ObserverContext {
            live,
            interface,
            thread,
        })
    })
}

/// Opens each named interface; a name given twice is refused.
fn open_interfaces(names: &[String]) -> Result<Vec<Interface>, EngineError> {
    let mut interfaces: Vec<Interface> = Vec::new();
    for name in names {
        if interfaces.iter().any(|i| &i.name == name) {
            return Err(EngineError::usage(format!(
                "interface '{name}' given twice"
            )));
        }
        interfaces.push(Interface::open(name)?);
    }
    Ok(interfaces)
}

/// A pcap file holds one link type: refuses live interfaces of several.
fn one_linktype_for_pcap(spec: &CaptureSpec, linktypes: &[u32]) -> Result<(), EngineError> {
    if matches!(spec.sink.format, RecordFormat::Pcap(_))
        && linktypes.iter().any(|l| *l != linktypes[0])
    {
        return Err(EngineError::usage("these interfaces have different link types, which one pcap file cannot hold: use --format pcapng"));
    }
    Ok(())
}

/// The counters board of a live capture: `threads` capture threads per
/// interface.
fn board_of(interfaces: &[Interface], threads: usize) -> Arc<Board> {
    Arc::new(Board::new(
        &interfaces
            .iter()
            .map(|i| (i.name.clone(), threads))
            .collect::<Vec<_>>(),
    ))
}

/// The output's interfaces of a live capture (one per capture interface,
/// each with its own statistics).
fn sink_interfaces(
    spec: &CaptureSpec,
    interfaces: &[Interface],
    linktypes: &[u32],
) -> Vec<SinkInterface> {
    interfaces
        .iter()
        .zip(linktypes)
        .enumerate()
        .map(|(n, (i, lt))| SinkInterface {
            name: i.name.clone(),
            linktype: *lt,
            snaplen: spec.snap.snaplen(),
            filter: filter_text(spec),
            stats: Some(n),
        })
        .collect()
}

/// The capture's filter program for `linktype`: its own filter, ANDed at the
/// instruction level with the framework filter when there is one.
fn compile(spec: &CaptureSpec, linktype: u32, target: Target<'_>) -> Result<Program, EngineError> {
    let one = |expr: &str| {
        ringcap_stages::compile(expr, linktype as i32, spec.snap.kernel_snaplen(), target)
            .map_err(|e| EngineError::usage(e.to_string()))
    };
    let own = one(&spec.filter)?;
    if spec.framework_filter.trim().is_empty() {
        return Ok(own);
    }
    let framework = one(&spec.framework_filter)?;
    Program::and(&framework, &own).map_err(EngineError::usage)
}

/// The filter text recorded in output files.
fn filter_text(spec: &CaptureSpec) -> Option<String> {
    let t = ringcap_stages::filter::combined_text(&spec.framework_filter, &spec.filter);
    (!t.is_empty()).then_some(t)
}

/// Requests the capture's stop when dropped: a capture thread that ends
/// (done, failed or panicking) stops the others and wakes the supervisor.
struct StopOnExit(Stop);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        self.0.request();
    }
}

fn spawn<F: FnOnce() -> Result<(), SourceError> + Send + 'static>(
    name: String,
    stop: &Stop,
    f: F,
) -> Result<JoinHandle<Result<(), SourceError>>, EngineError> {
    let on_exit = StopOnExit(stop.clone());
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let _on_exit = on_exit;
            f()
        })
        .map_err(|e| EngineError::runtime(format!("starting a capture thread: {e}")))
}

/// Threads of a capture, plus what to give back when they end.
struct Running {
    threads: Vec<JoinHandle<Result<(), SourceError>>>,
    leases: Vec<Lease>,
    /// The sink's writer, and the encoders' way to it (dropped once the
    /// capture threads are joined, so that the writer sees the end).
    writer: ringcap_sink::WriterHandle,
    full: Sender<Batch>,
}

impl Capture {
    /// Checks `spec`, opens its inputs and outputs, and starts capturing.
    pub fn start(spec: CaptureSpec) -> Result<Capture, EngineError> {
        let (tx, events) = crossbeam_channel::unbounded();
        let bell = |e: std::io::Error| EngineError::runtime(format!("making a pipe: {e}"));
        let bells = Bells {
            stop: Stop::new().map_err(bell)?,
            attention: Arc::new(Bell::new().map_err(bell)?),
        };
        let rotate = Bell::new().map_err(bell)?;
        let budget = spec.count.map(|c| Arc::new(AtomicU64::new(c)));
        if spec.sink.zero_copy == ZeroCopy::On {
            if let Some(why) = in_place_blocker(&spec) {
                return Err(EngineError::usage(format!(
                    "--zero-copy on: ring blocks cannot be written in place here: {why}"
                )));
            }
        }
        let (parts, started, running) = match &spec.source {
            SourceSpec::Live(live) => start_live(&spec, live, &tx, &bells, &budget)?,
            SourceSpec::Files(paths) => start_files(&spec, paths, &bells, &budget)?,
        };
        let inner = Arc::new(Inner {
            board: parts.board,
            stop: bells.stop,
            attention: bells.attention,
            rotate,
            writer: parts.writer,
            live: parts.live,
        });
        let began = Instant::now();
        let sup = {
            let inner = inner.clone();
            let duration = spec.duration;
            std::thread::Builder::new()
                .name("ringcap-supervisor".into())
                .spawn(move || supervise(inner, running, duration, tx, began))
                .map_err(|e| EngineError::runtime(format!("starting a capture thread: {e}")))?
        };
        Ok(Capture {
            inner,
            events,
            started,
            began,
            supervisor: Some(sup),
        })
    }

    /// What the capture is doing.
    pub fn started(&self) -> &Started {
        &self.started
    }

    /// Stops this capture (others in the process go on): threads drain what
    /// is already on its way, the sink writes it, then the capture ends.
    pub fn stop(&self) {
        self.inner.stop.request();
    }

    /// The flag [`stop`](Self::stop) sets, for a signal handler to set
    /// directly (capture threads look at it between ring blocks). A thread
    /// waiting for packets sees it only when woken: register
    /// [`stop_fd`](Self::stop_fd) for the signal too.
    pub fn stop_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.inner.stop.flag()
    }

    /// A descriptor that stops the capture, as [`stop`](Self::stop) does,
    /// when a byte is written to it: async-signal-safe, for a signal handler
    /// (`signal_hook::low_level::pipe::register`), which then owns it.
    pub fn stop_fd(&self) -> std::io::Result<OwnedFd> {
        self.inner.stop.ringer()
    }

    /// A descriptor that starts a new file, as [`rotate_now`](Self::rotate_now)
    /// does, when a byte is written to it (for a SIGHUP handler; see
    /// [`stop_fd`](Self::stop_fd)).
    pub fn rotate_fd(&self) -> std::io::Result<OwnedFd> {
        self.inner.rotate.ringer()
    }

    /// True once the capture has ended (by itself, a stop or a failure).
    pub fn is_finished(&self) -> bool {
        self.supervisor.as_ref().is_none_or(|s| s.is_finished())
    }

    /// Starts a new output file now (a rotating series).
    pub fn rotate_now(&self) {
        self.inner.writer.request_rotation();
    }

    /// The file being written, if any.
    pub fn current_file(&self) -> Option<String> {
        self.inner
            .writer
            .current
            .lock()
            .ok()
            .and_then(|c| c.clone())
    }

    /// Counters now, per input and in total.
    pub fn counters(&self) -> (Vec<(String, Counters)>, Counters) {
        if let Some(live) = &self.inner.live {
            live.refresh(&self.inner.board);
        }
        self.inner.board.snapshot()
    }

    /// The capture's events, in order; [`Event::Finished`] is the last.
    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Waits for the capture to end and says how it went.
    pub fn join(mut self) -> Outcome {
        let error = match self.supervisor.take().map(|s| s.join()) {
            Some(Ok(e)) => e,
            _ => Some(EngineError::runtime("the capture's supervisor panicked")),
        };
        let (per_input, total) = self.inner.board.snapshot();
        Outcome {
            per_input,
            total,
            seconds: self.began.elapsed().as_secs_f64(),
            error,
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // A capture dropped without join still ends cleanly.
        if let Some(s) = self.supervisor.take() {
            self.inner.stop.request();
            let _ = s.join();
        }
    }
}

/// What a started capture's [`Inner`] is made of, besides the bells.
struct Made {
    board: Arc<Board>,
    writer: Arc<Shared>,
    live: Option<LiveState>,
}

type Parts = (Made, Started, Running);

fn start_live(
    spec: &CaptureSpec,
    live: &LiveSpec,
    events: &Sender<Event>,
    bells: &Bells,
    budget: &Option<Arc<AtomicU64>>,
) -> Result<Parts, EngineError> {
    let stop = &bells.stop;
    if live.interfaces.is_empty() {
        return Err(EngineError::usage(
            "give an interface to capture on (or capture files to read)",
        ));
    }
    if !(1..=64).contains(&live.threads) {
        return Err(EngineError::usage(format!(
            "{} threads per interface: must be from 1 to 64",
            live.threads
        )));
    }
    if live.hook != Hook::Packet {
        return start_hook(spec, live, events, bells, budget);
    }
    let interfaces = open_interfaces(&live.interfaces)?;
    let linktypes: Vec<u32> = interfaces
        .iter()
        .map(|i| i.linktype().unwrap_or(1))
        .collect();
    one_linktype_for_pcap(spec, &linktypes)?;

    // Kernel programs: filter + snap length + sampler; a filter-only program
    // for counting when the sampler runs in the kernel.
    let mut programs = Vec::new();
    let mut counting_programs = Vec::new();
    for (iface, lt) in interfaces.iter().zip(&linktypes) {
        let base = compile(
            spec,
            *lt,
            Target::Kernel {
                interface: &iface.name,
            },
        )?;
        let mut p = base.clone();
        p.add_sampler(spec.sampling).map_err(EngineError::usage)?;
        let kernel_sampling = p != base;
        programs.push(p);
        counting_programs.push(kernel_sampling.then_some(base));
    }

    let threads = live.threads as usize;
    let board = board_of(&interfaces, threads);
    let producers: Vec<usize> = (0..interfaces.len())
        .flat_map(|i| std::iter::repeat_n(i, threads))
        .collect();
    let sink_ifaces = sink_interfaces(spec, &interfaces, &linktypes);
    let in_place = match (spec.sink.zero_copy, in_place_blocker(spec)) {
        (ZeroCopy::Off, _) => false,
        (ZeroCopy::On, Some(why)) => {
            return Err(EngineError::usage(format!(
                "--zero-copy on: ring blocks cannot be written in place here: {why}"
            )))
        }
        (ZeroCopy::On, None) => true,
        // Cut captures too: at 64 B snap 64 writing the blocks in place
        // costs less CPU than copying (bench/README.md, "Zero copy"),
        // though each packet keeps the kernel's header room as padding.
        (ZeroCopy::Auto, blocker) => blocker.is_none(),
    };
    let (ring_tx, ring_rx) = if in_place {
        let (tx, rx) = crossbeam_channel::unbounded();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    // With the front end's own sinks the writer has nothing to write (and
    // no buffers); it stays for the shape of the capture.
    let stream = spec.stream.clone();
    let SinkSetup {
        writer,
        full,
        pools,
    } = if stream.is_some() {
        let mut quiet = spec.clone();
        quiet.sink.output = ringcap_sink::OutputPlan::Discard;
        start_sink(
            &quiet.sink,
            sink_ifaces,
            &[],
            0,
            board.clone(),
            true,
            WriterLinks {
                rings: None,
                notify: Some(bells.attention.clone()),
            },
        )?
    } else {
        start_sink(
            &spec.sink,
            sink_ifaces,
            if in_place { &[] } else { &producers },
            spec.sink.writer_buffer_bytes,
            board.clone(),
            true,
            WriterLinks {
                rings: ring_rx,
                notify: Some(bells.attention.clone()),
            },
        )?
    };
    let mut pools = pools.into_iter();

    let mut leases = Vec::new();
    for iface in &interfaces {
        leases.push(Lease::acquire(
            &iface.name,
            live.fix_offloads,
            live.tstamp == TimestampSource::Adapter,
            events,
        )?);
    }

    // Sockets: counting sockets first (so the filter-only count is never
    // behind), then the capture sockets of each interface's fanout group.
    let mut counting = Vec::new();
    for (iface, prog) in interfaces.iter().zip(&counting_programs) {
        counting.push(match prog {
            Some(p) => Some(CountingSocket::open(iface, &sock_filter(p))?),
            None => None,
        });
    }
    let retire_ms = if in_place {
        let flush_ms = spec
            .sink
            .flush_interval
            .as_millis()
            .min(u128::from(u32::MAX)) as u32;
        flush_ms.clamp(RETIRE_TIMEOUT_MS, IN_PLACE_RETIRE_TIMEOUT_MS)
    } else {
        RETIRE_TIMEOUT_MS
    };
    let geometry = RingGeometry::with_total(
        live.ring_bytes / u64::from(live.threads),
        BLOCK_SIZE,
        retire_ms,
    );
    let mut sockets = Vec::new();
    for (i, iface) in interfaces.iter().enumerate() {
        // One thread alone needs no group: the kernel would hash every
        // packet's flow to pick the only member.
        let mut fanout = if threads > 1 {
            Fanout::New
        } else {
            Fanout::Off
        };
        for _ in 0..threads {
            let s = CaptureSocket::open(
                iface,
                &SocketOptions {
                    program: sock_filter(&programs[i]),
                    geometry,
                    fanout,
                    promiscuous: live.promiscuous,
                    timestamps: live.tstamp,
                    reserve: if in_place {
                        ringcap_source::inplace::RESERVE
                    } else {
                        0
                    },
                },
            )?;
            if let Some(id) = s.fanout_id() {
                fanout = Fanout::Join(id);
            }
            sockets.push((i, s));
        }
    }
    for (i, iface) in interfaces.iter().enumerate() {
        let c = iface.counters();
        board.set_interface_base(i, c.packets, c.dropped);
    }
    if in_place && stream.is_none() && spec.sink.write_mode != ringcap_sink::WriteMode::Buffered {
        // Blocks go to the disk from the rings' memory registered once,
        // not pinned page by page at every write (pwrite remains where
        // io_uring cannot register it). Done now, before privileges are
        // dropped: as root the pages count against no memlock limit.
        let memory = sockets.iter_mut().map(|(_, s)| s.ring().memory()).collect();
        if let Ok(f) = ringcap_sink::FixedWrites::register(memory) {
            writer.offer_fixed(f);
        }
    }

    let mut handles = Vec::new();
    let mut per_iface_thread = vec![0usize; interfaces.len()];
    let retire = Duration::from_millis(u64::from(retire_ms));
    for (producer, (i, socket)) in sockets.into_iter().enumerate() {
        let t = per_iface_thread[i];
        per_iface_thread[i] += 1;
        let stages = Stages {
            filters: None,
            sampler: UserSampler::live(spec.sampling),
            snap: spec.snap,
            max_frame_len: interfaces[i].max_frame_len(),
            transforms: spec.transforms.iter().map(|f| f()).collect(),
            linktypes: vec![linktypes[i]],
            budget: budget.clone(),
            interface_base: None,
            current_interface: 0,
        };
        let source = LiveSource::new(socket, retire);
        let name = format!("ringcap-{}-{t}", interfaces[i].name);
        let (board, stop) = (board.clone(), stop.clone());
        let flush_interval = spec.sink.flush_interval;
        let handle = match (&stream, &ring_tx) {
            (None, Some(rings)) => {
                let worker = InPlaceWorker {
                    source,
                    opts: ringcap_source::inplace::InPlace {
                        interface_id: i as u32,
                        snaplen: spec.snap.snaplen(),
                        max_frame_len: interfaces[i].max_frame_len(),
                    },
                    rings: rings.clone(),
                    board,
                    slot: (i, t),
                    stop,
                };
                drop(stages);
                spawn(name, &bells.stop, move || worker.run())?
            }
            (Some(factory), _) => {
                let worker = Worker {
                    source,
                    stages,
                    encoder: factory.make(i, t, linktypes[i]),
                    board,
                    slot: (i, t),
                    stop,
                    flush_interval,
                    observer: observer_for(spec, true, i, t),
                };
                spawn(name, &bells.stop, move || worker.run())?
            }
            (None, None) => {
                let free = pools.next().ok_or_else(|| {
                    EngineError::runtime("no output buffers for a capture thread")
                })?;
                let mut encoder = Encoder::new(spec.sink.format, i as u32, free, full.clone());
                encoder.set_placement(writer.placement.clone(), producer);
                let worker = Worker {
                    source,
                    stages,
                    encoder,
                    board,
                    slot: (i, t),
                    stop,
                    flush_interval,
                    observer: observer_for(spec, true, i, t),
                };
                spawn(name, &bells.stop, move || worker.run())?
            }
        };
        handles.push(handle);
    }
    let started = Started {
        inputs: interfaces.iter().map(|i| i.name.clone()).collect(),
        linktype: linktypes[0],
        snap: spec.snap,
        threads: live.threads,
        ring_bytes: (geometry.total_bytes() * threads) as u64,
        live: true,
    };
    let inner = Made {
        board,
        writer: writer.shared.clone(),
        live: Some(LiveState {
            counter_files: interfaces.iter().map(Interface::counter_files).collect(),
            counting: Mutex::new(counting),
        }),
    };
    Ok((
        inner,
        started,
        Running {
            threads: handles,
            leases,
            writer,
            full,
        },
    ))
}

impl From<HookError> for EngineError {
    fn from(e: HookError) -> EngineError {
        match e.kind {
            ringcap_hook::ErrorKind::System => EngineError::system(e.message),
            ringcap_hook::ErrorKind::Runtime => EngineError::runtime(e.message),
        }
    }
}

/// A live capture through an XDP or netfilter program (`live.hook`): one
/// program, ring buffer and capture thread per interface; the filter and
/// sampling run in the thread's stages (see `source::hook`).
fn start_hook(
    spec: &CaptureSpec,
    live: &LiveSpec,
    events: &Sender<Event>,
    bells: &Bells,
    budget: &Option<Arc<AtomicU64>>,
) -> Result<Parts, EngineError> {
    let stop = &bells.stop;
    let hook = live.hook;
    if live.threads != 1 {
        return Err(EngineError::usage(format!(
            "--hook {hook} reads one ring buffer per interface with one thread: --threads must be 1"
        )));
    }
    if live.tstamp == TimestampSource::Adapter {
        return Err(EngineError::usage(format!(
            "--hook {hook} stamps packets with the host clock in the program: --tstamp adapter needs --hook packet"
        )));
    }
    if spec.stream.is_some() {
        return Err(EngineError::usage(format!(
            "--hook {hook} writes through the capture's own sink"
        )));
    }
    let interfaces = open_interfaces(&live.interfaces)?;
    let linktypes: Vec<u32> = interfaces
        .iter()
        .map(|i| hook.linktype(i.linktype().unwrap_or(1)))
        .collect();
    one_linktype_for_pcap(spec, &linktypes)?;
    // The filter runs on the copied bytes as on a file's (VLAN tags, if
    // any, are in the bytes at these hooks).
    let mut filters = Vec::new();
    let mut copy_lens = Vec::new();
    for lt in &linktypes {
        let program = compile(spec, *lt, Target::Offline)?;
        let reach = ringcap_hook::filter_reach(program.instructions.iter().map(|i| (i.code, i.k)));
        copy_lens.push(ringcap_hook::copy_len(spec.snap.kernel_snaplen(), reach));
        filters.push(CheckedProgram::new(program).ok_or_else(|| {
            EngineError::usage("libpcap compiled a filter program it does not accept")
        })?);
    }
    let board = board_of(&interfaces, 1);
    let producers: Vec<usize> = (0..interfaces.len()).collect();
    let sink_ifaces = sink_interfaces(spec, &interfaces, &linktypes);
    let SinkSetup {
        writer,
        full,
        pools,
    } = start_sink(
        &spec.sink,
        sink_ifaces,
        &producers,
        spec.sink.writer_buffer_bytes,
        board.clone(),
        true,
        WriterLinks {
            rings: None,
            notify: Some(bells.attention.clone()),
        },
    )?;
    let mut leases = Vec::new();
    for iface in &interfaces {
        leases.push(Lease::acquire(
            &iface.name,
            live.fix_offloads,
            false,
            events,
        )?);
    }
    let mut captures = Vec::new();
    for (i, iface) in interfaces.iter().enumerate() {
        captures.push(HookCapture::open(
            hook,
            &iface.name,
            iface.index,
            copy_lens[i],
            live.ring_bytes,
        )?);
    }
    let mut handles = Vec::new();
    for (i, ((capture, filter), free)) in captures.into_iter().zip(filters).zip(pools).enumerate() {
        let stages = Stages {
            filters: Some(vec![filter]),
            sampler: UserSampler::offline(spec.sampling, 0x9e37_79b9_7f4a_7c15 ^ i as u64),
            snap: spec.snap,
            // Netfilter sees IP packets: no link-layer header.
            max_frame_len: match hook {
                Hook::Netfilter => interfaces[i].mtu,
                _ => interfaces[i].max_frame_len(),
            },
            transforms: spec.transforms.iter().map(|f| f()).collect(),
            linktypes: vec![linktypes[i]],
            budget: budget.clone(),
            interface_base: None,
            current_interface: 0,
        };
        let mut encoder = Encoder::new(spec.sink.format, i as u32, free, full.clone());
        encoder.set_placement(writer.placement.clone(), i);
        let worker = Worker {
            source: HookSource::new(capture),
            stages,
            encoder,
            board: board.clone(),
            slot: (i, 0),
            stop: stop.clone(),
            flush_interval: spec.sink.flush_interval,
            observer: observer_for(spec, true, i, 0),
        };
        let name = format!("ringcap-{hook}-{}", interfaces[i].name);
        handles.push(spawn(name, stop, move || worker.run())?);
    }
    let started = Started {
        inputs: interfaces.iter().map(|i| i.name.clone()).collect(),
        linktype: linktypes[0],
        snap: spec.snap,
        threads: 1,
        ring_bytes: u64::from(ringcap_hook::ring_size(live.ring_bytes)),
        live: true,
    };
    let inner = Made {
        board,
        writer: writer.shared.clone(),
        live: None,
    };
    Ok((
        inner,
        started,
        Running {
            threads: handles,
            leases,
            writer,
            full,
        },
    ))
}

fn start_files(
    spec: &CaptureSpec,
    paths: &[PathBuf],
    bells: &Bells,
    budget: &Option<Arc<AtomicU64>>,
) -> Result<Parts, EngineError> {
    let stop = &bells.stop;
    if paths.is_empty() {
        return Err(EngineError::usage("give capture files to read"));
    }
    if spec.stream.is_some() {
        return Err(EngineError::usage(
            "captures of files write files: a stream sink is for live captures",
        ));
    }
    // Every input's interfaces, before anything is written: each gets its
    // own output interface (pcapng) and its own compiled filter.
    let mut inputs = Vec::new();
    for path in paths {
        let ifaces = file::interfaces(path).map_err(EngineError::usage)?;
        inputs.push(ifaces);
    }
    let all_linktypes: Vec<u32> = inputs.iter().flatten().map(|i| i.linktype).collect();
    let first = all_linktypes.first().copied().unwrap_or(1);
    if matches!(spec.sink.format, RecordFormat::Pcap(_))
        && all_linktypes.iter().any(|l| *l != first)
    {
        let mut kinds: Vec<u32> = all_linktypes.clone();
        kinds.sort_unstable();
        kinds.dedup();
        return Err(EngineError::usage(format!(
            "the input has packets of {} link types ({}), which one pcap file cannot hold: use --format pcapng",
            kinds.len(),
            kinds.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", ")
        )));
    }
    // One program per link type, shared by the interfaces that have it.
    let mut compiled: Vec<(u32, Program)> = Vec::new();
    for lt in &all_linktypes {
        if !compiled.iter().any(|(l, _)| l == lt) {
            compiled.push((*lt, compile(spec, *lt, Target::Offline)?));
        }
    }
    let program_for = |lt: u32| {
        compiled
            .iter()
            .find(|(l, _)| *l == lt)
            .map(|(_, p)| p.clone())
    };
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let board = Arc::new(Board::new(
        &names.iter().map(|n| (n.clone(), 1)).collect::<Vec<_>>(),
    ));
    let mut sink_ifaces = Vec::new();
    let mut bases = Vec::new();
    for (f, ifaces) in inputs.iter().enumerate() {
        bases.push(sink_ifaces.len() as u32);
        if ifaces.is_empty() {
            // A file with no interface (no packets): still one entry, so
            // the output describes it.
            sink_ifaces.push(SinkInterface {
                name: names[f].clone(),
                linktype: first,
                snaplen: spec.snap.snaplen(),
                filter: filter_text(spec),
                stats: Some(f),
            });
        }
        for (k, i) in ifaces.iter().enumerate() {
            let name = match (&i.name, ifaces.len()) {
                (Some(n), _) => format!("{}:{n}", names[f]),
                (None, 1) => names[f].clone(),
                (None, _) => format!("{}#{k}", names[f]),
            };
            sink_ifaces.push(SinkInterface {
                name,
                linktype: i.linktype,
                snaplen: spec.snap.snaplen(),
                filter: filter_text(spec),
                stats: (k == 0).then_some(f),
            });
        }
    }
    let producers: Vec<usize> = (0..paths.len()).collect();
    let SinkSetup {
        writer,
        full,
        pools,
    } = start_sink(
        &spec.sink,
        sink_ifaces,
        &producers,
        spec.sink.writer_buffer_bytes.min(FILE_BUFFER_BYTES),
        board.clone(),
        false,
        WriterLinks {
            rings: None,
            notify: Some(bells.attention.clone()),
        },
    )?;
    let mut workers = Vec::new();
    for (i, (path, free)) in paths.iter().zip(pools).enumerate() {
        let linktypes: Vec<u32> = inputs[i].iter().map(|x| x.linktype).collect();
        let programs: Vec<Program> = if linktypes.is_empty() {
            vec![compile(spec, first, Target::Offline)?]
        } else {
            linktypes.iter().filter_map(|lt| program_for(*lt)).collect()
        };
        let filters = programs
            .into_iter()
            .map(|p| {
                CheckedProgram::new(p).ok_or_else(|| {
                    EngineError::usage("libpcap compiled a filter program it does not accept")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut encoder = Encoder::new(spec.sink.format, bases[i], free, full.clone());
        encoder.set_blocking(true);
        encoder.set_placement(writer.placement.clone(), i);
        workers.push((
            path.clone(),
            Stages {
                filters: Some(filters),
                sampler: UserSampler::offline(spec.sampling, 0x5eed ^ i as u64),
                snap: spec.snap,
                max_frame_len: u32::MAX,
                transforms: spec.transforms.iter().map(|f| f()).collect(),
                linktypes,
                budget: budget.clone(),
                interface_base: Some(bases[i]),
                current_interface: 0,
            },
            encoder,
        ));
    }
    let board2 = board.clone();
    let stop2 = stop.clone();
    let writer_shared = writer.shared.clone();
    let flush_interval = spec.sink.flush_interval;
    // One observer for all the files: their packets' time goes on from one
    // to the next.
    let mut observer = observer_for(spec, false, 0, 0);
    // The files one after another on one thread, so the output holds them
    // in order.
    let handle = spawn("ringcap-read".into(), stop, move || {
        let mut result = Ok(());
        for (i, (path, stages, encoder)) in workers.into_iter().enumerate() {
            let quit = stop2.requested() || writer_shared.failure.lock().is_ok_and(|f| f.is_some());
            if quit || stages.count_reached() {
                break;
            }
            let source = match FileSource::open(&path) {
                Ok(s) => s,
                Err(e) => {
                    result = Err(SourceError::Input(e));
                    break;
                }
            };
            let worker = Worker {
                source,
                stages,
                encoder,
                board: board2.clone(),
                slot: (i, 0),
                stop: stop2.clone(),
                flush_interval,
                observer: observer.take(),
            };
            let (r, back) = worker.run_keep();
            observer = back;
            if r.is_err() {
                result = r;
                break;
            }
        }
        if let Some(mut o) = observer {
            o.finish();
        }
        result
    })?;
    let started = Started {
        inputs: names,
        linktype: first,
        snap: spec.snap,
        threads: 1,
        ring_bytes: 0,
        live: false,
    };
    let inner = Made {
        board,
        writer: writer.shared.clone(),
        live: None,
    };
    Ok((
        inner,
        started,
        Running {
            threads: vec![handle],
            leases: Vec::new(),
            writer,
            full,
        },
    ))
}

fn drain_log(shared: &Shared, completed_seen: &mut usize, tx: &Sender<Event>) {
    if let Ok(mut l) = shared.log.lock() {
        for m in l.drain(..) {
            let _ = tx.send(Event::Notice(m));
        }
    }
    if let Ok(c) = shared.completed.lock() {
        for p in c.iter().skip(*completed_seen) {
            let _ = tx.send(Event::FileCompleted(p.clone()));
        }
        *completed_seen = c.len();
    }
}

fn supervise(
    inner: Arc<Inner>,
    running: Running,
    duration: Option<Duration>,
    tx: Sender<Event>,
    began: Instant,
) -> Option<EngineError> {
    let mut error: Option<EngineError> = None;
    let mut completed_seen = 0;
    loop {
        // Woken by a bell (a stop, the writer, a rotation) or by the end of
        // the duration: no timer while the capture runs.
        let timeout = duration.map(|d| d.saturating_sub(began.elapsed()));
        let bells = [inner.stop.fd(), inner.attention.fd(), inner.rotate.fd()];
        match wait_readable(&bells, timeout) {
            Ok(rung) => {
                if rung & 1 != 0 {
                    inner.stop.noticed();
                }
                // Cleared before looking at what it stands for: what comes
                // after this rings again.
                if rung & 2 != 0 {
                    inner.attention.clear();
                }
                if rung & 4 != 0 && inner.rotate.clear() {
                    inner.writer.request_rotation();
                }
            }
            Err(_) => std::thread::sleep(SUPERVISE_FALLBACK),
        }
        if duration.is_some_and(|d| began.elapsed() >= d) {
            inner.stop.request();
        }
        if error.is_none() {
            if let Some(f) = inner.writer.failure.lock().ok().and_then(|f| f.clone()) {
                let _ = tx.send(Event::Error(f.clone()));
                error = Some(EngineError::runtime(f));
                inner.stop.request();
            }
        }
        drain_log(&inner.writer, &mut completed_seen, &tx);
        if running.threads.iter().any(|h| h.is_finished()) {
            inner.stop.request();
        }
        if inner.stop.requested() {
            break;
        }
    }
    // Count the interfaces first, then let the threads drain the rings.
    if let Some(live) = &inner.live {
        live.refresh(&inner.board);
    }
    let Running {
        threads,
        leases,
        writer,
        full,
    } = running;
    for h in threads {
        let failed = match h.join() {
            Ok(Ok(())) => None,
            Ok(Err(SourceError::Input(m))) => Some(EngineError::usage(format!(
                "{m} (the packets before it were written)"
            ))),
            Ok(Err(SourceError::Os(m))) => Some(EngineError::runtime(m)),
            Err(_) => Some(EngineError::runtime("a capture thread panicked")),
        };
        if let Some(f) = failed {
            if error.is_none() {
                let _ = tx.send(Event::Error(f.message.clone()));
                error = Some(f);
            }
        }
    }
    drop(full);
    writer.join();
    if let Some(live) = &inner.live {
        live.refresh(&inner.board);
    }
    if let Some(f) = inner.writer.failure.lock().ok().and_then(|f| f.clone()) {
        // A write failure outranks what it caused.
        if !matches!(&error, Some(e) if e.message == f) {
            error = Some(EngineError::runtime(f));
        }
    }
    drain_log(&inner.writer, &mut completed_seen, &tx);
    drop(leases);
    let _ = tx.send(Event::Finished);
    error
}

/// A file sink for packets a front end brings itself (a client of the
/// daemon writing what it receives): the writer thread and one encoder,
/// set up as a live capture's would be. Close the encoder, drop it, then
/// join the writer.
pub struct FileSink {
    /// The writer thread.
    pub writer: ringcap_sink::WriterHandle,
    /// Where packets go.
    pub encoder: Encoder,
}

impl FileSink {
    /// Opens the output of `sink` (the first file now) for packets of
    /// `interfaces`, counting on `board` (entry 0).
    pub fn open(
        sink: &SinkSpec,
        interfaces: Vec<SinkInterface>,
        board: Arc<Board>,
    ) -> Result<FileSink, EngineError> {
        let SinkSetup {
            writer,
            full,
            pools,
        } = start_sink(
            sink,
            interfaces,
            &[0],
            sink.writer_buffer_bytes,
            board,
            true,
            WriterLinks::default(),
        )?;
        let free = pools
            .into_iter()
            .next()
            .ok_or_else(|| EngineError::runtime("no output buffers"))?;
        let mut encoder = Encoder::new(sink.format, 0, free, full);
        encoder.set_placement(writer.placement.clone(), 0);
        Ok(FileSink { writer, encoder })
    }
}
