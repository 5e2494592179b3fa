//! The one place an injected frame is held to its grant's shape. The frame
//! is the daemon's own copy (taken out of the client's message before
//! anything looks at it).
//!
//! Default deny: a frame leaves only if the guard parsed every header of
//! it and holds every field of every layer it parsed. It understands
//!
//! * Ethernet II (no VLAN tag) carrying ARP, IPv4 or IPv6;
//! * ARP for Ethernet/IPv4, requests and replies;
//! * IPv4 without options and not a fragment; IPv6 with no extension
//!   header at all (a fragment header, atomic or not, is refused);
//! * over either, UDP, TCP, ICMP echo request/reply, ICMPv6 echo
//!   request/reply; nothing after the datagram but zero padding up to the
//!   60-byte Ethernet minimum.
//!
//! Anything else is refused with the rule that refused it (`vlan`,
//! `ethertype`, `arp`, `malformed`, `ip-options`, `fragment`, `ipv6-ext`,
//! `tunnel`, `protocol`, `icmp`, `fixed`, `trailing`, `source`, `filter`):
//! IP-in-IP, GRE, UDP to a tunnel port (VXLAN, Geneve, GTP-U, L2TP, ...),
//! any fragment, any IPv6 extension header, IPv4 options, unknown
//! EtherTypes, ICMP other than echo. There is no knob yet by which a grant
//! allows one of those shapes.
//!
//! In a frame it understands, the guard writes the fields the client may
//! not choose (`inject.settable`):
//!
//! 1. identity: the Ethernet source becomes the interface's MAC; an IPv4 or
//!    IPv6 source (and an ARP sender) the interface's address; a frame of a
//!    family the interface has no address of is refused (`source`);
//! 2. IP: TTL / hop limit 64, IPv4 identification from the session's
//!    counter, TOS / traffic class and flow label 0, the reserved flag 0,
//!    DF as in the session's first IPv4 frame;
//! 3. transport: every header field not settable keeps the value of the
//!    session's first frame of that protocol (a fixed 5-tuple, as Paris
//!    traceroute wants): ports, TCP sequence and acknowledgment numbers,
//!    flags, window, urgent pointer and options (a TCP header of another
//!    length is refused, `fixed`), ICMP type and echo identifier and
//!    sequence number; a payload not settable is zeroed;
//! 4. checksums recomputed (IPv4 header, UDP, TCP, ICMP, ICMPv6);
//! 5. then the grant's filter (`inject.filter`) on the frame as it will
//!    leave.
//!
//! The session's first values are learned only from a frame the guard lets
//! through. The rate limit is not here: it is charged when the frame is
//! about to leave ([`crate::rate`]).

pub use crate::identity::Identity;
pub use crate::rewritten::Rewritten;
use ringcap_policy::{InjectGrant, SettableField as F};
use ringcap_stages::CheckedProgram;
use ringcap_wire::arp::{Addr, ArpPacket};
use ringcap_wire::ethernet::{ethertype, EthernetFrame, HEADER_LEN as ETH_LEN};

/// Why a frame was refused: the rule and the reason, for its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The rule (see the module documentation for the list).
    pub rule: &'static str,
    /// In words.
    pub reason: String,
}

pub(crate) fn refuse(rule: &'static str, reason: impl Into<String>) -> Refusal {
    Refusal {
        rule,
        reason: reason.into(),
    }
}

/// The smallest Ethernet frame without its FCS: shorter frames may carry
/// zero padding up to this length after their last header.
const ETH_MIN: usize = 60;

/// The session's first values of the transport fields a client may not set
/// (learned from the first frame of each protocol the guard let through).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Templates {
    /// IPv4 don't-fragment flag.
    pub df: Option<bool>,
    /// The UDP ports (source, destination).
    pub udp: Option<(u16, u16)>,
    /// The TCP header (options included) and its length.
    pub tcp: Option<([u8; 60], usize)>,
    /// The ICMP echo type, identifier and sequence number, [IPv4, IPv6].
    pub icmp: [Option<(u8, u16, u16)>; 2],
}

/// One session's injection policy, with its state (IP ID counter, the
/// session's first transport fields).
pub struct Guard {
    program: CheckedProgram,
    pub(crate) settable: Vec<F>,
    pub(crate) identity: Identity,
    max_len: usize,
    pub(crate) next_id: u16,
    templates: Templates,
    /// The frame as the client sent it, to tell what was rewritten.
    before: Vec<u8>,
}

impl Guard {
    /// The guard for frames sent under `grant` from an interface with
    /// `identity`.
    pub fn new(grant: &InjectGrant, identity: Identity) -> Result<Guard, String> {
        let program = CheckedProgram::new(grant.program.clone())
            .ok_or("the inject filter does not pass libpcap's checks")?;
        Ok(Guard {
            program,
            settable: grant.settable.clone(),
            identity,
            max_len: identity.max_len(),
            next_id: (crate::now_ns() as u16) ^ 0x5a5a,
            templates: Templates::default(),
            before: Vec::new(),
        })
    }

    pub(crate) fn may(&self, f: F) -> bool {
        self.settable.contains(&f)
    }

    /// Holds `frame` to the grant, rewriting what the grant fixes. On
    /// success the frame is what will leave (if the rate allows when its
    /// time comes), and the fields rewritten are returned for its report;
    /// on refusal its bytes are unspecified.
    pub fn check(&mut self, frame: &mut [u8]) -> Result<Rewritten, Refusal> {
        let mut before = std::mem::take(&mut self.before);
        before.clear();
        before.extend_from_slice(&frame[..frame.len().min(self.max_len)]);
        let held = self.hold(frame);
        let rewritten = held.map(|()| Rewritten::between(&before, frame));
        self.before = before;
        rewritten
    }

    fn hold(&mut self, frame: &mut [u8]) -> Result<(), Refusal> {
        if frame.len() < ETH_LEN || frame.len() > self.max_len {
            return Err(refuse(
                "size",
                format!(
                    "{} bytes; frames are {ETH_LEN} to {} bytes on this interface",
                    frame.len(),
                    self.max_len
                ),
            ));
        }
        let mut eth = EthernetFrame::new_checked(&mut frame[..])
            .map_err(|e| refuse("malformed", format!("Ethernet header: {e}")))?;
        let kind = eth.ethertype();
        // Candidate first values: kept only if the frame passes.
        let mut t = self.templates;
        let body = eth.payload_mut();
        let used = match kind {
            ethertype::IPV4 => self.ipv4(body, &mut t)?,
            ethertype::IPV6 => self.ipv6(body, &mut t)?,
            ethertype::ARP => self.arp(body)?,
            k if ethertype::is_vlan(k) => {
                return Err(refuse("vlan", "VLAN-tagged frames are not injected"))
            }
            k if k < 0x0600 => {
                return Err(refuse(
                    "ethertype",
                    "IEEE 802.3 length frames (LLC) are not injected",
                ))
            }
            k => {
                return Err(refuse(
                    "ethertype",
                    format!("EtherType 0x{k:04x} is not injected (only IPv4, IPv6 and ARP)"),
                ))
            }
        };
        let end = ETH_LEN + used;
        if end < frame.len() && (frame.len() > ETH_MIN || frame[end..].iter().any(|&b| b != 0)) {
            return Err(refuse(
                "trailing",
                format!(
                    "{} bytes after the end of the packet ({end} bytes); only zero padding to {ETH_MIN} bytes may follow",
                    frame.len() - end
                ),
            ));
        }
        eth = EthernetFrame::new_checked(&mut frame[..])
            .map_err(|e| refuse("malformed", format!("Ethernet header: {e}")))?;
        eth.set_source(self.identity.mac);
        if self.program.run(frame, frame.len() as u32) == 0 {
            return Err(refuse(
                "filter",
                "the frame does not match the grant's inject filter",
            ));
        }
        self.templates = t;
        Ok(())
    }

    /// ARP for Ethernet/IPv4: the sender becomes the interface. Returns the
    /// packet's length.
    fn arp(&self, a: &mut [u8]) -> Result<usize, Refusal> {
        let mut p = ArpPacket::new_checked(a)
            .map_err(|e| refuse("malformed", format!("ARP packet: {e}")))?;
        let shape = (
            p.hardware_type(),
            p.protocol_type(),
            p.hardware_len(),
            p.protocol_len(),
        );
        if shape != (1, ethertype::IPV4, 6, 4) || !matches!(p.operation(), 1 | 2) {
            return Err(refuse(
                "arp",
                "only Ethernet/IPv4 ARP requests and replies are injected",
            ));
        }
        let len = p.packet_len();
        let v4 = self
            .identity
            .ipv4
            .ok_or_else(|| refuse("source", "the interface has no IPv4 address"))?;
        p.addr_mut(Addr::SenderHardware)
            .copy_from_slice(&self.identity.mac);
        p.addr_mut(Addr::SenderProtocol).copy_from_slice(&v4);
        Ok(len)
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
