//! IP protocol numbers (IPv4 "protocol", IPv6 "next header") and the
//! Internet checksum shared by IPv4, TCP, UDP and ICMP.

/// IP protocol numbers this crate knows about.
pub mod ip_proto {
    /// IPv6 hop-by-hop options extension header.
    pub const HOP_BY_HOP: u8 = 0;
    /// Internet Control Message Protocol.
    pub const ICMP: u8 = 1;
    /// Internet Group Management Protocol.
    pub const IGMP: u8 = 2;
    /// IPv4 encapsulated in IP (IPIP).
    pub const IPV4: u8 = 4;
    /// Transmission Control Protocol.
    pub const TCP: u8 = 6;
    /// User Datagram Protocol.
    pub const UDP: u8 = 17;
    /// IPv6 encapsulated in IP (6in4, 6to4).
    pub const IPV6: u8 = 41;
    /// IPv6 routing extension header.
    pub const IPV6_ROUTING: u8 = 43;
    /// IPv6 fragment extension header.
    pub const IPV6_FRAGMENT: u8 = 44;
    /// Generic Routing Encapsulation.
    pub const GRE: u8 = 47;
    /// IPsec Encapsulating Security Payload.
    pub const ESP: u8 = 50;
    /// IPsec Authentication Header.
    pub const AH: u8 = 51;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const IPV6_NO_NEXT: u8 = 59;
    /// IPv6 destination options extension header.
    pub const IPV6_DEST_OPTS: u8 = 60;
    /// Stream Control Transmission Protocol.
    pub const SCTP: u8 = 132;
}

/// The 16-bit ones' complement sum of `data` (RFC 1071), not complemented.
///
/// A header whose checksum field is included verifies when the result is
/// `0xffff`.
pub fn ones_complement_sum(data: &[u8]) -> u16 {
    crate::checksum::sum(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_rfc1071_example() {
        // Example from RFC 1071 section 3: 0001 f203 f4f5 f6f7 -> ddf2
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(ones_complement_sum(&d), 0xddf2);
        assert_eq!(ones_complement_sum(&[0xff]), 0xff00);
        assert_eq!(ones_complement_sum(&[]), 0);
    }
}
