//! Crypto-PAn (Xu, Fan, Ammar, Moon, 2002): prefix-preserving anonymization
//! of addresses under a 32-byte key.
//!
//! Bit `i` of the image is bit `i` of the original XORed with the top bit of
//! AES-128 (first 16 key bytes) applied to a block holding the original's
//! first `i` bits followed by the bits of the pad (the AES image of the last
//! 16 key bytes) from `i` on. So two addresses that share their first `n`
//! bits have images that share their first `n` bits, and the first `n` bits
//! of an image depend only on the first `n` bits of the original: an address
//! cut short by the snap length is anonymized correctly as far as it goes.
//!
//! IPv4 (32 bits) gives the original distribution's results; IPv6 (128
//! bits) and MAC addresses (48 bits) use the same construction on longer
//! inputs, as the common implementations do for IPv6. The `n` AES inputs of
//! one address do not depend on each other, so they are encrypted as one
//! batch (pipelined by AES-NI where present).

use aes::cipher::{generic_array::GenericArray, BlockEncrypt, KeyInit};
use aes::Aes128;

/// The anonymizer for one key. Holds the expanded AES key and the pad,
/// never the key bytes themselves; its `Debug` shows nothing of either.
#[derive(Clone)]
pub struct CryptoPan {
    aes: Aes128,
    pad: u128,
}

impl std::fmt::Debug for CryptoPan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CryptoPan { .. }")
    }
}

impl CryptoPan {
    /// The anonymizer for `key` (AES key, then the pad's seed, as in the
    /// original distribution).
    pub fn new(key: &[u8; 32]) -> CryptoPan {
        let aes = Aes128::new(GenericArray::from_slice(&key[..16]));
        let mut pad = GenericArray::clone_from_slice(&key[16..]);
        aes.encrypt_block(&mut pad);
        CryptoPan {
            aes,
            pad: u128::from_be_bytes(pad.into()),
        }
    }

    /// The image of the first `bits` bits (1..=128) of `orig`, which holds
    /// them left-aligned (most significant first); the other bits of the
    /// result are zero.
    pub fn anonymize_bits(&self, orig: u128, bits: u32) -> u128 {
        let bits = bits.clamp(1, 128);
        (orig ^ self.flips(orig, 0, bits)) & (u128::MAX << (128 - bits))
    }

    /// The bits Crypto-PAn flips at positions `from..to` (0 = most
    /// significant) of `orig`; the others are zero. Bit `i` depends on the
    /// first `i` bits of `orig` only, which is what lets a caller cache the
    /// flips of a prefix.
    pub fn flips(&self, orig: u128, from: u32, to: u32) -> u128 {
        let to = to.min(128);
        if from >= to {
            return 0;
        }
        // 32 blocks at a time: enough to keep AES-NI's pipeline full
        // without zeroing 2 KiB for an IPv4 address.
        let mut flips = 0u128;
        let mut buf = [GenericArray::default(); 32];
        let mut start = from;
        while start < to {
            let end = to.min(start + 32);
            let blocks = &mut buf[..(end - start) as usize];
            for (b, i) in blocks.iter_mut().zip(start..) {
                // The first i bits of the original, the pad's bits after them.
                let keep = if i == 0 { 0 } else { u128::MAX << (128 - i) };
                *b = ((orig & keep) | (self.pad & !keep)).to_be_bytes().into();
            }
            self.aes.encrypt_blocks(blocks);
            for (b, i) in blocks.iter().zip(start..) {
                flips |= u128::from(b[0] >> 7) << (127 - i);
            }
            start = end;
        }
        flips
    }

    /// The image of an IPv4 address.
    pub fn ipv4(&self, addr: [u8; 4]) -> [u8; 4] {
        let x = u128::from(u32::from_be_bytes(addr)) << 96;
        ((self.anonymize_bits(x, 32) >> 96) as u32).to_be_bytes()
    }

    /// The image of an IPv6 address.
    pub fn ipv6(&self, addr: [u8; 16]) -> [u8; 16] {
        self.anonymize_bits(u128::from_be_bytes(addr), 128)
            .to_be_bytes()
    }

    /// The image of a MAC address. The broadcast and all-zero addresses
    /// stay themselves, and
    /// the individual/group and universal/local bits (the two low bits of
    /// the first byte) stay as they are, so that a unicast address stays
    /// unicast and a group address a group address (a reader of the file,
    /// a switch it is replayed through, tshark, all tell them apart by that
    /// bit). The other 46 bits are anonymized prefix-preservingly behind
    /// those two (which lead the prefix), so addresses of one OUI keep one
    /// OUI, and the image's first `k` bytes depend only on the original's
    /// first `k`.
    pub fn mac(&self, addr: [u8; 6]) -> [u8; 6] {
        // Broadcast and the all-zero address (ARP's unknown target) stay
        // themselves; the one address whose image either would have been
        // takes that address's own image instead, so the mapping stays
        // one to one.
        const KEPT: [[u8; 6]; 2] = [[0xff; 6], [0; 6]];
        if KEPT.contains(&addr) {
            return addr;
        }
        let image = self.mac_bits(addr);
        match KEPT.iter().find(|k| **k == image) {
            Some(k) => self.mac_bits(*k),
            None => image,
        }
    }

    /// The prefix-preserving image of a MAC address with its flag bits kept
    /// (see [`mac`](Self::mac)).
    fn mac_bits(&self, addr: [u8; 6]) -> [u8; 6] {
        let v = addr.iter().fold(0u64, |v, b| v << 8 | u64::from(*b));
        let flags = u64::from(addr[0] & 3);
        // The flags, then the first byte's other six bits, then the rest.
        let rest = (v >> 42) << 40 | (v & ((1 << 40) - 1));
        let x = u128::from(flags << 46 | rest) << 80;
        let y = ((x ^ self.flips(x, 2, 48)) >> 80) as u64;
        let rest = y & ((1 << 46) - 1);
        let v = (rest >> 40) << 42 | flags << 40 | (rest & ((1 << 40) - 1));
        let mut out = [0u8; 6];
        out.copy_from_slice(&v.to_be_bytes()[2..]);
        out
    }
}

/// A direct-mapped cache of recent translations of `N`-byte addresses, so
/// a flow pays the AES work once. `SLOTS` must be a power of two.
pub struct Cache<const N: usize, const SLOTS: usize> {
    slots: Box<[Slot<N>]>,
}

/// An address, its image, and whether the slot is in use.
type Slot<const N: usize> = ([u8; N], [u8; N], bool);

impl<const N: usize, const SLOTS: usize> Default for Cache<N, SLOTS> {
    fn default() -> Self {
        Self {
            slots: vec![([0u8; N], [0u8; N], false); SLOTS].into_boxed_slice(),
        }
    }
}

impl<const N: usize, const SLOTS: usize> Cache<N, SLOTS> {
    /// The cached image of `addr`, or `make(addr)` (then cached).
    #[inline]
    pub fn get(&mut self, addr: [u8; N], make: impl FnOnce([u8; N]) -> [u8; N]) -> [u8; N] {
        // The bytes folded into a word (N <= 16), then a multiplicative
        // mix: cheap, and spreads addresses that differ in any byte.
        let mut h: u64 = 0;
        for c in addr.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        let i = (h >> 40) as usize & (SLOTS - 1);
        let slot = &mut self.slots[i];
        if slot.2 && slot.0 == addr {
            return slot.1;
        }
        let img = make(addr);
        *slot = (addr, img, true);
        img
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of the original distribution's sample trace.
    pub const REFERENCE_KEY: [u8; 32] = [
        21, 34, 23, 141, 51, 164, 207, 128, 19, 10, 91, 22, 73, 144, 125, 16, 216, 152, 143, 131,
        121, 121, 101, 39, 98, 87, 76, 45, 42, 132, 34, 2,
    ];

    #[test]
    fn first_reference_pair() {
        let c = CryptoPan::new(&REFERENCE_KEY);
        assert_eq!(c.ipv4([128, 11, 68, 132]), [135, 242, 180, 132]);
    }

    #[test]
    fn mac_keeps_broadcast_group_and_local_bits_and_ouis() {
        let c = CryptoPan::new(&REFERENCE_KEY);
        assert_eq!(c.mac([0xff; 6]), [0xff; 6]);
        assert_eq!(c.mac([0; 6]), [0; 6]);
        // The kept addresses' images are what the two addresses that would
        // have had them get instead.
        assert_ne!(c.mac_bits([0xff; 6]), [0xff; 6]);
        let mut seen = std::collections::HashSet::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let m: [u8; 6] = x.to_be_bytes()[2..].try_into().unwrap();
            let a = c.mac(m);
            assert_eq!(a[0] & 3, m[0] & 3, "{m:02x?} -> {a:02x?}");
            assert!(seen.insert(a), "two addresses, one image: {a:02x?}");
            if m != [0xff; 6] && m != [0; 6] {
                assert!(a != [0xff; 6] && a != [0; 6], "{m:02x?} -> {a:02x?}");
            }
            // Same OUI, same image OUI; the first k bytes of the image
            // depend on the first k of the original only.
            let mut other = m;
            other[3] ^= 0x5a;
            let b = c.mac(other);
            assert_eq!(a[..3], b[..3]);
            assert_ne!(a[3..], b[3..]);
        }
        // A unicast address does not become broadcast or group.
        assert_eq!(c.mac([0x02, 0, 0, 0, 0, 1])[0] & 1, 0);
    }

    #[test]
    fn cut_short_prefix_is_the_prefix_of_the_image() {
        let c = CryptoPan::new(&REFERENCE_KEY);
        let full = c.ipv4([128, 11, 68, 132]);
        let half = c.ipv4([128, 11, 0, 0]);
        assert_eq!(full[..2], half[..2]);
    }

    #[test]
    fn cache_returns_what_it_was_given_and_recomputes_on_collision() {
        let mut cache: Cache<4, 2> = Cache::default();
        let mut calls = 0;
        for _ in 0..3 {
            let v = cache.get([1, 2, 3, 4], |a| {
                calls += 1;
                [a[3], a[2], a[1], a[0]]
            });
            assert_eq!(v, [4, 3, 2, 1]);
        }
        assert_eq!(calls, 1);
        for i in 0..50u8 {
            let v = cache.get([i, 0, 0, i], |a| [a[0].wrapping_add(1), 0, 0, 0]);
            assert_eq!(v, [i.wrapping_add(1), 0, 0, 0]);
        }
    }
}
