//! Finding the packets of the keys that get positions (`file/exact.rs`)
//! when an index is published: the groups of those keys are read again
//! from the capture file and each packet's keys taken, as the query would.
//!
//! Why a second read and not positions gathered while the file was
//! written: which keys get positions is known only at the file's end (a key
//! in enough groups, but not in most), and gathering a position for every
//! key of every packet would cost the capture more than the index does
//! today (~90 ns a packet). The second read is of the chosen keys' groups
//! only — at most one group in eight of the file, by the choice's budget;
//! 687 groups of 21,120 (3 %) for the retrieval bench's `port 3306` — and
//! finds nothing to read at all in files where no key qualifies (the
//! capture bench's random flows: no key is in 64 groups).
//!
//! Positions only shorten a query's reads, so a file that cannot be read
//! again as it was indexed (gone by retention meanwhile, changed, of more
//! than one pcapng epoch) gets none: its index is whole without them.

use std::fs::File;
use std::path::Path;

use ringcap_format::FileFormat;

use crate::bounded::reader;
use crate::file::{Contents, Positions};
use crate::keys::{packet_keys, Key, KeyOut, Kind};

/// The positions of the keys `c`'s posting lists picked, read from
/// `capture` (see the module docs); empty when there are none or the file
/// cannot be read as indexed.
pub(crate) fn find(capture: &Path, c: &Contents) -> Positions {
    let chosen = c.postings.picks.choose(c.groups.len() as u32);
    if chosen.is_empty() || c.epochs.len() != 1 {
        return Positions::new();
    }
    let mut groups: Vec<u32> = chosen.iter().flat_map(|(_, g)| g.iter().copied()).collect();
    groups.sort_unstable();
    groups.dedup();
    let keys: Vec<Key> = chosen.iter().map(|(k, _)| *k).collect();
    read(capture, c, &groups, &keys).unwrap_or_default()
}

/// Where each packet holding one of `keys` starts: `(key's number, offset)`.
struct Hits<'a> {
    keys: &'a [Key],
    at: u64,
    out: Vec<(u32, u64)>,
}

impl KeyOut for Hits<'_> {
    fn key(&mut self, kind: Kind, value: u128) {
        if let Ok(i) = self.keys.binary_search(&Key { kind, value }) {
            self.out.push((i as u32, self.at));
        }
    }
}

/// Reads `groups` (sorted, distinct) of `capture` and lists where the
/// packets holding each of `keys` (sorted) start. `None` if the file cannot
/// be read as the index describes it.
fn read(capture: &Path, c: &Contents, groups: &[u32], keys: &[Key]) -> Option<Positions> {
    // Offsets are coded in at most 56 bits a number (`file/lists.rs`).
    let capture_len = c.summary.as_ref()?.capture_len;
    if capture_len >= 1 << 56 {
        return None;
    }
    let (mut rd, end) = reader(File::open(capture).ok()?).ok()?;
    if matches!(rd.format(), FileFormat::Compressed { .. }) {
        return None;
    }
    let epoch = c.epochs.first()?;
    let linktypes: Vec<u32> = rd.interfaces().iter().map(|i| i.linktype).collect();
    let mut hits = Hits {
        keys,
        at: 0,
        out: Vec::new(),
    };
    let mut i = 0;
    while i < groups.len() {
        // A run of consecutive groups: one read.
        let first = groups[i] as usize;
        while i + 1 < groups.len() && groups[i + 1] == groups[i] + 1 {
            i += 1;
        }
        let after = groups[i] as usize + 1;
        i += 1;
        let from = c.groups.get(first)?.offset;
        let to = c.groups.get(after).map_or(capture_len, |g| g.offset);
        end.set(to);
        rd.seek_to(from).ok()?;
        while rd.offset() < to {
            hits.at = rd.offset();
            let p = rd.next_packet().ok()??;
            packet_keys(*linktypes.get(p.interface)?, p.data, &mut hits);
            // A jump to this packet must find the reader as at the start.
            if (rd.sections(), rd.interfaces().len()) != (1, epoch.interfaces as usize)
                || epoch.sections != 1
            {
                return None;
            }
        }
    }
    // In key order, each key's packets in file order, once each.
    hits.out.sort_unstable();
    hits.out.dedup();
    let mut out: Positions = keys.iter().map(|&k| (k, Vec::new())).collect();
    for (k, at) in hits.out {
        out[k as usize].1.push(at);
    }
    // A key the second read did not find is not the file indexed.
    if out.iter().any(|(_, l)| l.is_empty()) {
        return None;
    }
    Some(out)
}
