//! [`header_len`]: how many leading bytes of a captured Ethernet frame are
//! protocol headers.
//!
//! This is what `-s headers` keeps of each packet, so it runs once per
//! captured packet. The common path (Ethernet, VLAN tags, IPv4/IPv6 with
//! extension headers, transport) is straight-line code through inlined
//! helpers: no recursion, no allocation, no indirect dispatch per layer.
//! Tunnels (GRE, VXLAN, IPIP) return to a small outer loop that resumes at
//! the inner Ethernet header or EtherType; every tunnel header consumes at
//! least 4 bytes, so the loop is bounded by the frame length and the stack
//! depth is constant whatever the nesting.
//!
//! # Rules
//!
//! * Ethernet II (14 bytes), then any number of 802.1Q (0x8100), 802.1ad
//!   (0x88a8) or 0x9100 VLAN tags (4 bytes each). An 802.3 length instead
//!   of an EtherType stops after the 14 bytes.
//! * ARP (0x0806): the whole ARP packet, `8 + 2*hlen + 2*plen` bytes.
//! * MPLS (0x8847, 0x8848): label stack entries (4 bytes each) up to the
//!   bottom of stack; then IPv4 or IPv6 if the next nibble is 4 or 6,
//!   otherwise stop (pseudowires are ambiguous).
//! * IPv4: IHL*4 bytes, options included. Non-first fragments (offset != 0)
//!   stop after the IP header. The rest of the walk is confined to the
//!   datagram (`total_len`, when it is at least the header length; TSO
//!   captures with a zero total length are not confined), so Ethernet
//!   padding is never taken for a header.
//! * IPv6: 40 bytes, confined to `40 + payload_len` unless that is zero
//!   (jumbogram); then the extension headers hop-by-hop, routing and
//!   destination options (`(hdr_ext_len + 1) * 8` bytes), fragment (8 bytes;
//!   a non-first fragment stops after it) and AH (`(payload_len + 2) * 4`,
//!   also after IPv4). No next header (59) stops.
//! * Upper layers, after IPv4 or IPv6:
//!   * TCP: data offset * 4 bytes, options included.
//!   * UDP: 8 bytes; to port 4789 followed by a VXLAN header with the I flag
//!     set, 8 more bytes and the inner Ethernet frame is walked.
//!   * ICMP / ICMPv6: 8 bytes. For error messages (ICMP types 3, 4, 5, 11,
//!     12; ICMPv6 types 1 to 4) the quoted IP header (IPv4 with options, or
//!     the IPv6 fixed header) and the 8 bytes after it count as headers too,
//!     as tcpdump shows them (or as many of them as there are).
//!   * SCTP: the 12-byte common header (chunks are payload).
//!   * GRE (versions 0 and 1): 4 bytes plus the checksum, key, sequence and
//!     (version 1) acknowledgment words announced by the flags; then the
//!     payload is walked according to its protocol type, an EtherType
//!     (0x6558 = inner Ethernet frame, 0x0800/0x86dd = inner IP, ...).
//!     GRE with the RFC 1701 routing bit stops before the GRE header.
//!   * IPIP (4) and IPv6-in-IP (41): the inner IP packet is walked.
//!   * ESP (50): the 8-byte SPI and sequence number.
//!   * Anything else: stop after the IP header (and its extensions).
//! * Cut short: a header cut short by the end of the frame (or of the IP
//!   datagram that holds it, or of the ICMP message quoting it) is still
//!   header, not payload: the result is that end. This applies to the
//!   mandatory part of every header above and to the length it claims
//!   (a TCP header with a data offset of 15 and 24 bytes present keeps the
//!   24), provided the fields present are valid: the IP version and IHL
//!   (first byte), the TCP data offset (13th byte), the AH length (2nd
//!   byte), the GRE routing bit and version (first two bytes), the VXLAN I
//!   flag (first byte; without it, the UDP payload is payload).
//! * Fallback: when a header is not understood or has an invalid field
//!   (IHL < 5, TCP data offset < 5, AH length 0, a wrong IP version, GRE
//!   routing, ...), even in a header cut short, the result is the end of the
//!   last header before it. It never exceeds `max` or `frame.len()`.

use crate::arp::ArpPacket;
use crate::esp::EspPacket;
use crate::ethernet::{ethertype, EthernetFrame};
use crate::gre::GrePacket;
use crate::icmp::Icmpv4Packet;
use crate::icmpv6::Icmpv6Packet;
use crate::ip::ip_proto;
use crate::ipv4::Ipv4Packet;
use crate::ipv6::Ipv6Packet;
use crate::ipv6_ext::{AuthHeader, Ipv6ExtHeader, Ipv6FragmentHeader};
use crate::mpls::MplsLabel;
use crate::sctp::SctpPacket;
use crate::tail;
use crate::tcp::TcpPacket;
use crate::udp::{self, UdpPacket};
use crate::vlan::VlanTag;
use crate::vxlan::{self, VxlanPacket};
use crate::Error;

/// Where the walk resumes after entering a tunnel.
#[derive(Clone, Copy)]
enum Resume {
    /// An Ethernet II header (VXLAN, GRE 0x6558).
    Ethernet,
    /// The payload of something that announced this EtherType (GRE, IPIP).
    EtherType(u16),
}

/// Where the walk ends when the header at `off` of `buf` could not be
/// viewed: a header cut short by the end of `buf` (the frame, or the IP
/// datagram holding it) is still header, so the walk ends there; a
/// malformed or unsupported header ends the walk before it.
#[inline(always)]
fn cut(buf: &[u8], off: usize, e: Error) -> usize {
    if e == Error::Truncated {
        buf.len().max(off)
    } else {
        off
    }
}

/// Outcome of walking one encapsulation level.
enum Step {
    /// The walk ends at this offset.
    Done(usize),
    /// A tunnel payload starts at this offset.
    Inner(Resume, usize),
}

/// Length in bytes of the protocol headers at the start of an Ethernet II frame.
///
/// `frame` is the captured bytes (possibly shorter than the packet on the
/// wire). The result is the number of leading bytes that are protocol
/// headers and nothing of the payload, never more than `max` and never more
/// than `frame.len()`. A header cut short by the end of the frame is header:
/// it is kept up to the end. See the [module documentation](self) for the
/// rules and the fallback for malformed frames.
///
/// ```
/// // Ethernet + IPv4 + UDP + 4 bytes of payload.
/// let mut f = vec![0u8; 12];
/// f.extend_from_slice(&[0x08, 0x00]);
/// f.extend_from_slice(&[0x45, 0, 0, 32, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
/// f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00]);
/// f.extend_from_slice(b"data");
/// assert_eq!(ringcap_wire::header_len(&f, usize::MAX), 42);
/// assert_eq!(ringcap_wire::header_len(&f, 40), 40);
/// // Cut 16 bytes into the IPv4 header: those 16 bytes are header.
/// assert_eq!(ringcap_wire::header_len(&f[..30], usize::MAX), 30);
/// // Cut 4 bytes into the UDP header.
/// assert_eq!(ringcap_wire::header_len(&f[..38], usize::MAX), 38);
/// ```
#[inline]
pub fn header_len(frame: &[u8], max: usize) -> usize {
    walk(frame, max, &mut NoVisit).min(max).min(frame.len())
}

/// Told of each header the walk of [`header_len`] recognizes, in the order
/// of the frame, with its offset in the frame. This is how the privacy
/// transforms find the fields they rewrite with the same rules as `-s
/// headers`. Headers come in nesting order: every transport header reported
/// encloses everything reported after it (a tunnel's inner frame, the
/// datagram an ICMP error quotes), since the walk only ever goes deeper.
///
/// Link and IP headers are reported when whole or cut short by the end of
/// the frame with the fields present valid (see the module rules);
/// malformed ones are not. Transport headers are reported whether or not
/// they parse (their fixed fields are where they are, even behind a bad
/// TCP data offset). Any header may be cut short: a visitor must check
/// lengths.
pub trait Visitor {
    /// An Ethernet II header (possibly cut short by the end of the frame).
    #[inline(always)]
    fn ethernet(&mut self, _off: usize) {}
    /// An ARP packet (its fixed 8 bytes present).
    #[inline(always)]
    fn arp(&mut self, _off: usize) {}
    /// An IPv4 (`v6 == false`) or IPv6 header, also the datagram quoted by
    /// an ICMP or ICMPv6 error (reported right after that ICMP header).
    #[inline(always)]
    fn ip(&mut self, _off: usize, _v6: bool) {}
    /// The upper-layer header of protocol `proto` (TCP, UDP, ICMP, ICMPv6,
    /// SCTP, GRE, ESP) after the IP header reported last, in a datagram
    /// that ends at `end` (the IP length, or the frame's end; for a quoted
    /// datagram, the end of the ICMP message).
    #[inline(always)]
    fn transport(&mut self, _off: usize, _proto: u8, _end: usize) {}
    /// An extension header between an IP header and its upper layer: IPv6
    /// hop-by-hop, routing or destination options (`kind` is its protocol
    /// number: 0, 43, 60), or an authentication header (51, after IPv4 or
    /// IPv6), whole or cut short by the end of the frame (at least its first
    /// two bytes present).
    #[inline(always)]
    fn ext(&mut self, _off: usize, _kind: u8) {}
    /// The walk stops at `off` before bytes that hold headers it does not
    /// understand: a malformed IPv4 or IPv6 header (a wrong version or
    /// IHL), an MPLS payload that is not IP (a pseudowire). The privacy
    /// rewrite zeroes from there (fail closed).
    #[inline(always)]
    fn opaque(&mut self, _off: usize) {}
    /// Whether a UDP payload whose first byte has VXLAN's I flag is walked as
    /// VXLAN whatever the destination port. The privacy rewrite asks for it
    /// when the ports are hidden: the walk, and so what the rewrite changes,
    /// must not depend on a hidden value.
    #[inline(always)]
    fn vxlan_any_port(&self) -> bool {
        false
    }
}

/// The visitor of [`header_len`]: told nothing, costs nothing.
struct NoVisit;
impl Visitor for NoVisit {}

/// Walks the headers of an Ethernet II frame like [`header_len`], telling
/// `visitor` of each; returns the length of the headers.
pub fn visit_headers<V: Visitor>(frame: &[u8], visitor: &mut V) -> usize {
    walk(frame, usize::MAX, visitor).min(frame.len())
}

/// Walks the headers; returns the end of the headers (or something at least
/// `max` once that is reached).
///
/// The common path (Ethernet, VLANs, IP, transport) is straight-line code
/// through inlined helpers; only tunnels go round the loop.
#[inline(always)]
fn walk<V: Visitor>(frame: &[u8], max: usize, v: &mut V) -> usize {
    // The part of the frame the current layer may occupy; narrowed to the
    // IP datagram by the IP length fields. `off <= buf.len()` always.
    let mut buf = frame;
    let mut off = 0usize;
    let mut resume = Resume::Ethernet;
    loop {
        if off >= max {
            return off;
        }
        match link(&mut buf, off, resume, v) {
            Step::Done(end) => return end,
            Step::Inner(r, o) => {
                resume = r;
                off = o;
            }
        }
    }
}

/// Ethernet header (unless resuming at an EtherType), VLAN tags, and what
/// the EtherType says follows.
#[inline(always)]
fn link<V: Visitor>(buf: &mut &[u8], mut off: usize, resume: Resume, v: &mut V) -> Step {
    let mut et = match resume {
        Resume::EtherType(t) => t,
        Resume::Ethernet => match EthernetFrame::new_checked(tail(buf, off)) {
            Ok(eth) => {
                v.ethernet(off);
                off += eth.header_len();
                eth.ethertype()
            }
            Err(e) => {
                if e == Error::Truncated {
                    v.ethernet(off);
                }
                return Step::Done(cut(buf, off, e));
            }
        },
    };
    while ethertype::is_vlan(et) {
        match VlanTag::new_checked(tail(buf, off)) {
            Ok(tag) => {
                off += tag.header_len();
                et = tag.ethertype();
            }
            Err(e) => return Step::Done(cut(buf, off, e)),
        }
    }
    match et {
        ethertype::IPV4 => ipv4(buf, off, v),
        ethertype::IPV6 => ipv6(buf, off, v),
        ethertype::ARP => Step::Done(match ArpPacket::new_checked(tail(buf, off)) {
            Ok(a) => {
                v.arp(off);
                off + a.packet_len()
            }
            Err(e) => {
                if e == Error::Truncated && buf.len() >= off + crate::arp::FIXED_LEN {
                    v.arp(off);
                }
                cut(buf, off, e)
            }
        }),
        ethertype::MPLS_UNICAST | ethertype::MPLS_MULTICAST => mpls(buf, off, v),
        _ => Step::Done(off),
    }
}

/// MPLS label stack, then IPv4/IPv6 guessed from the first nibble.
#[inline(never)]
fn mpls<V: Visitor>(buf: &mut &[u8], mut off: usize, v: &mut V) -> Step {
    loop {
        let label = match MplsLabel::new_checked(tail(buf, off)) {
            Ok(label) => label,
            Err(e) => return Step::Done(cut(buf, off, e)),
        };
        off += label.header_len();
        if label.bottom_of_stack() {
            return match label.payload().first().map(|b| b >> 4) {
                Some(4) => ipv4(buf, off, v),
                Some(6) => ipv6(buf, off, v),
                Some(_) => {
                    v.opaque(off);
                    Step::Done(off)
                }
                None => Step::Done(off),
            };
        }
    }
}

/// IPv4 header, then the upper layer unless this is a non-first fragment.
#[inline(always)]
fn ipv4<V: Visitor>(buf: &mut &[u8], off: usize, v: &mut V) -> Step {
    let ip = match Ipv4Packet::new_checked(tail(buf, off)) {
        Ok(ip) => ip,
        Err(e) => {
            if e == Error::Truncated {
                v.ip(off, false);
            } else {
                v.opaque(off);
            }
            return Step::Done(cut(buf, off, e));
        }
    };
    v.ip(off, false);
    let hl = ip.header_len();
    let tl = usize::from(ip.total_len());
    if tl >= hl {
        if let Some(b) = buf.get(..off + tl) {
            *buf = b;
        }
    }
    if ip.frag_offset() != 0 {
        return Step::Done(off + hl);
    }
    upper(buf, off + hl, ip.protocol(), false, v)
}

/// IPv6 fixed header, then extension headers and the upper layer.
#[inline(always)]
fn ipv6<V: Visitor>(buf: &mut &[u8], off: usize, v: &mut V) -> Step {
    let ip = match Ipv6Packet::new_checked(tail(buf, off)) {
        Ok(ip) => ip,
        Err(e) => {
            if e == Error::Truncated {
                v.ip(off, true);
            } else {
                v.opaque(off);
            }
            return Step::Done(cut(buf, off, e));
        }
    };
    v.ip(off, true);
    let hl = ip.header_len();
    let pl = usize::from(ip.payload_len());
    if pl != 0 {
        if let Some(b) = buf.get(..off + hl + pl) {
            *buf = b;
        }
    }
    upper(buf, off + hl, ip.next_header(), true, v)
}

/// Extension headers (IPv6 ones only if `v6`; AH for both) and the
/// protocol after an IP header.
#[inline(always)]
fn upper<V: Visitor>(buf: &[u8], mut off: usize, mut proto: u8, v6: bool, v: &mut V) -> Step {
    loop {
        let rest = tail(buf, off);
        // Tells the visitor of a transport header, parsed or not.
        let mut seen = |_: Result<(), Error>| v.transport(off, proto, buf.len());
        match proto {
            ip_proto::TCP => {
                let t = TcpPacket::new_checked(rest);
                seen(t.map(|_| ()));
                return Step::Done(match t {
                    Ok(t) => off + t.header_len(),
                    Err(e) => cut(buf, off, e),
                });
            }
            ip_proto::UDP => {
                let u = UdpPacket::new_checked(rest);
                seen(u.map(|_| ()));
                let u = match u {
                    Ok(u) => u,
                    Err(e) => return Step::Done(cut(buf, off, e)),
                };
                off += udp::HEADER_LEN;
                if u.dst_port() != vxlan::UDP_PORT && !v.vxlan_any_port() {
                    return Step::Done(off);
                }
                return match VxlanPacket::new_checked(u.payload()) {
                    Ok(v) if v.vni_valid() => Step::Inner(Resume::Ethernet, off + v.header_len()),
                    Ok(_) => Step::Done(off),
                    // Cut short: VXLAN (and kept) only if the I flag shows it.
                    Err(e) => match u.payload().first() {
                        Some(&flags) if flags & vxlan::FLAG_I != 0 => Step::Done(cut(buf, off, e)),
                        _ => Step::Done(off),
                    },
                };
            }
            ip_proto::ICMP => return Step::Done(off + icmp_len(rest, off, false, v)),
            ip_proto::ICMPV6 => return Step::Done(off + icmp_len(rest, off, true, v)),
            ip_proto::SCTP => {
                let s = SctpPacket::new_checked(rest);
                seen(s.map(|_| ()));
                return Step::Done(match s {
                    Ok(s) => off + s.header_len(),
                    Err(e) => cut(buf, off, e),
                });
            }
            ip_proto::GRE => {
                let g = GrePacket::new_checked(rest);
                seen(g.map(|_| ()));
                return match g {
                    Ok(g) => {
                        let r = match g.protocol_type() {
                            ethertype::TRANSPARENT_ETHERNET => Resume::Ethernet,
                            p => Resume::EtherType(p),
                        };
                        Step::Inner(r, off + g.header_len())
                    }
                    Err(e) => Step::Done(cut(buf, off, e)),
                };
            }
            ip_proto::IPV4 => return Step::Inner(Resume::EtherType(ethertype::IPV4), off),
            ip_proto::IPV6 => return Step::Inner(Resume::EtherType(ethertype::IPV6), off),
            ip_proto::ESP => {
                let e = EspPacket::new_checked(rest);
                seen(e.map(|_| ()));
                return Step::Done(match e {
                    Ok(e) => off + e.header_len(),
                    Err(e) => cut(buf, off, e),
                });
            }
            ip_proto::AH => match AuthHeader::new_checked(rest) {
                Ok(ah) => {
                    v.ext(off, proto);
                    off += ah.header_len();
                    proto = ah.next_header();
                }
                Err(e) => {
                    if e == Error::Truncated && rest.len() >= 2 {
                        v.ext(off, proto);
                    }
                    return Step::Done(cut(buf, off, e));
                }
            },
            ip_proto::HOP_BY_HOP | ip_proto::IPV6_ROUTING | ip_proto::IPV6_DEST_OPTS if v6 => {
                match Ipv6ExtHeader::new_checked(rest) {
                    Ok(ext) => {
                        v.ext(off, proto);
                        off += ext.header_len();
                        proto = ext.next_header();
                    }
                    Err(e) => {
                        if e == Error::Truncated && rest.len() >= 2 {
                            v.ext(off, proto);
                        }
                        return Step::Done(cut(buf, off, e));
                    }
                }
            }
            ip_proto::IPV6_FRAGMENT if v6 => match Ipv6FragmentHeader::new_checked(rest) {
                Ok(frag) => {
                    off += frag.header_len();
                    if frag.frag_offset() != 0 {
                        return Step::Done(off);
                    }
                    proto = frag.next_header();
                }
                Err(e) => return Step::Done(cut(buf, off, e)),
            },
            _ => return Step::Done(off),
        }
    }
}

/// Header bytes of the ICMP (`v6 == false`) or ICMPv6 message at the start
/// of `rest`: the 8-byte header, and for errors also the quoted IP header
/// plus the 8 bytes after it; each of them up to the end of `rest` if cut
/// short by it.
/// `off` is where `rest` starts in the frame, for the visitor.
#[inline]
fn icmp_len<V: Visitor>(rest: &[u8], off: usize, v6: bool, v: &mut V) -> usize {
    let proto = if v6 { ip_proto::ICMPV6 } else { ip_proto::ICMP };
    let parsed = if v6 {
        Icmpv6Packet::new_checked(rest).map(|p| (p.is_error(), p.payload()))
    } else {
        Icmpv4Packet::new_checked(rest).map(|p| (p.is_error(), p.payload()))
    };
    let (is_error, quoted) = match parsed {
        Ok(x) => x,
        Err(e) => {
            v.transport(off, proto, off + rest.len());
            return cut(rest, 0, e);
        }
    };
    v.transport(off, proto, off + rest.len());
    if !is_error {
        return crate::icmp::HEADER_LEN;
    }
    let inner = if v6 {
        Ipv6Packet::new_checked(quoted).map(|p| (p.header_len(), p.next_header()))
    } else {
        Ipv4Packet::new_checked(quoted).map(|p| (p.header_len(), p.protocol()))
    };
    let q = off + crate::icmp::HEADER_LEN;
    crate::icmp::HEADER_LEN
        + match inner {
            Ok((hl, proto)) => {
                v.ip(q, v6);
                if hl < quoted.len() {
                    v.transport(q + hl, proto, q + quoted.len());
                }
                (hl + 8).min(quoted.len())
            }
            Err(e) => {
                if e == Error::Truncated {
                    v.ip(q, v6);
                }
                cut(quoted, 0, e)
            }
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_MAX: usize = usize::MAX;

    fn hl(f: &[u8]) -> usize {
        header_len(f, NO_MAX)
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        f.extend_from_slice(&et.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn vlan(vid: u16, et: u16, payload: &[u8]) -> Vec<u8> {
        cat(&[&vid.to_be_bytes(), &et.to_be_bytes(), payload])
    }

    fn ipv4_full(proto: u8, frag: u16, options: &[u8], payload: &[u8]) -> Vec<u8> {
        assert_eq!(options.len() % 4, 0);
        let hl = 20 + options.len();
        let tl = (hl + payload.len()) as u16;
        let mut h = vec![0x40 | (hl / 4) as u8, 0];
        h.extend_from_slice(&tl.to_be_bytes());
        h.extend_from_slice(&[0x12, 0x34]);
        h.extend_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        h.extend_from_slice(options);
        h.extend_from_slice(payload);
        h
    }

    fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
        ipv4_full(proto, 0x4000, &[], payload)
    }

    fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        h.extend_from_slice(&[next, 64]);
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        h.extend_from_slice(payload);
        h
    }

    /// TCP header with `opt_words` 32-bit words of options (NOPs) + payload.
    fn tcp(opt_words: usize, payload: &[u8]) -> Vec<u8> {
        let doff = 5 + opt_words as u8;
        let mut h = vec![0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0];
        h.extend_from_slice(&[doff << 4, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        h.resize(h.len() + opt_words * 4, 1);
        h.extend_from_slice(payload);
        h
    }

    fn udp(dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0xc3, 0x50];
        h.extend_from_slice(&dport.to_be_bytes());
        h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        h.extend_from_slice(&[0, 0]);
        h.extend_from_slice(payload);
        h
    }

    /// Extension header (hop-by-hop / routing / destination options) of
    /// `(len + 1) * 8` bytes.
    fn ext(next: u8, len: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![next, len];
        h.resize(h.len() + usize::from(len) * 8 + 6, 0);
        h.extend_from_slice(payload);
        h
    }

    fn frag6(next: u8, offset: u16, more: bool, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![next, 0];
        h.extend_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
        h.extend_from_slice(&[0, 0, 0, 42]);
        h.extend_from_slice(payload);
        h
    }

    fn ah(next: u8, payload_len: u8, payload: &[u8]) -> Vec<u8> {
        let len = (usize::from(payload_len) + 2) * 4;
        let mut h = vec![next, payload_len, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1];
        h.resize(len, 0xa5);
        h.extend_from_slice(payload);
        h
    }

    const DATA: &[u8] = b"0123456789abcdef";

    /// Checks the full frame gives the last of `bounds` (where each header
    /// ends), every truncation within the headers keeps everything up to the
    /// cut (a header cut short is still header), and every truncation after
    /// them keeps the headers.
    fn check_boundaries(frame: &[u8], bounds: &[usize]) {
        assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
        let last = *bounds.last().unwrap();
        assert_eq!(hl(frame), last, "full frame");
        for cut in 0..=frame.len() {
            let expect = cut.min(last);
            assert_eq!(hl(&frame[..cut]), expect, "cut at {cut} of {bounds:?}");
        }
    }

    #[test]
    fn ipv4_tcp_with_options() {
        let f = eth(0x0800, &ipv4(6, &tcp(5, DATA)));
        check_boundaries(&f, &[0, 14, 34, 74]);
    }

    #[test]
    fn ipv4_with_options_udp() {
        let opts = [0x94, 0x04, 0, 0, 1, 1, 1, 0]; // router alert, NOP, EOL
        let f = eth(0x0800, &ipv4_full(17, 0, &opts, &udp(53, DATA)));
        check_boundaries(&f, &[0, 14, 42, 50]);
        let max_opts = [1u8; 40];
        let f = eth(0x0800, &ipv4_full(6, 0, &max_opts, &tcp(10, DATA)));
        check_boundaries(&f, &[0, 14, 74, 134]);
    }

    #[test]
    fn vlan_and_qinq() {
        let inner = ipv4(6, &tcp(0, DATA));
        let f = eth(0x8100, &vlan(100, 0x0800, &inner));
        check_boundaries(&f, &[0, 14, 18, 38, 58]);
        let f = eth(0x88a8, &vlan(10, 0x8100, &vlan(20, 0x0800, &inner)));
        check_boundaries(&f, &[0, 14, 18, 22, 42, 62]);
        let f = eth(
            0x9100,
            &vlan(10, 0x8100, &vlan(20, 0x86dd, &ipv6(17, &udp(9, DATA)))),
        );
        check_boundaries(&f, &[0, 14, 18, 22, 62, 70]);
    }

    #[test]
    fn arp() {
        let arp = [
            0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0,
            0, 0, 0, 0, 10, 0, 0, 2,
        ];
        let mut f = eth(0x0806, &arp);
        f.resize(60, 0); // Ethernet padding
        check_boundaries(&f, &[0, 14, 42]);
        // Non-Ethernet/IPv4 ARP: 8 + 2*8 + 2*16
        let mut big = vec![0x00, 0x20, 0x86, 0xdd, 8, 16, 0, 1];
        big.resize(8 + 16 + 32, 0x77);
        let f = eth(0x0806, &big);
        assert_eq!(hl(&f), 14 + 56);
    }

    #[test]
    fn ipv6_extension_chain() {
        // hop-by-hop(8) -> routing(24) -> fragment(8, first) -> dest opts(16)
        // -> AH(24) -> TCP(32)
        let l4 = tcp(3, DATA);
        let chain = ext(
            43,
            0,
            &ext(44, 2, &frag6(60, 0, true, &ext(51, 1, &ah(6, 4, &l4)))),
        );
        let f = eth(0x86dd, &ipv6(0, &chain));
        check_boundaries(&f, &[0, 14, 54, 62, 86, 94, 110, 134, 166]);
    }

    #[test]
    fn non_first_fragments() {
        // IPv4 offset 185, proto TCP: stop after IP even if bytes look like TCP.
        let f = eth(0x0800, &ipv4_full(6, 0x00b9, &[], &tcp(0, DATA)));
        check_boundaries(&f, &[0, 14, 34]);
        // First fragment (MF, offset 0): continue.
        let f = eth(0x0800, &ipv4_full(6, 0x2000, &[], &tcp(0, DATA)));
        assert_eq!(hl(&f), 54);
        // IPv6 non-first fragment.
        let f = eth(0x86dd, &ipv6(44, &frag6(6, 185, true, &tcp(0, DATA))));
        check_boundaries(&f, &[0, 14, 54, 62]);
        // IPv6 first fragment.
        let f = eth(0x86dd, &ipv6(44, &frag6(17, 0, true, &udp(9, DATA))));
        check_boundaries(&f, &[0, 14, 54, 62, 70]);
    }

    #[test]
    fn udp_plain() {
        let f = eth(0x0800, &ipv4(17, &udp(53, DATA)));
        check_boundaries(&f, &[0, 14, 34, 42]);
    }

    #[test]
    fn icmp_echo_and_errors() {
        let echo = [8u8, 0, 0, 0, 0, 1, 0, 1];
        let f = eth(0x0800, &ipv4(1, &cat(&[&echo, DATA])));
        check_boundaries(&f, &[0, 14, 34, 42]);
        // Time exceeded quoting IPv4 + UDP header + payload.
        let quoted = ipv4(17, &udp(33434, DATA));
        let err = cat(&[&[11, 0, 0, 0, 0, 0, 0, 0], &quoted]);
        let f = eth(0x0800, &ipv4(1, &err));
        check_boundaries(&f, &[0, 14, 34, 42, 62, 70]);
        // Quoted IPv4 with options.
        let quoted = ipv4_full(6, 0, &[1, 1, 1, 0], &tcp(0, &[]));
        let err = cat(&[&[3, 3, 0, 0, 0, 0, 0, 0], &quoted]);
        let f = eth(0x0800, &ipv4(1, &err));
        check_boundaries(&f, &[0, 14, 34, 42, 66, 74]);
        // Quote that is not IPv4: ICMP header only.
        let err = cat(&[&[3, 3, 0, 0, 0, 0, 0, 0], &[0u8; 28]]);
        let f = eth(0x0800, &ipv4(1, &err));
        assert_eq!(hl(&f), 42);
    }

    #[test]
    fn icmpv6_echo_and_errors() {
        let echo = [128u8, 0, 0, 0, 0, 1, 0, 1];
        let f = eth(0x86dd, &ipv6(58, &cat(&[&echo, DATA])));
        check_boundaries(&f, &[0, 14, 54, 62]);
        // Neighbor solicitation: 8 bytes header, target is payload.
        let ns = cat(&[&[135u8, 0, 0, 0, 0, 0, 0, 0], &[0xfe; 16]]);
        let f = eth(0x86dd, &ipv6(58, &ns));
        assert_eq!(hl(&f), 62);
        // Packet too big quoting IPv6 + TCP.
        let quoted = ipv6(6, &tcp(0, DATA));
        let err = cat(&[&[2, 0, 0, 0, 0, 0, 0x05, 0x00], &quoted]);
        let f = eth(0x86dd, &ipv6(58, &err));
        check_boundaries(&f, &[0, 14, 54, 62, 102, 110]);
    }

    #[test]
    fn sctp() {
        let s = cat(&[&[0x0b, 0x59, 0x0b, 0x59, 0, 0, 0, 1, 0, 0, 0, 0], DATA]);
        let f = eth(0x0800, &ipv4(132, &s));
        check_boundaries(&f, &[0, 14, 34, 46]);
        let f = eth(0x86dd, &ipv6(132, &s));
        check_boundaries(&f, &[0, 14, 54, 66]);
    }

    #[test]
    fn gre() {
        // Key + sequence carrying IPv4/TCP.
        let inner = ipv4(6, &tcp(2, DATA));
        let g = cat(&[&[0x30, 0x00, 0x08, 0x00, 0, 0, 0, 7, 0, 0, 0, 1], &inner]);
        let f = eth(0x0800, &ipv4(47, &g));
        check_boundaries(&f, &[0, 14, 34, 46, 66, 94]);
        // Checksum + key carrying an Ethernet frame (0x6558) with IPv6/UDP.
        let inner = eth(0x86dd, &ipv6(17, &udp(9, DATA)));
        let g = cat(&[&[0xa0, 0x00, 0x65, 0x58, 0, 0, 0, 0, 0, 0, 0, 9], &inner]);
        let f = eth(0x86dd, &ipv6(47, &g));
        check_boundaries(&f, &[0, 14, 54, 66, 80, 120, 128]);
        // Plain GRE carrying IPv6.
        let g = cat(&[&[0, 0, 0x86, 0xdd], &ipv6(59, &[])]);
        let f = eth(0x0800, &ipv4(47, &g));
        check_boundaries(&f, &[0, 14, 34, 38, 78]);
        // PPTP: stops after the GRE header (PPP not decoded).
        let g = cat(&[
            &[0x30, 0x81, 0x88, 0x0b, 0, 4, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0],
            DATA,
        ]);
        let f = eth(0x0800, &ipv4(47, &g));
        assert_eq!(hl(&f), 50);
        // Routing bit: not understood, stop after IP.
        let g = cat(&[
            &[0x40, 0x00, 0x08, 0x00, 0, 0, 0, 0],
            &ipv4(6, &tcp(0, &[])),
        ]);
        let f = eth(0x0800, &ipv4(47, &g));
        assert_eq!(hl(&f), 34);
    }

    #[test]
    fn vxlan() {
        let inner = eth(0x0800, &ipv4(6, &tcp(0, DATA)));
        let vx = cat(&[&[0x08, 0, 0, 0, 0, 0, 42, 0], &inner]);
        let f = eth(0x0800, &ipv4(17, &udp(4789, &vx)));
        check_boundaries(&f, &[0, 14, 34, 42, 50, 64, 84, 104]);
        // I flag clear: not VXLAN, stop after UDP.
        let vx = cat(&[&[0x00, 0, 0, 0, 0, 0, 42, 0], &inner]);
        let f = eth(0x0800, &ipv4(17, &udp(4789, &vx)));
        assert_eq!(hl(&f), 42);
        // Over IPv6.
        let vx = cat(&[&[0x08, 0, 0, 0, 0, 0, 42, 0], &inner]);
        let f = eth(0x86dd, &ipv6(17, &udp(4789, &vx)));
        assert_eq!(hl(&f), 14 + 40 + 8 + 8 + 14 + 20 + 20);
    }

    #[test]
    fn ip_in_ip_esp_mpls() {
        let f = eth(0x0800, &ipv4(4, &ipv4(17, &udp(1, DATA))));
        check_boundaries(&f, &[0, 14, 34, 54, 62]);
        let f = eth(0x0800, &ipv4(41, &ipv6(6, &tcp(0, DATA))));
        check_boundaries(&f, &[0, 14, 34, 74, 94]);
        let f = eth(0x86dd, &ipv6(4, &ipv4(6, &tcp(0, DATA))));
        check_boundaries(&f, &[0, 14, 54, 74, 94]);
        let esp = cat(&[&[0, 0, 1, 0, 0, 0, 0, 5], DATA]);
        let f = eth(0x0800, &ipv4(50, &esp));
        check_boundaries(&f, &[0, 14, 34, 42]);
        // AH after IPv4, then TCP.
        let f = eth(0x0800, &ipv4(51, &ah(6, 4, &tcp(0, DATA))));
        check_boundaries(&f, &[0, 14, 34, 58, 78]);
        // Two MPLS labels, then IPv4/UDP.
        let labels = [0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40];
        let f = eth(0x8847, &cat(&[&labels, &ipv4(17, &udp(1, DATA))]));
        check_boundaries(&f, &[0, 14, 18, 22, 42, 50]);
        // MPLS then something not IP.
        let labels = [0x00, 0x01, 0x01, 0x40, 0x00, 0x00, 0x00, 0x00];
        let f = eth(0x8847, &labels);
        assert_eq!(hl(&f), 18);
    }

    #[test]
    fn unknown_protocols_stop() {
        let f = eth(0x88cc, DATA); // LLDP
        assert_eq!(hl(&f), 14);
        let f = eth(0x0040, DATA); // 802.3 length
        assert_eq!(hl(&f), 14);
        let f = eth(0x0800, &ipv4(2, DATA)); // IGMP
        assert_eq!(hl(&f), 34);
        let f = eth(0x86dd, &ipv6(59, DATA)); // no next header
        assert_eq!(hl(&f), 54);
        let f = eth(0x86dd, &ipv6(0, &ext(59, 0, DATA)));
        assert_eq!(hl(&f), 62);
        // Fragment header after IPv4 is meaningless: stop after IP.
        let f = eth(0x0800, &ipv4(44, &frag6(6, 0, false, &tcp(0, DATA))));
        assert_eq!(hl(&f), 34);
        assert_eq!(hl(&[]), 0);
    }

    #[test]
    fn malformed() {
        // IHL 3.
        let mut ip = ipv4(6, &tcp(0, DATA));
        ip[0] = 0x43;
        assert_eq!(hl(&eth(0x0800, &ip)), 14);
        // Wrong IP version under the IPv4 EtherType.
        let ip6 = ipv6(6, &tcp(0, DATA));
        assert_eq!(hl(&eth(0x0800, &ip6)), 14);
        assert_eq!(hl(&eth(0x86dd, &ipv4(6, &tcp(0, DATA)))), 14);
        // IHL claims more than captured: cut short, kept.
        let mut ip = ipv4(6, &[]);
        ip[0] = 0x4f;
        assert_eq!(hl(&eth(0x0800, &ip)), 34);
        // TCP data offset 2.
        let mut t = tcp(0, DATA);
        t[12] = 0x20;
        assert_eq!(hl(&eth(0x0800, &ipv4(6, &t))), 34);
        // TCP data offset claims 60 bytes with 36 present: cut short, kept.
        let mut t = tcp(0, DATA);
        t[12] = 0xf0;
        assert_eq!(hl(&eth(0x0800, &ipv4(6, &t))), 70);
        // Extension header claiming more than captured: cut short, kept.
        let f = eth(0x86dd, &ipv6(0, &ext(6, 200, &[])[..16]));
        assert_eq!(hl(&f), 70);
        // AH with length 0.
        let mut a = ah(6, 4, &tcp(0, DATA));
        a[1] = 0;
        assert_eq!(hl(&eth(0x86dd, &ipv6(51, &a))), 54);
        // IPv4 total length shorter than the TCP header: padding is not TCP.
        let mut ip = ipv4(6, &[]);
        let mut f = eth(0x0800, &ip);
        f.extend_from_slice(&tcp(0, &[])[..20]);
        assert_eq!(hl(&f), 34);
        // Total length 0 (TSO capture): not confined.
        ip.extend_from_slice(&tcp(0, DATA));
        ip[2] = 0;
        ip[3] = 0;
        assert_eq!(hl(&eth(0x0800, &ip)), 54);
        // Total length 10 (< IHL*4): not confined either.
        ip[3] = 10;
        assert_eq!(hl(&eth(0x0800, &ip)), 54);
    }

    // Headers cut short by the end of the frame (or of the IP datagram):
    // literal frames, smoltcp style. A header cut short is still header, so
    // everything up to the cut is kept; a header whose bytes present already
    // show it is malformed or unsupported is not a header.

    /// Ethernet, IPv4 (total length 44), TCP (20 bytes, SYN), 4 bytes of data.
    static ETH_IPV4_TCP: [u8; 58] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x2c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, //
        0x30, 0x39, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x50, 0x02, 0xff,
        0xff, 0x00, 0x00, 0x00, 0x00, //
        0x64, 0x61, 0x74, 0x61,
    ];

    /// Ethernet, IPv4 (total length 30), the first 10 bytes of a TCP header,
    /// then 16 bytes of Ethernet padding (a NIC pads to 60 bytes).
    static ETH_IPV4_TCP10_PADDED: [u8; 60] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x1e, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, //
        0x30, 0x39, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, //
        0x50, 0x02, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00,
    ];

    /// Ethernet, IPv4 (total length 32), UDP (8 bytes), 4 bytes of data.
    static ETH_IPV4_UDP: [u8; 46] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x20, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, //
        0x30, 0x39, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, //
        0x64, 0x61, 0x74, 0x61,
    ];

    /// Ethernet, 802.1Q tag (VID 100, IPv4), IPv4 (total length 28), UDP.
    static ETH_VLAN_IPV4_UDP: [u8; 46] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x81, 0x00, //
        0x00, 0x64, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x1c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, //
        0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00,
    ];

    /// Ethernet, IPv6 (payload length 32), hop-by-hop options (8 bytes, PadN),
    /// fragment header (offset 0, M set), UDP (8 bytes), 8 bytes of data.
    static ETH_IPV6_HBH_FRAG_UDP: [u8; 86] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0xdd, //
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x40, //
        0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x02, //
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
            0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0,
            0, 0, 0, 0, 10, 0, 0, 2,
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

    #[test]
    fn max_caps() {
        let f = eth(0x0800, &ipv4(6, &tcp(5, DATA)));
        assert_eq!(header_len(&f, 0), 0);
        assert_eq!(header_len(&f, 10), 10);
        assert_eq!(header_len(&f, 14), 14);
        assert_eq!(header_len(&f, 40), 40);
        assert_eq!(header_len(&f, 74), 74);
        assert_eq!(header_len(&f, 75), 74);
        assert_eq!(header_len(&f[..50], 60), 50);
        assert_eq!(header_len(&f[..10], 5), 5);
    }

    /// xorshift64* — deterministic, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn assert_bounded(f: &[u8], rng: &mut Rng) {
        let max = match rng.below(4) {
            0 => usize::MAX,
            1 => rng.below(128),
            _ => rng.below(f.len() + 2),
        };
        let n = header_len(f, max);
        assert!(n <= max.min(f.len()), "{n} > min({max}, {})", f.len());
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let types: [u16; 9] = [
            0x0800, 0x86dd, 0x8100, 0x88a8, 0x0806, 0x8847, 0x9100, 0x6558, 0x1234,
        ];
        let mut buf = vec![0u8; 256];
        for i in 0..200_000 {
            let len = rng.below(buf.len() + 1);
            for b in buf.iter_mut() {
                *b = rng.next() as u8;
            }
            // Bias towards interesting structure so the walk goes deep.
            if i % 2 == 0 {
                let t = types[rng.below(types.len())];
                buf[12..14].copy_from_slice(&t.to_be_bytes());
                buf[14] = if rng.below(2) == 0 { 0x45 } else { 0x60 };
                buf[23] = [6u8, 17, 1, 47, 4, 41, 50, 51, 132][rng.below(9)];
                buf[20] = 6 + rng.below(60) as u8;
            }
            assert_bounded(&buf[..len], &mut rng);
        }
    }

    #[test]
    fn mutated_frames_never_panic() {
        let inner = eth(0x0800, &ipv4(6, &tcp(0, DATA)));
        let vx = cat(&[&[0x08, 0, 0, 0, 0, 0, 42, 0], &inner]);
        let chain = ext(
            43,
            0,
            &ext(
                44,
                2,
                &frag6(60, 0, true, &ext(51, 1, &ah(6, 4, &tcp(3, DATA)))),
            ),
        );
        let seeds = [
            eth(0x0800, &ipv4(6, &tcp(5, DATA))),
            eth(0x0800, &ipv4(17, &udp(4789, &vx))),
            eth(0x86dd, &ipv6(0, &chain)),
            eth(
                0x0800,
                &ipv4(
                    47,
                    &cat(&[
                        &[0xb0, 0, 0x65, 0x58, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2],
                        &inner,
                    ]),
                ),
            ),
            eth(
                0x0800,
                &ipv4(
                    1,
                    &cat(&[&[11, 0, 0, 0, 0, 0, 0, 0], &ipv4(17, &udp(1, DATA))]),
                ),
            ),
            eth(
                0x8100,
                &vlan(
                    1,
                    0x8847,
                    &cat(&[&[0, 1, 1, 64], &ipv6(58, &[1, 0, 0, 0, 0, 0, 0, 0])]),
                ),
            ),
        ];
        let mut rng = Rng(42);
        for _ in 0..100_000 {
            let mut f = seeds[rng.below(seeds.len())].clone();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(f.len());
                f[i] ^= 1 << rng.below(8);
            }
            if rng.below(3) == 0 {
                let i = rng.below(f.len());
                f[i] = rng.next() as u8;
            }
            let cut = rng.below(f.len() + 1);
            assert_bounded(&f[..cut], &mut rng);
            assert_bounded(&f, &mut rng);
        }
    }
}
