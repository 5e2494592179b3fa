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
use crate::{array, be16, need, put16, Error, Result};

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// Where each field is (byte ranges, or the byte, in the header).
pub mod field {
    use crate::Field;
    /// Version and IHL.
    pub const VER_IHL: usize = 0;
    /// DSCP and ECN (the former type of service).
    pub const DSCP_ECN: usize = 1;
    /// Total length.
    pub const LENGTH: Field = 2..4;
    /// Identification.
    pub const IDENT: Field = 4..6;
    /// Flags (reserved, DF, MF) and fragment offset.
    pub const FLG_OFF: Field = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Field = 10..12;
    /// Source address.
    pub const SRC_ADDR: Field = 12..16;
    /// Destination address.
    pub const DST_ADDR: Field = 16..20;
}

/// A view of an IPv4 packet whose whole header (with options) is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buf`, checking the version is 4, the IHL is at least 5 and the
    /// whole header (IHL * 4 bytes) is present.
    ///
    /// The version and IHL are checked as soon as their byte is present:
    /// [`Error::Truncated`] means the bytes there could begin a valid header.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if let Some(&b) = b.first() {
            if b >> 4 != 4 || b & 0x0f < 5 {
                return Err(Error::Malformed);
            }
        }
        need(b, MIN_HEADER_LEN)?;
        let p = Ipv4Packet { buf };
        need(p.buf.as_ref(), p.header_len())?;
        Ok(p)
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// IP version (always 4 for a checked view).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[0] >> 4
    }

    /// Internet header length in 32-bit words.
    #[inline]
    pub fn ihl(&self) -> u8 {
        self.buf.as_ref()[0] & 0x0f
    }

    /// Header length in bytes, options included (IHL * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// Differentiated services code point.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buf.as_ref()[1] >> 2
    }

    /// Explicit congestion notification bits.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buf.as_ref()[1] & 0x03
    }

    /// Total length of the datagram (header and payload) in bytes.
    /// Zero on some TSO captures.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    /// Identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }

    /// Don't fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.buf.as_ref()[6] & 0x40 != 0
    }

    /// More fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.buf.as_ref()[6] & 0x20 != 0
    }

    /// Fragment offset in units of 8 bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buf.as_ref(), 6) & 0x1fff
    }

    /// True if this packet is a fragment (first or later) of a datagram.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buf.as_ref(), 6) & 0x3fff != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buf.as_ref()[8]
    }

    /// Protocol of the payload (see [`crate::ip::ip_proto`]).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buf.as_ref()[9]
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 10)
    }

    /// True if the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        ones_complement_sum(&self.buf.as_ref()[..self.header_len()]) == 0xffff
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 4] {
        array(self.buf.as_ref(), 12)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 4] {
        array(self.buf.as_ref(), 16)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// The underlying bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        AsRef::<[u8]>::as_ref(self.buf)
    }

    /// The options bytes (empty when IHL is 5).
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &AsRef::<[u8]>::as_ref(self.buf)[MIN_HEADER_LEN..self.header_len()]
    }

    /// The captured payload: the bytes after the header, cut at
    /// `total_len` when that field is consistent with the header (so
    /// Ethernet padding is excluded).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let hl = self.header_len();
        let tl = usize::from(self.total_len());
        let end = if tl >= hl {
            tl.min(AsRef::<[u8]>::as_ref(self.buf).len())
        } else {
            AsRef::<[u8]>::as_ref(self.buf).len()
        };
        AsRef::<[u8]>::as_ref(self.buf).get(hl..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the DSCP/ECN byte (type of service).
    #[inline]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buf.as_mut()[field::DSCP_ECN] = v;
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::LENGTH.start, v);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::IDENT.start, v);
    }

    /// Sets the flags (top three bits) and fragment offset.
    #[inline]
    pub fn set_flags_and_offset(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::FLG_OFF.start, v);
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buf.as_mut()[field::TTL] = v;
    }

    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, v: u8) {
        self.buf.as_mut()[field::PROTOCOL] = v;
    }

    /// Sets the header checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::CHECKSUM.start, v);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, v: [u8; 4]) {
        self.buf.as_mut()[field::SRC_ADDR].copy_from_slice(&v);
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, v: [u8; 4]) {
        self.buf.as_mut()[field::DST_ADDR].copy_from_slice(&v);
    }

    /// Computes and sets the header checksum (options included).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = !crate::checksum::sum(&self.buf.as_ref()[..hl]);
        self.set_checksum(c);
    }

    /// The options bytes, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buf.as_mut()[MIN_HEADER_LEN..hl]
    }

    /// The bytes after the header (to the end of the buffer), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buf.as_mut()[hl..]
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
