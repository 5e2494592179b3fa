//! The capture engine: sources, stages and sinks put together into captures
//! that start, stop and report on their own, many at once in one process.
//! `ringcap capture` is one front end; the daemon `ringcapd` is another.
//!
//! The capture path, by module:
//!
//! - [`source`]: where packets come from, behind one interface: live
//!   AF_PACKET rings ([`source::live`]), capture files ([`source::file`])
//!   and the ring buffer of an XDP or netfilter program ([`source::hook`]).
//! - [`stages`]: filter (where the kernel did not), sample, count, truncate,
//!   then the transform slot on each kept packet.
//! - the sink: encoders per capture thread and a writer thread
//!   (`ringcap_sink`), set up by [`capture`].
//! - stats alongside: every thread publishes counters to a board
//!   (`ringcap_stats`); [`Capture::counters`] reads it.
//!
//! A front end builds a [`CaptureSpec`] (plain data), calls
//! [`Capture::start`], and gets a handle: [`Capture::stop`] (this capture
//! only), [`Capture::counters`], [`Capture::events`] ([`Event`] values: the
//! engine prints nothing), and [`Capture::join`] for the [`Outcome`]. Errors
//! are typed ([`EngineError`], [`ErrorKind`]); only front ends turn them into
//! exit statuses or messages. Interface state that captures share (offloads
//! turned off, hardware timestamping) is counted in [`interfaces`].

pub mod capture;
pub mod error;
pub mod event;
pub mod hub;
pub mod interfaces;
pub mod reason;
pub mod source;
pub mod spec;
pub mod stages;
pub mod stop;
pub mod worker;

pub use capture::{Capture, FileSink, Outcome, Started, BATCH_SIZE, BLOCK_SIZE, RETIRE_TIMEOUT_MS};
pub use error::{EngineError, ErrorKind};
pub use event::Event;
pub use reason::{InPlaceBlocker, Reason};
pub use ringcap_sink::{
    FileHook, FileObserver, PacketSink, Record, SharedSinkFactory, SinkFactory,
};
pub use spec::{CaptureSpec, LiveSpec, SinkSpec, SourceSpec, ZeroCopy};

// What a front end needs to fill a spec, without depending on every crate.
pub use ringcap_sink::encode::copy_with_tag;
pub use ringcap_sink::files::{remove_releasing, OutputPlan, Retention, Rotation};
pub use ringcap_sink::writer::Shared as WriterShared;
pub use ringcap_sink::SinkInterface;
pub use ringcap_sink::{Encoder, RecordFormat, WriteMode, WriterHandle};
pub use ringcap_source::Hook;
pub use ringcap_source::TimestampSource;
pub use ringcap_stages::{SampleMode, Sampling, Snap, Transform, TransformFactory};
pub use ringcap_stats::{Board, Counters};
