//! UDP header (RFC 768): source port, destination port, length, checksum.

use crate::{be16, need, tail, Result};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram whose 8-byte header is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<'a> {
    buf: &'a [u8],
}

impl<'a> UdpPacket<'a> {
    /// Wraps `buf`, checking that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        need(buf, HEADER_LEN)?;
        Ok(UdpPacket { buf })
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buf, 0)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buf, 2)
    }

    /// Length of header and payload in bytes.
    #[inline]
    pub fn len(&self) -> u16 {
        be16(self.buf, 4)
    }

    /// True if the length field says there is no payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }

    /// Checksum field (0 = none, IPv4 only).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf, 6)
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The captured payload, cut at the length field when that is
    /// consistent (at least 8).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let l = usize::from(self.len());
        if l >= HEADER_LEN {
            self.buf
                .get(HEADER_LEN..l.min(self.buf.len()))
                .unwrap_or(&[])
        } else {
            tail(self.buf, HEADER_LEN)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn parse() {
        // DNS query 53000 -> 53, length 12, 4 payload bytes + 2 padding
        let b = [
            0xcf, 0x08, 0x00, 0x35, 0x00, 0x0c, 0xab, 0xcd, 1, 2, 3, 4, 0, 0,
        ];
        let u = UdpPacket::new_checked(&b).unwrap();
        assert_eq!(u.src_port(), 53000);
        assert_eq!(u.dst_port(), 53);
        assert_eq!(u.len(), 12);
        assert!(!u.is_empty());
        assert_eq!(u.checksum(), 0xabcd);
        assert_eq!(u.header_len(), 8);
        assert_eq!(u.payload(), &[1, 2, 3, 4]);
        assert_eq!(UdpPacket::new_checked(&b[..7]), Err(Error::Truncated));
    }

    #[test]
    fn bad_length() {
        let b = [0, 1, 0, 2, 0, 3, 0, 0, 9, 9];
        let u = UdpPacket::new_checked(&b).unwrap();
        assert!(u.is_empty());
        assert_eq!(u.payload(), &[9, 9]);
    }
}
