//! How bytes reach the disk: interchangeable write strategies behind one trait.
//!
//! - [`WriteMode::Buffered`]: `write()` of whole batches through the page cache;
//!   writeback is started every flush interval with `sync_file_range` so dirty
//!   data never piles up, and the file is fsync'd when it is closed.
//! - [`WriteMode::Direct`]: O_DIRECT, bypassing the page cache, straight from
//!   the batches when they are placed right (else through a page-aligned
//!   staging buffer); blocks are reserved 64 MiB ahead with fallocate
//!   (KEEP_SIZE, trimmed at close); the partial last block is rewritten in
//!   place at each flush so the file on disk is always a valid prefix.
//!   Storage-only (`ringcap bench-sink`, 1.5 M x 1500 B): 1.04 GB/s without
//!   preallocation, 1.29-1.37 GB/s with it; `dd oflag=direct bs=4M` in the
//!   same minutes: 1.3-1.5 GB/s.
//! - [`WriteMode::Uring`]: the same O_DIRECT file, but the whole pages of each
//!   batch are written through io_uring, up to four at once; the writer
//!   swaps the batch's memory for an idle buffer so that the kernel keeps
//!   reading it after the writer has moved on. Blocks are reserved before
//!   each write, so a full disk is reported at once, as with `write()`; an
//!   I/O error of a write in flight is reported at the next call.
//!   Storage-only (`bench-sink`, 3 runs each, same minutes): 64 B packets,
//!   direct 2.1-2.7 GB/s at 11-13 ns/packet, uring 2.0-2.7 GB/s at 15-23;
//!   1500 B, direct 2.7-2.9 GB/s at 156-280 ns, uring 2.5-3.0 GB/s at
//!   209-367 (dd oflag=direct 1 MiB: 1.8 GB/s). The disk is not what limits
//!   the synchronous writer here, and io_uring's bookkeeping (and its
//!   kernel workers, counted in the process's CPU) costs more than it saves,
//!   so direct stays the default.
//!
//!   Re-measured for issue 15 on a slower disk (the same VM type on another
//!   day; `fio --rw=write --bs=1M --direct=1 --ioengine=io_uring`, 2 GiB):
//!   a new file takes 465 MB/s with one write in flight and 463 with 16,
//!   while overwriting that file's blocks takes 426 with one and 1101 with
//!   16. ext4 makes every O_DIRECT write that extends the file, or fills
//!   blocks reserved but never written, wait for the one before it, so a
//!   capture file (always new blocks) gets nothing from more writes in
//!   flight. bench-sink, 1500 B, 2 GB, three alternating runs: direct
//!   645/698/717 MB/s at 180/160/140 ns per packet, uring 697/730/703 at
//!   201/170/159. Live, 1 M whole 1500-byte frames at the generator's top
//!   rate, median of 3, two runs each: direct 287 and 264 ns/packet, uring
//!   323 (run disturbed by a concurrent fio) and 292; all lossless but the
//!   disturbed run. Direct stays the default; what a disk stall costs is
//!   absorbed by backpressure (the ring holds what the writer cannot take).
//!
//! - Ring blocks written in place (`write_pages` from a ring block) go out
//!   through io_uring from the capture rings' memory, registered once
//!   ([`FixedWrites`]), when the capture could register it: `pwrite()` from
//!   the ring pins every 4 KiB page again at every write (~80 ns a page
//!   here). The file is grown to the end of each such write first (ext4
//!   runs a write that extends the file in an io_uring worker thread), so
//!   a crash in the middle of one leaves up to a block of zeros after the
//!   last whole block, which `ringcap repair` and the next start cut off.
//!   Live, pcapng in place, per-thread CPU (schedstat), three alternated
//!   runs: 1500-byte frames, the writer 46.7-48.4 -> 16.1-20.8 ms per 1 M
//!   packets (+1 ms in the io_uring worker), the process 102-104 -> 73-77
//!   ns per packet; 64-byte frames at snap 64, 23.5-26.8 -> 16.3-19.4 ms
//!   per 3 M (+2 ms in the worker).
//!
//! Measured on the testbed (4 M packets of 64 bytes at ~0.5 Mpps, snaplen 64,
//! CPU of the capture process after start-up): buffered 247 ns/packet, of which
//! almost all is the kernel copying into fresh page-cache pages; direct 65
//! ns/packet (tcpdump in the same run: 225). Whole 1500-byte frames: direct
//! with a staging copy 700 ns/packet, direct writing from the batches 510-560. Direct is the default; on a
//! filesystem without O_DIRECT (tmpfs) the writer falls back to buffered.

use crate::batch::{Batch, ALIGN};
use crate::sys::FixedWrites;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

/// `--write-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Buffered writes through the page cache.
    Buffered,
    /// O_DIRECT writes of aligned blocks.
    Direct,
    /// O_DIRECT writes of aligned blocks through io_uring, several in flight.
    Uring,
}

impl WriteMode {
    /// Parses `buffered`, `direct` or `uring`.
    pub fn parse(s: &str) -> Result<WriteMode, String> {
        match s {
            "buffered" => Ok(WriteMode::Buffered),
            "direct" => Ok(WriteMode::Direct),
            "uring" => Ok(WriteMode::Uring),
            _ => Err(format!(
                "unknown write mode '{s}' (use direct, uring or buffered)"
            )),
        }
    }
}

/// An open output being written.
pub trait Output: Send {
    /// Appends bytes.
    fn write(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes what was written so far reach the file (not necessarily the disk
    /// platter): called every flush interval.
    fn tick(&mut self) -> io::Result<()>;
    /// Flushes and syncs everything; the output is complete.
    fn finish(&mut self) -> io::Result<()>;
    /// Bytes appended so far.
    fn len(&self) -> u64;
    /// True before the first byte.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Cuts the output back to `len` bytes (after a failed write), if it can.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Appends data bytes `from..to` of a batch; a strategy may use the
    /// batch's headroom to avoid copying.
    fn write_batch(&mut self, batch: &mut Batch, from: usize, to: usize) -> io::Result<()> {
        self.write(&batch.bytes()[from..to])
    }
    /// Appends `bytes` that start page-aligned in memory, are a whole
    /// number of pages, and go to a page-aligned offset of the output (the
    /// caller pads the output first): O_DIRECT outputs write them from
    /// where they are (a ring block written in place); others copy.
    fn write_pages(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write(bytes)
    }
    /// Gives an O_DIRECT output the registered ring memory to write ring
    /// blocks from ([`FixedWrites`]); others ignore it.
    fn use_fixed(&mut self, _fixed: Arc<Mutex<FixedWrites>>) {}
}

/// Buffered file output.
pub struct BufferedFile {
    file: File,
    len: u64,
    synced: u64,
}

impl BufferedFile {
    /// Wraps an open file.
    pub fn new(file: File) -> BufferedFile {
        BufferedFile {
            file,
            len: 0,
            synced: 0,
        }
    }
}

impl Output for BufferedFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    fn tick(&mut self) -> io::Result<()> {
        if self.len > self.synced {
            // Start writeback of what is dirty without waiting for it.
            if crate::sys::start_writeback(&self.file, self.synced, self.len - self.synced).is_ok()
            {
                self.synced = self.len;
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.file.flush()?;
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        use std::io::Seek;
        self.file.seek(io::SeekFrom::Start(len))?;
        self.len = len;
        self.synced = self.synced.min(len);
        Ok(())
    }
}

/// O_DIRECT file output through an aligned staging buffer.
pub struct DirectFile {
    /// `--write-mode uring`: whole pages of the batches are written
    /// asynchronously, several at once. (Declared first: dropped, which
    /// waits for the writes in flight, before the file is closed.)
    uring: Option<AsyncPages>,
    file: File,
    staging: Batch,
    /// File offset of the staging buffer's first byte (always aligned).
    staged_at: u64,
    /// Bytes reserved on disk ahead of the data (fallocate, size unchanged).
    allocated: u64,
    /// File offset up to which the data is in the file: a flush with
    /// nothing new after it writes nothing.
    flushed: u64,
    /// Ring blocks go out through io_uring from registered memory
    /// ([`FixedWrites`]), when the writer has it.
    fixed: Option<Arc<Mutex<FixedWrites>>>,
}

/// The io_uring side of [`DirectFile`]: writes in flight, and idle buffers
/// to give the writer in exchange for the batches being written.
struct AsyncPages {
    writes: crate::sys::UringWrites,
    spares: Vec<Batch>,
    /// The first failure of a write that has completed since the last call.
    failed: Option<io::Error>,
}

impl AsyncPages {
    fn settle(&mut self, done: Vec<(Batch, io::Result<()>)>) {
        for (mut b, r) in done {
            if let Err(e) = r {
                self.failed.get_or_insert(e);
            }
            b.clear();
            self.spares.push(b);
        }
    }

    /// Waits for every write in flight; returns the first failure.
    fn drain(&mut self) -> io::Result<()> {
        let done = self.writes.complete(usize::MAX)?;
        self.settle(done);
        self.failed.take().map_or(Ok(()), Err)
    }
}

impl DirectFile {
    /// Size of the staging buffer: large writes are what O_DIRECT is fast at.
    pub const STAGING: usize = 4 << 20;

    /// Wraps a file opened with O_DIRECT.
    pub fn new(file: File) -> DirectFile {
        DirectFile {
            file,
            staging: Batch::new(Self::STAGING, 0, 0),
            uring: None,
            staged_at: 0,
            allocated: 0,
            flushed: 0,
            fixed: None,
        }
    }

    /// Writes in flight at once in `--write-mode uring`.
    pub const URING_DEPTH: u32 = 4;

    /// Wraps a file opened with O_DIRECT; whole pages of batches are written
    /// through io_uring, up to [`DirectFile::URING_DEPTH`] at once.
    pub fn with_uring(file: File) -> io::Result<DirectFile> {
        let mut d = DirectFile::new(file);
        d.uring = Some(AsyncPages {
            writes: crate::sys::UringWrites::new(Self::URING_DEPTH)?,
            spares: Vec::new(),
            failed: None,
        });
        Ok(d)
    }

    /// Waits for the asynchronous writes (before anything that writes,
    /// truncates or syncs the file by other means).
    fn drain(&mut self) -> io::Result<()> {
        match self.uring.as_mut() {
            Some(u) => u.drain(),
            None => Ok(()),
        }
    }

    /// Reserve disk blocks this far ahead of the data: extending O_DIRECT
    /// writes then find their blocks allocated.
    pub const PREALLOCATE: u64 = 64 << 20;

    fn preallocate(&mut self, upto: u64) {
        preallocate(&self.file, &mut self.allocated, upto);
    }

    /// Makes sure blocks are reserved up to `upto` (asking for
    /// [`DirectFile::PREALLOCATE`] more when there is room): Ok(false) when
    /// the filesystem cannot reserve, an error (ENOSPC) when it is full.
    fn reserve_exactly(&mut self, upto: u64) -> io::Result<bool> {
        if upto <= self.allocated {
            return Ok(true);
        }
        if self.allocated == u64::MAX {
            return Ok(false);
        }
        let from = self.allocated;
        for len in [upto - from + Self::PREALLOCATE, upto - from] {
            match crate::sys::reserve(&self.file, from, len) {
                Ok(()) => {
                    self.allocated = from + len;
                    return Ok(true);
                }
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(false),
                Err(e) if len == upto - from => return Err(e),
                Err(_) => {}
            }
        }
        Ok(false)
    }

    fn write_staging(&mut self) -> io::Result<()> {
        let n = self.staging.aligned_bytes().len();
        let end = self.staged_at + self.staging.len() as u64;
        if n == 0 || end == self.flushed {
            return Ok(());
        }
        // The staged page may be the one a write in flight ends before (or
        // will overwrite): write it only once those are done.
        self.drain()?;
        self.preallocate(self.staged_at + n as u64);
        self.file
            .write_all_at(self.staging.aligned_bytes(), self.staged_at)?;
        if !self.staging.len().is_multiple_of(ALIGN) {
            // The padding of the last block is not data: cut the file back so
            // that it is always a valid capture file.
            self.file.set_len(end)?;
        }
        let whole = self.staging.len() / ALIGN * ALIGN;
        self.staging.drain_front(whole);
        self.staged_at += whole as u64;
        self.flushed = end;
        Ok(())
    }
}

/// Reserves blocks up to `upto` plus [`DirectFile::PREALLOCATE`] if
/// `allocated` is short of it. A failure (no fallocate on this filesystem, no
/// space) only stops further attempts: the write itself reports a full disk.
fn preallocate(file: &File, allocated: &mut u64, upto: u64) {
    if upto <= *allocated {
        return;
    }
    let len = upto - *allocated + DirectFile::PREALLOCATE;
    *allocated = match crate::sys::reserve(file, *allocated, len) {
        Ok(()) => *allocated + len,
        Err(_) => u64::MAX,
    };
}

impl Output for DirectFile {
    fn use_fixed(&mut self, fixed: Arc<Mutex<FixedWrites>>) {
        self.fixed = Some(fixed);
    }

    fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let n = bytes.len().min(self.staging.remaining());
            self.staging.append_raw(&bytes[..n]);
            bytes = &bytes[n..];
            if self.staging.remaining() == 0 {
                self.write_staging()?;
            }
        }
        Ok(())
    }

    fn tick(&mut self) -> io::Result<()> {
        self.write_staging()
    }

    /// Zero-copy when the batch's data sits at the right offset within its
    /// page: the unaligned tail written before (less than a page, in the
    /// staging buffer) goes into the batch's headroom and whole pages are
    /// written from the batch itself; only the new unaligned tail is copied.
    fn write_batch(&mut self, batch: &mut Batch, from: usize, to: usize) -> io::Result<()> {
        if self.staging.len() < ALIGN {
            if let Some(region) = batch.join_front(self.staging.bytes(), from, to) {
                let whole = region.len() / ALIGN * ALIGN;
                let pages = region.start..region.start + whole;
                // The new unaligned tail (< one page); the staging buffer takes
                // it only once the pages are written, so that a failed write
                // leaves everything as it was.
                let mut tail = [0u8; ALIGN];
                let tail_len = region.end - pages.end;
                tail[..tail_len].copy_from_slice(&batch.storage_bytes()[pages.end..region.end]);
                if whole > 0 {
                    let end = self.staged_at + whole as u64;
                    // Asynchronously only the last segment of a batch (the
                    // writer asks for its segments in order) and only into
                    // reserved blocks: a full disk then shows here, before
                    // anything is handed over, exactly as a failed write().
                    if to == batch.len() && self.uring.is_some() && self.reserve_exactly(end)? {
                        let u = self.uring.as_mut().expect("checked");
                        if let Some(e) = u.failed.take() {
                            return Err(e);
                        }
                        let mut holder = match u.spares.pop() {
                            Some(b) => b,
                            None => Batch::new(batch.capacity(), 0, 0),
                        };
                        batch.swap_storage(&mut holder);
                        let done = u.writes.submit(&self.file, holder, pages, self.staged_at)?;
                        u.settle(done);
                    } else {
                        self.drain()?;
                        self.preallocate(end);
                        self.file
                            .write_all_at(&batch.storage_bytes()[pages], self.staged_at)?;
                    }
                }
                self.staging.clear();
                self.staging.append_raw(&tail[..tail_len]);
                self.staged_at += whole as u64;
                return Ok(());
            }
        }
        self.write(&batch.bytes()[from..to])
    }

    /// Straight from `bytes` (no staging copy) when they are aligned and the
    /// output is at a page boundary; else through the staging buffer.
    fn write_pages(&mut self, bytes: &[u8]) -> io::Result<()> {
        let aligned = (bytes.as_ptr() as usize).is_multiple_of(ALIGN)
            && bytes.len().is_multiple_of(ALIGN)
            && self.staging.len().is_multiple_of(ALIGN);
        if !aligned || bytes.is_empty() {
            return self.write(bytes);
        }
        // What is staged (whole pages: headers, statistics, padding) first.
        self.drain()?;
        self.write_staging()?;
        debug_assert!(self.staging.is_empty());
        let end = self.staged_at + bytes.len() as u64;
        self.preallocate(end);
        let fixed = match &self.fixed {
            Some(f) => {
                // The file grows first, by this write: ext4 hands a write
                // that extends the file to an io_uring worker thread (the
                // same work as pwrite, plus a hand-over), and one into
                // blocks already reserved inside the file it does at once.
                // A crash before the write completes leaves zeros after
                // the last whole block, which `ringcap repair` (and the
                // next start) cut off.
                self.file.set_len(end)?;
                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                f.write_at(&self.file, bytes, self.staged_at)
            }
            None => None,
        };
        match fixed {
            Some(r) => r?,
            None => self.file.write_all_at(bytes, self.staged_at)?,
        }
        self.staged_at = end;
        self.flushed = end;
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.drain()?;
        self.write_staging()?;
        // Give back the blocks reserved past the end.
        self.file.set_len(self.len())?;
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.staged_at + self.staging.len() as u64
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.drain()?;
        if len >= self.staged_at {
            let keep = (len - self.staged_at) as usize;
            let drop = self.staging.len() - keep.min(self.staging.len());
            // Shorten the staged bytes from the end.
            let kept: Vec<u8> = self.staging.bytes()[..self.staging.len() - drop].to_vec();
            self.staging.clear();
            self.staging.append_raw(&kept);
        }
        let in_file = len.min(self.staged_at);
        self.file.set_len(in_file)?;
        self.flushed = self.flushed.min(in_file);
        Ok(())
    }
}

/// Output to a pipe or terminal (`-w -`).
pub struct Stream {
    out: File,
    len: u64,
}

impl Stream {
    /// Standard output (a duplicate of descriptor 1, unbuffered: batches are large).
    pub fn stdout() -> io::Result<Stream> {
        use std::os::fd::AsFd;
        let fd = io::stdout().as_fd().try_clone_to_owned()?;
        Ok(Stream {
            out: File::from(fd),
            len: 0,
        })
    }

    /// An existing character device (such as /dev/null), opened for writing.
    pub fn device(path: &std::path::Path) -> io::Result<Stream> {
        let out = std::fs::OpenOptions::new().write(true).open(path)?;
        Ok(Stream { out, len: 0 })
    }
}

impl Output for Stream {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }
    fn tick(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn truncate(&mut self, _len: u64) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    fn check_output(mut out: Box<dyn Output>, path: &std::path::Path) {
        let data: Vec<u8> = (0..10_000_000u32).map(|i| (i % 251) as u8).collect();
        out.write(&data[..5000]).unwrap();
        out.tick().unwrap();
        assert_eq!(std::fs::metadata(path).unwrap().len(), 5000);
        out.write(&data[5000..]).unwrap();
        out.tick().unwrap();
        out.write(&[1, 2, 3]).unwrap();
        out.truncate(data.len() as u64).unwrap();
        out.finish().unwrap();
        assert_eq!(out.len(), data.len() as u64);
        assert_eq!(std::fs::read(path).unwrap(), data);
    }

    #[test]
    fn buffered_writes_exactly() {
        let dir = std::env::temp_dir().join(format!("ringcap-strategy-b-{}", std::process::id()));
        let f = File::create(&dir).unwrap();
        check_output(Box::new(BufferedFile::new(f)), &dir);
        std::fs::remove_file(&dir).unwrap();
    }

    /// A file opened with O_DIRECT in the target directory (/tmp may be
    /// tmpfs, which has no O_DIRECT), or None where there is none.
    fn open_direct(tag: &str) -> Option<(File, std::path::PathBuf)> {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
            "../../target/strategy-{tag}-{}",
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
        {
            Ok(f) => Some((f, path)),
            Err(e) => {
                eprintln!("SKIP: O_DIRECT not available here: {e}");
                None
            }
        }
    }

    /// Batches placed as the encoder places them (zero-copy), one misplaced
    /// (copy path), one written in two segments, a flush in between: the
    /// file holds exactly the bytes, in order.
    fn zero_copy_case(tag: &str, wrap: fn(File) -> DirectFile) {
        let Some((f, path)) = open_direct(tag) else {
            return;
        };
        let mut out = wrap(f);
        let mut expect = Vec::new();
        out.write(&[9u8; 24]).unwrap();
        expect.extend_from_slice(&[9u8; 24]);
        let mut b = Batch::new(1 << 20, 0, 0);
        for (i, len) in [10_000usize, 4096, 1, 70_001, 0, 123_457, 300_000, 65_536]
            .into_iter()
            .enumerate()
        {
            // Aligned as the encoder would place it, except batch 3 (copy path).
            let offset = if i == 3 {
                7
            } else {
                out.len() as usize % ALIGN
            };
            b.clear_at(offset);
            let data: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
            b.append_raw(&data);
            if i == 5 {
                // A rotation boundary inside the batch: two segments.
                out.write_batch(&mut b, 0, 50_000).unwrap();
                out.write_batch(&mut b, 50_000, len).unwrap();
            } else {
                out.write_batch(&mut b, 0, len).unwrap();
            }
            expect.extend_from_slice(&data);
            if i == 2 {
                out.tick().unwrap();
            }
        }
        out.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expect);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn direct_zero_copy_path_writes_exactly() {
        zero_copy_case("z", DirectFile::new);
    }

    #[test]
    fn uring_zero_copy_path_writes_exactly() {
        zero_copy_case("uz", |f| {
            match DirectFile::with_uring(f.try_clone().unwrap()) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("no io_uring here ({e}): testing the O_DIRECT path twice");
                    DirectFile::new(f)
                }
            }
        });
    }

    #[test]
    fn direct_writes_exactly() {
        let Some((f, path)) = open_direct("d") else {
            return;
        };
        check_output(Box::new(DirectFile::new(f)), &path);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn uring_writes_exactly() {
        let Some((f, path)) = open_direct("u") else {
            return;
        };
        let Ok(out) = DirectFile::with_uring(f) else {
            eprintln!("SKIP: no io_uring here");
            return;
        };
        check_output(Box::new(out), &path);
        std::fs::remove_file(&path).unwrap();
    }
}
