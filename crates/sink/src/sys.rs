//! The sink's few system calls that std does not wrap; the crate's only
//! `unsafe` code.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
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
/// holds its bytes until the kernel is done with them, which is what makes
/// handing the kernel a raw pointer sound.
pub struct UringWrites {
    ring: io_uring::IoUring,
    /// user_data -> the batch whose memory a write reads, its offset and length.
    in_flight: Vec<Option<(crate::Batch, u64, usize)>>,
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
        let bytes = &holder.storage_bytes()[range.clone()];
        let entry = io_uring::opcode::Write::new(
            io_uring::types::Fd(file.as_raw_fd()),
            bytes.as_ptr(),
            bytes.len() as u32,
        )
        .offset(offset)
        .build()
        .user_data(slot as u64);
        // SAFETY: the pointer and length describe `holder`'s heap storage,
        // which `in_flight[slot]` owns (and nothing mutates) until the
        // completion for `slot` has been reaped; the descriptor is `file`'s,
        // which the caller keeps open until every write has completed
        // (`UringWrites::complete(pending)` before closing).
        unsafe {
            self.ring
                .submission()
                .push(&entry)
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        self.in_flight[slot] = Some((holder, offset, range.len()));
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
                let Some((batch, offset, len)) =
                    self.in_flight.get_mut(slot as usize).and_then(|s| s.take())
                else {
                    continue;
                };
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
        // The kernel may still read the batches: never free them before it
        // is done (if waiting fails, leak them rather than free them).
        if self.complete(usize::MAX).is_err() {
            for s in self.in_flight.iter_mut() {
                if let Some(b) = s.take() {
                    std::mem::forget(b);
                }
            }
        }
    }
}
