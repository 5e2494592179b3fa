//! The filter of one shared-capture session, as decided by ringcapd's
//! policy: an administrator's framework program, a client's program, and an
//! optional `exclude` rule, each run on the view of the frame it was made
//! for.
//!
//! # Why three parts and two views
//!
//! The kernel hands the daemon frames with their outer VLAN tag taken out
//! (in the packet's metadata). A live tcpdump's filter sees that view; a
//! filter that tests `vlan` was compiled (offline) for frames with the tag
//! in the bytes, so it must see the tag put back. The two views answer
//! differently for the same expression: `not port 22` compiled offline
//! passes a *tagged* port-22 frame (its EtherType is 0x8100, so "port 22"
//! is false). If one program — framework ANDed with client — ran on the view
//! the *client* chose, a client that writes `vlan` would move the
//! framework onto the tagged view and widen it. So the framework always
//! runs on the view its own text asks for (the kernel's view unless the
//! administrator's filter tests `vlan`), the client's program on the view
//! the client asked for, and a packet is kept only if both accept. Where the
//! views coincide (no tag on the packet, or both ask for the same view) the
//! two run as one ANDed program, as fast as before.
//!
//! A framework filter is a tcpdump expression and means what it means for
//! tcpdump: `not port 22` does not look inside MPLS, GRE, VXLAN or IP-in-IP.
//! [`Exclude`] is the administrator's "never": its expression is run at
//! every layer the header walker ([`ringcap_wire::headers::visit_headers`]) finds —
//! the outer Ethernet frame, every IP header (behind VLAN/QinQ, MPLS, GRE,
//! VXLAN, IP-in-IP, IPv6 extension headers, and the datagram an ICMP error
//! quotes) and every inner Ethernet frame — and a packet any layer matches
//! is dropped.
//!
//! # Programs from clients
//!
//! Clients compile their own filters (no client text reaches libpcap in the
//! privileged process); [`client_program`] is the check a client's program
//! passes before it is run: at most [`MAX_INSTRUCTIONS`] instructions,
//! libpcap's `bpf_validate`, only forward jumps (every run ends within the
//! program's length: bounded CPU per packet), no Linux ancillary loads, and
//! its accepting returns set to the session's snap length.

use crate::bpf::{CheckedProgram, Instruction, Program, MAX_INSTRUCTIONS};
use ringcap_wire::headers::Visitor;

/// A program that passed [`client_program`].
pub fn client_program(instructions: &[Instruction], snaplen: u32) -> Result<Program, String> {
    if instructions.is_empty() || instructions.len() > MAX_INSTRUCTIONS {
        return Err(format!(
            "the program has {} instructions; 1 to {MAX_INSTRUCTIONS} are taken",
            instructions.len()
        ));
    }
    for (pc, i) in instructions.iter().enumerate() {
        // BPF_JMP|BPF_JA with a negative offset would loop; libpcap's
        // validate refuses it too, this says why.
        if i.code == 0x05 && (i.k as i32) < 0 {
            return Err(format!("instruction {pc} jumps backwards"));
        }
        // Loads at negative offsets are Linux's ancillary data (random
        // numbers, the skb's hash...): meaningless on a copy in user space.
        let class = i.code & 0x07;
        let mode = i.code & 0xe0;
        if (class == 0x00 || class == 0x01) && (mode == 0x20 || mode == 0x40) && (i.k as i32) < 0 {
            return Err(format!("instruction {pc} loads Linux ancillary data"));
        }
    }
    let mut p = Program {
        instructions: instructions.to_vec(),
    };
    let checked = CheckedProgram::new(p.clone())
        .ok_or_else(|| "the program does not pass libpcap's checks (bpf_validate)".to_string())?;
    if !checked.traceable() {
        return Err("the program jumps backwards".into());
    }
    p.set_snaplen(snaplen);
    Ok(p)
}

/// The administrator's `exclude` rule: one expression compiled for
/// Ethernet frames and for raw IP packets, run at every layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exclude {
    ethernet: CheckedProgram,
    raw: CheckedProgram,
}

impl Exclude {
    /// The rule from its two compilations (the expression for link type
    /// Ethernet, and for raw IP).
    pub fn new(ethernet: Program, raw: Program) -> Option<Exclude> {
        Some(Exclude {
            ethernet: CheckedProgram::new(ethernet)?,
            raw: CheckedProgram::new(raw)?,
        })
    }

    /// True if the rule matches `frame` (an Ethernet frame with its VLAN
    /// tags in the bytes) at any layer, or `kernel_view` (the same frame
    /// with the outer tag taken out, when there was one) as a whole.
    pub fn matches(&self, frame: &[u8], kernel_view: Option<&[u8]>) -> bool {
        if let Some(k) = kernel_view {
            if self.ethernet.run(k, k.len() as u32) != 0 {
                return true;
            }
        }
        let mut layers = Layers {
            rule: self,
            frame,
            hit: false,
            last_ip: None,
        };
        ringcap_wire::headers::visit_headers(frame, &mut layers);
        layers.hit
    }
}

/// How much of a transport header and what follows an IPv6 packet
/// rebuilt without its extension headers carries (see [`Layers`]).
const FLAT_TRANSPORT: usize = 256;

/// Runs the rule at each layer the walker reports.
///
/// libpcap's code for IPv6 transport terms (`port`, `tcp`, `udp`...) looks
/// only at the fixed header's next-header field, so a port behind a
/// hop-by-hop, routing, destination-options or fragment header escapes it.
/// Where the walker finds a transport header that does not directly follow
/// its IPv6 header, the rule also runs on the packet rebuilt without the
/// extension headers: the fixed header (next header = the transport's
/// protocol, payload length = the transport's) followed by the first
/// [`FLAT_TRANSPORT`] bytes of the transport, on the stack.
struct Layers<'a> {
    rule: &'a Exclude,
    frame: &'a [u8],
    hit: bool,
    /// The last IPv6 header reported (offset).
    last_ip: Option<usize>,
}

impl Visitor for Layers<'_> {
    fn ethernet(&mut self, off: usize) {
        let l = &self.frame[off.min(self.frame.len())..];
        self.hit |= self.rule.ethernet.run(l, l.len() as u32) != 0;
    }
    fn ip(&mut self, off: usize, v6: bool) {
        let l = &self.frame[off.min(self.frame.len())..];
        self.hit |= self.rule.raw.run(l, l.len() as u32) != 0;
        self.last_ip = v6.then_some(off);
    }
    fn transport(&mut self, off: usize, proto: u8, end: usize) {
        let Some(ip) = self.last_ip.take() else {
            return;
        };
        if off == ip + 40 || ip + 40 > self.frame.len() || off > end || end > self.frame.len() {
            return;
        }
        let segment = &self.frame[off..end];
        let take = segment.len().min(FLAT_TRANSPORT);
        let mut flat = [0u8; 40 + FLAT_TRANSPORT];
        flat[..40].copy_from_slice(&self.frame[ip..ip + 40]);
        flat[4..6].copy_from_slice(&(segment.len().min(0xffff) as u16).to_be_bytes());
        flat[6] = proto;
        flat[40..40 + take].copy_from_slice(&segment[..take]);
        let l = &flat[..40 + take];
        self.hit |= self.rule.raw.run(l, (40 + segment.len()) as u32) != 0;
    }
}

/// A session's filter: see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFilter {
    /// The administrator's program (accepting returns = the snap length).
    pub framework: CheckedProgram,
    /// The framework runs on frames with their VLAN tag put back (its text
    /// tests `vlan`); otherwise on the kernel's view.
    pub framework_tagged: bool,
    /// The client's program (accepting returns = the snap length).
    pub client: CheckedProgram,
    /// The client's program runs on frames with their tag put back.
    pub client_tagged: bool,
    /// Framework ANDed with client, for packets where both see one view.
    pub combined: CheckedProgram,
    /// The administrator's "never", at every layer.
    pub exclude: Option<Exclude>,
}

impl SessionFilter {
    /// Puts the parts together; `Err` if the combined program is too long.
    pub fn new(
        framework: Program,
        framework_tagged: bool,
        client: Program,
        client_tagged: bool,
        exclude: Option<Exclude>,
    ) -> Result<SessionFilter, String> {
        let combined = Program::and(&framework, &client)?;
        let check = |p: Program, what: &str| {
            CheckedProgram::new(p).ok_or_else(|| format!("the {what} program is not valid"))
        };
        Ok(SessionFilter {
            framework: check(framework, "framework")?,
            framework_tagged,
            client: check(client, "client")?,
            client_tagged,
            combined: check(combined, "combined")?,
            exclude,
        })
    }

    /// A filter of one program seen on the kernel's view (no framework):
    /// for tests and tools that share a capture without a policy.
    pub fn single(program: CheckedProgram, tagged: bool) -> SessionFilter {
        let all = CheckedProgram::new(Program::accept_all(u32::MAX)).expect("accept-all is valid");
        SessionFilter {
            framework: all,
            framework_tagged: tagged,
            client: program.clone(),
            client_tagged: tagged,
            combined: program,
            exclude: None,
        }
    }

    /// True when framework and client always see the same view, so the
    /// combined program decides alone.
    pub fn one_view(&self) -> bool {
        self.framework_tagged == self.client_tagged
    }

    /// Decides on one packet: `kernel` is the frame as the kernel delivered
    /// it, `tagged` the same frame with its VLAN tag put back (None when it
    /// had none). Returns the bytes to keep (0 = drop).
    pub fn run(&self, kernel: &[u8], tagged: Option<&[u8]>, wire_len: u32) -> u32 {
        let view = |want_tag: bool| match (want_tag, tagged) {
            (true, Some(t)) => (t, wire_len + 4),
            _ => (kernel, wire_len),
        };
        let keep = if self.one_view() || tagged.is_none() {
            let (d, l) = view(self.client_tagged);
            self.combined.run(d, l)
        } else {
            let (fd, fl) = view(self.framework_tagged);
            let f = self.framework.run(fd, fl);
            if f == 0 {
                return 0;
            }
            let (cd, cl) = view(self.client_tagged);
            f.min(self.client.run(cd, cl))
        };
        if keep != 0 && self.excluded(kernel, tagged) {
            return 0;
        }
        keep
    }

    /// True if the `exclude` rule drops the packet.
    #[inline]
    pub fn excluded(&self, kernel: &[u8], tagged: Option<&[u8]>) -> bool {
        match (&self.exclude, tagged) {
            (None, _) => false,
            (Some(e), Some(t)) => e.matches(t, Some(kernel)),
            (Some(e), None) => e.matches(kernel, None),
        }
    }
}
