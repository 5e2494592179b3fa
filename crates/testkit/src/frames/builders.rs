//! The builders of well-formed frames: IPv4 and IPv6 (UDP, TCP, SCTP,
//! ICMP and ICMPv6, options, fragments, extension headers), ARP, VLAN and
//! QinQ tags, and GRE and VXLAN tunnels. Apart from the shared pieces they
//! are made of (the parent: endpoints, tags, checksums, headers) so that
//! each part reads on its own.

use super::{
    check_udp4_len, crc32c, eth, ethertype, finish, internet_checksum, ipv4_frame, l4_checksum,
    pad_to_min, proto, tagged_payload, tcp_segment, trailer_tag, udp_segment, Endpoints, TAG_LEN,
    TCP_SYN_OPTIONS, V4, VXLAN_PORT,
};

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

/// A non-first, last fragment of an IPv6/UDP datagram: a fragment header
/// (next header UDP, offset [`FRAG_LATER_OFFSET`] = 32 bytes, M clear,
/// identification `frag_id`) and 40 bytes of payload starting with the tag,
/// no UDP header.
pub fn ipv6_fragment_later(ep: &Endpoints, seq: u32, frag_id: u32) -> Vec<u8> {
    let mut b = vec![proto::UDP, 0];
    b.extend_from_slice(&(FRAG_LATER_OFFSET << 3).to_be_bytes());
    b.extend_from_slice(&frag_id.to_be_bytes());
    b.extend_from_slice(&tagged_payload(seq, 40));
    pad_to_min(ipv6_frame(ep, proto::FRAGMENT, 0, &b))
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
