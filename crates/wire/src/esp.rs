//! IPsec Encapsulating Security Payload (RFC 4303) header.
//!
//! Only the SPI and sequence number are in the clear; everything after them
//! is (possibly encrypted) payload, so the header is 8 bytes.

use crate::{be32, need, tail, Result};

/// Length of the cleartext ESP header (SPI + sequence number).
pub const HEADER_LEN: usize = 8;

/// A view of an ESP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspPacket<'a> {
    buf: &'a [u8],
}

impl<'a> EspPacket<'a> {
    /// Wraps `buf`, checking that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        need(buf, HEADER_LEN)?;
        Ok(EspPacket { buf })
    }

    /// Security parameters index.
    #[inline]
    pub fn spi(&self) -> u32 {
        be32(self.buf, 0)
    }

    /// Sequence number.
    #[inline]
    pub fn sequence(&self) -> u32 {
        be32(self.buf, 4)
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The opaque bytes after the header.
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
        let b = [0, 0, 0x10, 0x01, 0, 0, 0, 0x2a, 0xff];
        let e = EspPacket::new_checked(&b).unwrap();
        assert_eq!(e.spi(), 0x1001);
        assert_eq!(e.sequence(), 42);
        assert_eq!(e.header_len(), 8);
        assert_eq!(e.payload(), &[0xff]);
        assert_eq!(EspPacket::new_checked(&b[..7]), Err(Error::Truncated));
    }
}
