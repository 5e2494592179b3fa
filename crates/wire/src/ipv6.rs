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

use crate::{array, be16, be32, need, put16, put32, Error, Result};

/// Length of the IPv6 fixed header.
pub const HEADER_LEN: usize = 40;

/// Where each field is (byte ranges, or the byte, in the header).
pub mod field {
    use crate::Field;
    /// Version, traffic class and flow label.
    pub const VER_TC_FLOW: Field = 0..4;
    /// Payload length.
    pub const LENGTH: Field = 4..6;
    /// Next header.
    pub const NXT_HDR: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC_ADDR: Field = 8..24;
    /// Destination address.
    pub const DST_ADDR: Field = 24..40;
}

/// A view of an IPv6 packet whose fixed header is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buf`, checking the version is 6 and the 40-byte header is
    /// present.
    ///
    /// The version is checked as soon as its byte is present:
    /// [`Error::Truncated`] means the bytes there could begin a valid header.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.first().is_some_and(|&b| b >> 4 != 6) {
            return Err(Error::Malformed);
        }
        need(b, HEADER_LEN)?;
        Ok(Ipv6Packet { buf })
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// IP version (always 6 for a checked view).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[0] >> 4
    }

    /// Traffic class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buf.as_ref(), 0) >> 4) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.buf.as_ref(), 0) & 0x000f_ffff
    }

    /// Payload length: bytes after the fixed header, extension headers
    /// included. Zero for jumbograms.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }

    /// Type of the first extension header or upper-layer protocol.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buf.as_ref()[6]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buf.as_ref()[7]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 16] {
        array(self.buf.as_ref(), 8)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 16] {
        array(self.buf.as_ref(), 24)
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// The underlying bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        AsRef::<[u8]>::as_ref(self.buf)
    }

    /// The captured bytes after the fixed header, cut at `payload_len`
    /// unless that is zero.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let pl = usize::from(self.payload_len());
        let end = if pl == 0 {
            AsRef::<[u8]>::as_ref(self.buf).len()
        } else {
            (HEADER_LEN + pl).min(AsRef::<[u8]>::as_ref(self.buf).len())
        };
        AsRef::<[u8]>::as_ref(self.buf)
            .get(HEADER_LEN..end)
            .unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, v: u8) {
        let w = be32(self.buf.as_ref(), 0) & !0x0ff0_0000 | u32::from(v) << 20;
        put32(self.buf.as_mut(), 0, w);
    }

    /// Sets the flow label (its low 20 bits).
    #[inline]
    pub fn set_flow_label(&mut self, v: u32) {
        let w = be32(self.buf.as_ref(), 0) & !0x000f_ffff | v & 0x000f_ffff;
        put32(self.buf.as_mut(), 0, w);
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::LENGTH.start, v);
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, v: u8) {
        self.buf.as_mut()[field::NXT_HDR] = v;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buf.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, v: [u8; 16]) {
        self.buf.as_mut()[field::SRC_ADDR].copy_from_slice(&v);
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, v: [u8; 16]) {
        self.buf.as_mut()[field::DST_ADDR].copy_from_slice(&v);
    }

    /// The bytes after the fixed header (to the end of the buffer),
    /// writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HEADER_LEN..]
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
