//! Thin, checked wrappers over the system calls the capture sockets need.
//! Each returns `io::Result` with the OS error; callers add context.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `socket(AF_PACKET, SOCK_RAW, 0)`: protocol 0 receives nothing until bound,
/// so the filter can be attached before the first packet arrives.
pub fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call with constant arguments; the returned descriptor
    // is owned by the OwnedFd exactly once.
    let fd =
        check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A datagram socket for interface ioctls.
pub fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: as above.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt` with a plain-old-data value.
pub fn setsockopt<T: Copy>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to `size_of::<T>()` readable bytes for the duration
    // of the call; T is Copy (plain data) as every socket option value is.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value as *const T as *const libc::c_void,
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `setsockopt` with a slice value (used for filter programs via `sock_fprog`).
pub fn attach_filter<T: Copy>(fd: &impl AsRawFd, program: &[T]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    debug_assert_eq!(size_of::<T>(), size_of::<libc::sock_filter>());
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
}

/// `getsockopt` into a plain-old-data value.
pub fn getsockopt<T: Copy>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<T> {
    let mut value = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` has room for `len` bytes; the kernel writes at most `len`.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    })?;
    // SAFETY: zero-initialised and then (partly) written by the kernel; every
    // bit pattern is valid for the plain-data option types used here.
    Ok(unsafe { value.assume_init() })
}

/// Binds a packet socket to `ifindex` for all protocols.
pub fn bind_packet(fd: &impl AsRawFd, ifindex: i32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid starting value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: pointer and length describe `sll` exactly.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Waits up to `timeout_ms` for the socket to become readable (a ring block
/// retired) or to report an error. Returns false on timeout or EINTR.
pub fn poll_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLERR,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    match check(unsafe { libc::poll(&mut pfd, 1, timeout_ms) }) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// A shared, read-write mapping of a packet socket's ring.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the ring code
// synchronises with the kernel through atomic status words.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes of the socket's ring, pre-faulted (MAP_POPULATE) so the
    /// first pass over the ring does not pay page faults.
    pub fn new(fd: &impl AsRawFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of the socket; the kernel validates
        // `len` against the ring it set up.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr as *mut u8,
            len,
        })
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never the case for a ring).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; no references into it outlive
        // the ring that owns this value.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// `ioctl` on an interface with an `ifreq` (name filled in by the caller).
pub fn ifreq_ioctl(
    fd: &impl AsRawFd,
    request: libc::c_ulong,
    req: &mut libc::ifreq,
) -> io::Result<()> {
    // SAFETY: `req` is a valid ifreq the kernel may read and write.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, req as *mut libc::ifreq) }).map(drop)
}

/// An `ifreq` for interface `name` (at most 15 bytes).
pub fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *dst = src as libc::c_char;
    }
    req
}

/// Enables hardware receive timestamping on the NIC (SIOCSHWTSTAMP, all packets).
pub fn enable_hw_timestamps(fd: &impl AsRawFd, name: &str) -> io::Result<()> {
    let mut config = libc::hwtstamp_config {
        flags: 0,
        tx_type: 0,   // HWTSTAMP_TX_OFF
        rx_filter: 1, // HWTSTAMP_FILTER_ALL
    };
    let mut req = ifreq(name);
    req.ifr_ifru.ifru_data = &mut config as *mut libc::hwtstamp_config as *mut libc::c_char;
    ifreq_ioctl(fd, libc::SIOCSHWTSTAMP, &mut req)
}

/// Sends one frame on a bound packet socket.
pub fn send(fd: &impl AsRawFd, frame: &[u8]) -> io::Result<usize> {
    // SAFETY: pointer and length describe `frame`.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            frame.as_ptr() as *const libc::c_void,
            frame.len(),
            0,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Asks the CPU to start loading the cache lines of `bytes` (the next
/// packet: its header, and all of it when it is long), so that reading them
/// later does not stall. A hint: it never faults and changes nothing.
#[inline(always)]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = bytes.as_ptr() as *const i8;
        // SAFETY: prefetch instructions never fault, whatever the address;
        // the pointer comes from a live slice anyway. SSE is part of the
        // x86_64 baseline, so the target feature is always present.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            if bytes.len() > 64 {
                _mm_prefetch::<_MM_HINT_T0>(p.add(64));
            }
            // Long packets: the rest of them too (up to 2 KiB), so that
            // copying them finds them in the cache.
            if bytes.len() > 256 {
                let mut off = 128;
                while off < bytes.len().min(2048) {
                    _mm_prefetch::<_MM_HINT_T0>(p.add(off));
                    off += 64;
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}
