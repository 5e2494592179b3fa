//! Reading ringcap's compressed files (crate `ringcap-compress`) through
//! the same [`Reader`]: whole blocks are decoded, records
//! come out one at a time, and the offset moves a block at a time.

use std::io::{self, Read};

use super::error::{truncated, FormatError, FormatErrorKind};
use super::meta::{FileFormat, Interface, TsUnit};
use super::{Packet, Reader, State};
use crate::TsResolution;

/// A compressed file's block being read: its records are decoded from a
/// copy, and the reader's offset stays at the block's start until the last
/// one is read (a block is whole or not at all).
pub(super) struct CompressedState {
    blocks: ringcap_compress::BlockReader,
    /// Length of the block being read, added to the offset at its end.
    pending: u64,
    /// The error a record of the block being read gave: every later call
    /// gives it again (the decoder has dropped the block, and the reader's
    /// buffer has moved past it).
    failed: Option<ringcap_compress::DecodeError>,
}

fn compressed_error(e: ringcap_compress::DecodeError) -> FormatError {
    match e.kind {
        ringcap_compress::ErrorKind::Io(kind, msg) => {
            FormatError::new(e.offset, FormatErrorKind::Io(io::Error::new(kind, msg)))
        }
        kind => FormatError::new(e.offset, FormatErrorKind::Compressed(kind)),
    }
}

impl<R: Read> Reader<R> {
    pub(super) fn read_compressed_header(&mut self) -> Result<(), FormatError> {
        let n = ringcap_compress::FILE_HEADER_LEN;
        let avail = self
            .fill(n)
            .map_err(|e| FormatError::new(0, FormatErrorKind::Io(e)))?;
        let h =
            ringcap_compress::FileHeader::parse(&self.buf[self.start..self.start + avail.min(n)])
                .map_err(compressed_error)?;
        let nano = h.resolution == ringcap_compress::Resolution::Nano;
        self.format = FileFormat::Compressed {
            resolution: if nano {
                TsResolution::Nano
            } else {
                TsResolution::Micro
            },
        };
        self.state = State::Compressed { nano };
        self.interfaces.push(Interface {
            linktype: h.linktype,
            snaplen: h.snaplen,
            name: None,
            description: None,
            filter: None,
            ts_unit: TsUnit::Pow10(if nano { 9 } else { 6 }),
            ts_offset_s: 0,
            section: 0,
        });
        self.compressed = Some(Box::new(CompressedState {
            blocks: ringcap_compress::BlockReader::new(&h),
            pending: 0,
            failed: None,
        }));
        self.consume(n);
        Ok(())
    }

    /// The next record of a compressed file.
    pub(super) fn next_compressed(
        &mut self,
        nano: bool,
    ) -> Result<Option<Packet<'_>>, FormatError> {
        if let Some(e) = self.compressed.as_ref().and_then(|c| c.failed.clone()) {
            return Err(compressed_error(e));
        }
        // Blocks with no records (no encoder writes them) are passed over.
        while self
            .compressed
            .as_ref()
            .is_some_and(|c| c.blocks.remaining() == 0)
        {
            let off = self.pos;
            let io_err = |e| FormatError::new(off, FormatErrorKind::Io(e));
            let head = ringcap_compress::BLOCK_HEADER_LEN;
            let avail = self.fill(head).map_err(io_err)?;
            if avail == 0 {
                return Ok(None);
            }
            if avail < head {
                return Err(truncated(off, "block header", avail, head));
            }
            let len = ringcap_compress::BlockReader::block_len(
                &self.buf[self.start..self.start + head],
                off,
            )
            .map_err(compressed_error)?;
            let avail = self.fill(len).map_err(io_err)?;
            if avail < len {
                return Err(truncated(off, "block", avail, len));
            }
            let Some(c) = self.compressed.as_mut() else {
                return Ok(None);
            };
            c.blocks
                .load(&self.buf[self.start..self.start + len], off)
                .map_err(compressed_error)?;
            c.pending = len as u64;
            self.start += len;
            if c.blocks.remaining() == 0 {
                self.pos += std::mem::take(&mut c.pending);
            }
        }
        let Some(c) = self.compressed.as_mut() else {
            return Ok(None);
        };
        // The offset moves past the block with its last record (and back
        // if that record turns out bad).
        let pending = c.pending;
        if c.blocks.remaining() <= 1 {
            self.pos += std::mem::take(&mut c.pending);
        }
        let rec = match c.blocks.next_record() {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(e) => {
                if c.pending == 0 {
                    self.pos -= pending;
                }
                c.failed = Some(e.clone());
                return Err(compressed_error(e));
            }
        };
        let ts_ns = if nano {
            rec.ts
        } else {
            rec.ts.saturating_mul(1_000)
        };
        Ok(Some(Packet {
            interface: 0,
            ts_ns,
            wire_len: rec.wire_len,
            data: rec.data,
        }))
    }
}
