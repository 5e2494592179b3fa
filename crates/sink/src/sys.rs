//! The sink's few system calls that std does not wrap; the crate's only
//! `unsafe` code.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Starts write-back of `len` bytes at `offset` without waiting for it.
pub fn start_writeback(file: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: plain system call on a descriptor we own; no memory is passed.
    let r = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reserves disk blocks for `len` bytes at `offset` without changing the
/// file size (FALLOC_FL_KEEP_SIZE).
pub fn reserve(file: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: plain system call on a descriptor we own; no memory is passed.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_KEEP_SIZE,
            offset as i64,
            len as i64,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Renames `from` to `to` unless `to` exists (`renameat2` with
/// RENAME_NOREPLACE): AlreadyExists then, and nothing changes. In one
/// step, so a crash leaves the file under one name or the other, never
/// both. Filesystems that do not support the flag fail with EINVAL.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two valid C strings, relative to the working directory; no
    // memory is written.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Free space of the filesystem holding `dir`: (available blocks, total blocks).
pub fn filesystem_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: a valid C string and room for one statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs succeeded and filled the struct.
    let st = unsafe { st.assume_init() };
    Some((st.f_bavail, st.f_blocks))
}

/// Asks for transparent huge pages under `buf` (whole 2 MiB pages inside it
/// only). Advice: failure changes nothing but speed, so it is ignored.
pub fn advise_huge_pages(buf: &mut [u8]) {
    const HUGE: usize = 2 << 20;
    let start = buf.as_mut_ptr() as usize;
    let first = start.next_multiple_of(HUGE);
    let end = (start + buf.len()) / HUGE * HUGE;
    if end > first {
        // SAFETY: [first, end) lies inside `buf`, which we borrow mutably;
        // MADV_HUGEPAGE changes how the pages are backed, never their contents.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
        }
    }
}

/// Writes in flight through io_uring. Each write keeps the [`Batch`] that
/// holds its bytes, and its own descriptor of the file, until the kernel is
/// done with them, which is what makes handing the kernel a raw pointer and
/// a raw descriptor number sound.
pub struct UringWrites {
    ring: io_uring::IoUring,
    /// user_data -> the batch whose memory a write reads, the descriptor it
    /// writes to, its offset and length.
    in_flight: Vec<Option<InFlight>>,
}

/// What one write in flight needs to stay alive.
struct InFlight {
    batch: crate::Batch,
    /// A duplicate of the caller's descriptor, so that the number in the
    /// submission names this file until the write completes, whenever the
    /// caller closes its own (an entry left queued by an interrupted
    /// submission goes to the kernel later).
    file: File,
    offset: u64,
    len: usize,
}

impl UringWrites {
    /// A ring for up to `depth` writes at once.
    pub fn new(depth: u32) -> io::Result<UringWrites> {
        Ok(UringWrites {
            ring: io_uring::IoUring::new(depth)?,
            in_flight: (0..depth).map(|_| None).collect(),
        })
    }

    /// Writes in flight.
    pub fn pending(&self) -> usize {
        self.in_flight.iter().filter(|s| s.is_some()).count()
    }

    /// Starts writing `holder`'s bytes `range` (an index range into
    /// `holder.storage_bytes()`) at `offset` of `file`. Waits for a free
    /// slot first if all are taken; returns the batches of writes that
    /// completed meanwhile, with their results.
    pub fn submit(
        &mut self,
        file: &File,
        holder: crate::Batch,
        range: std::ops::Range<usize>,
        offset: u64,
    ) -> io::Result<Vec<(crate::Batch, io::Result<()>)>> {
        let mut done = Vec::new();
        while self.pending() == self.in_flight.len() {
            done.extend(self.complete(1)?);
        }
        let slot = self
            .in_flight
            .iter()
            .position(|s| s.is_none())
            .expect("a free slot after waiting");
        let len = u32::try_from(range.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("one write of {} bytes is too long", range.len()),
            )
        })?;
        let file = file.try_clone()?;
        let bytes = &holder.storage_bytes()[range.clone()];
        let entry = io_uring::opcode::Write::new(
            io_uring::types::Fd(file.as_raw_fd()),
            bytes.as_ptr(),
            len,
        )
        .offset(offset)
        .build()
        .user_data(slot as u64);
        // SAFETY: the pointer and length describe `bytes`, inside `holder`'s
        // heap storage (a Vec: moving the Batch does not move it), and the
        // descriptor is `file`, our own duplicate. Both are moved into
        // `in_flight[slot]` just below, which owns them (and nothing mutates
        // the storage or closes the descriptor) until the completion for
        // `slot` has been reaped in `complete`, or forever if `drop` cannot
        // wait for it. If the push fails, the entry is not queued.
        unsafe {
            self.ring
                .submission()
                .push(&entry)
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        self.in_flight[slot] = Some(InFlight {
            batch: holder,
            file,
            offset,
            len: range.len(),
        });
        // A signal (SIGHUP rotates, SIGINT stops) may interrupt the call;
        // the entry then stays queued and goes with the next call.
        match self.ring.submit() {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
            _ => Ok(done),
        }
    }

    /// Waits until at least `n` writes have completed (all, if fewer are in
    /// flight) and returns their batches with their results; a short write
    /// is an error.
    pub fn complete(&mut self, n: usize) -> io::Result<Vec<(crate::Batch, io::Result<()>)>> {
        let want = n.min(self.pending());
        let mut done = Vec::new();
        while done.len() < want {
            match self.ring.submit_and_wait(1) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => r?,
            };
            let cqes: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (slot, res) in cqes {
                let Some(InFlight {
                    batch,
                    file,
                    offset,
                    len,
                }) = self.in_flight.get_mut(slot as usize).and_then(|s| s.take())
                else {
                    continue;
                };
                // The kernel is done with the descriptor and the bytes.
                drop(file);
                let r = if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else if res as usize != len {
                    Err(io::Error::other(format!(
                        "short write at offset {offset}: {res} of {len} bytes"
                    )))
                } else {
                    Ok(())
                };
                done.push((batch, r));
            }
        }
        Ok(done)
    }
}

impl Drop for UringWrites {
    fn drop(&mut self) {
        // The kernel may still read the batches and write to the
        // descriptors: never free or close them before it is done (if
        // waiting fails, leak them rather than free them).
        if self.complete(usize::MAX).is_err() {
            for s in self.in_flight.iter_mut() {
                if let Some(w) = s.take() {
                    std::mem::forget(w);
                }
            }
        }
    }
}

/// A pipe, both ends non-blocking and close-on-exec: (read, write).
pub fn pipe_nonblocking() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: room for the two descriptors pipe2 returns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both are new descriptors nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// One write(2) of `bytes` to `fd`.
pub fn write_some(fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: writes from a valid buffer of that length.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One read(2) from `fd` into `buf`.
pub fn read_some(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: reads into a valid buffer of that length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// poll(2) for POLLIN on up to 8 descriptors, `timeout_ms` as poll takes it
/// (-1: no timeout): a bit mask, by position, of those with any event.
pub fn poll_in(fds: &[RawFd], timeout_ms: i32) -> io::Result<u32> {
    let mut set = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 8];
    let n = fds.len().min(set.len());
    for (p, fd) in set.iter_mut().zip(fds) {
        p.fd = *fd;
        p.events = libc::POLLIN;
    }
    // SAFETY: `n` valid pollfds.
    if unsafe { libc::poll(set.as_mut_ptr(), n as libc::nfds_t, timeout_ms) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(set[..n]
        .iter()
        .enumerate()
        .filter(|(_, p)| p.revents != 0)
        .fold(0, |m, (i, _)| m | 1 << i))
}

/// O_DIRECT writes of ring blocks (written in place) through io_uring from
/// the ring memory, registered once as fixed buffers. `pwrite()` from the
/// ring pins every page of a block again at every write (the kernel looks
/// up and counts each 4 KiB page: ~80 ns a page here, the largest cost of
/// the writer); a registered buffer's pages were pinned at registration.
/// Each write is waited for, as `pwrite()` is.
pub struct FixedWrites {
    // Dropped before `_memory`: closing the ring unregisters the buffers.
    ring: io_uring::IoUring,
    /// (start address, length) of each registered buffer, by index.
    buffers: Vec<(usize, usize)>,
    /// Set when the ring failed: nothing goes through it any more.
    broken: bool,
    _memory: Vec<ringcap_source::RingMemory>,
}

impl std::fmt::Debug for FixedWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FixedWrites({} buffers)", self.buffers.len())
    }
}

/// Largest buffer io_uring registers.
const FIXED_MAX: usize = 1 << 30;

impl FixedWrites {
    /// Registers the rings' memory (in pieces of at most 1 GiB). Fails
    /// where io_uring is missing or refused, or the pages cannot be pinned
    /// (without CAP_IPC_LOCK they count against RLIMIT_MEMLOCK).
    pub fn register(memory: Vec<ringcap_source::RingMemory>) -> io::Result<FixedWrites> {
        let ring = io_uring::IoUring::new(2)?;
        let mut buffers = Vec::new();
        for m in &memory {
            let mut off = 0;
            while off < m.len() {
                let len = (m.len() - off).min(FIXED_MAX);
                buffers.push((m.start() + off, len));
                off += len;
            }
        }
        let iovecs: Vec<libc::iovec> = buffers
            .iter()
            .map(|&(start, len)| libc::iovec {
                iov_base: start as *mut libc::c_void,
                iov_len: len,
            })
            .collect();
        // SAFETY: every iovec lies inside a ring mapping that `_memory`
        // keeps mapped for as long as the ring lives (it is dropped after
        // it). The kernel pins those pages and, through this ring, only
        // reads them, for the WRITE_FIXED entries of `write_at`.
        unsafe { ring.submitter().register_buffers(&iovecs)? };
        Ok(FixedWrites {
            ring,
            buffers,
            broken: false,
            _memory: memory,
        })
    }

    /// Writes all of `bytes` at `offset` of `file` from the registered
    /// memory, and waits for it; None (nothing written) when `bytes` do not
    /// lie inside one registered buffer.
    pub fn write_at(&mut self, file: &File, bytes: &[u8], offset: u64) -> Option<io::Result<()>> {
        if self.broken {
            return None;
        }
        let start = bytes.as_ptr() as usize;
        let index = self
            .buffers
            .iter()
            .position(|&(s, l)| start >= s && start + bytes.len() <= s + l)?;
        let index = u16::try_from(index).ok()?;
        Some(self.write_all(file, bytes, offset, index))
    }

    fn write_all(
        &mut self,
        file: &File,
        mut bytes: &[u8],
        mut offset: u64,
        index: u16,
    ) -> io::Result<()> {
        while !bytes.is_empty() {
            let len = bytes.len().min(FIXED_MAX) as u32;
            let entry = io_uring::opcode::WriteFixed::new(
                io_uring::types::Fd(file.as_raw_fd()),
                bytes.as_ptr(),
                len,
                index,
            )
            .offset(offset)
            .build();
            // SAFETY: the bytes lie inside registered buffer `index`
            // (checked by write_at), whose pages the kernel pinned; they are
            // borrowed, and `file` too, until this function returns, which
            // it does only once the write completed: the loop below waits
            // for its completion whatever the wait returns.
            unsafe {
                self.ring
                    .submission()
                    .push(&entry)
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
            let n = loop {
                if let Some(c) = self.ring.completion().next() {
                    break c.result();
                }
                match self.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    // A signal (SIGHUP rotates, SIGINT stops): the entry is
                    // still queued or in flight; wait again.
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // The ring itself failed: never used again (an
                        // entry it kept must not be submitted later), and
                        // the caller fails this write.
                        self.broken = true;
                        return Err(e);
                    }
                }
            };
            if n < 0 {
                return Err(io::Error::from_raw_os_error(-n));
            }
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "the disk took no bytes",
                ));
            }
            bytes = &bytes[n as usize..];
            offset += n as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uring_write_reaches_its_file_after_the_caller_closes_it() {
        let mut w = match UringWrites::new(4) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("SKIP: no io_uring here: {e}");
                return;
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut batch = crate::Batch::new(8192, 0, 0);
        assert!(batch.append_raw(b"written through io_uring"));
        let range = 0..batch.storage_bytes().len().min(4096);
        let file = File::create(&path).unwrap();
        let mut done = w.submit(&file, batch, range.clone(), 0).unwrap();
        // The caller closes its descriptor; a new file may get its number.
        drop(file);
        let other = tempfile::tempfile().unwrap();
        done.extend(w.complete(1).unwrap());
        assert_eq!(done.len(), 1);
        let (batch, r) = done.pop().unwrap();
        r.unwrap();
        assert_eq!(w.pending(), 0);
        assert_eq!(std::fs::read(&path).unwrap(), &batch.storage_bytes()[range]);
        assert_eq!(other.metadata().unwrap().len(), 0);
    }
}
