//! The client's side of the ring: maps what the daemon passed, checks it,
//! hands out chunks in order, releases them, sleeps until there is more.
//!
//! The daemon is trusted, but the reader checks anyway and never panics on
//! what it finds in shared memory: [`RingReader::map`] refuses a region
//! whose seals, size or header are wrong, and [`RingReader::next_chunk`]
//! bounds-checks every length it reads against the capacity and against the
//! write position it loaded, returning [`RingError`] on the first
//! inconsistency (the reader then stays at that position: every further call
//! returns the same error).
//!
//! Memory the daemon writes concurrently is read only through atomics
//! (header fields, chunk headers: each read once into a local and checked),
//! and payload bytes are borrowed only between the reader's released
//! position and a write position loaded with Acquire, which the daemon does
//! not write until the reader releases them (the argument is in the private
//! `sys` module's docs).

use crate::layout::{self, consumer, hdr, CONSUMER_SIZE, HEADER_SIZE};
use crate::sys::{self, Mapping};
use crate::{RingCounters, RingError};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::time::Duration;

/// One chunk: a payload the daemon appended whole, and how many packets it
/// says are in it. Borrowed from the ring until the next call on the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// The payload bytes (without the chunk header or padding).
    pub payload: &'a [u8],
    /// Packets in the payload, as the daemon counted them.
    pub packets: u32,
}

/// Where a chunk handed out by [`RingReader::next_span`] lies: its bytes
/// stay readable through [`RingReader::span`] until the space before and
/// including it is released, so a reader can hand packets out of it over
/// several calls without copying them (the libpcap shim's
/// `pcap_next_ex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Position of its chunk header.
    start: u64,
    /// Offset of its payload in the mapping.
    at: usize,
    len: usize,
    /// Packets in the payload, as the daemon counted them.
    pub packets: u32,
}

/// The client's end of a ring.
#[derive(Debug)]
pub struct RingReader {
    data: Mapping,
    consumer: Mapping,
    wake: OwnedFd,
    capacity: u64,
    /// Position of the next chunk header to read.
    pos: u64,
    /// Last position stored into the consumer region.
    released: u64,
    /// Write position as last loaded (Acquire); chunks below it are readable.
    known_write: u64,
    /// The wake-up pipe hung up: the daemon's end is closed.
    hung_up: AtomicBool,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("shared-memory ring: {msg}"),
    )
}

fn context(what: &'static str) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("shared-memory ring: {what}: {e}"))
}

fn seal_names(seals: libc::c_int) -> String {
    let names = [
        (libc::F_SEAL_SEAL, "SEAL"),
        (libc::F_SEAL_SHRINK, "SHRINK"),
        (libc::F_SEAL_GROW, "GROW"),
        (libc::F_SEAL_WRITE, "WRITE"),
        (libc::F_SEAL_FUTURE_WRITE, "FUTURE_WRITE"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| seals & bit != 0)
        .map(|&(_, n)| n)
        .collect();
    if set.is_empty() {
        "none".to_string()
    } else {
        set.join("|")
    }
}

impl RingReader {
    /// Maps a ring from the three descriptors [`crate::RingWriter::fds`]
    /// gives (data region, consumer region, wake-up pipe's read end) and
    /// takes ownership of them.
    ///
    /// Refused (`InvalidData`, or the OS error) unless:
    /// - the data region is a memfd sealed `SHRINK | GROW | SEAL` and
    ///   `FUTURE_WRITE` (or `WRITE`): nobody can write it but the daemon's
    ///   existing mapping, nor change its size (checked *before* its size is
    ///   read, so the mapping can never outgrow the file: no `SIGBUS`);
    /// - its size is 4096 + a power of two in 64 KiB ..= 4 GiB, and the
    ///   header says the same: magic `RCRING01`, version 1, header size 4096,
    ///   that capacity;
    /// - the consumer region is a memfd of 4096 bytes sealed `SHRINK` that
    ///   this reader can map read-write and then seal `FUTURE_WRITE | SEAL`
    ///   (so it is the only writer of its read position from then on; a
    ///   second reader of the same ring is refused here) — except a pooled
    ///   ring's (header flag, region sealed `SEAL` by the daemon without
    ///   `FUTURE_WRITE`), which each session's reader maps in turn;
    /// - the wake-up descriptor is non-blocking (so [`RingReader::wait`]
    ///   never blocks longer than its timeout);
    /// - the read position already in the consumer region (0 for a fresh
    ///   ring) is 8-aligned, not past the write position, and not more than
    ///   the capacity behind it.
    pub fn map(data: OwnedFd, consumer: OwnedFd, event: OwnedFd) -> io::Result<RingReader> {
        let seals = sys::seals(data.as_fd()).map_err(context("data region: F_GET_SEALS"))?;
        let required = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        if seals & required != required
            || seals & (libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_WRITE) == 0
        {
            return Err(invalid(format!(
                "data region is sealed {}, needs SHRINK|GROW|SEAL and FUTURE_WRITE",
                seal_names(seals)
            )));
        }
        let size = sys::file_size(data.as_fd()).map_err(context("data region: fstat"))?;
        let capacity = size.saturating_sub(HEADER_SIZE as u64);
        if size < HEADER_SIZE as u64 || !layout::valid_capacity(capacity) {
            return Err(invalid(format!(
                "data region is {size} bytes, not 4096 + a power of two in 64 KiB ..= 4 GiB"
            )));
        }
        let len = usize::try_from(size)
            .map_err(|_| invalid(format!("data region of {size} bytes cannot be mapped")))?;
        let map = Mapping::new(data.as_fd(), len, false).map_err(context("data region: mmap"))?;

        let magic = map.bytes(hdr::MAGIC, layout::MAGIC.len());
        if magic != layout::MAGIC {
            return Err(invalid(format!(
                "bad magic {:?}, expected {:?}",
                String::from_utf8_lossy(magic),
                String::from_utf8_lossy(&layout::MAGIC)
            )));
        }
        let version = u32::from_le(map.atomic_u32(hdr::VERSION).load(Ordering::Relaxed));
        if version != layout::VERSION {
            return Err(invalid(format!(
                "format version {version}, this reader knows {}",
                layout::VERSION
            )));
        }
        let header_size = u32::from_le(map.atomic_u32(hdr::HEADER_SIZE).load(Ordering::Relaxed));
        if header_size as usize != HEADER_SIZE {
            return Err(invalid(format!(
                "header size {header_size}, expected {HEADER_SIZE}"
            )));
        }
        let header_capacity = u64::from_le(map.atomic_u64(hdr::CAPACITY).load(Ordering::Relaxed));
        if header_capacity != capacity {
            return Err(invalid(format!(
                "header says capacity {header_capacity}, the region holds {capacity}"
            )));
        }

        let cseals =
            sys::seals(consumer.as_fd()).map_err(context("consumer region: F_GET_SEALS"))?;
        if cseals & libc::F_SEAL_SHRINK == 0 {
            return Err(invalid(format!(
                "consumer region is sealed {}, needs SHRINK",
                seal_names(cseals)
            )));
        }
        let csize = sys::file_size(consumer.as_fd()).map_err(context("consumer region: fstat"))?;
        if csize != CONSUMER_SIZE as u64 {
            return Err(invalid(format!(
                "consumer region is {csize} bytes, expected {CONSUMER_SIZE}"
            )));
        }
        let cmap = Mapping::new(consumer.as_fd(), CONSUMER_SIZE, true).map_err(context(
            "consumer region: mmap read-write (already claimed?)",
        ))?;
        let flags = u32::from_le(map.atomic_u32(hdr::FLAGS).load(Ordering::Relaxed));
        let pooled = flags & layout::FLAG_POOLED != 0
            && cseals & libc::F_SEAL_SEAL != 0
            && cseals & (libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_WRITE) == 0;
        // A pooled ring's consumer region was frozen by the daemon so that
        // it can serve the same user's next session: it cannot be claimed,
        // and need not be (only that user's own descriptors reach it).
        if !pooled {
            sys::add_seals(
                consumer.as_fd(),
                libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL,
            )
            .map_err(context(
                "consumer region: claiming it with F_SEAL_FUTURE_WRITE",
            ))?;
        }

        let flags = sys::status_flags(event.as_fd()).map_err(context("wake-up fd: F_GETFL"))?;
        if flags & libc::O_NONBLOCK == 0 {
            return Err(invalid("wake-up descriptor is blocking".to_string()));
        }

        let write = u64::from_le(map.atomic_u64(hdr::WRITE_POSITION).load(Ordering::Acquire));
        let start = u64::from_le(
            cmap.atomic_u64(consumer::READ_POSITION)
                .load(Ordering::Relaxed),
        );
        if start % 8 != 0 || start > write || write - start > capacity {
            return Err(invalid(format!(
                "read position {start} does not fit write position {write}"
            )));
        }
        Ok(RingReader {
            data: map,
            consumer: cmap,
            wake: event,
            capacity,
            pos: start,
            released: start,
            known_write: start,
            hung_up: AtomicBool::new(false),
        })
    }

    /// The next chunk, `Ok(None)` when the reader has caught up with the
    /// daemon, `Err` when the ring's contents are inconsistent (never a
    /// panic). The chunk stays valid until the next call on the reader;
    /// [`RingReader::release`] gives the space back to the daemon.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk<'_>>, RingError> {
        Ok(self.next_span()?.map(|span| Chunk {
            payload: self.span(&span),
            packets: span.packets,
        }))
    }

    /// [`RingReader::next_chunk`], as a [`Span`] that stays readable
    /// after further calls, until released.
    pub fn next_span(&mut self) -> Result<Option<Span>, RingError> {
        let mask = self.capacity - 1;
        loop {
            if self.pos == self.known_write {
                let w = self.load_write();
                if w < self.pos {
                    return Err(self.error("write position went backwards"));
                }
                if w - self.released > self.capacity {
                    return Err(self.error(
                        "write position is more than the capacity ahead of the read position",
                    ));
                }
                if !w.is_multiple_of(8) {
                    return Err(self.error("write position is not 8-aligned"));
                }
                self.known_write = w;
                if w == self.pos {
                    return Ok(None);
                }
            }
            // pos < known_write, both multiples of 8: at least a header.
            let avail = self.known_write - self.pos;
            let off = self.pos & mask;
            let to_end = self.capacity - off;
            let at = HEADER_SIZE + off as usize;
            let word = u64::from_le(self.data.atomic_u64(at).load(Ordering::Relaxed));
            let (len, packets) = layout::decode_chunk_header(word);
            if len == layout::PADDING_LEN {
                if to_end > avail {
                    return Err(self.error("padding marker runs past the write position"));
                }
                self.pos += to_end;
                continue;
            }
            let need = layout::chunk_size(len);
            if need > to_end {
                return Err(self.error("chunk runs past the end of the data area"));
            }
            if need > avail {
                return Err(self.error("chunk runs past the write position"));
            }
            let start = self.pos;
            self.pos += need;
            return Ok(Some(Span {
                start,
                at: at + 8,
                len: len as usize,
                packets,
            }));
        }
    }

    /// The payload of `span`; empty if its space was released already
    /// (the daemon may be writing there).
    pub fn span(&self, span: &Span) -> &[u8] {
        // Handed out (below `pos`) and not released: the daemon does not
        // write there (see the module docs).
        if span.start < self.released || span.start >= self.pos {
            return &[];
        }
        self.data.bytes(span.at, span.len)
    }

    /// Gives the daemon back the space of every chunk handed out so far
    /// (stores the read position, Release). Cheap when nothing changed.
    pub fn release(&mut self) {
        self.release_to(self.pos);
    }

    /// Gives back the space of the chunks handed out before `span`, keeping
    /// `span` and those after it readable.
    pub fn release_before(&mut self, span: &Span) {
        if span.start > self.released && span.start <= self.pos {
            self.release_to(span.start);
        }
    }

    fn release_to(&mut self, pos: u64) {
        if pos != self.released {
            self.consumer
                .atomic_u64(consumer::READ_POSITION)
                .store(pos.to_le(), Ordering::Release);
            self.released = pos;
        }
    }

    /// Sleeps until the daemon appends, ends the ring or goes away, or
    /// `timeout` passes. `Ok(true)`: something may have happened (call
    /// [`RingReader::next_chunk`] and [`RingReader::ended`]); `Ok(false)`:
    /// timed out. Returns at once if unread chunks are already there.
    ///
    /// It raises the waiting flag in the consumer region, re-checks the
    /// write position (a SeqCst fence on each side makes sure either this
    /// check sees the daemon's latest append or the daemon sees the flag and
    /// writes a wake-up byte), polls the pipe, drains it and lowers the flag.
    /// Meant for the one thread that reads the ring: two threads waiting at
    /// once would lower each other's flag (and might sleep to the timeout).
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        if self.ready() {
            return Ok(true);
        }
        let waiting = self.consumer.atomic_u32(consumer::WAITING);
        waiting.store(1u32.to_le(), Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.ready() {
            waiting.store(0, Ordering::Relaxed);
            return Ok(true);
        }
        let polled = sys::poll_in(self.wake.as_fd(), timeout);
        waiting.store(0, Ordering::Relaxed);
        match polled.map_err(context("waiting for the daemon"))? {
            None => Ok(false),
            Some(r) => {
                if r.readable {
                    // Non-blocking (checked in `map`): at worst EAGAIN.
                    let _ = sys::discard_input(self.wake.as_fd());
                }
                if r.hung_up {
                    self.hung_up.store(true, Ordering::Relaxed);
                }
                Ok(true)
            }
        }
    }

    /// Starts a sleep that the caller does elsewhere, polling
    /// [`RingReader::wake_fd`] with other descriptors: raises the waiting
    /// flag (so the daemon writes a wake-up at its next append) unless
    /// something is ready already, which it returns (true: do not sleep).
    /// Call [`RingReader::end_sleep`] when awake. The same handshake as
    /// [`RingReader::wait`], split in two.
    pub fn begin_sleep(&self) -> bool {
        if self.ready() {
            return true;
        }
        let waiting = self.consumer.atomic_u32(consumer::WAITING);
        waiting.store(1u32.to_le(), Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.ready() {
            waiting.store(0, Ordering::Relaxed);
            return true;
        }
        // Wake-up bytes of appends already seen (a wait that timed out
        // just as one came) would make the pipe readable with nothing new:
        // take them out, then look again — a byte written before this read
        // belongs to an append the second look sees.
        let _ = sys::discard_input(self.wake.as_fd());
        if self.ready() {
            waiting.store(0, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Ends a sleep begun with [`RingReader::begin_sleep`]: lowers the
    /// flag, takes the wake-up bytes out of the pipe, notes a hang-up.
    pub fn end_sleep(&self) {
        self.consumer
            .atomic_u32(consumer::WAITING)
            .store(0, Ordering::Relaxed);
        if let Ok(Some(r)) = sys::poll_in(self.wake.as_fd(), Duration::ZERO) {
            if r.readable {
                let _ = sys::discard_input(self.wake.as_fd());
            }
            if r.hung_up {
                self.hung_up.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The wake-up pipe's read end: readable after a wake-up the daemon
    /// wrote (see [`RingReader::begin_sleep`]) or when its end is closed.
    pub fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Whether the ring has ended: the daemon called `finish`, or its end
    /// of the wake-up pipe is closed (it dropped the ring or died; seen by
    /// [`RingReader::wait`]). Chunks appended before the end are still
    /// there: read until [`RingReader::next_chunk`] returns `Ok(None)` after
    /// this returns true.
    pub fn ended(&self) -> bool {
        let state = u32::from_le(self.data.atomic_u32(hdr::STATE).load(Ordering::Acquire));
        state != layout::STATE_RUNNING || self.hung_up.load(Ordering::Relaxed)
    }

    /// The header's counters (the write position first, with Acquire: the
    /// other counters are at least as new as it).
    pub fn counters(&self) -> RingCounters {
        let write_position = self.load_write();
        let load = |off| u64::from_le(self.data.atomic_u64(off).load(Ordering::Relaxed));
        RingCounters {
            write_position,
            chunks_written: load(hdr::CHUNKS_WRITTEN),
            packets_written: load(hdr::PACKETS_WRITTEN),
            bytes_written: load(hdr::BYTES_WRITTEN),
            packets_dropped: load(hdr::PACKETS_DROPPED),
            bytes_dropped: load(hdr::BYTES_DROPPED),
        }
    }

    /// Bytes in the data area.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Position of the next chunk to read.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn load_write(&self) -> u64 {
        u64::from_le(
            self.data
                .atomic_u64(hdr::WRITE_POSITION)
                .load(Ordering::Acquire),
        )
    }

    fn ready(&self) -> bool {
        self.pos != self.known_write || self.load_write() != self.pos || self.ended()
    }

    fn error(&self, reason: &'static str) -> RingError {
        RingError {
            position: self.pos,
            reason,
        }
    }
}
