//! The per-client shared-memory ring of `ringcapd`.
//!
//! The daemon ([`RingWriter`]) appends *chunks* — a payload holding a batch
//! of packets, opaque to this crate — into a memfd that the client
//! ([`RingReader`]) maps read-only. The client tells the daemon how far it
//! has read through a second, small memfd that the daemon only reads and
//! treats as untrusted input. A pipe carries wake-ups, at most one per chunk
//! and only while the client says it is asleep. A client that stops reading
//! fills only its own ring; what does not fit is counted in the ring's
//! header as dropped for that client, and the daemon moves on without
//! waiting.
//!
//! ```text
//!  daemon: RingWriter                          client: RingReader
//!  data memfd, mapped RW before sealing ─────► mapped PROT_READ
//!    sealed SHRINK|GROW|FUTURE_WRITE|SEAL        next_chunk() borrows payloads
//!  consumer memfd, mapped PROT_READ     ◄───── mapped RW, then sealed
//!    sealed SHRINK|GROW; one Acquire             FUTURE_WRITE|SEAL by the reader;
//!    load of the read position, clamped          release() stores the position
//!  pipe write end (never leaves daemon) ─────► read end: wait() polls it
//! ```
//!
//! Modules:
//! - [`layout`]: the memory format (header fields and offsets, chunk
//!   headers, padding marker, the consumer region), shared by both sides;
//! - [`writer`]: the daemon's side, and why nothing the client does can hurt
//!   the daemon;
//! - [`reader`]: the client's side, and the checks it makes;
//! - `sys` (private): system calls and mappings, the only `unsafe` code, and
//!   the soundness argument for sharing memory with another process.
//!
//! Where this departs from the first sketch (`design-ringcapd.md`), and why:
//! - **Wake-ups go through a pipe, not an eventfd.** A passed eventfd
//!   shares its open file description with the daemon: the client can clear
//!   `O_NONBLOCK` and fill the counter, and the daemon's next `write` blocks
//!   its capture thread (verified on this machine). The daemon keeps the
//!   pipe's write end to itself. A closed write end also tells the client
//!   that the daemon went away (`POLLHUP`), which an eventfd cannot.
//! - **Wake-ups only when the client sleeps.** The client raises a waiting
//!   flag in its region before it polls; the daemon writes a wake-up byte
//!   after an append only while the flag is up (a SeqCst fence on each side
//!   rules out a lost wake-up). A client that keeps up costs no system calls.
//! - **The consumer region is claimed by the reader.** The daemon seals it
//!   `SHRINK | GROW` (its mapping can never fault) but not `SEAL`; the
//!   reader maps it read-write and then adds `FUTURE_WRITE | SEAL`, so from
//!   then on nothing but the reader's mapping can move its read position —
//!   not even `write(2)` on a duplicate of the descriptor in the same
//!   process. The daemon maps it read-only: it never writes there.
//! - **The read position is loaded lazily**, when the space known to be free
//!   is not enough for the next chunk, so the daemon does not pull the
//!   client's cache line on every append.
//! - **`MFD_NOEXEC_SEAL`** on kernels that know it (6.3+), so the memfds
//!   can never be executed and `vm.memfd_noexec = 2` does not refuse them.
//! - Chunks larger than [`RingWriter::max_payload`] (`capacity / 2 - 8`) may
//!   not fit even an empty ring, because of the padding to the end; the
//!   daemon should cut chunks no larger.
//!
//! Not here: the record format inside a chunk (the daemon's encoder), the
//! passing of the descriptors (the control protocol), policy.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod layout;
pub mod reader;
mod sys;
pub mod writer;

pub use reader::{Chunk, RingReader, Span};
pub use writer::{RingWriter, WriterId};

use std::fmt;
use std::io;

/// The counters in a ring's header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingCounters {
    /// Bytes ever appended, padding included (monotonic).
    pub write_position: u64,
    /// Chunks appended.
    pub chunks_written: u64,
    /// Packets in the chunks appended.
    pub packets_written: u64,
    /// Payload bytes in the chunks appended.
    pub bytes_written: u64,
    /// Packets dropped for this client: did not fit its ring ("dropped in
    /// the client's ring").
    pub packets_dropped: u64,
    /// Payload bytes of the dropped packets.
    pub bytes_dropped: u64,
}

/// The ring's contents are inconsistent at `position`: a length that runs
/// past the data area or the write position, or a write position that moved
/// backwards or too far. The reader stays at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingError {
    /// The reader's position when it found the problem.
    pub position: u64,
    /// What is wrong.
    pub reason: &'static str,
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "shared-memory ring corrupt at position {}: {}",
            self.position, self.reason
        )
    }
}

impl std::error::Error for RingError {}

impl From<RingError> for io::Error {
    fn from(e: RingError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

#[cfg(test)]
mod tests;
