//! [`Hook`] in a build without the cargo feature `hook` (no clang, no BPF
//! programs): the same names, so front ends parse `--hook` alike; a capture
//! through anything but `packet` is refused when it starts.

use std::fmt;
use std::str::FromStr;

/// Where in the kernel packets are taken (as `ringcap_hook::Hook`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hook {
    /// AF_PACKET's protocol handler (TPACKET_V3 rings).
    #[default]
    Packet,
    /// An XDP program at the driver (not in this build).
    Xdp,
    /// A netfilter program at pre-routing (not in this build).
    Netfilter,
}

impl FromStr for Hook {
    type Err = String;
    fn from_str(s: &str) -> Result<Hook, String> {
        match s {
            "packet" => Ok(Hook::Packet),
            "xdp" => Ok(Hook::Xdp),
            "netfilter" => Ok(Hook::Netfilter),
            _ => Err(format!("unknown hook '{s}': packet, xdp or netfilter")),
        }
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hook::Packet => "packet",
            Hook::Xdp => "xdp",
            Hook::Netfilter => "netfilter",
        })
    }
}
