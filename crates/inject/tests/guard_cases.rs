//! The guard's default deny, case by case: each shape a hostile review got
//! through (an IPv6 atomic fragment and an IPv4 later fragment carrying
//! bytes the grant does not let the client choose, IP-in-IP carrying a
//! spoofed inner source) and its relatives are refused with the rule that
//! refused them; a plain frame still goes, with every fixed field written.

mod support;

use ringcap_testkit::frames::{internet_checksum, l4_checksum};
use std::net::{IpAddr, Ipv4Addr};
use support::*;

const UDP: u8 = 17;

fn refused(g: &mut ringcap_inject::Guard, mut frame: Vec<u8>) -> (&'static str, String) {
    match g.check(&mut frame) {
        Ok(_) => panic!("let through: {frame:02x?}"),
        Err(r) => {
            assert!(!r.reason.is_empty());
            (r.rule, r.reason)
        }
    }
}

#[test]
fn an_ipv6_atomic_fragment_is_refused() {
    // Review finding 4: filter "udp", nothing settable; the fragment header
    // (offset 0, M = 0) hid the UDP header from the guard, and the peer's
    // application got an arbitrary payload.
    let mut g = guard("filter = \"udp\"\nmax_packets_per_second = 10\n");
    let mut p = frag6(UDP, 0, false, 0x1234);
    p.extend(udp(5353, 53, b"arbitrary bytes to the application"));
    let (rule, reason) = refused(&mut g, eth(0x86dd, &ip6(44, &p)));
    assert_eq!(rule, "fragment", "{reason}");
    // Non-atomic ones too.
    let mut p = frag6(UDP, 0, true, 0x1234);
    p.extend(udp(5353, 53, &[7; 16]));
    assert_eq!(refused(&mut g, eth(0x86dd, &ip6(44, &p))).0, "fragment");
}

#[test]
fn an_ipv4_fragment_is_refused() {
    // Review finding 4: a later fragment (offset 8 bytes) of a UDP datagram:
    // its bytes were never looked at.
    let mut g = guard("filter = \"udp\"\nmax_packets_per_second = 10\n");
    let later = ipv4([198, 19, 0, 1], PEER_V4, UDP, 64, 0, 5, 1, &[], &[0xaa; 64]);
    let (rule, reason) = refused(&mut g, eth(0x0800, &later));
    assert_eq!(rule, "fragment", "{reason}");
    // A first fragment (MF set) too.
    let first = ipv4(
        V4,
        PEER_V4,
        UDP,
        64,
        0,
        5,
        0x2000,
        &[],
        &udp(1, 2, &[0; 16]),
    );
    assert_eq!(refused(&mut g, eth(0x0800, &first)).0, "fragment");
}

#[test]
fn tunnels_are_refused() {
    // Review finding 5: filter "ip", IP-in-IP with a spoofed inner source.
    let mut g = guard("filter = \"ip\"\nsettable = [\"payload\"]\nmax_packets_per_second = 10\n");
    let inner = ipv4(
        [198, 19, 66, 66],
        [198, 18, 0, 2],
        UDP,
        64,
        0,
        1,
        0,
        &[],
        &udp(5353, 53, b"spoofed query"),
    );
    let (rule, reason) = refused(&mut g, eth(0x0800, &ip4(4, &inner)));
    assert_eq!(rule, "tunnel", "{reason}");
    let inner6 = ip6(UDP, &udp(1, 53, b"x"));
    assert_eq!(refused(&mut g, eth(0x0800, &ip4(41, &inner6))).0, "tunnel");
    let gre_ip = gre(0x0800, &inner);
    assert_eq!(refused(&mut g, eth(0x0800, &ip4(47, &gre_ip))).0, "tunnel");
    // VXLAN: UDP to 4789 with a whole Ethernet frame in its payload.
    let mut g = guard(
        "filter = \"udp\"\nsettable = [\"payload\", \"udp.dport\"]\nmax_packets_per_second = 10\n",
    );
    let frame = eth(0x0800, &inner);
    let v = ip4(UDP, &udp(40000, 4789, &vxlan(42, &frame)));
    assert_eq!(refused(&mut g, eth(0x0800, &v)).0, "tunnel");
    let mut g6 = guard("filter = \"ip6\"\nmax_packets_per_second = 10\n");
    assert_eq!(refused(&mut g6, eth(0x86dd, &ip6(4, &inner))).0, "tunnel");
}

#[test]
fn structure_the_guard_does_not_understand_is_refused() {
    let mut g = guard("filter = \"\"\nsettable = [\"payload\"]\nmax_packets_per_second = 10\n");
    let u = udp(1000, 2000, &[1; 20]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "ipv6-ext",
            eth(0x86dd, &ip6(0, &[ext6(UDP, &[1, 0]), u.clone()].concat())),
        ),
        (
            "ipv6-ext",
            eth(
                0x86dd,
                &ip6(43, &[ext6(UDP, &[0, 0, 0, 0]), u.clone()].concat()),
            ),
        ),
        (
            "ipv6-ext",
            eth(0x86dd, &ip6(60, &[ext6(UDP, &[1, 0]), u.clone()].concat())),
        ),
        ("protocol", eth(0x86dd, &ip6(59, &[0; 8]))),
        ("malformed", eth(0x86dd, &ip6(59, &[]))),
        (
            "ip-options",
            eth(
                0x0800,
                &ipv4(V4, PEER_V4, UDP, 64, 0, 1, 0, &[0x83, 3, 4, 0], &u),
            ),
        ),
        ("protocol", eth(0x0800, &ip4(132, &[0; 16]))),
        ("protocol", eth(0x0800, &ip4(50, &[0; 16]))),
        ("vlan", vlan(0x8100, 5, 0x0800, &ip4(UDP, &u))),
        ("vlan", vlan(0x88a8, 5, 0x0800, &ip4(UDP, &u))),
        ("ethertype", eth(0x88b5, &[0; 46])),
        ("ethertype", eth(0x8847, &[0; 46])),
        ("ethertype", eth(46, &[0; 46])),
        (
            "trailing",
            eth(0x0800, &[ip4(UDP, &u), vec![9; 30]].concat()),
        ),
        (
            "trailing",
            eth(0x0800, &[ip4(UDP, &udp(1, 2, &[])), vec![1; 4]].concat()),
        ),
        (
            "malformed",
            eth(0x0800, &ip4(UDP, &[u.clone(), vec![5; 8]].concat()[..20])),
        ),
        (
            "icmp",
            eth(0x0800, &ip4(1, &icmp(3, 3, 0, 0, &ip4(UDP, &u)))),
        ),
        ("icmp", eth(0x0800, &ip4(1, &icmp(8, 1, 0, 0, &[])))),
        ("icmp", eth(0x86dd, &ip6(58, &icmp(135, 0, 0, 0, &[0; 16])))),
        (
            "arp",
            eth(0x0806, &[&arp(1)[..7], &[9], &arp(1)[8..]].concat()),
        ),
    ];
    for (want, f) in cases {
        let (rule, reason) = refused(&mut g, f.clone());
        assert_eq!(rule, want, "{reason}: {f:02x?}");
    }
    // A UDP length short of the IP payload would hide bytes after it.
    let mut short = udp(1000, 2000, &[1; 20]);
    short[4..6].copy_from_slice(&be16(12));
    assert_eq!(
        refused(&mut g, eth(0x0800, &ip4(UDP, &short))).0,
        "malformed"
    );
}

#[test]
fn a_plain_frame_goes_with_every_fixed_field_written() {
    let mut g = guard("filter = \"udp\"\nmax_packets_per_second = 10\n");
    let mut f = eth(0x0800, &ip4(UDP, &udp(4000, 33434, &[0xee; 30])));
    g.check(&mut f).expect("a plain UDP frame");
    assert_eq!(f[6..12], MAC);
    assert_eq!(f[26..30], V4);
    assert_eq!((f[15], f[22]), (0, 64), "TOS and TTL");
    assert_eq!(internet_checksum(&f[14..34]), 0);
    assert!(f[42..].iter().all(|&b| b == 0), "payload zeroed");
    let mut seg = f[34..].to_vec();
    let c = u16::from_be_bytes([seg[6], seg[7]]);
    seg[6..8].copy_from_slice(&[0, 0]);
    let (s, d) = (Ipv4Addr::from(V4), Ipv4Addr::from(PEER_V4));
    assert_eq!(c, l4_checksum(IpAddr::V4(s), IpAddr::V4(d), UDP, &seg));
    // Later frames keep the first one's ports; zero padding to 60 bytes is fine.
    let mut f2 = eth(0x0800, &ip4(UDP, &udp(9, 33500, &[])));
    f2.extend_from_slice(&[0; 18]);
    g.check(&mut f2).expect("a padded frame");
    assert_eq!(f2[34..38], [0x0f, 0xa0, 0x82, 0x9a]);
}

#[test]
fn the_first_values_come_only_from_a_frame_that_left() {
    let mut g = guard(
        "filter = \"udp dst portrange 33434-33534\"\nsettable = [\"udp.sport\"]\nmax_packets_per_second = 10\n",
    );
    // Refused by the filter: it must not fix the session's destination port.
    let mut bad = eth(0x0800, &ip4(UDP, &udp(4000, 9999, &[])));
    assert_eq!(g.check(&mut bad).unwrap_err().rule, "filter");
    let mut good = eth(0x0800, &ip4(UDP, &udp(4000, 33434, &[])));
    g.check(&mut good).expect("in range");
    let mut later = eth(0x0800, &ip4(UDP, &udp(4001, 9999, &[])));
    g.check(&mut later).expect("held to the first port");
    assert_eq!(later[34..38], [0x0f, 0xa1, 0x82, 0x9a]);
}
