//! Sorted runs of posting lists, so that indexing a file of any length
//! holds a bounded amount of memory.
//!
//! The (key, group) pairs of a file are gathered in arrays ([`crate::
//! postings`]) and sorted at its end. Unbounded, those arrays grew by ~8
//! bytes per key of every packet, plus the sort's scratch and the lists
//! (~75 bytes a packet of random 64-byte traffic, measured: 150 MB for 2 M
//! packets): a capture written to one file without rotation, indexed by
//! default, would take the sensor's memory within hours. So a kind's pairs
//! are sorted and coded into a *run* (its posting lists, LEB128, ~2 bytes a
//! pair) whenever they reach [`CHUNK`] at the end of a group, and the runs
//! are merged key by key at the file's end. Runs cover disjoint, increasing
//! ranges of groups (a run ends with a group), so a key's list is its lists
//! in the runs, in run order.
//!
//! The runs stay in memory up to [`SPILL`] bytes, then go to an unnamed
//! temporary file (`tempfile`, in `$TMPDIR` or `/tmp`; the kernel frees it
//! when the indexer closes it or dies). If no temporary file can be made
//! they stay in memory: an index is worth more than the bound.
//!
//! A file's tap makes its runs where it gathers its pairs, in the capture's
//! writer thread, at the end of a group: sorting and coding 4 M pairs takes
//! some tens of milliseconds, which the ring absorbs (at 300,000 64-byte
//! packets a second, ~2 MB of it), every 2-4 M packets. Handing the chunks
//! to the indexer's thread (nice 19) instead would keep even that off the
//! capture's path; not done yet.
//!
//! A run of one kind is, for each key in increasing order: value − the
//! previous key's value (LEB128 up to 128 bits, the first from 0), the
//! number of groups, then the groups (group − previous group − 1, the first
//! from −1). Written and read only by this process.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;

use crate::varint;

/// Pairs of a kind gathered before they are sorted into a run: 32 MiB of
/// `u64` pairs (IPv6: a quarter as many 32-byte pairs), and as much of
/// scratch for the sort. Smaller runs cost merging: with 2^20 a file of 2 M
/// random 64-byte packets made 4 runs of addresses and 4 of ports and took
/// 1.08x the CPU of sorting once; with 2^22 it makes none and takes 0.88x
/// (no lists as arrays), 119 MB at the peak against 142 (`farm-bench`, 7
/// pairs). Such a file is about 200 MB at 64 bytes a packet, 1 GB of mixed
/// sizes; a tap then holds ~100 MB at most.
pub(crate) const CHUNK: usize = 1 << 22;

/// Bytes of runs kept in memory before they go to a temporary file.
pub(crate) const SPILL: usize = 32 << 20;

/// Bytes a reader of a run buffers.
const READ_BUF: usize = 32 << 10;

/// The longest LEB128 number of a run (128 bits).
const MAX_NUM: usize = 19;

/// Where the runs of a file are kept.
pub(crate) struct Store {
    mem: Vec<u8>,
    /// Once spilled: the file, holding every byte so far.
    file: Option<File>,
    len: u64,
    /// Bytes kept in memory at most.
    spill: usize,
}

impl Store {
    pub(crate) fn new(spill: usize) -> Store {
        Store {
            mem: Vec::new(),
            file: None,
            len: 0,
            spill,
        }
    }

    /// Appends `bytes`; returns where they are.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> io::Result<Range<u64>> {
        let start = self.len;
        if self.file.is_none() && self.mem.len() + bytes.len() > self.spill {
            if let Ok(mut f) = tempfile::tempfile() {
                f.write_all(&self.mem)?;
                self.mem = Vec::new();
                self.file = Some(f);
            }
        }
        match &mut self.file {
            Some(f) => f.write_all(bytes)?,
            None => self.mem.extend_from_slice(bytes),
        }
        self.len += bytes.len() as u64;
        Ok(start..self.len)
    }

    /// Fills `buf` from `at`.
    fn read_at(&self, at: u64, buf: &mut [u8]) -> io::Result<()> {
        match &self.file {
            Some(f) => f.read_exact_at(buf, at),
            None => {
                let from = at as usize;
                let src = self
                    .mem
                    .get(from..from + buf.len())
                    .ok_or_else(|| damaged("run out of bounds"))?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }

    /// True once the runs went to a temporary file.
    #[cfg(test)]
    pub(crate) fn spilled(&self) -> bool {
        self.file.is_some()
    }
}

fn damaged(m: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("index runs: {m}"))
}

/// Codes the lists of a sorted run into `out`: `lists` yields each key's
/// value (increasing) and its groups (increasing, distinct).
pub(crate) struct RunWriter<'a> {
    out: &'a mut Vec<u8>,
    prev: u128,
}

impl<'a> RunWriter<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>) -> RunWriter<'a> {
        out.clear();
        RunWriter { out, prev: 0 }
    }

    pub(crate) fn list(&mut self, value: u128, groups: &[u32]) {
        varint::put_wide(self.out, value - self.prev);
        self.prev = value;
        varint::put(self.out, groups.len() as u64);
        let mut prev = -1i64;
        for &g in groups {
            varint::put(self.out, (g as i64 - prev - 1) as u64);
            prev = g as i64;
        }
    }
}

/// Reads one run back, a list at a time.
struct RunReader {
    /// Store bytes not read yet.
    left: Range<u64>,
    buf: Vec<u8>,
    p: usize,
    value: u128,
    /// Groups of the current key not read yet.
    count: u64,
}

impl RunReader {
    fn new(run: Range<u64>) -> RunReader {
        RunReader {
            left: run,
            buf: Vec::new(),
            p: 0,
            value: 0,
            count: 0,
        }
    }

    /// Makes sure a whole number is buffered, unless the run ends first.
    fn fill(&mut self, store: &Store) -> io::Result<()> {
        if self.buf.len() - self.p < MAX_NUM && !self.left.is_empty() {
            self.buf.drain(..self.p);
            self.p = 0;
            let n = (self.left.end - self.left.start).min(READ_BUF as u64) as usize;
            let have = self.buf.len();
            self.buf.resize(have + n, 0);
            store.read_at(self.left.start, &mut self.buf[have..])?;
            self.left.start += n as u64;
        }
        Ok(())
    }

    fn wide(&mut self, store: &Store) -> io::Result<u128> {
        self.fill(store)?;
        varint::get_wide(&self.buf, &mut self.p).ok_or_else(|| damaged("bad number"))
    }

    fn num(&mut self, store: &Store) -> io::Result<u64> {
        self.fill(store)?;
        varint::get(&self.buf, &mut self.p).ok_or_else(|| damaged("bad number"))
    }

    /// Moves to the next key: its value, or `None` at the run's end.
    fn next_key(&mut self, store: &Store) -> io::Result<Option<u128>> {
        if self.p == self.buf.len() && self.left.is_empty() {
            return Ok(None);
        }
        self.value = self
            .value
            .checked_add(self.wide(store)?)
            .ok_or_else(|| damaged("value out of range"))?;
        self.count = self.num(store)?;
        Ok(Some(self.value))
    }

    /// Appends the current key's groups to `out`.
    fn groups(&mut self, store: &Store, out: &mut Vec<u32>) -> io::Result<()> {
        let mut prev = -1i64;
        for _ in 0..self.count {
            let d = self.num(store)?;
            let g = (prev + 1)
                .checked_add(i64::try_from(d).map_err(|_| damaged("bad group"))?)
                .filter(|&g| g <= u32::MAX as i64)
                .ok_or_else(|| damaged("group out of range"))?;
            out.push(g as u32);
            prev = g;
        }
        self.count = 0;
        Ok(())
    }
}

/// Merges `runs` (of one kind, in group order) into one list per key, in
/// key order: `list(value, groups)`. `groups` is scratch.
pub(crate) fn merge(
    store: &Store,
    runs: &[Range<u64>],
    groups: &mut Vec<u32>,
    mut list: impl FnMut(u128, &[u32]),
) -> io::Result<()> {
    let mut readers: Vec<RunReader> = runs.iter().cloned().map(RunReader::new).collect();
    // The next key of each run; equal keys come out in run order.
    let mut heap = BinaryHeap::with_capacity(readers.len());
    for (i, r) in readers.iter_mut().enumerate() {
        if let Some(v) = r.next_key(store)? {
            heap.push(Reverse((v, i)));
        }
    }
    let mut current = None;
    groups.clear();
    while let Some(Reverse((v, i))) = heap.pop() {
        if current != Some(v) {
            if let Some(c) = current {
                list(c, groups);
            }
            groups.clear();
            current = Some(v);
        }
        let before = groups.last().copied();
        let from = groups.len();
        readers[i].groups(store, groups)?;
        // Runs hold disjoint, increasing groups.
        if let (Some(b), Some(&first)) = (before, groups.get(from)) {
            if first <= b {
                return Err(damaged("runs out of order"));
            }
        }
        if let Some(next) = readers[i].next_key(store)? {
            heap.push(Reverse((next, i)));
        }
    }
    if let Some(c) = current {
        list(c, groups);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(lists: &[(u128, Vec<u32>)]) -> Vec<u8> {
        let mut b = Vec::new();
        let mut w = RunWriter::new(&mut b);
        for (v, g) in lists {
            w.list(*v, g);
        }
        b
    }

    #[test]
    fn runs_merge_in_memory_and_spilled() {
        let a = vec![(1u128, vec![0, 3]), (7, vec![2]), (u128::MAX, vec![1])];
        let b = vec![(0u128, vec![5]), (7, vec![4, 9]), (8, vec![6])];
        let want = vec![
            (0u128, vec![5]),
            (1, vec![0, 3]),
            (7, vec![2, 4, 9]),
            (8, vec![6]),
            (u128::MAX, vec![1]),
        ];
        for spill in [usize::MAX, 0] {
            let mut s = Store::new(spill);
            let runs = vec![
                s.append(&run_of(&a)).unwrap(),
                s.append(&run_of(&b)).unwrap(),
            ];
            assert_eq!(s.spilled(), spill == 0);
            let mut got = Vec::new();
            merge(&s, &runs, &mut Vec::new(), |v, g| got.push((v, g.to_vec()))).unwrap();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn damaged_runs_are_refused() {
        let mut s = Store::new(usize::MAX);
        let good = run_of(&[(3, vec![1, 2])]);
        let r1 = s.append(&good).unwrap();
        // The second run repeats a group of the first: out of order.
        let r2 = s.append(&good).unwrap();
        assert!(merge(&s, &[r1.clone(), r2], &mut Vec::new(), |_, _| {}).is_err());
        // Cut short.
        let cut = s.append(&good[..good.len() - 1]).unwrap();
        assert!(merge(&s, &[cut], &mut Vec::new(), |_, _| {}).is_err());
        let past = std::iter::once(r1.start..r1.end + 1000).collect::<Vec<_>>();
        assert!(merge(&s, &past, &mut Vec::new(), |_, _| {}).is_err());
    }
}
