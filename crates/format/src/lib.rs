//! Capture file formats: pcap and pcapng, written and read.
//!
//! The writers are plain functions that fill caller-provided byte buffers, so the
//! capture path can encode records straight into its output batches without
//! allocating. The reader accepts every variant other tools write (both byte
//! orders, micro- and nanosecond pcap, multi-section pcapng) and reports the byte
//! offset of the first record it cannot make sense of.
//!
//! - [`pcap`]: classic pcap headers (writing).
//! - [`pcapng`]: pcapng blocks (writing).
//! - [`walk`]: record boundaries and timestamps in files ringcap wrote.
//! - [`read`]: [`Reader`] for any pcap or pcapng file.
//! - [`record`]: [`Record`](record::Record), a kept packet, and the one 16-byte
//!   record header layout (pcap files, ringcapd's rings).
//! - [`sidecar`]: names of the files kept next to a capture (its index).
//! - [`repair`](mod@repair): [`check`] and [`repair`](fn@repair) files cut short by a crash.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod pcap;
pub mod pcapng;
pub mod read;
pub mod record;
pub mod repair;
pub mod sidecar;
pub mod walk;

pub use read::{
    ByteOrder, FileFormat, FormatError, FormatErrorKind, Interface, Packet, Reader, TsUnit,
};
pub use repair::{check, repair, RepairError, RepairReport};
pub use walk::{record_at, RecordFormat};

/// Timestamp resolution of a pcap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsResolution {
    /// Microseconds (magic 0xa1b2c3d4), what most tools write by default.
    Micro,
    /// Nanoseconds (magic 0xa1b23c4d).
    Nano,
}
