//! A capture file read up to a movable end, so that the reader (whose
//! buffer is a megabyte) reads only the bytes of a run of groups, or of a
//! packet whose start the index gives (`file/exact.rs`): then the end is a
//! guess of the packet's length, and a packet longer than the guess is
//! read on past it, [`STRETCH`] bytes at a time.

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
    let end = Rc::new(Limit::default());
    end.set(OPEN_LEN);
    let bounded = Bounded {
        f,
        pos: 0,
        end: end.clone(),
    };
    Ok((Reader::with_buffer(bounded, buf)?, end))
}
