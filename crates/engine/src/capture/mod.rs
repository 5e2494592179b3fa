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
//!
//! The code, by file: this one has the handle and the one place that
//! decides (zero copy or not, which source); `live`, `hook` and `files`
//! start each kind of source and hand back a [`Launch`]; `setup` has what
//! they share (checks, the sink's writer, filter programs, thread
//! spawning); `supervise` runs the supervisor thread.

mod files;
#[cfg(feature = "hook")]
mod hook;
mod live;
mod setup;
pub(crate) use setup::sock_filter;
mod supervise;

pub use setup::{in_place, in_place_blocker, FileSink};

use crate::error::{EngineError, ErrorKind};
use crate::event::Event;
use crate::reason::Reason;
use crate::spec::{CaptureSpec, SourceSpec};
use crate::stop::Stop;
use crate::Hook;
use crossbeam_channel::Receiver;
use ringcap_sink::writer::Shared;
use ringcap_sink::Bell;
use ringcap_source::socket::CountingSocket;
use ringcap_source::CounterFiles;
use ringcap_stages::Snap;
use ringcap_stats::{Board, Counters};
use setup::Running;
use std::os::fd::OwnedFd;
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

/// What the handle and the supervisor of a capture share.
struct CaptureState {
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
    inner: Arc<CaptureState>,
    events: Receiver<Event>,
    started: Started,
    began: Instant,
    supervisor: Option<JoinHandle<Option<EngineError>>>,
}

/// What starting one kind of source hands back to [`Capture::start`]: the
/// counters board, the live state (interfaces' counters) if any, what to
/// show, and the threads to supervise.
struct Launch {
    board: Arc<Board>,
    live: Option<LiveState>,
    started: Started,
    running: Running,
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
        // The one zero-copy decision (ring blocks written in place, or
        // packets copied), before anything is opened.
        let in_place = setup::in_place(&spec)?;
        // The one dispatch on the source.
        let launch = match &spec.source {
            SourceSpec::Live(live) => {
                setup::check_live(live)?;
                match live.hook {
                    Hook::Packet => live::start(&spec, live, in_place, &tx, &bells, &budget)?,
                    #[cfg(feature = "hook")]
                    _ => hook::start(&spec, live, &tx, &bells, &budget)?,
                    #[cfg(not(feature = "hook"))]
                    _ => {
                        return Err(EngineError::because(
                            ErrorKind::Usage,
                            Reason::HookNotBuilt(live.hook),
                        ))
                    }
                }
            }
            SourceSpec::Files(paths) => files::start(&spec, paths, &bells, &budget)?,
        };
        let Launch {
            board,
            live,
            started,
            running,
        } = launch;
        let inner = Arc::new(CaptureState {
            board,
            stop: bells.stop,
            attention: bells.attention,
            rotate,
            writer: running.writer.shared.clone(),
            live,
        });
        let began = Instant::now();
        let sup = {
            let inner = inner.clone();
            let duration = spec.duration;
            std::thread::Builder::new()
                .name("ringcap-supervisor".into())
                .spawn(move || supervise::supervise(inner, running, duration, tx, began))
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
