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
//! * **the address map**: the low 16 bits of each address's image (the
//!   high 16 come from the /16 table), in 4-way buckets of 4-byte entries,
//!   one 16-byte bucket per lookup. The address is first mixed by an
//!   invertible multiply; the top bits of the mix pick the bucket and the
//!   rest is the entry's tag, so bucket and tag name the address exactly
//!   (no false hit, bit-exact) in 4 bytes with the image. The map starts
//!   at 1 MiB (262,144 entries) and doubles, up to `1 << MAX_BITS` buckets (4 MiB),
//!   when it evicts too often.
//!
//! Measured (issue 30's trace: 200,000 addresses in 2 M packets): the
//! direct-mapped cache this replaces (65,536 addresses, 12 bytes each, and
//! 4,096 /24 prefixes) missed two lookups in three and paid 40 blocks; a
//! map of 8-byte entries grown to 16 MiB missed the CPU caches and TLB on
//! almost every lookup and was slower than computing 16 blocks each time.

use crate::cryptopan::CryptoPan;

/// log2 of the buckets the address map starts with (4 entries of 4 bytes
/// each: 1 MiB). At least 16, so that a tag and 16 image bits fit 4 bytes.
const MIN_BITS: u32 = 16;
/// log2 of the most buckets the address map grows to (4 MiB).
const MAX_BITS: u32 = 18;
/// An odd multiplier: `a * MIX` is a bijection of 32-bit words whose top
/// bits depend on every bit of `a`.
const MIX: u32 = 0x9e37_79b9;

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
        let (b, tag) = self.map.place(a);
        match hit(self.map.slots[b], tag, self.p16[(a >> 16) as usize], a) {
            Some(i) => i,
            None => self.miss(cpan, a),
        }
    }

    /// Starts loading `a`'s bucket and /16 slot (a hint: see
    /// [`crate::prefetch`]).
    #[inline]
    pub(crate) fn prepare(&self, a: u32) {
        let (b, _) = self.map.place(a);
        crate::prefetch::prefetch(&self.map.slots[b]);
        crate::prefetch::prefetch(&self.p16[(a >> 16) as usize]);
    }

    /// The images of `a` and `b`, the two lookups issued together so that
    /// their cache misses overlap (a packet's source and destination).
    #[inline]
    pub(crate) fn get2(&mut self, cpan: &CryptoPan, a: u32, b: u32) -> (u32, u32) {
        let (ba, ta) = self.map.place(a);
        let (bb, tb) = self.map.place(b);
        let (ea, eb) = (self.map.slots[ba], self.map.slots[bb]);
        let (pa, pb) = (self.p16[(a >> 16) as usize], self.p16[(b >> 16) as usize]);
        let ia = match hit(ea, ta, pa, a) {
            Some(i) => i,
            None => self.miss(cpan, a),
        };
        let ib = match hit(eb, tb, pb, b) {
            Some(i) => i,
            None => self.miss(cpan, b),
        };
        (ia, ib)
    }

    #[cold]
    fn miss(&mut self, cpan: &CryptoPan, a: u32) -> u32 {
        let img = self.compute(cpan, a);
        self.map.insert(a, img as u16);
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

/// The image of `a` from its bucket `e` (tag `tag`) and its /16 slot `p`,
/// if both know it.
#[inline(always)]
fn hit(e: [u32; 4], tag: u32, p: u32, a: u32) -> Option<u32> {
    if p == 0 {
        return None;
    }
    let high = a & 0xffff_0000 ^ p << 16;
    // Without branches: which entry matches is random, and a mispredicted
    // branch per lookup cost more than these few operations. A bucket
    // never holds an address twice, so at most one entry matches.
    let mut low = 0u32;
    let mut found = false;
    for x in e {
        let m = (x != 0) & (x >> 16 == tag);
        low |= (x & 0xffff) & 0u32.wrapping_sub(u32::from(m));
        found |= m;
    }
    found.then_some(high | low)
}

/// A map from IPv4 addresses to the low 16 bits of their images: buckets
/// of 4 entries `tag << 16 | image`, 0 meaning empty (an entry that would
/// encode as 0 is simply never kept).
struct AddrMap {
    slots: Vec<[u32; 4]>,
    /// log2 of the number of buckets.
    bits: u32,
    /// Entries pushed out since the last resize.
    evicted: usize,
}

impl AddrMap {
    fn new() -> AddrMap {
        AddrMap {
            slots: vec![[0; 4]; 1 << MIN_BITS],
            bits: MIN_BITS,
            evicted: 0,
        }
    }

    /// The bucket and tag of `a` (the tag is below `1 << (32 - bits)`).
    #[inline(always)]
    fn place(&self, a: u32) -> (usize, u32) {
        let h = a.wrapping_mul(MIX);
        (
            (h >> (32 - self.bits)) as usize,
            h & (u32::MAX >> self.bits),
        )
    }

    #[cfg(test)]
    fn get(&self, a: u32) -> Option<u16> {
        let (b, tag) = self.place(a);
        let bucket = &self.slots[b];
        for &e in bucket {
            if e != 0 && e >> 16 == tag {
                return Some(e as u16);
            }
        }
        None
    }

    fn insert(&mut self, a: u32, low: u16) {
        let (b, tag) = self.place(a);
        let e = tag << 16 | u32::from(low);
        if e == 0 {
            return;
        }
        let bucket = &mut self.slots[b];
        if bucket[3] != 0 {
            self.evicted += 1;
        }
        // The newest first; the oldest falls out.
        bucket.copy_within(0..3, 1);
        bucket[0] = e;
        if self.evicted > self.slots.len() && self.bits < MAX_BITS {
            self.grow();
        }
    }

    #[cold]
    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        let old_bits = self.bits;
        self.bits += 1;
        self.slots = vec![[0; 4]; 1 << self.bits];
        self.evicted = 0;
        // Oldest first, so each bucket's newest entries stay first.
        for w in (0..4).rev() {
            for (b, bucket) in old.iter().enumerate() {
                let e = bucket[w];
                if e == 0 {
                    continue;
                }
                // The mixed address back from bucket and tag.
                let h = (b as u32) << (32 - old_bits) | e >> 16;
                let (nb, tag) = (
                    (h >> (32 - self.bits)) as usize,
                    h & (u32::MAX >> self.bits),
                );
                let ne = tag << 16 | (e & 0xffff);
                if ne == 0 {
                    continue;
                }
                let bucket = &mut self.slots[nb];
                bucket.copy_within(0..3, 1);
                bucket[0] = ne;
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_keeps_and_grows() {
        let mut m = AddrMap::new();
        let key = |a: u32| a.wrapping_mul(2_654_435_761) ^ 0x0a00_0000;
        let n = 3_000_000u32;
        for a in 0..n {
            m.insert(key(a), !a as u16);
        }
        assert_eq!(m.len(), 4 << MAX_BITS, "it grew to the most");
        let kept = (n - 100_000..n)
            .filter(|&a| m.get(key(a)) == Some(!a as u16))
            .count();
        assert!(kept > 95_000, "recent entries kept: {kept}");
        for a in 0..n {
            if let Some(v) = m.get(key(a)) {
                assert_eq!(v, !a as u16, "no false hit");
            }
        }
    }

    #[test]
    fn zero_entry_is_not_a_hit() {
        let mut m = AddrMap::new();
        assert_eq!(m.get(0), None);
        // Address 0 mixes to 0: tag 0, so an image ending in 0 is not kept.
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
            let b = a ^ (x >> 7 & 0x0f0f);
            let wb = u32::from_be_bytes(c.ipv4(b.to_be_bytes()));
            assert_eq!(v.get2(&c, a, b), (want, wb));
            assert_eq!(v.get2(&c, b, a), (wb, want));
        }
        let want = u32::from_be_bytes(c.ipv4([0; 4]));
        assert_eq!(v.get(&c, 0), want);
        assert_eq!(v.get(&c, 0), want);
    }
}
