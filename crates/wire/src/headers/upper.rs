//! The walk of [`header_len`](super::header_len) past an IP header:
//! extension headers, then the transport or tunnel header the protocol
//! number names, and the datagram an ICMP error quotes. Apart from the link
//! and IP layers (in the parent) because this is where most protocols are;
//! it only reports back to the walk (a [`Step`]), never calls into it.

use super::{cut, Resume, Step, Visitor};
use crate::esp::EspPacket;
use crate::ethernet::ethertype;
use crate::gre::GrePacket;
use crate::icmp::Icmpv4Packet;
use crate::icmpv6::Icmpv6Packet;
use crate::ip::ip_proto;
use crate::ipv4::Ipv4Packet;
use crate::ipv6::Ipv6Packet;
use crate::ipv6_ext::{AuthHeader, Ipv6ExtHeader, Ipv6FragmentHeader};
use crate::sctp::SctpPacket;
use crate::tail;
use crate::tcp::TcpPacket;
use crate::udp::{self, UdpPacket};
use crate::vxlan::{self, VxlanPacket};
use crate::Error;

/// Extension headers (IPv6 ones only if `v6`; AH for both) and the
/// protocol after an IP header.
#[inline(always)]
pub(super) fn upper<V: Visitor>(
    buf: &[u8],
    mut off: usize,
    mut proto: u8,
    v6: bool,
    v: &mut V,
) -> Step {
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
                        v.later_fragment(off);
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
