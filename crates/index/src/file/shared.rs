//! Lists written once: a key whose groups are exactly those of a key
//! before it is written as a reference to that key.
//!
//! Why: a flow's keys that no other flow has in the file hold the same
//! groups — a client's ephemeral port, and a client (or a server) that
//! talks in that one flow only. On a link of many clients each in one
//! connection, most lists have a twin or two: the retrieval bench's files
//! of 100,000 flows, 1.57 % of the pcap bytes -> 1.14 %. Where hosts talk
//! in many flows (crates/index/tests/size.rs) little is saved.
//!
//! How: while the lists are added, each of `SHARED_MIN` bytes or more
//! leaves its checksum and key number; at the end these are sorted (a radix
//! sort: lists equal come together, in key order) and each list is compared
//! byte for byte with the first of its checksum. Then the sections are
//! copied once, the twins written as references, and their fences (block
//! starts, checksums) made again. A map of checksums filled as the lists
//! come was the first version: a random probe and a comparison per list,
//! ~150 ns each, 40-90 ms a file of 190,000 keys.

use super::{le_u32, PostingLists, BLOCK, SAME};
use crate::postings::radix_by_value;
use crate::varint;

pub(super) fn share(pl: &mut PostingLists, scratch: &mut Vec<u64>) {
    let mut ids = std::mem::take(&mut pl.ids);
    radix_by_value(&mut ids, scratch, 32);
    // Section of each key: the sections' first key numbers.
    let bases: Vec<usize> = pl
        .sections
        .iter()
        .scan(0, |b, s| {
            let base = *b;
            *b += s.keys;
            Some(base)
        })
        .collect();
    let section = |k: usize| bases.partition_point(|&b| b <= k) - 1;
    // The keys whose checksum another list has, run by run (a checksum of
    // one list only, most, is passed over without a look at the list: the
    // look is a cache miss), with where their entries are.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut keys: Vec<(u32, (u32, u32, u32))> = Vec::new();
    for run in ids
        .chunk_by(|a, b| a >> 32 == b >> 32)
        .filter(|r| r.len() > 1)
    {
        let start = keys.len();
        // A loop of loads only: the misses on the entries overlap.
        for &id in run {
            keys.push((id as u32, pl.entries[id as u32 as usize]));
        }
        runs.push((start, keys.len()));
    }
    // Each run's lists compared with the first of each kind in it, the
    // lists of the runs ahead asked for meanwhile (their bytes are spread
    // over the sections: one miss each, now overlapped).
    const AHEAD: usize = 16;
    let mut twins = Vec::new();
    let mut firsts: Vec<(usize, u64, &[u8])> = Vec::new();
    for (i, &(lo, hi)) in runs.iter().enumerate() {
        if let Some(&(a, b)) = runs.get(i + AHEAD) {
            for &(k, (at, ..)) in &keys[a..b] {
                let bytes = &pl.sections[section(k as usize)].bytes;
                let at = at as usize;
                // The line of its tag (and most lists).
                ringcap_source::sys::prefetch(
                    bytes.get(at..(at + 64).min(bytes.len())).unwrap_or(&[]),
                );
            }
        }
        firsts.clear();
        for &(k, (at, list, end)) in &keys[lo..hi] {
            // Its tag without its flags (n), and its bytes.
            let (k, list, end) = (k as usize, list as usize, end as usize);
            let b = &pl.sections[section(k)].bytes;
            let n = varint::get(b, &mut (at as usize)).unwrap_or(0) >> 2;
            let bytes = &b[list..end];
            match firsts.iter().find(|&&(_, fn_, fl)| (fn_, fl) == (n, bytes)) {
                Some(&(f, ..))
                    if varint::len((k - f) as u64 * 4) < varint::len(n * 4) + bytes.len() =>
                {
                    twins.push((k, f))
                }
                Some(_) => {}
                None => firsts.push((k, n, bytes)),
            }
        }
    }
    pl.ids = ids;
    pl.ids.clear();
    if twins.is_empty() {
        return;
    }
    twins.sort_unstable();
    let mut twins = twins.into_iter().peekable();
    for (sec, base) in bases.into_iter().enumerate() {
        let s = &mut pl.sections[sec];
        let w = s.kind.width();
        let old = std::mem::take(&mut s.bytes);
        let mut new = Vec::with_capacity(old.len());
        for i in 0..s.keys {
            let k = base + i;
            let (at, list, end) = pl.entries[k];
            let (at, list, end) = (at as usize, list as usize, end as usize);
            if i % BLOCK == 0 {
                let f = (i / BLOCK) * (w + 8);
                if i > 0 {
                    let start = le_u32(&s.fences, f - 8) as usize;
                    let crc = crc32fast::hash(&new[start..]);
                    s.fences[f - 4..f].copy_from_slice(&crc.to_le_bytes());
                }
                s.fences[f + w..f + w + 4].copy_from_slice(&(new.len() as u32).to_le_bytes());
            }
            match twins.next_if(|&(t, _)| t == k) {
                Some((_, f)) => {
                    // The same flags, the number of keys back, the value's
                    // delta if it has one, and no list.
                    let mut p = at;
                    let tag = varint::get(&old, &mut p).unwrap_or(0);
                    varint::put(&mut new, ((k - f) as u64) << 2 | SAME | tag & 1);
                    new.extend_from_slice(&old[p..list]);
                }
                None => new.extend_from_slice(&old[at..end]),
            }
        }
        s.bytes = new;
    }
    // The entries now point at the old bytes: no more sharing.
    pl.entries.clear();
}

#[cfg(test)]
mod tests {
    use super::super::Index;
    use crate::file::{encode, Contents, Group, PostingLists, Summary};
    use crate::keys::{Key, Kind};

    /// Lists with twins across kinds and blocks, keys consecutive and not,
    /// decode to what was pushed, through the file's own reader, and the
    /// file is smaller.
    #[test]
    fn twins_are_references_and_read_back_the_same() {
        let groups = 5000u32;
        let list = |seed: u32| -> Vec<u32> {
            let mut v: Vec<u32> = (0..12).map(|i| (seed * 7919 + i * 401) % groups).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let mut want = Vec::new();
        for (kind, n) in [(Kind::V4, 700u128), (Kind::Port, 600)] {
            for v in 0..n {
                // Every third key has the list of key v / 3 of the addresses.
                let g = if v % 3 == 0 {
                    list(v as u32 / 3)
                } else {
                    list(1000 + v as u32)
                };
                want.push((
                    Key {
                        kind,
                        value: v * 3 + 1,
                    },
                    g,
                ));
            }
        }
        let build = |share: bool| {
            let mut pl = PostingLists::new(groups);
            for (k, g) in &want {
                pl.push(*k, g);
            }
            if share {
                pl.share(&mut Vec::new());
            }
            assert_eq!(pl.decoded(), want);
            let c = Contents {
                summary: Some(Summary {
                    capture_len: 24 + groups as u64 * 100,
                    head_crc: 0,
                    packets: groups as u64,
                    first_ts: 0,
                    min_ts: 0,
                    max_ts: groups as u64 - 1,
                }),
                groups: (0..groups)
                    .map(|i| Group {
                        offset: 24 + i as u64 * 100,
                        min_ts: i as u64,
                        max_ts: i as u64,
                        records: 1,
                    })
                    .collect(),
                epochs: vec![crate::file::Epoch {
                    group: 0,
                    sections: 1,
                    interfaces: 1,
                }],
                postings: pl,
                positions: Vec::new(),
            };
            encode(&c)
        };
        let (plain, shared) = (build(false), build(true));
        assert!(
            shared.len() + 5000 < plain.len(),
            "{} vs {}",
            shared.len(),
            plain.len()
        );
        for raw in [plain, shared] {
            let idx = Index::parse(raw).unwrap();
            for (k, g) in &want {
                let mut out = vec![false; groups as usize];
                idx.mark(k.kind, k.value, k.value, &mut out).unwrap();
                let got: Vec<u32> = (0..groups).filter(|&i| out[i as usize]).collect();
                assert_eq!(&got, g, "{k:?}");
            }
            idx.verify().unwrap();
        }
    }
}
