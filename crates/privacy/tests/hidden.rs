//! The review's findings as literal cases: an offload (partial) checksum
//! gave away the sum of masked addresses; an ICMP redirect's gateway and
//! IPv6 neighbor discovery's target and link-layer addresses were not
//! masked or anonymized.

use ringcap_privacy::cryptopan::CryptoPan;
use ringcap_privacy::fields::FieldSet;
use ringcap_privacy::{Key, Privacy};
mod gen;

use gen::{icmp6_checksum, nd, redirect, v6};
use ringcap_testkit::frames::{self, internet_checksum, Endpoints};

const KEY: [u8; 32] = [9; 32];

fn rewrite(mask: &str, anon: &str, frame: &[u8]) -> Vec<u8> {
    let p = Privacy::new(
        FieldSet::parse(mask).unwrap(),
        (!anon.is_empty()).then(|| (Key::from_bytes(KEY), FieldSet::parse(anon).unwrap())),
    )
    .unwrap();
    let mut f = frame.to_vec();
    p.transform().rewrite_ethernet(&mut f);
    f
}

fn ep(a: [u8; 4], b: [u8; 4]) -> Endpoints {
    Endpoints::new([0x02, 0x52, 0, 0, 0, 1], [0x02, 0x52, 0, 0, 0, 2]).with_ipv4(a.into(), b.into())
}

/// The folded pseudo-header sum a kernel leaves in a UDP-over-IPv4 header
/// for checksum offload (TP_STATUS_CSUMNOTREADY).
fn partial_udp4(f: &mut [u8]) {
    let udp_len = u16::from_be_bytes([f[38], f[39]]);
    let mut acc = 17u32 + u32::from(udp_len);
    for c in f[26..34].chunks(2) {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    f[40..42].copy_from_slice(&(acc as u16).to_be_bytes());
}

#[test]
fn partial_checksum_does_not_give_away_masked_addresses() {
    let mut a = frames::udp4(&ep([198, 18, 0, 2], [198, 18, 0, 3]), 1, 1000, 2000, 64);
    let mut b = frames::udp4(&ep([198, 18, 7, 9], [198, 19, 1, 77]), 1, 1000, 2000, 64);
    partial_udp4(&mut a);
    partial_udp4(&mut b);
    for snap in [a.len(), 42, 41] {
        let (ra, rb) = (
            rewrite("ip.addr", "", &a[..snap]),
            rewrite("ip.addr", "", &b[..snap]),
        );
        assert_eq!(ra, rb, "snap {snap}");
    }
    // Whole: recomputed, right for what the client sees.
    let r = rewrite("ip.addr", "", &a);
    let mut seg = r[34..].to_vec();
    let sent = u16::from_be_bytes([seg[6], seg[7]]);
    seg[6..8].fill(0);
    let want = frames::l4_checksum([0, 0, 0, 0].into(), [0, 0, 0, 0].into(), 17, &seg);
    assert_eq!(sent, want);
    // Cut: 0 ("no checksum"), not a value derived from the input's.
    assert_eq!(rewrite("ip.addr", "", &a[..42])[40..42], [0, 0]);
    // The same for a wrong checksum, and with anonymization.
    a[40..42].copy_from_slice(&[0x12, 0x34]);
    b[40..42].copy_from_slice(&[0x12, 0x34]);
    assert_eq!(
        rewrite("ip.addr", "", &a[..42]),
        rewrite("ip.addr", "", &b[..42])
    );
    let ra = rewrite("", "ip.addr", &a[..42]);
    assert_eq!(ra[40..42], [0, 0]);
}

#[test]
fn redirect_gateway_and_nd_target_are_masked() {
    let (a, b) = (
        redirect([198, 18, 0, 1], [198, 18, 0, 254]),
        redirect([198, 18, 0, 1], [198, 18, 9, 9]),
    );
    let (ra, rb) = (rewrite("ip.addr", "", &a), rewrite("ip.addr", "", &b));
    assert_eq!(ra, rb, "redirect gateway");
    assert_eq!(ra[38..42], [0, 0, 0, 0]);
    assert_eq!(internet_checksum(&ra[34..]), 0, "ICMP checksum recomputed");
    for ty in [135, 136] {
        let a = nd(ty, v6(1), v6(7), [2, 0x52, 0, 0, 0, 7]);
        let b = nd(ty, v6(1), v6(8), [2, 0x52, 0, 0, 0, 8]);
        let (ra, rb) = (
            rewrite("ip.addr,eth.addr", "", &a),
            rewrite("ip.addr,eth.addr", "", &b),
        );
        assert_eq!(ra, rb, "ND type {ty}");
        assert_eq!(ra[62..78], [0; 16], "target");
        assert_eq!(ra[80..86], [0; 6], "link-layer address option");
        let c = icmp6_checksum(&ra[22..38], &ra[38..54], &ra[54..]);
        assert_eq!(c, 0, "ICMPv6 checksum recomputed");
    }
}

#[test]
fn anonymization_maps_nd_target_and_redirect_gateway_like_the_headers() {
    let c = CryptoPan::new(&KEY);
    let r = rewrite(
        "",
        "ip.addr,eth.addr",
        &redirect([198, 18, 0, 1], [198, 18, 0, 254]),
    );
    assert_eq!(r[26..30], c.ipv4([198, 18, 0, 1]));
    assert_eq!(r[38..42], c.ipv4([198, 18, 0, 254]));
    assert_eq!(internet_checksum(&r[34..]), 0);
    let f = nd(136, v6(1), v6(7), [2, 0x52, 0, 0, 0, 7]);
    let r = rewrite("", "ip.addr,eth.addr", &f);
    assert_eq!(r[22..38], c.ipv6(v6(1)));
    assert_eq!(r[62..78], c.ipv6(v6(7)), "target");
    assert_eq!(
        r[80..86],
        c.mac([2, 0x52, 0, 0, 0, 7]),
        "target link-layer address"
    );
    assert_eq!(r[6..12], r[80..86], "same map as the Ethernet source");
    assert_eq!(icmp6_checksum(&r[22..38], &r[38..54], &r[54..]), 0);
    // Outside addresses, nothing else changed but the checksum.
    let mut same = r.clone();
    for (s, e) in [(0, 12), (22, 54), (56, 58), (62, 78), (80, 86)] {
        same[s..e].copy_from_slice(&f[s..e]);
    }
    assert_eq!(same, f);
}
