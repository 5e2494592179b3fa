//! IPv4 header (RFC 791), including options.
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP    |ECN|          Total Length         |
//! |         Identification        |Flags|     Fragment Offset     |
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! |                       Source Address                          |
//! |                    Destination Address                        |
//! |                    Options (IHL > 5)                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use crate::ip::ones_complement_sum;
use crate::{array, be16, need, Error, Result};

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// A view of an IPv4 packet whose whole header (with options) is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<'a> {
    buf: &'a [u8],
}

impl<'a> Ipv4Packet<'a> {
    /// Wraps `buf`, checking the version is 4, the IHL is at least 5 and the
    /// whole header (IHL * 4 bytes) is present.
    ///
    /// The version and IHL are checked as soon as their byte is present:
    /// [`Error::Truncated`] means the bytes there could begin a valid header.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        if let Some(&b) = buf.first() {
            if b >> 4 != 4 || b & 0x0f < 5 {
                return Err(Error::Malformed);
            }
        }
        need(buf, MIN_HEADER_LEN)?;
        let p = Ipv4Packet { buf };
        need(buf, p.header_len())?;
        Ok(p)
    }

    /// The underlying bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// IP version (always 4 for a checked view).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf[0] >> 4
    }

    /// Internet header length in 32-bit words.
    #[inline]
    pub fn ihl(&self) -> u8 {
        self.buf[0] & 0x0f
    }

    /// Header length in bytes, options included (IHL * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// Differentiated services code point.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buf[1] >> 2
    }

    /// Explicit congestion notification bits.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buf[1] & 0x03
    }

    /// Total length of the datagram (header and payload) in bytes.
    /// Zero on some TSO captures.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buf, 2)
    }

    /// Identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buf, 4)
    }

    /// Don't fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.buf[6] & 0x40 != 0
    }

    /// More fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.buf[6] & 0x20 != 0
    }

    /// Fragment offset in units of 8 bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buf, 6) & 0x1fff
    }

    /// True if this packet is a fragment (first or later) of a datagram.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buf, 6) & 0x3fff != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buf[8]
    }

    /// Protocol of the payload (see [`crate::ip::ip_proto`]).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buf[9]
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf, 10)
    }

    /// True if the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        ones_complement_sum(&self.buf[..self.header_len()]) == 0xffff
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 4] {
        array(self.buf, 12)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 4] {
        array(self.buf, 16)
    }

    /// The options bytes (empty when IHL is 5).
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.buf[MIN_HEADER_LEN..self.header_len()]
    }

    /// The captured payload: the bytes after the header, cut at
    /// `total_len` when that field is consistent with the header (so
    /// Ethernet padding is excluded).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let hl = self.header_len();
        let tl = usize::from(self.total_len());
        let end = if tl >= hl {
            tl.min(self.buf.len())
        } else {
            self.buf.len()
        };
        self.buf.get(hl..end).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 192.168.0.1 -> 192.168.0.199, TCP, DF, with one NOP option + 3 EOL
    // (IHL 6), total length 28, checksum valid.
    const PKT: [u8; 30] = [
        0x46, 0x00, 0x00, 0x1c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7, 0x01, 0x00, 0x00, 0x00, // options
        0xaa, 0xbb, 0xcc, 0xdd, // payload
        0xee, 0xff, // padding beyond total length
    ];

    fn with_checksum() -> [u8; 30] {
        let mut p = PKT;
        let c = !ones_complement_sum(&p[..24]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    #[test]
    fn parse() {
        let b = with_checksum();
        let p = Ipv4Packet::new_checked(&b).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.ihl(), 6);
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.dscp(), 0);
        assert_eq!(p.ecn(), 0);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0x1c46);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 6);
        assert!(p.verify_checksum());
        assert_ne!(p.checksum(), 0);
        assert_eq!(p.src_addr(), [192, 168, 0, 1]);
        assert_eq!(p.dst_addr(), [192, 168, 0, 199]);
        assert_eq!(p.options(), &[1, 0, 0, 0]);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(p.as_bytes().len(), 30);
    }

    #[test]
    fn fragment_fields() {
        let mut b = PKT;
        b[6] = 0x20; // MF, offset 0x0010
        b[7] = 0x10;
        let p = Ipv4Packet::new_checked(&b).unwrap();
        assert!(p.more_frags());
        assert_eq!(p.frag_offset(), 0x10);
        assert!(p.is_fragment());
        assert!(!p.verify_checksum());
    }

    #[test]
    fn errors() {
        assert_eq!(Ipv4Packet::new_checked(&PKT[..19]), Err(Error::Truncated));
        assert_eq!(Ipv4Packet::new_checked(&PKT[..23]), Err(Error::Truncated));
        let mut b = PKT;
        b[0] = 0x43; // IHL 3
        assert_eq!(Ipv4Packet::new_checked(&b), Err(Error::Malformed));
        // Seen in a header cut short.
        assert_eq!(Ipv4Packet::new_checked(&b[..1]), Err(Error::Malformed));
        assert_eq!(Ipv4Packet::new_checked(&[0x65]), Err(Error::Malformed));
        assert_eq!(Ipv4Packet::new_checked(&[0x45]), Err(Error::Truncated));
        assert_eq!(Ipv4Packet::new_checked(&[]), Err(Error::Truncated));
        b[0] = 0x65; // version 6
        assert_eq!(Ipv4Packet::new_checked(&b), Err(Error::Malformed));
    }

    #[test]
    fn payload_total_len_inconsistent() {
        let mut b = PKT;
        b[2] = 0;
        b[3] = 0; // total length 0 (TSO): payload is everything captured
        let p = Ipv4Packet::new_checked(&b).unwrap();
        assert_eq!(p.payload().len(), 6);
        b[3] = 200; // longer than captured
        let p = Ipv4Packet::new_checked(&b).unwrap();
        assert_eq!(p.payload().len(), 6);
    }
}
