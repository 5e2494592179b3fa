//! The vocabularies of packet fields a grant may name: fields hidden from a
//! client (`hide`) and fields a client may set in frames it injects
//! (`settable`). Names follow Wireshark's display-filter style ("ip.ttl").
//!
//! A fixed list rather than free text, so that a misspelled field is an error
//! when the policy loads instead of a mask that silently masks nothing.

use std::fmt;

macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every field, in documentation order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The name used in policy files.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The field called `name`, if it is in the vocabulary.
            pub fn from_name(name: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|f| f.name() == name)
            }

            /// "a, b, c": the vocabulary, for error messages.
            pub fn vocabulary() -> String {
                Self::ALL.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// A field the daemon masks before a client sees the packet (`hide`): the
/// vocabulary of the privacy transforms that do the masking, so a policy
/// can name exactly what `ringcap capture --mask` can.
pub use ringcap_privacy::fields::Field as HideField;

vocabulary! {
    /// A field a client may choose in a frame it injects (`inject.settable`);
    /// every other byte is fixed by the daemon's template.
    SettableField {
        /// IPv4 TTL.
        IpTtl = "ip.ttl",
        /// IPv4 identification.
        IpId = "ip.id",
        /// IPv4 type of service / DSCP+ECN.
        IpTos = "ip.tos",
        /// IPv6 hop limit.
        Ipv6Hlim = "ipv6.hlim",
        /// IPv6 flow label.
        Ipv6Flow = "ipv6.flow",
        /// UDP source port.
        UdpSport = "udp.sport",
        /// UDP destination port.
        UdpDport = "udp.dport",
        /// TCP source port.
        TcpSport = "tcp.sport",
        /// TCP destination port.
        TcpDport = "tcp.dport",
        /// TCP sequence number.
        TcpSeq = "tcp.seq",
        /// TCP flags.
        TcpFlags = "tcp.flags",
        /// ICMP/ICMPv6 echo identifier.
        IcmpId = "icmp.id",
        /// ICMP/ICMPv6 echo sequence number.
        IcmpSeq = "icmp.seq",
        /// The bytes after the last protocol header.
        Payload = "payload",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for f in ringcap_privacy::fields::ALL {
            assert_eq!(HideField::from_name(f.name()), Some(*f));
        }
        for f in SettableField::ALL {
            assert_eq!(SettableField::from_name(f.name()), Some(*f));
        }
        assert_eq!(ringcap_privacy::fields::ALL.len(), 13);
        assert_eq!(SettableField::ALL.len(), 14);
        assert_eq!(
            HideField::from_name("ip.ttl"),
            Some(ringcap_privacy::fields::IP_TTL)
        );
        assert_eq!(HideField::from_name("IP.TTL"), None);
        assert_eq!(SettableField::from_name("ip.addr"), None);
        assert!(HideField::vocabulary().starts_with("eth.addr, ip.addr"));
    }
}
