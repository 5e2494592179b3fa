//! A finished flow, as the exporters take it.

use crate::key::FlowKey;

/// One direction's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Direction {
    /// Packets.
    pub packets: u64,
    /// IP octets.
    pub octets: u64,
    /// Union of the TCP flags seen.
    pub tcp_flags: u16,
}

impl Direction {
    /// Nothing counted.
    pub const ZERO: Direction = Direction {
        packets: 0,
        octets: 0,
        tcp_flags: 0,
    };
}

/// Why a flow was exported (IPFIX flowEndReason, RFC 7012).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// No packet for the idle timeout.
    IdleTimeout = 1,
    /// The active timeout ran out.
    ActiveTimeout = 2,
    /// TCP RST, or FIN in both directions.
    EndOfFlow = 3,
    /// The capture ended.
    ForcedEnd = 4,
    /// The table was full: exported early.
    LackOfResources = 5,
}

impl EndReason {
    /// The name JSON records use.
    pub fn name(self) -> &'static str {
        match self {
            EndReason::IdleTimeout => "idle",
            EndReason::ActiveTimeout => "active",
            EndReason::EndOfFlow => "end",
            EndReason::ForcedEnd => "forced",
            EndReason::LackOfResources => "evicted",
        }
    }
}

/// A flow as exported: a biflow (RFC 5103) whose forward direction is its
/// first packet's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRecord {
    /// Key in the forward direction.
    pub key: FlowKey,
    /// First packet, ns since the epoch.
    pub start_ns: u64,
    /// Last packet, ns since the epoch.
    pub end_ns: u64,
    /// Forward counters.
    pub fwd: Direction,
    /// Reverse counters (zero for a one-way flow).
    pub rev: Direction,
    /// ICMP type and code of the first packet (`type << 8 | code`).
    pub icmp: u16,
    /// Why it was exported.
    pub reason: EndReason,
}

impl FlowRecord {
    /// The reverse direction as a flow of its own (for formats without
    /// biflows); `None` when it saw no packet.
    pub fn reverse_half(&self) -> Option<FlowRecord> {
        (self.rev.packets > 0).then(|| FlowRecord {
            key: self.key.reversed(),
            fwd: self.rev,
            rev: Direction::ZERO,
            ..*self
        })
    }

    /// The forward direction alone.
    pub fn forward_half(&self) -> FlowRecord {
        FlowRecord {
            rev: Direction::ZERO,
            ..*self
        }
    }
}
