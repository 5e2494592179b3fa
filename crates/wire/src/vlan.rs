//! IEEE 802.1Q / 802.1ad VLAN tag, as found after the EtherType 0x8100,
//! 0x88a8 or 0x9100.
//!
//! The view covers the 4 bytes that follow the tagging EtherType: the tag
//! control information (PCP, DEI, VLAN id) and the EtherType of what follows.

use crate::{be16, need, tail, Result};

/// Length of a VLAN tag as it follows the tagging EtherType.
pub const HEADER_LEN: usize = 4;

/// A view of one VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag<'a> {
    buf: &'a [u8],
}

impl<'a> VlanTag<'a> {
    /// Wraps `buf`, checking that it holds the whole 4-byte tag.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        need(buf, HEADER_LEN)?;
        Ok(VlanTag { buf })
    }

    /// The 16-bit tag control information.
    #[inline]
    pub fn tci(&self) -> u16 {
        be16(self.buf, 0)
    }

    /// Priority code point (3 bits).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop eligible indicator.
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (12 bits).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// EtherType of the encapsulated payload (possibly another tag).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buf, 2)
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The bytes after the tag.
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
        // PCP 5, DEI 1, VID 0x123, inner EtherType IPv6
        let b = [0xb1, 0x23, 0x86, 0xdd, 0x60];
        let t = VlanTag::new_checked(&b).unwrap();
        assert_eq!(t.tci(), 0xb123);
        assert_eq!(t.pcp(), 5);
        assert!(t.dei());
        assert_eq!(t.vid(), 0x123);
        assert_eq!(t.ethertype(), 0x86dd);
        assert_eq!(t.header_len(), 4);
        assert_eq!(t.payload(), &[0x60]);
    }

    #[test]
    fn truncated() {
        assert_eq!(VlanTag::new_checked(&[0, 1, 8]), Err(Error::Truncated));
    }
}
