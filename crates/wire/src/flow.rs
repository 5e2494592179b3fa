//! [`symmetric_flow_hash`]: a direction-independent hash of the flow an
//! Ethernet frame belongs to, used for flow sampling (`--sample-flows 1:N`
//! keeps a flow when `hash % N == 0`).
//!
//! # Flow key
//!
//! The key is taken from the outer IPv4 or IPv6 packet (after any VLAN tags;
//! tunnels are not entered): IP version, protocol, both addresses and, for
//! TCP, UDP and SCTP, both ports. The two (address, port) endpoints are
//! sorted so that A→B and B→A produce the same key. For fragments (IPv4 MF
//! or offset != 0, or an IPv6 fragment header) the ports are left out (set
//! to zero), so every fragment of a datagram hashes alike; the IPv6
//! protocol is then the fragment header's next header, identical in all
//! fragments. IPv6 hop-by-hop, routing, destination options and AH headers
//! are skipped to find the upper-layer protocol (AH also after IPv4). If the
//! transport header is too short to hold ports they count as zero.
//!
//! # Mixing
//!
//! The canonical key bytes (version, protocol, lower endpoint address and
//! port, higher endpoint address and port; 14 bytes for IPv4, 38 for IPv6)
//! are hashed with 32-bit FNV-1a and the result is passed through the
//! MurmurHash3 `fmix32` finalizer, which gives full avalanche so that
//! `hash % N` is well distributed even for small or power-of-two `N`.

use crate::ethernet::{ethertype, EthernetFrame};
use crate::ip::ip_proto;
use crate::ipv4::Ipv4Packet;
use crate::ipv6::Ipv6Packet;
use crate::ipv6_ext::{AuthHeader, Ipv6ExtHeader, Ipv6FragmentHeader};
use crate::vlan::VlanTag;

/// A hash of the flow a frame belongs to that is the same in both directions.
///
/// Returns `None` for frames that are not IPv4/IPv6 over Ethernet II (after
/// VLAN tags) or whose IP header is truncated or malformed. See the
/// [module documentation](self) for the key and the mixing function.
///
/// ```
/// use ringcap_wire::symmetric_flow_hash;
/// fn frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
///     let mut f = vec![0u8; 12];
///     f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
///     f.extend_from_slice(&src);
///     f.extend_from_slice(&dst);
///     f.extend_from_slice(&sport.to_be_bytes());
///     f.extend_from_slice(&dport.to_be_bytes());
///     f.extend_from_slice(&[0, 8, 0, 0]);
///     f
/// }
/// let ab = symmetric_flow_hash(&frame([10, 0, 0, 1], [10, 0, 0, 2], 5000, 53));
/// let ba = symmetric_flow_hash(&frame([10, 0, 0, 2], [10, 0, 0, 1], 53, 5000));
/// assert!(ab.is_some());
/// assert_eq!(ab, ba);
/// assert_eq!(symmetric_flow_hash(&[0u8; 60]), None);
/// ```
pub fn symmetric_flow_hash(frame: &[u8]) -> Option<u32> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let mut et = eth.ethertype();
    let mut rest = eth.payload();
    while ethertype::is_vlan(et) {
        let tag = VlanTag::new_checked(rest).ok()?;
        et = tag.ethertype();
        rest = tag.payload();
    }
    match et {
        ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(rest).ok()?;
            let (proto, fragment, l4) = upper_layer(ip.protocol(), ip.payload(), false);
            let (sp, dp) = if ip.is_fragment() || fragment {
                (0, 0)
            } else {
                ports(proto, l4)
            };
            Some(hash_endpoints(
                4,
                proto,
                ip.src_addr(),
                sp,
                ip.dst_addr(),
                dp,
            ))
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(rest).ok()?;
            let (proto, fragment, l4) = upper_layer(ip.next_header(), ip.payload(), true);
            let (sp, dp) = if fragment { (0, 0) } else { ports(proto, l4) };
            Some(hash_endpoints(
                6,
                proto,
                ip.src_addr(),
                sp,
                ip.dst_addr(),
                dp,
            ))
        }
        _ => None,
    }
}

/// Skips extension headers (IPv6 ones only if `v6`; AH for both).
/// Returns the protocol, whether a fragment header was met, and the bytes
/// after the last header skipped. Stops at a fragment header, reporting its
/// next header.
#[inline]
fn upper_layer(mut proto: u8, mut payload: &[u8], v6: bool) -> (u8, bool, &[u8]) {
    loop {
        match proto {
            ip_proto::AH => match AuthHeader::new_checked(payload) {
                Ok(h) => {
                    proto = h.next_header();
                    payload = h.payload();
                }
                Err(_) => return (proto, false, payload),
            },
            ip_proto::HOP_BY_HOP | ip_proto::IPV6_ROUTING | ip_proto::IPV6_DEST_OPTS if v6 => {
                match Ipv6ExtHeader::new_checked(payload) {
                    Ok(h) => {
                        proto = h.next_header();
                        payload = h.payload();
                    }
                    Err(_) => return (proto, false, payload),
                }
            }
            ip_proto::IPV6_FRAGMENT if v6 => {
                return match Ipv6FragmentHeader::new_checked(payload) {
                    Ok(f) => (f.next_header(), true, f.payload()),
                    // A truncated fragment header: still a fragment.
                    Err(_) => (proto, true, payload),
                };
            }
            _ => return (proto, false, payload),
        }
    }
}

/// Source and destination ports for TCP, UDP and SCTP (all start with
/// them); zero otherwise or if fewer than 4 bytes are present.
#[inline]
fn ports(proto: u8, l4: &[u8]) -> (u16, u16) {
    match (proto, l4) {
        (ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP, [a, b, c, d, ..]) => {
            (u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))
        }
        _ => (0, 0),
    }
}

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

#[inline]
fn fnv1a(mut h: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// MurmurHash3 32-bit finalizer.
#[inline]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[inline]
fn hash_endpoints<const N: usize>(
    version: u8,
    proto: u8,
    a: [u8; N],
    a_port: u16,
    b: [u8; N],
    b_port: u16,
) -> u32 {
    let ((lo, lo_port), (hi, hi_port)) = if (a, a_port) <= (b, b_port) {
        ((a, a_port), (b, b_port))
    } else {
        ((b, b_port), (a, a_port))
    };
    let mut h = fnv1a(FNV_OFFSET, &[version, proto]);
    h = fnv1a(h, &lo);
    h = fnv1a(h, &lo_port.to_be_bytes());
    h = fnv1a(h, &hi);
    h = fnv1a(h, &hi_port.to_be_bytes());
    fmix32(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_known_values() {
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0x811c_9dc5);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xe40c_292c);
        assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn fmix_known_values() {
        assert_eq!(fmix32(0), 0);
        // fmix32 is a bijection: distinct inputs stay distinct.
        assert_ne!(fmix32(1), fmix32(2));
    }

    fn v4(proto: u8, frag: u16, src: [u8; 4], dst: [u8; 4], l4: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let tl = (20 + l4.len()) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&tl.to_be_bytes());
        f.extend_from_slice(&[0, 1]);
        f.extend_from_slice(&frag.to_be_bytes());
        f.extend_from_slice(&[64, proto, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(l4);
        f
    }

    fn v6(next: u8, src: [u8; 16], dst: [u8; 16], rest: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(rest.len() as u16).to_be_bytes());
        f.extend_from_slice(&[next, 64]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(rest);
        f
    }

    fn ports_bytes(sp: u16, dp: u16) -> Vec<u8> {
        let mut b = sp.to_be_bytes().to_vec();
        b.extend_from_slice(&dp.to_be_bytes());
        b.extend_from_slice(&[0; 16]);
        b
    }

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];

    #[test]
    fn symmetric_v4() {
        for proto in [6u8, 17, 132, 1] {
            let ab = symmetric_flow_hash(&v4(proto, 0, A, B, &ports_bytes(1234, 80)));
            let ba = symmetric_flow_hash(&v4(proto, 0, B, A, &ports_bytes(80, 1234)));
            assert!(ab.is_some());
            assert_eq!(ab, ba, "proto {proto}");
        }
        // Same addresses, different ports -> different flows.
        let x = symmetric_flow_hash(&v4(6, 0, A, B, &ports_bytes(1234, 80)));
        let y = symmetric_flow_hash(&v4(6, 0, A, B, &ports_bytes(1235, 80)));
        assert_ne!(x, y);
        // Ports ignored for ICMP.
        let x = symmetric_flow_hash(&v4(1, 0, A, B, &ports_bytes(1, 2)));
        let y = symmetric_flow_hash(&v4(1, 0, A, B, &ports_bytes(3, 4)));
        assert_eq!(x, y);
        // Different protocol -> different flow.
        let t = symmetric_flow_hash(&v4(6, 0, A, B, &ports_bytes(1234, 80)));
        let u = symmetric_flow_hash(&v4(17, 0, A, B, &ports_bytes(1234, 80)));
        assert_ne!(t, u);
    }

    #[test]
    fn same_address_both_sides() {
        let ab = symmetric_flow_hash(&v4(6, 0, A, A, &ports_bytes(1, 2)));
        let ba = symmetric_flow_hash(&v4(6, 0, A, A, &ports_bytes(2, 1)));
        assert_eq!(ab, ba);
    }

    #[test]
    fn fragments_v4() {
        let first = symmetric_flow_hash(&v4(17, 0x2000, A, B, &ports_bytes(1234, 53)));
        let later = symmetric_flow_hash(&v4(17, 0x00b9, A, B, &[0xde; 24]));
        let last_rev = symmetric_flow_hash(&v4(17, 0x0172, B, A, &[0x11; 8]));
        assert!(first.is_some());
        assert_eq!(first, later);
        assert_eq!(first, last_rev);
        let whole = symmetric_flow_hash(&v4(17, 0x4000, A, B, &ports_bytes(1234, 53)));
        assert_ne!(whole, first);
    }

    fn a6(last: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[0] = 0x20;
        a[1] = 0x01;
        a[15] = last;
        a
    }

    #[test]
    fn symmetric_v6_with_extensions() {
        let mut ab = vec![6u8, 0, 1, 4, 0, 0, 0, 0]; // hop-by-hop -> TCP
        ab.extend_from_slice(&ports_bytes(40000, 443));
        let mut ba = vec![6u8, 0, 1, 4, 0, 0, 0, 0];
        ba.extend_from_slice(&ports_bytes(443, 40000));
        let x = symmetric_flow_hash(&v6(0, a6(1), a6(2), &ab));
        let y = symmetric_flow_hash(&v6(0, a6(2), a6(1), &ba));
        // Same flow without the hop-by-hop header.
        let z = symmetric_flow_hash(&v6(6, a6(1), a6(2), &ports_bytes(40000, 443)));
        assert!(x.is_some());
        assert_eq!(x, y);
        assert_eq!(x, z);
    }

    #[test]
    fn fragments_v6() {
        let mut first = vec![17u8, 0, 0, 1, 0, 0, 0, 9]; // offset 0, M
        first.extend_from_slice(&ports_bytes(5353, 5353));
        let mut later = vec![17u8, 0, 0x05, 0xa8, 0, 0, 0, 9]; // offset 181
        later.extend_from_slice(&[0xaa; 16]);
        let x = symmetric_flow_hash(&v6(44, a6(1), a6(2), &first));
        let y = symmetric_flow_hash(&v6(44, a6(2), a6(1), &later));
        assert!(x.is_some());
        assert_eq!(x, y);
    }

    #[test]
    fn vlan_and_non_ip() {
        let plain = v4(6, 0, A, B, &ports_bytes(1, 2));
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        tagged.extend_from_slice(&plain[12..]);
        assert_eq!(symmetric_flow_hash(&plain), symmetric_flow_hash(&tagged));
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0; 28]);
        assert_eq!(symmetric_flow_hash(&arp), None);
        assert_eq!(symmetric_flow_hash(&plain[..33]), None);
        assert_eq!(symmetric_flow_hash(&[]), None);
        // Truncated transport: ports count as zero, still hashed.
        assert!(symmetric_flow_hash(&plain[..36]).is_some());
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn few_collisions_and_uniform_sampling() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut hashes = Vec::with_capacity(10_000);
        let mut keys = std::collections::HashSet::new();
        while hashes.len() < 10_000 {
            let r = rng.next();
            let src = [10, (r >> 8) as u8, (r >> 16) as u8, (r >> 24) as u8];
            let dst = [192, 168, (r >> 32) as u8, (r >> 40) as u8];
            let sp = (r >> 48) as u16;
            let dp = [80u16, 443, 53, 22][(r & 3) as usize];
            let proto = if r & 4 == 0 { 6 } else { 17 };
            let mut key = (src, dst, sp, dp, proto);
            if (src, sp) > (dst, dp) {
                key = (dst, src, dp, sp, proto);
            }
            if !keys.insert(key) {
                continue;
            }
            let h = symmetric_flow_hash(&v4(proto, 0, src, dst, &ports_bytes(sp, dp))).unwrap();
            let h2 = symmetric_flow_hash(&v4(proto, 0, dst, src, &ports_bytes(dp, sp))).unwrap();
            assert_eq!(h, h2);
            hashes.push(h);
        }
        let mut sorted = hashes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        // Expected collisions for 10k values in 2^32: ~0.01.
        assert!(hashes.len() - sorted.len() <= 2, "too many collisions");
        // hash % 16 buckets should each get roughly 625.
        let mut buckets = [0u32; 16];
        for h in &hashes {
            buckets[(h % 16) as usize] += 1;
        }
        for (i, &c) in buckets.iter().enumerate() {
            assert!((500..=750).contains(&c), "bucket {i}: {c}");
        }
        // and % 10 (non power of two)
        let kept = hashes.iter().filter(|&&h| h % 10 == 0).count();
        assert!((850..=1150).contains(&kept), "kept {kept}");
    }
}
