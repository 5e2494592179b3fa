//! Read-ahead hints for queries (`posix_fadvise`), so that a query over
//! files that are not in the page cache sends its reads to the disk
//! together instead of one after another. A selective query reads a few
//! small pieces of each file (the index's head, a key block, a page of
//! groups, the capture's first bytes, a few runs of records), each read
//! depending on the one before: over 40 files of the retrieval bench that
//! was ~240 reads in a row, most of a cold query's time. Hints only: a
//! failure changes nothing but speed, and what they bring in is bounded.
//!
//! The hints are given by one thread of the process, not the query's: the
//! kernel does the work of a hint inside the call (it walks the page cache
//! over the range, allocates the pages missing and queues their reads), 8 %
//! of a warm port query's time over 10 GB (perf), time the query need not
//! wait for. At most [`QUEUED`] hints wait for that thread (each holds its
//! file open); beyond, the query gives its hint itself.

use std::fs::File;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};

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

/// Hints waiting for the hinting thread, at most.
const QUEUED: usize = 256;

/// What the hinting thread is asked to do.
enum Hint {
    /// The heads of these captures and of their indexes.
    Heads(Vec<PathBuf>),
    /// Ranges (from, length) of an open file.
    Ranges(Arc<File>, Vec<(u64, u64)>),
}

impl Hint {
    fn give(self) {
        match self {
            Hint::Heads(captures) => {
                for c in captures {
                    for (path, len) in [(index_path(&c), INDEX_HEAD), (c, CAPTURE_HEAD)] {
                        if let Ok(f) = File::open(path) {
                            will_need(&f, 0, len);
                        }
                    }
                }
            }
            Hint::Ranges(f, ranges) => {
                for (from, len) in ranges {
                    will_need(&f, from, len);
                }
            }
        }
    }

    /// Given by the hinting thread, or here if it is busy or cannot run.
    fn send(self) {
        static THREAD: OnceLock<Option<SyncSender<Hint>>> = OnceLock::new();
        let tx = THREAD.get_or_init(|| {
            let (tx, rx) = sync_channel::<Hint>(QUEUED);
            std::thread::Builder::new()
                .name("ringcap-hints".into())
                .spawn(move || rx.into_iter().for_each(Hint::give))
                .ok()
                .map(|_| tx)
        });
        match tx {
            Some(tx) => match tx.try_send(self) {
                Ok(()) => {}
                Err(TrySendError::Full(h) | TrySendError::Disconnected(h)) => h.give(),
            },
            None => self.give(),
        }
    }
}

fn will_need(f: &File, from: u64, len: u64) {
    if let Some(len) = NonZeroU64::new(len) {
        let _ = fadvise(f, from, Some(len), Advice::WillNeed);
    }
}

/// Asks for the heads of the indexes of `captures` and their own first
/// bytes, all at once.
pub fn hint_heads(captures: &[PathBuf]) {
    Hint::Heads(captures.to_vec()).send();
}

/// Asks for the runs `(from, to)` of `capture` while `budget` (bytes)
/// lasts, taking what it asks for from it.
pub fn hint_runs(capture: &Path, runs: impl Iterator<Item = (u64, u64)>, budget: &mut u64) {
    if *budget == 0 {
        return;
    }
    let Ok(f) = File::open(capture) else { return };
    let mut ranges = Vec::new();
    for (from, to) in runs {
        let len = to.saturating_sub(from).min(*budget);
        ranges.push((from, len));
        *budget -= len;
        if *budget == 0 {
            break;
        }
    }
    Hint::Ranges(Arc::new(f), ranges).send();
}

/// Read-ahead for the runs of candidate groups of the file being read: the
/// kernel's own read-ahead is turned off (it read 128 KB or more around
/// each small run, most of it for nothing), and the runs the reader will
/// read next, up to [`READ_AHEAD`] bytes, are asked for all at once.
pub struct ReadAhead {
    file: Option<Arc<File>>,
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
        ReadAhead {
            file: file.map(Arc::new),
            until: 0,
        }
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
        let mut ranges = Vec::new();
        for (from, to) in std::iter::once(first).chain(runs) {
            if from >= here + READ_AHEAD {
                break;
            }
            if to <= self.until {
                continue;
            }
            let from = from.max(self.until);
            ranges.push((from, to.saturating_sub(from)));
            self.until = to;
        }
        if !ranges.is_empty() {
            Hint::Ranges(f.clone(), ranges).send();
        }
    }
}
