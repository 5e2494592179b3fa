//! The straight-line rewrite of the commonest frame when only IPv4
//! addresses are anonymized: Ethernet II (no tag), IPv4 without options,
//! not a fragment, whole datagram captured, UDP (not to VXLAN's port) or
//! TCP. It writes exactly the bytes the general rewrite
//! ([`crate::rewrite`]) writes for such a frame, which the property test
//! below checks against it on random frames; any other frame goes to the
//! general rewrite.
//!
//! Why: on issue 30's trace (64-byte UDP frames, 200,000 addresses) the
//! general rewrite's header list, checksum table and its bookkeeping were
//! about half of the anonymization's CPU time once the address map's
//! misses were prefetched away.

use crate::anon::Anon;
use crate::sums::{pseudo_sum, Pseudo};
use ringcap_wire::checksum::{fold, sum};
use ringcap_wire::ip::ip_proto;
use ringcap_wire::vxlan;

/// Ethernet header length; IPv4 header offset.
const IP: usize = 14;
/// The transport header's offset (IPv4 header without options).
const L4: usize = IP + 20;

/// Rewrites `frame` if it is of the kind this module handles; false (and
/// `frame` untouched) otherwise. Call only when IPv4 addresses are
/// anonymized and nothing else is hidden.
#[inline]
pub(crate) fn rewrite(an: &mut Anon, frame: &mut [u8]) -> bool {
    let Some(h) = frame.get(..L4 + 8) else {
        return false;
    };
    let word = |p: usize| usize::from(u16::from_be_bytes([h[p], h[p + 1]]));
    let tl = word(IP + 2);
    // Ethernet II carrying IPv4, version 4 with a 20-byte header, neither
    // fragment flag nor offset, the whole datagram captured.
    if word(12) != 0x0800 || h[IP] != 0x45 || word(IP + 6) & 0x3fff != 0 || IP + tl > frame.len() {
        return false;
    }
    let proto = h[IP + 9];
    let (field, end, udp) = match proto {
        // The UDP length inside the datagram; a zero checksum stays 0.
        ip_proto::UDP => {
            let ul = word(L4 + 4);
            if word(L4 + 2) == usize::from(vxlan::UDP_PORT) || ul < 8 || L4 + ul > IP + tl {
                return false;
            }
            (L4 + 6, L4 + ul, true)
        }
        // The checksum field inside the datagram.
        ip_proto::TCP if tl >= 40 => (L4 + 16, IP + tl, false),
        _ => return false,
    };
    let skip_l4 = udp && word(L4 + 6) == 0;
    let s = [h[IP + 12], h[IP + 13], h[IP + 14], h[IP + 15]];
    let d = [h[IP + 16], h[IP + 17], h[IP + 18], h[IP + 19]];
    let (x, y) = an.ipv4_pair(s, d);
    frame[IP + 12..IP + 16].copy_from_slice(&x);
    frame[IP + 16..IP + 20].copy_from_slice(&y);
    // As `Sums::finish` does: the transport checksum, then the header's.
    if !skip_l4 {
        frame[field..field + 2].fill(0);
        let pseudo = Pseudo::V4 {
            src: (IP + 12) as u32,
            dst: (IP + 16) as u32,
            proto,
        };
        if let Some(p) = pseudo_sum(frame, pseudo, end - L4) {
            let mut v = !fold(u64::from(sum(&frame[L4..end])) + u64::from(p));
            if udp && v == 0 {
                v = 0xffff;
            }
            frame[field..field + 2].copy_from_slice(&v.to_be_bytes());
        }
    }
    frame[IP + 10..IP + 12].fill(0);
    let v = !fold(u64::from(sum(&frame[IP..L4])));
    frame[IP + 10..IP + 12].copy_from_slice(&v.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use crate::fields::FieldSet;
    use crate::{Key, Privacy};
    use proptest::prelude::*;

    /// A frame near the fast path's edges: fields chosen among the values
    /// that decide, the rest random.
    fn frame() -> impl Strategy<Value = Vec<u8>> {
        (
            proptest::collection::vec(any::<u8>(), 34..140),
            prop_oneof![6 => Just(0x0800u16), 1 => Just(0x8100), 1 => Just(0x86dd), 1 => any::<u16>()],
            prop_oneof![6 => Just(0x45u8), 1 => Just(0x46), 1 => Just(0x55), 1 => any::<u8>()],
            prop_oneof![
                3 => Just(0u16),
                2 => Just(0x4000),
                1 => Just(0x2000),
                1 => Just(1),
                1 => any::<u16>()
            ],
            prop_oneof![4 => Just(17u8), 3 => Just(6), 1 => Just(1), 1 => any::<u8>()],
            (-30i32..30, any::<bool>()),
            (
                prop_oneof![2 => Just(4789u16), 2 => Just(53), 1 => any::<u16>()],
                -20i32..20,
                any::<bool>(),
            ),
            prop_oneof![Just(usize::MAX), 0usize..200],
        )
            .prop_map(|(mut f, et, vihl, frag, proto, (tl_d, tl_exact), (dport, ul_d, zero), cut)| {
                let n = f.len();
                f[12..14].copy_from_slice(&et.to_be_bytes());
                f[14] = vihl;
                let tl = if tl_exact { n as i32 - 14 } else { n as i32 - 14 + tl_d };
                f[16..18].copy_from_slice(&(tl.clamp(0, 0xffff) as u16).to_be_bytes());
                f[20..22].copy_from_slice(&frag.to_be_bytes());
                f[23] = proto;
                if n >= 42 {
                    f[36..38].copy_from_slice(&dport.to_be_bytes());
                    let ul = (tl - 20 + ul_d).clamp(0, 0xffff) as u16;
                    f[38..40].copy_from_slice(&ul.to_be_bytes());
                    if zero {
                        f[40..42].fill(0);
                    }
                }
                if dport == 4789 && n >= 98 {
                    // VXLAN (I flag) around Ethernet and IPv4: the general
                    // rewrite anonymizes the inner addresses too.
                    f[42] = 0x08;
                    f[62..64].copy_from_slice(&[8, 0]);
                    f[64] = 0x45;
                }
                if cut < n {
                    f.truncate(cut.max(1));
                }
                f
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn same_bytes_as_the_general_rewrite(f in frame()) {
            let p = Privacy::new(
                FieldSet::parse("").unwrap(),
                Some((Key::from_bytes([3; 32]), FieldSet::parse("ip.addr").unwrap())),
            )
            .unwrap();
            let mut fast = p.transform();
            let mut general = crate::rewrite::Rewriter::new(
                FieldSet::parse("").unwrap(),
                Some(crate::anon::Anon::new(
                    crate::cryptopan::CryptoPan::new(&[3; 32]),
                    FieldSet::parse("ip.addr").unwrap(),
                )),
            );
            let (mut a, mut b) = (f.clone(), f.clone());
            fast.rewrite_ethernet(&mut a);
            general.rewrite_ethernet_general(&mut b);
            prop_assert_eq!(a, b);
        }
    }
}
