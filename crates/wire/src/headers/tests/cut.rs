//! Headers cut short by the end of the frame (or of the IP datagram):
//! literal frames, smoltcp style. A header cut short is still header, so
//! everything up to the cut is kept; a header whose bytes present already
//! show it is malformed or unsupported is not a header. Apart from the
//! tests on built frames ([`super`]) for size; it uses their builders.

use super::*;
use crate::vxlan;

/// Ethernet, IPv4 (total length 44), TCP (20 bytes, SYN), 4 bytes of data.
static ETH_IPV4_TCP: [u8; 58] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, //
    0x45, 0x00, 0x00, 0x2c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01,
    0x0a, 0x00, 0x00, 0x02, //
    0x30, 0x39, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x50, 0x02, 0xff, 0xff,
    0x00, 0x00, 0x00, 0x00, //
    0x64, 0x61, 0x74, 0x61,
];

/// Ethernet, IPv4 (total length 30), the first 10 bytes of a TCP header,
/// then 16 bytes of Ethernet padding (a NIC pads to 60 bytes).
static ETH_IPV4_TCP10_PADDED: [u8; 60] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, //
    0x45, 0x00, 0x00, 0x1e, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01,
    0x0a, 0x00, 0x00, 0x02, //
    0x30, 0x39, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, //
    0x50, 0x02, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

/// Ethernet, IPv4 (total length 32), UDP (8 bytes), 4 bytes of data.
static ETH_IPV4_UDP: [u8; 46] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, //
    0x45, 0x00, 0x00, 0x20, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01,
    0x0a, 0x00, 0x00, 0x02, //
    0x30, 0x39, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, //
    0x64, 0x61, 0x74, 0x61,
];

/// Ethernet, 802.1Q tag (VID 100, IPv4), IPv4 (total length 28), UDP.
static ETH_VLAN_IPV4_UDP: [u8; 46] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x81, 0x00, //
    0x00, 0x64, 0x08, 0x00, //
    0x45, 0x00, 0x00, 0x1c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01,
    0x0a, 0x00, 0x00, 0x02, //
    0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00,
];

/// Ethernet, IPv6 (payload length 32), hop-by-hop options (8 bytes, PadN),
/// fragment header (offset 0, M set), UDP (8 bytes), 8 bytes of data.
static ETH_IPV6_HBH_FRAG_UDP: [u8; 86] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0xdd, //
    0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x40, //
    0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
    0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, //
    0x2c, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, //
    0x11, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2a, //
    0x30, 0x39, 0x00, 0x35, 0x00, 0x10, 0x00, 0x00, //
    0x64, 0x61, 0x74, 0x61, 0x64, 0x61, 0x74, 0x61,
];

#[test]
fn literal_frames_whole() {
    assert_eq!(hl(&ETH_IPV4_TCP), 54);
    assert_eq!(hl(&ETH_IPV4_UDP), 42);
    assert_eq!(hl(&ETH_VLAN_IPV4_UDP), 46);
    assert_eq!(hl(&ETH_IPV6_HBH_FRAG_UDP), 78);
}

#[test]
fn tcp_header_cut_at_10_bytes_is_kept() {
    // The frame ends 10 bytes into the TCP header.
    assert_eq!(hl(&ETH_IPV4_TCP[..44]), 44);
    // The IP datagram ends 10 bytes into the TCP header; padding follows.
    assert_eq!(hl(&ETH_IPV4_TCP10_PADDED), 44);
    // Cut at 13 bytes: the data offset (5) is present and valid.
    assert_eq!(hl(&ETH_IPV4_TCP[..47]), 47);
    // Cut at 13 bytes with a data offset of 2: malformed, not a header.
    let mut f = ETH_IPV4_TCP;
    f[46] = 0x20;
    assert_eq!(hl(&f[..47]), 34);
    // A TCP header claiming 60 bytes (data offset 15) with 24 present.
    let mut f = ETH_IPV4_TCP;
    f[46] = 0xf0;
    assert_eq!(hl(&f), 58);
}

#[test]
fn udp_header_cut_at_4_bytes_is_kept() {
    assert_eq!(hl(&ETH_IPV4_UDP[..38]), 38);
    assert_eq!(hl(&ETH_IPV4_UDP[..35]), 35);
    assert_eq!(hl(&ETH_IPV4_UDP[..34]), 34);
    // UDP to the VXLAN port: a VXLAN header cut short is kept when the
    // byte holding the I flag is there and has it set.
    let mut f = ETH_IPV4_UDP.to_vec();
    f[36..38].copy_from_slice(&vxlan::UDP_PORT.to_be_bytes());
    f[42] = 0x08;
    assert_eq!(hl(&f), 46);
    f[42] = 0x00;
    assert_eq!(hl(&f), 42);
}

#[test]
fn ipv4_header_cut_at_12_bytes_is_kept() {
    assert_eq!(hl(&ETH_IPV4_UDP[..26]), 26);
    assert_eq!(hl(&ETH_IPV4_UDP[..15]), 15);
    // An IHL claiming 60 bytes with 20 present (then UDP).
    let mut f = ETH_IPV4_UDP;
    f[14] = 0x4f;
    assert_eq!(hl(&f), 46);
    // The first byte shows a wrong version or an IHL below 5.
    let mut f = ETH_IPV4_UDP;
    f[14] = 0x65;
    assert_eq!(hl(&f[..26]), 14);
    f[14] = 0x43;
    assert_eq!(hl(&f[..26]), 14);
}

#[test]
fn ethernet_and_vlan_cut_are_kept() {
    assert_eq!(hl(&ETH_IPV4_TCP[..10]), 10);
    assert_eq!(hl(&ETH_IPV4_TCP[..1]), 1);
    // VLAN tag cut after 2 bytes.
    assert_eq!(hl(&ETH_VLAN_IPV4_UDP[..16]), 16);
    assert_eq!(hl(&ETH_VLAN_IPV4_UDP[..14]), 14);
    // IPv4 under the tag cut at 12 bytes.
    assert_eq!(hl(&ETH_VLAN_IPV4_UDP[..30]), 30);
}

#[test]
fn ipv6_and_extension_headers_cut_are_kept() {
    // IPv6 fixed header cut at 30 bytes.
    assert_eq!(hl(&ETH_IPV6_HBH_FRAG_UDP[..44]), 44);
    // Hop-by-hop header cut at 4 bytes, fragment header cut at 6.
    assert_eq!(hl(&ETH_IPV6_HBH_FRAG_UDP[..58]), 58);
    assert_eq!(hl(&ETH_IPV6_HBH_FRAG_UDP[..68]), 68);
    // UDP after them cut at 4.
    assert_eq!(hl(&ETH_IPV6_HBH_FRAG_UDP[..74]), 74);
    // Wrong version in the first byte: not IPv6.
    let mut f = ETH_IPV6_HBH_FRAG_UDP;
    f[14] = 0x40;
    assert_eq!(hl(&f[..44]), 14);
    // An AH (instead of the fragment header) with length 0 (malformed)
    // cut short is not a header.
    let mut f = ETH_IPV6_HBH_FRAG_UDP;
    f[54] = 51;
    f[63] = 0;
    assert_eq!(hl(&f[..68]), 62);
    // AH with a valid length (24 bytes) cut short is kept.
    f[63] = 4;
    assert_eq!(hl(&f[..68]), 68);
}

#[test]
fn other_headers_cut_are_kept() {
    // ICMP echo header cut at 5 bytes.
    let mut f = ETH_IPV4_UDP;
    f[23] = 1;
    f[34..42].copy_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
    assert_eq!(hl(&f[..39]), 39);
    // ICMP error whose quoted IPv4 header is cut at 4 bytes.
    let mut e = ETH_IPV4_UDP[..34].to_vec();
    e[23] = 1;
    e.extend_from_slice(&[11, 0, 0, 0, 0, 0, 0, 0]);
    e.extend_from_slice(&ETH_IPV4_UDP[14..18]);
    let tl = (e.len() - 14) as u16;
    e[16..18].copy_from_slice(&tl.to_be_bytes());
    assert_eq!(hl(&e), 46);
    // ... and whose quoted transport header is cut at 4 bytes.
    let mut e = ETH_IPV4_UDP[..34].to_vec();
    e[23] = 1;
    e.extend_from_slice(&[11, 0, 0, 0, 0, 0, 0, 0]);
    e.extend_from_slice(&ETH_IPV4_UDP[14..38]);
    let tl = (e.len() - 14) as u16;
    e[16..18].copy_from_slice(&tl.to_be_bytes());
    assert_eq!(hl(&e), 66);
    // ARP cut at 20 bytes.
    let arp = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0,
        0, 0, 0, 10, 0, 0, 2,
    ];
    assert_eq!(hl(&eth(0x0806, &arp[..20])), 34);
    // MPLS label cut at 2 bytes.
    assert_eq!(hl(&eth(0x8847, &[0x00, 0x01])), 16);
    // GRE with key cut at 6 bytes; with the routing bit, not a header.
    let g = [0x20, 0x00, 0x08, 0x00, 0, 0];
    let mut f = ETH_IPV4_UDP[..34].to_vec();
    f[23] = 47;
    f.extend_from_slice(&g);
    assert_eq!(hl(&f), 40);
    f[34] = 0x40;
    assert_eq!(hl(&f), 34);
    f[34] = 0x00;
    f[35] = 0x02; // version 2
    assert_eq!(hl(&f), 34);
    // ESP and SCTP cut at 4 bytes.
    let mut f = ETH_IPV4_UDP[..38].to_vec();
    f[23] = 50;
    assert_eq!(hl(&f), 38);
    f[23] = 132;
    assert_eq!(hl(&f), 38);
}

#[test]
fn ethernet_padding_not_a_header() {
    // 60-byte frame with IPv4/UDP with 2 bytes payload, padded.
    let mut f = eth(0x0800, &ipv4(17, &udp(4789, &[1, 2])));
    f.resize(60, 0x08); // padding that would look like a VXLAN I flag
    assert_eq!(hl(&f), 42);
    // IPv6 payload_len confines the extension chain.
    let mut ip = ipv6(0, &ext(6, 0, &[]));
    ip.extend_from_slice(&tcp(0, &[]));
    let f = eth(0x86dd, &ip);
    assert_eq!(hl(&f), 62);
}
