//! The index file format, version 6 (all integers little-endian).
//!
//! ```text
//! header (72 bytes)
//!    0  magic "RCAPIDX\n"
//!    8  version u16 (6)            10  header length u16 (72)
//!   12  flags u32 (0)
//!   16  length of the capture file covered, u64
//!   24  CRC-32 of its first min(4096, length) bytes, u32
//!   28  groups u32                 32  packets u64
//!   40  first packet's timestamp u64 (ns since the epoch)
//!   48  smallest timestamp u64     56  largest timestamp u64
//!   64  head length u64
//! head
//!   epochs: n, then n × (first group, pcapng sections, interfaces)
//!   tick: the unit of the groups' times in their pages, ns (1000 when
//!         every group's times are whole microseconds, else 1)
//!   groups: section bytes G, then a fence per page of 256 groups: its
//!           first group's offset u64 and min ts u64, the smallest min ts
//!           and the largest max ts of its groups (u64, u64), where the
//!           page starts (u32, within G; it ends where the next starts,
//!           the last at G) and the CRC-32 of the page's bytes (u32)
//!   kinds:  n, then for each kind present: kind u8, keys, section bytes
//!           S, then a fence per block of 256 keys: its first key's value
//!           (big-endian, Kind::width bytes), where the block starts (u32,
//!           within S; it ends where the next starts, the last at S) and
//!           the CRC-32 of the block's bytes (u32)
//!   positions: the keys whose packets' offsets are listed too, with a
//!         CRC-32 of each list (`file/exact.rs`)
//!   (every count and number above but the fences' is an unsigned LEB128
//!   varint)
//! CRC-32 of the header and the head, u32
//! the G bytes of group pages; in a page, for each group: file offset −
//!   previous offset, zigzag(min ts − previous min ts) (the first group's
//!   from the page's fence: both 0), max ts − min ts (both in ticks),
//!   records (LEB128)
//! then for each kind, in the order of the head, its S bytes of blocks;
//! in a block, for each key in increasing order:
//!   a tag (LEB128): a number × 4 + SAME (2) + NEXT (1). NEXT: the key's
//!   value is the previous key's + 1; else, but for a block's first key
//!   (whose value is its fence's; NEXT clear), the value − the previous
//!   key's value follows (LEB128, up to 128 bits). Without SAME the number
//!   is n, the groups holding the key, and an Elias-Fano list of n numbers
//!   below the file's group count follows, its length in bytes given by the
//!   two (`file/lists.rs`); with SAME the key has the groups of the key that
//!   number of keys before it (at least 1; keys are numbered from 0 over
//!   the sections in the order of the head), a key with a list of its own
//!   (`file/shared.rs`)
//! then the lists of positions, in the order of the head (`file/exact.rs`)
//! ```
//!
//! A group is a run of consecutive records; its offset is where the reader
//! stood before reading its first packet (so pcapng interface blocks just
//! before it are read again on a jump there). An epoch says how many pcapng
//! sections and interfaces a reader has seen at the start of a group: a
//! jump is only taken when the reader has seen the same (see `query`).
//!
//! Opening an index reads and checks the header and the head: epochs and
//! fences, about 1 % of the index. A lookup binary-searches a kind's fences,
//! then reads, checks and walks the one block (or the few blocks of a
//! range) its keys are in; a query then reads the pages of groups holding
//! candidates (or overlapping its time window). So a selective query reads
//! a few kilobytes of each index. Version 2 had one checksum for the whole
//! file, so every query read and checked all of every index (5.7 MB per
//! 250 MB file of 100,000 flows). Version 3 read the whole group table at
//! opening (~200 KB for such a file: decoding it was most of a warm
//! selective query's CPU over 10 GB) and had fixed-width key tables (the
//! value and a u32 postings end per key: 8 bytes per IPv4 address); the
//! deltas and lengths of version 4 took about 2 bytes for the same key (the
//! retrieval bench's files of 100,000 flows: 3.05 % of the pcap bytes ->
//! 2.07 %), and walking 256 keys of a block costs less than the read that
//! brought it. Version 4 coded each list as LEB128 gaps after its length in
//! bytes (~2 bytes a group of an address's list, and a byte a group of a
//! port in every group); version 5's Elias-Fano lists take ~2 + log2(gap)
//! bits a group and no length (`file/lists.rs`). Version 6 adds the
//! packets' positions for the few keys a query would otherwise read many
//! whole groups for (`file/exact.rs`).
//!
//! Reading refuses, with a message saying which, a file that is not an
//! index, a version this code does not know, a length or checksum that do
//! not add up, and any field out of range: it never panics.

use std::fmt;
use std::ops::Range;

use crate::keys::{Key, Kind};
use crate::varint;

pub mod exact;
mod lists;
mod read;
mod reseal;
mod shared;
mod store;
pub use exact::Positions;
pub use read::{Index, Page};
pub use reseal::reseal;

/// The first 8 bytes of every index file.
pub const MAGIC: &[u8; 8] = b"RCAPIDX\n";
/// The format version this code writes and reads.
pub const VERSION: u16 = 6;
const HEADER_LEN: usize = 72;
/// Keys per checked block of a kind's table.
pub(crate) const BLOCK: usize = 256;
/// Groups per checked page.
pub(crate) const PAGE: usize = 256;
/// Bytes of a page's fence.
pub(crate) const PAGE_FENCE: usize = 40;

/// One group of records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// Byte offset in the capture file.
    pub offset: u64,
    /// Smallest timestamp of its packets (ns).
    pub min_ts: u64,
    /// Largest timestamp of its packets (ns).
    pub max_ts: u64,
    /// Number of packets.
    pub records: u32,
}

/// Reader state at the start of a group (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    /// First group with this state.
    pub group: u32,
    /// pcapng sections seen (1 for pcap).
    pub sections: u32,
    /// Interfaces seen.
    pub interfaces: u32,
}

/// What an index says about its capture file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Length of the capture file covered.
    pub capture_len: u64,
    /// CRC-32 of the capture file's first min(4096, length) bytes.
    pub head_crc: u32,
    /// Packets indexed.
    pub packets: u64,
    /// Timestamp of the first packet (ns; 0 if none).
    pub first_ts: u64,
    /// Smallest timestamp (ns; 0 if none).
    pub min_ts: u64,
    /// Largest timestamp (ns; 0 if none).
    pub max_ts: u64,
}

/// Why an index file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexError {
    /// It does not start with [`MAGIC`].
    NotIndex,
    /// A version this code does not read.
    Version(u16),
    /// Lengths, checksum or fields do not add up.
    Damaged(String),
    /// Reading the index file failed.
    Io(String),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::NotIndex => write!(f, "not a ringcap index file (no RCAPIDX magic)"),
            IndexError::Version(v) => write!(
                f,
                "index format version {v}, but this ringcap reads only version {VERSION} \
                 (rebuild it with `ringcap index --force`)"
            ),
            IndexError::Damaged(m) => write!(f, "damaged index file: {m}"),
            IndexError::Io(m) => write!(f, "reading the index file: {m}"),
        }
    }
}

impl std::error::Error for IndexError {}

fn damaged(m: impl Into<String>) -> IndexError {
    IndexError::Damaged(m.into())
}

/// The parts of an index a builder has collected, ready to be written.
#[derive(Debug, Default)]
pub struct Contents {
    /// See [`Summary`].
    pub summary: Option<Summary>,
    /// Groups, in file order.
    pub groups: Vec<Group>,
    /// Epochs, in group order (at least one if there are groups).
    pub epochs: Vec<Epoch>,
    /// Every key with its sorted, distinct group numbers, sorted by key.
    pub postings: PostingLists,
    /// The keys whose packets' positions are listed too ([`exact`]).
    pub positions: Positions,
}

/// Posting lists, coded as they are added: each kind's section of key
/// blocks and the fences of its blocks, exactly as they go into the file
/// (see the layout above). A file's lists never exist as arrays of numbers
/// (4 bytes a group and 32 a key: more than the pairs they came from), only
/// as the index's own bytes (~1.6 bytes a group). A list equal to one
/// written before is written as a reference to that key (see the layout).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostingLists {
    /// One per kind present, in kind order.
    sections: Vec<Section>,
    /// The file's group count: every group number is below it.
    universe: u32,
    /// Keys so far, all kinds.
    keys: usize,
    /// Per key: where its entry and its list start and where they end in
    /// its section.
    entries: Vec<(u32, u32, u32)>,
    /// `checksum << 32 | key` of each list of [`SHARED_MIN`] bytes or
    /// more: sorted, they bring equal lists together ([`shared`]).
    ids: Vec<u64>,
    /// The keys that may get their packets' positions ([`exact`]).
    pub(crate) picks: exact::Picks,
}

/// A key entry's tag: the key's value is the one before's + 1 (no delta
/// follows).
pub(crate) const NEXT: u64 = 1;
/// A key entry's tag: the key has the groups of a key before (the tag's
/// number is how many keys back), not a list of its own.
pub(crate) const SAME: u64 = 2;

/// Bytes of a list below which it is never looked for among the others
/// (a reference takes 2-4 bytes: it would save a byte or two at best).
const SHARED_MIN: usize = 6;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    kind: Kind,
    keys: usize,
    prev: u128,
    bytes: Vec<u8>,
    /// Fences; the last block's checksum is left for [`encode`].
    fences: Vec<u8>,
}

impl PostingLists {
    /// Lists of the groups of a file of `groups` groups.
    pub fn new(groups: u32) -> PostingLists {
        PostingLists {
            universe: groups,
            ..PostingLists::default()
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys
    }

    /// True without keys.
    pub fn is_empty(&self) -> bool {
        self.sections.is_empty()
    }

    /// Appends a key, greater than every key so far, and its groups
    /// (sorted, distinct, each below the file's group count).
    pub fn push(&mut self, key: Key, groups: &[u32]) {
        if self.sections.last().is_none_or(|s| s.kind != key.kind) {
            debug_assert!(self.sections.last().is_none_or(|s| s.kind < key.kind));
            self.sections.push(Section {
                kind: key.kind,
                keys: 0,
                prev: 0,
                bytes: Vec::new(),
                fences: Vec::new(),
            });
        }
        self.picks.offer(key, groups, self.universe);
        let section = self.sections.len() - 1;
        let s = &mut self.sections[section];
        let w = key.kind.width();
        let at = s.bytes.len();
        let first = s.keys.is_multiple_of(BLOCK);
        let step = key.value.wrapping_sub(s.prev);
        if first {
            if s.keys > 0 {
                // The block before is whole: its checksum.
                let f = s.fences.len() - (w + 8);
                let start = le_u32(&s.fences, f + w) as usize;
                let crc = crc32fast::hash(&s.bytes[start..]);
                s.fences[f + w + 4..].copy_from_slice(&crc.to_le_bytes());
            }
            s.fences
                .extend_from_slice(&key.value.to_be_bytes()[16 - w..]);
            s.fences
                .extend_from_slice(&(s.bytes.len() as u32).to_le_bytes());
            s.fences.extend_from_slice(&[0; 4]);
        }
        debug_assert!(first || key.value > s.prev);
        let next = !first && step == 1;
        varint::put(&mut s.bytes, (groups.len() as u64) << 2 | next as u64);
        if !first && !next {
            varint::put_wide(&mut s.bytes, step);
        }
        s.prev = key.value;
        s.keys += 1;
        let list = s.bytes.len();
        lists::encode(groups, self.universe, &mut s.bytes);
        if s.bytes.len() - list >= SHARED_MIN {
            let mut sum = crc32fast::Hasher::new();
            sum.update(&(groups.len() as u64).to_le_bytes());
            sum.update(&s.bytes[list..]);
            self.ids
                .push((sum.finalize() as u64) << 32 | self.keys as u64);
        }
        self.entries
            .push((at as u32, list as u32, s.bytes.len() as u32));
        self.keys += 1;
    }

    /// Writes each list equal to one before it as a reference to that one
    /// ([`shared`]); `scratch` is for the sort. Called once, after the
    /// last key.
    pub(crate) fn share(&mut self, scratch: &mut Vec<u64>) {
        shared::share(self, scratch);
    }

    /// Each key with its groups, in key order (decoded again: for tests).
    #[doc(hidden)]
    pub fn decoded(&self) -> Vec<(Key, Vec<u32>)> {
        let mut out: Vec<(Key, Vec<u32>)> = Vec::new();
        let u = self.universe as u64;
        for s in &self.sections {
            let w = s.kind.width();
            let (mut p, mut value) = (0, 0u128);
            for i in 0..s.keys {
                let Ok((step, entry)) = entry(&s.bytes, &mut p, i % BLOCK == 0, out.len(), u)
                else {
                    return out;
                };
                if i % BLOCK == 0 {
                    let f = &s.fences[(i / BLOCK) * (w + 8)..];
                    let mut v = [0u8; 16];
                    v[16 - w..].copy_from_slice(&f[..w]);
                    value = u128::from_be_bytes(v);
                } else {
                    value += step;
                }
                let mut groups = Vec::new();
                match entry {
                    Entry::Same(k) => groups.clone_from(&out[k].1),
                    Entry::List(n, list) => {
                        let _ = lists::decode(list, n, u, |g| groups.push(g));
                    }
                }
                out.push((
                    Key {
                        kind: s.kind,
                        value,
                    },
                    groups,
                ));
            }
        }
        out
    }
}

/// What a key block says of a key's groups.
pub(crate) enum Entry<'a> {
    /// This many, coded in these bytes.
    List(u64, &'a [u8]),
    /// Those of the key of this number (over all kinds), before it.
    Same(usize),
}

/// The entry at `*p` of a key block (see the layout), moving `*p` past it:
/// its value's step from the key before (0 for a block's `first` key, whose
/// value is its fence's) and its groups, for key number `key` of a file of
/// `universe` groups. Refuses a step of 0, a count of 0 or above the
/// groups, a list cut short, and a reference to no key before.
pub(crate) fn entry<'a>(
    block: &'a [u8],
    p: &mut usize,
    first: bool,
    key: usize,
    universe: u64,
) -> Result<(u128, Entry<'a>), IndexError> {
    let tag = varint::get(block, p).ok_or_else(|| damaged("bad key entry"))?;
    let step = match (first, tag & NEXT != 0) {
        (true, true) => return Err(damaged("a block's first key follows another")),
        (true, false) => 0,
        (false, true) => 1,
        (false, false) => varint::get_wide(block, p)
            .filter(|&d| d > 0)
            .ok_or_else(|| damaged("bad key in a key block"))?,
    };
    let entry = if tag & SAME != 0 {
        let back = usize::try_from(tag >> 2)
            .ok()
            .filter(|&d| d >= 1 && d <= key)
            .ok_or_else(|| damaged("bad reference to a key before"))?;
        Entry::Same(key - back)
    } else {
        let count = Some(tag >> 2)
            .filter(|&c| c >= 1 && c <= universe)
            .ok_or_else(|| damaged("bad postings count"))?;
        let list = lists::coded_len(count, universe)
            .and_then(|len| block.get(*p..p.checked_add(len)?))
            .ok_or_else(|| damaged("postings run past their block"))?;
        *p += list.len();
        Entry::List(count, list)
    };
    Ok((step, entry))
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Encodes an index file.
pub fn encode(c: &Contents) -> Vec<u8> {
    let s = c.summary.clone().unwrap_or(Summary {
        capture_len: 0,
        head_crc: 0,
        packets: 0,
        first_ts: 0,
        min_ts: 0,
        max_ts: 0,
    });
    let mut body = Vec::new();
    varint::put(&mut body, c.epochs.len() as u64);
    for e in &c.epochs {
        varint::put(&mut body, e.group as u64);
        varint::put(&mut body, e.sections as u64);
        varint::put(&mut body, e.interfaces as u64);
    }
    // The groups, in pages, and their fences in the head; their times in
    // microseconds when all are (pcap files).
    let tick = if c
        .groups
        .iter()
        .all(|g| g.min_ts % 1000 == 0 && g.max_ts % 1000 == 0)
    {
        1000
    } else {
        1
    };
    varint::put(&mut body, tick);
    let mut pages = Vec::new();
    let mut fences = Vec::new();
    for page in c.groups.chunks(PAGE) {
        let start = pages.len();
        let (mut off, mut ts) = (page[0].offset, page[0].min_ts);
        for g in page {
            varint::put(&mut pages, g.offset - off);
            varint::put(
                &mut pages,
                zigzag(g.min_ts.wrapping_sub(ts) as i64 / tick as i64),
            );
            varint::put(&mut pages, (g.max_ts - g.min_ts) / tick);
            varint::put(&mut pages, g.records as u64);
            off = g.offset;
            ts = g.min_ts;
        }
        let lo = page.iter().map(|g| g.min_ts).min().unwrap_or(0);
        let hi = page.iter().map(|g| g.max_ts).max().unwrap_or(0);
        for v in [page[0].offset, page[0].min_ts, lo, hi] {
            fences.extend_from_slice(&v.to_le_bytes());
        }
        fences.extend_from_slice(&(start as u32).to_le_bytes());
        fences.extend_from_slice(&crc32fast::hash(&pages[start..]).to_le_bytes());
    }
    varint::put(&mut body, pages.len() as u64);
    body.extend_from_slice(&fences);
    // The kinds' blocks, and their entries in the head.
    let mut kinds = Vec::new();
    let mut nsections = 0u64;
    let mut sections_len = 0usize;
    for s in &c.postings.sections {
        nsections += 1;
        kinds.push(s.kind as u8);
        varint::put(&mut kinds, s.keys as u64);
        varint::put(&mut kinds, s.bytes.len() as u64);
        kinds.extend_from_slice(&s.fences);
        // The last block's checksum.
        let w = s.kind.width();
        let start = le_u32(&s.fences, s.fences.len() - (w + 8) + w) as usize;
        let at = kinds.len() - 4;
        kinds[at..].copy_from_slice(&crc32fast::hash(&s.bytes[start..]).to_le_bytes());
        sections_len += s.bytes.len();
    }
    varint::put(&mut body, nsections);
    body.extend_from_slice(&kinds);
    let mut positions = Vec::new();
    exact::put(&c.positions, s.capture_len, &mut body, &mut positions);
    let mut out = Vec::with_capacity(HEADER_LEN + body.len() + 4 + pages.len() + sections_len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&s.capture_len.to_le_bytes());
    out.extend_from_slice(&s.head_crc.to_le_bytes());
    out.extend_from_slice(&(c.groups.len() as u32).to_le_bytes());
    out.extend_from_slice(&s.packets.to_le_bytes());
    out.extend_from_slice(&s.first_ts.to_le_bytes());
    out.extend_from_slice(&s.min_ts.to_le_bytes());
    out.extend_from_slice(&s.max_ts.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&pages);
    for s in &c.postings.sections {
        out.extend_from_slice(&s.bytes);
    }
    out.extend_from_slice(&positions);
    out
}

struct Cursor<'a> {
    b: &'a [u8],
    p: usize,
}

impl Cursor<'_> {
    fn num(&mut self, what: &str) -> Result<u64, IndexError> {
        varint::get(self.b, &mut self.p).ok_or_else(|| damaged(format!("bad number ({what})")))
    }
    fn small(&mut self, what: &str, max: u64) -> Result<u32, IndexError> {
        let v = self.num(what)?;
        if v > max {
            return Err(damaged(format!("{what} {v} out of range")));
        }
        Ok(v as u32)
    }
    fn take(&mut self, n: usize, what: &str) -> Result<Range<usize>, IndexError> {
        let end = self
            .p
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| damaged(format!("{what} runs past the end")))?;
        let r = self.p..end;
        self.p = end;
        Ok(r)
    }
}

/// The reader state at the start of group `g`, from an index's epochs.
pub fn epoch_of(epochs: &[Epoch], g: usize) -> Epoch {
    let i = epochs.partition_point(|e| e.group as usize <= g);
    epochs[i.saturating_sub(1)]
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
