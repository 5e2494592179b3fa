//! Whole files: [`Reader`], record by record from any [`Read`], and the
//! functions over a file held in memory (decode it, find a block, decode
//! one block, find the whole prefix of a file cut short).

use std::io::{self, Read};

use crate::block::{block_header, crc_ok, BlockReader};
use crate::codec;
use crate::{
    DecodeError, ErrorKind, FileHeader, Record, BLOCK_HEADER_LEN, BLOCK_MAGIC, FILE_HEADER_LEN,
};

/// Reads a compressed file record by record.
pub struct Reader<R: Read> {
    r: R,
    header: FileHeader,
    blocks: BlockReader,
    buf: Vec<u8>,
    /// File offset of the next block.
    next: u64,
}

impl<R: Read> Reader<R> {
    /// Reads the file header.
    pub fn new(mut r: R) -> Result<Reader<R>, DecodeError> {
        let mut h = [0u8; FILE_HEADER_LEN];
        let n = read_full(&mut r, &mut h, 0)?;
        let header = FileHeader::parse(&h[..n])?;
        Ok(Reader {
            r,
            blocks: BlockReader::new(&header),
            header,
            buf: Vec::new(),
            next: FILE_HEADER_LEN as u64,
        })
    }

    /// The file header.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// Bytes of the file read so far (whole blocks).
    pub fn offset(&self) -> u64 {
        self.next
    }

    /// The next record, `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, DecodeError> {
        while self.blocks.remaining() == 0 {
            let at = self.next;
            self.buf.resize(BLOCK_HEADER_LEN, 0);
            let n = read_full(&mut self.r, &mut self.buf, at)?;
            if n == 0 {
                return Ok(None);
            }
            let len = BlockReader::block_len(&self.buf[..n], at)?;
            let got = (&mut self.r)
                .take((len - BLOCK_HEADER_LEN) as u64)
                .read_to_end(&mut self.buf)
                .map_err(|e| io_err(e, at))?;
            if BLOCK_HEADER_LEN + got < len {
                return Err(DecodeError {
                    offset: at + (BLOCK_HEADER_LEN + got) as u64,
                    kind: ErrorKind::Truncated,
                });
            }
            self.blocks.load(&self.buf, at)?;
            self.next = at + len as u64;
        }
        self.blocks.next_record()
    }
}

fn io_err(e: io::Error, offset: u64) -> DecodeError {
    DecodeError {
        offset,
        kind: ErrorKind::Io(e.kind(), e.to_string()),
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8], offset: u64) -> Result<usize, DecodeError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e, offset + n as u64)),
        }
    }
    Ok(n)
}

/// Decodes every record of a whole file held in memory, calling `f` for
/// each; stops at the first error.
pub fn decode(file: &[u8], mut f: impl FnMut(Record<'_>)) -> Result<FileHeader, DecodeError> {
    let mut r = Reader::new(file)?;
    while let Some(rec) = r.next_record()? {
        f(rec);
    }
    Ok(r.header)
}

/// The start of the next whole, undamaged block at or after `from` in a
/// file held in memory (magic, length and checksum right), to resume
/// reading after a damaged one.
pub fn find_block(file: &[u8], from: usize) -> Option<usize> {
    let mut i = from.max(FILE_HEADER_LEN);
    while i + BLOCK_HEADER_LEN <= file.len() {
        let k = file[i..].windows(4).position(|w| w == BLOCK_MAGIC)?;
        i += k;
        if let Ok(bh) = block_header(&file[i..], i as u64) {
            let start = i + BLOCK_HEADER_LEN;
            if let Some(p) = file.get(start..start + bh.len) {
                if crc_ok(&file[i..], p, bh.crc) {
                    return Some(i);
                }
            }
        }
        i += 1;
    }
    None
}

/// Decodes the block at `at` of a file held in memory on its own (every
/// block stands alone), calling `f` for each record; returns the offset of
/// the next block.
pub fn decode_block(
    file: &[u8],
    at: usize,
    mut f: impl FnMut(Record<'_>),
) -> Result<usize, DecodeError> {
    let header = FileHeader::parse(file)?;
    let bh = block_header(file.get(at..).unwrap_or_default(), at as u64)?;
    let start = at + BLOCK_HEADER_LEN;
    let payload = file.get(start..start + bh.len).ok_or(DecodeError {
        offset: file.len() as u64,
        kind: ErrorKind::Truncated,
    })?;
    if !crc_ok(&file[at..], payload, bh.crc) {
        return Err(DecodeError {
            offset: at as u64,
            kind: ErrorKind::BadChecksum,
        });
    }
    if bh.count > 0 {
        let mut dec = codec::BlockDecoder::new(header.linktype, header.version);
        dec.reset(payload, start as u64, bh.base_ts)?;
        for _ in 0..bh.count {
            f(dec.next(payload, start as u64)?);
        }
        dec.finished(payload, start as u64)?;
    }
    Ok(start + bh.len)
}

/// How much of a (possibly cut-short) file is whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Bytes up to the end of the last whole, undamaged block (0 if not
    /// even the file header is whole).
    pub valid_len: u64,
    /// Whole blocks.
    pub blocks: u64,
    /// Records in them.
    pub records: u64,
}

/// The whole blocks at the start of `file` (checked by length and checksum,
/// not decoded): where to cut a file a crash left partly written.
pub fn valid_prefix(file: &[u8]) -> Prefix {
    let mut p = Prefix {
        valid_len: 0,
        blocks: 0,
        records: 0,
    };
    if FileHeader::parse(file).is_err() {
        return p;
    }
    let mut at = FILE_HEADER_LEN;
    p.valid_len = at as u64;
    while let Ok(bh) = block_header(&file[at..], at as u64) {
        let start = at + BLOCK_HEADER_LEN;
        match file.get(start..start + bh.len) {
            Some(payload) if crc_ok(&file[at..], payload, bh.crc) => {}
            _ => break,
        }
        at = start + bh.len;
        p.valid_len = at as u64;
        p.blocks += 1;
        p.records += bh.count as u64;
    }
    p
}
