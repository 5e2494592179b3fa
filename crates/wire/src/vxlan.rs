//! VXLAN header (RFC 7348), carried in UDP to port 4789 and followed by an
//! inner Ethernet frame.
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |R|R|R|R|I|R|R|R|            Reserved                           |
//! |                VXLAN Network Identifier (VNI) |   Reserved    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use crate::{be32, need, tail, Result};

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = 8;

/// The I flag (first byte): the VNI is valid. RFC 7348 requires it.
pub const FLAG_I: u8 = 0x08;

/// IANA-assigned UDP destination port for VXLAN.
pub const UDP_PORT: u16 = 4789;

/// A view of a VXLAN header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanPacket<'a> {
    buf: &'a [u8],
}

impl<'a> VxlanPacket<'a> {
    /// Wraps `buf`, checking that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        need(buf, HEADER_LEN)?;
        Ok(VxlanPacket { buf })
    }

    /// The flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buf[0]
    }

    /// I flag: the VNI is valid (must be set for RFC 7348 VXLAN).
    #[inline]
    pub fn vni_valid(&self) -> bool {
        self.flags() & FLAG_I != 0
    }

    /// VXLAN network identifier (24 bits).
    #[inline]
    pub fn vni(&self) -> u32 {
        be32(self.buf, 4) >> 8
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The inner Ethernet frame.
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
        let b = [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0x00, 0xff];
        let v = VxlanPacket::new_checked(&b).unwrap();
        assert_eq!(v.flags(), 0x08);
        assert!(v.vni_valid());
        assert_eq!(v.vni(), 0x123456);
        assert_eq!(v.header_len(), 8);
        assert_eq!(v.payload(), &[0xff]);
        assert!(!VxlanPacket::new_checked(&[0; 8]).unwrap().vni_valid());
        assert_eq!(VxlanPacket::new_checked(&b[..7]), Err(Error::Truncated));
    }
}
