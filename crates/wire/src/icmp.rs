//! ICMP for IPv4 (RFC 792).
//!
//! Every message starts with type, code and checksum followed by four
//! type-specific bytes: an 8-byte header. Error messages (destination
//! unreachable, source quench, redirect, time exceeded, parameter problem)
//! then quote the IP header and at least 8 bytes of the offending datagram.

use crate::checksum::sum;
use crate::{array, be16, need, put16, tail, Result};

/// Length of the ICMP header (type, code, checksum, rest of header).
pub const HEADER_LEN: usize = 8;

/// ICMPv4 message types this crate names.
pub mod msg_type {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable (error).
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Source quench (error, deprecated).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect (error).
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded (error).
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem (error).
    pub const PARAMETER_PROBLEM: u8 = 12;
    /// Router advertisement (RFC 1256).
    pub const ROUTER_ADVERT: u8 = 9;
}

/// True for the ICMPv4 error types that quote the offending datagram
/// (3, 4, 5, 11, 12).
#[inline]
pub const fn is_error(msg_type: u8) -> bool {
    matches!(msg_type, 3 | 4 | 5 | 11 | 12)
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
    /// A redirect's gateway address (type 5).
    pub const GATEWAY: Field = 4..8;
    /// A router advertisement's number of addresses (type 9, RFC 1256).
    pub const RA_NUM_ADDRS: usize = 4;
    /// A router advertisement's entry size in 32-bit words.
    pub const RA_ENTRY_SIZE: usize = 5;
    /// Where a router advertisement's entries (address, preference) start.
    pub const RA_ENTRIES: usize = 8;
    /// Where an error's quoted datagram starts.
    pub const QUOTE: usize = 8;
}

/// A view of an ICMPv4 message whose 8-byte header is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv4Packet<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Wraps `buf`, checking that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        need(b, HEADER_LEN)?;
        Ok(Icmpv4Packet { buf })
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

    /// True if this is an error message quoting a datagram.
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

impl<'a, T: AsRef<[u8]> + ?Sized> Icmpv4Packet<&'a T> {
    /// The bytes after the header (for errors: the quoted datagram).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(AsRef::<[u8]>::as_ref(self.buf), HEADER_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
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
    /// the message).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = !sum(self.buf.as_ref());
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
        let b = [8, 0, 0xf7, 0xfd, 0x00, 0x01, 0x00, 0x02, b'h', b'i'];
        let p = Icmpv4Packet::new_checked(&b).unwrap();
        assert_eq!(p.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!(p.code(), 0);
        assert_eq!(p.checksum(), 0xf7fd);
        assert_eq!(p.rest_of_header(), [0, 1, 0, 2]);
        assert_eq!(p.echo_ident(), 1);
        assert_eq!(p.echo_seq_no(), 2);
        assert!(!p.is_error());
        assert_eq!(p.header_len(), 8);
        assert_eq!(p.payload(), b"hi");
        assert_eq!(Icmpv4Packet::new_checked(&b[..7]), Err(Error::Truncated));
    }

    #[test]
    fn errors() {
        for t in [3u8, 4, 5, 11, 12] {
            assert!(is_error(t));
        }
        for t in [0u8, 8, 13, 14] {
            assert!(!is_error(t));
        }
        let b = [11, 0, 0, 0, 0, 0, 0, 0];
        assert!(Icmpv4Packet::new_checked(&b).unwrap().is_error());
    }
}
