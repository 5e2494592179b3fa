//! The fields a policy or a command line can mask (zero) or anonymize, by
//! name. The vocabulary is small and closed: an unknown name is an error
//! that lists the known ones.

use std::fmt;

/// One maskable field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Field {
    bit: u32,
    name: &'static str,
}

impl Field {
    /// Its name on the command line and in policies.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The field called `name`, if it is in the vocabulary.
    pub fn from_name(name: &str) -> Option<Field> {
        ALL.iter().copied().find(|f| f.name == name)
    }

    /// "a, b, c": the vocabulary, for error messages.
    pub fn vocabulary() -> String {
        ALL.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

macro_rules! fields {
    ($($id:ident = $bit:expr, $name:expr, $what:expr;)*) => {
        $(
            #[doc = $what]
            pub const $id: Field = Field { name: $name, bit: 1 << $bit };
        )*
        /// Every field, in documentation order.
        pub const ALL: &[Field] = &[$($id),*];
    };
}

fields! {
    ETH_ADDR = 0, "eth.addr", "Ethernet source and destination addresses (every Ethernet header, inner ones too), ARP hardware addresses and ICMPv6 neighbor discovery link-layer address options";
    IP_ADDR = 1, "ip.addr", "IPv4 and IPv6 source and destination addresses (outer, tunnelled and quoted by ICMP errors), ARP protocol addresses, ICMP redirect gateways and router advertisement addresses, ICMPv6 neighbor discovery targets, redirect destinations and prefix/route/DNS server options, MLD addresses, IPv4 route-recording options, IPv6 routing headers and home address options";
    IP_TOS = 2, "ip.tos", "IPv4 DSCP/ECN byte and IPv6 traffic class";
    IP_ID = 3, "ip.id", "IPv4 identification";
    IP_TTL = 4, "ip.ttl", "IPv4 time to live and IPv6 hop limit";
    IPV6_FLOW = 5, "ipv6.flow", "IPv6 flow label";
    TCP_PORT = 6, "tcp.port", "TCP source and destination ports";
    UDP_PORT = 7, "udp.port", "UDP source and destination ports";
    TCP_SEQ = 8, "tcp.seq", "TCP sequence and acknowledgment numbers";
    TCP_WINDOW = 9, "tcp.window", "TCP window";
    TCP_OPTIONS = 10, "tcp.options", "TCP options (all bytes after the fixed 20)";
    ICMP_ECHO = 11, "icmp.echo", "ICMP and ICMPv6 echo identifier and sequence number";
    PAYLOAD = 12, "payload", "everything after the last header (the bytes -s headers drops), tunnels and ICMP quotes walked as for -s headers";
}

/// A set of fields.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldSet(u32);

impl FieldSet {
    /// No field.
    pub const EMPTY: FieldSet = FieldSet(0);

    /// The set holding `fields`.
    pub fn of(fields: &[Field]) -> FieldSet {
        FieldSet(fields.iter().fold(0, |m, f| m | f.bit))
    }

    /// Parses a comma-separated list of field names (spaces around names
    /// are ignored; an empty list is the empty set).
    pub fn parse(list: &str) -> Result<FieldSet, String> {
        let mut set = FieldSet::EMPTY;
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match Field::from_name(name) {
                Some(f) => set.0 |= f.bit,
                None => {
                    return Err(format!(
                        "unknown field {name:?}; known fields: {}",
                        Field::vocabulary()
                    ))
                }
            }
        }
        Ok(set)
    }

    /// Whether `f` is in the set.
    #[inline(always)]
    pub fn has(self, f: Field) -> bool {
        self.0 & f.bit != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The fields of this set that are not in `other`.
    pub fn minus(self, other: FieldSet) -> FieldSet {
        FieldSet(self.0 & !other.0)
    }

    /// The fields of the set, in documentation order.
    pub fn fields(self) -> impl Iterator<Item = Field> {
        ALL.iter().copied().filter(move |f| self.has(*f))
    }
}

impl fmt::Display for FieldSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.fields().map(|x| x.name).collect();
        f.write_str(&names.join(","))
    }
}

impl fmt::Debug for FieldSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FieldSet({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        let s = FieldSet::parse(" ip.addr, tcp.port ,payload").unwrap();
        assert!(s.has(IP_ADDR) && s.has(TCP_PORT) && s.has(PAYLOAD) && !s.has(IP_TTL));
        assert_eq!(s.to_string(), "ip.addr,tcp.port,payload");
        assert!(FieldSet::parse("").unwrap().is_empty());
    }

    #[test]
    fn unknown_name_lists_known_ones() {
        let e = FieldSet::parse("ip.addr,ip.src").unwrap_err();
        assert!(e.contains("\"ip.src\""), "{e}");
        for f in ALL {
            assert!(e.contains(f.name), "{e}");
        }
    }

    #[test]
    fn bits_are_distinct() {
        let all = FieldSet::of(ALL);
        assert_eq!(all.0.count_ones() as usize, ALL.len());
    }
}
