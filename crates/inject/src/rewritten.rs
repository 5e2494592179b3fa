//! Which fields of a frame the guard changed: a client whose frame left
//! with another TTL, port or source than it wrote is told so in the frame's
//! report (`rewritten`), by field name (the names of `inject.settable`
//! where the field can be made settable), instead of finding out from a
//! capture. Found by comparing the frame as the client sent it with the
//! frame as checked, field by field, so it names exactly what differs
//! whichever step of the guard changed it. Checksums are left out: the
//! guard recomputes them, and one that changed only follows another change
//! (or was wrong).

use ringcap_wire::ethernet::{ethertype, HEADER_LEN as ETH_LEN};

/// A set of rewritten fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rewritten(u32);

/// The names, by bit: in the order of the fields in a frame.
const NAMES: [&str; 25] = [
    "eth.src",
    "ip.tos",
    "ip.id",
    "ip.flags",
    "ip.ttl",
    "ip.src",
    "ipv6.flow",
    "ipv6.hlim",
    "ipv6.src",
    "arp.src",
    "udp.sport",
    "udp.dport",
    "tcp.sport",
    "tcp.dport",
    "tcp.seq",
    "tcp.ack",
    "tcp.reserved",
    "tcp.flags",
    "tcp.window",
    "tcp.urgent",
    "tcp.options",
    "icmp.type",
    "icmp.id",
    "icmp.seq",
    "payload",
];

/// A field: its name's index in [`NAMES`], its bytes, and the bits of its
/// first and last bytes that belong to it.
struct Field(usize, std::ops::Range<usize>, u8, u8);

const ALL: u8 = 0xff;

impl Rewritten {
    /// True if the guard changed nothing the client chose.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The fields' names, in the frame's order of layers.
    pub fn names(self) -> Vec<String> {
        (0..NAMES.len())
            .filter(|i| self.0 & (1 << i) != 0)
            .map(|i| NAMES[i].to_string())
            .collect()
    }

    /// The fields in which `after` (a frame the guard passed) differs from
    /// `before` (the same frame as the client sent it).
    pub fn between(before: &[u8], after: &[u8]) -> Rewritten {
        let mut r = Rewritten::default();
        if before.len() != after.len() || after.len() < ETH_LEN {
            return r;
        }
        let mut fields = vec![Field(0, 6..12, ALL, ALL)];
        let kind = u16::from_be_bytes([after[12], after[13]]);
        let l3 = ETH_LEN;
        let (l4, proto, end) = match kind {
            ethertype::IPV4 if after.len() >= l3 + 20 => {
                fields.extend([
                    Field(1, l3 + 1..l3 + 2, ALL, ALL),
                    Field(2, l3 + 4..l3 + 6, ALL, ALL),
                    Field(3, l3 + 6..l3 + 8, ALL, ALL),
                    Field(4, l3 + 8..l3 + 9, ALL, ALL),
                    Field(5, l3 + 12..l3 + 16, ALL, ALL),
                ]);
                let total = usize::from(u16::from_be_bytes([after[l3 + 2], after[l3 + 3]]));
                (l3 + 20, after[l3 + 9], (l3 + total).min(after.len()))
            }
            ethertype::IPV6 if after.len() >= l3 + 40 => {
                fields.extend([
                    Field(1, l3..l3 + 2, 0x0f, 0xf0),
                    Field(6, l3 + 1..l3 + 4, 0x0f, ALL),
                    Field(7, l3 + 7..l3 + 8, ALL, ALL),
                    Field(8, l3 + 8..l3 + 24, ALL, ALL),
                ]);
                let plen = usize::from(u16::from_be_bytes([after[l3 + 4], after[l3 + 5]]));
                (l3 + 40, after[l3 + 6], (l3 + 40 + plen).min(after.len()))
            }
            ethertype::ARP => {
                fields.push(Field(9, l3 + 8..l3 + 18, ALL, ALL));
                (after.len(), 0, after.len())
            }
            _ => (after.len(), 0, after.len()),
        };
        let payload = match proto {
            17 => {
                fields.extend([
                    Field(10, l4..l4 + 2, ALL, ALL),
                    Field(11, l4 + 2..l4 + 4, ALL, ALL),
                ]);
                l4 + 8
            }
            6 if after.len() >= l4 + 20 => {
                let hl = usize::from(after[l4 + 12] >> 4) * 4;
                fields.extend([
                    Field(12, l4..l4 + 2, ALL, ALL),
                    Field(13, l4 + 2..l4 + 4, ALL, ALL),
                    Field(14, l4 + 4..l4 + 8, ALL, ALL),
                    Field(15, l4 + 8..l4 + 12, ALL, ALL),
                    Field(17, l4 + 12..l4 + 14, 0x01, ALL),
                    Field(16, l4 + 12..l4 + 13, 0x0e, 0x0e),
                    Field(18, l4 + 14..l4 + 16, ALL, ALL),
                    Field(19, l4 + 18..l4 + 20, ALL, ALL),
                    Field(20, l4 + 20..l4 + hl.max(20), ALL, ALL),
                ]);
                l4 + hl.max(20)
            }
            1 | 58 => {
                fields.extend([
                    Field(21, l4..l4 + 1, ALL, ALL),
                    Field(22, l4 + 4..l4 + 6, ALL, ALL),
                    Field(23, l4 + 6..l4 + 8, ALL, ALL),
                ]);
                l4 + 8
            }
            _ => end,
        };
        if payload < end {
            fields.push(Field(24, payload..end, ALL, ALL));
        }
        for Field(name, bytes, first, last) in fields {
            let (Some(b), Some(a)) = (before.get(bytes.clone()), after.get(bytes)) else {
                continue;
            };
            let n = a.len();
            let differs = (0..n).any(|i| {
                let mask = match i {
                    0 if n == 1 => first & last,
                    0 => first,
                    i if i == n - 1 => last,
                    _ => ALL,
                };
                (a[i] ^ b[i]) & mask != 0
            });
            if differs {
                r.0 |= 1 << name;
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4() -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 4];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(20u16 + 12).to_be_bytes());
        f[14 + 9] = 17;
        f
    }

    #[test]
    fn names_exactly_the_fields_that_differ_not_checksums() {
        let before = udp4();
        let mut after = before.clone();
        assert!(Rewritten::between(&before, &after).is_empty());
        after[14 + 8] = 64; // TTL
        after[14 + 10] = 0xab; // header checksum: not named
        after[34 + 2] = 9; // destination port
        after[34 + 6] = 0xcd; // UDP checksum: not named
        after[6] = 2; // Ethernet source
        after[44] = 1; // payload
        assert_eq!(
            Rewritten::between(&before, &after).names(),
            ["eth.src", "ip.ttl", "udp.dport", "payload"]
        );
        // Frames of different lengths are not compared.
        assert!(Rewritten::between(&before, &after[1..]).is_empty());
    }

    #[test]
    fn ipv6_traffic_class_and_flow_label_share_bytes() {
        let mut before = vec![0u8; 14 + 40 + 8];
        before[12..14].copy_from_slice(&[0x86, 0xdd]);
        before[14] = 0x60;
        before[14 + 5] = 8;
        before[14 + 6] = 17;
        let mut tc = before.clone();
        tc[14] = 0x6a; // traffic class, high nibble
        assert_eq!(Rewritten::between(&before, &tc).names(), ["ip.tos"]);
        let mut fl = before.clone();
        fl[15] = 0x01; // flow label, top bits
        assert_eq!(Rewritten::between(&before, &fl).names(), ["ipv6.flow"]);
        let mut both = before.clone();
        both[15] = 0x11;
        assert_eq!(
            Rewritten::between(&before, &both).names(),
            ["ip.tos", "ipv6.flow"]
        );
    }
}
