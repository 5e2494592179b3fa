//! Where packets come from: the kernel's shared-memory capture rings.
//!
//! A live capture opens one AF_PACKET socket per interface and thread, each with
//! a TPACKET_V3 receive ring mapped into user space. The kernel fills whole
//! blocks of packets and hands each block over with one status word, so the
//! capture thread reads packets with no system call per packet and calls
//! `poll()` only when the ring is empty. The sockets of several threads of
//! one interface join a PACKET_FANOUT group that spreads flows over them by
//! hash (a socket alone joins none: see [`Fanout`]).
//!
//! `unsafe` lives in [`sys`] (system calls and socket options) and [`ring`]
//! (the mapped memory), and [`netdev`] (interface ioctls); everything else
//! is safe Rust over byte slices.

pub mod hook;
pub mod inject;
pub mod inplace;
pub mod interface;
pub mod netdev;
pub mod packet;
pub mod ring;

pub use hook::Hook;
pub mod socket;
pub mod sys;

pub use interface::{CounterFiles, Interface, InterfaceCounters, OpenError};
pub use packet::{RingPacket, VlanTag};
pub use ring::{Block, HeldBlock, RingGeometry, RingMemory, RxRing};
pub use socket::{
    CaptureSocket, Fanout, FilterHandle, SocketOptions, SocketStats, TimestampSource,
};
