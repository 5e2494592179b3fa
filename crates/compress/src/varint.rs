//! LEB128 varints and zig-zag signed deltas, and a bounds-checked cursor
//! whose errors carry the byte offset.

use crate::{DecodeError, ErrorKind};

#[inline]
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Reads a block payload; `base` is the payload's offset in the file, so
/// every error names the byte where it was found.
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
    pub fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.err(ErrorKind::Truncated))?;
        self.pos += 1;
        Ok(b)
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

    #[inline]
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    #[inline]
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                break;
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        self.pos = start;
        Err(self.err(ErrorKind::BadVarint))
    }

    #[inline]
    pub fn signed(&mut self) -> Result<i64, DecodeError> {
        Ok(unzigzag(self.varint()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_limits() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            let mut c = Cursor {
                buf: &b,
                pos: 0,
                base: 0,
            };
            assert_eq!(c.varint().unwrap(), v);
            assert_eq!(c.pos, b.len());
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        let over = [0xffu8; 11];
        let mut c = Cursor {
            buf: &over,
            pos: 0,
            base: 100,
        };
        assert_eq!(c.varint().unwrap_err().offset, 100);
    }
}
