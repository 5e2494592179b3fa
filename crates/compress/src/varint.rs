//! Zig-zag signed deltas, and a bounds-checked cursor over a block's raw
//! bytes whose errors carry the byte offset.

use crate::{DecodeError, ErrorKind};

#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Reads a block payload's raw bytes; `base` is the payload's offset in
/// the file, so every error names the byte where it was found.
pub(crate) struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
    pub base: u64,
}

impl<'a> Cursor<'a> {
    pub fn err(&self, kind: ErrorKind) -> DecodeError {
        DecodeError {
            offset: self.base + self.pos as u64,
            kind,
        }
    }

    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.err(ErrorKind::Truncated))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_round_trip_and_cursor_limits() {
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        let b = [1u8, 2, 3];
        let mut c = Cursor {
            buf: &b,
            pos: 1,
            base: 100,
        };
        assert_eq!(c.bytes(2).unwrap(), &[2, 3]);
        assert_eq!(c.bytes(1).unwrap_err().offset, 103);
        assert_eq!(c.bytes(usize::MAX).unwrap_err().offset, 103);
    }
}
