//! A generator of Ethernet frames of random structure whose *hidden* values
//! (the fields a mask hides) come from a second random source: two frames
//! made with the same structure seed and different hidden seeds differ only
//! in hidden values (and the checksums computed over them), which is what
//! the non-interference property compares.
//!
//! Every field draws from both sources so they stay in step whatever the
//! mask. The first byte of a payload always comes from the structure
//! source: the header walk reads it to decide whether it is a header (a
//! VXLAN flag, an MPLS payload's IP version), a documented limit of the
//! `payload` mask.

#![allow(dead_code)]

mod icmp;
mod literal;

#[allow(unused_imports)]
pub use literal::*;

use ringcap_privacy::fields::{self, Field, FieldSet};

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What the input checksums are.
#[derive(Clone, Copy, Debug)]
pub enum Cs {
    /// Right for the bytes.
    Correct,
    /// TCP, UDP and ICMPv6: the pseudo-header sum only, as with checksum
    /// offload (others right).
    Partial,
    /// This value, whatever the bytes.
    Fixed(u16),
}

pub struct Gen {
    s: Rng,
    h: Rng,
    pub mask: FieldSet,
    cs: Cs,
    depth: u32,
}

fn fold(mut a: u64) -> u16 {
    while a > 0xffff {
        a = (a & 0xffff) + (a >> 16);
    }
    a as u16
}

fn sum(b: &[u8]) -> u64 {
    b.chunks(2)
        .map(|c| u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0)))
        .sum()
}

impl Gen {
    pub fn new(structure: u64, hidden: u64, mask: FieldSet, cs: Cs) -> Gen {
        Gen {
            s: Rng(structure | 1),
            h: Rng(hidden | 1),
            mask,
            cs,
            depth: 0,
        }
    }

    /// A visible value (structure).
    pub fn v(&mut self, n: u64) -> u64 {
        self.h.next();
        self.s.next() % n.max(1)
    }

    /// A value of field `f`: hidden if the mask has it.
    pub(super) fn f(&mut self, f: Field) -> u64 {
        let (a, b) = (self.s.next(), self.h.next());
        if self.mask.has(f) {
            b
        } else {
            a
        }
    }

    pub(super) fn fbytes(&mut self, f: Option<Field>, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| match f {
                Some(f) => self.f(f) as u8,
                None => self.v(256) as u8,
            })
            .collect()
    }

    pub(super) fn ip4(&mut self) -> Vec<u8> {
        self.fbytes(Some(fields::IP_ADDR), 4)
    }
    pub(super) fn ip6(&mut self) -> Vec<u8> {
        self.fbytes(Some(fields::IP_ADDR), 16)
    }
    pub(super) fn mac(&mut self) -> Vec<u8> {
        self.fbytes(Some(fields::ETH_ADDR), 6)
    }
    fn u16f(&mut self, f: Field) -> [u8; 2] {
        (self.f(f) as u16).to_be_bytes()
    }

    pub(super) fn payload(&mut self, max: u64) -> Vec<u8> {
        let n = self.v(max + 1) as usize;
        let mut p = self.fbytes(Some(fields::PAYLOAD), n);
        if let Some(b) = p.first_mut() {
            // Never an IP version nibble or a VXLAN I flag: see the module doc.
            *b = (self.v(256) as u8 & 0xf7 & 0x0f) | 0x10;
        }
        p
    }

    /// A checksum over `seg` at `field`, with an optional pseudo-header.
    pub(super) fn fill(
        &mut self,
        seg: &mut [u8],
        field: usize,
        pseudo: Option<(&[u8], &[u8], u8)>,
        udp: bool,
    ) {
        if field + 2 > seg.len() {
            return;
        }
        seg[field..field + 2].fill(0);
        let ps = pseudo.map(|(s, d, p)| sum(s) + sum(d) + u64::from(p) + seg.len() as u64);
        let v = match (self.cs, ps) {
            (Cs::Fixed(v), _) => v,
            (Cs::Partial, Some(ps)) => fold(ps),
            _ => {
                let v = !fold(sum(seg) + ps.unwrap_or(0));
                if udp && v == 0 {
                    0xffff
                } else {
                    v
                }
            }
        };
        seg[field..field + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// An Ethernet frame, maybe cut short.
    pub fn frame(&mut self) -> Vec<u8> {
        let mut f = self.ethernet();
        if self.v(3) == 0 {
            let cut = self.v(f.len() as u64 + 1) as usize;
            f.truncate(cut);
        }
        f
    }

    fn ethernet(&mut self) -> Vec<u8> {
        let mut f = self.mac();
        f.extend(self.mac());
        for _ in 0..self.v(3) {
            let tpid: u16 = [0x8100, 0x88a8, 0x9100][self.v(3) as usize];
            f.extend(tpid.to_be_bytes());
            f.extend((self.v(4096) as u16).to_be_bytes());
        }
        let (et, body) = self.link_payload();
        f.extend(et.to_be_bytes());
        f.extend(body);
        // An Ethernet trailer, visible.
        let t = self.v(4) as usize * 3;
        f.extend(self.fbytes(None, t));
        f
    }

    /// An EtherType and what follows it.
    fn link_payload(&mut self) -> (u16, Vec<u8>) {
        self.depth += 1;
        let deep = self.depth > 3;
        let r = match self.v(if deep { 3 } else { 8 }) {
            0 => (0x0806, self.arp()),
            1 => (0x88cc, self.payload(40)),
            2 | 5 => (0x0800, self.ipv4()),
            3 | 6 => (0x86dd, self.ipv6()),
            _ => (0x8847, self.mpls()),
        };
        self.depth -= 1;
        r
    }

    fn arp(&mut self) -> Vec<u8> {
        let odd = self.v(5) == 0;
        let (hl, pl) = if odd {
            (self.v(9) as u8, self.v(17) as u8)
        } else {
            (6, 4)
        };
        let mut a = vec![0, 1, 8, 0, hl, pl, 0, self.v(3) as u8];
        for _ in 0..2 {
            if odd {
                a.extend(self.fbytes(Some(fields::ETH_ADDR), hl.into()));
                a.extend(self.fbytes(Some(fields::IP_ADDR), pl.into()));
            } else {
                a.extend(self.mac());
                a.extend(self.ip4());
            }
        }
        a
    }

    fn mpls(&mut self) -> Vec<u8> {
        let n = 1 + self.v(3);
        let mut m = Vec::new();
        for i in 0..n {
            let label = (self.v(1 << 20) as u32) << 12 | u32::from(i + 1 == n) << 8 | 64;
            m.extend(label.to_be_bytes());
        }
        match self.v(3) {
            0 => m.extend(self.ipv4()),
            1 => m.extend(self.ipv6()),
            _ => m.extend(self.payload(30)),
        }
        m
    }

    pub(super) fn ipv4(&mut self) -> Vec<u8> {
        let (src, dst) = (self.ip4(), self.ip4());
        let opts = self.ipv4_options();
        let hl = 20 + opts.len();
        let later_fragment = self.v(6) == 0;
        let proto = [6u8, 17, 1, 47, 4, 41, 132, 50, 51, 99][self.v(10) as usize];
        let body = if later_fragment {
            self.payload(40)
        } else {
            self.upper(proto, &src, &dst)
        };
        let mut h = vec![0x40 | (hl / 4) as u8, self.f(fields::IP_TOS) as u8];
        h.extend(((hl + body.len()) as u16).to_be_bytes());
        h.extend(self.u16f(fields::IP_ID));
        let frag: u16 = if later_fragment {
            0x2000 | (1 + self.v(100) as u16)
        } else {
            0x4000
        };
        h.extend(frag.to_be_bytes());
        h.extend([self.f(fields::IP_TTL) as u8, proto, 0, 0]);
        h.extend(&src);
        h.extend(&dst);
        h.extend(opts);
        let cs = self.cs;
        self.cs = if matches!(cs, Cs::Partial) {
            Cs::Correct
        } else {
            cs
        };
        self.fill(&mut h, 10, None, false);
        self.cs = cs;
        h.extend(body);
        h
    }

    fn ipv4_options(&mut self) -> Vec<u8> {
        let mut o = Vec::new();
        for _ in 0..self.v(3) {
            match self.v(4) {
                0 => o.push(1),
                1 => {
                    let k = 1 + self.v(3) as usize;
                    let ptr = 4 + 4 * self.v(k as u64 + 1) as u8;
                    let ty = [7u8, 131, 137][self.v(3) as usize];
                    o.extend([ty, 3 + 4 * k as u8, ptr]);
                    for _ in 0..k {
                        o.extend(self.ip4());
                    }
                }
                2 => {
                    o.extend([68, 12, 5, 1]);
                    o.extend(self.ip4());
                    o.extend(self.fbytes(None, 4));
                }
                _ => {
                    o.extend([148, 4]);
                    o.extend(self.fbytes(Some(fields::IP_ADDR), 2));
                }
            }
        }
        while o.len() % 4 != 0 {
            o.push(0);
        }
        o.truncate(40);
        o
    }

    pub(super) fn ipv6(&mut self) -> Vec<u8> {
        let (src, dst) = (self.ip6(), self.ip6());
        let mut chain: Vec<(u8, Vec<u8>)> = Vec::new();
        let mut stop = false;
        for _ in 0..self.v(4) {
            let (kind, body) = match self.v(5) {
                0 => (0u8, self.ext_options(false)),
                1 => (60, self.ext_options(true)),
                2 => (43, self.routing()),
                3 => {
                    let later = self.v(3) == 0;
                    stop |= later;
                    let off: u16 = if later {
                        (1 + self.v(100) as u16) << 3
                    } else {
                        1
                    };
                    let mut b = off.to_be_bytes().to_vec();
                    b.extend(self.fbytes(None, 4));
                    (44, b)
                }
                _ => {
                    let mut b = vec![0, 0];
                    b.extend(self.fbytes(None, 8));
                    // The integrity value: a function of hidden fields.
                    b.extend(self.fbytes(Some(fields::IP_ADDR), 12));
                    (51, b)
                }
            };
            chain.push((kind, body));
            if stop {
                break; // the rest is a later fragment's payload
            }
        }
        let proto = [6u8, 17, 58, 47, 4, 41, 58, 58][self.v(8) as usize];
        let body = if stop {
            self.payload(40)
        } else {
            self.upper(proto, &src, &dst)
        };
        let mut rest = body;
        let mut next = proto;
        for (kind, b) in chain.into_iter().rev() {
            let len = match kind {
                51 => (2 + b.len()) / 4 - 2,
                44 => 0,
                _ => (2 + b.len()) / 8 - 1,
            };
            let mut e = vec![next, len as u8];
            e.extend(b);
            e.extend(rest);
            rest = e;
            next = kind;
        }
        let flow = self.f(fields::IPV6_FLOW) as u32 & 0xfffff;
        let word = 0x6000_0000 | (self.f(fields::IP_TOS) as u32 & 0xff) << 20 | flow;
        let mut h = word.to_be_bytes().to_vec();
        h.extend((rest.len() as u16).to_be_bytes());
        h.extend([next, self.f(fields::IP_TTL) as u8]);
        h.extend(src);
        h.extend(dst);
        h.extend(rest);
        h
    }

    /// Options of a hop-by-hop or destination options header (padded to a
    /// multiple of 8 with its 2 leading bytes).
    fn ext_options(&mut self, dst: bool) -> Vec<u8> {
        let mut o = Vec::new();
        for _ in 0..self.v(3) {
            match self.v(4) {
                0 if dst => {
                    o.extend([0xc9, 16]);
                    o.extend(self.ip6());
                }
                1 => o.extend([5, 2, 0, self.v(3) as u8]),
                2 => o.push(0),
                _ => {
                    o.extend([0x1e, 4]);
                    o.extend(self.fbytes(Some(fields::IP_ADDR), 4));
                }
            }
        }
        while (o.len() + 2) % 8 != 0 {
            o.push(0);
        }
        o
    }

    fn routing(&mut self) -> Vec<u8> {
        let ty = [0u8, 2, 4, 3][self.v(4) as usize];
        let n = 1 + self.v(3) as usize;
        let mut b = vec![ty, self.v(n as u64 + 1) as u8];
        b.extend(if ty == 4 {
            [n as u8 - 1, 0, 0, 0]
        } else {
            [0; 4]
        });
        for _ in 0..n {
            b.extend(self.ip6());
        }
        b
    }

    /// The upper layer of protocol `proto` between `src` and `dst`.
    fn upper(&mut self, proto: u8, src: &[u8], dst: &[u8]) -> Vec<u8> {
        let deep = self.depth > 3;
        match proto {
            6 => self.tcp(src, dst),
            17 => self.udp(src, dst, deep),
            1 => self.icmp4(deep),
            58 => self.icmp6(src, dst, deep),
            47 if !deep => self.gre(),
            4 if !deep => {
                self.depth += 1;
                let r = self.ipv4();
                self.depth -= 1;
                r
            }
            41 if !deep => {
                self.depth += 1;
                let r = self.ipv6();
                self.depth -= 1;
                r
            }
            132 => {
                let mut s = self.fbytes(None, 8);
                s.extend([0; 4]);
                s.extend(self.payload(30));
                if let Cs::Fixed(v) = self.cs {
                    s[8..10].copy_from_slice(&v.to_be_bytes());
                } else {
                    let c = ringcap_testkit::frames::crc32c(&s);
                    s[8..12].copy_from_slice(&c.to_le_bytes());
                }
                s
            }
            // ESP: SPI and sequence number are header.
            50 => {
                let mut e = self.fbytes(None, 8);
                e.extend(self.payload(30));
                e
            }
            // AH with no next header: its integrity value is a function of
            // hidden fields.
            51 => {
                let mut a = vec![59, 4, 0, 0];
                a.extend(self.fbytes(None, 8));
                a.extend(self.fbytes(Some(fields::IP_ADDR), 12));
                a.extend(self.payload(10));
                a
            }
            // Deeper than generated: 8 visible bytes (an ICMP error's quote
            // counts them as header) that are no IP header, then payload.
            _ => {
                let mut o = self.fbytes(None, 8);
                o[0] = 0x10 | (o[0] & 0x07);
                if proto == 47 {
                    // GRE version 0 without options, of no known protocol.
                    o[..4].copy_from_slice(&[0, 0, 0x88, 0xb5]);
                }
                o.extend(self.payload(20));
                o
            }
        }
    }

    fn tcp(&mut self, src: &[u8], dst: &[u8]) -> Vec<u8> {
        let mut t = self.u16f(fields::TCP_PORT).to_vec();
        t.extend(self.u16f(fields::TCP_PORT));
        t.extend(self.fbytes(Some(fields::TCP_SEQ), 8));
        let words = self.v(4) as usize;
        t.extend([((5 + words) << 4) as u8, self.v(256) as u8]);
        t.extend(self.u16f(fields::TCP_WINDOW));
        t.extend([0, 0]);
        t.extend(self.fbytes(None, 2));
        t.extend(self.fbytes(Some(fields::TCP_OPTIONS), words * 4));
        t.extend(self.payload(40));
        self.fill(&mut t, 16, Some((src, dst, 6)), false);
        t
    }

    fn udp(&mut self, src: &[u8], dst: &[u8], deep: bool) -> Vec<u8> {
        let vxlan = !deep && self.v(4) == 0;
        let sport = self.u16f(fields::UDP_PORT);
        let mut dport = self.u16f(fields::UDP_PORT);
        if vxlan && !self.mask.has(fields::UDP_PORT) {
            dport = 4789u16.to_be_bytes();
        } else if dport == 4789u16.to_be_bytes() && !self.mask.has(fields::UDP_PORT) {
            dport = 4790u16.to_be_bytes();
        }
        let body = if vxlan {
            let mut v = vec![0x08, 0, 0, 0];
            v.extend(((self.v(1 << 24) as u32) << 8).to_be_bytes());
            self.depth += 1;
            v.extend(self.ethernet());
            self.depth -= 1;
            v
        } else {
            self.payload(40)
        };
        let mut u = sport.to_vec();
        u.extend(dport);
        u.extend(((8 + body.len()) as u16).to_be_bytes());
        u.extend([0, 0]);
        u.extend(body);
        self.fill(&mut u, 6, Some((src, dst, 17)), true);
        u
    }

    fn gre(&mut self) -> Vec<u8> {
        let c = self.v(2) == 0;
        let k = self.v(2) == 0;
        let (proto, body) = {
            self.depth += 1;
            let r = match self.v(4) {
                0 => (0x0800u16, self.ipv4()),
                1 => (0x86dd, self.ipv6()),
                2 => (0x6558, self.ethernet()),
                _ => (0x88b5, self.payload(20)),
            };
            self.depth -= 1;
            r
        };
        let mut g = vec![u8::from(c) << 7 | u8::from(k) << 5, 0];
        g.extend(proto.to_be_bytes());
        if c {
            g.extend([0; 4]);
        }
        if k {
            g.extend(self.fbytes(None, 4));
        }
        g.extend(body);
        if c {
            let cs = self.cs;
            self.cs = if matches!(cs, Cs::Partial) {
                Cs::Correct
            } else {
                cs
            };
            self.fill(&mut g, 4, None, false);
            self.cs = cs;
        }
        g
    }
}
