//! Filter expressions in tcpdump syntax, compiled by libpcap into classic BPF.

use crate::bpf::{Instruction, Program};
use std::fmt;

/// Why a filter expression could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// The expression as given.
    pub expression: String,
    /// libpcap's message.
    pub message: String,
}

/// libpcap's message, without the `pcap` crate's "libpcap error: " in
/// front (front ends say where it comes from once, in their own words).
fn libpcap_says(e: pcap::Error) -> String {
    match e {
        pcap::Error::PcapError(m) => m,
        other => other.to_string(),
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad filter expression '{}': {}",
            self.expression, self.message
        )
    }
}

impl std::error::Error for FilterError {}

/// Where the compiled program will run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// Packets as they are in a file: VLAN tags are in the bytes.
    Offline,
    /// The Linux kernel on interface `name`, which strips VLAN tags before the
    /// filter runs and offers them through ancillary loads.
    Kernel {
        /// Interface name.
        interface: &'a str,
    },
}

/// libpcap's DLT_ value for a file's LINKTYPE_ value: the same number except
/// for the few link types whose DLT_ numbers differ between systems (libpcap's
/// `linktype_to_dlt`), raw IP (LINKTYPE_RAW 101) above all.
pub fn dlt_of_linktype(linktype: i32) -> i32 {
    match linktype {
        100 => 11, // ATM_RFC1483
        101 => 12, // RAW
        102 => 15, // SLIP_BSDOS
        103 => 16, // PPP_BSDOS
        other => other,
    }
}

/// Compiles `expression` for link type `linktype` (a DLT/LINKTYPE number) and
/// makes every accepting return keep `snaplen` bytes. An empty expression
/// accepts everything.
///
/// libpcap compiles on a dead handle, so no device is opened — except for
/// expressions that test VLAN tags on a live interface: only a handle activated
/// on a Linux capture device makes libpcap emit the ancillary loads that see
/// the tag the kernel has already stripped, so those are compiled on a briefly
/// opened (and immediately closed) libpcap handle for that interface.
///
/// A filter libpcap refuses gets libpcap's own words, as tcpdump prints
/// them ("can't parse filter expression: syntax error").
pub fn compile(
    expression: &str,
    linktype: i32,
    snaplen: u32,
    target: Target,
) -> Result<Program, FilterError> {
    let err = |message: String| FilterError {
        expression: expression.to_string(),
        message,
    };
    if expression.trim().is_empty() {
        return Ok(Program::accept_all(snaplen));
    }
    let needs_live = matches!(target, Target::Kernel { .. }) && mentions_vlan(expression);
    let program = if let (true, Target::Kernel { interface }) = (needs_live, target) {
        let cap = pcap::Capture::from_device(interface)
            .and_then(|c| c.snaplen(65535).buffer_size(1 << 16).open())
            .map_err(|e| {
                err(format!(
                    "cannot open {interface} to compile a VLAN filter: {e}"
                ))
            })?;
        cap.compile(expression, true)
            .map_err(|e| err(libpcap_says(e)))?
    } else {
        let cap = pcap::Capture::dead(pcap::Linktype(dlt_of_linktype(linktype)))
            .map_err(|e| err(libpcap_says(e)))?;
        cap.compile(expression, true)
            .map_err(|e| err(libpcap_says(e)))?
    };
    let mut instructions = Vec::with_capacity(program.get_instructions().len());
    for insn in program.get_instructions() {
        instructions.push(
            parse_instruction(&insn.to_string())
                .ok_or_else(|| err("libpcap produced an unreadable instruction".into()))?,
        );
    }
    let mut program = Program { instructions };
    program.set_snaplen(snaplen);
    Ok(program)
}

/// The pcap crate keeps `bpf_insn`'s fields private but prints them as
/// "code jt jf k"; reading them back keeps this module free of `unsafe`.
fn parse_instruction(s: &str) -> Option<Instruction> {
    let mut it = s.split_ascii_whitespace();
    let code = it.next()?.parse().ok()?;
    let jt = it.next()?.parse().ok()?;
    let jf = it.next()?.parse().ok()?;
    let k = it.next()?.parse().ok()?;
    Some(Instruction { code, jt, jf, k })
}

/// How a framework filter ANDed with a client's filter reads, for people
/// (audit lines, file headers): "(framework) and (client)", or the one that
/// is not empty. Display only: the two are compiled apart and joined at the
/// instruction level (`Program::and`), never parsed together.
pub fn combined_text(framework: &str, client: &str) -> String {
    match (framework.trim(), client.trim()) {
        ("", c) => c.to_string(),
        (f, "") => f.to_string(),
        (f, c) => format!("({f}) and ({c})"),
    }
}

/// True if `expression` tests VLAN tags (and so must see them in the frame).
pub fn mentions_vlan(expression: &str) -> bool {
    expression
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| w == "vlan")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_ip_link_type_compiles() {
        let p = compile("udp", 101, 65535, Target::Offline).unwrap();
        // An IPv4 UDP packet with no link header: protocol at byte 9.
        let mut ip = [0u8; 28];
        ip[0] = 0x45;
        ip[3] = 28;
        ip[9] = 17;
        assert_eq!(p.run(&ip, 28), 65535);
        ip[9] = 6;
        assert_eq!(p.run(&ip, 28), 0);
    }

    #[test]
    fn compiles_and_sets_snaplen() {
        let p = compile("udp port 53", 1, 96, Target::Offline).unwrap();
        assert!(p.instructions.iter().any(|i| i.code == 0x06 && i.k == 96));
        assert!(!p.instructions.iter().any(|i| i.code == 0x06 && i.k > 96));
    }

    #[test]
    fn bad_expression_gives_libpcap_message() {
        let e = compile("udp port banana", 1, 96, Target::Offline).unwrap_err();
        assert_eq!(e.expression, "udp port banana");
        assert!(e.to_string().contains("banana"), "{e}");
        // libpcap's words as tcpdump prints them, not prefixed twice.
        let e = compile("host or", 1, 96, Target::Offline).unwrap_err();
        assert_eq!(e.message, "can't parse filter expression: syntax error");
    }

    #[test]
    fn empty_expression_accepts_all() {
        assert_eq!(
            compile("  ", 1, 64, Target::Offline).unwrap(),
            Program::accept_all(64)
        );
    }

    #[test]
    fn offline_filter_matches() {
        let p = compile("arp", 1, 65535, Target::Offline).unwrap();
        let mut arp = [0u8; 42];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert_eq!(p.run(&arp, 42), 65535);
        arp[13] = 0x00;
        assert_eq!(p.run(&arp, 42), 0);
    }

    #[test]
    fn vlan_word_detection() {
        assert!(mentions_vlan("vlan 100 and udp"));
        assert!(mentions_vlan("(vlan)"));
        assert!(!mentions_vlan("host vlanhost"));
    }
}
