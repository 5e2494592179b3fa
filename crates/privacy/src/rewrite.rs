//! The packet rewrite: walk the headers as `-s headers` does
//! ([`ringcap_wire::headers::visit_headers`]), then mask or anonymize the
//! chosen fields of each header in place, and rewrite every checksum that
//! covers one of them by the rule of the crate's [checksums](crate#checksums) (recomputed from the
//! bytes the client gets when it covers only captured bytes, otherwise 0),
//! never by updating its input value.
//!
//! Addresses are hidden wherever the rewrite knows them to be, not only in
//! the IP and Ethernet headers: ARP, ICMP redirect gateways and router
//! advertisements, ICMPv6 neighbor discovery (targets, redirect
//! destinations, link-layer address, prefix, route and DNS server options),
//! MLD group and source addresses, IPv4 route-recording and timestamp
//! options, IPv6 routing headers and the home address option.
//! Structures there that it does not understand (an unknown option or
//! routing type, the packet a redirect quotes) are zeroed when addresses
//! are hidden, not passed through; so is an authentication header's
//! integrity value (it is computed over hidden fields).
//!
//! What is rewritten never depends on a hidden value: the walk decides by
//! lengths, types and protocol numbers, and with the UDP ports masked a UDP
//! payload that looks like VXLAN is walked as VXLAN whatever its port.
//! Known limit: which bytes are payload is the walk's decision, which reads
//! the first bytes of a would-be header (a VXLAN flag, an MPLS payload's
//! first nibble); with `payload` masked, those bytes decide what is shown.

use crate::anon::Anon;
use crate::fields::{self, FieldSet};
use crate::sums::{Kind, Pseudo, Sums};
use ringcap_wire::ethernet::{self, ethertype};
use ringcap_wire::headers::{visit_headers, Visitor};
use ringcap_wire::ip::ip_proto;
use ringcap_wire::{arp, icmp, icmpv6, ipv4, ipv6, tcp, udp, Field};

/// Headers a frame may have (3 per tunnel level) before the rest is zeroed
/// unread (fail closed).
const MAX_HEADERS: usize = 16;

#[derive(Clone, Copy)]
enum Hdr {
    // Offsets as u32 (frames are far shorter) keep the per-packet arrays small.
    Eth(u32),
    Arp(u32),
    Ip(u32, bool),
    Ext(u32, u8),
    L4(u32, u8, u32),
}

struct Recorder<'s> {
    hdrs: &'s mut [Hdr; MAX_HEADERS],
    n: usize,
    overflow: Option<usize>,
    /// Headers not understood from here on.
    opaque: Option<usize>,
    vxlan_any_port: bool,
}

impl Recorder<'_> {
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

impl Visitor for Recorder<'_> {
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
    #[inline(always)]
    fn ext(&mut self, off: usize, kind: u8) {
        self.push(Hdr::Ext(off as u32, kind), off);
    }
    #[inline(always)]
    fn vxlan_any_port(&self) -> bool {
        self.vxlan_any_port
    }
    #[inline(always)]
    fn opaque(&mut self, off: usize) {
        self.opaque = Some(off);
    }
}

/// What to do to an address field.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum AddrOp {
    Keep,
    Zero,
    Anonymize,
}

/// The IP header a transport header belongs to.
#[derive(Clone, Copy)]
pub(crate) struct IpCtx {
    pub(crate) v6: bool,
    /// The datagram's end as its header announces it (`usize::MAX`: unknown).
    pub(crate) end: usize,
    pub(crate) src: usize,
    /// The pseudo-header's destination (an IPv6 routing header's final one).
    pub(crate) dst: usize,
    /// A routing header whose final destination is not understood.
    pub(crate) dst_unknown: bool,
    /// The datagram an ICMP or ICMPv6 error quotes.
    pub(crate) quoted: bool,
    /// An IPv4 fragment other than the first.
    pub(crate) later_fragment: bool,
}

/// The per-thread rewriter: masks and, with a key, anonymization.
pub struct Rewriter {
    pub(crate) mask: FieldSet,
    pub(crate) anon: Option<Anon>,
    pub(crate) ip_op: AddrOp,
    pub(crate) eth_op: AddrOp,
    /// Only IPv4 addresses change: [`crate::fast`] may take the frame.
    fast: bool,
}

impl Rewriter {
    pub(crate) fn new(mask: FieldSet, anon: Option<Anon>) -> Rewriter {
        let op = |f| {
            if mask.has(f) {
                AddrOp::Zero
            } else if anon.as_ref().is_some_and(|a| a.fields.has(f)) {
                AddrOp::Anonymize
            } else {
                AddrOp::Keep
            }
        };
        let (ip_op, eth_op) = (op(fields::IP_ADDR), op(fields::ETH_ADDR));
        Rewriter {
            mask,
            anon,
            ip_op,
            eth_op,
            fast: mask.is_empty() && ip_op == AddrOp::Anonymize && eth_op == AddrOp::Keep,
        }
    }

    /// Rewrites an Ethernet II frame (with any VLAN tags in its bytes) in
    /// place. Bytes after a nesting deeper than the rewriter follows are
    /// zeroed.
    pub fn rewrite_ethernet(&mut self, frame: &mut [u8]) {
        self.rewrite_ethernet_with(frame, &mut Scratch::new());
    }

    /// [`rewrite_ethernet`](Self::rewrite_ethernet) with per-packet
    /// tables kept from packet to packet (not set up again each time).
    pub(crate) fn rewrite_ethernet_with(&mut self, frame: &mut [u8], scratch: &mut Scratch) {
        if let Some(an) = self.anon.as_mut().filter(|_| self.fast) {
            if crate::fast::rewrite(an, frame) {
                return;
            }
        }
        self.rewrite_general(frame, scratch);
    }

    /// The general rewrite only (what [`crate::fast`] is checked against).
    #[cfg(test)]
    pub(crate) fn rewrite_ethernet_general(&mut self, frame: &mut [u8]) {
        self.rewrite_general(frame, &mut Scratch::new());
    }

    fn rewrite_general(&mut self, frame: &mut [u8], scratch: &mut Scratch) {
        let Scratch { hdrs, sums } = scratch;
        sums.clear();
        let mut rec = Recorder {
            hdrs,
            n: 0,
            overflow: None,
            opaque: None,
            vxlan_any_port: self.mask.has(fields::UDP_PORT),
        };
        let end = visit_headers(frame, &mut rec);
        let mut w = Work {
            frame,
            sums,
            limit: usize::MAX,
        };
        let mut ctx = IpCtx {
            v6: false,
            end: usize::MAX,
            src: 0,
            dst: 0,
            dst_unknown: false,
            quoted: false,
            later_fragment: false,
        };
        // The quote of the last ICMP error (start, end), until its IP header.
        let mut quote: Option<(usize, usize)> = None;
        for h in &rec.hdrs[..rec.n] {
            match *h {
                Hdr::Eth(off) => {
                    let off = off as usize;
                    self.mac(
                        &mut w,
                        off + ethernet::field::DESTINATION.start,
                        self.eth_op,
                    );
                    self.mac(&mut w, off + ethernet::field::SOURCE.start, self.eth_op);
                }
                Hdr::Arp(off) => self.arp(&mut w, off as usize),
                Hdr::Ip(off, v6) => {
                    ctx = self.ip(&mut w, off as usize, v6);
                    ctx.quoted = quote.take().is_some_and(|(q, _)| q == off as usize);
                }
                Hdr::Ext(off, kind) => self.ext(&mut w, off as usize, kind, &mut ctx),
                Hdr::L4(off, proto, end) => {
                    // Never past the datagram (into an Ethernet trailer).
                    let (off, end) = (off as usize, end as usize);
                    w.limit = end;
                    self.l4(&mut w, off, proto, &ctx);
                    if ctx.quoted {
                        self.quoted_transport(&mut w, off, proto, end, ctx.later_fragment);
                    }
                    w.limit = usize::MAX;
                    quote = match (proto, w.frame.get(off)) {
                        (ip_proto::ICMP, Some(3 | 4 | 5 | 11 | 12))
                        | (ip_proto::ICMPV6, Some(1..=4)) => Some((off + icmp::field::QUOTE, end)),
                        _ => None,
                    };
                }
            }
        }
        if let Some((q, end)) = quote {
            // An error whose quote the walk could not take for an IP header
            // (malformed): not understood, zeroed.
            w.zero(q, end.saturating_sub(q));
        }
        let zero_from = match rec.overflow.or(rec.opaque) {
            Some(off) => Some(off),
            None if self.mask.has(fields::PAYLOAD) => Some(end),
            None => None,
        };
        if let Some(p) = zero_from {
            // Hidden from `p` on, captured or not.
            w.sums.taint_from(p);
            if p < w.frame.len() {
                w.frame[p..].fill(0);
            }
        }
        w.sums.finish(w.frame);
    }

    /// The Ethernet address at `p` (as much of it as was captured).
    #[inline(always)]
    pub(crate) fn mac(&mut self, w: &mut Work<'_>, p: usize, op: AddrOp) {
        if op != AddrOp::Keep {
            self.mac_hidden(w, p, op);
        }
    }

    fn mac_hidden(&mut self, w: &mut Work<'_>, p: usize, op: AddrOp) {
        let new = match op {
            AddrOp::Keep => return,
            AddrOp::Zero => [0u8; 6],
            AddrOp::Anonymize => match w.frame.get(p..p + 6) {
                Some(cur) => {
                    let a = self.anon.as_mut().expect("anonymize without a key");
                    a.mac(cur.try_into().expect("6 bytes"))
                }
                // Cut short: its image cannot be known from a part.
                None => [0u8; 6],
            },
        };
        w.write(p, &new);
    }

    /// An IPv4 (`n == 4`) or IPv6 address (or a prefix of `n` bytes) at
    /// `p`, as far as it was captured (Crypto-PAn's image of a prefix is the
    /// prefix of the image).
    pub(crate) fn addr(&mut self, w: &mut Work<'_>, p: usize, n: usize, op: AddrOp) {
        if op == AddrOp::Keep {
            return;
        }
        let avail = w.frame.len().min(w.limit).saturating_sub(p).min(n);
        let mut a = [0u8; 16];
        if avail > 0 {
            a[..avail].copy_from_slice(&w.frame[p..p + avail]);
        }
        let new = match op {
            AddrOp::Anonymize if avail > 0 => {
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
            _ => [0u8; 16],
        };
        w.write(p, &new[..n]);
    }

    /// The address field `f` of the header at `base`.
    #[inline]
    pub(crate) fn addr_field(&mut self, w: &mut Work<'_>, base: usize, f: Field, op: AddrOp) {
        self.addr(w, base + f.start, f.len(), op);
    }

    /// An IPv4 header's two addresses: anonymized as a pair when both were
    /// captured (their lookups overlap), else one by one as far as captured
    /// (the same bytes either way when both were captured).
    fn ipv4_addrs(&mut self, w: &mut Work<'_>, off: usize) {
        use ipv4::field as f;
        if self.ip_op == AddrOp::Anonymize && w.limit == usize::MAX {
            if let (Some(s), Some(d)) = (
                w.frame.get(off + f::SRC_ADDR.start..off + f::SRC_ADDR.end),
                w.frame.get(off + f::DST_ADDR.start..off + f::DST_ADDR.end),
            ) {
                let an = self.anon.as_mut().expect("anonymize without a key");
                let (x, y) = an.ipv4_pair([s[0], s[1], s[2], s[3]], [d[0], d[1], d[2], d[3]]);
                w.write(off + f::SRC_ADDR.start, &x);
                w.write(off + f::DST_ADDR.start, &y);
                return;
            }
        }
        self.addr_field(w, off, f::SRC_ADDR, self.ip_op);
        self.addr_field(w, off, f::DST_ADDR, self.ip_op);
    }

    fn arp(&mut self, w: &mut Work<'_>, off: usize) {
        use arp::field as f;
        let (Some(htype), Some(ptype), Some(hlen), Some(plen)) = (
            w.word(off, f::HTYPE),
            w.word(off, f::PTYPE),
            w.byte(off + f::HLEN),
            w.byte(off + f::PLEN),
        ) else {
            return;
        };
        let (hlen, plen) = (usize::from(hlen), usize::from(plen));
        let sha = off + arp::FIXED_LEN;
        let spa = sha + hlen;
        let tha = spa + plen;
        let tpa = tha + hlen;
        let hidden = self.ip_op != AddrOp::Keep || self.eth_op != AddrOp::Keep;
        if htype == 1 && hlen == 6 {
            self.mac(w, sha, self.eth_op);
            self.mac(w, tha, self.eth_op);
        } else if hidden {
            w.zero(sha, hlen);
            w.zero(tha, hlen);
        }
        if ptype == ethertype::IPV4 && plen == 4 {
            self.addr(w, spa, 4, self.ip_op);
            self.addr(w, tpa, 4, self.ip_op);
        } else if hidden {
            // Addresses of a kind not understood.
            w.zero(spa, plen);
            w.zero(tpa, plen);
        }
    }

    fn ip(&mut self, w: &mut Work<'_>, off: usize, v6: bool) -> IpCtx {
        if !v6 {
            use ipv4::field as f;
            let hl = usize::from(w.frame.get(off + f::VER_IHL).map_or(5, |b| b & 0xf)) * 4;
            let end = match w.word(off, f::LENGTH) {
                Some(tl) if usize::from(tl) >= hl => off + usize::from(tl),
                _ => usize::MAX,
            };
            let later_fragment = w.word(off, f::FLG_OFF).is_some_and(|f| f & 0x1fff != 0);
            // The header checksum covers this header only.
            w.sums.push(
                off + f::CHECKSUM.start,
                off,
                off + hl,
                Kind::Inet { udp: false },
                Pseudo::None,
                false,
                false,
            );
            self.ip_fields(w, off, false);
            self.ipv4_addrs(w, off);
            if hl > ipv4::MIN_HEADER_LEN {
                self.ipv4_options(w, off + ipv4::MIN_HEADER_LEN, off + hl);
            }
            IpCtx {
                v6,
                end,
                src: off + f::SRC_ADDR.start,
                dst: off + f::DST_ADDR.start,
                dst_unknown: false,
                quoted: false,
                later_fragment,
            }
        } else {
            use ipv6::field as f;
            let end = match w.word(off, f::LENGTH) {
                Some(pl) if pl != 0 => off + ipv6::HEADER_LEN + usize::from(pl),
                _ => usize::MAX,
            };
            self.ip_fields(w, off, true);
            self.addr_field(w, off, f::SRC_ADDR, self.ip_op);
            self.addr_field(w, off, f::DST_ADDR, self.ip_op);
            IpCtx {
                v6,
                end,
                src: off + f::SRC_ADDR.start,
                dst: off + f::DST_ADDR.start,
                dst_unknown: false,
                quoted: false,
                later_fragment: false,
            }
        }
    }

    /// The masked fields of an IP header other than its addresses.
    pub(crate) fn ip_fields(&mut self, w: &mut Work<'_>, off: usize, v6: bool) {
        let m = self.mask;
        if !v6 {
            use ipv4::field as f;
            if m.has(fields::IP_TOS) {
                w.zero(off + f::DSCP_ECN, 1);
            }
            if m.has(fields::IP_ID) {
                w.zero_field(off, f::IDENT);
            }
            if m.has(fields::IP_TTL) {
                w.zero(off + f::TTL, 1);
            }
            return;
        }
        use ipv6::field as f;
        if m.has(fields::IP_TOS) || m.has(fields::IPV6_FLOW) {
            // As much of the first word as was captured.
            let mut b = [0u8; 4];
            let word0 = off + f::VER_TC_FLOW.start;
            let avail = w.frame.len().saturating_sub(word0).min(4);
            if avail > 0 {
                b[..avail].copy_from_slice(&w.frame[word0..word0 + avail]);
            }
            {
                let mut word = u32::from_be_bytes(b);
                if m.has(fields::IP_TOS) {
                    word &= !0x0ff0_0000;
                }
                if m.has(fields::IPV6_FLOW) {
                    word &= !0x000f_ffff;
                }
                w.write(word0, &word.to_be_bytes());
            }
        }
        if m.has(fields::IP_TTL) {
            w.zero(off + f::HOP_LIMIT, 1);
        }
    }

    fn l4(&mut self, w: &mut Work<'_>, off: usize, proto: u8, ip: &IpCtx) {
        let pseudo = if ip.dst_unknown {
            Pseudo::Unknown
        } else if ip.v6 {
            Pseudo::V6 {
                src: ip.src as u32,
                dst: ip.dst as u32,
                proto,
            }
        } else {
            Pseudo::V4 {
                src: ip.src as u32,
                dst: ip.dst as u32,
                proto,
            }
        };
        let m = self.mask;
        let hidden_pseudo = self.ip_op != AddrOp::Keep;
        let inet = Kind::Inet { udp: false };
        let sum = match proto {
            ip_proto::TCP => Some((off + tcp::field::CHECKSUM.start, inet, pseudo)),
            // UDP over IPv4 without a checksum (0) keeps none.
            ip_proto::UDP if !ip.v6 && w.word(off, udp::field::CHECKSUM) == Some(0) => None,
            ip_proto::UDP => Some((
                off + udp::field::CHECKSUM.start,
                Kind::Inet { udp: true },
                pseudo,
            )),
            ip_proto::ICMP => Some((off + icmp::field::CHECKSUM.start, inet, Pseudo::None)),
            ip_proto::ICMPV6 => Some((off + icmpv6::field::CHECKSUM.start, inet, pseudo)),
            ip_proto::GRE => match w.frame.get(off) {
                Some(b) if b & 0x80 != 0 => Some((off + 4, inet, Pseudo::None)),
                _ => None,
            },
            ip_proto::SCTP => Some((off + 8, Kind::Crc32c, Pseudo::None)),
            _ => None,
        };
        if let Some((field, kind, pseudo)) = sum {
            let tainted = hidden_pseudo && !matches!(pseudo, Pseudo::None);
            // UDP covers what its own length says.
            let end = match (proto, w.word(off, udp::field::LENGTH)) {
                (ip_proto::UDP, Some(l)) if usize::from(l) >= udp::HEADER_LEN => {
                    off + usize::from(l)
                }
                (ip_proto::UDP, _) => usize::MAX,
                _ => ip.end,
            };
            // TCP and SCTP hold only payload past their headers; the others
            // may hold headers the walk did not reach when cut short (a
            // quoted datagram, a tunnel's inner frame).
            let opaque_tail =
                !matches!(proto, ip_proto::TCP | ip_proto::SCTP) || m.has(fields::PAYLOAD);
            w.sums
                .push(field, off, end, kind, pseudo, tainted, opaque_tail);
        }
        match proto {
            ip_proto::TCP => {
                use tcp::field as f;
                if m.has(fields::TCP_PORT) {
                    w.zero_field(off, f::SRC_PORT);
                    w.zero_field(off, f::DST_PORT);
                }
                if m.has(fields::TCP_SEQ) {
                    w.zero_field(off, f::SEQ_NUM);
                    w.zero_field(off, f::ACK_NUM);
                }
                if m.has(fields::TCP_WINDOW) {
                    w.zero_field(off, f::WIN_SIZE);
                }
                if m.has(fields::TCP_OPTIONS) {
                    let options = off + tcp::MIN_HEADER_LEN;
                    match w.frame.get(off + f::OFF_FLAGS.start) {
                        Some(&doff) => {
                            let hl = usize::from(doff >> 4) * 4;
                            if hl > tcp::MIN_HEADER_LEN {
                                w.zero(options, hl - tcp::MIN_HEADER_LEN);
                            }
                        }
                        // Options hidden past the capture.
                        None => w.sums.taint(options),
                    }
                }
            }
            ip_proto::UDP if m.has(fields::UDP_PORT) => {
                w.zero_field(off, udp::field::SRC_PORT);
                w.zero_field(off, udp::field::DST_PORT);
            }
            ip_proto::ICMP => self.icmp4(w, off),
            ip_proto::ICMPV6 => self.icmp6(w, off),
            _ => {}
        }
    }
}

/// A rewriter's per-packet tables, kept by its caller from one packet to
/// the next: setting them up (~640 bytes) was a measurable part of a small
/// packet's rewrite.
pub(crate) struct Scratch {
    hdrs: [Hdr; MAX_HEADERS],
    sums: Sums,
}

impl Scratch {
    pub(crate) fn new() -> Scratch {
        Scratch {
            hdrs: [Hdr::Eth(0); MAX_HEADERS],
            sums: Sums::new(),
        }
    }
}

/// One frame being rewritten.
pub(crate) struct Work<'a> {
    pub(crate) frame: &'a mut [u8],
    pub(crate) sums: &'a mut Sums,
    /// Where the transport message being rewritten ends (its datagram's end).
    pub(crate) limit: usize,
}

impl Work<'_> {
    /// Writes `new` at `p` (as much as the frame holds); the checksums
    /// covering `p` may no longer keep their value, whether or not a byte
    /// changed (and whether or not it was captured).
    pub(crate) fn write(&mut self, p: usize, new: &[u8]) {
        if new.is_empty() {
            return;
        }
        self.sums.taint_span(p, p + new.len());
        let end = (p + new.len()).min(self.frame.len()).min(self.limit);
        if p < end {
            self.frame[p..end].copy_from_slice(&new[..end - p]);
        }
    }

    /// Zeroes `n` bytes at `p` (as many as the frame holds), like
    /// [`write`](Self::write).
    pub(crate) fn zero(&mut self, p: usize, n: usize) {
        if n == 0 {
            return;
        }
        self.sums.taint_span(p, p.saturating_add(n));
        let end = p.saturating_add(n).min(self.frame.len()).min(self.limit);
        if p < end {
            self.frame[p..end].fill(0);
        }
    }

    /// Zeroes field `f` of the header at `base`, like [`zero`](Self::zero).
    #[inline]
    pub(crate) fn zero_field(&mut self, base: usize, f: Field) {
        self.zero(base + f.start, f.len());
    }

    /// The 16-bit field `f` of the header at `base`, if captured (the
    /// walk decided the header is there, so not bounded by the message).
    #[inline]
    pub(crate) fn word(&self, base: usize, f: Field) -> Option<u16> {
        let p = base + f.start;
        Some(u16::from_be_bytes([
            *self.frame.get(p)?,
            *self.frame.get(p + 1)?,
        ]))
    }

    /// The 16-bit field `f` of the message at `base`, if captured and
    /// inside the current message.
    #[inline]
    pub(crate) fn msg_word(&self, base: usize, f: Field) -> Option<u16> {
        let p = base + f.start;
        Some(u16::from_be_bytes([self.byte(p)?, self.byte(p + 1)?]))
    }

    /// The byte at `p`, if captured and inside the current message.
    pub(crate) fn byte(&self, p: usize) -> Option<u8> {
        if p < self.limit {
            self.frame.get(p).copied()
        } else {
            None
        }
    }
}
