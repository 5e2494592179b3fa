//! What the ring tests share: a ring's size and a reader mapped from a
//! writer's descriptors.

use ringcap_shm::{RingReader, RingWriter};
use std::os::fd::{BorrowedFd, OwnedFd};

pub const CAP: usize = 64 << 10;

pub fn dup(fd: BorrowedFd<'_>) -> OwnedFd {
    fd.try_clone_to_owned().unwrap()
}

pub fn reader_for(w: &RingWriter) -> RingReader {
    let (d, c, e) = w.fds();
    RingReader::map(dup(d), dup(c), dup(e)).unwrap()
}
