//! The keys of one packet: what the index can find it by.
//!
//! The index must never miss a packet that a filter it narrows would accept
//! (it may only keep too many), so the keys come from two walks:
//!
//! * **libpcap's view of the outer headers**, the fields a compiled filter
//!   reads for `host`, `net`, `port`, `portrange`, `proto` (and `tcp`,
//!   `udp`, ...) and `vlan`: after any VLAN tags, the IPv4 addresses and
//!   protocol, ports at the IHL offset of first fragments, the IPv6
//!   addresses and the next header of the fixed header (and of a fragment
//!   header right after it, which libpcap also checks), ports right after
//!   either, and the sender and target addresses of ARP/RARP, read at the
//!   fixed offsets libpcap reads them. A packet whose outer headers are odd
//!   (an IPv4 IHL below 5, a wrong version, a header cut short) gets the
//!   [`Kind::Any`] key instead: a filter could match it on bytes the index
//!   did not take as keys, so it is a candidate of every lookup.
//! * **the header walker of `ringcap-wire`** for everything deeper (inner
//!   VLAN tags, MPLS payloads, GRE, VXLAN, IP-in-IP, IPv6 extension headers,
//!   the datagram an ICMP error quotes): its addresses, protocols and ports
//!   are keys too. They cannot make a result wrong, only let a query that
//!   names an inner address find the packet.

use ringcap_wire::headers::{visit_headers, Visitor};
use ringcap_wire::{be16, be32};

/// What a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A packet the index cannot describe: a candidate for every lookup.
    Any = 0,
    /// An IPv4 address.
    V4 = 1,
    /// An IPv6 address.
    V6 = 2,
    /// A TCP, UDP or SCTP port.
    Port = 3,
    /// An IP protocol number (IPv4 protocol, IPv6 next header).
    Proto = 4,
    /// A VLAN ID (any tag of the frame).
    Vlan = 5,
}

impl Kind {
    /// Every kind, in their order in an index file.
    pub const ALL: [Kind; 6] = [
        Kind::Any,
        Kind::V4,
        Kind::V6,
        Kind::Port,
        Kind::Proto,
        Kind::Vlan,
    ];

    /// The kind of a code byte of an index file.
    pub fn from_code(c: u8) -> Option<Kind> {
        Kind::ALL.get(c as usize).copied()
    }

    /// Bytes the value of a key of this kind takes in an index file.
    pub fn width(self) -> usize {
        match self {
            Kind::Any => 0,
            Kind::V4 => 4,
            Kind::V6 => 16,
            Kind::Port | Kind::Vlan => 2,
            Kind::Proto => 1,
        }
    }
}

/// One key: a kind and a value (an address as a big-endian number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// What the value is.
    pub kind: Kind,
    /// The value.
    pub value: u128,
}

impl Key {
    /// The key every lookup includes.
    pub const ANY: Key = Key {
        kind: Kind::Any,
        value: 0,
    };
}

const TCP: u8 = 6;
const UDP: u8 = 17;
const SCTP: u8 = 132;
const FRAGMENT: u8 = 44;

fn has_ports(proto: u8) -> bool {
    matches!(proto, TCP | UDP | SCTP)
}

/// Where the keys of a packet go (duplicates allowed): a vector, or the
/// posting lists being built, straight (a key is 32 bytes; the indexer
/// wrote each to a vector and read it back).
pub trait KeyOut {
    /// One key of the packet.
    fn key(&mut self, kind: Kind, value: u128);
}

impl KeyOut for Vec<Key> {
    fn key(&mut self, kind: Kind, value: u128) {
        self.push(Key { kind, value });
    }
}

/// The walks' view of a [`KeyOut`].
struct Sink<'a, O: KeyOut>(&'a mut O);

impl<O: KeyOut> Sink<'_, O> {
    fn push(&mut self, kind: Kind, value: u128) {
        self.0.key(kind, value);
    }
    fn any(&mut self) {
        self.0.key(Kind::Any, 0);
    }
    fn v4(&mut self, d: &[u8], at: usize) {
        let v = be32(d, at);
        self.push(Kind::V4, v as u128);
    }
    fn v6(&mut self, d: &[u8], at: usize) {
        let mut b = [0u8; 16];
        b.copy_from_slice(&d[at..at + 16]);
        self.push(Kind::V6, u128::from_be_bytes(b));
    }
    fn ports(&mut self, d: &[u8], at: usize) {
        self.push(Kind::Port, be16(d, at) as u128);
        self.push(Kind::Port, be16(d, at + 2) as u128);
    }
}

/// Appends to `out` the keys of one packet of link type `linktype` (see the
/// [module docs](self)).
pub fn packet_keys<O: KeyOut>(linktype: u32, data: &[u8], out: &mut O) {
    let mut s = Sink(out);
    match linktype {
        1 => {
            // The walker's keys would only repeat the outer ones for a
            // plain TCP, UDP or SCTP packet (nothing inside it is walked):
            // the walk is skipped then, most packets, half the keys.
            if !outer_ethernet(data, &mut s) {
                let mut deep = Deep { s: &mut s, data };
                visit_headers(data, &mut deep);
            }
        }
        // LINKTYPE_RAW: the IP version nibble tells (libpcap checks it).
        101 => match data.first().map(|b| b >> 4) {
            Some(4) => {
                ipv4(data, 0, &mut s);
            }
            Some(6) => {
                ipv6(data, 0, &mut s);
            }
            Some(_) => {}
            None => s.any(),
        },
        228 => {
            ipv4(data, 0, &mut s);
        }
        229 => {
            ipv6(data, 0, &mut s);
        }
        // Linux cooked capture v1: protocol at 14, payload at 16.
        113 => cooked(data, 14, 16, &mut s),
        // v2: protocol at 0, payload at 20.
        276 => cooked(data, 0, 20, &mut s),
        _ => s.any(),
    }
}

fn cooked<O: KeyOut>(d: &[u8], proto_at: usize, payload: usize, s: &mut Sink<O>) {
    if d.len() < payload {
        return s.any();
    }
    match be16(d, proto_at) {
        0x0800 => {
            ipv4(d, payload, s);
        }
        0x86dd => {
            ipv6(d, payload, s);
        }
        0x0806 | 0x8035 => arp(d, payload, s),
        // VLAN tags in a cooked header: not worth a second set of rules.
        0x8100 | 0x88a8 | 0x9100 => s.any(),
        _ => {}
    }
}

/// libpcap's view of an Ethernet frame: tags, then IP or ARP. True when
/// the frame is a plain one (see [`ipv4`]).
fn outer_ethernet<O: KeyOut>(d: &[u8], s: &mut Sink<O>) -> bool {
    if d.len() < 14 {
        s.any();
        return false;
    }
    let mut et = be16(d, 12);
    let mut p = 14;
    while matches!(et, 0x8100 | 0x88a8 | 0x9100) {
        if d.len() < p + 4 {
            s.any();
            return false;
        }
        s.push(Kind::Vlan, (be16(d, p) & 0x0fff) as u128);
        et = be16(d, p + 2);
        p += 4;
    }
    match et {
        0x0800 => ipv4(d, p, s),
        0x86dd => ipv6(d, p, s),
        0x0806 | 0x8035 => {
            arp(d, p, s);
            false
        }
        // Nothing a narrowed filter tests (host, port, proto, vlan) can
        // match another EtherType without a keyword the planner refuses
        // to narrow (mpls, pppoes, ...).
        _ => false,
    }
}

/// A transport whose packets the header walker does not look into: TCP,
/// SCTP, UDP other than to VXLAN's port. `t` is its header.
fn plain_transport(d: &[u8], proto: u8, t: usize) -> bool {
    match proto {
        TCP | SCTP => true,
        UDP => be16(d, t + 2) != ringcap_wire::vxlan::UDP_PORT,
        _ => false,
    }
}

/// The outer IPv4 header at `p`. True for a plain packet: a first
/// fragment of a [`plain_transport`] with its ports taken, whose keys the
/// header walker would only repeat.
fn ipv4<O: KeyOut>(d: &[u8], p: usize, s: &mut Sink<O>) -> bool {
    if d.len() < p + 20 {
        s.any();
        return false;
    }
    let ihl = (d[p] & 0x0f) as usize * 4;
    if d[p] >> 4 != 4 || ihl < 20 {
        s.any();
        return false;
    }
    s.v4(d, p + 12);
    s.v4(d, p + 16);
    let proto = d[p + 9];
    s.push(Kind::Proto, proto as u128);
    let first_fragment = be16(d, p + 6) & 0x1fff == 0;
    if first_fragment && has_ports(proto) {
        if d.len() < p + ihl + 4 {
            s.any();
            return false;
        }
        s.ports(d, p + ihl);
        return plain_transport(d, proto, p + ihl);
    }
    false
}

/// The outer IPv6 header at `p`; true as for [`ipv4`] (no extension
/// header but a fragment header before the transport).
fn ipv6<O: KeyOut>(d: &[u8], p: usize, s: &mut Sink<O>) -> bool {
    if d.len() < p + 40 || d[p] >> 4 != 6 {
        s.any();
        return false;
    }
    s.v6(d, p + 8);
    s.v6(d, p + 24);
    let nh = d[p + 6];
    s.push(Kind::Proto, nh as u128);
    let mut t = p + 40;
    let mut proto = nh;
    if nh == FRAGMENT {
        if d.len() < p + 48 {
            s.any();
            return false;
        }
        proto = d[p + 40];
        s.push(Kind::Proto, proto as u128);
        t = p + 48;
    }
    if has_ports(proto) {
        if d.len() < t + 4 {
            s.any();
            return false;
        }
        s.ports(d, t);
        // After a fragment header the walker may see another fragment.
        return nh != FRAGMENT && plain_transport(d, proto, t);
    }
    false
}

/// ARP and RARP: libpcap reads the sender and target protocol addresses at
/// 14 and 24 bytes into the packet, whatever its length fields say.
fn arp<O: KeyOut>(d: &[u8], p: usize, s: &mut Sink<O>) {
    if d.len() < p + 28 {
        return s.any();
    }
    s.v4(d, p + 14);
    s.v4(d, p + 24);
}

/// The walker's view of everything: extra keys, never fewer.
struct Deep<'a, 'b, O: KeyOut> {
    s: &'a mut Sink<'b, O>,
    data: &'a [u8],
}

impl<O: KeyOut> Visitor for Deep<'_, '_, O> {
    fn ethernet(&mut self, off: usize) {
        let d = self.data;
        let mut p = off + 12;
        while d.len() >= p + 6 && matches!(be16(d, p), 0x8100 | 0x88a8 | 0x9100) {
            self.s.push(Kind::Vlan, (be16(d, p + 2) & 0x0fff) as u128);
            p += 4;
        }
    }

    fn ip(&mut self, off: usize, v6: bool) {
        let d = self.data;
        if v6 {
            if d.len() >= off + 40 {
                self.s.v6(d, off + 8);
                self.s.v6(d, off + 24);
                self.s.push(Kind::Proto, d[off + 6] as u128);
            }
        } else if d.len() >= off + 20 {
            self.s.v4(d, off + 12);
            self.s.v4(d, off + 16);
            self.s.push(Kind::Proto, d[off + 9] as u128);
        }
    }

    fn transport(&mut self, off: usize, proto: u8, _end: usize) {
        self.s.push(Kind::Proto, proto as u128);
        if has_ports(proto) && self.data.len() >= off + 4 {
            self.s.ports(self.data, off);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// Every key of both walks, the walker's always run.
    fn both_walks(data: &[u8]) -> BTreeSet<Key> {
        let mut v = Vec::new();
        let mut s = Sink(&mut v);
        outer_ethernet(data, &mut s);
        let mut deep = Deep { s: &mut s, data };
        visit_headers(data, &mut deep);
        v.into_iter().collect()
    }

    /// Frames built from a few layers (tags, IPv4/IPv6, fragments, TCP, UDP
    /// to VXLAN and other ports, GRE, IPIP, ICMP errors, SCTP) and then
    /// bytes flipped and cut anywhere.
    fn frame(layers: &[u8], flips: &[(usize, u8)], cut: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        for &l in layers {
            match l % 10 {
                0 => f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]),
                1 | 2 => {
                    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 60, 0, 0, 0, 0, 64]);
                    f.push([6, 17, 47, 4, 1, 132][l as usize % 6]);
                    f.extend_from_slice(&[0, 0, 198, 18, 0, l, 198, 19, 1, l]);
                }
                3 => {
                    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 40]);
                    f.push([6, 17, 44, 58, 41][l as usize % 5]);
                    f.push(64);
                    f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, l]);
                    f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, l]);
                }
                4 => f.extend_from_slice(&[0x30, 0x39, 0x12, 0xb5, 0, 30, 0, 0]),
                5 => f.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 0x10, 0]),
                6 => {
                    f.extend_from_slice(&[0, 80, 0x1f, 0x90, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 2, 0, 0])
                }
                7 => f.extend_from_slice(&[3, 3, 0, 0, 0, 0, 0, 0]),
                8 => f.extend_from_slice(&[0, 0, 0x65, 0x58]),
                _ => f.extend_from_slice(&[2, 0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 4]),
            }
        }
        f.extend_from_slice(&[0; 16]);
        for &(at, x) in flips {
            let n = f.len();
            f[at % n] ^= x;
        }
        f.truncate(cut);
        f
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        /// Skipping the walker for plain packets loses no key: the index
        /// still finds every packet a query naming an inner header finds.
        #[test]
        fn skipping_the_walk_loses_no_key(
            layers in proptest::collection::vec(any::<u8>(), 0..6),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
            cut in 0usize..200,
        ) {
            let f = frame(&layers, &flips, cut);
            let mut v = Vec::new();
            packet_keys(1, &f, &mut v);
            let got: BTreeSet<Key> = v.into_iter().collect();
            prop_assert_eq!(got, both_walks(&f));
        }
    }

    /// Tunnels the walker looks into keep their inner keys: VXLAN (UDP to
    /// 4789), GRE, IP in IP, an ICMP error quoting a datagram.
    #[test]
    fn tunnels_keep_their_inner_keys() {
        let macs = [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        let ip4 = |proto: u8, last: u8| {
            let mut h = vec![0x45, 0, 0, 60, 0, 0, 0, 0, 64, proto, 0, 0];
            h.extend_from_slice(&[198, 18, 0, last, 198, 19, 0, last]);
            h
        };
        let udp_to = |port: u16| {
            let mut h = vec![0x30, 0x39];
            h.extend_from_slice(&port.to_be_bytes());
            h.extend_from_slice(&[0, 30, 0, 0]);
            h
        };
        let ether_ip = [0x08, 0x00];
        let cat = |parts: &[&[u8]]| -> Vec<u8> {
            let mut v = macs.to_vec();
            for p in parts {
                v.extend_from_slice(p);
            }
            v.extend_from_slice(&[0; 16]);
            v
        };
        let inner = [&ip4(17, 99)[..], &udp_to(53)].concat();
        let cases = [
            (
                "vxlan",
                cat(&[
                    &ether_ip,
                    &ip4(17, 1),
                    &udp_to(4789),
                    &[0x08, 0, 0, 0, 0, 0, 0x10, 0],
                    &macs,
                    &ether_ip,
                    &inner,
                ]),
            ),
            (
                "gre",
                cat(&[&ether_ip, &ip4(47, 1), &[0, 0, 0x08, 0x00], &inner]),
            ),
            ("ipip", cat(&[&ether_ip, &ip4(4, 1), &inner])),
            (
                "icmp error",
                cat(&[&ether_ip, &ip4(1, 1), &[3, 3, 0, 0, 0, 0, 0, 0], &inner]),
            ),
        ];
        let want = Key {
            kind: Kind::V4,
            value: u32::from_be_bytes([198, 18, 0, 99]) as u128,
        };
        for (name, f) in cases {
            let mut v = Vec::new();
            packet_keys(1, &f, &mut v);
            let got: BTreeSet<Key> = v.into_iter().collect();
            assert_eq!(got, both_walks(&f), "{name}");
            assert!(got.contains(&want), "{name}: {got:?}");
        }
    }
}
