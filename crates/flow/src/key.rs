//! What a packet contributes to a flow: its key (the 5-tuple and VLAN ID)
//! and its counts, read from the captured bytes with `ringcap-wire`'s views.
//!
//! Tunnels: a packet in GRE (versions 0 and 1: IPv4, IPv6 or Ethernet
//! inside), VXLAN (UDP to 4789 with an RFC 7348 header: flags exactly the I
//! bit, reserved bytes zero, an Ethernet frame carrying IP inside) or IP in
//! IP (protocol 4 or 41) is keyed by its *inner* 5-tuple, plus the tunnel
//! (kind, GRE key or VNI, and the outer addresses, all part of the key), so
//! conversations inside one tunnel are flows of their own and the same inner
//! 5-tuple in two tunnels are two flows. One level: a tunnel inside the
//! inner packet is not opened again (its outer packet is the flow). When the
//! inner packet cannot be read (cut by the snap length, not IP) the outer
//! 5-tuple is the key, as before. The VLAN ID is the outermost tag's (the
//! kernel's stripped tag on live captures, else the first tag in the frame).
//! Octets are the outer IP packet's (what the link carried: the IP header's
//! total length, or 40 + payload length for IPv6), as IPFIX's
//! octetDeltaCount counts them, so a cut snap length does not change them.
//! ICMP keeps its ports at 0 and its type and code are part of the key: a
//! flow per type and code, as softflowd exports them and nfdump shows them
//! (an echo request and its replies, or a port unreachable among them, are
//! not one flow under the first packet's type). A fragment that is not the
//! first has no transport header and keys with ports 0.

use ringcap_wire::ethernet::{ethertype, EthernetFrame};
use ringcap_wire::gre::GrePacket;
use ringcap_wire::ip::ip_proto;
use ringcap_wire::ipv4::Ipv4Packet;
use ringcap_wire::ipv6::Ipv6Packet;
use ringcap_wire::ipv6_ext::{AuthHeader, Ipv6ExtHeader, Ipv6FragmentHeader};
use ringcap_wire::vlan::VlanTag;
use ringcap_wire::vxlan::VxlanPacket;

/// Link types the flow stage reads (pcap LINKTYPE_ values).
mod linktype {
    pub const ETHERNET: u32 = 1;
    pub const RAW: u32 = 101;
    pub const RAW_BSD: u32 = 12;
    pub const RAW_OLD: u32 = 14;
    pub const IPV4: u32 = 228;
    pub const IPV6: u32 = 229;
    pub const LINUX_SLL: u32 = 113;
}

/// A flow's key, in the direction of its first packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// Source address (IPv4 in the first 4 bytes, the rest 0).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port (0 for ICMP and protocols without ports).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol (after IPv6 extension headers).
    pub proto: u8,
    /// IPv6 addresses.
    pub v6: bool,
    /// VLAN ID of the outermost tag (0: none).
    pub vlan: u16,
    /// ICMP or ICMPv6 type and code (`type << 8 | code`; 0 for other
    /// protocols).
    pub icmp: u16,
    /// The tunnel the 5-tuple was found in ([`NO_TUNNEL`]: none).
    pub tunnel: Tunnel,
}

/// A tunnel's part of a flow key: its kind, identifier and outer addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Tunnel {
    /// 0: none; else the outer IP protocol (4 IPv4-in-IP, 41 IPv6-in-IP,
    /// 47 GRE) or 17 for VXLAN.
    pub kind: u8,
    /// Outer addresses are IPv6.
    pub v6: bool,
    /// GRE key (0 when absent) or VXLAN VNI.
    pub id: u32,
    /// Outer source address (IPv4 in the first 4 bytes).
    pub src: [u8; 16],
    /// Outer destination address.
    pub dst: [u8; 16],
}

/// No tunnel.
pub const NO_TUNNEL: Tunnel = Tunnel {
    kind: 0,
    v6: false,
    id: 0,
    src: [0; 16],
    dst: [0; 16],
};

impl Tunnel {
    /// The kind's name for JSON records ("" for none).
    pub fn name(&self) -> &'static str {
        match self.kind {
            4 => "ipip",
            41 => "ip6ip",
            47 => "gre",
            17 => "vxlan",
            _ => "",
        }
    }

    /// Outer source address.
    pub fn src_addr(&self) -> std::net::IpAddr {
        addr(&self.src, self.v6)
    }

    /// Outer destination address.
    pub fn dst_addr(&self) -> std::net::IpAddr {
        addr(&self.dst, self.v6)
    }
}

impl FlowKey {
    /// The same key seen from the other end.
    #[inline]
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            tunnel: Tunnel {
                src: self.tunnel.dst,
                dst: self.tunnel.src,
                ..self.tunnel
            },
            ..*self
        }
    }

    /// Source address as text.
    pub fn src_addr(&self) -> std::net::IpAddr {
        addr(&self.src, self.v6)
    }

    /// Destination address as text.
    pub fn dst_addr(&self) -> std::net::IpAddr {
        addr(&self.dst, self.v6)
    }
}

fn addr(a: &[u8; 16], v6: bool) -> std::net::IpAddr {
    if v6 {
        std::net::IpAddr::from(*a)
    } else {
        std::net::IpAddr::from([a[0], a[1], a[2], a[3]])
    }
}

/// One packet as the flow table counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketInfo {
    /// Its key, in its own direction.
    pub key: FlowKey,
    /// IP octets.
    pub octets: u32,
    /// TCP flags (0 for other protocols).
    pub tcp_flags: u16,
    /// ICMP type and code (`type << 8 | code`; 0 for other protocols).
    pub icmp: u16,
}

/// Reads `data` (a frame of `linktype`; `vlan` is a tag the kernel took out
/// of it) for the flow table. `None`: not IP, or the IP header is cut or
/// malformed.
#[inline]
pub fn parse(
    linktype: u32,
    data: &[u8],
    vlan: Option<[u8; 4]>,
    wire_len: u32,
) -> Option<PacketInfo> {
    let mut vid = vlan.map_or(0, |t| u16::from_be_bytes([t[2], t[3]]) & 0x0fff);
    let (etype, ip, l2) = match linktype {
        linktype::ETHERNET => {
            let eth = EthernetFrame::new_checked(data).ok()?;
            let mut etype = eth.ethertype();
            let mut rest = eth.payload();
            // Tags: the first one names the VLAN unless the kernel's did.
            let mut depth = 0;
            while ethertype::is_vlan(etype) && depth < 8 {
                let tag = VlanTag::new_checked(rest).ok()?;
                if vid == 0 && vlan.is_none() && depth == 0 {
                    vid = tag.vid();
                }
                etype = tag.ethertype();
                rest = tag.payload();
                depth += 1;
            }
            (etype, rest, data.len() - rest.len())
        }
        linktype::LINUX_SLL => {
            let etype = u16::from_be_bytes([*data.get(14)?, *data.get(15)?]);
            (etype, &data[16..], 16)
        }
        linktype::RAW | linktype::RAW_BSD | linktype::RAW_OLD => match data.first()? >> 4 {
            4 => (ethertype::IPV4, data, 0),
            6 => (ethertype::IPV6, data, 0),
            _ => return None,
        },
        linktype::IPV4 => (ethertype::IPV4, data, 0),
        linktype::IPV6 => (ethertype::IPV6, data, 0),
        _ => return None,
    };
    // Octets when the IP header cannot say (TSO frames, jumbograms): what
    // the wire carried after the link header.
    let fallback = wire_len.saturating_sub(l2 as u32);
    let mut info = PacketInfo::default();
    info.key.vlan = vid;
    let l4 = ip_layer(etype, ip, fallback, &mut info)?;
    transport(l4, &mut info);
    // A tunnel: the inner packet's 5-tuple, when it can be read.
    let inner = match info.key.proto {
        ip_proto::IPV4 => Some((ethertype::IPV4, l4)),
        ip_proto::IPV6 => Some((ethertype::IPV6, l4)),
        ip_proto::GRE => gre_payload(l4),
        ip_proto::UDP if info.key.dport == VXLAN_PORT => vxlan_payload(l4),
        _ => None,
    };
    if let Some((etype, bytes)) = inner {
        let mut tunnel = Tunnel {
            kind: info.key.proto,
            v6: info.key.v6,
            id: 0,
            src: info.key.src,
            dst: info.key.dst,
        };
        let mut inner = PacketInfo::default();
        if let Some((etype, bytes, id)) = match info.key.proto {
            ip_proto::GRE => Some((etype, bytes, gre_key(l4))),
            ip_proto::UDP => inner_ethernet(bytes).map(|(e, b)| (e, b, vxlan_vni(l4))),
            _ => Some((etype, bytes, 0)),
        } {
            tunnel.id = id;
            if let Some(l4) = ip_layer(etype, bytes, 0, &mut inner) {
                transport(l4, &mut inner);
                info.key = FlowKey {
                    vlan: info.key.vlan,
                    tunnel,
                    ..inner.key
                };
                info.tcp_flags = inner.tcp_flags;
                info.icmp = inner.icmp;
            }
        }
    }
    Some(info)
}

/// VXLAN's UDP port (RFC 7348).
const VXLAN_PORT: u16 = 4789;

/// GRE's payload as (EtherType, bytes), for versions 0 and 1 without the
/// RFC 1701 routing bit; Ethernet inside is opened later.
fn gre_payload(l4: &[u8]) -> Option<(u16, &[u8])> {
    let g = GrePacket::new_checked(l4).ok()?;
    if g.routing_present() || g.version() > 1 || g.header_len() > l4.len() {
        return None;
    }
    let p = g.payload();
    match g.protocol_type() {
        ethertype::IPV4 | ethertype::IPV6 => Some((g.protocol_type(), p)),
        // Transparent Ethernet bridging.
        0x6558 => inner_ethernet(p),
        _ => None,
    }
}

fn gre_key(l4: &[u8]) -> u32 {
    GrePacket::new_checked(l4)
        .ok()
        .and_then(|g| g.key())
        .unwrap_or(0)
}

/// The inner Ethernet frame of a VXLAN packet (after the 8-byte UDP
/// header), only for a header as RFC 7348 writes it: flags exactly the I
/// bit, reserved bytes zero.
fn vxlan_payload(l4: &[u8]) -> Option<(u16, &[u8])> {
    let v = l4.get(8..)?;
    let h = VxlanPacket::new_checked(v).ok()?;
    if h.flags() != 0x08 || v[1..4] != [0, 0, 0] || v[7] != 0 {
        return None;
    }
    Some((0, &v[8..]))
}

fn vxlan_vni(l4: &[u8]) -> u32 {
    l4.get(8..)
        .and_then(|v| VxlanPacket::new_checked(v).ok())
        .map_or(0, |h| h.vni())
}

/// An inner Ethernet frame's IP packet (VLAN tags skipped).
fn inner_ethernet(frame: &[u8]) -> Option<(u16, &[u8])> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let mut etype = eth.ethertype();
    let mut rest = eth.payload();
    for _ in 0..2 {
        if !ethertype::is_vlan(etype) {
            break;
        }
        let tag = VlanTag::new_checked(rest).ok()?;
        etype = tag.ethertype();
        rest = tag.payload();
    }
    matches!(etype, ethertype::IPV4 | ethertype::IPV6).then_some((etype, rest))
}

/// Reads the IP header (and IPv6 extension headers) into `info`; returns
/// the bytes after them (the transport header), or `None` when the IP
/// header is cut or malformed. A non-first fragment returns an empty
/// transport (ports stay 0).
#[inline]
fn ip_layer<'a>(
    etype: u16,
    ip: &'a [u8],
    fallback: u32,
    info: &mut PacketInfo,
) -> Option<&'a [u8]> {
    Some(match etype {
        ethertype::IPV4 => {
            let p = Ipv4Packet::new_checked(ip).ok()?;
            info.key.src[..4].copy_from_slice(&p.src_addr());
            info.key.dst[..4].copy_from_slice(&p.dst_addr());
            info.key.proto = p.protocol();
            let tl = u32::from(p.total_len());
            info.octets = if tl >= p.header_len() as u32 {
                tl
            } else {
                fallback
            };
            if p.frag_offset() != 0 {
                return Some(&[]);
            }
            &ip[p.header_len()..]
        }
        ethertype::IPV6 => {
            let p = Ipv6Packet::new_checked(ip).ok()?;
            info.key.v6 = true;
            info.key.src = p.src_addr();
            info.key.dst = p.dst_addr();
            info.octets = match p.payload_len() {
                0 => fallback,
                n => 40 + u32::from(n),
            };
            let mut next = p.next_header();
            let mut rest = &ip[40..];
            // Extension headers, bounded: each is at least 8 bytes.
            for _ in 0..16 {
                match next {
                    ip_proto::HOP_BY_HOP | ip_proto::IPV6_ROUTING | ip_proto::IPV6_DEST_OPTS => {
                        let Ok(h) = Ipv6ExtHeader::new_checked(rest) else {
                            break;
                        };
                        next = h.next_header();
                        rest = &rest[h.header_len()..];
                    }
                    ip_proto::IPV6_FRAGMENT => {
                        let Ok(h) = Ipv6FragmentHeader::new_checked(rest) else {
                            break;
                        };
                        next = h.next_header();
                        rest = &rest[h.header_len()..];
                        if h.frag_offset() != 0 {
                            info.key.proto = next;
                            return Some(&[]);
                        }
                    }
                    ip_proto::AH => {
                        let Ok(h) = AuthHeader::new_checked(rest) else {
                            break;
                        };
                        next = h.next_header();
                        rest = &rest[h.header_len().min(rest.len())..];
                    }
                    _ => break,
                }
            }
            info.key.proto = next;
            rest
        }
        _ => return None,
    })
}

/// Ports, TCP flags, ICMP type and code from the transport header.
#[inline]
fn transport(l4: &[u8], info: &mut PacketInfo) {
    match info.key.proto {
        ip_proto::TCP | ip_proto::UDP | 132 /* SCTP */ | 136 /* UDP-Lite */ => {
            if l4.len() >= 4 {
                info.key.sport = u16::from_be_bytes([l4[0], l4[1]]);
                info.key.dport = u16::from_be_bytes([l4[2], l4[3]]);
            }
            if info.key.proto == ip_proto::TCP && l4.len() >= 14 {
                info.tcp_flags = u16::from_be_bytes([l4[12], l4[13]]) & 0x01ff;
            }
        }
        ip_proto::ICMP | ip_proto::ICMPV6 if l4.len() >= 2 => {
            info.icmp = u16::from_be_bytes([l4[0], l4[1]]);
            info.key.icmp = info.icmp;
        }
        _ => {}
    }
}
