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
use crate::ethernet::{ethertype, EthernetFrame};
use crate::ipv4::Ipv4Packet;
use crate::ipv6::Ipv6Packet;
use crate::mpls::MplsLabel;
use crate::tail;
use crate::vlan::VlanTag;
use crate::Error;

mod upper;

use upper::upper;

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
    /// A later fragment of an IP datagram (IPv4 fragment offset, or an IPv6
    /// fragment header's, not 0) whose bytes continue at `off`: its upper
    /// headers are in another packet, and the walk stops here.
    #[inline(always)]
    fn later_fragment(&mut self, _off: usize) {}
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

/// [`visit_headers`] for bytes that start with an IPv4 or IPv6 header (by
/// its version nibble), such as the datagram an ICMP error quotes, which
/// the frame's walk reports only down to its first transport header.
pub fn visit_ip_headers<V: Visitor>(datagram: &[u8], visitor: &mut V) -> usize {
    let ethertype = match datagram.first().map(|b| b >> 4) {
        Some(4) => crate::ethernet::ethertype::IPV4,
        Some(6) => crate::ethernet::ethertype::IPV6,
        _ => return 0,
    };
    walk_from(datagram, usize::MAX, visitor, Resume::EtherType(ethertype)).min(datagram.len())
}

/// Walks the headers; returns the end of the headers (or something at least
/// `max` once that is reached).
///
/// The common path (Ethernet, VLANs, IP, transport) is straight-line code
/// through inlined helpers; only tunnels go round the loop.
#[inline(always)]
fn walk<V: Visitor>(frame: &[u8], max: usize, v: &mut V) -> usize {
    walk_from(frame, max, v, Resume::Ethernet)
}

#[inline(always)]
fn walk_from<V: Visitor>(frame: &[u8], max: usize, v: &mut V, first: Resume) -> usize {
    // The part of the frame the current layer may occupy; narrowed to the
    // IP datagram by the IP length fields. `off <= buf.len()` always.
    let mut buf = frame;
    let mut off = 0usize;
    let mut resume = first;
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
        v.later_fragment(off + hl);
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
#[cfg(test)]
mod tests;
