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
//! The memory is bounded: at the end of a group, a kind whose arrays hold
//! [`CHUNK`] pairs is sorted into a run ([`crate::runs`]) and its arrays
//! start again; the runs are merged at the file's end. A file of fewer
//! pairs is sorted once, as before, without runs.

use std::io;
use std::ops::Range;

use crate::file::PostingLists;
use crate::keys::{Key, KeyOut, Kind};
use crate::runs::{merge, RunWriter, Store, CHUNK, SPILL};

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
    /// Runs sorted so far, in group order.
    runs: Vec<Range<u64>>,
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
            runs: Vec::new(),
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
    v6_runs: Vec<Range<u64>>,
    runs: Runs,
    /// The radix sort's scratch.
    scratch: Vec<u64>,
    /// The groups of a small-domain kind sorted by value ([`counted_lists`]).
    counted: Vec<u32>,
    /// Pairs of a kind that make a run.
    chunk: usize,
}

/// Where runs go, and the scratch of coding them.
struct Runs {
    store: Store,
    run: Vec<u8>,
    list: Vec<u32>,
    /// Why runs could not be kept, if they could not.
    failed: Option<io::Error>,
}

impl Runs {
    fn new(spill: usize) -> Runs {
        Runs {
            store: Store::new(spill),
            run: Vec::new(),
            list: Vec::new(),
            failed: None,
        }
    }

    /// Codes `pairs` (sorted by value, the groups of a value in order) into
    /// a run, appended to `runs`.
    fn add(&mut self, pairs: impl Iterator<Item = (u128, u32)>, runs: &mut Vec<Range<u64>>) {
        if self.failed.is_some() {
            return;
        }
        let mut w = RunWriter::new(&mut self.run);
        each_list(pairs, &mut self.list, |v, g| w.list(v, g));
        match self.store.append(&self.run) {
            Ok(r) => runs.push(r),
            Err(e) => self.failed = Some(e),
        }
    }

    /// Appends the lists of `kind` to `out`: straight from `pairs` (sorted
    /// as for [`Runs::add`]) if the kind made no run, else by merging its
    /// runs and a last one of `pairs`.
    fn lists(
        &mut self,
        kind: Kind,
        mut pairs: impl Iterator<Item = (u128, u32)>,
        runs: &mut Vec<Range<u64>>,
        out: &mut PostingLists,
    ) -> io::Result<()> {
        let push = |value, g: &[u32]| out.push(Key { kind, value }, g);
        if runs.is_empty() {
            each_list(pairs, &mut self.list, push);
            return Ok(());
        }
        if let Some(first) = pairs.next() {
            self.add(std::iter::once(first).chain(pairs), runs);
        }
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        merge(&self.store, runs, &mut self.list, push)
    }
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
    /// The groups of a small-domain kind by value.
    counted: Vec<u32>,
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
            v6_runs: Vec::new(),
            runs: Runs::new(SPILL),
            scratch: std::mem::take(&mut spare.scratch),
            counted: std::mem::take(&mut spare.counted),
            chunk: CHUNK,
        }
    }

    /// Runs of `chunk` pairs, kept in memory up to `spill` bytes (tests).
    #[cfg(test)]
    fn with_limits(chunk: usize, spill: usize) -> Postings {
        Postings {
            chunk,
            runs: Runs::new(spill),
            ..Postings::default()
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
            self.runs_if_full();
        }
        InGroup(self)
    }

    /// Sorts each kind holding [`CHUNK`] pairs into a run (between groups:
    /// a group's pairs are all in one run).
    #[cold]
    fn runs_if_full(&mut self) {
        let chunk = self.chunk;
        for n in [
            &mut self.v4,
            &mut self.port,
            &mut self.proto,
            &mut self.vlan,
        ] {
            if n.pairs.len() >= chunk {
                radix_by_value(&mut n.pairs, &mut self.scratch, n.bits);
                self.runs.add(narrow_pairs(&n.pairs), &mut n.runs);
                n.pairs.clear();
                n.group_start = 0;
            }
        }
        // A quarter as many: each is 32 bytes.
        if self.v6.len() >= chunk.div_ceil(4) {
            self.v6.sort_by_key(|&(v, _)| v);
            self.runs.add(self.v6.iter().copied(), &mut self.v6_runs);
            self.v6.clear();
        }
    }

    /// Every key with its distinct groups in order, sorted by key, for a
    /// file of `groups` groups; the arrays are left in `spare` for the next
    /// file. Fails if runs could not be written or read back.
    pub(crate) fn finish(mut self, groups: u32, spare: &mut Spare) -> io::Result<PostingLists> {
        let mut out = PostingLists::new(groups);
        if !self.any.is_empty() {
            out.push(Key::ANY, &self.any);
        }
        let mut v4 = std::mem::replace(&mut self.v4, Narrow::new(Kind::V4, 0, false));
        self.narrow_lists(&mut v4, &mut out)?;
        // Stable by value: the groups of one address stay in order.
        self.v6.sort_by_key(|&(v, _)| v);
        let v6 = std::mem::take(&mut self.v6);
        self.runs
            .lists(Kind::V6, v6.into_iter(), &mut self.v6_runs, &mut out)?;
        let mut rest = [
            std::mem::replace(&mut self.port, Narrow::new(Kind::Port, 0, false)),
            std::mem::replace(&mut self.proto, Narrow::new(Kind::Proto, 0, false)),
            std::mem::replace(&mut self.vlan, Narrow::new(Kind::Vlan, 0, false)),
        ];
        for n in &mut rest {
            self.narrow_lists(n, &mut out)?;
        }
        let [port, proto, vlan] = rest;
        out.share(&mut self.scratch);
        spare.pairs = [v4.pairs, port.pairs, proto.pairs, vlan.pairs];
        spare.scratch = self.scratch;
        spare.counted = self.counted;
        Ok(out)
    }
}

impl Postings {
    /// Sorts a narrow kind's pairs and appends its lists.
    fn narrow_lists(&mut self, n: &mut Narrow, out: &mut PostingLists) -> io::Result<()> {
        if n.runs.is_empty() && !n.seen.is_empty() && counted_lists(n, &mut self.counted, out) {
            return Ok(());
        }
        radix_by_value(&mut n.pairs, &mut self.scratch, n.bits);
        self.runs
            .lists(n.kind, narrow_pairs(&n.pairs), &mut n.runs, out)
    }
}

/// The lists of a small-domain kind (ports, protocols, VLAN IDs) that made
/// no run, straight from a counting sort of its groups by value into
/// `groups`: the radix sort would move the 8-byte pairs, this moves the
/// 4-byte groups and hands each value's out as a slice (the scatter is a
/// random write to one of 65,536 places either way, the most expensive
/// step of the index on this VM: ~15 ns a pair). False, with nothing
/// appended, if a value falls outside the domain (never, from the key
/// walker): the caller sorts those pairs the general way.
fn counted_lists(n: &Narrow, groups: &mut Vec<u32>, out: &mut PostingLists) -> bool {
    let domain = 1usize << n.bits;
    // starts[v + 1]: pairs of value v, then where each value's groups start.
    let mut starts = vec![0u32; domain + 1];
    for &p in &n.pairs {
        match starts.get_mut((p >> 32) as usize + 1) {
            Some(c) => *c += 1,
            None => return false,
        }
    }
    for v in 0..domain {
        starts[v + 1] += starts[v];
    }
    groups.clear();
    groups.resize(n.pairs.len(), 0);
    let mut at = starts.clone();
    for &p in &n.pairs {
        let v = (p >> 32) as usize;
        groups[at[v] as usize] = p as u32;
        at[v] += 1;
    }
    let mut distinct = Vec::new();
    for v in 0..domain {
        let list = &groups[starts[v] as usize..starts[v + 1] as usize];
        if list.is_empty() {
            continue;
        }
        let key = Key {
            kind: n.kind,
            value: v as u128,
        };
        // The groups of a value are in order (stable); a group twice in a
        // row (not from the per-group bitmaps, but allowed) counts once.
        if list.windows(2).all(|w| w[0] != w[1]) {
            out.push(key, list);
        } else {
            distinct.clear();
            distinct.extend_from_slice(list);
            distinct.dedup();
            out.push(key, &distinct);
        }
    }
    true
}

/// A narrow kind's `value << 32 | group` pairs as (value, group).
fn narrow_pairs(pairs: &[u64]) -> impl Iterator<Item = (u128, u32)> + '_ {
    pairs.iter().map(|&p| ((p >> 32) as u128, p as u32))
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

/// Calls `list` for each run of equal values of `pairs` (value, group),
/// sorted by value with the groups of a value in order, with its groups; a
/// group seen twice in a row (the recent-pairs caches let repeats through)
/// counts once. `groups` is scratch.
fn each_list(
    pairs: impl Iterator<Item = (u128, u32)>,
    groups: &mut Vec<u32>,
    mut list: impl FnMut(u128, &[u32]),
) {
    let mut current = None;
    groups.clear();
    for (value, g) in pairs {
        if current != Some(value) {
            if let Some(c) = current {
                list(c, groups);
            }
            groups.clear();
            current = Some(value);
            groups.push(g);
        } else if groups.last() != Some(&g) {
            groups.push(g);
        }
    }
    if let Some(c) = current {
        list(c, groups);
    }
}

/// Sorts `v` by its high 32 bits (of which the low `bits` may be set),
/// keeping the order of equal values: an LSD radix sort in 16-bit digits.
pub(crate) fn radix_by_value(v: &mut Vec<u64>, scratch: &mut Vec<u64>, bits: u32) {
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
        /// that repeats and cache collisions are common), sorted at once or
        /// in runs of a few pairs, kept in memory or in a temporary file.
        #[test]
        fn same_lists_as_a_map(
            adds in proptest::collection::vec((0u8..6, 0u128..40, any::<u128>(), 0u32..3), 0..2000),
            chunk in prop_oneof![Just(usize::MAX), 1usize..64],
            spill in prop_oneof![Just(usize::MAX), Just(0usize)],
        ) {
            // Into the arrays another file left (they must start empty).
            let mut spare = Spare::default();
            let mut last = Postings::default();
            for (i, k) in [Kind::V4, Kind::Port, Kind::Proto, Kind::Vlan].into_iter().enumerate() {
                last.in_group(i as u32).key(k, 7);
            }
            last.finish(4, &mut spare).unwrap();
            let mut p = Postings::with_limits(chunk, spill);
            let spare_pairs = std::mem::take(&mut spare.pairs);
            for (n, pairs) in [&mut p.v4, &mut p.port, &mut p.proto, &mut p.vlan].into_iter().zip(spare_pairs) {
                n.pairs = pairs;
                n.pairs.clear();
            }
            let mut want: BTreeMap<Key, Vec<u32>> = BTreeMap::new();
            let mut g = 0u32;
            let mut in_group = 0;
            for (c, small, big, step) in adds {
                g += step;
                in_group = if step == 0 { in_group + 1 } else { 1 };
                let k = kind(c);
                // Half small values (repeats), half any value.
                let raw = if small % 2 == 0 { small } else { big };
                let key = Key { kind: k, value: value(k, raw) };
                p.in_group(g).key(key.kind, key.value);
                let l = want.entry(key).or_default();
                if l.last() != Some(&g) {
                    l.push(g);
                }
                // Bounded: runs are made at the end of the group that fills
                // the arrays.
                let held = [&p.v4, &p.port, &p.proto, &p.vlan].iter().map(|n| n.pairs.len()).max();
                prop_assert!(held.unwrap_or(0).max(p.v6.len()) <= chunk.saturating_add(in_group));
            }
            let made_runs = [&p.v4, &p.port, &p.proto, &p.vlan].iter().any(|n| !n.runs.is_empty())
                || !p.v6_runs.is_empty();
            prop_assert!(!made_runs || chunk < usize::MAX);
            prop_assert_eq!(p.runs.store.spilled(), made_runs && spill == 0);
            let got = p.finish(g + 1, &mut Spare::default()).unwrap().decoded();
            let want: Vec<(Key, Vec<u32>)> = want.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }

    /// A value outside a small domain (which the key walker never gives)
    /// leaves the counting sort to the general one: nothing lost or out of
    /// bounds.
    #[test]
    fn small_domain_values_outside_it_are_sorted_the_general_way() {
        let mut p = Postings::default();
        for (g, v) in [(0, 80u128), (0, 70_000), (1, 80), (2, 70_000), (2, 443)] {
            p.in_group(g).key(Kind::Port, v);
        }
        let got = p.finish(3, &mut Spare::default()).unwrap().decoded();
        let port = |value| Key {
            kind: Kind::Port,
            value,
        };
        assert_eq!(
            got,
            vec![
                (port(80), vec![0, 1]),
                (port(443), vec![2]),
                (port(70_000), vec![0, 2]),
            ]
        );
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
