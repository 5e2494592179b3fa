//! The frame shapes ([`Shape`]), [`build`] of one shape, and the mixed
//! sequences tests send ([`mixed_sequence`]): which shape and flow each
//! sequence number gets.

use super::{
    arp, gre_udp4, icmp4_echo, icmp6_echo, ipv4_fragment_first, ipv4_fragment_later,
    ipv4_with_options, ipv6_ext_tcp, malformed_ihl, malformed_tcp_offset, qinq_udp4, runt, sctp4,
    tcp4_with_options, truncated_ipv4, truncated_tcp, udp4, udp6, vlan_udp4, vxlan, ArpOp,
    Endpoints, MAX_UDP4_PAYLOAD, MIXED_FLOWS, TAG_LEN,
};

/// The frame shapes [`build`] can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// [`udp4`] with a payload of 8..=207 bytes.
    Udp4,
    /// [`udp4`] with the largest payload that fits a 1500 MTU (1514-byte frame).
    Udp4Max,
    /// [`tcp4_with_options`].
    Tcp4Options,
    /// [`ipv4_with_options`].
    Ipv4Options,
    /// [`icmp4_echo`].
    IcmpEcho,
    /// [`arp`] request.
    ArpRequest,
    /// [`arp`] reply.
    ArpReply,
    /// [`ipv4_fragment_first`].
    Ipv4FragFirst,
    /// [`ipv4_fragment_later`].
    Ipv4FragLater,
    /// [`udp6`].
    Udp6,
    /// [`ipv6_ext_tcp`] with a routing header of type 4 (SRH).
    Ipv6ExtTcp,
    /// [`ipv6_ext_tcp`] with a routing header of type 0.
    Ipv6ExtTcpRt0,
    /// [`icmp6_echo`].
    Icmp6Echo,
    /// [`vlan_udp4`].
    VlanUdp4,
    /// [`qinq_udp4`].
    QinQUdp4,
    /// [`sctp4`].
    Sctp4,
    /// [`gre_udp4`].
    GreUdp4,
    /// [`vxlan`].
    Vxlan,
    /// [`truncated_ipv4`].
    TruncatedIpv4,
    /// [`truncated_tcp`].
    TruncatedTcp,
    /// [`malformed_ihl`].
    MalformedIhl,
    /// [`malformed_tcp_offset`].
    MalformedTcpOffset,
    /// [`runt`].
    Runt,
}

impl Shape {
    /// Every shape, in the order [`mixed_sequence`] cycles through them.
    pub const ALL: [Shape; 23] = [
        Shape::Udp4,
        Shape::Tcp4Options,
        Shape::VlanUdp4,
        Shape::Ipv4Options,
        Shape::IcmpEcho,
        Shape::ArpRequest,
        Shape::Ipv4FragFirst,
        Shape::Ipv4FragLater,
        Shape::Udp6,
        Shape::Ipv6ExtTcp,
        Shape::Icmp6Echo,
        Shape::QinQUdp4,
        Shape::Sctp4,
        Shape::GreUdp4,
        Shape::Vxlan,
        Shape::TruncatedIpv4,
        Shape::TruncatedTcp,
        Shape::MalformedIhl,
        Shape::MalformedTcpOffset,
        Shape::Runt,
        Shape::ArpReply,
        Shape::Udp4Max,
        Shape::Ipv6ExtTcpRt0,
    ];

    /// True for the shapes whose IP headers are deliberately wrong or cut short.
    pub fn is_broken(self) -> bool {
        matches!(
            self,
            Shape::TruncatedIpv4
                | Shape::TruncatedTcp
                | Shape::MalformedIhl
                | Shape::MalformedTcpOffset
        )
    }

    /// True for shapes that carry 802.1Q/802.1ad tags.
    pub fn is_vlan_tagged(self) -> bool {
        matches!(self, Shape::VlanUdp4 | Shape::QinQUdp4)
    }
}

/// Builds one frame of `shape` with sequence number `seq` in flow `flow`: the flow
/// selects ports (`10000 + flow` → `20000 + flow`), VLAN ids (`100 + flow`), ICMP
/// identifiers, GRE keys and VNIs, so frames of one `(shape, flow)` hash alike.
/// Payload lengths vary with `seq`. Fragments get the IP ID `seq as u16`, so a first
/// and a later fragment never belong to one datagram: nothing (a defragmenting
/// fanout, tshark) ever reassembles them and swallows a tag.
pub fn build(shape: Shape, ep: &Endpoints, seq: u32, flow: u32) -> Vec<u8> {
    let flow16 = (flow & 0x3fff) as u16;
    let sport = 10000 + flow16;
    let dport = 20000 + flow16;
    let var = (seq as usize).wrapping_mul(37) % 200;
    let len = TAG_LEN + var;
    match shape {
        Shape::Udp4 => udp4(ep, seq, sport, dport, len),
        Shape::Udp4Max => udp4(ep, seq, sport, dport, MAX_UDP4_PAYLOAD),
        Shape::Tcp4Options => tcp4_with_options(ep, seq, sport, dport, len),
        Shape::Ipv4Options => ipv4_with_options(ep, seq, sport, dport, len),
        Shape::IcmpEcho => icmp4_echo(ep, seq, 0x4000 + flow16, len),
        Shape::ArpRequest => arp(ep, seq, ArpOp::Request),
        Shape::ArpReply => arp(ep, seq, ArpOp::Reply),
        Shape::Ipv4FragFirst => ipv4_fragment_first(ep, seq, sport, dport, seq as u16),
        Shape::Ipv4FragLater => ipv4_fragment_later(ep, seq, seq as u16),
        Shape::Udp6 => udp6(ep, seq, sport, dport, len),
        Shape::Ipv6ExtTcp => ipv6_ext_tcp(ep, seq, sport, dport, 4, len),
        Shape::Ipv6ExtTcpRt0 => ipv6_ext_tcp(ep, seq, sport, dport, 0, len),
        Shape::Icmp6Echo => icmp6_echo(ep, seq, 0x4000 + flow16, len),
        Shape::VlanUdp4 => vlan_udp4(ep, seq, 100 + flow16, sport, dport, len),
        Shape::QinQUdp4 => qinq_udp4(ep, seq, 200 + flow16, 100 + flow16, sport, dport, len),
        Shape::Sctp4 => sctp4(ep, seq, sport, dport, len),
        Shape::GreUdp4 => gre_udp4(ep, seq, 0x00ab_0000 + flow, sport, dport, len),
        Shape::Vxlan => vxlan(ep, seq, 0x1000 + flow, 40000 + flow16, len),
        Shape::TruncatedIpv4 => truncated_ipv4(ep, seq, sport, dport),
        Shape::TruncatedTcp => truncated_tcp(ep, seq, sport, dport),
        Shape::MalformedIhl => malformed_ihl(ep, seq, sport, dport),
        Shape::MalformedTcpOffset => malformed_tcp_offset(ep, seq, sport, dport),
        Shape::Runt => runt(ep, seq, sport, dport),
    }
}

/// The shape of frame `seq` of a [`mixed_sequence`].
pub fn mixed_shape(seq: u32) -> Shape {
    Shape::ALL[seq as usize % Shape::ALL.len()]
}

/// The flow (0..[`MIXED_FLOWS`]) of frame `seq` of a [`mixed_sequence`].
pub fn mixed_flow(seq: u32) -> u32 {
    (seq / Shape::ALL.len() as u32) % MIXED_FLOWS
}

/// `n` frames with sequence numbers `0..n`, cycling through [`Shape::ALL`] and
/// spread over [`MIXED_FLOWS`] flows per shape (see the module docs). All fit a
/// 1500-byte MTU. Panics if `n` exceeds `u32::MAX`.
pub fn mixed_sequence(ep: &Endpoints, n: usize) -> Vec<Vec<u8>> {
    let n = u32::try_from(n).expect("n fits u32");
    (0..n)
        .map(|seq| build(mixed_shape(seq), ep, seq, mixed_flow(seq)))
        .collect()
}
