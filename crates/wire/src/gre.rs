//! Generic Routing Encapsulation header (RFC 2784 with the RFC 2890 key and
//! sequence number extensions; version 1 is the PPTP variant of RFC 2637).
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |C|R|K|S|s|Recur|A| Flags | Ver |         Protocol Type         |
//! |      Checksum (optional)      |       Reserved1 (optional)    |
//! |                         Key (optional)                        |
//! |                 Sequence Number (optional)                    |
//! |          Acknowledgment Number (optional, version 1)          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The protocol type is an EtherType; 0x6558 means a whole Ethernet frame
//! follows. The RFC 1701 routing field (R bit) is not supported: such
//! headers are reported as [`Error::Unsupported`].

use crate::{be16, be32, need, tail, Error, Result};

/// Length of the mandatory part of the header.
pub const MIN_HEADER_LEN: usize = 4;

const FLAG_C: u16 = 0x8000;
const FLAG_R: u16 = 0x4000;
const FLAG_K: u16 = 0x2000;
const FLAG_S: u16 = 0x1000;
const FLAG_A: u16 = 0x0080;

/// A view of a GRE header all of whose optional words are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrePacket<'a> {
    buf: &'a [u8],
}

impl<'a> GrePacket<'a> {
    /// Wraps `buf`, checking the version is 0 or 1, no routing is present,
    /// and every optional word announced by the flags is present.
    ///
    /// The routing bit (first byte) and the version (second byte) are
    /// checked as soon as their byte is present: [`Error::Truncated`] means
    /// the bytes there could begin a supported header.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        if buf
            .first()
            .is_some_and(|&b| (u16::from(b) << 8) & FLAG_R != 0)
            || buf.get(1).is_some_and(|&b| b & 0x7 > 1)
        {
            return Err(Error::Unsupported);
        }
        need(buf, MIN_HEADER_LEN)?;
        let g = GrePacket { buf };
        need(buf, g.header_len())?;
        Ok(g)
    }

    #[inline]
    fn flag_word(&self) -> u16 {
        be16(self.buf, 0)
    }

    /// C flag: the checksum and reserved1 fields are present.
    #[inline]
    pub fn checksum_present(&self) -> bool {
        self.flag_word() & FLAG_C != 0
    }

    /// R flag (RFC 1701 routing); views are never built when it is set.
    #[inline]
    pub fn routing_present(&self) -> bool {
        self.flag_word() & FLAG_R != 0
    }

    /// K flag: the key field is present.
    #[inline]
    pub fn key_present(&self) -> bool {
        self.flag_word() & FLAG_K != 0
    }

    /// S flag: the sequence number field is present.
    #[inline]
    pub fn seq_present(&self) -> bool {
        self.flag_word() & FLAG_S != 0
    }

    /// A flag (version 1 only): the acknowledgment number is present.
    #[inline]
    pub fn ack_present(&self) -> bool {
        self.version() == 1 && self.flag_word() & FLAG_A != 0
    }

    /// Version: 0 for GRE, 1 for PPTP's enhanced GRE.
    #[inline]
    pub fn version(&self) -> u8 {
        (self.flag_word() & 0x7) as u8
    }

    /// Protocol type of the payload (an EtherType).
    #[inline]
    pub fn protocol_type(&self) -> u16 {
        be16(self.buf, 2)
    }

    /// Header length in bytes: 4, plus 4 for each of checksum, key,
    /// sequence number and (version 1) acknowledgment present.
    #[inline]
    pub fn header_len(&self) -> usize {
        let f = self.flag_word();
        MIN_HEADER_LEN
            + 4 * (usize::from(f & FLAG_C != 0)
                + usize::from(f & FLAG_K != 0)
                + usize::from(f & FLAG_S != 0)
                + usize::from(self.ack_present()))
    }

    /// Checksum, if present.
    #[inline]
    pub fn checksum(&self) -> Option<u16> {
        self.checksum_present().then(|| be16(self.buf, 4))
    }

    #[inline]
    fn key_offset(&self) -> usize {
        MIN_HEADER_LEN + 4 * usize::from(self.checksum_present())
    }

    #[inline]
    fn seq_offset(&self) -> usize {
        self.key_offset() + 4 * usize::from(self.key_present())
    }

    /// Key, if present (for version 1: payload length and call id).
    #[inline]
    pub fn key(&self) -> Option<u32> {
        self.key_present()
            .then(|| be32(self.buf, self.key_offset()))
    }

    /// Sequence number, if present.
    #[inline]
    pub fn sequence(&self) -> Option<u32> {
        self.seq_present()
            .then(|| be32(self.buf, self.seq_offset()))
    }

    /// Acknowledgment number, if present (version 1 only).
    #[inline]
    pub fn ack(&self) -> Option<u32> {
        self.ack_present().then(|| {
            be32(
                self.buf,
                self.seq_offset() + 4 * usize::from(self.seq_present()),
            )
        })
    }

    /// The captured bytes after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(self.buf, self.header_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal() {
        let b = [0x00, 0x00, 0x08, 0x00, 0x45];
        let g = GrePacket::new_checked(&b).unwrap();
        assert_eq!(g.version(), 0);
        assert_eq!(g.protocol_type(), 0x0800);
        assert_eq!(g.header_len(), 4);
        assert_eq!(g.checksum(), None);
        assert_eq!(g.key(), None);
        assert_eq!(g.sequence(), None);
        assert_eq!(g.ack(), None);
        assert_eq!(g.payload(), &[0x45]);
    }

    #[test]
    fn all_options() {
        let b = [
            0xb0, 0x00, 0x65, 0x58, // C K S, transparent Ethernet
            0xab, 0xcd, 0x00, 0x00, // checksum, reserved1
            0x00, 0x00, 0x00, 0x2a, // key 42
            0x00, 0x00, 0x00, 0x07, // seq 7
        ];
        let g = GrePacket::new_checked(&b).unwrap();
        assert!(g.checksum_present() && g.key_present() && g.seq_present());
        assert!(!g.routing_present() && !g.ack_present());
        assert_eq!(g.header_len(), 16);
        assert_eq!(g.protocol_type(), 0x6558);
        assert_eq!(g.checksum(), Some(0xabcd));
        assert_eq!(g.key(), Some(42));
        assert_eq!(g.sequence(), Some(7));
        assert!(g.payload().is_empty());
        assert_eq!(GrePacket::new_checked(&b[..15]), Err(Error::Truncated));
    }

    #[test]
    fn key_and_seq() {
        let b = [0x30, 0x00, 0x86, 0xdd, 0, 0, 0, 1, 0, 0, 0, 2];
        let g = GrePacket::new_checked(&b).unwrap();
        assert_eq!(g.header_len(), 12);
        assert_eq!(g.key(), Some(1));
        assert_eq!(g.sequence(), Some(2));
    }

    #[test]
    fn pptp() {
        // version 1, K S A, PPP
        let b = [
            0x30, 0x81, 0x88, 0x0b, 0x00, 0x10, 0x00, 0x05, // key: len 16, call 5
            0x00, 0x00, 0x00, 0x03, // seq
            0x00, 0x00, 0x00, 0x02, // ack
        ];
        let g = GrePacket::new_checked(&b).unwrap();
        assert_eq!(g.version(), 1);
        assert!(g.ack_present());
        assert_eq!(g.header_len(), 16);
        assert_eq!(g.key(), Some(0x0010_0005));
        assert_eq!(g.sequence(), Some(3));
        assert_eq!(g.ack(), Some(2));
    }

    #[test]
    fn unsupported() {
        assert_eq!(
            GrePacket::new_checked(&[0x40, 0, 8, 0, 0, 0, 0, 0]),
            Err(Error::Unsupported)
        );
        assert_eq!(
            GrePacket::new_checked(&[0x00, 2, 8, 0]),
            Err(Error::Unsupported)
        );
        assert_eq!(GrePacket::new_checked(&[0, 0, 8]), Err(Error::Truncated));
        // Seen in a header cut short.
        assert_eq!(GrePacket::new_checked(&[0x40]), Err(Error::Unsupported));
        assert_eq!(GrePacket::new_checked(&[0, 2]), Err(Error::Unsupported));
        assert_eq!(GrePacket::new_checked(&[0x30, 1]), Err(Error::Truncated));
    }
}
