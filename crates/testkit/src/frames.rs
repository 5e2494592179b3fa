//! Builders for Ethernet frames of many shapes, each tagged with a sequence number.
//!
//! Every builder takes an [`Endpoints`] (MACs and addresses) and a `seq`, and
//! returns the complete frame as it goes on the wire (no FCS). Each frame carries an
//! 8-byte *tag* — [`SEQ_MARKER`] followed by `seq` as a big-endian `u32` — so that a
//! test can match captured frames to sent ones with [`seq_of`], whatever the frame
//! looks like:
//!
//! * normally the tag is the first 8 bytes of the innermost payload (UDP/TCP/SCTP
//!   data, ICMP echo data, the first bytes after a fragment's headers);
//! * when a frame has no room for it (a UDP payload shorter than 8 bytes, an ARP
//!   packet, a truncated or malformed header) the tag goes right after the end of the
//!   packet, in the Ethernet trailer, where a NIC would put its padding.
//!
//! Every frame is padded with zeros to at least [`MIN_FRAME_LEN`] (60) bytes, as a
//! NIC pads runts. IPv4 header checksums, TCP/UDP/ICMP/ICMPv6 checksums and the SCTP
//! CRC32c are correct (except in the deliberately truncated or malformed shapes,
//! where the checksums are computed over what is there).
//!
//! ## Addresses
//!
//! [`Endpoints`] holds the outer MACs and IPs; the testbed builds one with
//! `Testbed::endpoints()` (peer → capture end, destination IP an *unassigned*
//! address of the testbed's subnet, so the capture namespace's kernel drops the
//! frames silently: no RSTs, echo replies, ARP replies or ICMP errors pollute a
//! capture). Tunnels (GRE, VXLAN) carry inner packets between 198.19.0.0/16
//! addresses; IPv6 shapes use `fd00::/8` addresses.
//!
//! ## Mixed sequences and flows
//!
//! [`mixed_sequence`] builds `n` frames with sequence numbers `0..n`: frame `seq` has
//! shape [`mixed_shape`]`(seq)` (cycling through [`Shape::ALL`]) and belongs to flow
//! [`mixed_flow`]`(seq)` (one of [`MIXED_FLOWS`]); frames of one flow differ only in
//! their sequence-dependent bytes (tag, payload length, IP ID, TCP sequence number,
//! checksums), never in the fields a kernel hashes a flow by. Two ways to group
//! captured frames by flow:
//!
//! * `(mixed_shape(seq), mixed_flow(seq))` — exact, and finer than any kernel flow hash;
//! * [`flow_key`] — parses the headers (VLAN ids, addresses, protocol, ports, flow
//!   label, and the inner packet of a GRE/VXLAN tunnel), so works for any frame.
//!   Frames with the same key hash to the same fanout member (the key contains every
//!   field the kernel's flow dissector hashes), so capture order within a key must be
//!   send order.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod broken;
mod builders;
mod flow_key;
mod shape;
#[cfg(test)]
mod tests;

pub use broken::{
    malformed_ihl, malformed_tcp_offset, runt, tcp_header_cut, truncated_ipv4, truncated_tcp,
    udp_header_cut,
};
pub use builders::{
    arp, gre_udp4, icmp4_echo, icmp4_port_unreachable, icmp6_echo, icmp6_port_unreachable,
    insert_vlan_tags, ipv4_fragment_first, ipv4_fragment_later, ipv4_with_options, ipv6_ext_tcp,
    ipv6_fragment_later, qinq_udp4, sctp4, tcp4_with_options, udp4, udp6, vlan_udp4, vxlan, ArpOp,
    FRAG_FIRST_DATA, FRAG_LATER_OFFSET, IPV4_OPTIONS,
};
pub use flow_key::{flow_key, FlowKey};
pub use shape::{build, mixed_flow, mixed_sequence, mixed_shape, Shape};

/// The 4 bytes that precede the sequence number in every frame's tag.
pub const SEQ_MARKER: [u8; 4] = [0xd1, 0x5e, 0xa5, 0xe9];
/// Length of the tag: marker then big-endian sequence number.
pub const TAG_LEN: usize = 8;
/// Minimum Ethernet frame length without FCS; shorter frames are zero-padded.
pub const MIN_FRAME_LEN: usize = 60;
/// Largest UDP payload in an untagged 1500-byte-MTU IPv4 frame.
pub const MAX_UDP4_PAYLOAD: usize = 1472;
/// Number of flows [`mixed_sequence`] spreads its frames over (per shape).
pub const MIXED_FLOWS: u32 = 4;
/// UDP destination port of VXLAN.
pub const VXLAN_PORT: u16 = 4789;

/// Ethertypes used here.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (outer tag of QinQ).
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// Transparent Ethernet bridging (GRE carrying Ethernet).
    pub const TEB: u16 = 0x6558;
}

/// IP protocol numbers used here.
pub mod proto {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// GRE.
    pub const GRE: u8 = 47;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 destination options.
    pub const DSTOPTS: u8 = 60;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// Outer addresses of a frame: who sends it to whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// Source IPv6 address.
    pub src_ip6: Ipv6Addr,
    /// Destination IPv6 address.
    pub dst_ip6: Ipv6Addr,
}

impl Endpoints {
    /// Endpoints between two MACs, with default addresses 198.18.0.2 → 198.18.0.3 and
    /// fd52:4300::2 → fd52:4300::3.
    pub fn new(src_mac: [u8; 6], dst_mac: [u8; 6]) -> Endpoints {
        Endpoints {
            src_mac,
            dst_mac,
            src_ip: Ipv4Addr::new(198, 18, 0, 2),
            dst_ip: Ipv4Addr::new(198, 18, 0, 3),
            src_ip6: Ipv6Addr::new(0xfd52, 0x4300, 0, 0, 0, 0, 0, 2),
            dst_ip6: Ipv6Addr::new(0xfd52, 0x4300, 0, 0, 0, 0, 0, 3),
        }
    }

    /// The same endpoints with other IPv4 addresses.
    pub fn with_ipv4(mut self, src: Ipv4Addr, dst: Ipv4Addr) -> Endpoints {
        self.src_ip = src;
        self.dst_ip = dst;
        self
    }

    /// The same endpoints with other IPv6 addresses.
    pub fn with_ipv6(mut self, src: Ipv6Addr, dst: Ipv6Addr) -> Endpoints {
        self.src_ip6 = src;
        self.dst_ip6 = dst;
        self
    }

    /// The endpoints of the inner packet of a tunnel: 198.19.x.1 → 198.19.x.2
    /// (x from the outer destination) and made-up MACs.
    fn inner(&self) -> Endpoints {
        let x = self.dst_ip.octets()[2];
        Endpoints {
            src_mac: [0x02, 0x1e, 0x1e, 0, x, 1],
            dst_mac: [0x02, 0x1e, 0x1e, 0, x, 2],
            src_ip: Ipv4Addr::new(198, 19, x, 1),
            dst_ip: Ipv4Addr::new(198, 19, x, 2),
            src_ip6: self.src_ip6,
            dst_ip6: self.dst_ip6,
        }
    }
}

// ---------------------------------------------------------------------------
// Tag and small helpers

/// The 8-byte tag for `seq`: [`SEQ_MARKER`] then `seq` big-endian.
pub fn seq_tag(seq: u32) -> [u8; TAG_LEN] {
    let mut t = [0u8; TAG_LEN];
    t[..4].copy_from_slice(&SEQ_MARKER);
    t[4..].copy_from_slice(&seq.to_be_bytes());
    t
}

/// The sequence number of a frame built here: finds the first [`SEQ_MARKER`] and
/// reads the big-endian `u32` after it. `None` if there is no complete tag.
pub fn seq_of(frame: &[u8]) -> Option<u32> {
    let pos = frame.windows(4).position(|w| w == SEQ_MARKER)?;
    let b = frame.get(pos + 4..pos + 8)?;
    Some(u32::from_be_bytes(b.try_into().ok()?))
}

/// A payload of `len` bytes starting with the tag of `seq` (when `len >= 8`) and
/// filled with a counting pattern. Shorter payloads are filler only.
pub fn tagged_payload(seq: u32, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_add(0x20)).collect();
    if len >= TAG_LEN {
        p[..TAG_LEN].copy_from_slice(&seq_tag(seq));
    }
    p
}

/// Pads `frame` with zeros to [`MIN_FRAME_LEN`] bytes, as a NIC does.
pub fn pad_to_min(mut frame: Vec<u8>) -> Vec<u8> {
    if frame.len() < MIN_FRAME_LEN {
        frame.resize(MIN_FRAME_LEN, 0);
    }
    frame
}

/// Appends the tag as an Ethernet trailer (after the packet's end), then pads.
fn trailer_tag(mut frame: Vec<u8>, seq: u32) -> Vec<u8> {
    frame.extend_from_slice(&seq_tag(seq));
    pad_to_min(frame)
}

/// Finishes a frame whose payload had length `payload_len`: if the payload was too
/// short for the tag, the tag goes into the trailer; then pads.
fn finish(frame: Vec<u8>, seq: u32, payload_len: usize) -> Vec<u8> {
    if payload_len >= TAG_LEN {
        pad_to_min(frame)
    } else {
        trailer_tag(frame, seq)
    }
}

/// The 16-bit one's-complement Internet checksum of `data` (RFC 1071).
pub fn internet_checksum(data: &[u8]) -> u16 {
    !fold(sum16(0, data))
}

fn sum16(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
        acc = (acc & 0xffff) + (acc >> 16);
    }
    if let [b] = chunks.remainder() {
        acc = acc.wrapping_add(u32::from(*b) << 8);
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// TCP/UDP/ICMPv6 checksum (no 0 → 0xffff mapping for UDP) over an IPv4 or IPv6 pseudo header and `segment`.
pub fn l4_checksum(src: IpAddr, dst: IpAddr, proto: u8, segment: &[u8]) -> u16 {
    let mut acc = 0u32;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = sum16(acc, &s.octets());
            acc = sum16(acc, &d.octets());
            acc = sum16(acc, &[0, proto]);
            acc = sum16(acc, &(segment.len() as u16).to_be_bytes());
        }
        _ => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V6(a) => a.octets(),
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            };
            acc = sum16(acc, &v6(src));
            acc = sum16(acc, &v6(dst));
            acc = sum16(acc, &(segment.len() as u32).to_be_bytes());
            acc = sum16(acc, &[0, 0, 0, proto]);
        }
    }
    !fold(sum16(acc, segment))
}

/// CRC32c (Castagnoli), as SCTP uses; the result is stored little-endian.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(1518);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// IPv4 header fields that vary between shapes.
struct V4 {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    id: u16,
    /// Flags (top 3 bits) and fragment offset in 8-byte units.
    frag: u16,
    options: Vec<u8>,
    /// Value for the total length field; `None` = the real length.
    total_len_override: Option<u16>,
    /// Value for the IHL field; `None` = the real header length / 4.
    ihl_override: Option<u8>,
}

impl V4 {
    fn simple(ep: &Endpoints, proto: u8, id: u16) -> V4 {
        V4 {
            src: ep.src_ip,
            dst: ep.dst_ip,
            proto,
            id,
            frag: 0x4000, // DF
            options: Vec::new(),
            total_len_override: None,
            ihl_override: None,
        }
    }

    /// The header (with options and correct checksum) for a payload of `payload_len`.
    fn header(&self, payload_len: usize) -> Vec<u8> {
        assert!(self.options.len() & 3 == 0 && self.options.len() <= 40);
        let hlen = 20 + self.options.len();
        let ihl = self.ihl_override.unwrap_or((hlen / 4) as u8);
        let total = self
            .total_len_override
            .unwrap_or((hlen + payload_len) as u16);
        let mut h = Vec::with_capacity(hlen);
        h.push(0x40 | (ihl & 0x0f));
        h.push(0);
        h.extend_from_slice(&total.to_be_bytes());
        h.extend_from_slice(&self.id.to_be_bytes());
        h.extend_from_slice(&self.frag.to_be_bytes());
        h.push(64);
        h.push(self.proto);
        h.extend_from_slice(&[0, 0]);
        h.extend_from_slice(&self.src.octets());
        h.extend_from_slice(&self.dst.octets());
        h.extend_from_slice(&self.options);
        let c = internet_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }
}

fn udp_segment(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(8 + payload.len());
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    s.extend_from_slice(&[0, 0]);
    s.extend_from_slice(payload);
    // A computed 0 is sent as 0xffff (0 means "no checksum").
    let c = match l4_checksum(src, dst, proto::UDP, &s) {
        0 => 0xffff,
        c => c,
    };
    s[6..8].copy_from_slice(&c.to_be_bytes());
    s
}

/// A TCP segment; `options` must be a multiple of 4 bytes.
#[allow(clippy::too_many_arguments)]
fn tcp_segment(
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seqno: u32,
    flags: u8,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    assert!(options.len() & 3 == 0 && options.len() <= 40);
    let mut s = Vec::with_capacity(20 + options.len() + payload.len());
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&seqno.to_be_bytes());
    s.extend_from_slice(&0u32.to_be_bytes());
    s.push((((20 + options.len()) / 4) as u8) << 4);
    s.push(flags);
    s.extend_from_slice(&64240u16.to_be_bytes());
    s.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    s.extend_from_slice(options);
    s.extend_from_slice(payload);
    let c = l4_checksum(src, dst, proto::TCP, &s);
    s[16..18].copy_from_slice(&c.to_be_bytes());
    s
}

/// TCP options: MSS 1460, SACK-permitted, timestamps, NOP, window scale 7 (20 bytes).
pub const TCP_SYN_OPTIONS: [u8; 20] = [
    2, 4, 0x05, 0xb4, // MSS
    4, 2, // SACK permitted
    8, 10, 0, 0, 0x12, 0x34, 0, 0, 0, 0, // timestamps
    1, // NOP
    3, 3, 7, // window scale
];

fn ipv4_frame(ep: &Endpoints, v4: &V4, l4: &[u8]) -> Vec<u8> {
    let mut f = eth(ep.dst_mac, ep.src_mac, ethertype::IPV4);
    f.extend_from_slice(&v4.header(l4.len()));
    f.extend_from_slice(l4);
    f
}

fn check_udp4_len(payload_len: usize) {
    assert!(
        payload_len <= 65507,
        "UDP payload {payload_len} too large for IPv4"
    );
}
