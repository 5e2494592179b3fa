//! IPv6 fixed header (RFC 8200). Extension headers are in
//! [`crate::ipv6_ext`].
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version| Traffic Class |           Flow Label                  |
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! |                  Source Address (16 bytes)                    |
//! |               Destination Address (16 bytes)                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use crate::{array, be16, be32, need, Error, Result};

/// Length of the IPv6 fixed header.
pub const HEADER_LEN: usize = 40;

/// A view of an IPv6 packet whose fixed header is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<'a> {
    buf: &'a [u8],
}

impl<'a> Ipv6Packet<'a> {
    /// Wraps `buf`, checking the version is 6 and the 40-byte header is
    /// present.
    ///
    /// The version is checked as soon as its byte is present:
    /// [`Error::Truncated`] means the bytes there could begin a valid header.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        if buf.first().is_some_and(|&b| b >> 4 != 6) {
            return Err(Error::Malformed);
        }
        need(buf, HEADER_LEN)?;
        Ok(Ipv6Packet { buf })
    }

    /// The underlying bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// IP version (always 6 for a checked view).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf[0] >> 4
    }

    /// Traffic class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buf, 0) >> 4) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.buf, 0) & 0x000f_ffff
    }

    /// Payload length: bytes after the fixed header, extension headers
    /// included. Zero for jumbograms.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buf, 4)
    }

    /// Type of the first extension header or upper-layer protocol.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buf[6]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buf[7]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 16] {
        array(self.buf, 8)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 16] {
        array(self.buf, 24)
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The captured bytes after the fixed header, cut at `payload_len`
    /// unless that is zero.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let pl = usize::from(self.payload_len());
        let end = if pl == 0 {
            self.buf.len()
        } else {
            (HEADER_LEN + pl).min(self.buf.len())
        };
        self.buf.get(HEADER_LEN..end).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PKT: [u8; 46] = [
        0x6a, 0xb1, 0x23, 0x45, // version 6, TC 0xab, flow 0x12345
        0x00, 0x04, 0x11, 0x40, // payload 4, UDP, hop limit 64
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src 2001:db8::1
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // dst 2001:db8::2
        1, 2, 3, 4, 5, 6,
    ];

    #[test]
    fn parse() {
        let p = Ipv6Packet::new_checked(&PKT).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xab);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(p.next_header(), 17);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr()[15], 1);
        assert_eq!(p.dst_addr()[..4], [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(p.dst_addr()[15], 2);
        assert_eq!(p.header_len(), 40);
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert_eq!(p.as_bytes().len(), 46);
    }

    #[test]
    fn jumbo_payload() {
        let mut b = PKT;
        b[4] = 0;
        b[5] = 0;
        let p = Ipv6Packet::new_checked(&b).unwrap();
        assert_eq!(p.payload().len(), 6);
    }

    #[test]
    fn errors() {
        assert_eq!(Ipv6Packet::new_checked(&PKT[..39]), Err(Error::Truncated));
        let mut b = PKT;
        b[0] = 0x45;
        assert_eq!(Ipv6Packet::new_checked(&b), Err(Error::Malformed));
        // Seen in a header cut short.
        assert_eq!(Ipv6Packet::new_checked(&b[..3]), Err(Error::Malformed));
        assert_eq!(Ipv6Packet::new_checked(&PKT[..3]), Err(Error::Truncated));
    }
}
