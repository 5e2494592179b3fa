//! Literal frames: an ICMP redirect and IPv6 neighbor discovery.

use ringcap_testkit::frames::internet_checksum;

pub fn eth_ipv4(proto: u8, src: [u8; 4], dst: [u8; 4], l4: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    let mut h = vec![0x45, 0];
    h.extend(((20 + l4.len()) as u16).to_be_bytes());
    h.extend([0, 1, 0x40, 0, 64, proto, 0, 0]);
    h.extend(src);
    h.extend(dst);
    let c = internet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend(h);
    f.extend(l4);
    f
}

/// An ICMP redirect from router `src` naming gateway `gw`, quoting a UDP
/// datagram.
pub fn redirect(src: [u8; 4], gw: [u8; 4]) -> Vec<u8> {
    let inner = eth_ipv4(
        17,
        [198, 18, 0, 2],
        [198, 19, 5, 5],
        &[0x30, 0x39, 0, 53, 0, 8, 0, 0],
    );
    let mut m = vec![5, 1, 0, 0];
    m.extend(gw);
    m.extend(&inner[14..]);
    let c = internet_checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    eth_ipv4(1, src, [198, 18, 0, 2], &m)
}

pub fn icmp6_checksum(src: &[u8], dst: &[u8], msg: &[u8]) -> u16 {
    let mut p = src.to_vec();
    p.extend(dst);
    p.extend((msg.len() as u32).to_be_bytes());
    p.extend([0, 0, 0, 58]);
    p.extend(msg);
    internet_checksum(&p)
}

/// A neighbor advertisement (136) or solicitation (135) for `target` with a
/// link-layer address option `ll`.
pub fn nd(ty: u8, src: [u8; 16], target: [u8; 16], ll: [u8; 6]) -> Vec<u8> {
    let dst = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 1];
    let mut m = vec![ty, 0, 0, 0, 0x60, 0, 0, 0];
    m.extend(target);
    m.extend([if ty == 135 { 1 } else { 2 }, 1]);
    m.extend(ll);
    let c = icmp6_checksum(&src, &dst, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = vec![0x33, 0x33, 0xff, 0, 0, 1];
    f.extend(ll);
    f.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend((m.len() as u16).to_be_bytes());
    f.extend([58, 255]);
    f.extend(src);
    f.extend(dst);
    f.extend(m);
    f
}

pub fn v6(last: u8) -> [u8; 16] {
    [0xfd, 0x52, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last]
}
