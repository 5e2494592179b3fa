//! The builders of broken frames: truncated packets, headers cut short by
//! the end of the packet, malformed header lengths and runts (the shapes
//! [`Shape::is_broken`](super::Shape::is_broken) names). Apart from the
//! well-formed builders because tests treat them apart: their checksums
//! are over what is there, and parsers must stop at them.

use super::{
    ipv4_frame, l4_checksum, pad_to_min, proto, tagged_payload, tcp_segment, trailer_tag, udp4,
    udp_segment, Endpoints, V4,
};

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
