//! The public encoder: the record codec's block encoder wrapped with the
//! block framing (header, checksum) and the block-size policy.

use crate::codec;
use crate::{BLOCK_HEADER_LEN, BLOCK_MAGIC, BLOCK_TARGET, MAX_CAPLEN};

/// Codes records into blocks.
pub struct Encoder {
    inner: codec::BlockEncoder,
    payload: Vec<u8>,
}

impl Encoder {
    /// An encoder for packets of `linktype` (pcap LINKTYPE).
    pub fn new(linktype: u32) -> Encoder {
        Encoder {
            inner: codec::BlockEncoder::new(linktype),
            payload: Vec::new(),
        }
    }

    /// Adds a record to the current block: timestamp `ts` in the file's
    /// unit, original length `wire_len`, captured bytes `data` (at most
    /// [`MAX_CAPLEN`]; longer data is cut, as no reader would accept it).
    /// Returns true once the block has reached [`BLOCK_TARGET`] bytes:
    /// time to [`finish_block`](Self::finish_block).
    #[inline]
    pub fn push(&mut self, ts: u64, wire_len: u32, data: &[u8]) -> bool {
        let data = &data[..data.len().min(MAX_CAPLEN as usize)];
        self.inner.push(ts, wire_len, data);
        self.inner.len() >= BLOCK_TARGET || self.inner.count == u32::MAX
    }

    /// Bytes written per part of the record so far (feature `stats`, for
    /// study: see examples/rcz-stats).
    #[cfg(feature = "stats")]
    pub fn stats(&self) -> [u64; 24] {
        self.inner.stats
    }

    /// Records in the current block.
    pub fn records(&self) -> u32 {
        self.inner.count
    }

    /// Payload bytes of the current block so far.
    pub fn pending_bytes(&self) -> usize {
        self.inner.len()
    }

    /// Appends the current block (if it has records) to `out` and starts a
    /// new one with every context forgotten.
    pub fn finish_block(&mut self, out: &mut Vec<u8>) {
        if self.inner.count == 0 {
            return;
        }
        self.payload.clear();
        self.inner.finish(&mut self.payload);
        let p = &self.payload;
        let mut h = [0u8; BLOCK_HEADER_LEN];
        h[..4].copy_from_slice(&BLOCK_MAGIC);
        h[4..8].copy_from_slice(&(p.len() as u32).to_le_bytes());
        h[8..12].copy_from_slice(&self.inner.count.to_le_bytes());
        h[12..20].copy_from_slice(&self.inner.base_ts.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&h[4..20]);
        crc.update(p);
        h[20..24].copy_from_slice(&crc.finalize().to_le_bytes());
        out.reserve(BLOCK_HEADER_LEN + p.len());
        out.extend_from_slice(&h);
        out.extend_from_slice(p);
        self.inner.reset();
    }
}
