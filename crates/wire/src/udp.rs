//! UDP header (RFC 768): source port, destination port, length, checksum.

use crate::checksum::{add, sum};
use crate::{be16, need, put16, tail, Result};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// Where each field is (byte ranges in the header).
pub mod field {
    use crate::Field;
    /// Source port.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port.
    pub const DST_PORT: Field = 2..4;
    /// Length of header and payload.
    pub const LENGTH: Field = 4..6;
    /// Checksum.
    pub const CHECKSUM: Field = 6..8;
}

/// A view of a UDP datagram whose 8-byte header is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps `buf`, checking that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        need(b, HEADER_LEN)?;
        Ok(UdpPacket { buf })
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    /// Length of header and payload in bytes.
    #[inline]
    pub fn len(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }

    /// True if the length field says there is no payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }

    /// Checksum field (0 = none, IPv4 only).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 6)
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UdpPacket<&'a T> {
    /// The captured payload, cut at the length field when that is
    /// consistent (at least 8).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let l = usize::from(self.len());
        if l >= HEADER_LEN {
            AsRef::<[u8]>::as_ref(self.buf)
                .get(HEADER_LEN..l.min(AsRef::<[u8]>::as_ref(self.buf).len()))
                .unwrap_or(&[])
        } else {
            tail(AsRef::<[u8]>::as_ref(self.buf), HEADER_LEN)
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::SRC_PORT.start, v);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::DST_PORT.start, v);
    }

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::LENGTH.start, v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::CHECKSUM.start, v);
    }

    /// Computes and sets the checksum over the whole buffer (wrap exactly
    /// the datagram) and `pseudo`, the pseudo-header's sum
    /// ([`crate::checksum::pseudo_header`]); a computed 0 is sent as 0xffff.
    pub fn fill_checksum(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let c = !add(pseudo, sum(self.buf.as_ref()));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// The bytes after the header (to the end of the buffer), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HEADER_LEN..]
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
