//! What a capture is asked to do: plain data, checked by [`crate::Capture::start`].
//! Front ends (the command line, the daemon) build one from their own input.

use crate::Hook;
use ringcap_sink::files::{OutputPlan, Retention, Rotation};
use ringcap_sink::{RecordFormat, WriteMode};
use ringcap_source::TimestampSource;
use ringcap_stages::{Sampling, Snap, TransformFactory};
use std::path::PathBuf;
use std::time::Duration;

/// One capture.
#[derive(Clone)]
pub struct CaptureSpec {
    /// Where packets come from.
    pub source: SourceSpec,
    /// Filter expression, tcpdump syntax ("" = every packet).
    pub filter: String,
    /// How much of each packet to keep.
    pub snap: Snap,
    /// Which packets to keep of those the filter accepts.
    pub sampling: Sampling,
    /// In-place rewrites of kept packets, in order (see `ringcap_stages::transform`).
    pub transforms: Vec<TransformFactory>,
    /// Where kept packets go: files (or a stream) written by the engine's
    /// writer.
    pub sink: SinkSpec,
    /// Stop after this many kept packets.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// A stage for the observer slot of each capture thread (flows, an
    /// index): see `crate::stages::Observer`.
    pub observer: Option<crate::stages::ObserverFactory>,
}

impl std::fmt::Debug for CaptureSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureSpec")
            .field("source", &self.source)
            .field("filter", &self.filter)
            .field("snap", &self.snap)
            .field("sampling", &self.sampling)
            .field("transforms", &self.transforms.len())
            .field("sink", &self.sink)
            .field("count", &self.count)
            .field("duration", &self.duration)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

/// Where packets come from.
#[derive(Debug, Clone)]
pub enum SourceSpec {
    /// Interfaces, now, through AF_PACKET rings.
    Live(LiveSpec),
    /// Capture files (pcap or pcapng), read in order.
    Files(Vec<PathBuf>),
}

/// A live capture's interfaces and their settings.
#[derive(Debug, Clone)]
pub struct LiveSpec {
    /// Interface names.
    pub interfaces: Vec<String>,
    /// Capture threads (and rings) per interface, joined by a fanout group.
    pub threads: u32,
    /// Kernel ring bytes per interface, split over its threads.
    pub ring_bytes: u64,
    /// Put the interfaces in promiscuous mode (counted by the kernel per socket).
    pub promiscuous: bool,
    /// Turn merging receive offloads (GRO/LRO) off while the capture runs.
    pub fix_offloads: bool,
    /// Timestamp source.
    pub tstamp: TimestampSource,
    /// Where in the kernel packets are taken: AF_PACKET (the default), an
    /// XDP program or a netfilter program (`ringcap_hook`).
    pub hook: Hook,
    /// Monitor-only interface (`--hook xdp --monitor`): every received
    /// frame is dropped at the driver after the capture took its copy, so
    /// the host's stack never sees the interface's traffic.
    pub monitor: bool,
}

/// Where kept packets go, and how files are written.
#[derive(Debug, Clone)]
pub struct SinkSpec {
    /// File, series of files, standard output, or nothing (count only).
    pub output: OutputPlan,
    /// Record format.
    pub format: RecordFormat,
    /// Write ringcap's compressed format (then `format` is the pcap
    /// resolution of the records it codes).
    pub compress: bool,
    /// When to start a new file.
    pub rotation: Rotation,
    /// Which old files to delete.
    pub retention: Retention,
    /// Write strategy.
    pub write_mode: WriteMode,
    /// Longest a kept packet waits in a partly filled buffer.
    pub flush_interval: Duration,
    /// Shell command run on each completed file (an administrator's own option).
    pub post_rotate: Option<String>,
    /// Replace existing files.
    pub overwrite: bool,
    /// Output buffer per capture thread (live: packets are dropped, and
    /// counted, when it is full; files: the reader waits).
    pub writer_buffer_bytes: u64,
    /// Owner (uid, gid) given to the files written.
    pub owner: Option<(u32, u32)>,
    /// Permission bits of the files written.
    pub file_mode: u32,
    /// Comment recorded in pcapng section headers (e.g. the command line).
    pub comment: String,
    /// Whether live ring blocks are written in place as pcapng (no copy per
    /// packet) where that can be done.
    pub zero_copy: ZeroCopy,
    /// Told of each output file published and removed (the per-file hook
    /// of the observer slot: sidecars such as an index live and die with
    /// their files). `None`: nothing is called.
    pub files: Option<ringcap_sink::FileHook>,
}

/// `--zero-copy`: writing the kernel's ring blocks to the file as they are,
/// each turned into pcapng in place (`ringcap_source::inplace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Where it can be done (whole packets or a numeric snap length).
    Auto,
    /// Always; a capture where it cannot be done is refused, saying why.
    On,
    /// Never: every packet is copied into an output batch.
    Off,
}

impl ZeroCopy {
    /// Parses `auto`, `on` or `off`.
    pub fn parse(s: &str) -> Result<ZeroCopy, String> {
        match s {
            "auto" => Ok(ZeroCopy::Auto),
            "on" | "yes" => Ok(ZeroCopy::On),
            "off" | "no" => Ok(ZeroCopy::Off),
            _ => Err(format!("{s}: zero copy is auto, on or off")),
        }
    }
}

impl SinkSpec {
    /// Defaults for `output` in `format`: no rotation or retention, direct
    /// writes, 1 s flush interval, 256 MiB of buffer per thread, mode 0640.
    pub fn new(output: OutputPlan, format: RecordFormat) -> SinkSpec {
        SinkSpec {
            output,
            format,
            compress: false,
            rotation: Rotation::default(),
            retention: Retention::default(),
            write_mode: WriteMode::Direct,
            flush_interval: Duration::from_secs(1),
            post_rotate: None,
            overwrite: false,
            writer_buffer_bytes: 256 << 20,
            owner: None,
            file_mode: 0o640,
            comment: String::new(),
            zero_copy: ZeroCopy::Auto,
            files: None,
        }
    }
}
