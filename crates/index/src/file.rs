//! The index file format, version 2 (all integers little-endian).
//!
//! ```text
//! header (72 bytes)
//!    0  magic "RCAPIDX\n"
//!    8  version u16 (2)            10  header length u16 (72)
//!   12  flags u32 (0)
//!   16  length of the capture file covered, u64
//!   24  CRC-32 of its first min(4096, length) bytes, u32
//!   28  groups u32                 32  packets u64
//!   40  first packet's timestamp u64 (ns since the epoch)
//!   48  smallest timestamp u64     56  largest timestamp u64
//!   64  body length u64
//! body
//!   epochs: n, then n × (first group, pcapng sections, interfaces)
//!   groups: for each: file offset − previous offset, zigzag(min ts −
//!           previous min ts), max ts − min ts, records
//!   keys:   for each kind present: kind u8, n, posting bytes P; a table
//!           of n keys in increasing order, each its value (big-endian,
//!           Kind::width bytes) and where its postings end (u32, within
//!           the kind's P bytes; each key's start where the previous ended);
//!           then the P bytes of postings (per key: group − previous group
//!           − 1, the first from −1)
//!   (every count and number above but the table's is an unsigned LEB128
//!   varint)
//! trailer
//!   CRC-32 of everything before it, u32
//! ```
//!
//! A group is a run of consecutive records; its offset is where the reader
//! stood before reading its first packet (so pcapng interface blocks just
//! before it are read again on a jump there). An epoch says how many pcapng
//! sections and interfaces a reader has seen at the start of a group: a
//! jump is only taken when the reader has seen the same (see `query`).
//!
//! The key table has a fixed width so that a lookup is a binary search in
//! place: reading an index checks its checksum and decodes its groups, but
//! never walks its keys (version 1 had variable-width entries, and walking
//! 100,000 of them was most of a selective query's time).
//!
//! Reading refuses, with a message saying which, a file that is not an
//! index, a version this code does not know, a length or checksum that do
//! not add up, and any field out of range: it never panics.

use std::fmt;
use std::ops::Range;

use crate::keys::{Key, Kind};
use crate::varint;

/// The first 8 bytes of every index file.
pub const MAGIC: &[u8; 8] = b"RCAPIDX\n";
/// The format version this code writes and reads.
pub const VERSION: u16 = 2;
const HEADER_LEN: usize = 72;

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
}

/// Posting lists, flat: key `i`'s groups are `groups[ends[i - 1]..ends[i]]`
/// (from 0 for the first). One allocation for all of a file's lists, not
/// one per key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostingLists {
    /// The keys, sorted.
    pub keys: Vec<Key>,
    /// Where each key's groups end.
    pub ends: Vec<u32>,
    /// Every key's groups, sorted and distinct within a key.
    pub groups: Vec<u32>,
}

impl PostingLists {
    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True without keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Appends a key (greater than every key so far) and its groups.
    pub fn push(&mut self, key: Key, groups: &[u32]) {
        self.groups.extend_from_slice(groups);
        self.keys.push(key);
        self.ends.push(self.groups.len() as u32);
    }

    /// Each key with its groups, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (Key, &[u32])> + '_ {
        self.keys.iter().enumerate().map(|(i, &k)| {
            let from = if i == 0 { 0 } else { self.ends[i - 1] as usize };
            (k, &self.groups[from..self.ends[i] as usize])
        })
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
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
    let (mut off, mut ts) = (0u64, 0u64);
    for g in &c.groups {
        varint::put(&mut body, g.offset - off);
        varint::put(&mut body, zigzag(g.min_ts.wrapping_sub(ts) as i64));
        varint::put(&mut body, g.max_ts - g.min_ts);
        varint::put(&mut body, g.records as u64);
        off = g.offset;
        ts = g.min_ts;
    }
    let mut postings = Vec::new();
    let mut table = Vec::new();
    for kind in Kind::ALL {
        let w = kind.width();
        postings.clear();
        table.clear();
        let mut n = 0u64;
        for (k, groups) in c.postings.iter().filter(|(k, _)| k.kind == kind) {
            let mut prev = -1i64;
            for &g in groups {
                varint::put(&mut postings, (g as i64 - prev - 1) as u64);
                prev = g as i64;
            }
            table.extend_from_slice(&k.value.to_be_bytes()[16 - w..]);
            table.extend_from_slice(&(postings.len() as u32).to_le_bytes());
            n += 1;
        }
        if n == 0 {
            continue;
        }
        body.push(kind as u8);
        varint::put(&mut body, n);
        varint::put(&mut body, postings.len() as u64);
        body.extend_from_slice(&table);
        body.extend_from_slice(&postings);
    }
    let mut out = Vec::with_capacity(HEADER_LEN + body.len() + 4);
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
    out
}

/// One kind's keys in the file: its table of `count` fixed-width entries
/// and its postings.
#[derive(Debug, Clone, Default)]
struct Section {
    table: Range<usize>,
    count: usize,
    postings: Range<usize>,
}

/// A parsed index file. Keys and postings stay coded until a lookup needs
/// them: a lookup is a binary search in the kind's table, then the
/// postings of the keys found are decoded.
#[derive(Debug, Clone)]
pub struct Index {
    raw: Vec<u8>,
    /// See [`Summary`].
    pub summary: Summary,
    /// Groups, in file order.
    pub groups: Vec<Group>,
    /// Epochs, in group order.
    pub epochs: Vec<Epoch>,
    /// Key sections per kind (indexed by `Kind as usize`), values sorted.
    keys: [Section; 6],
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

impl Index {
    /// Parses and checks an index file's bytes.
    pub fn parse(raw: Vec<u8>) -> Result<Index, IndexError> {
        if raw.len() < 8 || &raw[..8] != MAGIC {
            return Err(IndexError::NotIndex);
        }
        if raw.len() < 12 {
            return Err(damaged("cut short in the header"));
        }
        let version = u16::from_le_bytes([raw[8], raw[9]]);
        if version != VERSION {
            return Err(IndexError::Version(version));
        }
        if raw.len() < HEADER_LEN + 4 {
            return Err(damaged("cut short in the header"));
        }
        let header_len = u16::from_le_bytes([raw[10], raw[11]]) as usize;
        let flags = le_u32(&raw, 12);
        if header_len != HEADER_LEN || flags != 0 {
            return Err(damaged(format!(
                "header length {header_len} / flags {flags:#x} unknown to version {VERSION}"
            )));
        }
        let body_len = le_u64(&raw, 64);
        if body_len != (raw.len() - HEADER_LEN - 4) as u64 {
            return Err(damaged(format!(
                "{} bytes, the header says {}",
                raw.len(),
                body_len.saturating_add(HEADER_LEN as u64 + 4)
            )));
        }
        let end = raw.len() - 4;
        if crc32fast::hash(&raw[..end]) != le_u32(&raw, end) {
            return Err(damaged("checksum mismatch"));
        }
        let summary = Summary {
            capture_len: le_u64(&raw, 16),
            head_crc: le_u32(&raw, 24),
            packets: le_u64(&raw, 32),
            first_ts: le_u64(&raw, 40),
            min_ts: le_u64(&raw, 48),
            max_ts: le_u64(&raw, 56),
        };
        let ngroups = le_u32(&raw, 28);
        let mut c = Cursor {
            b: &raw[..end],
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
        if ngroups as usize > c.b.len() / 4 {
            return Err(damaged("more groups than bytes"));
        }
        let mut groups = Vec::with_capacity(ngroups as usize);
        let (mut off, mut ts) = (0u64, 0u64);
        for _ in 0..ngroups {
            let d = c.num("group offset")?;
            off = off
                .checked_add(d)
                .filter(|&o| o <= summary.capture_len)
                .ok_or_else(|| damaged("group offset past the file"))?;
            ts = ts.wrapping_add(unzigzag(c.num("group time")?) as u64);
            let span = c.num("group span")?;
            let records = c.small("group records", u32::MAX as u64)?;
            let max_ts = ts
                .checked_add(span)
                .ok_or_else(|| damaged("group time out of range"))?;
            groups.push(Group {
                offset: off,
                min_ts: ts,
                max_ts,
                records,
            });
        }
        let mut keys: [Section; 6] = Default::default();
        let mut seen = [false; 6];
        while c.p < c.b.len() {
            let code = c.b[c.p];
            c.p += 1;
            let kind =
                Kind::from_code(code).ok_or_else(|| damaged(format!("unknown key kind {code}")))?;
            if std::mem::replace(&mut seen[kind as usize], true) {
                return Err(damaged("a key kind twice"));
            }
            let left = (c.b.len() - c.p) as u64;
            let n = c.small("key count", left)? as usize;
            let plen = c.small("posting bytes", left)? as usize;
            let table = c.take(n * (kind.width() + 4), "key table")?;
            let postings = c.take(plen, "postings")?;
            keys[kind as usize] = Section {
                table,
                count: n,
                postings,
            };
        }
        Ok(Index {
            raw,
            summary,
            groups,
            epochs,
            keys,
        })
    }

    /// Number of distinct keys of a kind.
    pub fn key_count(&self, kind: Kind) -> usize {
        self.keys[kind as usize].count
    }

    /// Adds to `out` (a flag per group) every group holding a key of `kind`
    /// with a value in `lo..=hi`. Fails on postings that do not decode to
    /// group numbers of this index.
    pub fn mark(&self, kind: Kind, lo: u128, hi: u128, out: &mut [bool]) -> Result<(), IndexError> {
        let sec = &self.keys[kind as usize];
        let w = kind.width();
        let table = &self.raw[sec.table.clone()];
        let postings = &self.raw[sec.postings.clone()];
        let value = |i: usize| {
            table[i * (w + 4)..i * (w + 4) + w]
                .iter()
                .fold(0u128, |v, &b| v << 8 | b as u128)
        };
        let end = |i: usize| le_u32(table, i * (w + 4) + w) as usize;
        // The table is sorted (a damaged one can only make the search
        // miss, never read outside it: the checksum guards against that).
        let (mut a, mut b) = (0, sec.count);
        while a < b {
            let m = a + (b - a) / 2;
            if value(m) < lo {
                a = m + 1;
            } else {
                b = m;
            }
        }
        for i in a..sec.count {
            if value(i) > hi {
                break;
            }
            let from = if i == 0 { 0 } else { end(i - 1) };
            let to = end(i);
            let list = postings
                .get(from..to)
                .ok_or_else(|| damaged("postings out of range"))?;
            let mut p = 0;
            let mut g = -1i64;
            while p < list.len() {
                let d = varint::get(list, &mut p).ok_or_else(|| damaged("bad posting"))?;
                g = g
                    .checked_add(d as i64 + 1)
                    .filter(|&g| (g as usize) < out.len())
                    .ok_or_else(|| damaged("posting past the last group"))?;
                out[g as usize] = true;
            }
        }
        Ok(())
    }

    /// The reader state at the start of group `g`.
    pub fn epoch_of(&self, g: usize) -> Epoch {
        epoch_of(&self.epochs, g)
    }

    /// The file's bytes back, for the next index to be read into.
    pub fn into_raw(self) -> Vec<u8> {
        self.raw
    }

    /// Size of the index file in bytes.
    pub fn file_len(&self) -> usize {
        self.raw.len()
    }
}
