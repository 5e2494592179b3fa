//! The packet rewrite: walk the headers as `-s headers` does
//! ([`ringcap_wire::headers::visit_headers`]), then mask or anonymize the
//! chosen fields of each header in place, correcting every checksum that
//! covers a changed byte.
//!
//! Checksums kept right, incrementally (so only the checksum field itself
//! must have been captured, not the bytes it covers):
//! * the IPv4 header checksum (also of tunnelled and ICMP-quoted headers);
//! * TCP, UDP and ICMPv6 checksums for changes to their own headers, to the
//!   addresses of their pseudo-header and to the payload (`payload` mask);
//! * the ICMP checksum, which covers the quoted datagram of an error;
//! * the UDP checksum of a VXLAN tunnel and the optional GRE checksum, which
//!   cover the whole inner frame.
//!
//! Not kept: SCTP's CRC-32c (so `sctp` packets with rewritten addresses
//! fail their check: SCTP has no pseudo-header, but its ports are not masked
//! either, so only its payload mask breaks it), the AH integrity value
//! (cryptographic, it cannot be), and an IPv6 pseudo-header whose
//! destination comes from a routing header. A UDP-over-IPv4 checksum of 0
//! (none) stays 0.

use crate::cryptopan::{Cache, CryptoPan};
use crate::fields::{self, FieldSet};
use ringcap_wire::checksum::{add, delta, sum, update};
use ringcap_wire::ethernet::ethertype;
use ringcap_wire::headers::{visit_headers, Visitor};
use ringcap_wire::ip::ip_proto;

/// Headers a frame may have (3 per tunnel level) before the rest is zeroed
/// unread (fail closed).
const MAX_HEADERS: usize = 16;

#[derive(Clone, Copy)]
enum Hdr {
    // Offsets as u32 (frames are far shorter) keep the per-packet arrays small.
    Eth(u32),
    Arp(u32),
    Ip(u32, bool),
    L4(u32, u8, u32),
}

struct Recorder {
    hdrs: [Hdr; MAX_HEADERS],
    n: usize,
    overflow: Option<usize>,
}

impl Recorder {
    #[inline(always)]
    fn push(&mut self, h: Hdr, off: usize) {
        if self.n < MAX_HEADERS {
            self.hdrs[self.n] = h;
            self.n += 1;
        } else if self.overflow.is_none() {
            self.overflow = Some(off);
        }
    }
}

impl Visitor for Recorder {
    #[inline(always)]
    fn ethernet(&mut self, off: usize) {
        self.push(Hdr::Eth(off as u32), off);
    }
    #[inline(always)]
    fn arp(&mut self, off: usize) {
        self.push(Hdr::Arp(off as u32), off);
    }
    #[inline(always)]
    fn ip(&mut self, off: usize, v6: bool) {
        self.push(Hdr::Ip(off as u32, v6), off);
    }
    #[inline(always)]
    fn transport(&mut self, off: usize, proto: u8, end: usize) {
        self.push(Hdr::L4(off as u32, proto, end as u32), off);
    }
}

/// A checksum field at `field` over bytes counted from `base` (for the
/// byte parity of a change), with the changes not yet applied to it.
#[derive(Clone, Copy)]
struct Csum {
    field: u32,
    base: u32,
    /// UDP over IPv4: 0 means "no checksum" and a computed 0 is sent as
    /// 0xffff.
    udp4: bool,
    /// Sum of the changes of the bytes it covers since it was pushed.
    pending: u16,
}

/// The checksums covering the bytes being rewritten, outermost first. A
/// change is added to every entry's pending sum (one's-complement sums
/// commute), and each field is written once, when its entry is popped:
/// innermost first, so that the change of an inner checksum field reaches
/// the outer ones.
struct Stack {
    items: [Csum; MAX_HEADERS],
    n: usize,
}

impl Stack {
    /// Pushes the checksum at `field` over bytes from `base`, if the frame
    /// holds it before `limit` (and, for UDP over IPv4, it is not 0).
    fn push(&mut self, frame: &[u8], field: usize, base: usize, udp4: bool, limit: usize) -> bool {
        if field + 2 > frame.len().min(limit) || self.n == MAX_HEADERS {
            return false;
        }
        if udp4 && frame[field] == 0 && frame[field + 1] == 0 {
            return false;
        }
        self.items[self.n] = Csum {
            field: field as u32,
            base: base as u32,
            udp4,
            pending: 0,
        };
        self.n += 1;
        true
    }

    /// Adds a change `d` of the bytes at `p` (as if at an even offset) to
    /// every entry.
    #[inline]
    fn add(&mut self, p: usize, d: u16) {
        if d == 0 || d == 0xffff {
            return;
        }
        for c in &mut self.items[..self.n] {
            let odd = (p as u32).wrapping_sub(c.base) & 1 == 1;
            c.pending = add(c.pending, if odd { d.swap_bytes() } else { d });
        }
    }

    /// Applies the innermost entry's changes to its field and removes it;
    /// the field's own change goes to the entries enclosing it.
    fn pop(&mut self, frame: &mut [u8]) {
        self.n -= 1;
        let c = self.items[self.n];
        if c.pending == 0 || c.pending == 0xffff {
            return;
        }
        let f = c.field as usize;
        let old = u16::from_be_bytes([frame[f], frame[f + 1]]);
        let mut new = update(old, c.pending);
        if c.udp4 && new == 0 {
            new = 0xffff;
        }
        frame[f..f + 2].copy_from_slice(&new.to_be_bytes());
        self.add(f, delta(old, new));
    }
}

/// Address anonymization state: the key's anonymizer and caches of recent
/// translations, per thread.
pub(crate) struct Anon {
    pub(crate) cpan: CryptoPan,
    pub(crate) fields: FieldSet,
    v4: Cache<4, 65536>,
    /// Images of /24 prefixes: a new address in a known /24 costs 8 AES
    /// blocks instead of 32.
    v4_24: Cache<3, 4096>,
    v6: Cache<16, 4096>,
    /// Images of /64 prefixes (64 AES blocks saved per new address).
    v6_64: Cache<8, 1024>,
    mac: Cache<6, 4096>,
}

impl Anon {
    pub(crate) fn new(cpan: CryptoPan, fields: FieldSet) -> Anon {
        Anon {
            cpan,
            fields,
            v4: Cache::default(),
            v4_24: Cache::default(),
            v6: Cache::default(),
            v6_64: Cache::default(),
            mac: Cache::default(),
        }
    }

    fn ipv4(&mut self, a: [u8; 4]) -> [u8; 4] {
        let Anon {
            cpan, v4, v4_24, ..
        } = self;
        v4.get(a, |a| {
            let p = v4_24.get([a[0], a[1], a[2]], |p| {
                let i = cpan.ipv4([p[0], p[1], p[2], 0]);
                [i[0], i[1], i[2]]
            });
            let orig = u128::from(u32::from_be_bytes(a)) << 96;
            let last = (cpan.flips(orig, 24, 32) >> 96) as u8 ^ a[3];
            [p[0], p[1], p[2], last]
        })
    }

    fn ipv6(&mut self, a: [u8; 16]) -> [u8; 16] {
        let Anon {
            cpan, v6, v6_64, ..
        } = self;
        v6.get(a, |a| {
            let mut hi = [0u8; 8];
            hi.copy_from_slice(&a[..8]);
            let p = v6_64.get(hi, |p| {
                let mut full = [0u8; 16];
                full[..8].copy_from_slice(&p);
                let i = cpan.ipv6(full);
                let mut out = [0u8; 8];
                out.copy_from_slice(&i[..8]);
                out
            });
            let orig = u128::from_be_bytes(a);
            let low = (orig ^ cpan.flips(orig, 64, 128)) as u64;
            let mut out = [0u8; 16];
            out[..8].copy_from_slice(&p);
            out[8..].copy_from_slice(&low.to_be_bytes());
            out
        })
    }
}

/// What to do to an address field.
#[derive(Clone, Copy, PartialEq)]
enum AddrOp {
    Keep,
    Zero,
    Anonymize,
}

/// The per-thread rewriter: masks and, with a key, anonymization.
pub struct Rewriter {
    mask: FieldSet,
    anon: Option<Anon>,
}

impl Rewriter {
    pub(crate) fn new(mask: FieldSet, anon: Option<Anon>) -> Rewriter {
        Rewriter { mask, anon }
    }

    fn op(&self, f: fields::Field) -> AddrOp {
        if self.mask.has(f) {
            AddrOp::Zero
        } else if self.anon.as_ref().is_some_and(|a| a.fields.has(f)) {
            AddrOp::Anonymize
        } else {
            AddrOp::Keep
        }
    }

    /// Rewrites an Ethernet II frame (with any VLAN tags in its bytes) in
    /// place. Bytes after a nesting deeper than the rewriter follows are
    /// zeroed.
    pub fn rewrite_ethernet(&mut self, frame: &mut [u8]) {
        let mut rec = Recorder {
            hdrs: [Hdr::Eth(0); MAX_HEADERS],
            n: 0,
            overflow: None,
        };
        let end = visit_headers(frame, &mut rec);
        let mut w = Work {
            frame,
            stack: Stack {
                items: [Csum {
                    field: 0,
                    base: 0,
                    udp4: false,
                    pending: 0,
                }; MAX_HEADERS],
                n: 0,
            },
            pseudo: 0,
            limit: usize::MAX,
        };
        let eth = self.op(fields::ETH_ADDR);
        let ip = self.op(fields::IP_ADDR);
        let mut last_v6 = false;
        for h in &rec.hdrs[..rec.n] {
            match *h {
                Hdr::Eth(off) => {
                    let off = off as usize;
                    for p in [off, off + 6] {
                        self.mac(&mut w, p, eth);
                    }
                }
                Hdr::Arp(off) => self.arp(&mut w, off as usize, eth, ip),
                Hdr::Ip(off, v6) => {
                    last_v6 = v6;
                    self.ip(&mut w, off as usize, v6, ip)
                }
                Hdr::L4(off, proto, end) => {
                    // Never past the datagram (into an Ethernet trailer).
                    w.limit = end as usize;
                    self.l4(&mut w, off as usize, proto, last_v6);
                    w.limit = usize::MAX;
                }
            }
        }
        let zero_from = match rec.overflow {
            Some(off) => Some(off),
            None if self.mask.has(fields::PAYLOAD) => Some(end),
            None => None,
        };
        if let Some(p) = zero_from {
            if p < w.frame.len() {
                let d = delta(sum(&w.frame[p..]), 0);
                w.frame[p..].fill(0);
                w.stack.add(p, d);
            }
        }
        while w.stack.n > 0 {
            w.stack.pop(w.frame);
        }
    }

    fn mac(&mut self, w: &mut Work<'_>, p: usize, op: AddrOp) {
        let Some(cur) = w.frame.get(p..p + 6) else {
            return;
        };
        let new = match op {
            AddrOp::Keep => return,
            AddrOp::Zero => [0u8; 6],
            AddrOp::Anonymize => {
                let a = self.anon.as_mut().expect("anonymize without a key");
                let cpan = &a.cpan;
                a.mac.get(cur.try_into().expect("6 bytes"), |m| cpan.mac(m))
            }
        };
        w.write(p, &new);
    }

    /// An IPv4 (`n == 4`) or IPv6 address at `p`, as far as it was captured
    /// (Crypto-PAn's image of a prefix is the prefix of the image). Returns
    /// the change of its sum, for the pseudo-header.
    fn addr(&mut self, w: &mut Work<'_>, p: usize, n: usize, op: AddrOp) -> u16 {
        let avail = w.frame.len().saturating_sub(p).min(n);
        if avail == 0 || op == AddrOp::Keep {
            return 0;
        }
        let mut a = [0u8; 16];
        a[..avail].copy_from_slice(&w.frame[p..p + avail]);
        let new = match op {
            AddrOp::Zero => [0u8; 16],
            _ => {
                let an = self.anon.as_mut().expect("anonymize without a key");
                if n == 4 {
                    let v = an.ipv4([a[0], a[1], a[2], a[3]]);
                    let mut out = [0u8; 16];
                    out[..4].copy_from_slice(&v);
                    out
                } else {
                    an.ipv6(a)
                }
            }
        };
        w.write(p, &new[..avail])
    }

    fn arp(&mut self, w: &mut Work<'_>, off: usize, eth: AddrOp, ip: AddrOp) {
        let f = &w.frame[off..];
        if f.len() < 8 {
            return;
        }
        let (htype, ptype) = (
            u16::from_be_bytes([f[0], f[1]]),
            u16::from_be_bytes([f[2], f[3]]),
        );
        let (hlen, plen) = (usize::from(f[4]), usize::from(f[5]));
        let sha = off + 8;
        let spa = sha + hlen;
        let tha = spa + plen;
        let tpa = tha + hlen;
        if htype == 1 && hlen == 6 {
            self.mac(w, sha, eth);
            self.mac(w, tha, eth);
        }
        if ptype == ethertype::IPV4 && plen == 4 {
            self.addr(w, spa, 4, ip);
            self.addr(w, tpa, 4, ip);
        }
    }

    fn ip(&mut self, w: &mut Work<'_>, off: usize, v6: bool, ip: AddrOp) {
        w.pseudo = 0;
        let m = self.mask;
        if !v6 {
            // The header checksum covers this header only.
            let pushed = w.stack.push(w.frame, off + 10, off, false, usize::MAX);
            if m.has(fields::IP_TOS) {
                w.zero(off + 1, 1);
            }
            if m.has(fields::IP_ID) {
                w.zero(off + 4, 2);
            }
            if m.has(fields::IP_TTL) {
                w.zero(off + 8, 1);
            }
            let d = add(self.addr(w, off + 12, 4, ip), self.addr(w, off + 16, 4, ip));
            w.pseudo = d;
            if pushed {
                w.stack.pop(w.frame);
            }
        } else {
            if m.has(fields::IP_TOS) || m.has(fields::IPV6_FLOW) {
                if let Some(b) = w.frame.get(off..off + 4) {
                    let mut word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                    if m.has(fields::IP_TOS) {
                        word &= !0x0ff0_0000;
                    }
                    if m.has(fields::IPV6_FLOW) {
                        word &= !0x000f_ffff;
                    }
                    w.write(off, &word.to_be_bytes());
                }
            }
            if m.has(fields::IP_TTL) {
                w.zero(off + 7, 1);
            }
            let d = add(
                self.addr(w, off + 8, 16, ip),
                self.addr(w, off + 24, 16, ip),
            );
            w.pseudo = d;
        }
    }

    fn l4(&mut self, w: &mut Work<'_>, off: usize, proto: u8, v6: bool) {
        let pseudo = std::mem::take(&mut w.pseudo);
        let (field, has_pseudo) = match proto {
            ip_proto::TCP => (Some(off + 16), true),
            ip_proto::UDP => (Some(off + 6), true),
            ip_proto::ICMP => (Some(off + 2), false),
            ip_proto::ICMPV6 => (Some(off + 2), true),
            ip_proto::GRE => match w.frame.get(off) {
                Some(b) if b & 0x80 != 0 => (Some(off + 4), false),
                _ => (None, false),
            },
            _ => (None, false),
        };
        if let Some(field) = field {
            let udp4 = proto == ip_proto::UDP && !v6;
            if w.stack.push(w.frame, field, off, udp4, w.limit) && has_pseudo {
                // The pseudo-header is this checksum's alone (even-aligned).
                let top = &mut w.stack.items[w.stack.n - 1];
                top.pending = add(top.pending, pseudo);
            }
        }
        let m = self.mask;
        match proto {
            ip_proto::TCP => {
                if m.has(fields::TCP_PORT) {
                    w.zero(off, 4);
                }
                if m.has(fields::TCP_SEQ) {
                    w.zero(off + 4, 8);
                }
                if m.has(fields::TCP_WINDOW) {
                    w.zero(off + 14, 2);
                }
                if m.has(fields::TCP_OPTIONS) {
                    if let Some(&doff) = w.frame.get(off + 12) {
                        let hl = usize::from(doff >> 4) * 4;
                        if hl > 20 {
                            w.zero(off + 20, hl - 20);
                        }
                    }
                }
            }
            ip_proto::UDP if m.has(fields::UDP_PORT) => w.zero(off, 4),
            ip_proto::ICMP | ip_proto::ICMPV6 if m.has(fields::ICMP_ECHO) => {
                let echo = matches!(
                    (proto, w.frame.get(off)),
                    (ip_proto::ICMP, Some(0 | 8)) | (ip_proto::ICMPV6, Some(128 | 129))
                );
                if echo {
                    w.zero(off + 4, 4);
                }
            }
            _ => {}
        }
    }
}

/// One frame being rewritten.
struct Work<'a> {
    frame: &'a mut [u8],
    stack: Stack,
    /// Change of the last IP header's address sum, for its transport's
    /// pseudo-header.
    pseudo: u16,
    /// Where the transport header being rewritten must end (its datagram's end).
    limit: usize,
}

impl Work<'_> {
    /// Writes `new` at `p` (as much as the frame holds) and corrects the
    /// enclosing checksums; returns the change of the bytes' sum (as if at
    /// an even offset).
    fn write(&mut self, p: usize, new: &[u8]) -> u16 {
        let end = (p + new.len()).min(self.frame.len()).min(self.limit);
        if p >= end {
            return 0;
        }
        let new = &new[..end - p];
        let d = delta(sum(&self.frame[p..end]), sum(new));
        self.frame[p..end].copy_from_slice(new);
        self.stack.add(p, d);
        d
    }

    fn zero(&mut self, p: usize, n: usize) {
        const ZEROS: [u8; 64] = [0; 64];
        let mut p = p;
        let mut n = n;
        while n > 0 {
            let k = n.min(ZEROS.len());
            self.write(p, &ZEROS[..k]);
            p += k;
            n -= k;
        }
    }
}
