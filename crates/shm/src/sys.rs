//! The system calls and shared mappings the ring needs: the only module of
//! this crate with `unsafe` code.
//!
//! Every function here returns `io::Result` with the OS error and is sound
//! for every argument. Callers add context to the errors.
//!
//! # Soundness of the shared mappings
//!
//! A [`Mapping`] is a `MAP_SHARED` mapping of a memfd, owned by the value: it
//! is unmapped only in `Drop`, so every reference it hands out (tied to
//! `&self`) points into live memory. Offsets and lengths are checked against
//! the mapping's length (a failed check is a panic: a bug in this crate, never
//! reachable from the data in the ring, which the callers validate first).
//! The file cannot shrink below the mapping (no `SIGBUS`): the writer seals
//! both memfds with `F_SEAL_SHRINK` before anyone else sees them, and the
//! reader refuses a memfd without that seal and checks the size only after it
//! has seen the seal.
//!
//! Within one mapping, Rust's borrow rules do the rest: plain writes
//! ([`Mapping::copy_in`], [`Mapping::zero`]) take `&mut self`, so no `&[u8]`
//! or `&AtomicU64` handed out by the same mapping is alive while they run.
//!
//! The same pages are also mapped elsewhere — by the peer process, or, in
//! tests, by the peer's `Mapping` in this process. Those accesses are the
//! ring protocol's business, and the references handed out here are sound
//! because the protocol keeps them apart:
//!
//! - Header words and the consumer region are only ever accessed through
//!   atomics (any peer may write them at any time; an atomic tolerates that).
//! - The data area has one writer: the `Mapping` the daemon made writable
//!   *before* it added `F_SEAL_FUTURE_WRITE` (after the seal, no writable
//!   mapping and no `write(2)` can be made; the reader checks the seal). That
//!   writer writes only free space: bytes at positions at or after its write
//!   position and before `released + capacity`, where `released` is the read
//!   position it loaded from the consumer region, clamped to
//!   `[previous released, write position]` ([`crate::writer`]).
//! - The reader borrows only bytes between its own released position and a
//!   write position it loaded with Acquire ([`crate::reader`]), and it stores
//!   its read position (Release) only while it holds no borrow (`&mut self`).
//!   After the reader has claimed the consumer region it seals it
//!   `F_SEAL_FUTURE_WRITE`, so nothing but the reader's own mapping can move
//!   that position (no `write(2)` on a duplicate of the descriptor), even
//!   when writer and reader live in the same process.
//!
//! So free space and borrowed bytes never overlap. The one thing this rests on
//! is that the writer is this crate's `RingWriter` (or a daemon that follows
//! the same protocol): the daemon is trusted by design. A client can break
//! nothing on the daemon's side: the daemon only reads the consumer region,
//! atomically, and clamps what it reads.

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Takes ownership of a descriptor a system call just returned.
fn owned(fd: libc::c_int) -> OwnedFd {
    debug_assert!(fd >= 0);
    // SAFETY: callers pass only a descriptor that a system call has just
    // created in this process (a checked, non-negative return value): it is
    // open and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL)`.
///
/// `MFD_NOEXEC_SEAL` (Linux 6.3+) makes the file non-executable for good;
/// kernels that do not know it (`EINVAL`) get the call without it, and
/// kernels with `vm.memfd_noexec = 2` refuse a memfd without it.
pub fn memfd(name: &CStr) -> io::Result<OwnedFd> {
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of
    // the call; the flags are plain integers.
    let ret = unsafe { libc::memfd_create(name.as_ptr(), base | libc::MFD_NOEXEC_SEAL) };
    let fd = match check(ret) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // SAFETY: as above.
            check(unsafe { libc::memfd_create(name.as_ptr(), base) })?
        }
        Err(e) => return Err(e),
    };
    Ok(owned(fd))
}

/// `ftruncate(fd, len)`.
pub fn set_len(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain system call on a descriptor the borrow keeps open.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    Ok(())
}

/// `fcntl(fd, F_ADD_SEALS, seals)`.
pub fn add_seals(fd: BorrowedFd<'_>, seals: libc::c_int) -> io::Result<()> {
    // SAFETY: plain system call with integer arguments on an open descriptor.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
    Ok(())
}

/// `fcntl(fd, F_GET_SEALS)`: `EINVAL` for a file that is not a memfd.
pub fn seals(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: plain system call with integer arguments on an open descriptor.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })
}

/// `fcntl(fd, F_GETFL)`: the file status flags (`O_NONBLOCK`, …).
pub fn status_flags(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: plain system call with integer arguments on an open descriptor.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
}

/// The size of the file behind `fd` (`fstat`).
pub fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is valid for writes of one `struct stat`, which the kernel
    // fills on success.
    check(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so `st` is initialised.
    let st = unsafe { st.assume_init() };
    u64::try_from(st.st_size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `pipe2(O_CLOEXEC | O_NONBLOCK)`: `(read end, write end)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is valid for writes of two ints.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
    Ok((owned(fds[0]), owned(fds[1])))
}

/// Writes one byte to `fd` (a wake-up).
pub fn write_byte(fd: BorrowedFd<'_>) -> io::Result<()> {
    let b = [1u8];
    // SAFETY: `b` is valid for reads of one byte.
    let n = unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), 1) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads and discards what one `read` returns (up to 4096 bytes).
pub fn discard_input(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut buf = [0u8; 4096];
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// What [`poll_in`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// There is something to read.
    pub readable: bool,
    /// The other end is gone (`POLLHUP`/`POLLERR`).
    pub hung_up: bool,
}

/// Waits up to `timeout` for `fd` to become readable; `None` on timeout.
/// Signals (`EINTR`) restart the wait with the time that is left.
pub fn poll_in(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<Option<Readiness>> {
    let deadline = Instant::now().checked_add(timeout);
    let mut left = timeout;
    loop {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // A timeout too long for a timespec (or past the end of Instant)
        // waits without one: the same thing in practice.
        let ts = libc::time_t::try_from(left.as_secs())
            .ok()
            .filter(|_| deadline.is_some())
            .map(|secs| libc::timespec {
                tv_sec: secs,
                tv_nsec: left.subsec_nanos() as _,
            });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `pfd` is valid for reads and writes of one pollfd; `ts_ptr`
        // is null or points to a timespec that lives across the call; a null
        // signal mask leaves the mask alone.
        let ret = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
        if ret < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            if let Some(d) = deadline {
                left = d.saturating_duration_since(Instant::now());
            }
            continue;
        }
        if ret == 0 {
            return Ok(None);
        }
        let r = pfd.revents;
        return Ok(Some(Readiness {
            readable: r & libc::POLLIN != 0,
            hung_up: r & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0,
        }));
    }
}

/// A `MAP_SHARED` mapping of a file from offset 0, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

// SAFETY: a Mapping is plain memory owned by the value (no thread affinity);
// what it hands out through `&self` is `&[u8]` and atomics, which are Sync,
// and writes need `&mut self`.
unsafe impl Send for Mapping {}
// SAFETY: see above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0, read-only or read-write.
    /// `len` must be non-zero; callers check it against the file's size
    /// (and the file's `F_SEAL_SHRINK`) before touching the memory.
    pub fn new(fd: BorrowedFd<'_>, len: usize, writable: bool) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // Read-only mappings (a client's view of its ring) are populated now:
        // a page fault per page on the first pass through the ring costs the
        // client more than mapping them all at once (the daemon has already
        // allocated them, see `RingWriter::prefault`).
        let (prot, flags) = if writable {
            (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED)
        } else {
            (libc::PROT_READ, libc::MAP_SHARED | libc::MAP_POPULATE)
        };
        // SAFETY: a fresh mapping at an address the kernel picks: it cannot
        // overlap any memory Rust knows about.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap at 0"))?;
        Ok(Mapping { ptr, len, writable })
    }

    fn check_range(&self, off: usize, len: usize) {
        let end = off.checked_add(len);
        assert!(
            end.is_some_and(|e| e <= self.len),
            "mapping access {off}+{len} beyond {}",
            self.len
        );
    }

    /// The aligned `u64` at `off` as an atomic.
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        self.check_range(off, 8);
        assert!(off.is_multiple_of(8), "misaligned u64 at {off}");
        // SAFETY: in bounds (checked) and 8-aligned (mmap returns a
        // page-aligned address, `off` is a multiple of 8); the memory lives
        // as long as `&self`; AtomicU64 has u64's layout and any bit pattern
        // is valid; concurrent access by the peer is what atomics are for.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// The aligned `u32` at `off` as an atomic.
    pub fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        self.check_range(off, 4);
        assert!(off.is_multiple_of(4), "misaligned u32 at {off}");
        // SAFETY: as in `atomic_u64`, with 4-byte alignment.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// `len` bytes at `off`, borrowed.
    ///
    /// Only for bytes the ring protocol guarantees nobody writes while the
    /// borrow lives (module docs): the reader calls it for a chunk between
    /// its released position and the write position it loaded with Acquire.
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        self.check_range(off, len);
        // SAFETY: in bounds (checked), live as long as `&self`, any bytes are
        // valid u8; no write through this mapping can happen during the borrow
        // (writes need `&mut self`), and the protocol keeps the one other
        // writer (the daemon's mapping) out of these bytes (module docs).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// `len` bytes at `off` to write in place. Panics on a read-only
    /// mapping. Only for the free space the writer owns (module docs).
    pub fn bytes_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        assert!(self.writable, "write to a read-only mapping");
        self.check_range(off, len);
        // SAFETY: in bounds (checked) of a writable mapping (checked), live
        // as long as `&mut self`, which excludes every other reference this
        // mapping handed out; a reader's mapping of the same pages keeps its
        // borrows out of the free space the writer writes (module docs).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) }
    }

    /// Copies `src` to `off`. Panics on a read-only mapping.
    pub fn copy_in(&mut self, off: usize, src: &[u8]) {
        assert!(self.writable, "write to a read-only mapping");
        self.check_range(off, src.len());
        // SAFETY: in bounds (checked) of a writable mapping (checked). `&mut
        // self` excludes every reference this mapping handed out, so `src`
        // is not in this mapping; if it borrows another mapping of the same
        // pages (a reader's, in one process), the protocol keeps borrowed
        // bytes out of the free space the writer writes (module docs).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        }
    }

    /// Writes `len` zero bytes at `off`. Panics on a read-only mapping.
    pub fn zero(&mut self, off: usize, len: usize) {
        assert!(self.writable, "write to a read-only mapping");
        self.check_range(off, len);
        // SAFETY: as in `copy_in`.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off), 0, len) }
    }

    /// Tries to make a read-only mapping writable (`mprotect`); tests check
    /// that the seals make this fail. On success the mapping stays valid
    /// and simply allows more.
    #[cfg(test)]
    pub fn try_make_writable(&mut self) -> io::Result<()> {
        // SAFETY: changes the protection of exactly this mapping, which this
        // value owns; making it more permissive invalidates nothing.
        check(unsafe {
            libc::mprotect(
                self.ptr.as_ptr().cast(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        })?;
        self.writable = true;
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value created; every
        // reference it handed out borrowed `self`, so none outlives it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`: tests check that
/// a client cannot punch holes into the data region.
#[cfg(test)]
pub fn punch_hole(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<()> {
    let off = libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain system call with integer arguments on an open descriptor.
    check(unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        )
    })?;
    Ok(())
}

/// A duplicate of descriptor `target_fd` of process `pid`
/// (`pidfd_open` + `pidfd_getfd`, Linux 5.6+, needs ptrace rights over
/// `pid`): how the cross-process test's child gets the ring's descriptors.
#[cfg(test)]
pub fn fd_of_process(pid: u32, target_fd: i32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain system call with integer arguments.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    let pidfd = owned(pidfd as libc::c_int);
    // SAFETY: plain system call with integer arguments; the result is a new
    // descriptor (close-on-exec) in this process.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target_fd, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(owned(fd as libc::c_int))
}
