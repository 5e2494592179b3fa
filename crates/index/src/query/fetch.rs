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
//! no one has taken; the query's thread, arriving at a file no reading
//! thread has taken, takes it and reads it itself as before (so a slow or
//! absent reading thread costs nothing but speed), and while a reading
//! thread still reads the file it needs, it reads the next free ones. Memory is bounded: a
//! file whose runs hold more than [`FILE_MAX`] bytes is left to the query's
//! thread, and the reading threads stop while [`AHEAD`] bytes they read wait
//! to be used. What is read is a copy of the file's bytes: the answer does
//! not depend on who read them ([`Held`]).

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::{Query, Source};
use crate::bounded::Held;
use crate::readahead::ReadAhead;

/// A file's runs are read ahead only if they hold at most this many bytes.
const FILE_MAX: u64 = 16 << 20;

/// Bytes read ahead and not yet used, at most (and a file for each thread).
const AHEAD: u64 = 32 << 20;

/// Reading threads a query starts at most.
pub const MAX_READERS: usize = 3;

/// Reading threads for a query here: one fewer than the CPUs the process
/// may run on, at most [`MAX_READERS`] (none on one CPU: they would only
/// take turns with the query's thread).
pub fn readers_here() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .saturating_sub(1)
        .min(MAX_READERS)
}

/// A file to read ahead: its runs `(from, to)` in file order.
pub(super) struct Job {
    pub path: PathBuf,
    pub ranges: Vec<(u64, u64)>,
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
    let bytes: u64 = ranges.iter().map(|(f, t)| t.saturating_sub(*f)).sum();
    (!ranges.is_empty() && bytes <= FILE_MAX).then(|| Job {
        path: s.path.clone(),
        ranges,
    })
}

/// A file no one has taken yet.
const FREE: u8 = 0;
/// A reading thread is reading it.
const READING: u8 = 1;
/// Read: its bytes wait in the slot.
const READY: u8 = 2;
/// The query's thread took it (read or not).
const TAKEN: u8 = 3;

struct Slot {
    job: Option<Job>,
    state: AtomicU8,
    got: Mutex<Option<(File, Held)>>,
}

/// The files of a query (in the order the query reads them) and what the
/// reading threads have read of them.
pub(super) struct Ahead {
    slots: Vec<Slot>,
    /// Bytes read and not yet taken; `moved` is signalled when it falls or
    /// a slot becomes [`READY`].
    waiting: Mutex<u64>,
    moved: Condvar,
    stop: AtomicBool,
}

impl Ahead {
    /// `jobs[k]`: what to read of the query's file k (`None`: nothing).
    pub fn new(jobs: Vec<Option<Job>>) -> Ahead {
        let slots = jobs
            .into_iter()
            .map(|job| Slot {
                job,
                state: AtomicU8::new(FREE),
                got: Mutex::new(None),
            })
            .collect();
        Ahead {
            slots,
            waiting: Mutex::new(0),
            moved: Condvar::new(),
            stop: AtomicBool::new(false),
        }
    }

    /// True if some file is to be read ahead.
    pub fn has_jobs(&self) -> bool {
        self.slots.iter().any(|s| s.job.is_some())
    }

    fn waiting(&self) -> MutexGuard<'_, u64> {
        // A thread that panicked holding the lock left a number: still right.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A reading thread: reads the files no one has taken, in order, until
    /// the last or [`Ahead::stop`].
    pub fn work(&self) {
        for slot in &self.slots {
            {
                let mut w = self.waiting();
                while *w > AHEAD && !self.stopped() {
                    w = self.moved.wait(w).unwrap_or_else(|e| e.into_inner());
                }
            }
            if self.stopped() {
                return;
            }
            self.claim_and_read(slot);
        }
    }

    /// Reads `slot`'s file if no one has taken it: true if this thread did.
    fn claim_and_read(&self, slot: &Slot) -> bool {
        let Some(job) = &slot.job else { return false };
        if slot
            .state
            .compare_exchange(FREE, READING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        // A panic while reading leaves the file to the query's thread.
        let got = catch_unwind(AssertUnwindSafe(|| self.read(job))).unwrap_or(None);
        {
            let mut w = self.waiting();
            *w += got.as_ref().map_or(0, |(_, h)| h.len() as u64);
            *slot.got.lock().unwrap_or_else(|e| e.into_inner()) = got;
            // Under `waiting`, so a thread waiting for it cannot miss it.
            slot.state.store(READY, Ordering::Release);
        }
        self.moved.notify_all();
        true
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Reads `job`'s runs, hinting them to the kernel ahead as the query's
    /// thread does (`ReadAhead`): a cold file's reads go to the disk
    /// together.
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

    /// The query's thread at its file `k`: the file open and what a reading
    /// thread read of it, or `None` when it is to read the file itself (no
    /// one took it, or reading it failed).
    pub fn take(&self, k: usize) -> Option<(File, Held)> {
        let slot = self.slots.get(k)?;
        slot.job.as_ref()?;
        if slot
            .state
            .compare_exchange(FREE, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return None;
        }
        // While a reading thread reads file k, this one reads the next file
        // no one has taken (it would only wait), within the bound.
        let mut next = k + 1;
        while slot.state.load(Ordering::Acquire) != READY {
            let room = *self.waiting() <= AHEAD;
            match self.slots.get(next..).filter(|_| room) {
                Some([s, ..]) => {
                    self.claim_and_read(s);
                    next += 1;
                }
                _ => {
                    let mut w = self.waiting();
                    while slot.state.load(Ordering::Acquire) != READY {
                        w = self.moved.wait(w).unwrap_or_else(|e| e.into_inner());
                    }
                }
            }
        }
        let mut w = self.waiting();
        slot.state.store(TAKEN, Ordering::Release);
        let got = slot.got.lock().unwrap_or_else(|e| e.into_inner()).take();
        *w -= got.as_ref().map_or(0, |(_, h)| h.len() as u64);
        drop(w);
        self.moved.notify_all();
        got
    }

    /// Stops the reading threads (each after the read it is in): the query
    /// ended, done or not.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _w = self.waiting();
        self.moved.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Whoever reads each file, and however many threads read, the query's
    /// thread gets every file's bytes in order, exactly those of the file.
    #[test]
    fn every_file_is_read_once_by_someone_and_the_bytes_are_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = Vec::new();
        let mut want = Vec::new();
        for k in 0..40u64 {
            let path = dir.path().join(format!("f{k}"));
            let bytes: Vec<u8> = (0..20_000u64).map(|i| (i * 7 + k) as u8).collect();
            File::create(&path).unwrap().write_all(&bytes).unwrap();
            let ranges: Vec<(u64, u64)> = (0..10)
                .map(|r| (r * 1900 + k, r * 1900 + k + 300))
                .collect();
            want.push((bytes, ranges.clone()));
            jobs.push((k % 7 != 3).then_some(Job { path, ranges }));
        }
        for readers in 0..4 {
            let ahead = Ahead::new(
                jobs.iter()
                    .map(|j| {
                        j.as_ref().map(|j| Job {
                            path: j.path.clone(),
                            ranges: j.ranges.clone(),
                        })
                    })
                    .collect(),
            );
            std::thread::scope(|sc| {
                for _ in 0..readers {
                    sc.spawn(|| ahead.work());
                }
                for (k, (bytes, ranges)) in want.iter().enumerate() {
                    let Some((_, held)) = ahead.take(k) else {
                        continue;
                    };
                    assert!(jobs[k].is_some());
                    for &(from, to) in ranges {
                        for pos in from..to {
                            let b = held.at(pos).expect("held");
                            assert_eq!(b[0], bytes[pos as usize]);
                        }
                        assert!(held.at(to).is_none() || ranges.iter().any(|r| r.0 == to));
                    }
                }
                ahead.stop();
            });
            assert_eq!(*ahead.waiting(), 0);
        }
    }

    /// Stopped with files left, the reading threads end (the scope joins).
    #[test]
    fn stop_ends_the_readers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        File::create(&path)
            .unwrap()
            .write_all(&[1u8; 4096])
            .unwrap();
        let jobs = (0..10_000)
            .map(|_| {
                Some(Job {
                    path: path.clone(),
                    ranges: vec![(0, 4096)],
                })
            })
            .collect();
        let ahead = Ahead::new(jobs);
        std::thread::scope(|sc| {
            sc.spawn(|| ahead.work());
            ahead.take(0);
            ahead.stop();
        });
        // The reader stopped where it was: not every file was read.
        let read = ahead
            .slots
            .iter()
            .filter(|s| s.state.load(Ordering::Acquire) != FREE);
        assert!(read.count() < 10_000);
    }
}
