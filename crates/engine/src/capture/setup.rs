//! What the starts of every kind of source share: checks of the spec, the
//! zero-copy decision, the sink's writer and its buffers, filter programs,
//! the counters board, the stages of a capture thread, thread spawning; and
//! [`FileSink`], the same writer for packets a front end brings itself.

use super::BATCH_SIZE;
use crate::error::{EngineError, ErrorKind};
use crate::event::Event;
use crate::interfaces::Lease;
use crate::reason::{InPlaceBlocker, Reason};
use crate::source::SourceError;
use crate::spec::{CaptureSpec, LiveSpec, SinkSpec, SourceSpec, ZeroCopy};
use crate::stages::Stages;
use crate::stop::Stop;
use crate::Hook;
use crossbeam_channel::{Receiver, Sender};
use ringcap_sink::{
    Batch, Bell, Encoder, RecordFormat, RingWrite, SinkInterface, Writer, WriterConfig,
};
use ringcap_source::Interface;
use ringcap_stages::filter::Target;
use ringcap_stages::{Program, Snap, UserSampler};
use ringcap_stats::Board;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Checks of a live spec that hold whatever the hook.
pub(super) fn check_live(live: &LiveSpec) -> Result<(), EngineError> {
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
    if live.monitor && live.hook != Hook::Xdp {
        return Err(EngineError::because(
            ErrorKind::Usage,
            Reason::MonitorNeedsXdp(live.hook),
        ));
    }
    Ok(())
}

/// The one zero-copy decision: true when the ring blocks of this capture
/// are written to the file in place; an error when `--zero-copy on` asks
/// for what cannot be.
pub fn in_place(spec: &CaptureSpec) -> Result<bool, EngineError> {
    Ok(match (spec.sink.zero_copy, in_place_blocker(spec)) {
        (ZeroCopy::Off, _) => false,
        (ZeroCopy::On, Some(why)) => {
            return Err(EngineError::because(
                ErrorKind::Usage,
                Reason::NotInPlace(why),
            ))
        }
        (ZeroCopy::On, None) => true,
        // Cut captures too: at 64 B snap 64 writing the blocks in place
        // costs less CPU than copying (bench/README.md, "Zero copy"),
        // though each packet keeps the kernel's header room as padding.
        (ZeroCopy::Auto, blocker) => blocker.is_none(),
    })
}

/// The stages of one capture thread: the spec's sampling (`sampler`), snap
/// length, transforms and packet budget; `filters` when the filter runs in
/// user space.
pub(super) fn stages_for(
    spec: &CaptureSpec,
    budget: &Option<Arc<AtomicU64>>,
    filters: Option<Vec<ringcap_stages::CheckedProgram>>,
    sampler: UserSampler,
    max_frame_len: u32,
    linktypes: Vec<u32>,
    interface_base: Option<u32>,
) -> Stages {
    Stages::new(
        sampler,
        spec.snap,
        max_frame_len,
        spec.transforms.iter().map(|f| f()).collect(),
        linktypes,
    )
    .with_filters(filters)
    .with_budget(budget.clone())
    .with_interface_base(interface_base)
}

pub(crate) fn sock_filter(p: &Program) -> Vec<libc::sock_filter> {
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
pub(super) struct WriterLinks {
    pub(super) rings: Option<Receiver<RingWrite>>,
    pub(super) notify: Option<Arc<Bell>>,
}

/// The writer and what the producers need to reach it.
pub(super) struct SinkSetup {
    pub(super) writer: ringcap_sink::WriterHandle,
    pub(super) full: Sender<Batch>,
    pub(super) pools: Vec<Receiver<Batch>>,
}

pub(super) fn start_sink(
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
    let eager = per_pool.min(EAGER_BATCHES);
    let mut senders = Vec::new();
    let mut pools = Vec::new();
    for (pool, entry) in producers.iter().enumerate() {
        let (tx, rx) = crossbeam_channel::unbounded();
        for _ in 0..eager {
            let _ = tx.send(Batch::new(BATCH_SIZE, *entry, pool));
        }
        senders.push(tx);
        pools.push(rx);
    }
    if per_pool > eager {
        let later: Vec<(Sender<Batch>, usize)> = senders
            .iter()
            .cloned()
            .zip(producers.iter().copied())
            .collect();
        grow_pools(later, per_pool - eager);
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
        files: sink.files.clone(),
    };
    let writer = Writer::spawn_with_rings(cfg, board, full_rx, senders, rings).map_err(|e| {
        if let Some(r) = ringcap_sink::SinkReason::of_io(&e) {
            return EngineError::because(ErrorKind::Usage, Reason::Sink(r.clone()));
        }
        let msg = format!("cannot write the output: {e}");
        if matches!(
            e.kind(),
            std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::InvalidInput
        ) {
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

/// Batches of each pool made before the capture starts (32 MiB): enough
/// for the first moments; the rest is made by [`grow_pools`].
const EAGER_BATCHES: usize = 8;

/// Makes `more` batches for each pool on a thread of its own, round robin,
/// and puts them in the pools as they are made. Why: a batch's pages are
/// touched when it is made (a fault per page in the hot path otherwise),
/// and touching the whole default writer buffer (256 MiB, huge pages with
/// compaction) took about a second before `capturing on`. The thread ends
/// when every batch is made or the capture has ended (its pools are gone).
/// If no thread can be started, the batches are made here and now.
fn grow_pools(pools: Vec<(Sender<Batch>, usize)>, more: usize) {
    fn make(pools: &[(Sender<Batch>, usize)], more: usize) {
        for _ in 0..more {
            for (pool, (tx, entry)) in pools.iter().enumerate() {
                if tx.send(Batch::new(BATCH_SIZE, *entry, pool)).is_err() {
                    return;
                }
            }
        }
    }
    let mine = pools.clone();
    let spawned = std::thread::Builder::new()
        .name("ringcap-buffers".into())
        .spawn(move || make(&mine, more));
    if spawned.is_err() {
        make(&pools, more);
    }
}

/// Why the ring blocks of a live capture cannot be written to the file in
/// place as pcapng (`--zero-copy`), or `None` when they can: every packet
/// must go out as the kernel left it in the ring (filtered, sampled and cut
/// there), to a pcapng file written with O_DIRECT.
pub fn in_place_blocker(spec: &CaptureSpec) -> Option<InPlaceBlocker> {
    let sink = &spec.sink;
    match &spec.source {
        SourceSpec::Files(_) => return Some(InPlaceBlocker::Files),
        SourceSpec::Live(l) if l.hook != Hook::Packet => return Some(InPlaceBlocker::Hook),
        SourceSpec::Live(_) => {}
    }
    if sink.format != RecordFormat::Pcapng || sink.compress {
        return Some(InPlaceBlocker::NotPcapng);
    }
    if !matches!(
        sink.output,
        ringcap_sink::OutputPlan::Single(_) | ringcap_sink::OutputPlan::Series { .. }
    ) {
        return Some(InPlaceBlocker::NotAFile);
    }
    if sink.write_mode == ringcap_sink::WriteMode::Buffered {
        return Some(InPlaceBlocker::Buffered);
    }
    if matches!(spec.snap, Snap::Headers { .. }) {
        return Some(InPlaceBlocker::Headers);
    }
    if !UserSampler::live(spec.sampling).keeps_all() {
        return Some(InPlaceBlocker::UserSampling);
    }
    if !spec.transforms.is_empty() {
        return Some(InPlaceBlocker::Transforms);
    }
    if spec.count.is_some() {
        return Some(InPlaceBlocker::Count);
    }
    if spec.observer.is_some() {
        return Some(InPlaceBlocker::Observer);
    }
    None
}

/// The observer of capture thread `thread` on interface `interface`, if
/// the spec has an observer stage.
pub(super) fn observer_for(
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
pub(super) fn open_interfaces(names: &[String]) -> Result<Vec<Interface>, EngineError> {
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

/// A pcap file holds one link type: refuses interfaces (or, `from_files`,
/// input files) of several.
pub(super) fn one_linktype_for_pcap(
    spec: &CaptureSpec,
    linktypes: &[u32],
    from_files: bool,
) -> Result<(), EngineError> {
    if matches!(spec.sink.format, RecordFormat::Pcap(_))
        && linktypes.iter().any(|l| Some(l) != linktypes.first())
    {
        let mut kinds = linktypes.to_vec();
        kinds.sort_unstable();
        kinds.dedup();
        return Err(EngineError::because(
            ErrorKind::Usage,
            Reason::MixedLinkTypes {
                linktypes: kinds,
                from_files,
            },
        ));
    }
    Ok(())
}

/// The counters board of a live capture: `threads` capture threads per
/// interface.
pub(super) fn board_of(interfaces: &[Interface], threads: usize) -> Arc<Board> {
    Arc::new(Board::new(
        &interfaces
            .iter()
            .map(|i| (i.name.clone(), threads))
            .collect::<Vec<_>>(),
    ))
}

/// The output's interfaces of a live capture (one per capture interface,
/// each with its own statistics).
pub(super) fn sink_interfaces(
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

/// The capture's filter program for `linktype`.
pub(super) fn compile(
    spec: &CaptureSpec,
    linktype: u32,
    target: Target<'_>,
) -> Result<Program, EngineError> {
    ringcap_stages::compile(
        &spec.filter,
        linktype as i32,
        spec.snap.kernel_snaplen(),
        target,
    )
    .map_err(|e| EngineError::usage(e.to_string()))
}

/// The filter text recorded in output files.
pub(super) fn filter_text(spec: &CaptureSpec) -> Option<String> {
    let t = spec.filter.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// Requests the capture's stop when dropped: a capture thread that ends
/// (done, failed or panicking) stops the others and wakes the supervisor.
struct StopOnExit(Stop);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        self.0.request();
    }
}

pub(super) fn spawn<F: FnOnce() -> Result<(), SourceError> + Send + 'static>(
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

/// The shared interface state a live capture holds while it runs (offloads
/// turned off with `fix_offloads`, hardware timestamping with
/// `adapter_tstamps`), one lease per interface, given back when dropped.
pub(super) fn leases_of(
    interfaces: &[Interface],
    fix_offloads: bool,
    adapter_tstamps: bool,
    events: &Sender<Event>,
) -> Result<Vec<Lease>, EngineError> {
    interfaces
        .iter()
        .map(|i| Lease::acquire(&i.name, fix_offloads, adapter_tstamps, events))
        .collect()
}

/// Threads of a capture, plus what to give back when they end.
pub(super) struct Running {
    pub(super) threads: Vec<JoinHandle<Result<(), SourceError>>>,
    pub(super) leases: Vec<Lease>,
    /// The sink's writer, and the encoders' way to it (dropped once the
    /// capture threads are joined, so that the writer sees the end).
    pub(super) writer: ringcap_sink::WriterHandle,
    pub(super) full: Sender<Batch>,
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
