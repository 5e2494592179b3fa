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
