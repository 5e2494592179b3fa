//! The keys seen in one capture file and the groups holding them, gathered
//! while the file is read and turned into sorted posting lists at its end.
//!
//! Why not a map of key → groups: with many flows the keys of each packet
//! land in a table much larger than the caches, and every key costs a cache
//! miss or two; the indexer then spent about a microsecond per packet in
//! probes (measured with 100,000 flows: 64 % of its time on one load).
//! Here nothing is looked up at random in a table larger than the L1 cache:
//!
//! - keys with a small domain (ports, IP protocols, VLAN IDs) have a bitmap
//!   of the values seen in the current group (8 KiB for the ports), so a
//!   (key, group) pair is recorded once; a new group clears only the bits
//!   the last one set (its pairs are the last ones written);
//! - IPv4 addresses pass a small direct-mapped cache of recent (address,
//!   group) pairs that drops most repeats within a group, then go to an
//!   array written in order; IPv6 addresses likewise;
//! - at the end each array is sorted by value with a stable radix sort in
//!   16-bit digits (the groups were written in order, so they stay in
//!   order within a value) and repeats the cache let through are dropped.
//!
//! A direct array of the last group per port (256 KiB) was the first
//! version: with random ports its loads missed the L1 and L2 caches and took
//! 60 % of the capture thread's indexing time (measured with `perf`, 2 M
//! packets of random addresses and ports). The sort's scatter stalls on
//! memory too, but byte digits (more passes) and a first pass into 256
//! buckets of consecutive values sorted in the L2 cache both cost 10-15 %
//! more CPU than 16-bit digits here (A/B, 4 M addresses and 4 M ports).
//!
//! The memory is that of the distinct (key, group) pairs, as before.

use crate::file::PostingLists;
use crate::keys::{Key, KeyOut, Kind};

/// Entries of the recent-pairs caches (a power of two). A group holds at
/// most [`crate::build::GROUP_RECORDS`] packets of a few addresses each:
/// a larger cache only misses the L1 cache more.
const RECENT: usize = 256;

/// A kind whose values fit in 32 bits: its pairs as `value << 32 | group`.
struct Narrow {
    kind: Kind,
    /// Bits of its values (the radix sort's passes follow).
    bits: u32,
    pairs: Vec<u64>,
    /// For a small domain: the values seen in the current group, one bit
    /// each (empty for addresses).
    seen: Vec<u64>,
    /// Where the current group's pairs start in `pairs`.
    group_start: usize,
}

impl Narrow {
    fn new(kind: Kind, bits: u32, direct: bool) -> Narrow {
        Narrow {
            kind,
            bits,
            pairs: Vec::new(),
            seen: if direct {
                vec![0; (1usize << bits).div_ceil(64)]
            } else {
                Vec::new()
            },
            group_start: 0,
        }
    }

    /// Records `v` in group `g` unless it already is. (A value outside the
    /// domain, which the key walker never gives, is recorded every time:
    /// repeats are dropped at the end.)
    fn direct(&mut self, v: u128, g: u32) {
        if v >> self.bits == 0 {
            let (w, b) = ((v >> 6) as usize, 1u64 << (v & 63));
            if let Some(word) = self.seen.get_mut(w) {
                if *word & b != 0 {
                    return;
                }
                *word |= b;
            }
        }
        self.pairs.push((v as u64) << 32 | g as u64);
    }

    /// A new group starts: the bits the last one set are cleared.
    fn next_group(&mut self) {
        if !self.seen.is_empty() {
            for &p in &self.pairs[self.group_start..] {
                let v = (p >> 32) as usize;
                if let Some(word) = self.seen.get_mut(v >> 6) {
                    *word &= !(1u64 << (v & 63));
                }
            }
        }
        self.group_start = self.pairs.len();
    }
}

/// The keys seen so far and their groups.
pub(crate) struct Postings {
    /// Groups holding a packet the index cannot describe.
    any: Vec<u32>,
    v4: Narrow,
    port: Narrow,
    proto: Narrow,
    vlan: Narrow,
    /// The group of the last key added.
    group: u32,
    /// Recent `address << 32 | group` pairs, by a hash of the address.
    v4_recent: Vec<u64>,
    v6: Vec<(u128, u32)>,
    v6_recent: Vec<(u128, u32)>,
}

/// The big arrays of a file's [`Postings`], emptied, for the next file:
/// a capture that rotates its files gathers each file's keys in memory the
/// last file's already touched, instead of new memory the kernel must
/// clear page by page (`clear_page_erms` was 8 % of a capture's CPU with
/// the index, `perf`, 2 M random 64 B packets) and copy as it grows.
#[derive(Default)]
pub(crate) struct Spare {
    /// The pairs of the V4, port, protocol and VLAN kinds.
    pairs: [Vec<u64>; 4],
    /// The radix sort's scratch.
    scratch: Vec<u64>,
}

impl Spare {
    fn take(&mut self, i: usize) -> Vec<u64> {
        let mut v = std::mem::take(&mut self.pairs[i]);
        v.clear();
        v
    }
}

impl Default for Postings {
    fn default() -> Postings {
        Postings::with_spare(Spare::default())
    }
}

impl Postings {
    /// Gathers into the arrays of `spare` (emptied first).
    pub(crate) fn with_spare(mut spare: Spare) -> Postings {
        let mut narrow = |i, kind, bits, direct| {
            let mut n = Narrow::new(kind, bits, direct);
            n.pairs = spare.take(i);
            n
        };
        Postings {
            any: Vec::new(),
            v4: narrow(0, Kind::V4, 32, false),
            port: narrow(1, Kind::Port, 16, true),
            proto: narrow(2, Kind::Proto, 8, true),
            vlan: narrow(3, Kind::Vlan, 12, true),
            group: 0,
            // No pair has group u32::MAX: an empty slot never matches.
            v4_recent: vec![u64::MAX; RECENT],
            v6: Vec::new(),
            v6_recent: vec![(0, u32::MAX); RECENT],
        }
    }
}

/// The slot of a value in a recent-pairs cache.
fn slot(v: u64) -> usize {
    (v.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - RECENT.trailing_zeros())) as usize
}

impl Postings {
    /// The keys of a packet of group `g` go to the returned sink. Groups
    /// come in non-decreasing order.
    pub(crate) fn in_group(&mut self, g: u32) -> InGroup<'_> {
        if g != self.group {
            self.group = g;
            for n in [&mut self.port, &mut self.proto, &mut self.vlan] {
                n.next_group();
            }
        }
        InGroup(self)
    }

    /// Every key with its distinct groups in order, sorted by key; the
    /// arrays are left in `spare` for the next file.
    pub(crate) fn finish(self, spare: &mut Spare) -> PostingLists {
        let mut out = PostingLists::default();
        if !self.any.is_empty() {
            out.push(Key::ANY, &self.any);
        }
        let mut scratch = std::mem::take(&mut spare.scratch);
        let mut v4 = self.v4;
        lists(&mut v4, &mut scratch, &mut out);
        let mut v6 = self.v6;
        // Stable by value: the groups of one address stay in order.
        v6.sort_by_key(|&(v, _)| v);
        push_runs(Kind::V6, v6.into_iter(), &mut out);
        let mut rest = [self.port, self.proto, self.vlan];
        for n in &mut rest {
            lists(n, &mut scratch, &mut out);
        }
        debug_assert!(out.keys.windows(2).all(|w| w[0] < w[1]));
        let [port, proto, vlan] = rest;
        spare.pairs = [v4.pairs, port.pairs, proto.pairs, vlan.pairs];
        spare.scratch = scratch;
        out
    }
}

/// Records keys in the current group (see [`Postings::in_group`]).
pub(crate) struct InGroup<'a>(&'a mut Postings);

impl KeyOut for InGroup<'_> {
    #[inline]
    fn key(&mut self, kind: Kind, value: u128) {
        let p = &mut *self.0;
        let g = p.group;
        match kind {
            Kind::Any => {
                if p.any.last() != Some(&g) {
                    p.any.push(g);
                }
            }
            Kind::V4 => {
                let e = (value as u64) << 32 | g as u64;
                let s = slot(value as u64);
                if p.v4_recent[s] != e {
                    p.v4_recent[s] = e;
                    p.v4.pairs.push(e);
                }
            }
            Kind::Port => p.port.direct(value, g),
            Kind::Proto => p.proto.direct(value, g),
            Kind::Vlan => p.vlan.direct(value, g),
            Kind::V6 => {
                let s = slot((value as u64) ^ (value >> 64) as u64);
                if p.v6_recent[s] != (value, g) {
                    p.v6_recent[s] = (value, g);
                    p.v6.push((value, g));
                }
            }
        }
    }
}

/// Sorts a narrow kind's pairs by value and appends its posting lists.
fn lists(n: &mut Narrow, scratch: &mut Vec<u64>, out: &mut PostingLists) {
    radix_by_value(&mut n.pairs, scratch, n.bits);
    let pairs = n.pairs.iter().map(|&p| ((p >> 32) as u128, p as u32));
    push_runs(n.kind, pairs, out);
}

/// Appends a list per run of equal values of `pairs` (value, group),
/// sorted by value with the groups of a value in order; a group seen twice
/// in a row (the recent-pairs caches let repeats through) counts once.
fn push_runs(kind: Kind, pairs: impl Iterator<Item = (u128, u32)>, out: &mut PostingLists) {
    let mut current = None;
    for (value, g) in pairs {
        if current != Some(value) {
            if current.is_some() {
                out.ends.push(out.groups.len() as u32);
            }
            out.keys.push(Key { kind, value });
            current = Some(value);
            out.groups.push(g);
        } else if out.groups.last() != Some(&g) {
            out.groups.push(g);
        }
    }
    if current.is_some() {
        out.ends.push(out.groups.len() as u32);
    }
}

/// Sorts `v` by its high 32 bits (of which the low `bits` may be set),
/// keeping the order of equal values: an LSD radix sort in 16-bit digits.
fn radix_by_value(v: &mut Vec<u64>, scratch: &mut Vec<u64>, bits: u32) {
    const DIGIT: u32 = 16;
    let mut shift = 32;
    while shift < 32 + bits {
        let digit = |x: u64| ((x >> shift) & 0xffff) as usize;
        let mut counts = vec![0usize; 1 << DIGIT];
        for &x in v.iter() {
            counts[digit(x)] += 1;
        }
        // A digit all values share moves nothing.
        if counts.contains(&v.len()) {
            shift += DIGIT;
            continue;
        }
        let mut at = 0;
        for c in counts.iter_mut() {
            let n = *c;
            *c = at;
            at += n;
        }
        scratch.clear();
        scratch.resize(v.len(), 0);
        for &x in v.iter() {
            let d = digit(x);
            scratch[counts[d]] = x;
            counts[d] += 1;
        }
        std::mem::swap(v, scratch);
        shift += DIGIT;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn kind(c: u8) -> Kind {
        Kind::ALL[c as usize % Kind::ALL.len()]
    }

    fn value(k: Kind, raw: u128) -> u128 {
        match k {
            Kind::Any => 0,
            Kind::V4 => raw & 0xffff_ffff,
            Kind::V6 => raw,
            Kind::Port => raw & 0xffff,
            Kind::Proto => raw & 0xff,
            Kind::Vlan => raw & 0xfff,
        }
    }

    proptest! {
        /// The lists are exactly those of a plain map of key → set of
        /// groups, for any keys in any groups (few distinct values, so
        /// that repeats and cache collisions are common).
        #[test]
        fn same_lists_as_a_map(
            adds in proptest::collection::vec((0u8..6, 0u128..40, any::<u128>(), 0u32..3), 0..2000),
        ) {
            // Into the arrays another file left (they must start empty).
            let mut spare = Spare::default();
            let mut last = Postings::default();
            for (i, k) in [Kind::V4, Kind::Port, Kind::Proto, Kind::Vlan].into_iter().enumerate() {
                last.in_group(i as u32).key(k, 7);
            }
            last.finish(&mut spare);
            let mut p = Postings::with_spare(spare);
            let mut want: BTreeMap<Key, Vec<u32>> = BTreeMap::new();
            let mut g = 0u32;
            for (c, small, big, step) in adds {
                g += step;
                let k = kind(c);
                // Half small values (repeats), half any value.
                let raw = if small % 2 == 0 { small } else { big };
                let key = Key { kind: k, value: value(k, raw) };
                p.in_group(g).key(key.kind, key.value);
                let l = want.entry(key).or_default();
                if l.last() != Some(&g) {
                    l.push(g);
                }
            }
            let got: Vec<(Key, Vec<u32>)> =
                p.finish(&mut Spare::default()).iter().map(|(k, g)| (k, g.to_vec())).collect();
            let want: Vec<(Key, Vec<u32>)> = want.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn radix_sort_is_stable_by_value() {
        // Small and large (bucketed) sets; values spread over all 32 bits,
        // over a few, and one value most pairs share.
        let spreads: [fn(u64) -> u64; 4] = [
            |i| ((i * 7919 % 1000) << 16) | (i * 31 % 300),
            |i| (i * 0x9e37_79b9) & 0xffff_ffff,
            |i| 0xc612_0000 | (i * 2_654_435_761 % 131_072),
            |i| if i % 5 == 0 { i & 0xffff } else { 0xc612_0001 },
        ];
        for n in [0u64, 1, 5000, 300_000] {
            for spread in spreads {
                let mut v: Vec<u64> = (0..n).map(|i| spread(i) << 32 | i).collect();
                let mut want = v.clone();
                want.sort_by_key(|x| x >> 32);
                radix_by_value(&mut v, &mut Vec::new(), 32);
                assert_eq!(v, want);
            }
        }
    }
}
