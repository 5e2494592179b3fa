//! Literal cases the tshark oracle cannot judge: addresses cut short by the
//! snap length, the payload mask's checksums, fail-closed behaviour.

use ringcap_privacy::cryptopan::CryptoPan;
use ringcap_privacy::fields::FieldSet;
use ringcap_privacy::{Key, Privacy};
use ringcap_stages::Transform;
use ringcap_testkit::frames::{self, internet_checksum, l4_checksum, Endpoints};
use std::net::{IpAddr, Ipv4Addr};

const KEY: [u8; 32] = [7; 32];

fn ep() -> Endpoints {
    Endpoints::new([0x02, 0x52, 0, 0, 0, 1], [0x02, 0x52, 0, 0, 0, 2])
}

fn privacy(mask: &str, anon: &str) -> Privacy {
    Privacy::new(
        FieldSet::parse(mask).unwrap(),
        (!anon.is_empty()).then(|| (Key::from_bytes(KEY), FieldSet::parse(anon).unwrap())),
    )
    .unwrap()
}

#[test]
fn addresses_cut_short_get_the_prefix_of_their_image() {
    let f = frames::udp4(&ep(), 1, 1000, 2000, 64);
    let c = CryptoPan::new(&KEY);
    let src = c.ipv4([198, 18, 0, 2]);
    let dst = c.ipv4([198, 18, 0, 3]);
    let mut t = privacy("", "ip.addr").transform();
    // Cut inside the source address, then inside the destination.
    for cut in [14 + 12 + 1, 14 + 12 + 3, 14 + 16 + 2, 14 + 20] {
        let mut g = f[..cut].to_vec();
        t.rewrite_ethernet(&mut g);
        let s = (cut - 26).min(4);
        assert_eq!(g[26..26 + s], src[..s], "cut {cut}");
        if cut > 30 {
            assert_eq!(g[30..cut.min(34)], dst[..cut.min(34) - 30], "cut {cut}");
        }
        // Before the addresses only the header checksum (captured) changes.
        assert_eq!(g[..24], f[..24], "cut {cut}");
    }
}

#[test]
fn payload_mask_keeps_the_udp_checksum_right_and_composes_with_headers() {
    let f = frames::udp4(&ep(), 9, 1000, 2000, 100);
    let mut g = f.clone();
    privacy("payload", "ip.addr")
        .transform()
        .rewrite_ethernet(&mut g);
    let ip_len = usize::from(u16::from_be_bytes([g[16], g[17]]));
    assert!(g[42..14 + ip_len].iter().all(|&b| b == 0), "payload zeroed");
    assert_eq!(internet_checksum(&g[14..34]), 0, "IPv4 header checksum");
    let src = IpAddr::V4(Ipv4Addr::new(g[26], g[27], g[28], g[29]));
    let dst = IpAddr::V4(Ipv4Addr::new(g[30], g[31], g[32], g[33]));
    let mut seg = g[34..14 + ip_len].to_vec();
    let sent = u16::from_be_bytes([seg[6], seg[7]]);
    seg[6..8].copy_from_slice(&[0, 0]);
    assert_eq!(l4_checksum(src, dst, 17, &seg), sent, "UDP checksum");
    // With -s headers the payload was never kept: the mask changes nothing
    // more, and the UDP checksum, which covers anonymized addresses and an
    // unseen payload, cannot be recomputed: it is 0 ("none"), as it is
    // without the payload mask, not a value derived from the input's.
    let hl = ringcap_wire::header_len(&f, usize::MAX);
    assert_eq!(hl, 42);
    let mut h = f[..hl].to_vec();
    privacy("payload", "ip.addr")
        .transform()
        .rewrite_ethernet(&mut h);
    assert_eq!(h[..40], g[..40]);
    let mut whole = f.clone();
    privacy("", "ip.addr")
        .transform()
        .rewrite_ethernet(&mut whole);
    assert_eq!(h[40..42], [0, 0]);
    let mut cut = f[..hl].to_vec();
    privacy("", "ip.addr")
        .transform()
        .rewrite_ethernet(&mut cut);
    assert_eq!(cut, h);
}

#[test]
fn other_link_types_are_zeroed_not_leaked() {
    let mut t = privacy("ip.ttl", "").transform();
    let mut f = frames::udp4(&ep(), 1, 1, 2, 30)[14..].to_vec();
    t.apply(101, &mut f, 100); // LINKTYPE_RAW: not walked
    assert!(f.iter().all(|&b| b == 0));
}

#[test]
fn nesting_deeper_than_followed_is_zeroed() {
    // 40 IPv4-in-IPv4 headers around a UDP datagram.
    let inner = frames::udp4(&ep(), 3, 1000, 2000, 16);
    let mut ip = inner[14..].to_vec();
    for _ in 0..40 {
        let mut h = inner[14..34].to_vec();
        h[9] = 4; // IPIP
        let tl = (20 + ip.len()) as u16;
        h[2..4].copy_from_slice(&tl.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let c = internet_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(&ip);
        ip = h;
    }
    let mut f = inner[..14].to_vec();
    f.extend_from_slice(&ip);
    let mut g = f.clone();
    privacy("", "ip.addr").transform().rewrite_ethernet(&mut g);
    // The first headers are rewritten, the bytes after the last one
    // followed are zero (fail closed), including the innermost addresses.
    assert_ne!(g[26..34], f[26..34]);
    let last_followed = 14 + 15 * 20;
    assert!(g[last_followed + 20..].iter().all(|&b| b == 0));
}

#[test]
fn a_field_both_masked_and_anonymized_is_masked() {
    let mut g = frames::udp4(&ep(), 1, 1000, 2000, 30);
    privacy("ip.addr", "ip.addr")
        .transform()
        .rewrite_ethernet(&mut g);
    assert_eq!(g[26..34], [0; 8]);
    assert_eq!(internet_checksum(&g[14..34]), 0);
}

#[test]
fn only_addresses_can_be_anonymized() {
    let e = Privacy::new(
        FieldSet::EMPTY,
        Some((
            Key::from_bytes(KEY),
            FieldSet::parse("ip.addr,tcp.port").unwrap(),
        )),
    )
    .unwrap_err();
    assert!(e.contains("tcp.port"), "{e}");
}

#[test]
fn prepare_hints_change_nothing() {
    // Many addresses (the map's buckets differ), with and without VLAN tags,
    // some cut short; each frame shown to `prepare` three frames early, or
    // a wrong frame shown: the output must be what it is without hints.
    let base = frames::udp4(&ep(), 1, 1000, 2000, 64);
    let mut x = 0x2545_f491u32;
    let mut input = Vec::new();
    for i in 0..3000u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let mut f = base.clone();
        f[26..30].copy_from_slice(&(x & 0x0fff_ffff | 0x0a00_0000).to_be_bytes());
        f[30..34].copy_from_slice(&x.rotate_left(11).to_be_bytes());
        if i % 5 == 0 {
            f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        }
        if i % 7 == 0 {
            f.truncate(14 + 12 + (i as usize % 9));
        }
        input.push(f);
    }
    let plain: Vec<Vec<u8>> = {
        let mut t = privacy("", "ip.addr").transform();
        input
            .iter()
            .map(|f| {
                let mut g = f.clone();
                t.rewrite_ethernet(&mut g);
                g
            })
            .collect()
    };
    for (ahead, junk) in [(3usize, false), (1, false), (2, true)] {
        let mut t = privacy("", "ip.addr").transform();
        for (i, f) in input.iter().enumerate() {
            if let Some(next) = input.get(i + ahead) {
                if junk {
                    t.prepare(1, &[0xff; 40]);
                    t.prepare(9, next);
                } else {
                    t.prepare(1, next);
                }
            }
            let mut g = f.clone();
            let wire = g.len() as u32;
            t.apply(1, &mut g, wire);
            assert_eq!(g, plain[i], "frame {i}, ahead {ahead}");
        }
    }
}
