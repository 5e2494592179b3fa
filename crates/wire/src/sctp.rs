//! SCTP common header (RFC 9260): ports, verification tag and CRC32c
//! checksum. The chunks that follow are treated as payload.

use crate::{be16, be32, need, tail, Result};

/// Length of the SCTP common header.
pub const HEADER_LEN: usize = 12;

/// A view of an SCTP packet whose 12-byte common header is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpPacket<'a> {
    buf: &'a [u8],
}

impl<'a> SctpPacket<'a> {
    /// Wraps `buf`, checking that the common header is present.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        need(buf, HEADER_LEN)?;
        Ok(SctpPacket { buf })
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

    /// Verification tag.
    #[inline]
    pub fn verification_tag(&self) -> u32 {
        be32(self.buf, 4)
    }

    /// CRC32c checksum field.
    #[inline]
    pub fn checksum(&self) -> u32 {
        be32(self.buf, 8)
    }

    /// Type of the first chunk, if one is captured.
    #[inline]
    pub fn first_chunk_type(&self) -> Option<u8> {
        self.buf.get(HEADER_LEN).copied()
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The chunks (captured bytes after the common header).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buf, HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn parse() {
        let b = [
            0x0b, 0x59, 0x0b, 0x59, // 2905 -> 2905 (M3UA)
            0x00, 0x00, 0x00, 0x00, // vtag 0 (INIT)
            0xde, 0xad, 0xbe, 0xef, // crc
            0x01, 0x00, 0x00, 0x14, // INIT chunk header
        ];
        let s = SctpPacket::new_checked(&b).unwrap();
        assert_eq!(s.src_port(), 2905);
        assert_eq!(s.dst_port(), 2905);
        assert_eq!(s.verification_tag(), 0);
        assert_eq!(s.checksum(), 0xdead_beef);
        assert_eq!(s.first_chunk_type(), Some(1));
        assert_eq!(s.header_len(), 12);
        assert_eq!(s.payload().len(), 4);
        let s = SctpPacket::new_checked(&b[..12]).unwrap();
        assert_eq!(s.first_chunk_type(), None);
        assert_eq!(SctpPacket::new_checked(&b[..11]), Err(Error::Truncated));
    }
}
