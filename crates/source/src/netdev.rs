//! Interface settings through the kernel's own interfaces (the `SIOCETHTOOL`
//! and `SIOC[GS]HWTSTAMP` ioctls), not by running `ethtool` and parsing its
//! output: receive offloads that merge packets (GRO, LRO, …) and hardware
//! timestamping. Reading needs no privilege; changing needs CAP_NET_ADMIN.
//!
//! Written by hand because no well-kept crate offers the ioctl form (the
//! `ethtool` crate speaks netlink through an async runtime, which a capture
//! engine should not pull in for three calls). `unsafe` is confined to the
//! ioctl calls below, each over a buffer whose layout and length the kernel
//! is told.

use crate::sys;
use std::io;
use std::os::fd::AsRawFd;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;
/// Sanity bound on the number of feature names (the kernel has ~70).
const MAX_FEATURES: usize = 4096;

/// Receive offloads that make one captured "packet" out of several, by the
/// kernel's feature name, with `ethtool`'s long and short names (for messages
/// a user can act on).
pub const MERGING_FEATURES: &[MergingFeature] = &[
    MergingFeature {
        kernel: "rx-gro",
        long: "generic-receive-offload",
        short: "gro",
    },
    MergingFeature {
        kernel: "rx-lro",
        long: "large-receive-offload",
        short: "lro",
    },
    MergingFeature {
        kernel: "rx-gro-hw",
        long: "rx-gro-hw",
        short: "rx-gro-hw",
    },
    MergingFeature {
        kernel: "rx-gro-list",
        long: "rx-gro-list",
        short: "rx-gro-list",
    },
    MergingFeature {
        kernel: "rx-udp-gro-forwarding",
        long: "rx-udp-gro-forwarding",
        short: "rx-udp-gro-forwarding",
    },
];

/// One merging offload's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergingFeature {
    /// The kernel's name (`ETH_SS_FEATURES` string).
    pub kernel: &'static str,
    /// `ethtool -k`'s name.
    pub long: &'static str,
    /// `ethtool -K`'s short name.
    pub short: &'static str,
}

/// A feature that is on and can be switched, by its bit index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveFeature {
    /// Bit index in the kernel's feature set.
    pub bit: u32,
    /// Its names.
    pub names: MergingFeature,
    /// False when the driver does not let it change ("[fixed]").
    pub changeable: bool,
}

/// An ethtool command on `name` over `buf`, whose first word is the command.
///
/// # Safety
/// `buf` must hold the whole command structure: every length field in it
/// (counts of strings or blocks) must describe memory inside `buf`, since
/// the kernel reads and writes as far as those fields say.
unsafe fn ethtool(fd: &impl AsRawFd, name: &str, buf: &mut [u32]) -> io::Result<()> {
    let mut req = sys::ifreq(name);
    req.ifr_ifru.ifru_data = buf.as_mut_ptr() as *mut libc::c_char;
    // SAFETY: `req` is a valid ifreq; its data pointer is `buf`, which the
    // caller guarantees is large enough for the command it holds.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut req) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `SIOC[GS]HWTSTAMP` with `config`.
fn hwtstamp_ioctl(
    iface: &str,
    request: libc::c_ulong,
    config: &mut libc::hwtstamp_config,
) -> io::Result<()> {
    let fd = sys::ioctl_socket()?;
    let mut req = sys::ifreq(iface);
    req.ifr_ifru.ifru_data = config as *mut libc::hwtstamp_config as *mut libc::c_char;
    // SAFETY: `req` is a valid ifreq whose data pointer is a live, exclusive
    // hwtstamp_config, the structure both requests read and write.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, &mut req) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The kernel's feature names, in bit order.
fn feature_names(fd: &impl AsRawFd, iface: &str) -> io::Result<Vec<String>> {
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[]; }
    // with one set asked for, so one data word.
    let mask = (1u64 << ETH_SS_FEATURES).to_ne_bytes();
    let mut info = [
        ETHTOOL_GSSET_INFO,
        0,
        u32::from_ne_bytes([mask[0], mask[1], mask[2], mask[3]]),
        u32::from_ne_bytes([mask[4], mask[5], mask[6], mask[7]]),
        0,
    ];
    // SAFETY: one set bit in the mask, one data word in the buffer.
    unsafe { ethtool(fd, iface, &mut info)? };
    let got = u64::from_ne_bytes(
        [info[2].to_ne_bytes(), info[3].to_ne_bytes()]
            .concat()
            .try_into()
            .unwrap_or([0; 8]),
    );
    if got & (1u64 << ETH_SS_FEATURES) == 0 {
        return Ok(Vec::new());
    }
    let count = info[4] as usize;
    if count > MAX_FEATURES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the kernel reports {count} feature names"),
        ));
    }
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
    let words = 3 + (count * ETH_GSTRING_LEN).div_ceil(4);
    let mut buf = vec![0u32; words];
    buf[0] = ETHTOOL_GSTRINGS;
    buf[1] = ETH_SS_FEATURES;
    buf[2] = count as u32;
    // SAFETY: room for `count` strings of ETH_GSTRING_LEN after the header.
    unsafe { ethtool(fd, iface, &mut buf)? };
    let got = (buf[2] as usize).min(count);
    let bytes: Vec<u8> = buf[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok(bytes
        .chunks(ETH_GSTRING_LEN)
        .take(got)
        .map(|s| {
            let end = s.iter().position(|b| *b == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).into_owned()
        })
        .collect())
}

/// Per 32-bit block: (available, requested, active, never_changed).
fn feature_blocks(fd: &impl AsRawFd, iface: &str, count: usize) -> io::Result<Vec<[u32; 4]>> {
    let blocks = count.div_ceil(32);
    // struct ethtool_gfeatures { u32 cmd; u32 size; struct { u32 available,
    // requested, active, never_changed; } features[size]; }
    let mut buf = vec![0u32; 2 + 4 * blocks];
    buf[0] = ETHTOOL_GFEATURES;
    buf[1] = blocks as u32;
    // SAFETY: room for `blocks` blocks of four words after the header.
    unsafe { ethtool(fd, iface, &mut buf)? };
    Ok(buf[2..]
        .chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect())
}

/// The merging offloads that are on for `iface`.
pub fn merging_offloads(iface: &str) -> io::Result<Vec<ActiveFeature>> {
    let fd = sys::ioctl_socket()?;
    let names = feature_names(&fd, iface)?;
    let blocks = feature_blocks(&fd, iface, names.len())?;
    let mut on = Vec::new();
    for m in MERGING_FEATURES {
        let Some(bit) = names.iter().position(|n| n == m.kernel) else {
            continue;
        };
        let [available, _, active, never_changed] = blocks[bit / 32];
        let mask = 1u32 << (bit % 32);
        if active & mask != 0 {
            on.push(ActiveFeature {
                bit: bit as u32,
                names: *m,
                changeable: available & mask != 0 && never_changed & mask == 0,
            });
        }
    }
    Ok(on)
}

/// Asks for features (by bit index) to be turned on or off.
pub fn set_features(iface: &str, bits: &[u32], on: bool) -> io::Result<()> {
    if bits.is_empty() {
        return Ok(());
    }
    let fd = sys::ioctl_socket()?;
    // The kernel wants exactly as many blocks as it has feature words.
    let blocks = feature_names(&fd, iface)?.len().div_ceil(32);
    if bits.iter().any(|b| *b as usize >= blocks * 32) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no such feature bit",
        ));
    }
    // struct ethtool_sfeatures { u32 cmd; u32 size; struct { u32 valid,
    // requested; } features[size]; }
    let mut buf = vec![0u32; 2 + 2 * blocks];
    buf[0] = ETHTOOL_SFEATURES;
    buf[1] = blocks as u32;
    for b in bits {
        let i = 2 + 2 * (*b as usize / 32);
        buf[i] |= 1 << (b % 32);
        if on {
            buf[i + 1] |= 1 << (b % 32);
        }
    }
    // SAFETY: room for `blocks` blocks of two words after the header.
    unsafe { ethtool(&fd, iface, &mut buf) }
}

/// The interface's hardware timestamping configuration (`SIOCGHWTSTAMP`).
pub fn hw_timestamping(iface: &str) -> io::Result<libc::hwtstamp_config> {
    let mut config = libc::hwtstamp_config {
        flags: 0,
        tx_type: 0,
        rx_filter: 0,
    };
    hwtstamp_ioctl(iface, libc::SIOCGHWTSTAMP, &mut config)?;
    Ok(config)
}

/// Sets the interface's hardware timestamping configuration (`SIOCSHWTSTAMP`).
pub fn set_hw_timestamping(iface: &str, mut config: libc::hwtstamp_config) -> io::Result<()> {
    hwtstamp_ioctl(iface, libc::SIOCSHWTSTAMP, &mut config)
}

/// Hardware receive timestamps for every packet, transmit off.
pub const HW_TIMESTAMP_ALL: libc::hwtstamp_config = libc::hwtstamp_config {
    flags: 0,
    tx_type: 0,   // HWTSTAMP_TX_OFF
    rx_filter: 1, // HWTSTAMP_FILTER_ALL
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_feature_names_are_readable() {
        let fd = sys::ioctl_socket().unwrap();
        let names = feature_names(&fd, "lo").unwrap();
        assert!(names.iter().any(|n| n == "rx-gro"), "{names:?}");
        let blocks = feature_blocks(&fd, "lo", names.len()).unwrap();
        assert_eq!(blocks.len(), names.len().div_ceil(32));
    }

    #[test]
    fn no_such_interface_is_an_error() {
        assert!(merging_offloads("nosuch0rc").is_err());
    }
}
