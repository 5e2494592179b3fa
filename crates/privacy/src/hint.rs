//! The look-ahead hint ([`crate::PrivacyTransform::prepare_ethernet`]):
//! which address-map entries a frame will need, loaded before its turn
//! (issue 30: on traces with many addresses the map's cache misses were
//! most of the rewrite's time; see [`crate::prefetch`]).

use crate::rewrite::{AddrOp, Rewriter};
use ringcap_wire::ethernet::{self, ethertype};
use ringcap_wire::ipv4;

impl Rewriter {
    /// A hint: `frame` will be rewritten soon. Starts loading the address
    /// map buckets of its IPv4 addresses when they are anonymized (plain
    /// IPv4, up to two VLAN tags: the common case; the rewrite itself
    /// decides everything, this only reads).
    #[inline]
    pub fn prepare_ethernet(&mut self, frame: &[u8]) {
        if self.ip_op != AddrOp::Anonymize {
            return;
        }
        let Some(an) = self.anon.as_ref() else {
            return;
        };
        let mut off = ethernet::HEADER_LEN - 2;
        for _ in 0..3 {
            let Some(t) = frame.get(off..off + 2) else {
                return;
            };
            match u16::from_be_bytes([t[0], t[1]]) {
                t if ethertype::is_vlan(t) => off += 4,
                ethertype::IPV4 => {
                    let ip = off + 2;
                    use ipv4::field as f;
                    if let (Some(s), Some(d)) = (
                        frame.get(ip + f::SRC_ADDR.start..ip + f::SRC_ADDR.end),
                        frame.get(ip + f::DST_ADDR.start..ip + f::DST_ADDR.end),
                    ) {
                        an.prepare_ipv4_pair([s[0], s[1], s[2], s[3]], [d[0], d[1], d[2], d[3]]);
                    }
                    return;
                }
                _ => return,
            }
        }
    }
}
