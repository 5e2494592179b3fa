//! Where in the kernel packets are taken: a plain value the front ends parse
//! (`--hook`) and the engine dispatches on. It lives here, not in
//! ringcap-hook (which needs clang and libbpf), so that a build without the
//! hooks names and refuses them the same way.

use std::fmt;
use std::str::FromStr;

/// Where in the kernel packets are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hook {
    /// AF_PACKET's protocol handler (TPACKET_V3 rings): every frame, both
    /// directions, the filter in the kernel.
    #[default]
    Packet,
    /// An XDP program at the driver: received frames only, before the stack.
    Xdp,
    /// A netfilter program at pre-routing: IP packets the host takes in.
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

impl Hook {
    /// The link type of what this hook records on an interface of
    /// `linktype`: netfilter hands over IP packets (LINKTYPE_RAW, 101).
    pub fn linktype(&self, linktype: u32) -> u32 {
        match self {
            Hook::Netfilter => 101,
            _ => linktype,
        }
    }
}
