//! Why a capture was refused or failed, typed, for the cases a setting of
//! the front end can fix. The engine says what happened in its own words
//! (`Display`, which is also [`EngineError::message`](crate::EngineError));
//! it does not speak the front end's language: the CLI turns a [`Reason`]
//! into words with its flag names, the daemon into its own.

use crate::Hook;
use ringcap_sink::SinkReason;
use std::fmt;

/// A refusal or failure a front end may explain with one of its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Packets of several link types, and the output format (pcap) holds
    /// one. `from_files`: the link types are the input files' (else the
    /// interfaces').
    MixedLinkTypes {
        /// The distinct link types, in ascending order.
        linktypes: Vec<u32>,
        /// True when they come from input files.
        from_files: bool,
    },
    /// A hook program has one ring buffer per interface, read by one thread.
    HookThreads(Hook),
    /// A hook program stamps packets with the host clock: no adapter
    /// timestamps.
    HookClock(Hook),
    /// Monitor mode (every frame dropped at the driver after its copy) was
    /// asked of a hook other than XDP.
    MonitorNeedsXdp(Hook),
    /// This build has no XDP or netfilter hooks.
    HookNotBuilt(Hook),
    /// Writing ring blocks in place was demanded and cannot be done.
    NotInPlace(InPlaceBlocker),
    /// The interface merges received packets (GRO/LRO) before capture, so
    /// captured packets may be longer than on the wire (a warning).
    MergingOffloads {
        /// The interface.
        interface: String,
        /// The offloads that are on, as ethtool names them.
        names: String,
        /// The arguments to `ethtool -K IF` that turn them off.
        ethtool_args: String,
    },
    /// The interface cannot give hardware timestamps.
    NoHardwareTimestamps {
        /// The interface.
        interface: String,
        /// The system's error.
        error: String,
    },
    /// The process may not open a packet socket (the system's words are
    /// `Display`; a front end may name its own way around it).
    MissingCapability {
        /// CAP_NET_RAW or CAP_NET_ADMIN.
        capability: &'static str,
        /// What was being done.
        action: String,
    },
    /// The sink's reason.
    Sink(SinkReason),
}

/// Why the ring blocks of a capture cannot be written to its file in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InPlaceBlocker {
    /// Packets come from files, not a ring.
    Files,
    /// The XDP and netfilter hooks have no TPACKET_V3 ring.
    Hook,
    /// Only pcapng can be written from ring blocks.
    NotPcapng,
    /// The output is not a file.
    NotAFile,
    /// Buffered writes (not O_DIRECT).
    Buffered,
    /// Exact header lengths are cut in user space.
    Headers,
    /// The sampling runs in user space.
    UserSampling,
    /// Masks and anonymization rewrite packets.
    Transforms,
    /// A packet count stops in the middle of a ring block.
    Count,
    /// An observer (flow records, an index) looks at each packet.
    Observer,
}

impl fmt::Display for InPlaceBlocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InPlaceBlocker::Files => "packets are read from files, not a ring",
            InPlaceBlocker::Hook => "the XDP and netfilter hooks have no TPACKET_V3 ring",
            InPlaceBlocker::NotPcapng => "only pcapng files can be written from ring blocks",
            InPlaceBlocker::NotAFile => "the output is not a file",
            InPlaceBlocker::Buffered => "buffered writes",
            InPlaceBlocker::Headers => "exact header lengths are cut in user space",
            InPlaceBlocker::UserSampling => "this sampling runs in user space",
            InPlaceBlocker::Transforms => "masks and anonymization rewrite packets",
            InPlaceBlocker::Count => "a packet count stops in the middle of a ring block",
            InPlaceBlocker::Observer => {
                "flow records (or another observer) look at each packet in user space"
            }
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::MixedLinkTypes {
                linktypes,
                from_files,
            } => write!(
                f,
                "{} have packets of {} link types ({}), which one pcap file cannot hold: write pcapng",
                if *from_files { "the input files" } else { "these interfaces" },
                linktypes.len(),
                list(linktypes)
            ),
            Reason::HookThreads(h) => write!(
                f,
                "the {h} hook reads one ring buffer per interface with one thread"
            ),
            Reason::HookClock(h) => write!(
                f,
                "the {h} hook stamps packets with the host clock in its program: adapter timestamps need the packet socket"
            ),
            Reason::MonitorNeedsXdp(h) => write!(
                f,
                "monitor mode drops every frame the interface receives at the driver, which only the XDP hook can do (not the {h} hook)"
            ),
            Reason::HookNotBuilt(h) => write!(
                f,
                "the {h} hook: this build has no XDP and netfilter hooks (cargo feature `hook`)"
            ),
            Reason::NotInPlace(why) => {
                write!(f, "ring blocks cannot be written in place here: {why}")
            }
            Reason::MergingOffloads {
                interface,
                names,
                ethtool_args,
            } => write!(
                f,
                "{interface} merges received packets before capture ({names} on): captured packets may be larger than on the wire. Fix: ethtool -K {interface}{ethtool_args}, or let the capture turn them off"
            ),
            Reason::NoHardwareTimestamps { interface, error } => write!(
                f,
                "interface '{interface}' cannot give hardware timestamps ({error}); use host timestamps"
            ),
            Reason::MissingCapability { capability, action } => write!(
                f,
                "{}",
                ringcap_source::OpenError::MissingCapability {
                    capability,
                    action: action.clone()
                }
            ),
            Reason::Sink(r) => r.fmt(f),
        }
    }
}

/// Link types as a list for a message: "1, 101".
pub fn list(linktypes: &[u32]) -> String {
    linktypes
        .iter()
        .map(|k| k.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_names_no_flag() {
        let mut all = vec![
            Reason::MixedLinkTypes {
                linktypes: vec![1, 101],
                from_files: true,
            },
            Reason::HookThreads(Hook::Xdp),
            Reason::HookClock(Hook::Netfilter),
            Reason::HookNotBuilt(Hook::Xdp),
            Reason::MonitorNeedsXdp(Hook::Packet),
            Reason::NoHardwareTimestamps {
                interface: "eth0".into(),
                error: "e".into(),
            },
            Reason::MergingOffloads {
                interface: "eth0".into(),
                names: "gro".into(),
                ethtool_args: " gro off".into(),
            },
            Reason::Sink(SinkReason::OutputExists("/x".into())),
        ];
        for b in [
            InPlaceBlocker::Files,
            InPlaceBlocker::Hook,
            InPlaceBlocker::NotPcapng,
            InPlaceBlocker::NotAFile,
            InPlaceBlocker::Buffered,
            InPlaceBlocker::Headers,
            InPlaceBlocker::UserSampling,
            InPlaceBlocker::Transforms,
            InPlaceBlocker::Count,
            InPlaceBlocker::Observer,
        ] {
            all.push(Reason::NotInPlace(b));
        }
        for r in all {
            // (`ethtool -K` is the system's command, not ours.)
            let words = r.to_string().replace("ethtool -K", "ethtool");
            assert!(!words.contains("--") && !words.contains(" -"), "{words}");
        }
    }
}
