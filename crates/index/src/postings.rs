//! The keys seen in one capture file and the groups holding them, gathered
//! while the file is read and turned into sorted posting lists at its end.
//!
//! Why not a map of key → groups: with many flows the keys of each packet
//! land in a table much larger than the caches, and every key costs a cache
//! miss or two; the indexer then spent about a microsecond per packet in
//! probes (measured with 100,000 flows: 64 % of its time on one load).
//! Here nothing is looked up at random in a large table:
//!
//! - keys with a small domain (ports, IP protocols, VLAN IDs) have a
//!   direct array of the last group each value was seen in (256 KiB for the
//!   ports, within the L2 cache), so a (key, group) pair is recorded once;
//! - IPv4 addresses pass a small direct-mapped cache of recent (address,
//!   group) pairs that drops most repeats within a group, then go to an
//!   array written in order; IPv6 addresses likewise;
//! - at the end each array is sorted by value with a stable radix sort
//!   (the groups were written in order, so they stay in order within a
//!   value) and repeats the cache let through are dropped.
//!
//! The memory is that of the distinct (key, group) pairs, as before.

use crate::file::PostingLists;
use crate::keys::{Key, Kind};

/// Entries of the recent-pairs caches (a power of two).
const RECENT: usize = 4096;

/// A kind whose values fit in 32 bits: its pairs as `value << 32 | group`.
struct Narrow {
    kind: Kind,
    /// Bits of its values (the radix sort's passes follow).
    bits: u32,
    pairs: Vec<u64>,
}

impl Narrow {
    fn new(kind: Kind, bits: u32) -> Narrow {
        Narrow {
            kind,
            bits,
            pairs: Vec::new(),
        }
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
    /// The last group each port, protocol and VLAN ID was seen in.
    port_last: Vec<u32>,
    proto_last: Vec<u32>,
    vlan_last: Vec<u32>,
    /// Recent `address << 32 | group` pairs, by a hash of the address.
    v4_recent: Vec<u64>,
    v6: Vec<(u128, u32)>,
    v6_recent: Vec<(u128, u32)>,
}

impl Default for Postings {
    fn default() -> Postings {
        Postings {
            any: Vec::new(),
            v4: Narrow::new(Kind::V4, 32),
            port: Narrow::new(Kind::Port, 16),
            proto: Narrow::new(Kind::Proto, 8),
            vlan: Narrow::new(Kind::Vlan, 12),
            port_last: vec![u32::MAX; 1 << 16],
            proto_last: vec![u32::MAX; 1 << 8],
            vlan_last: vec![u32::MAX; 1 << 12],
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

/// Records `v` in group `g` unless `last` says it already is.
/// (A value outside the array's domain, which the key walker never gives,
/// is recorded every time: repeats are dropped at the end.)
fn direct(n: &mut Narrow, last: &mut [u32], v: u128, g: u32) {
    let seen = usize::try_from(v).ok().and_then(|at| last.get_mut(at));
    if let Some(l) = seen {
        if *l == g {
            return;
        }
        *l = g;
    }
    n.pairs.push((v as u64) << 32 | g as u64);
}

impl Postings {
    /// Records that group `g` holds key `k`. Groups come in non-decreasing
    /// order.
    pub(crate) fn add(&mut self, k: Key, g: u32) {
        match k.kind {
            Kind::Any => {
                if self.any.last() != Some(&g) {
                    self.any.push(g);
                }
            }
            Kind::V4 => {
                let e = (k.value as u64) << 32 | g as u64;
                let s = slot(k.value as u64);
                if self.v4_recent[s] != e {
                    self.v4_recent[s] = e;
                    self.v4.pairs.push(e);
                }
            }
            Kind::Port => direct(&mut self.port, &mut self.port_last, k.value, g),
            Kind::Proto => direct(&mut self.proto, &mut self.proto_last, k.value, g),
            Kind::Vlan => direct(&mut self.vlan, &mut self.vlan_last, k.value, g),
            Kind::V6 => {
                let s = slot((k.value as u64) ^ (k.value >> 64) as u64);
                if self.v6_recent[s] != (k.value, g) {
                    self.v6_recent[s] = (k.value, g);
                    self.v6.push((k.value, g));
                }
            }
        }
    }

    /// Every key with its distinct groups in order, sorted by key.
    pub(crate) fn finish(self) -> PostingLists {
        let mut out = PostingLists::default();
        if !self.any.is_empty() {
            out.push(Key::ANY, &self.any);
        }
        let mut scratch = Vec::new();
        let mut v4 = self.v4;
        lists(&mut v4, &mut scratch, &mut out);
        let mut v6 = self.v6;
        // Stable by value: the groups of one address stay in order.
        v6.sort_by_key(|&(v, _)| v);
        push_runs(Kind::V6, v6.into_iter(), &mut out);
        for mut n in [self.port, self.proto, self.vlan] {
            lists(&mut n, &mut scratch, &mut out);
        }
        debug_assert!(out.keys.windows(2).all(|w| w[0] < w[1]));
        out
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
            let mut p = Postings::default();
            let mut want: BTreeMap<Key, Vec<u32>> = BTreeMap::new();
            let mut g = 0u32;
            for (c, small, big, step) in adds {
                g += step;
                let k = kind(c);
                // Half small values (repeats), half any value.
                let raw = if small % 2 == 0 { small } else { big };
                let key = Key { kind: k, value: value(k, raw) };
                p.add(key, g);
                let l = want.entry(key).or_default();
                if l.last() != Some(&g) {
                    l.push(g);
                }
            }
            let got: Vec<(Key, Vec<u32>)> =
                p.finish().iter().map(|(k, g)| (k, g.to_vec())).collect();
            let want: Vec<(Key, Vec<u32>)> = want.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn radix_sort_is_stable_by_value() {
        let mut v: Vec<u64> = (0..5000u64)
            .map(|i| ((i * 7919 % 1000) << 48 | (i * 31 % 300) << 32) | i)
            .collect();
        let mut want = v.clone();
        want.sort_by_key(|x| x >> 32);
        radix_by_value(&mut v, &mut Vec::new(), 32);
        assert_eq!(v, want);
    }
}
