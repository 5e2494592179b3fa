//! Zero-copy views over packet bytes, and the per-packet function the
//! capture path needs: [`header_len`] (exact header truncation, `-s headers`).
//!
//! The layout follows smoltcp's `wire` module: one module per protocol, each
//! with a small view struct wrapping a buffer, a checked constructor
//! (`new_checked`) that verifies every byte an accessor may read or write is
//! present, and documented accessors. Views never allocate, never panic on
//! any input and contain no `unsafe` code. Since a view can only be built
//! through its checked constructor, its accessors are infallible.
//!
//! The views of Ethernet, ARP, IPv4, IPv6, TCP, UDP, ICMP and ICMPv6 are
//! generic over the buffer, `View<T: AsRef<[u8]>>`: over `&[u8]` (payload
//! accessors then return slices of the buffer's lifetime) or, for
//! rewriting in place, over `&mut [u8]`, where `T: AsMut<[u8]>` adds
//! setters (`set_src_addr`, `set_seq_number`, ...), `*_mut` slices and
//! `fill_checksum`. Each of those modules has a `field` table naming where
//! its fields are, for code that must address a header only partly
//! captured (the privacy rewrite). `tests/views.rs` checks over random
//! bytes that no accessor or setter panics and that a setter writes its
//! field only.
//!
//! # Why hand-written and not `etherparse`
//!
//! `etherparse` is an excellent general parser (and is used in this crate's
//! tests as an independent oracle), but the capture path has needs it does
//! not address directly:
//!
//! * it needs the exact *length* of the protocol headers of frames that may
//!   be truncated by the snap length or malformed, with a defined fallback:
//!   a header cut short by the end of the frame is kept up to that end, a
//!   malformed or unsupported one is not (see [`header_len`]);
//! * it must look through GRE, VXLAN, MPLS, ESP and SCTP, and into the
//!   datagram quoted by ICMP errors;
//! * it runs once per captured packet, so it must be allocation free and
//!   branch light; walking headers is straight-line code over borrowed
//!   views rather than building owned header structs (etherparse's
//!   `PacketHeaders` copies every header, and its sliced API stops at the
//!   first tunnel).
//!
//! # Modules
//!
//! Link layer: [`ethernet`], [`vlan`], [`mpls`], [`arp`]. Network layer:
//! [`ip`] (protocol numbers), [`ipv4`], [`ipv6`], [`ipv6_ext`] (hop-by-hop,
//! routing, fragment, destination options, authentication header), [`esp`].
//! Transport: [`tcp`], [`udp`], [`icmp`], [`icmpv6`], [`sctp`]. Tunnels:
//! [`gre`], [`vxlan`]. Packet-level functions: [`headers`].

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod arp;
pub mod checksum;
pub mod esp;
pub mod ethernet;
pub mod gre;
pub mod headers;
pub mod icmp;
mod icmp_view;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6_ext;
pub mod mpls;
pub mod sctp;
pub mod tcp;
pub mod udp;
pub mod vlan;
pub mod vxlan;

pub use headers::header_len;

use core::fmt;

/// Why a view could not be constructed over a byte slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header (or the length the header
    /// itself claims), and the fields it does hold are valid: it could be
    /// the start of a header cut short. (A field that makes the header
    /// malformed or unsupported is reported as such even in a short buffer.)
    Truncated,
    /// A field has a value that makes the header impossible to interpret,
    /// e.g. a wrong IP version or an IPv4 IHL below 5.
    Malformed,
    /// The header is valid but uses a feature this crate does not decode,
    /// e.g. GRE source routing.
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated header",
            Error::Malformed => "malformed header",
            Error::Unsupported => "unsupported header",
        })
    }
}

impl std::error::Error for Error {}

/// Result type of the checked view constructors.
pub type Result<T> = core::result::Result<T, Error>;

/// A field's byte range in its header (the `field` module of each
/// protocol names them, as smoltcp's `wire` does).
pub type Field = core::ops::Range<usize>;

/// Writes a big-endian `u16` at `i`. Callers guarantee `i + 2 <= b.len()`.
#[inline(always)]
pub(crate) fn put16(b: &mut [u8], i: usize, v: u16) {
    b[i..i + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian `u32` at `i`. Callers guarantee `i + 4 <= b.len()`.
#[inline(always)]
pub(crate) fn put32(b: &mut [u8], i: usize, v: u32) {
    b[i..i + 4].copy_from_slice(&v.to_be_bytes());
}

/// Reads a big-endian `u16` at `i`. Callers guarantee `i + 2 <= b.len()`
/// (checked by the view constructors); past the end it panics.
#[inline(always)]
pub fn be16(b: &[u8], i: usize) -> u16 {
    // One bounds check and one load (byte by byte, each byte is checked).
    let mut w = [0; 2];
    w.copy_from_slice(&b[i..i + 2]);
    u16::from_be_bytes(w)
}

/// Reads a big-endian `u32` at `i`. Callers guarantee `i + 4 <= b.len()`;
/// past the end it panics.
#[inline(always)]
pub fn be32(b: &[u8], i: usize) -> u32 {
    let mut w = [0; 4];
    w.copy_from_slice(&b[i..i + 4]);
    u32::from_be_bytes(w)
}

/// Copies `N` bytes starting at `i`. Callers guarantee `i + N <= b.len()`.
#[inline(always)]
pub(crate) fn array<const N: usize>(b: &[u8], i: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[i..i + N]);
    out
}

/// Returns `Ok(())` if `b` holds at least `n` bytes, else [`Error::Truncated`].
#[inline(always)]
pub(crate) fn need(b: &[u8], n: usize) -> Result<()> {
    if b.len() >= n {
        Ok(())
    } else {
        Err(Error::Truncated)
    }
}

/// The bytes of `b` from `start`, or an empty slice if `start` is past the end.
#[inline(always)]
pub(crate) fn tail(b: &[u8], start: usize) -> &[u8] {
    b.get(start..).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_display() {
        assert_eq!(Error::Truncated.to_string(), "truncated header");
        assert_eq!(Error::Malformed.to_string(), "malformed header");
        assert_eq!(Error::Unsupported.to_string(), "unsupported header");
    }

    #[test]
    fn helpers() {
        let b = [1u8, 2, 3, 4, 5];
        assert_eq!(be16(&b, 1), 0x0203);
        assert_eq!(be32(&b, 1), 0x0203_0405);
        assert_eq!(array::<2>(&b, 3), [4, 5]);
        assert!(need(&b, 5).is_ok());
        assert_eq!(need(&b, 6), Err(Error::Truncated));
        assert_eq!(tail(&b, 4), &[5]);
        assert_eq!(tail(&b, 9), &[] as &[u8]);
    }
}
