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
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};

use rustix::fs::{fadvise, Advice, OFlags};

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
            Hint::Heads(captures) => captures.iter().for_each(|c| head_now(c)),
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

/// True if the byte at `at` of `f` is in the page cache: a read of it that
/// may not wait for the disk (`preadv2` with `RWF_NOWAIT`) got it.
fn cached(f: &File, at: u64) -> bool {
    let mut b = [0u8; 1];
    let mut bufs = [std::io::IoSliceMut::new(&mut b)];
    matches!(
        rustix::io::preadv2(f, &mut bufs, at, rustix::io::ReadWriteFlags::NOWAIT),
        Ok(1)
    )
}

/// True if the first, middle and last of `n` runs (`run(j)`: run j's
/// start) are in the page cache: the file is warm, and hints for its runs
/// would cost the kernel a walk of the cache each for nothing (a port
/// query of 27,482 packets by position over 10 GB: the hinting thread took
/// as much CPU as the query). A file partly cached and hinted no more only
/// reads more slowly.
fn warm(f: &File, n: usize, run: impl Fn(usize) -> u64) -> bool {
    n > 0 && [0, n / 2, n - 1].into_iter().all(|j| cached(f, run(j)))
}

fn will_need(f: &File, from: u64, len: u64) {
    if let Some(len) = NonZeroU64::new(len) {
        let _ = fadvise(f, from, Some(len), Advice::WillNeed);
    }
}

/// Asks for the first bytes of `capture` and the head of its index from
/// this thread, now.
pub(crate) fn head_now(capture: &Path) {
    // The capture's first: a query reads it first.
    for (path, len) in [
        (capture.to_path_buf(), CAPTURE_HEAD),
        (index_path(capture), INDEX_HEAD),
    ] {
        if let Some(f) = open_regular(&path) {
            will_need(&f, 0, len);
        }
    }
}

/// True if the first byte of the file at `path` is in the page cache.
pub(crate) fn head_cached(path: &Path) -> bool {
    open_regular(path).is_some_and(|f| cached(&f, 0))
}

/// The regular file at `path`, open to read; not a symbolic link followed
/// nor a FIFO waited on (an entry of a directory may have become one since
/// the directory was read).
pub(crate) fn open_regular(path: &Path) -> Option<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32)
        .open(path)
        .ok()?;
    f.metadata().is_ok_and(|m| m.is_file()).then_some(f)
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
    let runs: Vec<(u64, u64)> = runs.collect();
    if warm(&f, runs.len(), |j| runs[j].0) {
        return;
    }
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
/// read next, up to [`READ_AHEAD`] bytes of them, are asked for together,
/// again each time the reader has used half.
///
/// The window is counted in bytes of runs, not of the file: the runs of a
/// selective query are small and far apart (12 KB every ~370 KB for a port
/// of 100 flows in 100,000), and a window of 16 MB of the file held ~40 of
/// them: a hint, and a wake-up of the hinting thread, every ~20 runs (1,100
/// wake-ups over 10 GB, 7 % of a warm port query's time in `futex_wake`).
pub struct ReadAhead {
    file: Option<Arc<File>>,
    /// Runs before this one have been hinted.
    next: usize,
    /// Bytes of the runs hinted and not yet read.
    ahead: u64,
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
            next: 0,
            ahead: 0,
        }
    }

    /// Run `i` of `n` is about to be read (called for each run, in order);
    /// `run(j)` is run j's (from, to).
    pub fn advise(&mut self, i: usize, n: usize, run: impl Fn(usize) -> (u64, u64)) {
        if i == 0 && self.file.as_ref().is_some_and(|f| warm(f, n, |j| run(j).0)) {
            self.file = None;
        }
        let Some(f) = &self.file else { return };
        let f = f.clone();
        let ranges = self.due(i, n, run);
        if !ranges.is_empty() {
            Hint::Ranges(f, ranges).send();
        }
    }

    /// The ranges (from, length) to hint now, as [`ReadAhead::advise`].
    fn due(&mut self, i: usize, n: usize, run: impl Fn(usize) -> (u64, u64)) -> Vec<(u64, u64)> {
        let len = |(from, to): (u64, u64)| to.saturating_sub(from);
        if i > 0 && i <= self.next {
            self.ahead = self.ahead.saturating_sub(len(run(i - 1)));
        }
        self.next = self.next.max(i);
        let mut ranges = Vec::new();
        if self.ahead > READ_AHEAD / 2 {
            return ranges;
        }
        while self.next < n && self.ahead < READ_AHEAD {
            let (from, to) = run(self.next);
            ranges.push((from, len((from, to))));
            self.ahead += len((from, to));
            self.next += 1;
        }
        ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every run is hinted once, in order, before it is read; the reader
        /// never has more than READ_AHEAD bytes (and one run) hinted ahead,
        /// and hints come in few batches.
        #[test]
        fn every_run_hinted_once_ahead_of_the_reader(
            lens in prop::collection::vec(1u64..(4 << 20), 0..400),
        ) {
            let mut runs = Vec::new();
            let mut at = 4096;
            for l in &lens {
                runs.push((at, at + l));
                at += l + 100_000;
            }
            let mut ra = ReadAhead { file: None, next: 0, ahead: 0 };
            let mut hinted: Vec<(u64, u64)> = Vec::new();
            let mut batches = 0;
            for i in 0..runs.len() {
                let got = ra.due(i, runs.len(), |j| runs[j]);
                batches += usize::from(!got.is_empty());
                hinted.extend(got);
                // Run i is hinted before it is read.
                prop_assert!(hinted.len() > i);
                let ahead: u64 = runs[i..hinted.len()].iter().map(|r| r.1 - r.0).sum();
                let last = runs[hinted.len() - 1];
                prop_assert!(ahead <= READ_AHEAD + (last.1 - last.0));
            }
            let want: Vec<(u64, u64)> = runs.iter().map(|&(f, t)| (f, t - f)).collect();
            prop_assert_eq!(hinted, want);
            let total: u64 = lens.iter().sum();
            prop_assert!(batches as u64 <= 1 + 2 * total / (READ_AHEAD / 2) + 1);
        }
    }
}
