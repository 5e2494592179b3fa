//! The guard's IP and transport layers: each header is read through
//! `ringcap_wire`'s checked views (which say whether it is whole and well
//! formed), and the few fields the guard writes are named once, in [`at`],
//! so no offset is worked out twice.

use crate::guard::{refuse, Guard, Refusal, Templates};
use ringcap_policy::SettableField as F;
use ringcap_wire::checksum::{add, sum};
use ringcap_wire::icmp::Icmpv4Packet;
use ringcap_wire::icmpv6::Icmpv6Packet;
use ringcap_wire::ip::ip_proto as P;
use ringcap_wire::ipv4::{Ipv4Packet, MIN_HEADER_LEN as V4_LEN};
use ringcap_wire::ipv6::{Ipv6Packet, HEADER_LEN as V6_LEN};
use ringcap_wire::tcp::TcpPacket;
use ringcap_wire::udp::{UdpPacket, HEADER_LEN as UDP_LEN};
use std::ops::Range;

/// Where the fields the guard writes are (byte offsets in their header).
mod at {
    use std::ops::Range;
    pub const V4_TOS: usize = 1;
    pub const V4_ID: Range<usize> = 4..6;
    /// Flags (reserved, DF, MF) in the top three bits.
    pub const V4_FLAGS: usize = 6;
    pub const V4_TTL: usize = 8;
    pub const V4_CHECKSUM: Range<usize> = 10..12;
    pub const V4_SRC: Range<usize> = 12..16;
    pub const V4_ADDRS: Range<usize> = 12..20;
    pub const V6_WORD0: Range<usize> = 0..4;
    pub const V6_HLIM: usize = 7;
    pub const V6_SRC: Range<usize> = 8..24;
    pub const V6_ADDRS: Range<usize> = 8..40;
    pub const SPORT: Range<usize> = 0..2;
    pub const DPORT: Range<usize> = 2..4;
    pub const UDP_CHECKSUM: usize = 6;
    pub const TCP_SEQ: Range<usize> = 4..8;
    pub const TCP_ACK: Range<usize> = 8..12;
    /// Data offset (4 bits), reserved (3 bits), NS flag (1 bit).
    pub const TCP_OFFSET_NS: usize = 12;
    pub const TCP_FLAGS: usize = 13;
    pub const TCP_WINDOW: Range<usize> = 14..16;
    pub const TCP_CHECKSUM: usize = 16;
    pub const TCP_URGENT_AND_OPTIONS: usize = 18;
    pub const ICMP_TYPE: usize = 0;
    pub const ICMP_CHECKSUM: usize = 2;
    pub const ICMP_ID: Range<usize> = 4..6;
    pub const ICMP_SEQ: Range<usize> = 6..8;
}

/// UDP destination ports of tunnels: a payload to them is a packet the
/// receiver may decapsulate and deliver as if it came from elsewhere.
/// (L2TP, GTP-U, ESP in UDP, VXLAN, VXLAN-GPE, Geneve, MPLS in UDP, Linux's
/// VXLAN default.)
pub const TUNNEL_PORTS: [u16; 8] = [1701, 2152, 4500, 4789, 4790, 6081, 6635, 8472];

/// The pseudo-header's sum for a transport checksum.
#[derive(Clone, Copy)]
struct Pseudo(u16);

impl Pseudo {
    fn of(addrs: &[u8], proto: u8, len: usize) -> Pseudo {
        let s = add(sum(addrs), u16::from(proto));
        // `len` fits: frames are at most an MTU plus 14 bytes (< 4 GiB).
        let l = len as u32;
        Pseudo(add(s, add((l >> 16) as u16, l as u16)))
    }
}

/// The reason an IP protocol number is refused, for both families.
fn refuse_protocol(proto: u8) -> Refusal {
    match proto {
        P::IPV4 | P::IPV6 | P::GRE => refuse(
            "tunnel",
            format!("IP protocol {proto} is a tunnel (IP-in-IP, IPv6-in-IP, GRE): not injected"),
        ),
        P::IPV6_FRAGMENT => refuse(
            "fragment",
            "an IPv6 fragment header (atomic fragments too): not injected",
        ),
        P::HOP_BY_HOP | P::IPV6_ROUTING | P::IPV6_DEST_OPTS | 135 | 139 | 140 | 253 | 254 => {
            refuse(
                "ipv6-ext",
                format!("IPv6 extension header {proto}: not injected"),
            )
        }
        P::AH | P::ESP => refuse(
            "protocol",
            format!("IPsec (IP protocol {proto}) is not injected"),
        ),
        _ => refuse(
            "protocol",
            format!("IP protocol {proto} is not injected (only UDP, TCP and ICMP echo)"),
        ),
    }
}

fn malformed(what: &str, e: ringcap_wire::Error) -> Refusal {
    refuse("malformed", format!("{what}: {e}"))
}

/// Copies the template's bytes `r` over the segment's.
fn hold(seg: &mut [u8], template: &[u8], r: Range<usize>) {
    seg[r.clone()].copy_from_slice(&template[r]);
}

impl Guard {
    /// An IPv4 packet at the start of `ip`; returns its total length.
    pub(crate) fn ipv4(&mut self, ip: &mut [u8], t: &mut Templates) -> Result<usize, Refusal> {
        let v = Ipv4Packet::new_checked(ip).map_err(|e| malformed("IPv4 header", e))?;
        if v.header_len() != V4_LEN {
            return Err(refuse(
                "ip-options",
                format!(
                    "an IPv4 header of {} bytes: options are not injected",
                    v.header_len()
                ),
            ));
        }
        let total = usize::from(v.total_len());
        if total < V4_LEN || total > ip.len() {
            return Err(refuse(
                "malformed",
                format!("IPv4 total length {total} with {} bytes present", ip.len()),
            ));
        }
        if v.is_fragment() {
            return Err(refuse(
                "fragment",
                format!(
                    "an IPv4 fragment (more fragments {}, offset {}): not injected",
                    v.more_frags(),
                    usize::from(v.frag_offset()) * 8
                ),
            ));
        }
        let proto = v.protocol();
        if !matches!(proto, P::UDP | P::TCP | P::ICMP) {
            return Err(refuse_protocol(proto));
        }
        let df = *t.df.get_or_insert(v.dont_frag());
        let src = self
            .identity
            .ipv4
            .ok_or_else(|| refuse("source", "the interface has no IPv4 address"))?;
        ip[at::V4_SRC].copy_from_slice(&src);
        ip[at::V4_FLAGS] = if df { 0x40 } else { 0 };
        if !self.may(F::IpTtl) {
            ip[at::V4_TTL] = 64;
        }
        if !self.may(F::IpTos) {
            ip[at::V4_TOS] = 0;
        }
        if !self.may(F::IpId) {
            self.next_id = self.next_id.wrapping_add(1);
            ip[at::V4_ID].copy_from_slice(&self.next_id.to_be_bytes());
        }
        ip[at::V4_CHECKSUM].copy_from_slice(&[0, 0]);
        let c = !sum(&ip[..V4_LEN]);
        ip[at::V4_CHECKSUM].copy_from_slice(&c.to_be_bytes());
        let pseudo = Pseudo::of(&ip[at::V4_ADDRS], proto, total - V4_LEN);
        self.transport(proto, &mut ip[V4_LEN..total], pseudo, t)?;
        Ok(total)
    }

    /// An IPv6 packet at the start of `ip`; returns its length.
    pub(crate) fn ipv6(&mut self, ip: &mut [u8], t: &mut Templates) -> Result<usize, Refusal> {
        let v = Ipv6Packet::new_checked(ip).map_err(|e| malformed("IPv6 header", e))?;
        let plen = usize::from(v.payload_len());
        if plen == 0 {
            return Err(refuse(
                "malformed",
                "IPv6 payload length 0 (jumbograms are not injected)",
            ));
        }
        if V6_LEN + plen > ip.len() {
            return Err(refuse(
                "malformed",
                format!(
                    "IPv6 payload length {plen} with {} bytes present",
                    ip.len() - V6_LEN
                ),
            ));
        }
        let next = v.next_header();
        if !matches!(next, P::UDP | P::TCP | P::ICMPV6) {
            return Err(refuse_protocol(next));
        }
        let src = self
            .identity
            .ipv6
            .ok_or_else(|| refuse("source", "the interface has no IPv6 address"))?;
        ip[at::V6_SRC].copy_from_slice(&src);
        let mut word = u32::from_be_bytes([ip[0], ip[1], ip[2], ip[3]]);
        if !self.may(F::IpTos) {
            word &= !0x0ff0_0000;
        }
        if !self.may(F::Ipv6Flow) {
            word &= !0x000f_ffff;
        }
        ip[at::V6_WORD0].copy_from_slice(&word.to_be_bytes());
        if !self.may(F::Ipv6Hlim) {
            ip[at::V6_HLIM] = 64;
        }
        let pseudo = Pseudo::of(&ip[at::V6_ADDRS], next, plen);
        self.transport(next, &mut ip[V6_LEN..V6_LEN + plen], pseudo, t)?;
        Ok(V6_LEN + plen)
    }

    /// The transport header and payload: `seg` is exactly the IP payload.
    fn transport(
        &mut self,
        proto: u8,
        seg: &mut [u8],
        pseudo: Pseudo,
        t: &mut Templates,
    ) -> Result<(), Refusal> {
        let (payload_at, checksum_at) = match proto {
            P::UDP => (self.udp(seg, t)?, at::UDP_CHECKSUM),
            P::TCP => (self.tcp(seg, t)?, at::TCP_CHECKSUM),
            _ => (self.icmp(proto, seg, t)?, at::ICMP_CHECKSUM),
        };
        if !self.may(F::Payload) {
            seg[payload_at..].fill(0);
        }
        seg[checksum_at..checksum_at + 2].copy_from_slice(&[0, 0]);
        let s = sum(seg);
        let mut c = if proto == P::ICMP {
            !s
        } else {
            !add(pseudo.0, s)
        };
        if proto == P::UDP && c == 0 {
            c = 0xffff;
        }
        seg[checksum_at..checksum_at + 2].copy_from_slice(&c.to_be_bytes());
        Ok(())
    }

    /// UDP: returns where the payload starts.
    fn udp(&self, seg: &mut [u8], t: &mut Templates) -> Result<usize, Refusal> {
        let u = UdpPacket::new_checked(seg).map_err(|e| malformed("UDP header", e))?;
        if usize::from(u.len()) != seg.len() {
            return Err(refuse(
                "malformed",
                format!(
                    "UDP length {} where the IP payload is {} bytes",
                    u.len(),
                    seg.len()
                ),
            ));
        }
        let mut first = [0u8; UDP_LEN];
        first.copy_from_slice(&seg[..UDP_LEN]);
        let tm = *t.udp.get_or_insert(first);
        if !self.may(F::UdpSport) {
            hold(seg, &tm, at::SPORT);
        }
        if !self.may(F::UdpDport) {
            hold(seg, &tm, at::DPORT);
        }
        let dport = u16::from_be_bytes([seg[2], seg[3]]);
        if TUNNEL_PORTS.contains(&dport) {
            return Err(refuse(
                "tunnel",
                format!("UDP port {dport} is a tunnel's: not injected"),
            ));
        }
        Ok(UDP_LEN)
    }

    /// TCP: returns where the payload starts.
    fn tcp(&self, seg: &mut [u8], t: &mut Templates) -> Result<usize, Refusal> {
        let p = TcpPacket::new_checked(seg).map_err(|e| malformed("TCP header", e))?;
        let hl = p.header_len();
        let (tm, tl) = *t.tcp.get_or_insert_with(|| {
            let mut h = [0u8; 60];
            h[..hl].copy_from_slice(&seg[..hl]);
            (h, hl)
        });
        if tl != hl {
            return Err(refuse(
                "fixed",
                format!("a TCP header of {hl} bytes where the session's first was {tl} (options are not settable)"),
            ));
        }
        for (f, r) in [
            (F::TcpSport, at::SPORT),
            (F::TcpDport, at::DPORT),
            (F::TcpSeq, at::TCP_SEQ),
        ] {
            if !self.may(f) {
                hold(seg, &tm, r);
            }
        }
        // Never settable: acknowledgment number, reserved bits, window,
        // urgent pointer, options.
        hold(seg, &tm, at::TCP_ACK);
        hold(seg, &tm, at::TCP_WINDOW);
        hold(seg, &tm, at::TCP_URGENT_AND_OPTIONS..hl);
        let ns = at::TCP_OFFSET_NS;
        if self.may(F::TcpFlags) {
            seg[ns] = (tm[ns] & 0xfe) | (seg[ns] & 1);
        } else {
            seg[ns] = tm[ns];
            seg[at::TCP_FLAGS] = tm[at::TCP_FLAGS];
        }
        Ok(hl)
    }

    /// ICMP or ICMPv6 echo: returns where the payload starts.
    fn icmp(&self, proto: u8, seg: &mut [u8], t: &mut Templates) -> Result<usize, Refusal> {
        let (v6, ty, code, echo) = if proto == P::ICMP {
            let p = Icmpv4Packet::new_checked(seg).map_err(|e| malformed("ICMP header", e))?;
            (false, p.msg_type(), p.code(), (0, 8))
        } else {
            let p = Icmpv6Packet::new_checked(seg).map_err(|e| malformed("ICMPv6 header", e))?;
            (true, p.msg_type(), p.code(), (129, 128))
        };
        if ty != echo.0 && ty != echo.1 || code != 0 {
            return Err(refuse(
                "icmp",
                format!(
                    "ICMP{} type {ty} code {code} is not injected (only echo requests and replies, code 0)",
                    if v6 { "v6" } else { "" }
                ),
            ));
        }
        let mut first = [0u8; 8];
        first.copy_from_slice(&seg[..8]);
        let tm = *t.icmp[usize::from(v6)].get_or_insert(first);
        seg[at::ICMP_TYPE] = tm[at::ICMP_TYPE];
        if !self.may(F::IcmpId) {
            hold(seg, &tm, at::ICMP_ID);
        }
        if !self.may(F::IcmpSeq) {
            hold(seg, &tm, at::ICMP_SEQ);
        }
        Ok(8)
    }
}
