//! Reading an index file (the format is in the [parent module](super)):
//! the header and the head (summary, epochs, groups, fences) when it is
//! opened, a kind's keys and postings one checked block at a time when a
//! lookup needs them.

use std::fs::File;

use super::exact::{self, Exact};
use super::lists;
use super::store::Store;
use super::{
    damaged, le_u32, le_u64, Cursor, Entry, Epoch, Group, IndexError, Summary, BLOCK, HEADER_LEN,
    MAGIC, PAGE, PAGE_FENCE, VERSION,
};
use crate::keys::{Key, Kind};

/// One kind's keys: where its blocks are, and its fences.
#[derive(Debug, Clone, Default)]
struct Section {
    count: usize,
    /// Its first key's number over all kinds (in the order of the head).
    base: usize,
    at: u64,
    len: usize,
    /// Where its fences are in the head.
    fences: std::ops::Range<usize>,
}

/// An index file, opened: its summary, epochs and fences are read and
/// checked; groups, keys and postings stay in the file until a query reads
/// the pages and blocks it needs (a binary search in the fences, then a
/// walk of a block or a page).
#[derive(Debug)]
pub struct Index {
    store: Store,
    /// The header and the head.
    head: Vec<u8>,
    /// See [`Summary`].
    pub summary: Summary,
    /// Epochs, in group order.
    pub epochs: Vec<Epoch>,
    groups: usize,
    /// Where the pages' fences are in the head.
    page_fences: std::ops::Range<usize>,
    /// The unit of the groups' times in their pages (ns).
    tick: u64,
    /// Where the pages are in the file, and their bytes.
    pages_at: u64,
    pages_len: usize,
    /// Key sections per kind (indexed by `Kind as usize`), values sorted.
    keys: [Section; 6],
    /// The keys with packets' positions, and where their lists start.
    exact: Exact,
    exact_at: u64,
}

/// A page of groups, as its fence in the head describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Its groups' numbers.
    pub groups: std::ops::Range<usize>,
    /// Its first group's offset in the capture file.
    pub offset: u64,
    /// Smallest timestamp of its packets (ns).
    pub min_ts: u64,
    /// Largest timestamp of its packets (ns).
    pub max_ts: u64,
}

/// A value of `w` big-endian bytes.
fn value_at(b: &[u8], at: usize, w: usize) -> u128 {
    b[at..at + w].iter().fold(0u128, |v, &x| v << 8 | x as u128)
}

impl Index {
    /// Parses and checks an index file's bytes.
    pub fn parse(raw: Vec<u8>) -> Result<Index, IndexError> {
        Index::read(Store::Bytes(raw), Vec::new())
    }

    /// Opens an index file, reading its header and head into `buf` (a
    /// buffer an earlier index gave back with [`Index::into_raw`]).
    pub fn open(f: File, buf: Vec<u8>) -> Result<Index, IndexError> {
        let len = f
            .metadata()
            .map_err(|e| IndexError::Io(e.to_string()))?
            .len();
        Index::read(Store::File(f, len), buf)
    }

    fn read(store: Store, mut head: Vec<u8>) -> Result<Index, IndexError> {
        let total = store.len();
        store.read(0, total.min(HEADER_LEN as u64) as usize, &mut head)?;
        if head.len() < 8 || &head[..8] != MAGIC {
            return Err(IndexError::NotIndex);
        }
        if head.len() < 12 {
            return Err(damaged("cut short in the header"));
        }
        let version = u16::from_le_bytes([head[8], head[9]]);
        if version != VERSION {
            return Err(IndexError::Version(version));
        }
        if head.len() < HEADER_LEN {
            return Err(damaged("cut short in the header"));
        }
        let header_len = u16::from_le_bytes([head[10], head[11]]) as usize;
        let flags = le_u32(&head, 12);
        if header_len != HEADER_LEN || flags != 0 {
            return Err(damaged(format!(
                "header length {header_len} / flags {flags:#x} unknown to version {VERSION}"
            )));
        }
        let head_end = le_u64(&head, 64)
            .checked_add(HEADER_LEN as u64 + 4)
            .filter(|&e| e <= total)
            .ok_or_else(|| damaged("the head runs past the end of the file"))?
            as usize;
        store.read(0, head_end, &mut head)?;
        let end = head_end - 4;
        if crc32fast::hash(&head[..end]) != le_u32(&head, end) {
            return Err(damaged("checksum mismatch in the head"));
        }
        let summary = Summary {
            capture_len: le_u64(&head, 16),
            head_crc: le_u32(&head, 24),
            packets: le_u64(&head, 32),
            first_ts: le_u64(&head, 40),
            min_ts: le_u64(&head, 48),
            max_ts: le_u64(&head, 56),
        };
        let ngroups = le_u32(&head, 28);
        let mut c = Cursor {
            b: &head[..end],
            p: HEADER_LEN,
        };
        let nepochs = c.small("epoch count", ngroups as u64 + 1)?;
        let mut epochs = Vec::with_capacity(nepochs as usize);
        for _ in 0..nepochs {
            let e = Epoch {
                group: c.small("epoch group", ngroups as u64)?,
                sections: c.small("sections", u32::MAX as u64)?,
                interfaces: c.small("interfaces", u32::MAX as u64)?,
            };
            if epochs.last().is_some_and(|p: &Epoch| p.group >= e.group) {
                return Err(damaged("epochs out of order"));
            }
            epochs.push(e);
        }
        if ngroups > 0 && epochs.first().map(|e| e.group) != Some(0) {
            return Err(damaged("no epoch for the first group"));
        }
        // Every group takes at least 4 bytes: the count cannot exceed that.
        if ngroups as u64 > total / 4 {
            return Err(damaged("more groups than bytes"));
        }
        let tick = c.num("tick")?;
        if tick != 1 && tick != 1000 {
            return Err(damaged(format!("tick {tick} out of range")));
        }
        let pages_len = c.small("group bytes", u32::MAX as u64)? as usize;
        let npages = (ngroups as usize).div_ceil(PAGE);
        let page_fences = c.take(npages * PAGE_FENCE, "group fences")?;
        // Pages in file order, inside the capture file and the group bytes.
        let (mut off, mut start) = (0u64, 0usize);
        for f in c.b[page_fences.clone()].chunks_exact(PAGE_FENCE) {
            let (o, st) = (le_u64(f, 0), le_u32(f, 32) as usize);
            if o < off || o > summary.capture_len || st < start || st > pages_len {
                return Err(damaged("group pages out of order"));
            }
            (off, start) = (o, st);
        }
        let pages_at = head_end as u64;
        let mut keys: [Section; 6] = Default::default();
        let mut seen = [false; 6];
        // The kinds' tables and postings follow the head, in its order.
        let mut at = pages_at + pages_len as u64;
        let mut base = 0usize;
        let nkinds = c.small("kind count", Kind::ALL.len() as u64)?;
        for _ in 0..nkinds {
            let code =
                *c.b.get(c.p)
                    .ok_or_else(|| damaged("kinds run past the head"))?;
            c.p += 1;
            let kind =
                Kind::from_code(code).ok_or_else(|| damaged(format!("unknown key kind {code}")))?;
            if std::mem::replace(&mut seen[kind as usize], true) {
                return Err(damaged("a key kind twice"));
            }
            let n = c.small("key count", u32::MAX as u64)? as usize;
            let len = c.small("section bytes", u32::MAX as u64)? as usize;
            let fences = c.take(n.div_ceil(BLOCK) * (kind.width() + 8), "fences")?;
            keys[kind as usize] = Section {
                count: n,
                base,
                at,
                len,
                fences,
            };
            at += len as u64;
            base += n;
            if at > total {
                return Err(damaged("key blocks run past the end of the file"));
            }
        }
        let (exact, exact_len) = exact::parse(&mut c, summary.capture_len)?;
        let exact_at = at;
        at = at
            .checked_add(exact_len)
            .filter(|&e| e <= total)
            .ok_or_else(|| damaged("positions run past the end of the file"))?;
        if c.p != c.b.len() || at != total {
            return Err(damaged(format!(
                "{total} bytes, the head says {at} (and {} head bytes unread)",
                c.b.len() - c.p
            )));
        }
        Ok(Index {
            store,
            head,
            summary,
            epochs,
            groups: ngroups as usize,
            page_fences,
            tick,
            pages_at,
            pages_len,
            keys,
            exact,
            exact_at,
        })
    }

    /// Number of groups.
    pub fn group_count(&self) -> usize {
        self.groups
    }

    /// Number of pages of groups.
    pub fn pages(&self) -> usize {
        self.groups.div_ceil(PAGE)
    }

    /// Page `i` (below [`Index::pages`]) as its fence says.
    pub fn page(&self, i: usize) -> Page {
        let f = &self.head[self.page_fences.start + i * PAGE_FENCE..][..PAGE_FENCE];
        Page {
            groups: i * PAGE..((i + 1) * PAGE).min(self.groups),
            offset: le_u64(f, 0),
            min_ts: le_u64(f, 16),
            max_ts: le_u64(f, 24),
        }
    }

    /// Where the groups of page `i` end in the capture file: where the next
    /// page starts, or the end of the file.
    pub fn page_end(&self, i: usize) -> u64 {
        if i + 1 < self.pages() {
            self.page(i + 1).offset
        } else {
            self.summary.capture_len
        }
    }

    /// Reads, checks and decodes page `i` (below [`Index::pages`]) into
    /// `out`: its groups, in order. Fails on a page whose checksum does not
    /// match and on groups outside what its fence says.
    pub fn read_page(&self, i: usize, out: &mut Vec<Group>) -> Result<(), IndexError> {
        let fence = &self.head[self.page_fences.start + i * PAGE_FENCE..][..PAGE_FENCE];
        let from = le_u32(fence, 32) as usize;
        let to = if i + 1 < self.pages() {
            le_u32(
                &self.head[self.page_fences.start + (i + 1) * PAGE_FENCE..],
                32,
            ) as usize
        } else {
            self.pages_len
        };
        let mut b = Vec::new();
        self.store
            .read(self.pages_at + from as u64, to - from, &mut b)?;
        if crc32fast::hash(&b) != le_u32(fence, 36) {
            return Err(damaged("checksum mismatch in a page of groups"));
        }
        let page = self.page(i);
        let end = self.page_end(i);
        let mut c = Cursor { b: &b, p: 0 };
        let (mut off, mut ts) = (page.offset, le_u64(fence, 8));
        out.clear();
        for _ in page.groups.clone() {
            off = off
                .checked_add(c.num("group offset")?)
                .filter(|&o| o <= end)
                .ok_or_else(|| damaged("group offset past its page"))?;
            let d = super::unzigzag(c.num("group time")?) as u64;
            ts = ts.wrapping_add(d.wrapping_mul(self.tick));
            let max_ts = c
                .num("group span")?
                .checked_mul(self.tick)
                .and_then(|span| ts.checked_add(span))
                .filter(|&m| ts >= page.min_ts && m <= page.max_ts)
                .ok_or_else(|| damaged("group time outside its page"))?;
            let records = c.small("group records", u32::MAX as u64)?;
            out.push(Group {
                offset: off,
                min_ts: ts,
                max_ts,
                records,
            });
        }
        if c.p != b.len() {
            return Err(damaged("page of groups longer than its groups"));
        }
        Ok(())
    }

    /// Every group, page by page (tests and tools; a query reads only the
    /// pages it needs).
    pub fn all_groups(&self) -> Result<Vec<Group>, IndexError> {
        let (mut all, mut page) = (Vec::with_capacity(self.groups), Vec::new());
        for i in 0..self.pages() {
            self.read_page(i, &mut page)?;
            all.extend_from_slice(&page);
        }
        Ok(all)
    }

    /// Checks every block of the index (group pages and key blocks): what a
    /// query reads only in part, for tools that vouch for a whole index
    /// (`ringcap index`, `ringcap repair`).
    pub fn verify(&self) -> Result<(), IndexError> {
        self.all_groups()?;
        let mut marks = vec![false; self.groups];
        for kind in Kind::ALL {
            self.mark(kind, 0, u128::MAX, &mut marks)?;
        }
        let mut at = Vec::new();
        for key in self.keys_with_positions() {
            at.clear();
            self.positions(key, &mut at)?;
        }
        Ok(())
    }

    /// Puts in `out` the offsets of the packets holding `key` and returns
    /// true if the index lists them (`file/exact.rs`); false, leaving `out`
    /// empty, if it does not (the key's groups are all there is).
    pub fn positions(&self, key: Key, out: &mut Vec<u64>) -> Result<bool, IndexError> {
        out.clear();
        let Some(e) = self.exact.find(key) else {
            return Ok(false);
        };
        let mut b = Vec::new();
        self.store.read(self.exact_at + e.from, e.len, &mut b)?;
        e.decode(&b, self.summary.capture_len, out)?;
        Ok(true)
    }

    /// How many packets' offsets the index lists for `key` (see
    /// [`Index::positions`]; nothing is read).
    pub fn positions_count(&self, key: Key) -> Option<u64> {
        self.exact.find(key).map(|e| e.count)
    }

    /// The keys whose packets' offsets the index lists, in key order.
    pub fn keys_with_positions(&self) -> Vec<Key> {
        self.exact.keys().collect()
    }

    /// Number of distinct keys of a kind.
    pub fn key_count(&self, kind: Kind) -> usize {
        self.keys[kind as usize].count
    }

    /// Adds to `out` (a flag per group: [`Index::group_count`] of them)
    /// every group holding a key of `kind` with a value in `lo..=hi`. Fails
    /// on a block whose checksum does not match and on a block that does
    /// not decode to increasing keys of the kind's width and group numbers
    /// of this index. A key whose list is another's reads that key's block
    /// too: each such block once, after the blocks of the range.
    pub fn mark(&self, kind: Kind, lo: u128, hi: u128, out: &mut [bool]) -> Result<(), IndexError> {
        debug_assert_eq!(out.len(), self.groups, "a flag per group");
        let sec = &self.keys[kind as usize];
        let w = kind.width();
        let fences = &self.head[sec.fences.clone()];
        let blocks = sec.count.div_ceil(BLOCK);
        let mut block = Vec::new();
        let mut refs = Vec::new();
        for b in self.blocks_of(kind, lo, hi).start..blocks {
            if value_at(fences, b * (w + 8), w) > hi {
                break;
            }
            self.read_block(kind, b, &mut block)?;
            let mut past = false;
            self.walk_block(kind, b, &block, |_, value, entry| {
                past = value > hi;
                if past {
                    return Ok(false);
                }
                if value >= lo {
                    match entry {
                        Entry::List(n, list) => self.decode(n, list, out)?,
                        Entry::Same(k) => refs.push(k),
                    }
                }
                Ok(true)
            })?;
            if past {
                break;
            }
        }
        self.resolve(refs, out)
    }

    /// Marks in `out` the groups of the keys numbered `refs` (over all
    /// kinds), each a key whose list is written in full.
    fn resolve(&self, mut refs: Vec<usize>, out: &mut [bool]) -> Result<(), IndexError> {
        refs.sort_unstable();
        refs.dedup();
        let mut block = Vec::new();
        let mut next = refs.iter().copied().peekable();
        while let Some(&k) = next.peek() {
            let (kind, i) = self.key_number(k)?;
            let b = i / BLOCK;
            self.read_block(kind, b, &mut block)?;
            let last = self.keys[kind as usize].base + (b + 1) * BLOCK;
            self.walk_block(kind, b, &block, |key, _, entry| {
                if next.peek() != Some(&key) {
                    return Ok(true);
                }
                next.next();
                match entry {
                    Entry::List(n, list) => self.decode(n, list, out)?,
                    Entry::Same(_) => return Err(damaged("a key refers to a key that refers")),
                }
                Ok(next.peek().is_some_and(|&k| k < last))
            })?;
            if next.peek() == Some(&k) {
                return Err(damaged("a key refers to a key not in its block"));
            }
        }
        Ok(())
    }

    /// The kind and the number within it of the key numbered `k` over all.
    fn key_number(&self, k: usize) -> Result<(Kind, usize), IndexError> {
        Kind::ALL
            .into_iter()
            .map(|kind| (kind, &self.keys[kind as usize]))
            .find(|(_, s)| (s.base..s.base + s.count).contains(&k))
            .map(|(kind, s)| (kind, k - s.base))
            .ok_or_else(|| damaged("a key refers past the keys"))
    }

    fn decode(&self, n: u64, list: &[u8], out: &mut [bool]) -> Result<(), IndexError> {
        lists::decode(list, n, self.groups as u64, |g| {
            if let Some(x) = out.get_mut(g as usize) {
                *x = true;
            }
        })
        .map_err(damaged)
    }

    /// Reads block `b` of `kind` into `block` and checks it.
    fn read_block(&self, kind: Kind, b: usize, block: &mut Vec<u8>) -> Result<(), IndexError> {
        let sec = &self.keys[kind as usize];
        let w = kind.width();
        let fences = &self.head[sec.fences.clone()];
        let fence = w + 8;
        let from = le_u32(fences, b * fence + w) as usize;
        let to = if b + 1 < sec.count.div_ceil(BLOCK) {
            le_u32(fences, (b + 1) * fence + w) as usize
        } else {
            sec.len
        };
        if from > to || to > sec.len {
            return Err(damaged("key block out of range"));
        }
        self.store.read(sec.at + from as u64, to - from, block)?;
        if crc32fast::hash(block) != le_u32(fences, b * fence + w + 4) {
            return Err(damaged("checksum mismatch in a key block"));
        }
        Ok(())
    }

    /// Calls `each` with the number (over all kinds), value and entry of
    /// each key of block `b` of `kind` (its bytes), in order, until it
    /// returns false. Fails on a block that does not decode to increasing
    /// keys of the kind's width, counts of groups of this index, lists of
    /// their length and references to keys before, or that holds more.
    fn walk_block(
        &self,
        kind: Kind,
        b: usize,
        block: &[u8],
        mut each: impl FnMut(usize, u128, Entry) -> Result<bool, IndexError>,
    ) -> Result<(), IndexError> {
        let sec = &self.keys[kind as usize];
        let w = kind.width();
        let fences = &self.head[sec.fences.clone()];
        let mut value = value_at(fences, b * (w + 8), w);
        let universe = self.groups as u64;
        let n = (sec.count - b * BLOCK).min(BLOCK);
        let mut p = 0;
        for i in 0..n {
            let key = sec.base + b * BLOCK + i;
            let (step, entry) = super::entry(block, &mut p, i == 0, key, universe)?;
            if i > 0 {
                value = value
                    .checked_add(step)
                    .filter(|&v| w == 16 || v >> (8 * w) == 0)
                    .ok_or_else(|| damaged("key out of range in a key block"))?;
            }
            if !each(key, value, entry)? {
                return Ok(());
            }
        }
        if p != block.len() {
            return Err(damaged("key block longer than its keys"));
        }
        Ok(())
    }

    /// The blocks of `kind` a lookup of `lo..=hi` reads: from the last
    /// whose first value is not above `lo` (the fences are sorted: a
    /// damaged head fails its checksum, and a forged one can only make the
    /// search miss) to the last whose first value is not above `hi`.
    fn blocks_of(&self, kind: Kind, lo: u128, hi: u128) -> std::ops::Range<usize> {
        let sec = &self.keys[kind as usize];
        let w = kind.width();
        let fences = &self.head[sec.fences.clone()];
        let blocks = sec.count.div_ceil(BLOCK);
        let first_above = |v: u128| {
            let (mut a, mut z) = (0, blocks);
            while a < z {
                let m = a + (z - a) / 2;
                if value_at(fences, m * (w + 8), w) <= v {
                    a = m + 1;
                } else {
                    z = m;
                }
            }
            a
        };
        first_above(lo).saturating_sub(1)..first_above(hi).min(blocks)
    }

    /// Key blocks [`Index::mark`] of the same arguments reads (found in the
    /// fences, nothing read).
    pub fn blocks_in(&self, kind: Kind, lo: u128, hi: u128) -> usize {
        self.blocks_of(kind, lo, hi).len()
    }

    /// Asks the kernel to read what [`Index::mark`] of the same arguments
    /// will read (a hint: nothing is read or checked here).
    pub fn will_need_keys(&self, kind: Kind, lo: u128, hi: u128) {
        let sec = &self.keys[kind as usize];
        let fence = kind.width() + 8;
        let b = self.blocks_of(kind, lo, hi);
        if b.is_empty() {
            return;
        }
        let start = |i: usize| {
            if i < sec.count.div_ceil(BLOCK) {
                le_u32(&self.head[sec.fences.clone()], i * fence + kind.width()) as usize
            } else {
                sec.len
            }
        };
        let (from, to) = (start(b.start), start(b.end).min(sec.len));
        self.store
            .will_need(sec.at + from as u64, to.saturating_sub(from));
    }

    /// Asks the kernel to read page `i` of groups (a hint).
    pub fn will_need_page(&self, i: usize) {
        let at = |i: usize| {
            if i < self.pages() {
                le_u32(&self.head[self.page_fences.start + i * PAGE_FENCE..], 32) as usize
            } else {
                self.pages_len
            }
        };
        let (from, to) = (at(i), at(i + 1));
        self.store
            .will_need(self.pages_at + from as u64, to.saturating_sub(from));
    }

    /// The reader state at the start of group `g`.
    pub fn epoch_of(&self, g: usize) -> Epoch {
        super::epoch_of(&self.epochs, g)
    }

    /// The buffer the head was read into, for the next index.
    pub fn into_raw(self) -> Vec<u8> {
        self.head
    }
}
