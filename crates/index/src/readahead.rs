//! Read-ahead hints for queries (`posix_fadvise`), so that a query over
//! files that are not in the page cache sends its reads to the disk
//! together instead of one after another. A selective query reads a few
//! small pieces of each file (the index's head, a key block, a page of
//! groups, the capture's first bytes, a few runs of records), each read
//! depending on the one before: over 40 files of the retrieval bench that
//! was ~240 reads in a row, most of a cold query's time. Hints only: a
//! failure changes nothing but speed, and what they bring in is bounded.

use std::fs::File;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use rustix::fs::{fadvise, Advice};

use ringcap_format::sidecar::index_path;

/// Bytes of candidate runs of one file the kernel is asked to read ahead
/// of the reader.
const READ_AHEAD: u64 = 16 << 20;

/// Files whose first bytes are asked for at once, ahead of the query.
pub const HEADS_AHEAD: usize = 32;

/// Bytes of each index asked for ahead: its header and head (fences and
/// epochs: ~12 KB for a 250 MB file of 100,000 flows) and, often, the
/// blocks and pages a lookup reads next.
const INDEX_HEAD: u64 = 32 << 10;

/// Bytes of each capture file asked for ahead: what a query reads to open
/// it (its header; `query::OPEN_LEN`), which holds the first 4096 bytes
/// whose checksum tells a stale index.
const CAPTURE_HEAD: u64 = 64 << 10;

/// Bytes of candidate runs, over all files, asked for before the first
/// file is read.
pub const RUNS_AHEAD: u64 = 32 << 20;

fn will_need(f: &File, from: u64, len: u64) {
    if let Some(len) = NonZeroU64::new(len) {
        let _ = fadvise(f, from, Some(len), Advice::WillNeed);
    }
}

/// Asks for the heads of the indexes of `captures` and their own first
/// bytes, all at once.
pub fn hint_heads(captures: &[PathBuf]) {
    for c in captures {
        if let Ok(f) = File::open(index_path(c)) {
            will_need(&f, 0, INDEX_HEAD);
        }
        if let Ok(f) = File::open(c) {
            will_need(&f, 0, CAPTURE_HEAD);
        }
    }
}

/// Asks for the runs `(from, to)` of `capture` while `budget` (bytes)
/// lasts, taking what it asks for from it.
pub fn hint_runs(capture: &Path, runs: impl Iterator<Item = (u64, u64)>, budget: &mut u64) {
    if *budget == 0 {
        return;
    }
    let Ok(f) = File::open(capture) else { return };
    for (from, to) in runs {
        let len = to.saturating_sub(from).min(*budget);
        will_need(&f, from, len);
        *budget -= len;
        if *budget == 0 {
            return;
        }
    }
}

/// Read-ahead for the runs of candidate groups of the file being read: the
/// kernel's own read-ahead is turned off (it read 128 KB or more around
/// each small run, most of it for nothing), and the runs the reader will
/// read next, up to [`READ_AHEAD`] bytes, are asked for all at once.
pub struct ReadAhead {
    file: Option<File>,
    /// Where the hints reach (a file offset).
    until: u64,
}

impl ReadAhead {
    /// `file` shares the reader's open file (a `dup`): the advice to read
    /// at random is the reader's too.
    pub fn new(file: Option<File>) -> ReadAhead {
        if let Some(f) = &file {
            let _ = fadvise(f, 0, None, Advice::Random);
        }
        ReadAhead { file, until: 0 }
    }

    /// `runs` (from, to) start with the one about to be read.
    pub fn advise(&mut self, mut runs: impl Iterator<Item = (u64, u64)>) {
        let Some(f) = &self.file else { return };
        let Some(first) = runs.next() else { return };
        let here = first.0;
        // Hints are given when the reader has used half of them.
        if self.until > here + READ_AHEAD / 2 {
            return;
        }
        for (from, to) in std::iter::once(first).chain(runs) {
            if from >= here + READ_AHEAD {
                break;
            }
            if to <= self.until {
                continue;
            }
            let from = from.max(self.until);
            will_need(f, from, to.saturating_sub(from));
            self.until = to;
        }
    }
}
