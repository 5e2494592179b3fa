//! ICMP for IPv6 (RFC 4443).
//!
//! The fixed part is type, code and checksum (4 bytes), but every defined
//! message carries at least four more bytes (echo id/sequence, MTU,
//! pointer, reserved), so this crate treats the first 8 bytes as the header,
//! as tcpdump does. Error messages (types 1-4) then quote as much of the
//! offending packet as fits.

use crate::checksum::{add, sum};
use crate::icmp_view::icmp_view;

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
    /// Multicast listener query (MLDv1 and v2).
    pub const MLD_QUERY: u8 = 130;
    /// MLDv1 report.
    pub const MLD_REPORT: u8 = 131;
    /// MLDv1 done.
    pub const MLD_DONE: u8 = 132;
    /// Router solicitation.
    pub const ROUTER_SOLICIT: u8 = 133;
    /// Router advertisement.
    pub const ROUTER_ADVERT: u8 = 134;
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;
    /// MLDv2 report.
    pub const MLDV2_REPORT: u8 = 143;
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
    /// Where an error's quoted packet starts.
    pub const QUOTE: usize = 8;
    /// Neighbor solicitation and advertisement, redirect: the target.
    pub const ND_TARGET: Field = 8..24;
    /// Redirect: the destination.
    pub const REDIRECT_DST: Field = 24..40;
    /// Where the ND options start: router solicitation.
    pub const RS_OPTIONS: usize = 8;
    /// Where the ND options start: router advertisement.
    pub const RA_OPTIONS: usize = 16;
    /// Where the ND options start: neighbor solicitation and advertisement.
    pub const NS_NA_OPTIONS: usize = 24;
    /// Where the ND options start: redirect.
    pub const REDIRECT_OPTIONS: usize = 40;
    /// MLD (v1, and a v2 query): the multicast address.
    pub const MLD_ADDR: Field = 8..24;
    /// MLDv2 query: the number of sources.
    pub const MLD_QUERY_NUM_SRCS: Field = 26..28;
    /// MLDv2 query: where the sources start.
    pub const MLD_QUERY_SRCS: usize = 28;
    /// MLDv2 report: the number of records.
    pub const MLD_REPORT_NUM_RECORDS: Field = 6..8;
    /// MLDv2 report: where the records start.
    pub const MLD_REPORT_RECORDS: usize = 8;
}

/// Neighbor discovery options (RFC 4861 section 4.6): type, length in
/// 8-byte units, data. Offsets are from the option's start.
pub mod nd_option {
    use crate::Field;
    /// Source link-layer address.
    pub const SOURCE_LL: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL: u8 = 2;
    /// Prefix information.
    pub const PREFIX_INFO: u8 = 3;
    /// Redirected header.
    pub const REDIRECTED: u8 = 4;
    /// MTU.
    pub const MTU: u8 = 5;
    /// Nonce (RFC 3971).
    pub const NONCE: u8 = 14;
    /// Route information (RFC 4191).
    pub const ROUTE_INFO: u8 = 24;
    /// Recursive DNS server (RFC 8106).
    pub const RDNSS: u8 = 25;
    /// A link-layer address option's address (Ethernet: 6 bytes).
    pub const LL_ADDR: Field = 2..8;
    /// A prefix information option's prefix.
    pub const PREFIX: Field = 16..32;
    /// A route information option's prefix (up to 16 bytes).
    pub const ROUTE_PREFIX: usize = 8;
    /// Where a recursive DNS server option's addresses start.
    pub const RDNSS_ADDRS: usize = 8;
}

/// An MLDv2 report's multicast address record (RFC 3810 section 5.2):
/// offsets from the record's start.
pub mod mld_record {
    use crate::Field;
    /// Auxiliary data length in 32-bit words.
    pub const AUX_LEN: usize = 1;
    /// Number of sources.
    pub const NUM_SRCS: Field = 2..4;
    /// The multicast address.
    pub const ADDR: Field = 4..20;
    /// Where the sources start.
    pub const SRCS: usize = 20;
}

icmp_view! {
    /// A view of an ICMPv6 message whose first 8 bytes are present.
    Icmpv6Packet
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Computes and sets the checksum over the whole buffer (wrap exactly
    /// the message) and `pseudo`, the pseudo-header's sum
    /// ([`crate::checksum::pseudo_header`]).
    pub fn fill_checksum(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let c = !add(pseudo, sum(self.buf.as_ref()));
        self.set_checksum(c);
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
