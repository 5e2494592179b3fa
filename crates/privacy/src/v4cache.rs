//! The IPv4 translation caches: where Crypto-PAn's time goes on traces
//! with many addresses (issue 30: 200,000 distinct addresses in 2 M
//! packets).
//!
//! An address costs 32 AES blocks from scratch. Two caches cut that:
//!
//! * **the /16 table**: the flips of an address's first 16 bits depend on
//!   those 16 bits only, so they are kept for every /16 met (65,536 slots
//!   of 4 bytes, filled on first use; the zeroed allocation is only faulted
//!   in where touched). A new address then costs the 16 blocks of its
//!   last 16 bits, encrypted as one batch (two AES-NI pipelines of 8);
//! * **the address map**: each address's image, in a 2-way set-associative
//!   table of 8-byte entries that doubles (up to [`MAX_ENTRIES`]) when it
//!   evicts too often, so a trace's working set stays resident whether it
//!   has 100 addresses (a few KiB, in L1) or millions (capped at 16 MiB).
//!
//! The direct-mapped cache this replaces held 65,536 addresses and 4,096
//! /24 prefixes: with 200,000 addresses two lookups in three missed and
//! paid 40 blocks.

use crate::cryptopan::CryptoPan;

/// Entries the address map starts with (32 KiB).
const MIN_ENTRIES: usize = 1 << 12;
/// Entries the address map grows to at most (16 MiB).
pub(crate) const MAX_ENTRIES: usize = 1 << 21;

/// IPv4 anonymization with its caches (per thread).
pub(crate) struct V4Cache {
    /// Per /16: `1 << 16 | flips of the first 16 bits`, 0 while unknown.
    p16: Box<[u32]>,
    map: AddrMap,
}

impl V4Cache {
    pub(crate) fn new() -> V4Cache {
        V4Cache {
            p16: vec![0u32; 1 << 16].into_boxed_slice(),
            map: AddrMap::new(),
        }
    }

    /// The Crypto-PAn image of `a` under `cpan` (the same for every call
    /// with the same `cpan`).
    #[inline]
    pub(crate) fn get(&mut self, cpan: &CryptoPan, a: u32) -> u32 {
        if let Some(img) = self.map.get(a) {
            return img;
        }
        let img = self.compute(cpan, a);
        self.map.insert(a, img);
        img
    }

    #[cold]
    fn compute(&mut self, cpan: &CryptoPan, a: u32) -> u32 {
        let orig = u128::from(a) << 96;
        let slot = &mut self.p16[(a >> 16) as usize];
        if *slot == 0 {
            *slot = 1 << 16 | (cpan.flips(orig, 0, 16) >> 112) as u32;
        }
        let high = (*slot & 0xffff) << 16;
        let low = (cpan.flips(orig, 16, 32) >> 96) as u32 & 0xffff;
        a ^ (high | low)
    }
}

/// A map from IPv4 addresses to their images: 2-way buckets of entries
/// `address << 32 | image`, 0 meaning empty (the one entry that would
/// encode as 0, 0.0.0.0 mapped to 0.0.0.0, is simply never kept).
struct AddrMap {
    slots: Vec<u64>,
    /// log2 of the number of buckets.
    bits: u32,
    /// Entries pushed out since the last resize.
    evicted: usize,
}

impl AddrMap {
    fn new() -> AddrMap {
        AddrMap {
            slots: vec![0; MIN_ENTRIES],
            bits: (MIN_ENTRIES / 2).trailing_zeros(),
            evicted: 0,
        }
    }

    #[inline(always)]
    fn bucket(&self, a: u32) -> usize {
        // Fibonacci hashing: the top bits of a multiplicative mix.
        ((u64::from(a).wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> (64 - self.bits)) as usize * 2
    }

    #[inline(always)]
    fn get(&self, a: u32) -> Option<u32> {
        let b = self.bucket(a);
        let want = u64::from(a) << 32;
        for &e in &self.slots[b..b + 2] {
            if e != 0 && e & !0xffff_ffff == want {
                return Some(e as u32);
            }
        }
        None
    }

    fn insert(&mut self, a: u32, img: u32) {
        let e = u64::from(a) << 32 | u64::from(img);
        if e == 0 {
            return;
        }
        let b = self.bucket(a);
        if self.slots[b + 1] != 0 {
            self.evicted += 1;
        }
        // The newest first; the older one goes to the second way.
        self.slots[b + 1] = self.slots[b];
        self.slots[b] = e;
        if self.evicted > self.slots.len() / 4 && self.slots.len() < MAX_ENTRIES {
            self.grow();
        }
    }

    #[cold]
    fn grow(&mut self) {
        let old = std::mem::replace(&mut self.slots, vec![0; 0]);
        self.slots = vec![0; old.len() * 2];
        self.bits += 1;
        self.evicted = 0;
        // Second ways first, so each bucket's newest entry stays first.
        for w in [1, 0] {
            for e in old.iter().skip(w).step_by(2).filter(|&&e| e != 0) {
                let b = self.bucket((e >> 32) as u32);
                self.slots[b + 1] = self.slots[b];
                self.slots[b] = *e;
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_keeps_and_grows() {
        let mut m = AddrMap::new();
        for a in 0..100_000u32 {
            m.insert(a.wrapping_mul(2_654_435_761), !a);
        }
        assert!(m.len() > MIN_ENTRIES, "it grew: {}", m.len());
        let kept = (90_000..100_000u32)
            .filter(|&a| m.get(a.wrapping_mul(2_654_435_761)) == Some(!a))
            .count();
        assert!(kept > 9_000, "recent entries kept: {kept}");
        for a in 0..100_000u32 {
            if let Some(v) = m.get(a.wrapping_mul(2_654_435_761)) {
                assert_eq!(v, !a);
            }
        }
        assert_eq!(m.get(12345), None);
    }

    #[test]
    fn zero_entry_is_not_a_hit() {
        let mut m = AddrMap::new();
        assert_eq!(m.get(0), None);
        m.insert(0, 0);
        assert_eq!(m.get(0), None);
        m.insert(0, 7);
        assert_eq!(m.get(0), Some(7));
    }

    #[test]
    fn same_images_as_the_plain_computation() {
        let c = CryptoPan::new(&[9; 32]);
        let mut v = V4Cache::new();
        let mut x = 0x1234_5678u32;
        for _ in 0..3000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            // Few /16s, so both table paths are taken.
            let a = x & 0x0003_ffff | 0x0a00_0000;
            let want = u32::from_be_bytes(c.ipv4(a.to_be_bytes()));
            assert_eq!(v.get(&c, a), want);
            assert_eq!(v.get(&c, a), want);
        }
        let want = u32::from_be_bytes(c.ipv4([0; 4]));
        assert_eq!(v.get(&c, 0), want);
        assert_eq!(v.get(&c, 0), want);
    }
}
