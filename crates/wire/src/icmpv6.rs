//! ICMP for IPv6 (RFC 4443).
//!
//! The fixed part is type, code and checksum (4 bytes), but every defined
//! message carries at least four more bytes (echo id/sequence, MTU,
//! pointer, reserved), so this crate treats the first 8 bytes as the header,
//! as tcpdump does. Error messages (types 1-4) then quote as much of the
//! offending packet as fits.

use crate::checksum::{add, sum};
use crate::{array, be16, need, put16, tail, Result};

/// Length treated as the ICMPv6 header.
pub const HEADER_LEN: usize = 8;

/// ICMPv6 message types this crate names.
pub mod msg_type {
    /// Destination unreachable (error).
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big (error).
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded (error).
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem (error).
    pub const PARAMETER_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
}

/// True for the ICMPv6 error types that quote the offending packet (1-4).
#[inline]
pub const fn is_error(msg_type: u8) -> bool {
    matches!(msg_type, 1..=4)
}

/// Where each field is (byte ranges in the header).
pub mod field {
    use crate::Field;
    /// Message type.
    pub const TYPE: usize = 0;
    /// Code.
    pub const CODE: usize = 1;
    /// Checksum.
    pub const CHECKSUM: Field = 2..4;
    /// The type-specific rest of the header.
    pub const REST: Field = 4..8;
    /// Echo identifier (echo request and reply).
    pub const ECHO_IDENT: Field = 4..6;
    /// Echo sequence number (echo request and reply).
    pub const ECHO_SEQNO: Field = 6..8;
}

/// A view of an ICMPv6 message whose first 8 bytes are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv6Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wraps `buf`, checking that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        need(b, HEADER_LEN)?;
        Ok(Icmpv6Packet { buf })
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buf.as_ref()[0]
    }

    /// Message code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buf.as_ref()[1]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    /// The four type-specific bytes after the checksum.
    #[inline]
    pub fn rest_of_header(&self) -> [u8; 4] {
        array(self.buf.as_ref(), 4)
    }

    /// Identifier (echo request/reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.buf.as_ref(), 4)
    }

    /// Sequence number (echo request/reply).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buf.as_ref(), 6)
    }

    /// True if this is an error message quoting a packet.
    #[inline]
    pub fn is_error(&self) -> bool {
        is_error(self.msg_type())
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Icmpv6Packet<&'a T> {
    /// The bytes after the first 8.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(AsRef::<[u8]>::as_ref(self.buf), HEADER_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, v: u8) {
        self.buf.as_mut()[field::TYPE] = v;
    }

    /// Sets the code.
    #[inline]
    pub fn set_code(&mut self, v: u8) {
        self.buf.as_mut()[field::CODE] = v;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::CHECKSUM.start, v);
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::ECHO_IDENT.start, v);
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::ECHO_SEQNO.start, v);
    }

    /// Computes and sets the checksum over the whole buffer (wrap exactly
    /// the message) and `pseudo`, the pseudo-header's sum
    /// ([`crate::checksum::pseudo_header`]).
    pub fn fill_checksum(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let c = !add(pseudo, sum(self.buf.as_ref()));
        self.set_checksum(c);
    }

    /// The bytes after the 8-byte header, writable.
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
    fn echo() {
        let b = [128, 0, 0x12, 0x34, 0x00, 0x07, 0x00, 0x09, 0xaa];
        let p = Icmpv6Packet::new_checked(&b).unwrap();
        assert_eq!(p.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!(p.code(), 0);
        assert_eq!(p.checksum(), 0x1234);
        assert_eq!(p.rest_of_header(), [0, 7, 0, 9]);
        assert_eq!(p.echo_ident(), 7);
        assert_eq!(p.echo_seq_no(), 9);
        assert!(!p.is_error());
        assert_eq!(p.header_len(), 8);
        assert_eq!(p.payload(), &[0xaa]);
        assert_eq!(Icmpv6Packet::new_checked(&b[..4]), Err(Error::Truncated));
    }

    #[test]
    fn errors() {
        for t in 1u8..=4 {
            assert!(is_error(t));
        }
        for t in [0u8, 5, 128, 135] {
            assert!(!is_error(t));
        }
    }
}
