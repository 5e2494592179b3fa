//! The one place an injected frame is held to its grant. The frame is the
//! daemon's own copy (taken out of the client's message before anything
//! looks at it); in order:
//!
//! 1. size: an Ethernet header at least, the interface's MTU (plus the
//!    Ethernet header) at most;
//! 2. identity: the Ethernet source becomes the interface's MAC; an IPv4 or
//!    IPv6 source (and an ARP sender) becomes the interface's address; a
//!    frame of a family the interface has no address of is refused;
//! 3. fields the grant does not let the client set (`inject.settable`):
//!    IP TTL/hop limit 64, IPv4 identification from the session's counter,
//!    TOS/traffic class and flow label 0; transport fields (ports, TCP
//!    sequence number and flags, ICMP echo identifier and sequence number)
//!    keep the values of the session's first frame of that protocol — a
//!    fixed 5-tuple, as Paris traceroute wants; a payload that is not
//!    settable is zeroed;
//! 4. checksums recomputed (IPv4 header, TCP, UDP, ICMP, ICMPv6);
//! 5. the grant's filter (`inject.filter`) on the frame as it will leave;
//! 6. the token bucket, on the frame's requested send time.
//!
//! A refused frame never reaches the sender. VLAN-tagged frames and IP
//! frames with malformed headers are refused.

use ringcap_policy::{InjectGrant, SettableField as F};
use ringcap_stages::CheckedProgram;
use ringcap_stages::{Limits, Over};
use ringcap_wire::checksum::sum;
use std::collections::HashMap;

/// Why a frame was refused: the rule and the reason, for its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The rule (`size`, `source`, `malformed`, `vlan`, `filter`, `rate`).
    pub rule: &'static str,
    /// In words.
    pub reason: String,
}

fn refuse(rule: &'static str, reason: impl Into<String>) -> Refusal {
    Refusal {
        rule,
        reason: reason.into(),
    }
}

/// What the frames leaving an interface carry as their source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The interface's MAC address.
    pub mac: [u8; 6],
    /// Its IPv4 address, if it has one.
    pub ipv4: Option<[u8; 4]>,
    /// Its IPv6 address (a global one if it has one, else link-local).
    pub ipv6: Option<[u8; 16]>,
    /// Its MTU (frames may be this plus the Ethernet header).
    pub mtu: u32,
}

impl Identity {
    /// The identity of interface `name` (in this network namespace).
    pub fn of(name: &str) -> Result<Identity, String> {
        let mtu = ringcap_source::interface::Interface::open(name)
            .map_err(|e| e.to_string())?
            .mtu;
        let path = format!("/sys/class/net/{name}/address");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let mut mac = [0u8; 6];
        let parts: Vec<&str> = text.trim().split(':').collect();
        if parts.len() != 6 {
            return Err(format!("{path}: not a MAC address: {}", text.trim()));
        }
        for (m, p) in mac.iter_mut().zip(parts) {
            *m = u8::from_str_radix(p, 16).map_err(|_| format!("{path}: not a MAC address"))?;
        }
        let mut ipv4 = None;
        let mut ipv6: Option<[u8; 16]> = None;
        let addrs = nix::ifaddrs::getifaddrs().map_err(|e| format!("getifaddrs: {e}"))?;
        for a in addrs.filter(|a| a.interface_name == name) {
            let Some(addr) = a.address else { continue };
            if let Some(v4) = addr.as_sockaddr_in() {
                ipv4.get_or_insert(v4.ip().octets());
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                let o = v6.ip().octets();
                let link_local = o[0] == 0xfe && o[1] & 0xc0 == 0x80;
                if ipv6.is_none() || !link_local {
                    ipv6 = Some(o);
                }
            }
        }
        Ok(Identity {
            mac,
            ipv4,
            ipv6,
            mtu,
        })
    }
}

/// One session's injection policy, with its state (IP ID counter,
/// transport templates, token bucket).
pub struct Guard {
    program: CheckedProgram,
    settable: Vec<F>,
    identity: Identity,
    max_len: usize,
    limits: Limits,
    next_id: u16,
    /// Transport bytes of the first frame of each protocol (by IP protocol
    /// number): ports and the like, for the fields the client may not set.
    templates: HashMap<u8, [u8; 16]>,
}

impl Guard {
    /// The guard for frames sent under `grant` from an interface with
    /// `identity`, its token buckets full.
    pub fn new(grant: &InjectGrant, identity: Identity) -> Result<Guard, String> {
        let program = CheckedProgram::new(grant.program.clone())
            .ok_or("the inject filter does not pass libpcap's checks")?;
        let max_len = identity.mtu as usize + 14;
        let burst = u64::from(grant.burst);
        let mut limits = Limits::none().packets(grant.max_packets_per_second, burst);
        if let Some(bps) = grant.max_bits_per_second {
            // `burst` frames of the largest size, so a full-size frame can
            // always go once the bucket has filled.
            limits = limits.bits(bps, burst * max_len as u64 * 8);
        }
        Ok(Guard {
            program,
            settable: grant.settable.clone(),
            identity,
            max_len,
            limits,
            next_id: (crate::now_ns() as u16) ^ 0x5a5a,
            templates: HashMap::new(),
        })
    }

    fn may(&self, f: F) -> bool {
        self.settable.contains(&f)
    }

    /// Holds `frame` to the grant, rewriting what the grant fixes; `at_ns`
    /// is its requested send time (for the token bucket). On success the
    /// frame is what will leave.
    pub fn check(&mut self, frame: &mut [u8], at_ns: u64) -> Result<(), Refusal> {
        if frame.len() < 14 || frame.len() > self.max_len {
            return Err(refuse(
                "size",
                format!(
                    "{} bytes; frames are 14 to {} bytes on this interface",
                    frame.len(),
                    self.max_len
                ),
            ));
        }
        frame[6..12].copy_from_slice(&self.identity.mac);
        let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
        match ethertype {
            0x8100 | 0x88a8 | 0x9100 => {
                return Err(refuse("vlan", "VLAN-tagged frames are not injected"))
            }
            0x0806 => self.arp(&mut frame[14..])?,
            0x0800 => self.ipv4(&mut frame[14..])?,
            0x86dd => self.ipv6(&mut frame[14..])?,
            _ => {}
        }
        if self.program.run(frame, frame.len() as u32) == 0 {
            return Err(refuse(
                "filter",
                "the frame does not match the grant's inject filter",
            ));
        }
        match self.limits.admit(at_ns, frame.len() as u32) {
            Ok(()) => {}
            Err(over) => {
                let (what, b) = match over {
                    Over::Packets => ("frames", self.limits.packet_bucket()),
                    Over::Bits => ("bits", self.limits.bit_bucket()),
                };
                let (rate, burst) = b.map_or((0, 0), |b| (b.rate(), b.burst()));
                return Err(refuse(
                    "rate",
                    format!("over the grant's {rate} {what} per second (burst {burst} {what})"),
                ));
            }
        }
        Ok(())
    }

    fn arp(&mut self, a: &mut [u8]) -> Result<(), Refusal> {
        if a.len() < 8 {
            return Err(refuse("malformed", "ARP packet shorter than 8 bytes"));
        }
        let (hlen, plen) = (usize::from(a[4]), usize::from(a[5]));
        if a.len() < 8 + 2 * (hlen + plen) {
            return Err(refuse("malformed", "ARP packet cut short"));
        }
        if hlen == 6 {
            a[8..14].copy_from_slice(&self.identity.mac);
        }
        if plen == 4 {
            let v4 = self
                .identity
                .ipv4
                .ok_or_else(|| refuse("source", "the interface has no IPv4 address"))?;
            a[8 + hlen..8 + hlen + 4].copy_from_slice(&v4);
        }
        Ok(())
    }

    fn ipv4(&mut self, ip: &mut [u8]) -> Result<(), Refusal> {
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[0] & 15 < 5 {
            return Err(refuse("malformed", "not a valid IPv4 header"));
        }
        let hl = usize::from(ip[0] & 15) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if hl > ip.len() || total < hl || total > ip.len() {
            return Err(refuse(
                "malformed",
                "IPv4 header or total length does not fit the frame",
            ));
        }
        let src = self
            .identity
            .ipv4
            .ok_or_else(|| refuse("source", "the interface has no IPv4 address"))?;
        ip[12..16].copy_from_slice(&src);
        if !self.may(F::IpTtl) {
            ip[8] = 64;
        }
        if !self.may(F::IpTos) {
            ip[1] = 0;
        }
        if !self.may(F::IpId) {
            self.next_id = self.next_id.wrapping_add(1);
            ip[4..6].copy_from_slice(&self.next_id.to_be_bytes());
        }
        let frag = u16::from_be_bytes([ip[6], ip[7]]);
        let first = frag & 0x1fff == 0;
        let whole = first && frag & 0x2000 == 0;
        ip[10..12].copy_from_slice(&[0, 0]);
        let c = !sum(&ip[..hl]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let proto = ip[9];
        let mut pseudo = [0u8; 12];
        pseudo[..8].copy_from_slice(&ip[12..20]);
        pseudo[9] = proto;
        pseudo[10..12].copy_from_slice(&((total - hl) as u16).to_be_bytes());
        if first {
            // Only a whole datagram's checksum can be recomputed; a first
            // fragment's transport fields are still held to the grant.
            let seg = &mut ip[hl..total];
            self.transport(proto, seg, whole.then_some(&pseudo[..]))?;
        }
        Ok(())
    }

    fn ipv6(&mut self, ip: &mut [u8]) -> Result<(), Refusal> {
        if ip.len() < 40 || ip[0] >> 4 != 6 {
            return Err(refuse("malformed", "not a valid IPv6 header"));
        }
        let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
        if 40 + plen > ip.len() {
            return Err(refuse(
                "malformed",
                "IPv6 payload length does not fit the frame",
            ));
        }
        let src = self
            .identity
            .ipv6
            .ok_or_else(|| refuse("source", "the interface has no IPv6 address"))?;
        ip[8..24].copy_from_slice(&src);
        let mut word = u32::from_be_bytes([ip[0], ip[1], ip[2], ip[3]]);
        if !self.may(F::IpTos) {
            word &= !0x0ff0_0000;
        }
        if !self.may(F::Ipv6Flow) {
            word &= !0x000f_ffff;
        }
        ip[..4].copy_from_slice(&word.to_be_bytes());
        if !self.may(F::Ipv6Hlim) {
            ip[7] = 64;
        }
        let next = ip[6];
        let mut pseudo = [0u8; 40];
        pseudo[..32].copy_from_slice(&ip[8..40]);
        pseudo[32..36].copy_from_slice(&(plen as u32).to_be_bytes());
        pseudo[39] = next;
        let seg = &mut ip[40..40 + plen];
        self.transport(next, seg, Some(&pseudo[..]))
    }

    /// Transport fields and checksum; `pseudo` is the pseudo-header, or
    /// `None` for a first fragment (checksum left as given).
    fn transport(
        &mut self,
        proto: u8,
        seg: &mut [u8],
        pseudo: Option<&[u8]>,
    ) -> Result<(), Refusal> {
        // (field, byte range) the grant may let the client set.
        let (fixed, payload_at, csum_at): (&[(F, usize, usize)], usize, usize) = match proto {
            17 => (&[(F::UdpSport, 0, 2), (F::UdpDport, 2, 4)], 8, 6),
            6 => {
                let doff = seg.get(12).map_or(20, |b| usize::from(b >> 4) * 4);
                if seg.len() < 20 || doff < 20 || doff > seg.len() {
                    return Err(refuse("malformed", "not a valid TCP header"));
                }
                (
                    &[
                        (F::TcpSport, 0, 2),
                        (F::TcpDport, 2, 4),
                        (F::TcpSeq, 4, 8),
                        (F::TcpFlags, 13, 14),
                    ],
                    doff,
                    16,
                )
            }
            1 | 58 => {
                let echo = matches!(
                    (proto, seg.first()),
                    (1, Some(0 | 8)) | (58, Some(128 | 129))
                );
                if echo {
                    (&[(F::IcmpId, 4, 6), (F::IcmpSeq, 6, 8)], 8, 2)
                } else {
                    (&[], 8, 2)
                }
            }
            _ => return Ok(()),
        };
        if seg.len() < payload_at.max(8) {
            return Err(refuse("malformed", "transport header cut short"));
        }
        let learned = self.templates.contains_key(&proto);
        let mut t = self.templates.get(&proto).copied().unwrap_or([0; 16]);
        for &(f, a, b) in fixed {
            if self.may(f) {
                continue;
            }
            if learned {
                seg[a..b].copy_from_slice(&t[a..b]);
            } else {
                t[a..b].copy_from_slice(&seg[a..b]);
            }
        }
        if !learned {
            self.templates.insert(proto, t);
        }
        if !self.may(F::Payload) {
            seg[payload_at..].fill(0);
        }
        if proto == 1 {
            seg[2..4].copy_from_slice(&[0, 0]);
            let c = !sum(seg);
            seg[2..4].copy_from_slice(&c.to_be_bytes());
        } else if let Some(pseudo) = pseudo {
            seg[csum_at..csum_at + 2].copy_from_slice(&[0, 0]);
            let s = ringcap_wire::checksum::add(sum(pseudo), sum(seg));
            let mut c = !s;
            if proto == 17 && c == 0 {
                c = 0xffff;
            }
            seg[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringcap_policy::Policy;
    use ringcap_testkit::frames::{udp4, Endpoints};

    fn guard(inject: &str) -> Guard {
        let text = format!(
            "[[grant]]\nusers = [\"root\"]\ninterfaces = [\"x\"]\n[grant.inject]\n{inject}"
        );
        let p = Policy::from_toml(&text).unwrap_or_else(|e| panic!("{e}"));
        let identity = Identity {
            mac: [2, 0, 0, 0, 0, 1],
            ipv4: Some([198, 18, 0, 1]),
            ipv6: None,
            mtu: 1500,
        };
        Guard::new(p.grants[0].inject.as_ref().unwrap(), identity).unwrap()
    }

    fn frame(len: usize) -> Vec<u8> {
        let ep = Endpoints::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .with_ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into());
        udp4(&ep, 0, 4000, 33434, len - 42)
    }

    #[test]
    fn the_bit_limit_holds_and_says_so() {
        // 1 Mbit/s, burst 2 frames of 1514 bytes; 1000-byte frames every
        // millisecond (8 Mbit/s) for one second.
        let mut g = guard(
            "filter = \"udp\"\nmax_packets_per_second = 100000\nmax_bits_per_second = \"1M\"\nburst = 2\n",
        );
        let (mut sent, mut reason) = (0u64, String::new());
        for i in 0..1000u64 {
            match g.check(&mut frame(1000), 1_000_000_000 + i * 1_000_000) {
                Ok(()) => sent += 1,
                Err(r) => {
                    assert_eq!(r.rule, "rate");
                    reason = r.reason;
                }
            }
        }
        // The burst (24224 bits: 3 frames), then 8000 bits per 8 ms.
        assert!((126..=128).contains(&sent), "{sent} sent");
        assert!(reason.contains("1000000 bits per second"), "{reason}");
    }

    #[test]
    fn the_frame_limit_refuses_without_spending_bits() {
        let mut g = guard(
            "filter = \"udp\"\nmax_packets_per_second = 10\nmax_bits_per_second = \"1M\"\nburst = 1\n",
        );
        let at = 1_000_000_000;
        assert!(g.check(&mut frame(1000), at).is_ok());
        let r = g.check(&mut frame(1000), at).unwrap_err();
        assert!(r.reason.contains("10 frames per second"), "{}", r.reason);
        // 100 ms later a frame token is back.
        assert!(g.check(&mut frame(1000), at + 100_000_000).is_ok());
    }
}
