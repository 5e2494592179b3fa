//! The source interface: where a capture thread gets its packets. Live
//! AF_PACKET rings ([`live`]), capture files ([`file`]) and the BPF ring
//! buffer of an XDP or netfilter hook program ([`hook`]) are the
//! implementations; the capture thread (`crate::worker`) is generic over
//! them, so all share the stages and the sink with no cost per packet for
//! the abstraction.

pub mod file;
#[cfg(feature = "hook")]
pub mod hook;
pub mod live;

use ringcap_stats::CaptureCounts;
use std::os::fd::RawFd;
use std::time::Duration;

/// One packet as a source hands it over; `data` borrows the source's memory
/// (a ring block, a read buffer) until the callback returns.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// Capture time, ns since the epoch.
    pub ts_ns: u64,
    /// Length on the wire, as the source saw it (without a stripped VLAN tag).
    pub wire_len: u32,
    /// The bytes the source has (at most the kernel's snap length).
    pub data: &'a [u8],
    /// A VLAN tag the kernel took out of the frame, to put back.
    pub vlan: Option<[u8; 4]>,
    /// The source's own interface index (a pcapng file's interface; 0 live).
    pub interface: usize,
    /// The bytes of a packet this source will hand over a few packets
    /// later, when it already has them (files); empty otherwise. Only a
    /// hint for transforms that start their memory loads early.
    pub ahead: &'a [u8],
}

/// How many packets ahead [`Packet::ahead`] shows: far enough that a
/// transform's prefetch of that packet's table entries (a main-memory
/// miss, ~100 ns) completes while the packets in between are handled,
/// near enough that the line is still cached when its turn comes
/// (measured on issue 30's trace: 2 to 8 do about equally well, 1 and 16
/// worse).
pub(crate) const LOOK_AHEAD: usize = 4;

/// What the callback wants after a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Handled; go on.
    Continue,
    /// Handled, and the last one wanted (the count was reached with it).
    Done,
    /// Not handled (the count was reached before it): stop handing packets over.
    Stop,
}

/// What a call to [`Source::next_batch`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A batch of packets was handed over; `skipped` of them were not
    /// handled (the callback returned [`Flow::Stop`] for the first of them,
    /// or [`Flow::Done`] for the one before).
    Packets {
        /// Packets of the batch not handled.
        skipped: u64,
    },
    /// Nothing ready now; [`Source::wait`] before asking again.
    Idle,
    /// The source has no more packets, ever.
    End,
}

/// A source of packets for one capture thread.
pub trait Source: Send {
    /// Hands the packets ready now (one ring block, or a bounded run of file
    /// records) to `each`, in order.
    fn next_batch<F: FnMut(Packet<'_>) -> Flow>(&mut self, each: F) -> Result<Next, SourceError>;

    /// Waits up to `timeout` (`None`: for as long as it takes) for packets,
    /// or until `wake`, if given, is readable; true when `wake` is readable.
    /// A source that cannot wait for its packets (a ring buffer it polls)
    /// may return sooner, having seen nothing.
    fn wait(&mut self, timeout: Option<Duration>, wake: Option<RawFd>)
        -> Result<bool, SourceError>;

    /// Adds what the source itself counts (kernel ring statistics) to `counts`.
    fn refresh(&mut self, counts: &mut CaptureCounts) -> Result<(), SourceError>;

    /// Packets read from the source so far (files: records read; live: `None`,
    /// the interface's own counters say it).
    fn seen(&self) -> Option<u64>;

    /// How long to keep reading after a stop for packets already on their
    /// way (a ring's blocks still open), or zero.
    fn drain_grace(&self) -> Duration;

    /// For a source that can leave its packets where they are while the sink
    /// has no room (a ring block stays with the kernel, which keeps filling
    /// the others): the most bytes of packets one [`next_batch`](Self::next_batch)
    /// hands over. `None`: the source does not wait (files, which block in
    /// the encoder instead).
    fn hold_bytes(&self) -> Option<usize> {
        None
    }

    /// How full the source's own buffer is: (blocks handed over by the
    /// kernel and not read yet, blocks in all), if it has one. Called once
    /// per batch; looks only at blocks it has not seen ready before.
    fn backlog(&mut self) -> Option<(u32, u32)> {
        None
    }
}

/// A source failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceError {
    /// The system failed (a socket error).
    Os(String),
    /// The input is malformed (a file with bad records): the packets before
    /// it were handled.
    Input(String),
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceError::Os(m) | SourceError::Input(m) => f.write_str(m),
        }
    }
}
