//! Packet positions: for a few keys of a file, where each packet holding
//! the key starts, besides the key's groups (format version 6).
//!
//! Why: a group is 32 records, and a key found in many groups but in one
//! packet of each (a service port: the retrieval bench's `port 3306` is in
//! 1 packet of 1,000, so in 687 of a file's 21,120 groups) made a query
//! read and filter 32 records to return one: 330 MB read and 866,112
//! packets filtered for 27,482 over the bench's 10 GB, ~0.4 s against the
//! ~0.08 s that 100x the `tcpdump -r` scan asks. Positions of every key
//! would double the index (~20 bits a packet and key, against ~7 for a
//! group); the keys that cost a query most are few, so only they get them:
//! keys in at least [`MIN_GROUPS`] groups but no more than one group in
//! [`DENSITY`] (a key in most groups: reading most of the file is the
//! answer), the largest first, their groups together at most one in
//! [`DENSITY`] of the file's and [`MAX_KEYS`] keys (`crate::positions`
//! finds their packets when the index is published).
//!
//! Layout, after the kinds in the head:
//!
//! ```text
//! n (LEB128, at most MAX_KEYS), then per key, in increasing (kind, value)
//! order: kind u8, value (big-endian, Kind::width bytes), positions k
//! (LEB128, at least 1), CRC-32 of its list (u32)
//! ```
//!
//! and after the kinds' key blocks, each key's list in the same order: `k`
//! increasing byte offsets below the capture file's length, an Elias-Fano
//! list (`lists.rs`) whose length follows from `k` and that length. An
//! offset is where a reader stands before reading the packet (blocks before
//! it included), as a group's is. Only files of one epoch (one pcapng
//! section, no interface block after the first packet) have positions, so a
//! jump to any of them finds the reader's state the one it had at the start.

use super::lists;
use super::{damaged, le_u32, Cursor, IndexError};
use crate::keys::{Key, Kind};

/// Fewest groups a key is in for its packets' positions to be kept.
pub const MIN_GROUPS: usize = 64;
/// A key in more than one group in this many has no positions; the keys
/// with positions are in at most this share of the groups together.
pub const DENSITY: usize = 8;
/// Most keys with positions in one file.
pub const MAX_KEYS: usize = 64;

/// Keys with positions, and their lists: what [`put`] writes.
pub type Positions = Vec<(Key, Vec<u64>)>;

/// The keys offered for positions as their lists were coded
/// ([`Picks::offer`]), and their groups; [`Picks::choose`] picks among them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Picks {
    /// Each key, and where its groups are in `groups`.
    keys: Vec<(Key, std::ops::Range<usize>)>,
    groups: Vec<u32>,
}

impl Picks {
    /// A key and its groups, of a file of `universe` groups: kept if it may
    /// get positions (see the module docs). At most 2 × `universe` groups
    /// are kept over all keys (the keys offered after that are not).
    pub(crate) fn offer(&mut self, key: Key, groups: &[u32], universe: u32) {
        let n = groups.len();
        if key.kind == Kind::Any
            || n < MIN_GROUPS
            || n * DENSITY > universe as usize
            || self.groups.len() + n > 2 * universe as usize
        {
            return;
        }
        let at = self.groups.len();
        self.groups.extend_from_slice(groups);
        self.keys.push((key, at..self.groups.len()));
    }

    /// The keys that get positions, in key order, each with its groups:
    /// the ones in most groups first, while their groups together are at
    /// most one in [`DENSITY`] of the file's `universe` and they are at
    /// most [`MAX_KEYS`].
    pub(crate) fn choose(&self, universe: u32) -> Vec<(Key, &[u32])> {
        let mut by_size: Vec<&(Key, std::ops::Range<usize>)> = self.keys.iter().collect();
        by_size.sort_by_key(|(k, r)| (std::cmp::Reverse(r.len()), *k));
        let (mut total, budget) = (0usize, universe as usize / DENSITY);
        let mut out = Vec::new();
        for (k, r) in by_size {
            if out.len() == MAX_KEYS || total + r.len() > budget {
                continue;
            }
            total += r.len();
            out.push((*k, &self.groups[r.clone()]));
        }
        out.sort_by_key(|(k, _)| *k);
        out
    }
}

/// One key's entry in the head.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    key: Key,
    pub(crate) count: u64,
    /// Where its list starts in the lists' bytes, and its length.
    pub(crate) from: u64,
    pub(crate) len: usize,
    crc: u32,
}

/// The keys with positions of an opened index, and where their lists are.
#[derive(Debug, Clone, Default)]
pub(crate) struct Exact {
    entries: Vec<Entry>,
}

/// Appends `p` (sorted by key, each list increasing and below
/// `capture_len`) to the head `head`, and its lists to `lists`.
pub(super) fn put(p: &Positions, capture_len: u64, head: &mut Vec<u8>, out: &mut Vec<u8>) {
    crate::varint::put(head, p.len() as u64);
    for (key, list) in p {
        let start = out.len();
        lists::encode_with(list.len(), capture_len, list.iter().copied(), out);
        head.push(key.kind as u8);
        let w = key.kind.width();
        head.extend_from_slice(&key.value.to_be_bytes()[16 - w..]);
        crate::varint::put(head, list.len() as u64);
        head.extend_from_slice(&crc32fast::hash(&out[start..]).to_le_bytes());
    }
}

/// Reads the entries at `c` (see the layout) of a capture file of
/// `capture_len` bytes; returns them and their lists' total length.
/// Refuses keys out of order, of an unknown kind or out of the kind's
/// width, counts of 0 or over the file's length, and more than
/// [`MAX_KEYS`].
pub(super) fn parse(c: &mut Cursor, capture_len: u64) -> Result<(Exact, u64), IndexError> {
    let n = c.small("keys with positions", MAX_KEYS as u64)? as usize;
    let mut entries: Vec<Entry> = Vec::with_capacity(n);
    let mut from = 0u64;
    for _ in 0..n {
        let code =
            *c.b.get(c.p)
                .ok_or_else(|| damaged("positions run past the head"))?;
        c.p += 1;
        let kind = Kind::from_code(code)
            .filter(|&k| k != Kind::Any)
            .ok_or_else(|| damaged(format!("positions of unknown key kind {code}")))?;
        let w = kind.width();
        let r = c.take(w, "a key with positions")?;
        let value = c.b[r].iter().fold(0u128, |v, &x| v << 8 | x as u128);
        let key = Key { kind, value };
        if entries.last().is_some_and(|e| e.key >= key) {
            return Err(damaged("keys with positions out of order"));
        }
        let count = c.num("positions")?;
        let len = Some(count)
            .filter(|&k| k >= 1 && k <= capture_len)
            .and_then(|k| lists::coded_len(k, capture_len))
            .ok_or_else(|| damaged("bad count of positions"))?;
        let r = c.take(4, "a positions checksum")?;
        let crc = le_u32(c.b, r.start);
        entries.push(Entry {
            key,
            count,
            from,
            len,
            crc,
        });
        from = from
            .checked_add(len as u64)
            .ok_or_else(|| damaged("positions too long"))?;
    }
    Ok((Exact { entries }, from))
}

impl Entry {
    /// Decodes this entry's list (`b`: its bytes) into `out`, after
    /// checking its checksum.
    pub(crate) fn decode(
        &self,
        b: &[u8],
        capture_len: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), IndexError> {
        if crc32fast::hash(b) != self.crc {
            return Err(damaged("checksum mismatch in a list of positions"));
        }
        lists::decode_wide(b, self.count, capture_len, |v| out.push(v)).map_err(damaged)
    }
}

impl Exact {
    /// The entry of `key`: where its list is in the lists' bytes
    /// ([`Entry::from`], [`Entry::len`]) and its count.
    pub(crate) fn find(&self, key: Key) -> Option<&Entry> {
        let i = self.entries.binary_search_by(|e| e.key.cmp(&key)).ok()?;
        Some(&self.entries[i])
    }

    /// Every key with positions (tests, `verify`).
    pub(crate) fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.entries.iter().map(|e| e.key)
    }
}

/// For `reseal`: where each entry's checksum is in the head (from `c`) and
/// what it is for the lists in `lists`.
pub(super) fn sums(c: &mut Cursor, capture_len: u64, lists: &[u8]) -> Option<Vec<(usize, u32)>> {
    let n = c.num("").ok()?.min(MAX_KEYS as u64);
    let mut at = 0usize;
    let mut out = Vec::new();
    for _ in 0..n {
        let kind = Kind::from_code(*c.b.get(c.p)?)?;
        c.p += 1 + kind.width();
        let count = c.num("").ok()?;
        let len = lists::coded_len(count.max(1), capture_len)?;
        let r = c.take(4, "").ok()?;
        let b = lists.get(at..at.checked_add(len)?).unwrap_or(&[]);
        out.push((r.start, crc32fast::hash(b)));
        at += len;
    }
    Some(out)
}
