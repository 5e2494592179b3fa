//! One block at a time: its header checked, its checksum, and
//! [`BlockReader`], which decodes the blocks a caller buffers itself. The
//! whole-file readers build on these.

use crate::codec;
use crate::{
    le32, DecodeError, ErrorKind, FileHeader, Record, BLOCK_HEADER_LEN, BLOCK_MAGIC, MAX_BLOCK,
};

/// A block header, checked.
pub(crate) struct BlockHeader {
    pub(crate) len: usize,
    pub(crate) count: u32,
    pub(crate) base_ts: u64,
    pub(crate) crc: u32,
}

pub(crate) fn block_header(h: &[u8], offset: u64) -> Result<BlockHeader, DecodeError> {
    if h.len() < BLOCK_HEADER_LEN {
        return Err(DecodeError {
            offset: offset + h.len() as u64,
            kind: ErrorKind::Truncated,
        });
    }
    if h[..4] != BLOCK_MAGIC {
        return Err(DecodeError {
            offset,
            kind: ErrorKind::BadBlockMagic,
        });
    }
    let len = le32(h, 4);
    if len as usize > MAX_BLOCK {
        return Err(DecodeError {
            offset: offset + 4,
            kind: ErrorKind::BlockTooLarge(len),
        });
    }
    Ok(BlockHeader {
        len: len as usize,
        count: le32(h, 8),
        base_ts: u64::from_le_bytes(h[12..20].try_into().unwrap_or_default()),
        crc: le32(h, 20),
    })
}

pub(crate) fn crc_ok(h: &[u8], payload: &[u8], want: u32) -> bool {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h[4..20]);
    crc.update(payload);
    crc.finalize() == want
}

/// What a block's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// Bytes of the whole block, header included.
    pub len: usize,
    /// Records in it.
    pub records: u32,
    /// Timestamp of its first record, in the file's unit.
    pub first_ts: u64,
}

/// The header of the block at the start of `head` (found at file offset
/// `offset`), without checking its payload; see [`check_block`].
pub fn peek_block(head: &[u8], offset: u64) -> Result<BlockInfo, DecodeError> {
    let h = block_header(head, offset)?;
    Ok(BlockInfo {
        len: BLOCK_HEADER_LEN + h.len,
        records: h.count,
        first_ts: h.base_ts,
    })
}

/// Checks that `block` is exactly one whole block (found at file offset
/// `offset`) whose checksum is right, without decoding it: for a writer
/// that stores blocks coded elsewhere as they are.
pub fn check_block(block: &[u8], offset: u64) -> Result<BlockInfo, DecodeError> {
    let info = peek_block(block, offset)?;
    if block.len() != info.len {
        return Err(DecodeError {
            offset: offset + block.len().min(info.len) as u64,
            kind: if block.len() < info.len {
                ErrorKind::Truncated
            } else {
                ErrorKind::TrailingBytes
            },
        });
    }
    let h = block_header(block, offset)?;
    if !crc_ok(block, &block[BLOCK_HEADER_LEN..], h.crc) {
        return Err(DecodeError {
            offset,
            kind: ErrorKind::BadChecksum,
        });
    }
    Ok(info)
}

/// Decodes blocks one at a time, for readers that do their own buffering
/// (ringcap-format's reader): [`block_len`](Self::block_len) says how many
/// bytes the block at hand needs, [`load`](Self::load) takes them,
/// [`next_record`](Self::next_record) gives its records.
pub struct BlockReader {
    dec: codec::BlockDecoder,
    block: Vec<u8>,
    left: u32,
    /// File offset of the loaded block's payload.
    base: u64,
}

impl BlockReader {
    /// A reader of blocks of a file with `header`.
    pub fn new(header: &FileHeader) -> BlockReader {
        BlockReader {
            dec: codec::BlockDecoder::new(header.linktype, header.version),
            block: Vec::new(),
            left: 0,
            base: 0,
        }
    }

    /// Total length (header and payload) of the block whose header is at
    /// the start of `head` (at least [`BLOCK_HEADER_LEN`] bytes), found at
    /// file offset `offset`.
    pub fn block_len(head: &[u8], offset: u64) -> Result<usize, DecodeError> {
        Ok(BLOCK_HEADER_LEN + block_header(head, offset)?.len)
    }

    /// Takes the whole block `block` found at file offset `offset` (its
    /// checksum is checked here) in place of the previous one, whose
    /// records must all have been read.
    pub fn load(&mut self, block: &[u8], offset: u64) -> Result<(), DecodeError> {
        if self.left != 0 {
            return Err(DecodeError {
                offset: self.base,
                kind: ErrorKind::TrailingBytes,
            });
        }
        let bh = block_header(block, offset)?;
        let payload = block
            .get(BLOCK_HEADER_LEN..BLOCK_HEADER_LEN + bh.len)
            .ok_or(DecodeError {
                offset: offset + block.len() as u64,
                kind: ErrorKind::Truncated,
            })?;
        if !crc_ok(block, payload, bh.crc) {
            return Err(DecodeError {
                offset,
                kind: ErrorKind::BadChecksum,
            });
        }
        self.block.clear();
        self.block.extend_from_slice(payload);
        self.base = offset + BLOCK_HEADER_LEN as u64;
        self.left = 0;
        if bh.count == 0 {
            return Ok(());
        }
        self.dec.reset(&self.block, self.base, bh.base_ts)?;
        self.left = bh.count;
        Ok(())
    }

    /// Records of the loaded block not read yet.
    pub fn remaining(&self) -> u32 {
        self.left
    }

    /// The loaded block's next record, `None` when all are read.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, DecodeError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        if self.left == 0 {
            // The last record: the block must hold nothing after it.
            let end = self
                .dec
                .next(&self.block, self.base)
                .map(|r| (r.ts, r.wire_len));
            let end = match end {
                Ok(r) => self.dec.finished(&self.block, self.base).map(|_| r),
                Err(e) => Err(e),
            };
            return match end {
                Ok((ts, wire_len)) => Ok(Some(Record {
                    ts,
                    wire_len,
                    data: self.dec.data(),
                })),
                Err(e) => Err(e),
            };
        }
        match self.dec.next(&self.block, self.base) {
            Ok(rec) => Ok(Some(rec)),
            Err(e) => {
                // A damaged block is not read further.
                self.left = 0;
                Err(e)
            }
        }
    }
}
