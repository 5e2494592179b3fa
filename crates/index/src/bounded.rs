//! A capture file read up to a movable end, so that the reader (whose
//! buffer is a megabyte) reads only the bytes of a run of groups, or of a
//! packet whose start the index gives (`file/exact.rs`): then the end is a
//! guess of the packet's length, and a packet longer than the guess is
//! read on past it, [`STRETCH`] bytes at a time.
//!
//! Some of the file's bytes may already be in memory ([`Held`]: read by
//! another thread of the query, `query/fetch.rs`): a range taken out
//! ([`resume`]) becomes the reader's buffer, reads inside the
//! others are served from them, every other read from the file. What is
//! held is a copy of the file's bytes, so the reader sees the same bytes
//! either way.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use ringcap_format::{FormatError, Reader};
use rustix::buffer::spare_capacity;

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

/// Bytes of a file read into memory: disjoint ranges in file order, each
/// `(from, bytes)`.
///
/// A range has a buffer of its own, read into its spare capacity: one
/// buffer for the file, zeroed before each `pread` wrote over it, cost a
/// `memset` of every byte held and fresh pages each file (`perf` of a warm
/// `port 3306` query: ~5 % of its CPU in `memset` and page faults).
#[derive(Debug, Default)]
pub(crate) struct Held {
    ranges: Vec<(u64, Vec<u8>)>,
}

impl Held {
    /// Reads the ranges `(from, to)` of `f` (in file order; a range that
    /// overlaps the one before keeps only its bytes after it), calling
    /// `go(i)` before range i and stopping when it says false. A range
    /// cut by the file's end or an error keeps the bytes read before it:
    /// the reader reads the rest from the file (and meets the error).
    pub(crate) fn read(f: &File, ranges: &[(u64, u64)], mut go: impl FnMut(usize) -> bool) -> Held {
        let mut held = Held {
            ranges: Vec::with_capacity(ranges.len()),
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
            let mut bytes = Vec::with_capacity(len);
            while bytes.len() < len {
                let at = from + bytes.len() as u64;
                match rustix::io::pread(f, spare_capacity(&mut bytes), at) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => {}
                    Err(_) => break,
                }
            }
            // The capacity may be more than asked for: what was read past
            // the range is not kept.
            bytes.truncate(len);
            // Cut short (the file's end, an error): the rest is not kept.
            if bytes.capacity() - bytes.len() > 64 << 10 {
                bytes.shrink_to_fit();
            }
            if !bytes.is_empty() {
                last = from + bytes.len() as u64;
                held.ranges.push((from, bytes));
            }
        }
        held
    }

    /// Bytes held.
    pub(crate) fn len(&self) -> usize {
        self.ranges.iter().map(|(_, b)| b.len()).sum()
    }

    /// The range starting at `from`, if one does, taken out to be read
    /// where it is (`Reader::resume_with`); its bytes are then read from
    /// the file if asked for again.
    pub(crate) fn take(&mut self, from: u64) -> Option<Vec<u8>> {
        let i = self.ranges.partition_point(|r| r.0 < from);
        match self.ranges.get_mut(i) {
            Some((f, b)) if *f == from && !b.is_empty() => Some(std::mem::take(b)),
            _ => None,
        }
    }

    /// The bytes held from `pos` to the end of the range holding it.
    pub(crate) fn at(&self, pos: u64) -> Option<&[u8]> {
        let i = self.ranges.partition_point(|r| r.0 <= pos).checked_sub(1)?;
        let (from, bytes) = &self.ranges[i];
        bytes
            .get(usize::try_from(pos - from).ok()?..)
            .filter(|b| !b.is_empty())
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

/// Puts `rd` at `from`, reading the bytes held from there where they are if
/// a reading thread read them and `lend` says so, else with the reader's
/// own buffer, which `own` keeps while the reader reads held bytes.
pub(crate) fn resume(
    rd: &mut Reader<Bounded>,
    from: u64,
    lend: bool,
    own: &mut Option<Vec<u8>>,
) -> Result<(), FormatError> {
    let held = lend.then(|| rd.get_mut().held.take(from)).flatten();
    match (held, own.take()) {
        (Some(bytes), own_buf) => {
            let n = bytes.len();
            let had = rd.resume_with(from, bytes, n)?;
            // The reader's own buffer, or the last run's bytes (dropped).
            *own = own_buf.or(Some(had));
        }
        (None, Some(own_buf)) => {
            rd.resume_with(from, own_buf, 0)?;
        }
        (None, None) => rd.seek_to(from)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    /// A range is taken out only at its start and only once; its bytes
    /// are then read from the file, the other ranges' still held.
    #[test]
    fn a_range_is_taken_once_at_its_start() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let mut tmp = tempfile::tempfile().unwrap();
        tmp.write_all(&bytes).unwrap();
        let mut held = Held::read(&tmp, &[(100, 300), (500, 900), (9_900, 10_200)], |_| true);
        assert_eq!(held.len(), 200 + 400 + 100);
        assert_eq!(held.take(101), None);
        assert_eq!(held.take(500).as_deref(), Some(&bytes[500..900]));
        assert_eq!(held.take(500), None);
        assert_eq!(held.at(600), None);
        assert_eq!(held.at(299), Some(&bytes[299..300]));
        assert_eq!(held.take(9_900).as_deref(), Some(&bytes[9_900..]));
        let mut b = Bounded {
            f: tmp,
            pos: 0,
            end: Rc::new(Limit::default()),
            held,
        };
        b.end.set(20_000);
        let mut all = Vec::new();
        b.read_to_end(&mut all).unwrap();
        assert_eq!(all, bytes);
    }

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
            // Disjoint, in file order, inside the file, none empty.
            let mut last = 0;
            for (from, b) in &held.ranges {
                prop_assert!(*from >= last && !b.is_empty());
                last = from + b.len() as u64;
                prop_assert!(last <= len);
            }
            let mut b = Bounded { f: tmp, pos: 0, end: Rc::new(Limit::default()), held };
            b.end.set(len + 100);
            let mut all = Vec::new();
            b.read_to_end(&mut all).unwrap();
            prop_assert_eq!(all, bytes);
        }
    }
}
