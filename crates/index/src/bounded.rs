//! A capture file read up to a movable end, so that the reader (whose
//! buffer is a megabyte) reads only the bytes of a run of groups, or of a
//! packet whose start the index gives (`file/exact.rs`): then the end is a
//! guess of the packet's length, and a packet longer than the guess is
//! read on past it, [`STRETCH`] bytes at a time.
//!
//! Some of the file's bytes may already be in memory ([`Held`]: read by
//! another thread of the query, `query/fetch.rs`): reads inside them are
//! served from there, every other read from the file. What is held is a
//! copy of the file's bytes, so the reader sees the same bytes either way.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use ringcap_format::Reader;

/// Bytes read past the end at a time when [`Limit::stretch`] is set.
pub(crate) const STRETCH: u64 = 4096;

/// Where a [`Bounded`] stops.
#[derive(Debug, Default)]
pub(crate) struct Limit {
    end: Cell<u64>,
    stretch: Cell<bool>,
}

impl Limit {
    /// Reads stop at `end` (exactly: no stretch).
    pub(crate) fn set(&self, end: u64) {
        self.end.set(end);
        self.stretch.set(false);
    }

    /// Reads stop at `end` unless the reader needs more: then they go on.
    pub(crate) fn set_stretch(&self, end: u64) {
        self.end.set(end);
        self.stretch.set(true);
    }
}

/// A file's bytes up to a movable end: the reader stops at the end of a
/// run of groups instead of reading ahead into bytes it does not need.
pub(crate) struct Bounded {
    f: File,
    pos: u64,
    end: Rc<Limit>,
    held: Held,
}

/// Bytes [`Held::read`] allocates at once at most (more grow as read).
const HELD_MAX: u64 = 64 << 20;

/// Bytes of a file read into memory: disjoint ranges in file order, each
/// `(from, to, at)`, its bytes at `at` in `bytes`.
#[derive(Debug, Default)]
pub(crate) struct Held {
    ranges: Vec<(u64, u64, usize)>,
    bytes: Vec<u8>,
}

impl Held {
    /// Reads the ranges `(from, to)` of `f` (in file order; a range that
    /// overlaps the one before keeps only its bytes after it), calling
    /// `go(i)` before range i and stopping when it says false. A range
    /// cut by the file's end or an error keeps the bytes read before it:
    /// the reader reads the rest from the file (and meets the error).
    pub(crate) fn read(f: &File, ranges: &[(u64, u64)], mut go: impl FnMut(usize) -> bool) -> Held {
        // One allocation of the bytes asked for (a reader's whole file).
        let want = ranges
            .iter()
            .fold(0u64, |n, (f, t)| n.saturating_add(t.saturating_sub(*f)));
        let mut held = Held {
            ranges: Vec::new(),
            bytes: Vec::with_capacity(want.min(HELD_MAX) as usize),
        };
        let mut last = 0u64;
        for (i, &(from, to)) in ranges.iter().enumerate() {
            if !go(i) {
                break;
            }
            let from = from.max(last);
            let Some(len) = to.checked_sub(from).filter(|&l| l > 0) else {
                continue;
            };
            let Ok(len) = usize::try_from(len) else { break };
            let at = held.bytes.len();
            held.bytes.resize(at + len, 0);
            let mut got = 0;
            while got < len {
                match f.read_at(&mut held.bytes[at + got..], from + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            held.bytes.truncate(at + got);
            if got > 0 {
                held.ranges.push((from, from + got as u64, at));
                last = from + got as u64;
            }
        }
        if held.bytes.capacity() - held.bytes.len() > 64 << 10 {
            held.bytes.shrink_to_fit();
        }
        held
    }

    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The bytes held from `pos` to the end of the range holding it.
    pub(crate) fn at(&self, pos: u64) -> Option<&[u8]> {
        let i = self.ranges.partition_point(|r| r.0 <= pos).checked_sub(1)?;
        let (from, to, at) = self.ranges[i];
        (pos < to).then(|| &self.bytes[at + (pos - from) as usize..at + (to - from) as usize])
    }
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut left = self.end.end.get().saturating_sub(self.pos);
        if left == 0 && self.end.stretch.get() {
            left = STRETCH;
        }
        let n = buf.len().min(left.min(usize::MAX as u64) as usize);
        if n == 0 {
            return Ok(0);
        }
        if let Some(b) = self.held.at(self.pos) {
            let n = n.min(b.len());
            buf[..n].copy_from_slice(&b[..n]);
            self.pos += n as u64;
            return Ok(n);
        }
        let got = self.f.read_at(&mut buf[..n], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

impl Seek for Bounded {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        match to {
            SeekFrom::Start(o) => self.pos = o,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "only absolute seeks",
                ))
            }
        }
        Ok(self.pos)
    }
}

/// Bytes read to open a file (its header, a pcapng section header): the
/// reader reads ahead no further before it is told where to go.
const OPEN_LEN: u64 = 64 << 10;

/// A reader of `f` whose end can be moved (first [`OPEN_LEN`] bytes).
pub(crate) fn reader(f: File) -> Result<(Reader<Bounded>, Rc<Limit>), ringcap_format::FormatError> {
    reader_in(f, Vec::new())
}

/// [`reader`] reading into `buf`, a buffer an earlier reader gave back
/// (`Reader::into_buffer`): a selective query opens two readers a file.
pub(crate) fn reader_in(
    f: File,
    buf: Vec<u8>,
) -> Result<(Reader<Bounded>, Rc<Limit>), ringcap_format::FormatError> {
    reader_held(f, buf, Held::default())
}

/// [`reader_in`] with some of the file's bytes already `held`.
pub(crate) fn reader_held(
    f: File,
    buf: Vec<u8>,
    held: Held,
) -> Result<(Reader<Bounded>, Rc<Limit>), ringcap_format::FormatError> {
    let end = Rc::new(Limit::default());
    end.set(OPEN_LEN);
    let bounded = Bounded {
        f,
        pos: 0,
        end: end.clone(),
        held,
    };
    Ok((Reader::with_buffer(bounded, buf)?, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    proptest! {
        /// Whatever the ranges (overlapping, out of order, past the file's
        /// end, cut short by `go`), every byte held is the file's byte at
        /// that offset, and a reader over held bytes reads the file's bytes.
        #[test]
        fn held_bytes_are_the_files(
            len in 0u64..20_000,
            ranges in prop::collection::vec((0u64..25_000, 0u64..3_000), 0..30),
            stop_at in 0usize..40,
        ) {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 + i / 251) as u8).collect();
            let mut tmp = tempfile::tempfile().unwrap();
            tmp.write_all(&bytes).unwrap();
            let ranges: Vec<(u64, u64)> = ranges.into_iter().map(|(f, l)| (f, f + l)).collect();
            let held = Held::read(&tmp, &ranges, |i| i < stop_at);
            for &(from, to) in &ranges {
                for pos in from..to {
                    if let Some(b) = held.at(pos) {
                        prop_assert!(pos < len);
                        prop_assert_eq!(b[0], bytes[pos as usize]);
                    }
                }
            }
            let total: usize = held.ranges.iter().map(|r| (r.1 - r.0) as usize).sum();
            prop_assert_eq!(total, held.len());
            let mut b = Bounded { f: tmp, pos: 0, end: Rc::new(Limit::default()), held };
            b.end.set(len + 100);
            let mut all = Vec::new();
            b.read_to_end(&mut all).unwrap();
            prop_assert_eq!(all, bytes);
        }
    }
}
