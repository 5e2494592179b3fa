//! IPv6 extension headers (RFC 8200) and the IP Authentication Header
//! (RFC 4302, also used with IPv4).
//!
//! * Hop-by-hop options (0), routing (43) and destination options (60) share
//!   one layout: next header, `hdr_ext_len`, then `hdr_ext_len * 8 + 6` bytes
//!   of data; the header is `(hdr_ext_len + 1) * 8` bytes. See
//!   [`Ipv6ExtHeader`].
//! * Fragment (44) is always 8 bytes. See [`Ipv6FragmentHeader`].
//! * Authentication header (51) is `(payload_len + 2) * 4` bytes. See
//!   [`AuthHeader`].

use crate::ip::ip_proto;
use crate::{be16, be32, need, tail, Error, Result};

/// True for the next-header values of the IPv6 extension headers this module
/// Where the fields of the extension headers are (offsets from the
/// header's start).
pub mod field {
    /// Next header (every extension header and AH).
    pub const NXT_HDR: usize = 0;
    /// Header length: in 8-byte units minus one (extension headers), in
    /// 4-byte units minus two (AH).
    pub const LENGTH: usize = 1;
    /// Where hop-by-hop and destination options start.
    pub const OPTIONS: usize = 2;
    /// Routing header: routing type.
    pub const ROUTING_TYPE: usize = 2;
    /// Routing header: segments left.
    pub const SEG_LEFT: usize = 3;
    /// Routing header: the first byte of type-specific data (a segment
    /// routing header's last entry index).
    pub const ROUTING_DATA: usize = 4;
    /// Routing header types 0, 2 and 4: where the addresses start.
    pub const ROUTING_ADDRS: usize = 8;
    /// Authentication header: where the integrity check value starts.
    pub const AH_ICV: usize = 12;
}

/// decodes: hop-by-hop, routing, fragment, destination options and AH.
#[inline]
pub const fn is_extension_header(next_header: u8) -> bool {
    matches!(
        next_header,
        ip_proto::HOP_BY_HOP
            | ip_proto::IPV6_ROUTING
            | ip_proto::IPV6_FRAGMENT
            | ip_proto::IPV6_DEST_OPTS
            | ip_proto::AH
    )
}

/// A view of a hop-by-hop options, routing or destination options header,
/// all of whose `(hdr_ext_len + 1) * 8` bytes are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6ExtHeader<'a> {
    buf: &'a [u8],
}

impl<'a> Ipv6ExtHeader<'a> {
    /// Minimum length of these headers.
    pub const MIN_LEN: usize = 8;

    /// Wraps `buf`, checking that the whole header is present.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        need(buf, Self::MIN_LEN)?;
        let h = Ipv6ExtHeader { buf };
        need(buf, h.header_len())?;
        Ok(h)
    }

    /// Type of the following header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buf[0]
    }

    /// The raw length field: header length in 8-byte units, minus one.
    #[inline]
    pub fn hdr_ext_len(&self) -> u8 {
        self.buf[1]
    }

    /// Header length in bytes: `(hdr_ext_len + 1) * 8`.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.hdr_ext_len()) + 1) * 8
    }

    /// The header's contents after the first two bytes: options for
    /// hop-by-hop/destination options; routing type, segments left and
    /// type-specific data for routing headers.
    #[inline]
    pub fn data(&self) -> &'a [u8] {
        &self.buf[2..self.header_len()]
    }

    /// Routing type (meaningful for routing headers only).
    #[inline]
    pub fn routing_type(&self) -> u8 {
        self.buf[2]
    }

    /// Segments left (meaningful for routing headers only).
    #[inline]
    pub fn segments_left(&self) -> u8 {
        self.buf[3]
    }

    /// The bytes after this header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buf, self.header_len())
    }
}

/// A view of an IPv6 fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6FragmentHeader<'a> {
    buf: &'a [u8],
}

impl<'a> Ipv6FragmentHeader<'a> {
    /// Length of the fragment header.
    pub const LEN: usize = 8;

    /// Wraps `buf`, checking that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        need(buf, Self::LEN)?;
        Ok(Ipv6FragmentHeader { buf })
    }

    /// Type of the following header (the same in every fragment).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buf[0]
    }

    /// Fragment offset in units of 8 bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buf, 2) >> 3
    }

    /// More fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.buf[3] & 0x01 != 0
    }

    /// Fragment identification.
    #[inline]
    pub fn ident(&self) -> u32 {
        be32(self.buf, 4)
    }

    /// Header length: always [`Self::LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        Self::LEN
    }

    /// The bytes after this header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buf, Self::LEN)
    }
}

/// A view of an IP Authentication Header, all of whose
/// `(payload_len + 2) * 4` bytes are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthHeader<'a> {
    buf: &'a [u8],
}

impl<'a> AuthHeader<'a> {
    /// Length of the fixed fields (next header, length, reserved, SPI,
    /// sequence number).
    pub const MIN_LEN: usize = 12;

    /// Wraps `buf`, checking the length field covers at least the fixed
    /// fields (`payload_len >= 1`) and the whole header is present.
    ///
    /// The length field is checked as soon as its byte is present:
    /// [`Error::Truncated`] means the bytes there could begin a valid header.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        if buf.get(1).is_some_and(|&len| len < 1) {
            return Err(Error::Malformed);
        }
        need(buf, Self::MIN_LEN)?;
        let h = AuthHeader { buf };
        need(buf, h.header_len())?;
        Ok(h)
    }

    /// Type of the following header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buf[0]
    }

    /// The raw length field: header length in 4-byte units, minus two.
    #[inline]
    pub fn payload_len(&self) -> u8 {
        self.buf[1]
    }

    /// Header length in bytes: `(payload_len + 2) * 4`.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.payload_len()) + 2) * 4
    }

    /// Security parameters index.
    #[inline]
    pub fn spi(&self) -> u32 {
        be32(self.buf, 4)
    }

    /// Sequence number.
    #[inline]
    pub fn sequence(&self) -> u32 {
        be32(self.buf, 8)
    }

    /// Integrity check value.
    #[inline]
    pub fn icv(&self) -> &'a [u8] {
        &self.buf[Self::MIN_LEN..self.header_len()]
    }

    /// The bytes after this header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buf, self.header_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_header() {
        // next TCP, hdr_ext_len 1 -> 16 bytes: PadN options
        let b = [
            6, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // header
            0xaa,
        ];
        let h = Ipv6ExtHeader::new_checked(&b).unwrap();
        assert_eq!(h.next_header(), 6);
        assert_eq!(h.hdr_ext_len(), 1);
        assert_eq!(h.header_len(), 16);
        assert_eq!(h.data().len(), 14);
        assert_eq!(h.payload(), &[0xaa]);
        assert_eq!(Ipv6ExtHeader::new_checked(&b[..15]), Err(Error::Truncated));
        assert_eq!(Ipv6ExtHeader::new_checked(&b[..7]), Err(Error::Truncated));
    }

    #[test]
    fn routing_header() {
        // type 0 style: next UDP, len 2 (24 bytes), type 4 (SRH), 1 left
        let mut b = [0u8; 24];
        b[0] = 17;
        b[1] = 2;
        b[2] = 4;
        b[3] = 1;
        let h = Ipv6ExtHeader::new_checked(&b).unwrap();
        assert_eq!(h.header_len(), 24);
        assert_eq!(h.routing_type(), 4);
        assert_eq!(h.segments_left(), 1);
        assert!(h.payload().is_empty());
    }

    #[test]
    fn fragment_header() {
        // next UDP, offset 185 (1480 bytes), M=1, id 0xdeadbeef
        let b = [17, 0, 0x05, 0xc9, 0xde, 0xad, 0xbe, 0xef, 0x01];
        let f = Ipv6FragmentHeader::new_checked(&b).unwrap();
        assert_eq!(f.next_header(), 17);
        assert_eq!(f.frag_offset(), 185);
        assert!(f.more_frags());
        assert_eq!(f.ident(), 0xdead_beef);
        assert_eq!(f.header_len(), 8);
        assert_eq!(f.payload(), &[0x01]);
        assert_eq!(
            Ipv6FragmentHeader::new_checked(&b[..7]),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn auth_header() {
        // next TCP, payload_len 4 -> 24 bytes, SPI 0x100, seq 7, 12-byte ICV
        let mut b = [0u8; 25];
        b[0] = 6;
        b[1] = 4;
        b[4..8].copy_from_slice(&0x100u32.to_be_bytes());
        b[8..12].copy_from_slice(&7u32.to_be_bytes());
        let h = AuthHeader::new_checked(&b).unwrap();
        assert_eq!(h.next_header(), 6);
        assert_eq!(h.payload_len(), 4);
        assert_eq!(h.header_len(), 24);
        assert_eq!(h.spi(), 0x100);
        assert_eq!(h.sequence(), 7);
        assert_eq!(h.icv().len(), 12);
        assert_eq!(h.payload().len(), 1);
        assert_eq!(AuthHeader::new_checked(&b[..23]), Err(Error::Truncated));
        b[1] = 0;
        assert_eq!(AuthHeader::new_checked(&b), Err(Error::Malformed));
        // Seen in a header cut short.
        assert_eq!(AuthHeader::new_checked(&b[..2]), Err(Error::Malformed));
        assert_eq!(AuthHeader::new_checked(&b[..1]), Err(Error::Truncated));
    }

    #[test]
    fn ext_kinds() {
        for nh in [0u8, 43, 44, 51, 60] {
            assert!(is_extension_header(nh));
        }
        for nh in [6u8, 17, 58, 59, 50] {
            assert!(!is_extension_header(nh));
        }
    }
}
