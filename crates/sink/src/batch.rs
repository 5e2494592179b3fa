//! Page-aligned output buffers, handed between capture and writer threads.
//!
//! Each batch keeps up to [`ALIGN`] + [`ALIGN`] bytes of headroom in front of
//! its data. The encoder places the data so that its address has the same
//! offset within a page as its future position in the file; the O_DIRECT
//! writer then puts the previous batch's unaligned tail into the headroom and
//! writes straight from the batch, without copying it (see `strategy`).

use std::time::Instant;

/// Alignment of O_DIRECT memory addresses, file offsets and lengths.
pub const ALIGN: usize = 4096;
/// A transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

/// A buffer of encoded records for one interface.
pub struct Batch {
    storage: Vec<u8>,
    /// Offset of the first page-aligned byte of `storage`.
    base: usize,
    /// Offset of the data from `base` (headroom), in [ALIGN, 2 * ALIGN).
    head: usize,
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
    /// It holds whole ringcap-compress blocks coded elsewhere (ringcapd's
    /// compressed stream), to be written as they are, not records.
    pub coded: bool,
}

impl Batch {
    /// A batch of `capacity` bytes (rounded up to [`ALIGN`]), pre-faulted.
    pub fn new(capacity: usize, interface: usize, pool: usize) -> Batch {
        let capacity = capacity.div_ceil(ALIGN) * ALIGN;
        // Aligned to a huge page and advised to use them: pre-faulting and,
        // at exit, freeing a 256 MiB pool of 4 KiB pages costs ~25 ms of CPU;
        // in 2 MiB pages almost nothing. The slack beyond that is never touched.
        let mut storage = vec![0u8; capacity + 3 * ALIGN + HUGE_PAGE];
        let base = storage.as_ptr().align_offset(HUGE_PAGE).min(HUGE_PAGE);
        crate::sys::advise_huge_pages(&mut storage[base..base + capacity + 3 * ALIGN]);
        // Touch every page now (fresh memory costs a fault per page on first
        // use); not zero, which the allocator's calloc may let the compiler skip.
        for i in (base..base + capacity + 3 * ALIGN).step_by(ALIGN) {
            storage[i] = 0xa5;
        }
        Batch {
            storage,
            base,
            head: ALIGN,
            capacity,
            len: 0,
            packets: 0,
            interface,
            pool,
            started: None,
            last_ts: 0,
            coded: false,
        }
    }

    #[inline]
    fn data_start(&self) -> usize {
        self.base + self.head
    }

    /// The encoded bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.storage[self.data_start()..self.data_start() + self.len]
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
        let at = self.data_start() + self.len;
        &mut self.storage[at..at + n]
    }

    /// `len` committed bytes from `offset` of the data, to rewrite in place.
    #[inline]
    pub fn record_mut(&mut self, offset: usize, len: usize) -> &mut [u8] {
        let at = self.data_start() + offset;
        &mut self.storage[at..at + len]
    }

    /// Marks `n` reserved bytes as one more record.
    #[inline]
    pub fn commit(&mut self, n: usize) {
        self.len += n;
        self.packets += 1;
    }

    /// Marks `n` reserved bytes as `records` more records.
    #[inline]
    pub fn commit_records(&mut self, n: usize, records: u64) {
        self.len += n;
        self.packets += records;
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

    /// Empties the batch for reuse; the data will start at an address whose
    /// offset within a page is `page_offset` (what the file offset of the
    /// data will be, modulo [`ALIGN`]).
    pub fn clear_at(&mut self, page_offset: usize) {
        self.head = ALIGN + page_offset % ALIGN;
        self.len = 0;
        self.packets = 0;
        self.started = None;
        self.coded = false;
    }

    /// Empties the batch for reuse.
    pub fn clear(&mut self) {
        self.clear_at(0);
    }

    /// Moves the first `n` bytes out by shifting the rest to the front (used
    /// by the O_DIRECT strategy to keep a partial block).
    pub fn drain_front(&mut self, n: usize) {
        let s = self.data_start();
        self.storage.copy_within(s + n..s + self.len, s);
        self.len -= n;
    }

    /// Aligned view of the used region rounded up to [`ALIGN`] (the bytes
    /// past `len` are whatever the buffer held). Only for batches cleared
    /// with page offset 0.
    pub fn aligned_bytes(&self) -> &[u8] {
        let n = self.len.div_ceil(ALIGN) * ALIGN;
        &self.storage[self.data_start()..self.data_start() + n]
    }

    /// For the O_DIRECT writer: `front` is put in the bytes just before data
    /// offset `from`, and the region from there to data offset `to` is
    /// returned (as a range of [`Batch::storage_bytes`]), if it starts
    /// page-aligned and there is room in front (the bytes before `from` are
    /// either headroom or already written).
    pub fn join_front(
        &mut self,
        front: &[u8],
        from: usize,
        to: usize,
    ) -> Option<std::ops::Range<usize>> {
        let at = (self.data_start() + from).checked_sub(front.len())?;
        if at < self.base
            || !(self.storage.as_ptr() as usize + at).is_multiple_of(ALIGN)
            || to > self.len
        {
            return None;
        }
        self.storage[at..at + front.len()].copy_from_slice(front);
        Some(at..self.data_start() + to)
    }

    /// The whole buffer, headroom and slack included (for ranges returned by
    /// [`Batch::join_front`]).
    pub fn storage_bytes(&self) -> &[u8] {
        &self.storage
    }

    /// Exchanges the memory of two batches of the same capacity, leaving
    /// every other field (interface, pool, counts) where it was: the
    /// io_uring writer keeps the memory of a batch it is writing and gives
    /// the pool an idle buffer in its place. Both are left empty.
    pub fn swap_storage(&mut self, other: &mut Batch) {
        assert_eq!(self.capacity, other.capacity, "batches of different sizes");
        std::mem::swap(&mut self.storage, &mut other.storage);
        std::mem::swap(&mut self.base, &mut other.base);
        self.clear();
        other.clear();
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

    #[test]
    fn page_offset_and_join() {
        let mut b = Batch::new(8192, 0, 0);
        b.clear_at(100);
        assert_eq!(b.bytes().as_ptr() as usize % ALIGN, 100);
        b.append_raw(&[7; 50]);
        // 100 bytes of carry go in front: the joined region is aligned.
        let range = b.join_front(&[1; 100], 0, 50).unwrap();
        let joined = b.storage_bytes()[range].to_vec();
        assert_eq!(joined.len(), 150);
        assert_eq!(&joined[..100], &[1; 100]);
        assert_eq!(&joined[100..], &[7; 50]);
        // A carry of the wrong size cannot be joined.
        assert!(b.join_front(&[1; 99], 0, 50).is_none());
    }
}
