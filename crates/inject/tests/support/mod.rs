//! Frame builders for the guard's tests: every shape the guard must
//! understand or refuse, written out field by field (not with the guard's
//! code), and a guard for a grant written as TOML.
#![allow(dead_code)]

use ringcap_inject::{Guard, Identity};
use ringcap_policy::{InjectGrant, Policy};

pub const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
pub const V4: [u8; 4] = [198, 18, 0, 1];
pub const PEER_V4: [u8; 4] = [198, 18, 0, 2];
pub const V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
pub const PEER_V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

pub fn identity() -> Identity {
    Identity {
        mac: MAC,
        ipv4: Some(V4),
        ipv6: Some(V6),
        mtu: 1500,
        index: 7,
    }
}

/// The `[grant.inject]` of a policy with these lines.
pub fn grant(inject: &str) -> InjectGrant {
    let text =
        format!("[[grant]]\nusers = [\"root\"]\ninterfaces = [\"x\"]\n[grant.inject]\n{inject}");
    let p = Policy::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    p.grants[0].inject.clone().expect("an inject grant")
}

pub fn guard(inject: &str) -> Guard {
    Guard::new(&grant(inject), identity()).expect("guard")
}

pub fn be16(v: u16) -> [u8; 2] {
    v.to_be_bytes()
}

pub fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = PEER_MAC.to_vec();
    f.extend_from_slice(&[2, 0x66, 0, 0, 0, 9]);
    f.extend_from_slice(&be16(ethertype));
    f.extend_from_slice(payload);
    f
}

pub fn vlan(tpid: u16, tci: u16, inner_type: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = be16(tci).to_vec();
    p.extend_from_slice(&be16(inner_type));
    p.extend_from_slice(payload);
    eth(tpid, &p)
}

/// An IPv4 header (checksum right) with `options` (a multiple of 4 bytes)
/// and `flags_frag` (flags in the top 3 bits, offset in 8-byte units).
#[allow(clippy::too_many_arguments)]
pub fn ipv4(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    ttl: u8,
    tos: u8,
    id: u16,
    flags_frag: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let hl = 20 + options.len();
    let mut h = vec![0x40 | (hl / 4) as u8, tos];
    h.extend_from_slice(&be16((hl + payload.len()) as u16));
    h.extend_from_slice(&be16(id));
    h.extend_from_slice(&be16(flags_frag));
    h.extend_from_slice(&[ttl, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(options);
    let c = ringcap_testkit::frames::internet_checksum(&h);
    h[10..12].copy_from_slice(&be16(c));
    h.extend_from_slice(payload);
    h
}

/// A plain IPv4 packet from a spoofed source to the peer.
pub fn ip4(proto: u8, payload: &[u8]) -> Vec<u8> {
    ipv4(
        [198, 19, 66, 66],
        PEER_V4,
        proto,
        7,
        0x2e,
        99,
        0,
        &[],
        payload,
    )
}

pub fn ipv6(
    src: [u8; 16],
    dst: [u8; 16],
    next: u8,
    hlim: u8,
    tc_flow: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut h = (0x6000_0000 | (tc_flow & 0x0fff_ffff))
        .to_be_bytes()
        .to_vec();
    h.extend_from_slice(&be16(payload.len() as u16));
    h.extend_from_slice(&[next, hlim]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(payload);
    h
}

pub fn ip6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut spoof = V6;
    spoof[15] = 0x66;
    ipv6(spoof, PEER_V6, next, 9, 0x0ab1_2345, payload)
}

/// An IPv6 extension header (hop-by-hop, routing, destination options):
/// `body` padded to a multiple of 8 with the 2 leading bytes.
pub fn ext6(next: u8, body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    while !(b.len() + 2).is_multiple_of(8) {
        b.push(0);
    }
    let mut h = vec![next, ((b.len() + 2) / 8 - 1) as u8];
    h.extend_from_slice(&b);
    h
}

/// An IPv6 fragment header: `offset` in 8-byte units, `more` fragments.
pub fn frag6(next: u8, offset: u16, more: bool, id: u32) -> Vec<u8> {
    let mut h = vec![next, 0];
    h.extend_from_slice(&be16((offset << 3) | u16::from(more)));
    h.extend_from_slice(&id.to_be_bytes());
    h
}

pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = be16(sport).to_vec();
    h.extend_from_slice(&be16(dport));
    h.extend_from_slice(&be16((8 + payload.len()) as u16));
    h.extend_from_slice(&[0xde, 0xad]);
    h.extend_from_slice(payload);
    h
}

#[allow(clippy::too_many_arguments)]
pub fn tcp(
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u16,
    window: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let hl = 20 + options.len();
    let mut h = be16(sport).to_vec();
    h.extend_from_slice(&be16(dport));
    h.extend_from_slice(&seq.to_be_bytes());
    h.extend_from_slice(&ack.to_be_bytes());
    h.extend_from_slice(&be16(((hl as u16 / 4) << 12) | (flags & 0x1ff)));
    h.extend_from_slice(&be16(window));
    h.extend_from_slice(&[0xbe, 0xef, 0, 0]);
    h.extend_from_slice(options);
    h.extend_from_slice(payload);
    h
}

pub fn icmp(ty: u8, code: u8, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![ty, code, 0x12, 0x34];
    h.extend_from_slice(&be16(id));
    h.extend_from_slice(&be16(seq));
    h.extend_from_slice(payload);
    h
}

pub fn arp(op: u16) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4];
    a.extend_from_slice(&be16(op));
    a.extend_from_slice(&[2, 0x66, 0, 0, 0, 9, 198, 19, 66, 66]);
    a.extend_from_slice(&[0; 6]);
    a.extend_from_slice(&PEER_V4);
    a
}

/// GRE (version 0, no options) carrying `proto`.
pub fn gre(proto: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0, 0];
    h.extend_from_slice(&be16(proto));
    h.extend_from_slice(payload);
    h
}

/// A VXLAN header (I flag) and an inner Ethernet frame.
pub fn vxlan(vni: u32, inner: &[u8]) -> Vec<u8> {
    let mut h = vec![0x08, 0, 0, 0];
    h.extend_from_slice(&(vni << 8).to_be_bytes());
    h.extend_from_slice(inner);
    h
}
