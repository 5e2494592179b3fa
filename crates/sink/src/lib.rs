//! Where packets go: capture files, written in bulk off the capture thread.
//!
//! The capture thread encodes each kept packet straight into the final file
//! format inside a large, page-aligned [`Batch`] ([`Encoder`]); full batches
//! go to the writer thread and come back empty through a per-thread pool. When
//! the pool is empty the packet is counted as dropped by the writer: the
//! capture thread never waits for the disk, so the kernel ring keeps draining.
//!
//! The writer ([`writer`]) owns the output: one stream, one file, or a
//! rotating series of files ([`files`]) with retention and crash-safe
//! publishing (written under a hidden name, fsync'd, renamed). How bytes reach
//! the disk is a [`strategy`] chosen with `--write-mode`.

pub mod batch;
pub mod bell;
pub mod encode;
pub mod file_observer;
pub mod files;
pub mod packet_sink;
pub mod reason;
pub mod strategy;
mod sys;
pub use sys::FixedWrites;
pub mod writer;

pub use batch::Batch;
pub use bell::Bell;
pub use encode::Encoder;
pub use file_observer::{FileHook, FileObserver, FileTap};
pub use files::{OutputPlan, Retention, Rotation};
pub use packet_sink::{PacketSink, SharedSinkFactory, SinkFactory};
pub use reason::{SinkReason, WriteFailure};
pub use ringcap_format::record::Record;
pub use strategy::WriteMode;
pub use writer::{RingWrite, SinkInterface, Writer, WriterConfig, WriterHandle};

pub use ringcap_format::walk::RecordFormat;
