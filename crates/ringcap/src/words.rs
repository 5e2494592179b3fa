//! The engine's and the sink's typed reasons in the CLI's words: the
//! libraries say what happened and which setting is at fault as a value
//! ([`Reason`]); only here do they become the flags a user of `ringcap
//! capture` typed or can type.

use ringcap_engine::{EngineError, InPlaceBlocker, Reason};
use ringcap_sink::{SinkReason, WriteFailure};

/// What the CLI prints for `e`.
pub fn error(e: &EngineError) -> String {
    match &e.reason {
        Some(r) => reason(r),
        None => e.message.clone(),
    }
}

/// Why the writer failed, in the CLI's words.
pub fn write_failure(f: &WriteFailure) -> String {
    match &f.reason {
        Some(r) => reason(&Reason::Sink(r.clone())),
        None => f.message.clone(),
    }
}

/// A typed reason in the CLI's words.
pub fn reason(r: &Reason) -> String {
    match r {
        Reason::MixedLinkTypes {
            linktypes,
            from_files: true,
        } => format!(
            "the input has packets of {} link types ({}), which one pcap file cannot hold: use --format pcapng",
            linktypes.len(),
            ringcap_engine::reason::list(linktypes)
        ),
        Reason::MixedLinkTypes { .. } => "these interfaces have different link types, which one pcap file cannot hold: use --format pcapng".into(),
        Reason::HookThreads(h) => format!(
            "--hook {h} reads one ring buffer per interface with one thread: --threads must be 1"
        ),
        Reason::HookClock(h) => format!(
            "--hook {h} stamps packets with the host clock in the program: --tstamp adapter needs --hook packet"
        ),
        Reason::HookNotBuilt(h) => format!(
            "--hook {h}: this ringcap was built without the XDP and netfilter hooks (cargo feature `hook`)"
        ),
        Reason::MonitorNeedsXdp(h) => format!(
            "--monitor drops every frame the interface receives at the driver, which only the XDP hook can do: it needs --hook xdp (not --hook {h})"
        ),
        Reason::NotInPlace(b) => format!(
            "--zero-copy on: ring blocks cannot be written in place here: {}",
            blocker(*b)
        ),
        Reason::MergingOffloads {
            interface,
            names,
            ethtool_args,
        } => format!(
            "{interface} merges received packets before capture ({names} on): captured packets may be larger than on the wire. Fix: ethtool -K {interface}{ethtool_args}  (or use --fix-offloads)"
        ),
        Reason::NoHardwareTimestamps { interface, error } => format!(
            "interface '{interface}' cannot give hardware timestamps ({error}); use --tstamp host"
        ),
        Reason::MissingCapability { capability, action } => format!(
            "permission denied while {action}: capturing needs {capability}: run as root, \
             `setcap cap_net_raw,cap_net_admin+ep` the ringcap binary, or capture through \
             ringcapd as an unprivileged user ({})",
            through_ringcapd()
        ),
        Reason::Sink(SinkReason::OutputExists(p)) => format!(
            "cannot write the output: {} already exists (use --overwrite to replace it)",
            p.display()
        ),
        Reason::Sink(SinkReason::DiskFull { file, error }) => format!(
            "writing {file}: the disk is full ({error}); the file was closed valid. Free space, or set --max-total/--min-free so ringcap deletes old files"
        ),
    }
}

/// How this user would reach ringcapd: a capture without CAP_NET_RAW goes
/// through the default socket by itself when it exists, so here it does
/// not, or the capability was refused for another reason.
fn through_ringcapd() -> String {
    let s = ringcap_client::default_socket();
    if s.exists() {
        format!("--daemon {}", s.display())
    } else {
        format!(
            "no ringcapd listens at {}: start it, or name its socket with --daemon PATH",
            s.display()
        )
    }
}

fn blocker(b: InPlaceBlocker) -> String {
    match b {
        InPlaceBlocker::Files => "packets are read from files (-r), not a ring".into(),
        InPlaceBlocker::Hook => "--hook xdp and netfilter have no TPACKET_V3 ring".into(),
        InPlaceBlocker::NotPcapng => {
            "only pcapng files can be written from ring blocks (use --format pcapng)".into()
        }
        InPlaceBlocker::Buffered => "--write-mode buffered".into(),
        InPlaceBlocker::Headers => "-s headers cuts each packet in user space".into(),
        InPlaceBlocker::Transforms => {
            "masks and anonymization (--mask, --anonymize) rewrite packets".into()
        }
        InPlaceBlocker::Count => "-c stops in the middle of a ring block".into(),
        InPlaceBlocker::Observer => {
            "--flows (or another observer) looks at each packet in user space".into()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringcap_engine::Hook;

    /// Each typed reason the CLI can fix with a flag names that flag here,
    /// while the engine's own words name none.
    #[test]
    fn the_cli_names_the_flag_the_library_does_not() {
        let cases: Vec<(Reason, &str)> = vec![
            (
                Reason::MixedLinkTypes {
                    linktypes: vec![1, 101],
                    from_files: true,
                },
                "--format pcapng",
            ),
            (
                Reason::MixedLinkTypes {
                    linktypes: vec![1, 101],
                    from_files: false,
                },
                "--format pcapng",
            ),
            (Reason::HookThreads(Hook::Xdp), "--threads must be 1"),
            (Reason::HookClock(Hook::Netfilter), "--tstamp adapter"),
            (Reason::HookNotBuilt(Hook::Xdp), "--hook xdp"),
            (Reason::MonitorNeedsXdp(Hook::Packet), "--monitor"),
            (
                Reason::NotInPlace(InPlaceBlocker::Buffered),
                "--write-mode buffered",
            ),
            (
                Reason::NotInPlace(InPlaceBlocker::NotPcapng),
                "--format pcapng",
            ),
            (
                Reason::MergingOffloads {
                    interface: "eth0".into(),
                    names: "gro".into(),
                    ethtool_args: " gro off".into(),
                },
                "--fix-offloads",
            ),
            (
                Reason::NoHardwareTimestamps {
                    interface: "eth0".into(),
                    error: "e".into(),
                },
                "--tstamp host",
            ),
            (
                Reason::Sink(SinkReason::OutputExists("/x".into())),
                "--overwrite",
            ),
            (
                Reason::MissingCapability {
                    capability: "CAP_NET_RAW",
                    action: "opening a packet socket".into(),
                },
                "--daemon",
            ),
            (
                Reason::Sink(SinkReason::DiskFull {
                    file: "f".into(),
                    error: "e".into(),
                }),
                "--max-total",
            ),
        ];
        for (r, flag) in cases {
            assert!(reason(&r).contains(flag), "{}", reason(&r));
            assert!(!r.to_string().contains(flag), "{r}");
        }
    }
}
