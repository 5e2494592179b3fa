//! The daemon's side of the ring: creates and seals the memory, appends
//! chunks, counts what did not fit, wakes the client.
//!
//! # What the daemon trusts
//!
//! Nothing the client can change. The client can write exactly two things the
//! daemon looks at, both in the consumer region, and the daemon reads each
//! with one atomic load:
//!
//! - the read position, clamped to `[last clamped value, write position]`
//!   before use. Garbage, a position that goes backwards or one that runs
//!   ahead of the data only makes the client look as if it made no progress
//!   or consumed everything it was given: the daemon never writes outside the
//!   data area (offsets are masked) and never writes bytes the client has not
//!   freed by its own word. A client that lies hurts only itself. The position
//!   is read only when the space known to be free is not enough for the next
//!   chunk (and in [`RingWriter::free_bytes`]), so a keeping-up client costs
//!   the daemon no cache misses on that line;
//! - the waiting flag: non-zero asks for a wake-up byte after each append
//!   (one `write` to a non-blocking pipe). A client that always sets it gets
//!   a wake-up per chunk — what a plain per-chunk notification would cost —
//!   and one that never sets it gets none. Either way only that client is
//!   affected.
//!
//! The client cannot shrink, grow or write the data region (seals, see
//! [`RingWriter::create`]), cannot shrink or grow the consumer region, and
//! cannot make the daemon's wake-up write block: the daemon writes to the
//! write end of a pipe whose open file description never leaves the daemon
//! (the client gets the read end). An eventfd would not do: both sides share
//! one open file description, so a client can clear `O_NONBLOCK` on it and
//! fill the counter to its maximum, and the daemon's next `write` blocks
//! forever (checked on this machine). With a pipe, a full pipe only means the
//! client already has wake-ups pending (`EAGAIN`, ignored).
//!
//! # Chunks filled in place
//!
//! Besides [`RingWriter::append`] (a chunk made elsewhere, copied in whole),
//! a writer can grow a chunk in place: [`RingWriter::extend`] copies records
//! straight into free space after the write position and
//! [`RingWriter::commit`] writes the chunk's header and publishes it. The
//! capture thread then copies each record once, into the client's memory,
//! instead of into a buffer of its own first and into the ring later. Until
//! the commit the bytes are free space the reader never looks at (it reads
//! only up to the write position), so this changes nothing the client sees.
//! A ring may have several writers (a session on several interfaces, each
//! interface's capture thread with its own sink): each opens chunks under
//! its own [`WriterId`], and whatever another writer does to the ring first
//! commits the open chunk as it stands (it holds whole records only: every
//! `extend` adds whole records), so chunks never interleave.

use crate::layout::{self, consumer, hdr, HEADER_SIZE};
use crate::sys::{self, Mapping};
use crate::RingCounters;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

/// Who a chunk being filled in place belongs to ([`RingWriter::writer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterId(u64);

/// The chunk being filled in place: its header goes at `write + pad`
/// (`pad`: bytes of padding to the end of the data area before it, marked
/// at commit), its payload follows.
#[derive(Debug, Clone, Copy)]
struct Open {
    owner: WriterId,
    pad: u64,
    len: u64,
    packets: u32,
    /// Payload bytes it may hold in all (free and before the end of the
    /// data area).
    room: u64,
}

/// The daemon's end of one client's ring.
#[derive(Debug)]
pub struct RingWriter {
    data: Mapping,
    consumer: Mapping,
    data_fd: OwnedFd,
    consumer_fd: OwnedFd,
    wake_read: OwnedFd,
    wake_write: OwnedFd,
    capacity: u64,
    /// Next position to write (mirrors the header's write position).
    write: u64,
    /// The client's read position as last loaded and clamped.
    released: u64,
    counters: RingCounters,
    finished: bool,
    /// Reused across sessions ([`RingWriter::create_pooled`]).
    pooled: bool,
    /// The chunk being filled in place, if any.
    open: Option<Open>,
    /// Last [`WriterId`] handed out.
    writers: u64,
}

fn context(what: &'static str) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("shared-memory ring: {what}: {e}"))
}

impl RingWriter {
    /// Creates a ring whose data area holds `capacity` bytes (a power of
    /// two, 64 KiB ..= 4 GiB; anything else is `InvalidInput`).
    ///
    /// The data region is a memfd of one 4096-byte header page + `capacity`,
    /// mapped read-write here, then sealed `F_SEAL_SHRINK | F_SEAL_GROW |
    /// F_SEAL_FUTURE_WRITE` and `F_SEAL_SEAL`: this mapping stays writable,
    /// nobody can make another writable mapping, `write(2)` to it, punch a
    /// hole in it or change its size (so the daemon never takes `SIGBUS`).
    /// The consumer region is a memfd of 4096 bytes sealed `F_SEAL_SHRINK |
    /// F_SEAL_GROW` and mapped read-only here; it is left open to more seals
    /// so that the reader can seal it `F_SEAL_FUTURE_WRITE` once it has
    /// mapped it (then only the reader's mapping can move the position).
    /// Memory is not touched up front: pages are allocated (and charged to
    /// the daemon) as the ring first fills them.
    pub fn create(capacity: usize) -> io::Result<RingWriter> {
        Self::make(capacity, false)
    }

    /// Like [`RingWriter::create`], for a ring the daemon reuses for the
    /// same user's sessions one after another ([`RingWriter::recycle`]):
    /// descriptors a client keeps after its session then pin this one ring,
    /// never a new one per session. The consumer region is sealed
    /// `SHRINK | GROW | SEAL` here (no reader can claim it with
    /// `FUTURE_WRITE`, which would lock the next session's reader out) and
    /// mapped read-write by the daemon, which writes its read position only
    /// when it recycles the ring; the header's flags say "pooled" (see
    /// [`crate::layout`]). Whoever keeps an old descriptor can still move
    /// the read position or read the data region: only that same user's
    /// later sessions, and the daemon clamps the position as always.
    pub fn create_pooled(capacity: usize) -> io::Result<RingWriter> {
        Self::make(capacity, true)
    }

    fn make(capacity: usize, pooled: bool) -> io::Result<RingWriter> {
        let cap = u64::try_from(capacity).unwrap_or(u64::MAX);
        if !layout::valid_capacity(cap) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "shared-memory ring: capacity {capacity} is not a power of two \
                     between 64 KiB and 4 GiB"
                ),
            ));
        }
        let total = HEADER_SIZE
            .checked_add(capacity)
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;

        let data_fd = sys::memfd(c"ringcap-ring").map_err(context("memfd_create"))?;
        sys::set_len(data_fd.as_fd(), total as u64).map_err(context("ftruncate"))?;
        let mut data = Mapping::new(data_fd.as_fd(), total, true).map_err(context("mmap"))?;
        data.copy_in(hdr::MAGIC, &layout::MAGIC);
        data.atomic_u32(hdr::VERSION)
            .store(layout::VERSION.to_le(), Ordering::Relaxed);
        data.atomic_u32(hdr::HEADER_SIZE)
            .store((HEADER_SIZE as u32).to_le(), Ordering::Relaxed);
        data.atomic_u64(hdr::CAPACITY)
            .store(cap.to_le(), Ordering::Relaxed);
        if pooled {
            data.atomic_u32(hdr::FLAGS)
                .store(layout::FLAG_POOLED.to_le(), Ordering::Relaxed);
        }
        sys::add_seals(
            data_fd.as_fd(),
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE,
        )
        .map_err(context("sealing the data region"))?;
        sys::add_seals(data_fd.as_fd(), libc::F_SEAL_SEAL)
            .map_err(context("sealing the data region's seals"))?;

        let consumer_fd = sys::memfd(c"ringcap-consumer").map_err(context("memfd_create"))?;
        sys::set_len(consumer_fd.as_fd(), layout::CONSUMER_SIZE as u64)
            .map_err(context("ftruncate"))?;
        let seals = if pooled {
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL
        } else {
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW
        };
        sys::add_seals(consumer_fd.as_fd(), seals)
            .map_err(context("sealing the consumer region"))?;
        let consumer = Mapping::new(consumer_fd.as_fd(), layout::CONSUMER_SIZE, pooled)
            .map_err(context("mmap"))?;

        let (wake_read, wake_write) = sys::pipe().map_err(context("pipe"))?;
        Ok(RingWriter {
            data,
            consumer,
            data_fd,
            consumer_fd,
            wake_read,
            wake_write,
            capacity: cap,
            write: 0,
            released: 0,
            counters: RingCounters::default(),
            finished: false,
            pooled,
            open: None,
            writers: 0,
        })
    }

    /// Makes a finished pooled ring ready for the same user's next session:
    /// counters back to zero, state running, the read position set to the
    /// write position (the next reader starts after everything written so
    /// far; positions stay monotonic, so a reader kept from the last
    /// session sees new chunks, never a position going backwards), pending
    /// wake-ups left in the pipe (the daemon never reads the pipe: a
    /// client may have made the shared read end blocking; a spurious
    /// wake-up only makes the reader look again). `InvalidInput` for a ring not made by
    /// [`RingWriter::create_pooled`] or not finished.
    pub fn recycle(&mut self) -> io::Result<()> {
        if !self.pooled || !self.finished {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared-memory ring: only a finished pooled ring can be reused",
            ));
        }
        self.released = self.write;
        self.counters = RingCounters {
            write_position: self.write,
            ..RingCounters::default()
        };
        for off in [
            hdr::CHUNKS_WRITTEN,
            hdr::PACKETS_WRITTEN,
            hdr::BYTES_WRITTEN,
            hdr::PACKETS_DROPPED,
            hdr::BYTES_DROPPED,
        ] {
            self.store(off, 0);
        }
        self.consumer
            .atomic_u64(consumer::READ_POSITION)
            .store(self.write.to_le(), Ordering::Release);
        self.consumer
            .atomic_u32(consumer::WAITING)
            .store(0, Ordering::Relaxed);
        self.data
            .atomic_u32(hdr::STATE)
            .store(layout::STATE_RUNNING.to_le(), Ordering::Release);
        self.finished = false;
        Ok(())
    }

    /// Whether this ring was made by [`RingWriter::create_pooled`].
    pub fn is_pooled(&self) -> bool {
        self.pooled
    }

    /// The descriptors to pass to the client (e.g. with `SCM_RIGHTS`):
    /// `(data region, consumer region, wake-up pipe's read end)`, in the
    /// order [`crate::RingReader::map`] takes them. They are close-on-exec.
    pub fn fds(&self) -> (BorrowedFd<'_>, BorrowedFd<'_>, BorrowedFd<'_>) {
        (
            self.data_fd.as_fd(),
            self.consumer_fd.as_fd(),
            self.wake_read.as_fd(),
        )
    }

    /// Touches every page of the data area now (it holds nothing yet), so
    /// that the first pass of packets through the ring does not pay a page
    /// fault per page — about 2 ms per MiB on a fresh VM — while it is busy.
    pub fn prefault(&mut self) {
        let cap = self.capacity as usize;
        if self.write == 0 {
            self.data.zero(HEADER_SIZE, cap);
        }
    }

    /// Bytes in the data area.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// The largest payload that fits whatever the write offset, once the
    /// client has released everything: `capacity / 2 - 8`. Cut chunks no
    /// bigger than this. A bigger one (up to `capacity - 8`) is still
    /// appended when it happens to fit, but depending on where the write
    /// offset stands it may need the padding to the end *and* its own size,
    /// which can exceed the capacity even in an empty ring.
    pub fn max_payload(&self) -> usize {
        (self.capacity / 2 - layout::CHUNK_HEADER) as usize
    }

    /// Appends one chunk: `payload` (opaque to the ring) holding `packets`
    /// packets. Returns false when it does not fit (the client has not
    /// released enough, the payload is longer than `capacity - 8`, or the
    /// ring has ended); then `packets` and `payload.len()` are added to the
    /// header's dropped counters and nothing is written. Wakes the client
    /// if it is waiting. Never blocks.
    pub fn append(&mut self, payload: &[u8], packets: u32) -> bool {
        self.commit_any();
        let len = match u32::try_from(payload.len()) {
            Ok(len) if !self.finished && layout::chunk_size(len) <= self.capacity => len,
            _ => {
                self.add_dropped(u64::from(packets), payload.len() as u64);
                return false;
            }
        };
        let need = layout::chunk_size(len);
        let mut off = self.write & (self.capacity - 1);
        let to_end = self.capacity - off;
        let total = if need <= to_end { need } else { to_end + need };
        if total > self.known_free() && total > self.refresh_free() {
            self.add_dropped(u64::from(packets), u64::from(len));
            return false;
        }
        if need > to_end {
            let marker = layout::encode_chunk_header(layout::PADDING_LEN, 0);
            self.data
                .atomic_u64(HEADER_SIZE + off as usize)
                .store(marker.to_le(), Ordering::Relaxed);
            self.write += to_end;
            off = 0;
        }
        let at = HEADER_SIZE + off as usize;
        self.data.atomic_u64(at).store(
            layout::encode_chunk_header(len, packets).to_le(),
            Ordering::Relaxed,
        );
        self.data.copy_in(at + 8, payload);
        let padded = (need - layout::CHUNK_HEADER) as usize;
        self.data
            .zero(at + 8 + payload.len(), padded - payload.len());
        self.publish(need, packets, len);
        true
    }

    /// Moves the write position past the chunk of `size` bytes just written
    /// (`packets`, `len` payload bytes), updates the counters and wakes the
    /// client if it waits.
    fn publish(&mut self, size: u64, packets: u32, len: u32) {
        self.write += size;
        let c = &mut self.counters;
        c.write_position = self.write;
        c.chunks_written += 1;
        c.packets_written = c.packets_written.saturating_add(u64::from(packets));
        c.bytes_written = c.bytes_written.saturating_add(u64::from(len));
        self.store(hdr::CHUNKS_WRITTEN, self.counters.chunks_written);
        self.store(hdr::PACKETS_WRITTEN, self.counters.packets_written);
        self.store(hdr::BYTES_WRITTEN, self.counters.bytes_written);
        // Release: the chunk (and the counters above) are visible to a
        // reader that loads this position with Acquire.
        self.data
            .atomic_u64(hdr::WRITE_POSITION)
            .store(self.write.to_le(), Ordering::Release);
        self.wake_if_waiting();
    }

    /// A new identity for chunks filled in place (one per writer of this
    /// ring, e.g. per capture thread's sink).
    pub fn writer(&mut self) -> WriterId {
        self.writers += 1;
        WriterId(self.writers)
    }

    /// Adds `payload` (whole records, opaque to the ring) holding `packets`
    /// packets to `who`'s chunk filled in place, opening one if it has none
    /// (see the module doc). Returns false when it does not fit (as
    /// [`RingWriter::append`]: the client has not released enough, or the
    /// ring has ended); then `packets` and `payload.len()` are counted as
    /// dropped and nothing is written. Nothing is visible to the client
    /// before [`RingWriter::commit`]. Never blocks.
    pub fn extend(&mut self, who: WriterId, payload: &[u8], packets: u32) -> bool {
        self.extend_with(who, payload.len(), packets, |room| {
            room.copy_from_slice(payload)
        })
    }

    /// As [`extend`](Self::extend) for `len` payload bytes that `fill`
    /// writes in place (it is given exactly `len` bytes of free space,
    /// whatever they hold; it must write all of them). Not called when the
    /// payload does not fit.
    pub fn extend_with(
        &mut self,
        who: WriterId,
        len: usize,
        packets: u32,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        let add = len as u64;
        if let Some(o) = self.open {
            if o.owner != who || o.len + add > o.room || o.packets.checked_add(packets).is_none() {
                self.commit_any();
            }
        }
        if self.open.is_none() && !self.finished && add > 0 {
            self.open = self.open_for(who, add);
        }
        let Some(o) = self.open.as_mut() else {
            self.add_dropped(u64::from(packets), add);
            return false;
        };
        let at = HEADER_SIZE as u64 + ((self.write + o.pad) & (self.capacity - 1)) + 8 + o.len;
        o.len += add;
        o.packets += packets;
        fill(self.data.bytes_mut(at as usize, len));
        true
    }

    /// Publishes `who`'s chunk filled in place, if it has one (the records
    /// it holds become visible to the client; it is woken if it waits).
    pub fn commit(&mut self, who: WriterId) {
        if self.open.is_some_and(|o| o.owner == who) {
            self.commit_any();
        }
    }

    /// A chunk for `who` with room for at least `need` payload bytes, where
    /// the next chunk goes (or at the start of the data area, after padding
    /// to the end); None when the client has not released enough.
    fn open_for(&mut self, who: WriterId, need: u64) -> Option<Open> {
        let off = self.write & (self.capacity - 1);
        let to_end = self.capacity - off;
        // Payload bytes a chunk may hold in `span` bytes: its header and the
        // padding to 8 must fit too (`released`, from the client, may be
        // any number: round down).
        let room = |span: u64| span.saturating_sub(layout::CHUNK_HEADER) & !7;
        let place = |free: u64| {
            if room(to_end.min(free)) >= need {
                Some((0, room(to_end.min(free))))
            } else if free > to_end && room(free - to_end) >= need {
                Some((to_end, room(free - to_end)))
            } else {
                None
            }
        };
        let (pad, room) = match place(self.known_free()) {
            Some(p) => p,
            None => place(self.refresh_free())?,
        };
        Some(Open {
            owner: who,
            pad,
            len: 0,
            packets: 0,
            // Chunk lengths are u32 and u32::MAX marks padding.
            room: room.min(u64::from(u32::MAX - 7)),
        })
    }

    /// Publishes the chunk filled in place, whoever it belongs to.
    fn commit_any(&mut self) {
        let Some(o) = self.open.take() else { return };
        if o.len == 0 && o.packets == 0 {
            return;
        }
        if o.pad > 0 {
            let off = self.write & (self.capacity - 1);
            let marker = layout::encode_chunk_header(layout::PADDING_LEN, 0);
            self.data
                .atomic_u64(HEADER_SIZE + off as usize)
                .store(marker.to_le(), Ordering::Relaxed);
            self.write += o.pad;
        }
        // `room` keeps `len` below u32::MAX - 7.
        let len = o.len as u32;
        let at = HEADER_SIZE + (self.write & (self.capacity - 1)) as usize;
        self.data.atomic_u64(at).store(
            layout::encode_chunk_header(len, o.packets).to_le(),
            Ordering::Relaxed,
        );
        let size = layout::chunk_size(len);
        let padded = (size - layout::CHUNK_HEADER) as usize;
        self.data.zero(at + 8 + len as usize, padded - len as usize);
        self.publish(size, o.packets, len);
    }

    /// Bytes free for chunks now (re-reads the client's read position).
    /// Padding at the end of the data area may make a chunk smaller than
    /// this not fit.
    pub fn free_bytes(&mut self) -> usize {
        self.refresh_free() as usize
    }

    /// The client's read position as the daemon last loaded and clamped it.
    pub fn read_position(&self) -> u64 {
        self.released
    }

    /// Counts packets and bytes the daemon dropped for this client outside
    /// [`RingWriter::append`] (e.g. a batch it did not even encode).
    pub fn add_dropped(&mut self, packets: u64, bytes: u64) {
        let c = &mut self.counters;
        c.packets_dropped = c.packets_dropped.saturating_add(packets);
        c.bytes_dropped = c.bytes_dropped.saturating_add(bytes);
        self.store(hdr::PACKETS_DROPPED, self.counters.packets_dropped);
        self.store(hdr::BYTES_DROPPED, self.counters.bytes_dropped);
    }

    /// Ends the ring: state = ended (Release, after the last chunk), and a
    /// wake-up whether or not the client says it is waiting. Later appends
    /// are refused and counted as dropped. Called by `Drop` too; calling it
    /// again does nothing.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.commit_any();
        self.finished = true;
        self.data
            .atomic_u32(hdr::STATE)
            .store(layout::STATE_ENDED.to_le(), Ordering::Release);
        let _ = sys::write_byte(self.wake_write.as_fd());
    }

    /// Whether [`RingWriter::finish`] was called.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The counters as written to the header.
    pub fn counters(&self) -> RingCounters {
        self.counters
    }

    fn store(&self, off: usize, value: u64) {
        self.data
            .atomic_u64(off)
            .store(value.to_le(), Ordering::Relaxed);
    }

    fn known_free(&self) -> u64 {
        self.capacity - (self.write - self.released)
    }

    /// Loads the client's read position once and clamps it; the free space.
    fn refresh_free(&mut self) -> u64 {
        // Acquire: the client's reads of the bytes it released happen before
        // the daemon overwrites them.
        let raw = u64::from_le(
            self.consumer
                .atomic_u64(consumer::READ_POSITION)
                .load(Ordering::Acquire),
        );
        // released <= write always holds, so clamp cannot panic.
        self.released = raw.clamp(self.released, self.write);
        self.known_free()
    }

    fn wake_if_waiting(&self) {
        // Pairs with the reader's fence between setting the waiting flag and
        // re-loading the write position (`RingReader::wait`): either the
        // reader sees the new position, or this load sees the flag.
        fence(Ordering::SeqCst);
        let waiting = self
            .consumer
            .atomic_u32(consumer::WAITING)
            .load(Ordering::Relaxed);
        if waiting != 0 {
            // EAGAIN (the pipe is full) means wake-ups are already pending.
            let _ = sys::write_byte(self.wake_write.as_fd());
        }
    }

    /// Test hook: writes raw bytes into the data region through the
    /// daemon's writable mapping, as a buggy daemon would.
    #[cfg(test)]
    pub(crate) fn corrupt(&mut self, off: usize, bytes: &[u8]) {
        self.data.copy_in(off, bytes);
    }
}

impl Drop for RingWriter {
    fn drop(&mut self) {
        self.finish();
    }
}
