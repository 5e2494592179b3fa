//! The consumer side of a BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`), mapped
//! into this process and read in place: a batch of records is handed over
//! as slices of the mapping, and the records are given back to the kernel
//! with one store of the consumer position after the batch.
//!
//! Layout (the kernel's `kernel/bpf/ringbuf.c`, as libbpf maps it): page 0
//! holds the consumer position (mapped read-write); from page 1 on, the
//! producer position's page, then the data area mapped twice in a row, so a
//! record that wraps around the end reads as one contiguous slice. Each
//! record starts with an 8-byte header (length with a busy and a discard
//! bit, page offset), and records are 8-byte aligned.
//!
//! This is the crate's only `unsafe`: the mappings and the atomic accesses
//! to the positions and record headers inside them.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const HEADER: u64 = 8;

/// A mapped ring buffer, read by one consumer.
pub struct RingReader {
    consumer: NonNull<u8>,
    producer: NonNull<u8>,
    page: usize,
    size: u64,
    /// Consumer position as this reader knows it (it is the only writer).
    pos: u64,
}

// SAFETY: the mappings belong to this value alone (one consumer); the
// kernel's side is reached through atomics only.
unsafe impl Send for RingReader {}

/// One record: its bytes, valid until the batch's callback returns.
pub type Record<'a> = &'a [u8];

impl RingReader {
    /// Maps the ring buffer map `fd` of `size` data bytes (its max_entries).
    pub fn map(fd: BorrowedFd<'_>, size: u64) -> io::Result<RingReader> {
        if !size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring buffer size is not a power of two",
            ));
        }
        // SAFETY: sysconf has no memory effects.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: a fresh shared mapping of the map's consumer page; the
        // kernel checks the length and offset against the map.
        let consumer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if consumer == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let len = page + 2 * size as usize;
        // SAFETY: as above, read-only: the producer page and the data area
        // twice (the kernel lays the double mapping out itself).
        let producer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                page as libc::off_t,
            )
        };
        if producer == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: unmaps exactly the mapping made above.
            unsafe { libc::munmap(consumer, page) };
            return Err(e);
        }
        let (Some(consumer), Some(producer)) = (
            NonNull::new(consumer.cast::<u8>()),
            NonNull::new(producer.cast::<u8>()),
        ) else {
            return Err(io::Error::other("mmap returned a null mapping"));
        };
        let mut r = RingReader {
            consumer,
            producer,
            page,
            size,
            pos: 0,
        };
        r.pos = r.consumer_pos().load(Ordering::Acquire);
        Ok(r)
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: page 0 of the consumer mapping holds the 8-byte, aligned
        // consumer position for as long as the mapping lives (as `self`).
        unsafe { &*self.consumer.as_ptr().cast::<AtomicU64>() }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: the first word of the producer mapping is the producer
        // position, aligned, written by the kernel only.
        unsafe { &*self.producer.as_ptr().cast::<AtomicU64>() }
    }

    /// Bytes of records not read yet, and the ring's size.
    pub fn backlog(&self) -> (u64, u64) {
        let prod = self.producer_pos().load(Ordering::Acquire);
        (prod.saturating_sub(self.pos), self.size)
    }

    /// True when a record (or a reservation in progress) is waiting.
    pub fn has_data(&self) -> bool {
        self.producer_pos().load(Ordering::Acquire) > self.pos
    }

    /// Hands the committed records, in order, to `each` (discarded ones are
    /// skipped), at most `max_records` of them and stopping once `max_bytes`
    /// of records were handed over; returns how many were handed over.
    /// `each` returns false to end the batch after its record. The records
    /// go back to the kernel when this returns.
    pub fn read_batch<F: FnMut(Record<'_>) -> bool>(
        &mut self,
        max_records: usize,
        max_bytes: u64,
        mut each: F,
    ) -> usize {
        let prod = self.producer_pos().load(Ordering::Acquire);
        let start = self.pos;
        let mut n = 0;
        let mut pos = self.pos;
        while pos < prod && n < max_records && pos - start < max_bytes {
            let offset = (pos & (self.size - 1)) as usize;
            // SAFETY: `offset` < size, so the 8-byte header lies inside the
            // first copy of the data area, 8-byte aligned (records are).
            let header = unsafe {
                &*self
                    .producer
                    .as_ptr()
                    .add(self.page + offset)
                    .cast::<AtomicU32>()
            };
            let len = header.load(Ordering::Acquire);
            if len & BUSY_BIT != 0 {
                break;
            }
            let data_len = (len & !(BUSY_BIT | DISCARD_BIT)) as usize;
            if data_len as u64 + HEADER > self.size {
                // Cannot happen with a kernel that keeps its layout; stop
                // rather than read outside the mapping.
                break;
            }
            pos += (data_len as u64 + HEADER + 7) & !7;
            if len & DISCARD_BIT != 0 {
                continue;
            }
            // SAFETY: the record's data follows its header and is at most
            // `size` bytes long; thanks to the double mapping it lies inside
            // the mapping even when it wraps. The kernel does not write a
            // committed record until the consumer position passes it, which
            // happens only after this batch.
            let data = unsafe {
                std::slice::from_raw_parts(
                    self.producer
                        .as_ptr()
                        .add(self.page + offset + HEADER as usize),
                    data_len,
                )
            };
            n += 1;
            if !each(data) {
                break;
            }
        }
        if pos != self.pos {
            self.pos = pos;
            self.consumer_pos().store(pos, Ordering::Release);
        }
        n
    }
}

impl Drop for RingReader {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the two mappings made in `map`; no slice
        // into them outlives a batch.
        unsafe {
            libc::munmap(self.consumer.as_ptr().cast(), self.page);
            libc::munmap(
                self.producer.as_ptr().cast(),
                self.page + 2 * self.size as usize,
            );
        }
    }
}
