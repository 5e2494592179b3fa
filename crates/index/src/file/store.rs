//! Where an index's bytes are: in memory (tests, fuzzing) or in its file,
//! read part by part as lookups need them.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{damaged, IndexError};

/// Where an index's bytes are.
#[derive(Debug)]
pub(super) enum Store {
    /// All in memory (tests, fuzzing).
    Bytes(Vec<u8>),
    /// In a file of this length, read as lookups need them.
    File(File, u64),
}

impl Store {
    /// Asks the kernel to read `len` bytes at `at` soon (a hint).
    pub(super) fn will_need(&self, at: u64, len: usize) {
        if let (Store::File(f, _), Some(len)) = (self, std::num::NonZeroU64::new(len as u64)) {
            let _ = rustix::fs::fadvise(f, at, Some(len), rustix::fs::Advice::WillNeed);
        }
    }

    pub(super) fn len(&self) -> u64 {
        match self {
            Store::Bytes(b) => b.len() as u64,
            Store::File(_, len) => *len,
        }
    }

    /// Puts the `len` bytes at `at` in `buf` (and nothing else).
    pub(super) fn read(&self, at: u64, len: usize, buf: &mut Vec<u8>) -> Result<(), IndexError> {
        let end = at
            .checked_add(len as u64)
            .filter(|&e| e <= self.len())
            .ok_or_else(|| damaged("a part runs past the end of the file"))?;
        buf.clear();
        match self {
            Store::Bytes(b) => buf.extend_from_slice(&b[at as usize..end as usize]),
            Store::File(f, _) => {
                buf.resize(len, 0);
                f.read_exact_at(buf, at)
                    .map_err(|e| IndexError::Io(e.to_string()))?;
            }
        }
        Ok(())
    }
}
