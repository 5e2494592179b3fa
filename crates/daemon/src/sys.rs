//! The daemon's system calls without a safe wrapper in a well-kept crate
//! (SO_PEERGROUPS: neither nix nor rustix reads it; a thread's own
//! scheduling class), kept apart as the only `unsafe` of the daemon.

/// Puts the calling thread in SCHED_IDLE: it runs only on time no other
/// thread wants (lowering one's own class needs no privilege).
pub fn lowest_priority() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0
    // is the calling thread.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// SO_PEERGROUPS: the peer's supplementary groups at connect().
pub fn peer_groups(conn: &impl std::os::fd::AsFd) -> std::io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd;
    const GID: usize = std::mem::size_of::<libc::gid_t>();
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * GID) as libc::socklen_t;
        // SAFETY: getsockopt(2) writes at most `len` bytes into `groups`,
        // which holds that many, and sets `len` to the bytes written (or,
        // with ERANGE, to the bytes needed).
        let r = unsafe {
            libc::getsockopt(
                conn.as_fd().as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 {
            groups.truncate(len as usize / GID);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        let needed = len as usize / GID;
        if e.raw_os_error() == Some(libc::ERANGE) && needed > groups.len() && needed <= 1 << 16 {
            groups.resize(needed, 0);
            continue;
        }
        return Err(e);
    }
}
