//! The runs of candidate records of the files ahead, read into memory by
//! other threads of the query while its own thread filters and writes the
//! packets of the file before.
//!
//! A selective query reads each candidate packet with a `pread` of its own
//! (its packets lie far apart: 27,482 packets of one port over 10 GB, one
//! every ~365 KB). From the page cache such a read costs ~2 µs on the
//! development VM, over half of a warm port query's time (perf), and
//! cheaper reads were not found (`mmap`, `io_uring`, shorter reads:
//! bench/README, 2026-11-29). Two threads reading different files do them
//! in ~0.6 of the time of one (28,000 reads: 26–32 ms against 42–50 ms),
//! and the query's own thread, left with what it does with the packets,
//! works at the same time.
//!
//! Threads read whole files' runs in time order, each taking the next file
//! no one has taken. The query's thread, arriving at a file no reading
//! thread has taken, takes it and reads it itself as before (a slow or
//! absent reading thread costs nothing but speed); while a reading thread
//! still reads the file it needs, it reads the next free ones.
//!
//! Bounded: a file whose runs hold more than [`FILE_MAX`] bytes is left to
//! the query's thread; a file is begun only while the bytes read and not
//! yet used, counting the files being read at their full size, stay within
//! [`AHEAD`] (or none wait), and while fewer than [`FILES_AHEAD`] files (each
//! held open) wait. The query's stop flag stops the reading between runs.
//! What is read is a copy of the file's bytes: the answer does not depend
//! on who read them ([`Held`]).

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::{Query, Source};
use crate::bounded::Held;
use crate::readahead::ReadAhead;

/// A file's runs are read ahead only if they hold at most this many bytes.
const FILE_MAX: u64 = 16 << 20;

/// Bytes read ahead and not yet used (files being read counted whole), at
/// most; one file may go past it when none wait.
const AHEAD: u64 = 32 << 20;

/// Files read ahead and not yet used (each an open file), at most.
const FILES_AHEAD: usize = 64;

/// Reading threads a query starts at most.
const MAX_READERS: usize = 3;

/// Reading threads for a query here: one fewer than the CPUs the process
/// may run on, at most [`MAX_READERS`] (none on one CPU: they would only
/// take turns with the query's thread).
pub fn readers_here() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .saturating_sub(1)
        .min(MAX_READERS)
}

/// A file to read ahead: its runs `(from, to)` in file order, `bytes` in
/// all.
pub(super) struct Job {
    pub path: PathBuf,
    pub ranges: Vec<(u64, u64)>,
    pub bytes: u64,
}

/// What reading threads are to read of `s` ahead of the query: the runs
/// of an indexed file that hold some in the window, if they are not too
/// many bytes.
pub(super) fn job(q: &Query, s: &Source) -> Option<Job> {
    let idx = s.index.as_ref().ok().filter(|_| s.growing.is_none())?;
    if idx.passed_over(&q.window) {
        return None;
    }
    let ranges: Vec<(u64, u64)> = idx.runs.iter().map(|r| (r.from, r.read_end())).collect();
    let bytes = ranges
        .iter()
        .try_fold(0u64, |n, (f, t)| n.checked_add(t.saturating_sub(*f)))?;
    (!ranges.is_empty() && bytes <= FILE_MAX).then(|| Job {
        path: s.path.clone(),
        ranges,
        bytes,
    })
}

/// Where a file of the query stands.
enum Slot {
    /// No one has taken it.
    Free,
    /// A thread is reading it.
    Reading,
    /// Read (`None`: it could not be opened): its bytes wait.
    Ready(Option<(File, Held)>),
    /// The query's thread took it, read or not.
    Taken,
}

struct State {
    slots: Vec<Slot>,
    /// Bytes of the files read and not taken, and of those being read
    /// (their full size until read).
    bytes: u64,
    /// Files being read or read and not taken.
    files: usize,
}

/// The files of a query (in the order the query reads them) and what the
/// reading threads have read of them.
pub(super) struct Ahead<'q> {
    jobs: Vec<Option<Job>>,
    state: Mutex<State>,
    /// Signalled when a file is read, taken, or the query ends.
    moved: Condvar,
    /// The query ended, done or not ([`Ahead::end`]): looked at between
    /// runs without the lock, set under it (so a waiting thread sees it).
    ended: AtomicBool,
    /// The query's own stop flag ([`Query::stop`]).
    stop: Option<&'q AtomicBool>,
}

impl<'q> Ahead<'q> {
    /// `jobs[k]`: what to read of the query's file k (`None`: nothing).
    pub fn new(jobs: Vec<Option<Job>>, stop: Option<&'q AtomicBool>) -> Ahead<'q> {
        let slots = jobs.iter().map(|_| Slot::Free).collect();
        Ahead {
            jobs,
            state: Mutex::new(State {
                slots,
                bytes: 0,
                files: 0,
            }),
            moved: Condvar::new(),
            ended: AtomicBool::new(false),
            stop,
        }
    }

    /// Runs `body` (the query's thread answering its files, calling
    /// [`Ahead::take`]) with up to `readers` reading threads (none if no
    /// file is to be read ahead; one that cannot start leaves its files to
    /// the query's thread); they end when `body` returns or unwinds.
    pub fn with_readers<R>(&self, readers: usize, body: impl FnOnce() -> R) -> R {
        struct EndOnExit<'a, 'q>(&'a Ahead<'q>);
        impl Drop for EndOnExit<'_, '_> {
            fn drop(&mut self) {
                self.0.end();
            }
        }
        std::thread::scope(|sc| {
            let _end = EndOnExit(self);
            if self.jobs.iter().any(Option::is_some) {
                for _ in 0..readers.min(MAX_READERS) {
                    let _ = std::thread::Builder::new()
                        .name("ringcap-read".into())
                        .spawn_scoped(sc, || self.work());
                }
            }
            body()
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A thread that panicked holding the lock left consistent counts:
        // every change to them is made in one step.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.moved.wait(st).unwrap_or_else(|e| e.into_inner())
    }

    fn stopped(&self) -> bool {
        self.ended.load(Ordering::Acquire) || self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// The first file from `k` on that is to be read and no one has taken.
    fn next_free(&self, st: &State, mut k: usize) -> Option<usize> {
        while k < self.jobs.len() {
            if self.jobs[k].is_some() && matches!(st.slots[k], Slot::Free) {
                return Some(k);
            }
            k += 1;
        }
        None
    }

    /// True if file `k` may be begun now.
    fn room(&self, st: &State, k: usize) -> bool {
        let bytes = self.jobs[k].as_ref().map_or(0, |j| j.bytes);
        st.files < FILES_AHEAD && (st.files == 0 || st.bytes + bytes <= AHEAD)
    }

    /// Takes file `k` (free, with room) for this thread, reads it without
    /// the lock and leaves it [`Slot::Ready`]; returns the lock again.
    fn read_slot<'a>(&'a self, mut st: MutexGuard<'a, State>, k: usize) -> MutexGuard<'a, State> {
        let Some(job) = &self.jobs[k] else { return st };
        st.slots[k] = Slot::Reading;
        st.bytes += job.bytes;
        st.files += 1;
        drop(st);
        // A panic while reading leaves the file to the query's thread.
        let got = catch_unwind(AssertUnwindSafe(|| self.read(job))).unwrap_or(None);
        let mut st = self.lock();
        st.bytes = st.bytes - job.bytes + got.as_ref().map_or(0, |(_, h)| h.len() as u64);
        st.slots[k] = Slot::Ready(got);
        self.moved.notify_all();
        st
    }

    /// A reading thread: reads the files no one has taken, in order, until
    /// the last or the query ends.
    fn work(&self) {
        let mut st = self.lock();
        let mut from = 0;
        loop {
            if self.stopped() {
                return;
            }
            let Some(k) = self.next_free(&st, from) else {
                return;
            };
            if !self.room(&st, k) {
                st = self.wait(st);
                continue;
            }
            st = self.read_slot(st, k);
            from = k + 1;
        }
    }

    /// Reads `job`'s runs, hinting them to the kernel ahead as the query's
    /// thread does (`ReadAhead`): a cold file's reads go to the disk
    /// together. Stops between runs when the query ends.
    fn read(&self, job: &Job) -> Option<(File, Held)> {
        let f = File::open(&job.path).ok()?;
        let mut hints = ReadAhead::new(f.try_clone().ok());
        let n = job.ranges.len();
        let held = Held::read(&f, &job.ranges, |i| {
            hints.advise(i, n, |j| job.ranges[j]);
            !self.stopped()
        });
        Some((f, held))
    }

    /// The query's thread at its file `k` (once a file; any order): the
    /// file open and what a reading thread read of it, or `None` when it
    /// is to read the file itself (no one took it, or it could not be read).
    pub fn take(&self, k: usize) -> Option<(File, Held)> {
        self.jobs.get(k)?.as_ref()?;
        let mut st = self.lock();
        loop {
            match std::mem::replace(&mut st.slots[k], Slot::Taken) {
                Slot::Free | Slot::Taken => return None,
                Slot::Ready(got) => {
                    st.files -= 1;
                    st.bytes -= got.as_ref().map_or(0, |(_, h)| h.len() as u64);
                    self.moved.notify_all();
                    return got;
                }
                Slot::Reading => st.slots[k] = Slot::Reading,
            }
            // A reading thread has it: read the next free file meanwhile
            // (within the bounds), or wait.
            match self.next_free(&st, k + 1) {
                Some(j) if !self.stopped() && self.room(&st, j) => st = self.read_slot(st, j),
                _ => st = self.wait(st),
            }
        }
    }

    /// Ends the reading threads (each after the run it is reading): the
    /// query ended, done or not.
    fn end(&self) {
        let st = self.lock();
        self.ended.store(true, Ordering::Release);
        drop(st);
        self.moved.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn jobs(dir: &std::path::Path, files: u64, len: u64) -> (Vec<Option<Job>>, Vec<Vec<u8>>) {
        let mut jobs = Vec::new();
        let mut contents = Vec::new();
        for k in 0..files {
            let path = dir.join(format!("f{k}"));
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + k) as u8).collect();
            File::create(&path).unwrap().write_all(&bytes).unwrap();
            let ranges: Vec<(u64, u64)> = (0..len / 2000)
                .map(|r| (r * 1900 + k % 50, r * 1900 + k % 50 + 300))
                .collect();
            let n = ranges.iter().map(|r| r.1 - r.0).sum();
            contents.push(bytes);
            jobs.push((k % 7 != 3).then_some(Job {
                path,
                ranges,
                bytes: n,
            }));
        }
        (jobs, contents)
    }

    /// Whoever reads each file, and however many threads read, the query's
    /// thread gets every file's bytes, exactly those of the file, and the
    /// counts come back to nothing.
    #[test]
    fn every_file_is_read_once_by_someone_and_the_bytes_are_the_files() {
        let dir = tempfile::tempdir().unwrap();
        for readers in 0..4 {
            let (jobs, contents) = jobs(dir.path(), 40, 20_000);
            let ranges: Vec<Vec<(u64, u64)>> = jobs
                .iter()
                .map(|j| j.as_ref().map_or(Vec::new(), |j| j.ranges.clone()))
                .collect();
            let ahead = Ahead::new(jobs, None);
            std::thread::scope(|sc| {
                for _ in 0..readers {
                    sc.spawn(|| ahead.work());
                }
                for (k, bytes) in contents.iter().enumerate() {
                    let Some((_, held)) = ahead.take(k) else {
                        continue;
                    };
                    assert!(ahead.take(k).is_none(), "a file is taken once");
                    for &(from, to) in &ranges[k] {
                        for pos in from..to {
                            assert_eq!(held.at(pos).expect("held")[0], bytes[pos as usize]);
                        }
                    }
                }
                ahead.end();
            });
            let st = ahead.lock();
            assert_eq!((st.bytes, st.files), (0, 0));
        }
    }

    /// Files of one small run each: no more than FILES_AHEAD wait (each is
    /// an open file), however small.
    #[test]
    fn files_waiting_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (jobs, _) = jobs(dir.path(), 300, 2_000);
        let ahead = Ahead::new(jobs, None);
        std::thread::scope(|sc| {
            sc.spawn(|| ahead.work());
            sc.spawn(|| ahead.work());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                let st = ahead.lock();
                assert!(st.files <= FILES_AHEAD);
                if st.files == FILES_AHEAD || std::time::Instant::now() > deadline {
                    break;
                }
                drop(st);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            ahead.end();
        });
    }

    /// A reading thread does not begin a file once the query's stop flag
    /// is set, and one waiting for room ends when the query ends.
    #[test]
    fn stop_and_end_end_the_readers() {
        let dir = tempfile::tempdir().unwrap();
        let (jobs, _) = jobs(dir.path(), 100, 2_000);
        let stop = AtomicBool::new(true);
        let ahead = Ahead::new(jobs, Some(&stop));
        std::thread::scope(|sc| {
            sc.spawn(|| ahead.work());
        });
        assert!(ahead.lock().slots.iter().all(|s| matches!(s, Slot::Free)));
        stop.store(false, Ordering::Relaxed);
        std::thread::scope(|sc| {
            sc.spawn(|| ahead.work());
            while ahead.lock().files < FILES_AHEAD {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // The reader waits for room now; end() must wake it, or the
            // scope never joins and the test hangs.
            ahead.end();
        });
        assert!(ahead.lock().slots.iter().any(|s| matches!(s, Slot::Free)));
    }
}
