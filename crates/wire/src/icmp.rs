//! ICMP for IPv4 (RFC 792).
//!
//! Every message starts with type, code and checksum followed by four
//! type-specific bytes: an 8-byte header. Error messages (destination
//! unreachable, source quench, redirect, time exceeded, parameter problem)
//! then quote the IP header and at least 8 bytes of the offending datagram.

use crate::checksum::sum;
use crate::icmp_view::icmp_view;

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

icmp_view! {
    /// A view of an ICMPv4 message whose 8-byte header is present.
    Icmpv4Packet
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Computes and sets the checksum over the whole buffer (wrap exactly
    /// the message).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = !sum(self.buf.as_ref());
        self.set_checksum(c);
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
