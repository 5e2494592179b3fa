//! MPLS label stack entry (RFC 3032), as found after EtherType 0x8847/0x8848.
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                Label                  | TC  |S|      TTL      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! MPLS carries no payload type: after the bottom-of-stack entry the first
//! nibble of the payload (4 or 6) is conventionally used to guess IPv4/IPv6.

use crate::{be32, need, tail, Result};

/// Length of one label stack entry.
pub const HEADER_LEN: usize = 4;

/// A view of one MPLS label stack entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MplsLabel<'a> {
    buf: &'a [u8],
}

impl<'a> MplsLabel<'a> {
    /// Wraps `buf`, checking that it holds a whole 4-byte entry.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        need(buf, HEADER_LEN)?;
        Ok(MplsLabel { buf })
    }

    /// The 20-bit label value.
    #[inline]
    pub fn label(&self) -> u32 {
        be32(self.buf, 0) >> 12
    }

    /// Traffic class (3 bits).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        ((be32(self.buf, 0) >> 9) & 0x7) as u8
    }

    /// Bottom-of-stack flag: this is the last label.
    #[inline]
    pub fn bottom_of_stack(&self) -> bool {
        self.buf[2] & 0x01 != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buf[3]
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The bytes after this entry.
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
        // label 0x12345, TC 5, S=1, TTL 64
        let b = [0x12, 0x34, 0x5b, 0x40, 0x45];
        let l = MplsLabel::new_checked(&b).unwrap();
        assert_eq!(l.label(), 0x12345);
        assert_eq!(l.traffic_class(), 5);
        assert!(l.bottom_of_stack());
        assert_eq!(l.ttl(), 64);
        assert_eq!(l.header_len(), 4);
        assert_eq!(l.payload(), &[0x45]);
        let l = MplsLabel::new_checked(&[0x12, 0x34, 0x5a, 0x40]).unwrap();
        assert!(!l.bottom_of_stack());
    }

    #[test]
    fn truncated() {
        assert_eq!(MplsLabel::new_checked(&[0, 0, 1]), Err(Error::Truncated));
    }
}
