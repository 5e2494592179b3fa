//! Facts about a capture interface: index, link type, MTU, state, counters and
//! offload settings, read from the kernel (sysfs and ioctls).

use std::fmt;
use std::fs;
use std::io;
use std::path::PathBuf;

/// Why an interface could not be used for capture. Each variant's message says
/// what to do about it.
#[derive(Debug)]
pub enum OpenError {
    /// No interface of that name in this network namespace.
    NoSuchInterface(String),
    /// The interface exists but is administratively down.
    InterfaceDown(String),
    /// The process lacks a capability.
    MissingCapability {
        /// CAP_NET_RAW or CAP_NET_ADMIN.
        capability: &'static str,
        /// What was being done.
        action: String,
    },
    /// The interface cannot give hardware timestamps.
    NoHardwareTimestamps {
        /// Interface name.
        interface: String,
        /// The OS error.
        error: io::Error,
    },
    /// The interface's link type is not one ringcap can record.
    UnsupportedLinkType {
        /// Interface name.
        interface: String,
        /// ARPHRD_* number.
        arphrd: u32,
    },
    /// Any other system error, with context.
    Os {
        /// What was being done.
        action: String,
        /// The OS error.
        error: io::Error,
    },
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::NoSuchInterface(name) => write!(
                f,
                "no such interface '{name}' (list interfaces with `ip link show`)"
            ),
            OpenError::InterfaceDown(name) => write!(
                f,
                "interface '{name}' is down (bring it up with `ip link set {name} up`)"
            ),
            OpenError::MissingCapability { capability, action } => write!(
                f,
                "permission denied while {action}: capturing needs {capability} (run as root, or `setcap cap_net_raw,cap_net_admin+ep` on the ringcap binary)"
            ),
            OpenError::NoHardwareTimestamps { interface, error } => write!(
                f,
                "interface '{interface}' cannot give hardware timestamps ({error}); use host timestamps"
            ),
            OpenError::UnsupportedLinkType { interface, arphrd } => write!(
                f,
                "interface '{interface}' has link type ARPHRD {arphrd}, which ringcap cannot record yet (Ethernet, loopback and raw IP are supported)"
            ),
            OpenError::Os { action, error } => write!(f, "{action}: {error}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl OpenError {
    /// Wraps an OS error, turning EPERM/EACCES into a capability message.
    pub fn os(action: impl Into<String>, error: io::Error, capability: &'static str) -> OpenError {
        let action = action.into();
        match error.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => {
                OpenError::MissingCapability { capability, action }
            }
            _ => OpenError::Os { action, error },
        }
    }
}

/// A network interface to capture on.
#[derive(Debug, Clone)]
pub struct Interface {
    /// Name, e.g. `eth0`.
    pub name: String,
    /// Kernel interface index.
    pub index: i32,
    /// ARPHRD_* link type.
    pub arphrd: u32,
    /// MTU in bytes.
    pub mtu: u32,
}

/// The interface's own packet counters (sysfs `statistics/`), 64-bit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InterfaceCounters {
    /// rx_packets + tx_packets: AF_PACKET sees both directions.
    pub packets: u64,
    /// rx_dropped + rx_missed_errors + rx_fifo_errors.
    pub dropped: u64,
}

impl Interface {
    /// Looks up `name` and checks it can be captured on.
    pub fn open(name: &str) -> Result<Interface, OpenError> {
        if name.is_empty()
            || name.len() >= libc::IFNAMSIZ
            || name.contains('/')
            || name == "."
            || name == ".."
        {
            return Err(OpenError::NoSuchInterface(name.to_string()));
        }
        let dir = Self::sysfs(name);
        if !dir.exists() {
            return Err(OpenError::NoSuchInterface(name.to_string()));
        }
        let read = |file: &str| -> Result<u64, OpenError> {
            read_u64(&dir.join(file)).map_err(|error| OpenError::Os {
                action: format!("reading {}", dir.join(file).display()),
                error,
            })
        };
        let index = read("ifindex")? as i32;
        let arphrd = read("type")? as u32;
        let mtu = read("mtu")? as u32;
        let flags = read("flags")?;
        if flags & libc::IFF_UP as u64 == 0 {
            return Err(OpenError::InterfaceDown(name.to_string()));
        }
        let iface = Interface {
            name: name.to_string(),
            index,
            arphrd,
            mtu,
        };
        if iface.linktype().is_none() {
            return Err(OpenError::UnsupportedLinkType {
                interface: name.to_string(),
                arphrd,
            });
        }
        Ok(iface)
    }

    fn sysfs(name: &str) -> PathBuf {
        PathBuf::from("/sys/class/net").join(name)
    }

    /// The pcap LINKTYPE for this interface, if ringcap can record it.
    pub fn linktype(&self) -> Option<u32> {
        match self.arphrd {
            1 | 772 => Some(1), // ARPHRD_ETHER, ARPHRD_LOOPBACK: Ethernet framing
            65534 => Some(101), // ARPHRD_NONE (tun): raw IP
            _ => None,
        }
    }

    /// Longest frame the link should carry without offload merging: MTU plus
    /// the link header and one VLAN tag.
    pub fn max_frame_len(&self) -> u32 {
        match self.linktype() {
            Some(1) => self.mtu + 14 + 4,
            _ => self.mtu,
        }
    }

    /// Reads the interface's packet counters now.
    pub fn counters(&self) -> InterfaceCounters {
        let dir = Self::sysfs(&self.name).join("statistics");
        let get = |f: &str| read_u64(&dir.join(f)).unwrap_or(0);
        InterfaceCounters {
            packets: get("rx_packets") + get("tx_packets"),
            dropped: get("rx_dropped") + get("rx_missed_errors") + get("rx_fifo_errors"),
        }
    }

    /// The files [`counters`](Self::counters) reads, kept open, for a
    /// caller that reads the counters again and again: each read is then
    /// one pread per file, without the path lookups, opens and closes that
    /// made up most of the cost.
    pub fn counter_files(&self) -> CounterFiles {
        let dir = Self::sysfs(&self.name).join("statistics");
        let open = |f: &str| {
            fs::File::open(dir.join(f))
                .ok()
                .map(|f| (f, std::sync::atomic::AtomicU64::new(0)))
        };
        CounterFiles {
            packets: [open("rx_packets"), open("tx_packets")],
            dropped: [
                open("rx_dropped"),
                open("rx_missed_errors"),
                open("rx_fifo_errors"),
            ],
        }
    }

    /// Receive offloads that merge packets before capture and are on, by
    /// ethtool feature name (e.g. `generic-receive-offload`).
    pub fn merging_offloads(&self) -> Vec<String> {
        let Ok(out) = std::process::Command::new("ethtool")
            .arg("-k")
            .arg(&self.name)
            .output()
        else {
            return Vec::new();
        };
        parse_merging_offloads(&String::from_utf8_lossy(&out.stdout))
    }
}

/// The ethtool features that make one captured "packet" out of several.
pub const MERGING_FEATURES: &[(&str, &str)] = &[
    ("generic-receive-offload", "gro"),
    ("large-receive-offload", "lro"),
    ("rx-gro-hw", "rx-gro-hw"),
    ("rx-gro-list", "rx-gro-list"),
    ("rx-udp-gro-forwarding", "rx-udp-gro-forwarding"),
];

/// Picks the merging features that are on from `ethtool -k` output.
pub fn parse_merging_offloads(ethtool_k: &str) -> Vec<String> {
    let mut on = Vec::new();
    for line in ethtool_k.lines() {
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        if MERGING_FEATURES.iter().any(|(f, _)| *f == name)
            && value.trim_start().starts_with("on")
            && !value.contains("[fixed]")
        {
            on.push(name.to_string());
        }
    }
    on
}

/// The short ethtool -K name for a feature.
pub fn short_feature_name(feature: &str) -> &str {
    MERGING_FEATURES
        .iter()
        .find(|(f, _)| *f == feature)
        .map(|(_, s)| *s)
        .unwrap_or(feature)
}

/// An interface's statistics files, open (see [`Interface::counter_files`]),
/// each with the last value read from it: a file that could not be opened
/// counts 0, as with [`Interface::counters`]; one that can no longer be read
/// (the interface was deleted) keeps its last value, so that a capture's
/// final report still says what the interface saw.
#[derive(Debug)]
pub struct CounterFiles {
    packets: [Option<(fs::File, std::sync::atomic::AtomicU64)>; 2],
    dropped: [Option<(fs::File, std::sync::atomic::AtomicU64)>; 3],
}

impl CounterFiles {
    /// The counters now.
    pub fn read(&self) -> InterfaceCounters {
        use std::os::unix::fs::FileExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        let sum = |files: &[Option<(fs::File, AtomicU64)>]| -> u64 {
            files
                .iter()
                .flatten()
                .map(|(f, last)| {
                    // A sysfs attribute is made anew by each read from
                    // offset 0.
                    let mut buf = [0u8; 32];
                    match f
                        .read_at(&mut buf, 0)
                        .ok()
                        .and_then(|n| std::str::from_utf8(&buf[..n]).ok().map(parse_u64))
                        .and_then(Result::ok)
                    {
                        Some(v) => {
                            // Readers race (status lines, the supervisor):
                            // the counters only grow, so the largest read
                            // is the latest.
                            last.fetch_max(v, Ordering::Relaxed);
                            v
                        }
                        None => last.load(Ordering::Relaxed),
                    }
                })
                .sum()
        };
        InterfaceCounters {
            packets: sum(&self.packets),
            dropped: sum(&self.dropped),
        }
    }
}

fn read_u64(path: &std::path::Path) -> io::Result<u64> {
    parse_u64(&fs::read_to_string(path)?)
}

fn parse_u64(s: &str) -> io::Result<u64> {
    let s = s.trim();
    let v = if let Some(hex) = s.strip_prefix("0x") {
        u64::from_str_radix(hex, 16)
    } else {
        s.parse()
    };
    v.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interface() {
        assert!(matches!(
            Interface::open("nosuch0rc"),
            Err(OpenError::NoSuchInterface(_))
        ));
        assert!(matches!(
            Interface::open("../lo"),
            Err(OpenError::NoSuchInterface(_))
        ));
    }

    #[test]
    fn loopback_is_ethernet() {
        let lo = Interface::open("lo").unwrap();
        assert_eq!(lo.linktype(), Some(1));
        assert!(lo.index > 0);
    }

    #[test]
    fn offload_parsing() {
        let text = "Features for x:\ngeneric-receive-offload: on\nlarge-receive-offload: off [fixed]\nrx-gro-hw: on [fixed]\ntcp-segmentation-offload: on\nrx-gro-list: off\n";
        assert_eq!(
            parse_merging_offloads(text),
            vec!["generic-receive-offload".to_string()]
        );
        assert_eq!(short_feature_name("generic-receive-offload"), "gro");
    }
}
