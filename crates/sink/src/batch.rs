//! Page-aligned output buffers, handed between capture and writer threads.

use std::time::Instant;

/// Alignment of batch data: what O_DIRECT needs for memory and file offsets.
pub const ALIGN: usize = 4096;

/// A buffer of encoded records for one interface.
pub struct Batch {
    storage: Vec<u8>,
    start: usize,
    capacity: usize,
    len: usize,
    /// Records in the batch.
    pub packets: u64,
    /// Index of the capture interface whose packets these are.
    pub interface: usize,
    /// Which capture thread's pool the batch returns to.
    pub pool: usize,
    /// When the first record went in (for the flush interval).
    pub started: Option<Instant>,
    /// Timestamp of the last record, ns (for time rotation).
    pub last_ts: u64,
}

impl Batch {
    /// A batch of `capacity` bytes (rounded up to [`ALIGN`]), pre-faulted.
    pub fn new(capacity: usize, interface: usize, pool: usize) -> Batch {
        let capacity = capacity.div_ceil(ALIGN) * ALIGN;
        let mut storage = vec![0u8; capacity + ALIGN];
        let start = storage.as_ptr().align_offset(ALIGN).min(ALIGN);
        // Touch every page now (fresh memory costs a fault per page on first
        // use); not zero, which the allocator's calloc may let the compiler skip.
        for i in (0..storage.len()).step_by(ALIGN) {
            storage[i] = 0xa5;
        }
        Batch {
            storage,
            start,
            capacity,
            len: 0,
            packets: 0,
            interface,
            pool,
            started: None,
            last_ts: 0,
        }
    }

    /// The encoded bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    /// Free room.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.capacity - self.len
    }

    /// Total room.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes used.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is in the batch.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The next `n` free bytes, to be filled and then committed with [`commit`](Self::commit).
    #[inline]
    pub fn reserve(&mut self, n: usize) -> &mut [u8] {
        let at = self.start + self.len;
        &mut self.storage[at..at + n]
    }

    /// Marks `n` reserved bytes as one more record.
    #[inline]
    pub fn commit(&mut self, n: usize) {
        self.len += n;
        self.packets += 1;
    }

    /// Appends raw bytes that are not a packet record (file headers, ISBs);
    /// false if they do not fit.
    pub fn append_raw(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() > self.remaining() {
            return false;
        }
        self.reserve(bytes.len()).copy_from_slice(bytes);
        self.len += bytes.len();
        true
    }

    /// Empties the batch for reuse.
    pub fn clear(&mut self) {
        self.len = 0;
        self.packets = 0;
        self.started = None;
    }

    /// Moves the first `n` bytes out by shifting the rest to the front (used
    /// by the O_DIRECT strategy to keep a partial block).
    pub fn drain_front(&mut self, n: usize) {
        let s = self.start;
        self.storage.copy_within(s + n..s + self.len, s);
        self.len -= n;
    }

    /// Aligned view of the whole used region rounded up to [`ALIGN`] (the
    /// bytes past `len` are whatever the buffer held).
    pub fn aligned_bytes(&self) -> &[u8] {
        let n = self.len.div_ceil(ALIGN) * ALIGN;
        &self.storage[self.start..self.start + n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_sized() {
        let mut b = Batch::new(5000, 0, 0);
        assert_eq!(b.capacity(), 8192);
        assert_eq!(b.bytes().as_ptr() as usize % ALIGN, 0);
        b.reserve(3).copy_from_slice(&[1, 2, 3]);
        b.commit(3);
        assert_eq!(b.bytes(), &[1, 2, 3]);
        assert_eq!(b.packets, 1);
        assert_eq!(b.aligned_bytes().len(), 4096);
        b.drain_front(1);
        assert_eq!(b.bytes(), &[2, 3]);
    }
}
