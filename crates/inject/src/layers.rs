//! The guard's IP and transport layers, written against `ringcap_wire`'s
//! mutable views: each header is wrapped by its checked constructor (which
//! says whether it is whole and well formed) and every field the guard
//! holds or writes is read and set by name (`set_src_addr`,
//! `set_seq_number`, `fill_checksum`), so no offset is worked out here.

use crate::guard::{refuse, Guard, Refusal, Templates};
use ringcap_policy::SettableField as F;
use ringcap_wire::checksum::pseudo_header;
use ringcap_wire::icmp::Icmpv4Packet;
use ringcap_wire::icmpv6::Icmpv6Packet;
use ringcap_wire::ip::ip_proto as P;
use ringcap_wire::ipv4::{Ipv4Packet, MIN_HEADER_LEN as V4_LEN};
use ringcap_wire::ipv6::{Ipv6Packet, HEADER_LEN as V6_LEN};
use ringcap_wire::tcp::TcpPacket;
use ringcap_wire::udp::UdpPacket;

/// UDP destination ports of tunnels: a payload to them is a packet the
/// receiver may decapsulate and deliver as if it came from elsewhere.
/// (L2TP, GTP-U, ESP in UDP, VXLAN, VXLAN-GPE, Geneve, MPLS in UDP, Linux's
/// VXLAN default.)
pub const TUNNEL_PORTS: [u16; 8] = [1701, 2152, 4500, 4789, 4790, 6081, 6635, 8472];

/// The pseudo-header's sum for a transport checksum (none for ICMP).
#[derive(Clone, Copy)]
struct Pseudo(u16);

impl Pseudo {
    fn of(src: &[u8], dst: &[u8], proto: u8, len: usize) -> Pseudo {
        // `len` fits: frames are at most an MTU plus 14 bytes (< 4 GiB).
        Pseudo(pseudo_header(src, dst, proto, len as u32))
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

impl Guard {
    /// An IPv4 packet at the start of `ip`; returns its total length.
    pub(crate) fn ipv4(&mut self, ip: &mut [u8], t: &mut Templates) -> Result<usize, Refusal> {
        let v = Ipv4Packet::new_checked(&ip[..]).map_err(|e| malformed("IPv4 header", e))?;
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
        // The datagram only (not the Ethernet padding after it).
        let mut v =
            Ipv4Packet::new_checked(&mut ip[..total]).map_err(|e| malformed("IPv4 header", e))?;
        v.set_src_addr(src);
        // Reserved flag 0, DF as the session's first, not a fragment.
        v.set_flags_and_offset(if df { 0x4000 } else { 0 });
        if !self.may(F::IpTtl) {
            v.set_ttl(64);
        }
        if !self.may(F::IpTos) {
            v.set_dscp_ecn(0);
        }
        if !self.may(F::IpId) {
            self.next_id = self.next_id.wrapping_add(1);
            v.set_ident(self.next_id);
        }
        v.fill_checksum();
        let pseudo = Pseudo::of(&v.src_addr(), &v.dst_addr(), proto, total - V4_LEN);
        self.transport(proto, v.payload_mut(), pseudo, t)?;
        Ok(total)
    }

    /// An IPv6 packet at the start of `ip`; returns its length.
    pub(crate) fn ipv6(&mut self, ip: &mut [u8], t: &mut Templates) -> Result<usize, Refusal> {
        let v = Ipv6Packet::new_checked(&ip[..]).map_err(|e| malformed("IPv6 header", e))?;
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
        let mut v = Ipv6Packet::new_checked(&mut ip[..V6_LEN + plen])
            .map_err(|e| malformed("IPv6 header", e))?;
        v.set_src_addr(src);
        if !self.may(F::IpTos) {
            v.set_traffic_class(0);
        }
        if !self.may(F::Ipv6Flow) {
            v.set_flow_label(0);
        }
        if !self.may(F::Ipv6Hlim) {
            v.set_hop_limit(64);
        }
        let pseudo = Pseudo::of(&v.src_addr(), &v.dst_addr(), next, plen);
        self.transport(next, v.payload_mut(), pseudo, t)?;
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
        let zero_payload = !self.may(F::Payload);
        match proto {
            P::UDP => {
                let len = seg.len();
                let mut u = UdpPacket::new_checked(seg).map_err(|e| malformed("UDP header", e))?;
                self.udp(&mut u, len, t)?;
                if zero_payload {
                    u.payload_mut().fill(0);
                }
                u.fill_checksum(pseudo.0);
            }
            P::TCP => {
                let first =
                    TcpPacket::new_checked(&seg[..]).map_err(|e| malformed("TCP header", e))?;
                let hl = first.header_len();
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
                let tm = TcpPacket::new_checked(&tm[..tl])
                    .map_err(|e| malformed("the session's first TCP header", e))?;
                let mut p = TcpPacket::new_checked(seg).map_err(|e| malformed("TCP header", e))?;
                self.tcp(&mut p, &tm);
                if zero_payload {
                    p.payload_mut().fill(0);
                }
                p.fill_checksum(pseudo.0);
            }
            P::ICMP => {
                let mut p =
                    Icmpv4Packet::new_checked(seg).map_err(|e| malformed("ICMP header", e))?;
                let now = (p.msg_type(), p.echo_ident(), p.echo_seq_no());
                let (ty, id, seq) = self.echo(false, p.code(), now, t)?;
                p.set_msg_type(ty);
                p.set_echo_ident(id);
                p.set_echo_seq_no(seq);
                if zero_payload {
                    p.payload_mut().fill(0);
                }
                p.fill_checksum();
            }
            _ => {
                let mut p =
                    Icmpv6Packet::new_checked(seg).map_err(|e| malformed("ICMPv6 header", e))?;
                let now = (p.msg_type(), p.echo_ident(), p.echo_seq_no());
                let (ty, id, seq) = self.echo(true, p.code(), now, t)?;
                p.set_msg_type(ty);
                p.set_echo_ident(id);
                p.set_echo_seq_no(seq);
                if zero_payload {
                    p.payload_mut().fill(0);
                }
                p.fill_checksum(pseudo.0);
            }
        }
        Ok(())
    }

    /// UDP over an IP payload of `seg_len` bytes: ports held, tunnels
    /// refused.
    fn udp(
        &self,
        u: &mut UdpPacket<&mut [u8]>,
        seg_len: usize,
        t: &mut Templates,
    ) -> Result<(), Refusal> {
        if usize::from(u.len()) != seg_len {
            return Err(refuse(
                "malformed",
                format!(
                    "UDP length {} where the IP payload is {seg_len} bytes",
                    u.len()
                ),
            ));
        }
        let (sport, dport) = *t.udp.get_or_insert((u.src_port(), u.dst_port()));
        if !self.may(F::UdpSport) {
            u.set_src_port(sport);
        }
        if !self.may(F::UdpDport) {
            u.set_dst_port(dport);
        }
        let dport = u.dst_port();
        if TUNNEL_PORTS.contains(&dport) {
            return Err(refuse(
                "tunnel",
                format!("UDP port {dport} is a tunnel's: not injected"),
            ));
        }
        Ok(())
    }

    /// TCP: every field not settable as in the session's first header `tm`
    /// (of the same length).
    fn tcp(&self, p: &mut TcpPacket<&mut [u8]>, tm: &TcpPacket<&[u8]>) {
        if !self.may(F::TcpSport) {
            p.set_src_port(tm.src_port());
        }
        if !self.may(F::TcpDport) {
            p.set_dst_port(tm.dst_port());
        }
        if !self.may(F::TcpSeq) {
            p.set_seq_number(tm.seq_number());
        }
        // Never settable: acknowledgment number, data offset, reserved
        // bits, window, urgent pointer, options.
        p.set_ack_number(tm.ack_number());
        p.set_window(tm.window());
        p.set_urgent_pointer(tm.urgent_pointer());
        p.options_mut().copy_from_slice(tm.options());
        // The 9 flag bits (NS to FIN) are the client's when settable.
        const FLAGS: u16 = 0x01ff;
        let flags = if self.may(F::TcpFlags) {
            p.offset_and_flags() & FLAGS
        } else {
            tm.offset_and_flags() & FLAGS
        };
        // The data offset is the same (checked above); reserved bits as the
        // session's first.
        p.set_reserved_and_flags(tm.offset_and_flags() & !FLAGS | flags);
    }

    /// ICMP or ICMPv6 echo: the type, identifier and sequence number to
    /// send, from the message's `now` and the session's first.
    fn echo(
        &self,
        v6: bool,
        code: u8,
        now: (u8, u16, u16),
        t: &mut Templates,
    ) -> Result<(u8, u16, u16), Refusal> {
        let ty = now.0;
        let echo = if v6 { (129, 128) } else { (0, 8) };
        if ty != echo.0 && ty != echo.1 || code != 0 {
            return Err(refuse(
                "icmp",
                format!(
                    "ICMP{} type {ty} code {code} is not injected (only echo requests and replies, code 0)",
                    if v6 { "v6" } else { "" }
                ),
            ));
        }
        let tm = *t.icmp[usize::from(v6)].get_or_insert(now);
        Ok((
            tm.0,
            if self.may(F::IcmpId) { now.1 } else { tm.1 },
            if self.may(F::IcmpSeq) { now.2 } else { tm.2 },
        ))
    }
}
