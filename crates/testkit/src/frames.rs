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

// ---------------------------------------------------------------------------
// Builders

/// IPv4/UDP with a payload of `payload_len` bytes (0..=1472 fits a 1500 MTU).
pub fn udp4(ep: &Endpoints, seq: u32, sport: u16, dport: u16, payload_len: usize) -> Vec<u8> {
    check_udp4_len(payload_len);
    let payload = tagged_payload(seq, payload_len);
    let l4 = udp_segment(ep.src_ip.into(), ep.dst_ip.into(), sport, dport, &payload);
    let f = ipv4_frame(ep, &V4::simple(ep, proto::UDP, seq as u16), &l4);
    finish(f, seq, payload_len)
}

/// IPv4/TCP SYN carrying [`TCP_SYN_OPTIONS`] (MSS, SACK-permitted, timestamps, NOP,
/// window scale: data offset 10) and `payload_len` bytes of data.
pub fn tcp4_with_options(
    ep: &Endpoints,
    seq: u32,
    sport: u16,
    dport: u16,
    payload_len: usize,
) -> Vec<u8> {
    let payload = tagged_payload(seq, payload_len);
    let l4 = tcp_segment(
        ep.src_ip.into(),
        ep.dst_ip.into(),
        sport,
        dport,
        seq.wrapping_mul(1000),
        0x02,
        &TCP_SYN_OPTIONS,
        &payload,
    );
    let f = ipv4_frame(ep, &V4::simple(ep, proto::TCP, seq as u16), &l4);
    finish(f, seq, payload_len)
}

/// IPv4 options used by [`ipv4_with_options`]: NOP then an empty record-route
/// option with two slots (IHL 8).
pub const IPV4_OPTIONS: [u8; 12] = [1, 7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0];

/// IPv4 with IP options ([`IPV4_OPTIONS`]: NOP + record route) carrying UDP.
pub fn ipv4_with_options(
    ep: &Endpoints,
    seq: u32,
    sport: u16,
    dport: u16,
    payload_len: usize,
) -> Vec<u8> {
    check_udp4_len(payload_len);
    let payload = tagged_payload(seq, payload_len);
    let l4 = udp_segment(ep.src_ip.into(), ep.dst_ip.into(), sport, dport, &payload);
    let mut v4 = V4::simple(ep, proto::UDP, seq as u16);
    v4.options = IPV4_OPTIONS.to_vec();
    finish(ipv4_frame(ep, &v4, &l4), seq, payload_len)
}

/// ICMP echo request with identifier `ident`, sequence field `seq as u16`.
pub fn icmp4_echo(ep: &Endpoints, seq: u32, ident: u16, payload_len: usize) -> Vec<u8> {
    let mut m = vec![8, 0, 0, 0];
    m.extend_from_slice(&ident.to_be_bytes());
    m.extend_from_slice(&(seq as u16).to_be_bytes());
    m.extend_from_slice(&tagged_payload(seq, payload_len));
    let c = internet_checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let f = ipv4_frame(ep, &V4::simple(ep, proto::ICMP, seq as u16), &m);
    finish(f, seq, payload_len)
}

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOp {
    /// Request (1): broadcast, "who has `dst_ip`".
    Request,
    /// Reply (2): unicast to `dst_mac`, "`src_ip` is at `src_mac`".
    Reply,
}

/// An ARP request or reply for IPv4 over Ethernet (42 bytes + tag in the padding).
pub fn arp(ep: &Endpoints, seq: u32, op: ArpOp) -> Vec<u8> {
    let (dst, target_mac, code) = match op {
        ArpOp::Request => ([0xff; 6], [0; 6], 1u16),
        ArpOp::Reply => (ep.dst_mac, ep.dst_mac, 2u16),
    };
    let mut f = eth(dst, ep.src_mac, ethertype::ARP);
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4]);
    f.extend_from_slice(&code.to_be_bytes());
    f.extend_from_slice(&ep.src_mac);
    f.extend_from_slice(&ep.src_ip.octets());
    f.extend_from_slice(&target_mac);
    f.extend_from_slice(&ep.dst_ip.octets());
    trailer_tag(f, seq)
}

/// Payload bytes carried by [`ipv4_fragment_first`] after the UDP header.
pub const FRAG_FIRST_DATA: usize = 24;
/// Fragment offset (in 8-byte units) of [`ipv4_fragment_later`].
pub const FRAG_LATER_OFFSET: u16 = 4;

/// First fragment of a UDP datagram (MF set, offset 0): the UDP header, whose
/// length claims a 64-byte payload, and 24 payload bytes starting with the tag.
pub fn ipv4_fragment_first(
    ep: &Endpoints,
    seq: u32,
    sport: u16,
    dport: u16,
    frag_id: u16,
) -> Vec<u8> {
    let payload = tagged_payload(seq, 64);
    let full = udp_segment(ep.src_ip.into(), ep.dst_ip.into(), sport, dport, &payload);
    let mut v4 = V4::simple(ep, proto::UDP, frag_id);
    v4.frag = 0x2000; // MF
    pad_to_min(ipv4_frame(ep, &v4, &full[..8 + FRAG_FIRST_DATA]))
}

/// A non-first, last fragment (MF clear, offset [`FRAG_LATER_OFFSET`] = 32 bytes) of
/// a UDP datagram: 40 bytes of payload starting with the tag, no UDP header.
pub fn ipv4_fragment_later(ep: &Endpoints, seq: u32, frag_id: u16) -> Vec<u8> {
    let data = tagged_payload(seq, 40);
    let mut v4 = V4::simple(ep, proto::UDP, frag_id);
    v4.frag = FRAG_LATER_OFFSET;
    pad_to_min(ipv4_frame(ep, &v4, &data))
}

fn ipv6_frame(ep: &Endpoints, next: u8, flow_label: u32, body: &[u8]) -> Vec<u8> {
    let mut f = eth(ep.dst_mac, ep.src_mac, ethertype::IPV6);
    let w = (6u32 << 28) | (flow_label & 0xf_ffff);
    f.extend_from_slice(&w.to_be_bytes());
    f.extend_from_slice(&(body.len() as u16).to_be_bytes());
    f.push(next);
    f.push(64);
    f.extend_from_slice(&ep.src_ip6.octets());
    f.extend_from_slice(&ep.dst_ip6.octets());
    f.extend_from_slice(body);
    f
}

/// IPv6/UDP with a payload of `payload_len` bytes (flow label 0).
pub fn udp6(ep: &Endpoints, seq: u32, sport: u16, dport: u16, payload_len: usize) -> Vec<u8> {
    let payload = tagged_payload(seq, payload_len);
    let l4 = udp_segment(ep.src_ip6.into(), ep.dst_ip6.into(), sport, dport, &payload);
    finish(ipv6_frame(ep, proto::UDP, 0, &l4), seq, payload_len)
}

/// IPv6 then, in this order, hop-by-hop options (PadN), destination options (PadN),
/// a routing header of `routing_type` (0: one address, or 4: a segment routing
/// header with one segment; other values are sent as type 0 layout with that type),
/// an atomic fragment header (offset 0, M clear), an authentication header (96-bit
/// ICV), and finally TCP (ACK|PSH, no options) with `payload_len` bytes.
///
/// The routing header has segments left 0 and holds the IPv6 destination, so the
/// TCP checksum is over the ordinary pseudo header.
pub fn ipv6_ext_tcp(
    ep: &Endpoints,
    seq: u32,
    sport: u16,
    dport: u16,
    routing_type: u8,
    payload_len: usize,
) -> Vec<u8> {
    // Segments left is 0, so the routing header is fully processed: its address is
    // the final destination, which is the IPv6 destination itself.
    let final_dst = ep.dst_ip6;
    let payload = tagged_payload(seq, payload_len);
    let tcp = tcp_segment(
        ep.src_ip6.into(),
        final_dst.into(),
        sport,
        dport,
        seq.wrapping_mul(1000),
        0x18,
        &[],
        &payload,
    );
    let mut b = Vec::new();
    // Hop-by-hop: next = dstopts, len 0 (8 bytes), PadN of 4 data bytes.
    b.extend_from_slice(&[proto::DSTOPTS, 0, 1, 4, 0, 0, 0, 0]);
    // Destination options: next = routing, PadN.
    b.extend_from_slice(&[proto::ROUTING, 0, 1, 4, 0, 0, 0, 0]);
    // Routing header with one address: hdr ext len 2 (24 bytes).
    if routing_type == 4 {
        // SRH: segments left 0, last entry 0, flags 0, tag 0, segment list[0].
        b.extend_from_slice(&[proto::FRAGMENT, 2, 4, 0, 0, 0, 0, 0]);
    } else {
        // Type 0: segments left 0, reserved.
        b.extend_from_slice(&[proto::FRAGMENT, 2, routing_type, 0, 0, 0, 0, 0]);
    }
    b.extend_from_slice(&final_dst.octets());
    // Fragment: next = AH, offset 0, M = 0, identification = seq.
    b.extend_from_slice(&[proto::AH, 0, 0, 0]);
    b.extend_from_slice(&seq.to_be_bytes());
    // AH: next = TCP, payload len 4 ((24 / 4) - 2), reserved, SPI, sequence, ICV.
    b.extend_from_slice(&[proto::TCP, 4, 0, 0]);
    b.extend_from_slice(&0x0000_1000u32.to_be_bytes());
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(&[0xa5; 12]);
    b.extend_from_slice(&tcp);
    finish(ipv6_frame(ep, proto::HOPOPT, 0, &b), seq, payload_len)
}

/// ICMPv6 echo request with identifier `ident`, sequence field `seq as u16`.
pub fn icmp6_echo(ep: &Endpoints, seq: u32, ident: u16, payload_len: usize) -> Vec<u8> {
    let mut m = vec![128, 0, 0, 0];
    m.extend_from_slice(&ident.to_be_bytes());
    m.extend_from_slice(&(seq as u16).to_be_bytes());
    m.extend_from_slice(&tagged_payload(seq, payload_len));
    let c = l4_checksum(ep.src_ip6.into(), ep.dst_ip6.into(), proto::ICMPV6, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    finish(ipv6_frame(ep, proto::ICMPV6, 0, &m), seq, payload_len)
}

/// The endpoints the other way round.
fn reversed(ep: &Endpoints) -> Endpoints {
    Endpoints {
        src_mac: ep.dst_mac,
        dst_mac: ep.src_mac,
        src_ip: ep.dst_ip,
        dst_ip: ep.src_ip,
        src_ip6: ep.dst_ip6,
        dst_ip6: ep.src_ip6,
    }
}

/// ICMP port unreachable (type 3, code 3) sent `ep.src_ip` → `ep.dst_ip`,
/// quoting the whole IPv4 datagram of a [`udp4`] frame that went the other
/// way (tagged with `seq`, payload `payload_len` bytes), as Linux quotes
/// datagrams up to 576 bytes.
pub fn icmp4_port_unreachable(
    ep: &Endpoints,
    seq: u32,
    sport: u16,
    dport: u16,
    payload_len: usize,
) -> Vec<u8> {
    let quoted = udp4(&reversed(ep), seq, dport, sport, payload_len);
    let ip_len = usize::from(u16::from_be_bytes([quoted[16], quoted[17]]));
    let mut m = vec![3, 3, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&quoted[14..14 + ip_len]);
    let c = internet_checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    pad_to_min(ipv4_frame(ep, &V4::simple(ep, proto::ICMP, seq as u16), &m))
}

/// ICMPv6 port unreachable (type 1, code 4) sent `ep.src_ip6` →
/// `ep.dst_ip6`, quoting the whole IPv6 packet of a [`udp6`] frame that went
/// the other way.
pub fn icmp6_port_unreachable(
    ep: &Endpoints,
    seq: u32,
    sport: u16,
    dport: u16,
    payload_len: usize,
) -> Vec<u8> {
    let quoted = udp6(&reversed(ep), seq, dport, sport, payload_len);
    let ip_len = 40 + usize::from(u16::from_be_bytes([quoted[18], quoted[19]]));
    let mut m = vec![1, 4, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&quoted[14..14 + ip_len]);
    let c = l4_checksum(ep.src_ip6.into(), ep.dst_ip6.into(), proto::ICMPV6, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    pad_to_min(ipv6_frame(ep, proto::ICMPV6, 0, &m))
}

/// Inserts VLAN tags after the MAC addresses: `tags` outermost first, each
/// `(tpid, tci)`.
pub fn insert_vlan_tags(frame: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&frame[12..]);
    f
}

/// 802.1Q-tagged IPv4/UDP: VLAN id `vid` (1..=4094, priority 0).
pub fn vlan_udp4(
    ep: &Endpoints,
    seq: u32,
    vid: u16,
    sport: u16,
    dport: u16,
    payload_len: usize,
) -> Vec<u8> {
    let f = udp4(ep, seq, sport, dport, payload_len);
    insert_vlan_tags(&f, &[(ethertype::VLAN, vid & 0x0fff)])
}

/// QinQ IPv4/UDP: outer 802.1ad tag (0x88a8) `outer_vid`, inner 802.1Q `inner_vid`.
pub fn qinq_udp4(
    ep: &Endpoints,
    seq: u32,
    outer_vid: u16,
    inner_vid: u16,
    sport: u16,
    dport: u16,
    payload_len: usize,
) -> Vec<u8> {
    let f = udp4(ep, seq, sport, dport, payload_len);
    insert_vlan_tags(
        &f,
        &[
            (ethertype::QINQ, outer_vid & 0x0fff),
            (ethertype::VLAN, inner_vid & 0x0fff),
        ],
    )
}

/// IPv4/SCTP: common header (verification tag 0x5c7b0001, CRC32c) and one DATA
/// chunk (TSN = seq, stream 0, PPID 0) with `payload_len` bytes of user data,
/// padded to 4 bytes.
pub fn sctp4(ep: &Endpoints, seq: u32, sport: u16, dport: u16, payload_len: usize) -> Vec<u8> {
    let data = tagged_payload(seq, payload_len);
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&0x5c7b_0001u32.to_be_bytes());
    s.extend_from_slice(&[0, 0, 0, 0]);
    // DATA chunk: type 0, flags B|E (0x03), length 16 + data (unpadded).
    s.extend_from_slice(&[0, 0x03]);
    s.extend_from_slice(&((16 + data.len()) as u16).to_be_bytes());
    s.extend_from_slice(&seq.to_be_bytes()); // TSN
    s.extend_from_slice(&[0, 0, 0, 0]); // stream id, stream seq
    s.extend_from_slice(&[0, 0, 0, 0]); // PPID
    s.extend_from_slice(&data);
    while s.len() % 4 != 0 {
        s.push(0);
    }
    let c = crc32c(&s);
    s[8..12].copy_from_slice(&c.to_le_bytes());
    let f = ipv4_frame(ep, &V4::simple(ep, proto::SCTP, seq as u16), &s);
    finish(f, seq, payload_len)
}

/// GRE (RFC 2890, key present) over IPv4 carrying IPv4/UDP between 198.19.x.1 and
/// 198.19.x.2 with ports `sport`/`dport` and a `payload_len`-byte payload.
pub fn gre_udp4(
    ep: &Endpoints,
    seq: u32,
    key: u32,
    sport: u16,
    dport: u16,
    payload_len: usize,
) -> Vec<u8> {
    let inner_ep = ep.inner();
    let inner = udp4(&inner_ep, seq, sport, dport, payload_len.max(TAG_LEN));
    // Strip the inner Ethernet header (and any padding beyond the IP packet).
    let ip_len = usize::from(u16::from_be_bytes([inner[16], inner[17]]));
    let inner_ip = &inner[14..14 + ip_len];
    let mut g = vec![0x20, 0x00];
    g.extend_from_slice(&ethertype::IPV4.to_be_bytes());
    g.extend_from_slice(&key.to_be_bytes());
    g.extend_from_slice(inner_ip);
    pad_to_min(ipv4_frame(ep, &V4::simple(ep, proto::GRE, seq as u16), &g))
}

/// VXLAN (outer IPv4/UDP from `sport` to [`VXLAN_PORT`], VNI `vni`) carrying an
/// inner Ethernet/IPv4/UDP frame (ports 5000 → 6000, `payload_len` bytes).
pub fn vxlan(ep: &Endpoints, seq: u32, vni: u32, sport: u16, payload_len: usize) -> Vec<u8> {
    let inner = udp4(&ep.inner(), seq, 5000, 6000, payload_len.max(TAG_LEN));
    let ip_len = usize::from(u16::from_be_bytes([inner[16], inner[17]]));
    let inner = &inner[..14 + ip_len];
    let mut v = vec![0x08, 0, 0, 0];
    v.extend_from_slice(&((vni & 0xff_ffff) << 8).to_be_bytes());
    v.extend_from_slice(inner);
    let l4 = udp_segment(ep.src_ip.into(), ep.dst_ip.into(), sport, VXLAN_PORT, &v);
    pad_to_min(ipv4_frame(ep, &V4::simple(ep, proto::UDP, seq as u16), &l4))
}

/// IPv4/UDP whose IPv4 total length claims 1000 bytes while the frame carries only
/// a 20-byte payload (starting with the tag): a truncated packet.
pub fn truncated_ipv4(ep: &Endpoints, seq: u32, sport: u16, dport: u16) -> Vec<u8> {
    let payload = tagged_payload(seq, 20);
    let l4 = udp_segment(ep.src_ip.into(), ep.dst_ip.into(), sport, dport, &payload);
    let mut v4 = V4::simple(ep, proto::UDP, seq as u16);
    v4.total_len_override = Some(1000);
    pad_to_min(ipv4_frame(ep, &v4, &l4))
}

/// IPv4/TCP whose TCP header is cut after 12 bytes (before the data offset); the
/// IPv4 total length matches (32), the tag is in the Ethernet trailer.
pub fn truncated_tcp(ep: &Endpoints, seq: u32, sport: u16, dport: u16) -> Vec<u8> {
    tcp_header_cut(ep, seq, sport, dport, 12)
}

/// IPv4/TCP whose packet ends `keep` bytes (at most 20) into its TCP header (a
/// SYN): the IPv4 total length is 20 + `keep`, the tag is in the Ethernet trailer.
/// Its protocol headers are `14 + 20 + keep` bytes: a header cut short by the end
/// of the packet is still header.
pub fn tcp_header_cut(ep: &Endpoints, seq: u32, sport: u16, dport: u16, keep: usize) -> Vec<u8> {
    let tcp = tcp_segment(
        ep.src_ip.into(),
        ep.dst_ip.into(),
        sport,
        dport,
        seq,
        0x02,
        &[],
        &[],
    );
    let f = ipv4_frame(ep, &V4::simple(ep, proto::TCP, seq as u16), &tcp[..keep]);
    trailer_tag(f, seq)
}

/// IPv4/UDP whose packet ends `keep` bytes (at most 8) into its UDP header: the
/// IPv4 total length is 20 + `keep`, the tag is in the Ethernet trailer. Its
/// protocol headers are `14 + 20 + keep` bytes.
pub fn udp_header_cut(ep: &Endpoints, seq: u32, sport: u16, dport: u16, keep: usize) -> Vec<u8> {
    let udp = udp_segment(ep.src_ip.into(), ep.dst_ip.into(), sport, dport, &[]);
    let f = ipv4_frame(ep, &V4::simple(ep, proto::UDP, seq as u16), &udp[..keep]);
    trailer_tag(f, seq)
}

/// Malformed IPv4: IHL 3 (12 bytes, below the 20-byte minimum); the rest is a
/// normal 20-byte header and a UDP datagram with a tagged 16-byte payload.
pub fn malformed_ihl(ep: &Endpoints, seq: u32, sport: u16, dport: u16) -> Vec<u8> {
    let payload = tagged_payload(seq, 16);
    let l4 = udp_segment(ep.src_ip.into(), ep.dst_ip.into(), sport, dport, &payload);
    let mut v4 = V4::simple(ep, proto::UDP, seq as u16);
    v4.ihl_override = Some(3);
    pad_to_min(ipv4_frame(ep, &v4, &l4))
}

/// Malformed TCP: data offset 2 (8 bytes, below the 20-byte minimum), with a tagged
/// 16-byte payload after the 20-byte header.
pub fn malformed_tcp_offset(ep: &Endpoints, seq: u32, sport: u16, dport: u16) -> Vec<u8> {
    let payload = tagged_payload(seq, 16);
    let mut tcp = tcp_segment(
        ep.src_ip.into(),
        ep.dst_ip.into(),
        sport,
        dport,
        seq,
        0x18,
        &[],
        &payload,
    );
    tcp[12] = 2 << 4;
    tcp[16..18].copy_from_slice(&[0, 0]);
    let c = l4_checksum(ep.src_ip.into(), ep.dst_ip.into(), proto::TCP, &tcp);
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    pad_to_min(ipv4_frame(
        ep,
        &V4::simple(ep, proto::TCP, seq as u16),
        &tcp,
    ))
}

/// A runt: IPv4/UDP with an empty payload (42 bytes), tag in the trailer, zero
/// padded to 60 bytes as a NIC would.
pub fn runt(ep: &Endpoints, seq: u32, sport: u16, dport: u16) -> Vec<u8> {
    udp4(ep, seq, sport, dport, 0)
}

// ---------------------------------------------------------------------------
// Shapes and mixed sequences

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

// ---------------------------------------------------------------------------
// Flow keys

/// What identifies a flow: every field the kernel's flow dissector may hash, so that
/// frames with equal keys always go to the same fanout member. Fields that do not
/// apply are zero / `None`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// VLAN ids, outermost first (at most 2 kept).
    pub vlans: Vec<u16>,
    /// Ethertype after the VLAN tags.
    pub ethertype: u16,
    /// Source address (ARP: sender protocol address).
    pub src: Option<IpAddr>,
    /// Destination address (ARP: target protocol address).
    pub dst: Option<IpAddr>,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// Transport protocol (after IPv6 extension headers); ARP: the operation.
    pub proto: u16,
    /// Source port (TCP/UDP/SCTP, first fragment or unfragmented only).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// GRE key or VXLAN VNI.
    pub tunnel_id: u32,
    /// The key of the packet inside a GRE or VXLAN tunnel.
    pub inner: Option<Box<FlowKey>>,
}

/// The [`FlowKey`] of a frame, or `None` when it is shorter than an Ethernet header.
/// Best effort for broken frames: parsing stops at the first bad header, keeping what
/// was parsed so far (so broken frames of one flow still share a key).
pub fn flow_key(frame: &[u8]) -> Option<FlowKey> {
    if frame.len() < 14 {
        return None;
    }
    let mut key = FlowKey {
        vlans: Vec::new(),
        ethertype: 0,
        src: None,
        dst: None,
        flow_label: 0,
        proto: 0,
        src_port: 0,
        dst_port: 0,
        tunnel_id: 0,
        inner: None,
    };
    let mut off = 12;
    let mut et = be16(frame, off)?;
    while et == ethertype::VLAN || et == ethertype::QINQ {
        let tci = be16(frame, off + 2)?;
        if key.vlans.len() < 2 {
            key.vlans.push(tci & 0x0fff);
        }
        off += 4;
        et = be16(frame, off)?;
    }
    key.ethertype = et;
    parse_l3(frame, off + 2, et, &mut key);
    Some(key)
}

fn be16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn ip4_at(b: &[u8], off: usize) -> Option<IpAddr> {
    let o: [u8; 4] = b.get(off..off + 4)?.try_into().ok()?;
    Some(IpAddr::V4(o.into()))
}

fn ip6_at(b: &[u8], off: usize) -> Option<IpAddr> {
    let o: [u8; 16] = b.get(off..off + 16)?.try_into().ok()?;
    Some(IpAddr::V6(o.into()))
}

fn parse_l3(f: &[u8], off: usize, et: u16, key: &mut FlowKey) -> Option<()> {
    match et {
        ethertype::ARP => {
            key.proto = be16(f, off + 6)?;
            key.src = ip4_at(f, off + 14);
            key.dst = ip4_at(f, off + 24);
        }
        ethertype::IPV4 => {
            key.src = ip4_at(f, off + 12);
            key.dst = ip4_at(f, off + 16);
            let b0 = *f.get(off)?;
            key.proto = u16::from(*f.get(off + 9)?);
            let ihl = usize::from(b0 & 0x0f) * 4;
            if b0 >> 4 != 4 || ihl < 20 {
                return None;
            }
            let frag = be16(f, off + 6)?;
            if frag & 0x1fff != 0 {
                return None;
            }
            parse_l4(f, off + ihl, key.proto as u8, key);
        }
        ethertype::IPV6 => {
            key.flow_label = be32(f, off)? & 0xf_ffff;
            key.src = ip6_at(f, off + 8);
            key.dst = ip6_at(f, off + 24);
            let mut next = *f.get(off + 6)?;
            let mut p = off + 40;
            // Walk the extension headers (bounded).
            for _ in 0..8 {
                match next {
                    proto::HOPOPT | proto::ROUTING | proto::DSTOPTS => {
                        next = *f.get(p)?;
                        p += (usize::from(*f.get(p + 1)?) + 1) * 8;
                    }
                    proto::FRAGMENT => {
                        let fo = be16(f, p + 2)?;
                        next = *f.get(p)?;
                        p += 8;
                        if fo & 0xfff8 != 0 {
                            key.proto = u16::from(next);
                            return None;
                        }
                    }
                    proto::AH => {
                        next = *f.get(p)?;
                        p += (usize::from(*f.get(p + 1)?) + 2) * 4;
                    }
                    _ => break,
                }
            }
            key.proto = u16::from(next);
            parse_l4(f, p, next, key);
        }
        _ => {}
    }
    Some(())
}

fn parse_l4(f: &[u8], off: usize, proto: u8, key: &mut FlowKey) -> Option<()> {
    match proto {
        proto::TCP | proto::UDP | proto::SCTP => {
            key.src_port = be16(f, off)?;
            key.dst_port = be16(f, off + 2)?;
            if proto == proto::UDP && key.dst_port == VXLAN_PORT {
                key.tunnel_id = be32(f, off + 12)? >> 8;
                let inner = flow_key(f.get(off + 16..)?)?;
                key.inner = Some(Box::new(inner));
            }
        }
        proto::GRE => {
            let flags = be16(f, off)?;
            let et = be16(f, off + 2)?;
            let mut p = off + 4;
            if flags & 0x8000 != 0 {
                p += 4;
            }
            if flags & 0x2000 != 0 {
                key.tunnel_id = be32(f, p)?;
                p += 4;
            }
            if flags & 0x1000 != 0 {
                p += 4;
            }
            let mut inner = FlowKey {
                vlans: Vec::new(),
                ethertype: et,
                src: None,
                dst: None,
                flow_label: 0,
                proto: 0,
                src_port: 0,
                dst_port: 0,
                tunnel_id: 0,
                inner: None,
            };
            if et == ethertype::TEB {
                inner = flow_key(f.get(p..)?)?;
            } else {
                parse_l3(f, p, et, &mut inner);
            }
            key.inner = Some(Box::new(inner));
        }
        _ => {}
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep() -> Endpoints {
        Endpoints::new([2, 0x52, 0x43, 0, 0, 2], [2, 0x52, 0x43, 0, 0, 1])
    }

    #[test]
    fn seq_round_trip_every_shape() {
        for (i, shape) in Shape::ALL.iter().enumerate() {
            for seq in [0u32, 1, 0xdead_beef, u32::MAX, i as u32 * 7919] {
                let f = build(*shape, &ep(), seq, 3);
                assert_eq!(seq_of(&f), Some(seq), "{shape:?} seq {seq}");
                assert!(f.len() >= MIN_FRAME_LEN, "{shape:?} len {}", f.len());
            }
        }
        assert_eq!(seq_of(&[0u8; 60]), None);
        assert_eq!(seq_of(&SEQ_MARKER), None);
    }

    #[test]
    fn udp4_lengths_and_checksums() {
        for len in [0usize, 1, 7, 8, 9, 18, 100, MAX_UDP4_PAYLOAD] {
            let f = udp4(&ep(), 42, 1234, 5678, len);
            let ip = &f[14..];
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            assert_eq!(total, 20 + 8 + len);
            assert_eq!(internet_checksum(&ip[..20]), 0, "ip checksum");
            let udp = &ip[20..total];
            assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), 8 + len);
            let c = l4_checksum(ep().src_ip.into(), ep().dst_ip.into(), proto::UDP, udp);
            assert_eq!(c, 0, "udp checksum verifies to 0");
            let expect = if len < TAG_LEN {
                MIN_FRAME_LEN.max(14 + total + TAG_LEN)
            } else {
                MIN_FRAME_LEN.max(14 + total)
            };
            assert_eq!(f.len(), expect, "len {len}");
            assert_eq!(seq_of(&f), Some(42));
        }
        assert_eq!(udp4(&ep(), 0, 1, 2, MAX_UDP4_PAYLOAD).len(), 1514);
    }

    #[test]
    fn ipv4_header_checksums_valid_where_expected() {
        for shape in Shape::ALL {
            let f = build(shape, &ep(), 77, 1);
            let mut off = 12;
            while matches!(be16(&f, off), Some(ethertype::VLAN | ethertype::QINQ)) {
                off += 4;
            }
            if be16(&f, off) != Some(ethertype::IPV4) || shape == Shape::MalformedIhl {
                continue;
            }
            let ip = &f[off + 2..];
            let ihl = usize::from(ip[0] & 0xf) * 4;
            assert_eq!(internet_checksum(&ip[..ihl]), 0, "{shape:?}");
        }
    }

    #[test]
    fn tcp_checksums_and_options() {
        let f = tcp4_with_options(&ep(), 9, 1, 2, 30);
        let ip = &f[14..];
        assert_eq!(ip[20 + 12] >> 4, 10);
        assert_eq!(&ip[40..60], &TCP_SYN_OPTIONS);
        let seg = &ip[20..20 + 40 + 30];
        assert_eq!(
            l4_checksum(ep().src_ip.into(), ep().dst_ip.into(), proto::TCP, seg),
            0
        );
        assert_eq!(f.len(), 14 + 20 + 40 + 30);
    }

    #[test]
    fn icmp6_and_udp6_checksums() {
        let e = ep();
        let f = icmp6_echo(&e, 5, 1, 20);
        assert_eq!(
            l4_checksum(e.src_ip6.into(), e.dst_ip6.into(), proto::ICMPV6, &f[54..]),
            0
        );
        let f = udp6(&e, 5, 1, 2, 20);
        assert_eq!(
            l4_checksum(e.src_ip6.into(), e.dst_ip6.into(), proto::UDP, &f[54..]),
            0
        );
        assert_eq!(f.len(), 14 + 40 + 8 + 20);
    }

    #[test]
    fn sctp_crc32c_known_answer() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn vlan_and_qinq_layout() {
        let f = vlan_udp4(&ep(), 1, 123, 1, 2, 10);
        assert_eq!(be16(&f, 12), Some(0x8100));
        assert_eq!(be16(&f, 14), Some(123));
        assert_eq!(be16(&f, 16), Some(0x0800));
        let f = qinq_udp4(&ep(), 1, 300, 123, 1, 2, 10);
        assert_eq!(be16(&f, 12), Some(0x88a8));
        assert_eq!(be16(&f, 14), Some(300));
        assert_eq!(be16(&f, 16), Some(0x8100));
        assert_eq!(be16(&f, 18), Some(123));
        let k = flow_key(&f).unwrap();
        assert_eq!(k.vlans, vec![300, 123]);
        assert_eq!((k.src_port, k.dst_port), (1, 2));
    }

    #[test]
    fn broken_shapes_are_broken() {
        let f = truncated_ipv4(&ep(), 1, 1, 2);
        assert_eq!(be16(&f, 16), Some(1000));
        assert!(f.len() < 14 + 1000);
        let f = truncated_tcp(&ep(), 1, 1, 2);
        assert_eq!(be16(&f, 16), Some(32));
        let f = tcp_header_cut(&ep(), 7, 1, 2, 10);
        assert_eq!(be16(&f, 16), Some(30));
        assert_eq!(f.len(), 60);
        assert_eq!(seq_of(&f), Some(7));
        let f = udp_header_cut(&ep(), 8, 1, 2, 4);
        assert_eq!(be16(&f, 16), Some(24));
        assert_eq!(f[14 + 9], proto::UDP);
        assert_eq!(seq_of(&f), Some(8));
        let f = malformed_ihl(&ep(), 1, 1, 2);
        assert_eq!(f[14] & 0xf, 3);
        let f = malformed_tcp_offset(&ep(), 1, 1, 2);
        assert_eq!(f[14 + 20 + 12] >> 4, 2);
        let f = runt(&ep(), 1, 1, 2);
        assert_eq!(f.len(), 60);
        assert_eq!(be16(&f, 16), Some(28));
    }

    #[test]
    fn fragments() {
        let f = ipv4_fragment_first(&ep(), 3, 1, 2, 77);
        assert_eq!(be16(&f, 20), Some(0x2000));
        assert_eq!(be16(&f, 16), Some(20 + 8 + FRAG_FIRST_DATA as u16));
        let f = ipv4_fragment_later(&ep(), 3, 77);
        assert_eq!(be16(&f, 20), Some(FRAG_LATER_OFFSET));
        assert_eq!(be16(&f, 18), Some(77));
        let k = flow_key(&f).unwrap();
        assert_eq!((k.proto, k.src_port), (u16::from(proto::UDP), 0));
    }

    #[test]
    fn ipv6_ext_headers_are_walked() {
        for rt in [0u8, 4] {
            let f = ipv6_ext_tcp(&ep(), 11, 1111, 2222, rt, 30);
            let k = flow_key(&f).unwrap();
            assert_eq!(k.proto, u16::from(proto::TCP));
            assert_eq!((k.src_port, k.dst_port), (1111, 2222));
            assert_eq!(seq_of(&f), Some(11));
            let e = ep();
            let tcp = &f[f.len() - 20 - 30..];
            assert_eq!(
                l4_checksum(e.src_ip6.into(), e.dst_ip6.into(), proto::TCP, tcp),
                0
            );
        }
    }

    #[test]
    fn tunnels_have_inner_keys() {
        let f = gre_udp4(&ep(), 1, 0xabcd, 1, 2, 10);
        let k = flow_key(&f).unwrap();
        assert_eq!(k.tunnel_id, 0xabcd);
        let inner = k.inner.unwrap();
        assert_eq!((inner.src_port, inner.dst_port), (1, 2));
        let f = vxlan(&ep(), 1, 0x1234, 40000, 10);
        let k = flow_key(&f).unwrap();
        assert_eq!(k.tunnel_id, 0x1234);
        assert_eq!(k.inner.unwrap().dst_port, 6000);
    }

    #[test]
    fn mixed_sequence_flows() {
        let frames = mixed_sequence(&ep(), 500);
        assert_eq!(frames.len(), 500);
        let mut keys = std::collections::HashMap::new();
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(seq_of(f), Some(i as u32));
            assert!(f.len() <= 1514 + 8, "fits MTU: {} {}", i, f.len());
            // Frames of one (shape, flow) have one flow key.
            let seq = i as u32;
            let k = flow_key(f).unwrap();
            let prev = keys.insert((mixed_shape(seq), mixed_flow(seq)), k.clone());
            if let Some(p) = prev {
                assert_eq!(p, k, "seq {seq}");
            }
        }
        // Several flows per shape.
        let udp_keys: std::collections::HashSet<_> = keys
            .iter()
            .filter(|((s, _), _)| *s == Shape::Udp4)
            .map(|(_, k)| k.clone())
            .collect();
        assert_eq!(udp_keys.len(), MIXED_FLOWS as usize);
    }
}
