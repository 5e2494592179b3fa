//! Flow keys ([`flow_key`]): the headers of any frame parsed back into
//! every field the kernel's flow dissector may hash, to group captured
//! frames by flow. Apart from the builders because it reads frames
//! instead of making them.

use super::{ethertype, proto, VXLAN_PORT};
use std::net::IpAddr;

/// What identifies a flow: every field the kernel's flow dissector may hash, so that
/// frames with equal keys always go to the same fanout member. Fields that do not
/// apply are zero / `None`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// VLAN ids, outermost first (at most 2 kept).
    pub vlans: Vec<u16>,
    /// Ethertype after the VLAN tags.
    pub ethertype: u16,
    /// Source address (ARP: sender protocol address).
    pub src: Option<IpAddr>,
    /// Destination address (ARP: target protocol address).
    pub dst: Option<IpAddr>,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// Transport protocol (after IPv6 extension headers); ARP: the operation.
    pub proto: u16,
    /// Source port (TCP/UDP/SCTP, first fragment or unfragmented only).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// GRE key or VXLAN VNI.
    pub tunnel_id: u32,
    /// The key of the packet inside a GRE or VXLAN tunnel.
    pub inner: Option<Box<FlowKey>>,
}

/// The [`FlowKey`] of a frame, or `None` when it is shorter than an Ethernet header.
/// Best effort for broken frames: parsing stops at the first bad header, keeping what
/// was parsed so far (so broken frames of one flow still share a key).
pub fn flow_key(frame: &[u8]) -> Option<FlowKey> {
    if frame.len() < 14 {
        return None;
    }
    let mut key = FlowKey {
        vlans: Vec::new(),
        ethertype: 0,
        src: None,
        dst: None,
        flow_label: 0,
        proto: 0,
        src_port: 0,
        dst_port: 0,
        tunnel_id: 0,
        inner: None,
    };
    let mut off = 12;
    let mut et = be16(frame, off)?;
    while et == ethertype::VLAN || et == ethertype::QINQ {
        let tci = be16(frame, off + 2)?;
        if key.vlans.len() < 2 {
            key.vlans.push(tci & 0x0fff);
        }
        off += 4;
        et = be16(frame, off)?;
    }
    key.ethertype = et;
    parse_l3(frame, off + 2, et, &mut key);
    Some(key)
}

pub(super) fn be16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn ip4_at(b: &[u8], off: usize) -> Option<IpAddr> {
    let o: [u8; 4] = b.get(off..off + 4)?.try_into().ok()?;
    Some(IpAddr::V4(o.into()))
}

fn ip6_at(b: &[u8], off: usize) -> Option<IpAddr> {
    let o: [u8; 16] = b.get(off..off + 16)?.try_into().ok()?;
    Some(IpAddr::V6(o.into()))
}

fn parse_l3(f: &[u8], off: usize, et: u16, key: &mut FlowKey) -> Option<()> {
    match et {
        ethertype::ARP => {
            key.proto = be16(f, off + 6)?;
            key.src = ip4_at(f, off + 14);
            key.dst = ip4_at(f, off + 24);
        }
        ethertype::IPV4 => {
            key.src = ip4_at(f, off + 12);
            key.dst = ip4_at(f, off + 16);
            let b0 = *f.get(off)?;
            key.proto = u16::from(*f.get(off + 9)?);
            let ihl = usize::from(b0 & 0x0f) * 4;
            if b0 >> 4 != 4 || ihl < 20 {
                return None;
            }
            let frag = be16(f, off + 6)?;
            if frag & 0x1fff != 0 {
                return None;
            }
            parse_l4(f, off + ihl, key.proto as u8, key);
        }
        ethertype::IPV6 => {
            key.flow_label = be32(f, off)? & 0xf_ffff;
            key.src = ip6_at(f, off + 8);
            key.dst = ip6_at(f, off + 24);
            let mut next = *f.get(off + 6)?;
            let mut p = off + 40;
            // Walk the extension headers (bounded).
            for _ in 0..8 {
                match next {
                    proto::HOPOPT | proto::ROUTING | proto::DSTOPTS => {
                        next = *f.get(p)?;
                        p += (usize::from(*f.get(p + 1)?) + 1) * 8;
                    }
                    proto::FRAGMENT => {
                        let fo = be16(f, p + 2)?;
                        next = *f.get(p)?;
                        p += 8;
                        if fo & 0xfff8 != 0 {
                            key.proto = u16::from(next);
                            return None;
                        }
                    }
                    proto::AH => {
                        next = *f.get(p)?;
                        p += (usize::from(*f.get(p + 1)?) + 2) * 4;
                    }
                    _ => break,
                }
            }
            key.proto = u16::from(next);
            parse_l4(f, p, next, key);
        }
        _ => {}
    }
    Some(())
}

fn parse_l4(f: &[u8], off: usize, proto: u8, key: &mut FlowKey) -> Option<()> {
    match proto {
        proto::TCP | proto::UDP | proto::SCTP => {
            key.src_port = be16(f, off)?;
            key.dst_port = be16(f, off + 2)?;
            if proto == proto::UDP && key.dst_port == VXLAN_PORT {
                key.tunnel_id = be32(f, off + 12)? >> 8;
                let inner = flow_key(f.get(off + 16..)?)?;
                key.inner = Some(Box::new(inner));
            }
        }
        proto::GRE => {
            let flags = be16(f, off)?;
            let et = be16(f, off + 2)?;
            let mut p = off + 4;
            if flags & 0x8000 != 0 {
                p += 4;
            }
            if flags & 0x2000 != 0 {
                key.tunnel_id = be32(f, p)?;
                p += 4;
            }
            if flags & 0x1000 != 0 {
                p += 4;
            }
            let mut inner = FlowKey {
                vlans: Vec::new(),
                ethertype: et,
                src: None,
                dst: None,
                flow_label: 0,
                proto: 0,
                src_port: 0,
                dst_port: 0,
                tunnel_id: 0,
                inner: None,
            };
            if et == ethertype::TEB {
                inner = flow_key(f.get(p..)?)?;
            } else {
                parse_l3(f, p, et, &mut inner);
            }
            key.inner = Some(Box::new(inner));
        }
        _ => {}
    }
    Some(())
}
