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
    // SAFETY: plain system call with constant arguments, no pointers.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

mod sealed {
    pub trait Sealed {}
}

/// A socket option value the kernel reads ([`setsockopt`]) or writes
/// ([`getsockopt`]) as plain bytes.
///
/// Sealed: implemented only for the integer and C struct types the capture
/// sockets use.
///
/// # Safety
///
/// Implementors have no padding bytes (every byte of a value is
/// initialised, so the kernel may read all of them), no pointers or
/// references (the kernel is never handed an address to read or write
/// through), and every bit pattern of their size is a valid value (whatever
/// the kernel writes, or leaves zeroed, is one).
///
/// Anything else is refused at compile time: references, types with padding,
/// types with invalid bit patterns, and program slices of other types.
///
/// ```compile_fail
/// # use ringcap_source::sys;
/// # let s = std::os::unix::net::UnixDatagram::unbound().unwrap();
/// let r: &'static u8 = sys::getsockopt(&s, libc::SOL_SOCKET, libc::SO_TYPE).unwrap();
/// ```
///
/// ```compile_fail
/// # use ringcap_source::sys;
/// # let s = std::os::unix::net::UnixDatagram::unbound().unwrap();
/// let b: bool = sys::getsockopt(&s, libc::SOL_SOCKET, libc::SO_TYPE).unwrap();
/// ```
///
/// ```compile_fail
/// # use ringcap_source::sys;
/// # let s = std::os::unix::net::UnixDatagram::unbound().unwrap();
/// #[derive(Clone, Copy)]
/// struct Padded(u8, u32);
/// sys::setsockopt(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, &Padded(1, 2)).unwrap();
/// ```
///
/// ```compile_fail
/// # use ringcap_source::sys;
/// # let s = std::os::unix::net::UnixDatagram::unbound().unwrap();
/// sys::attach_filter(&s, &[0u8; 8]).unwrap();
/// ```
///
/// ```
/// # use ringcap_source::sys;
/// # let s = std::os::unix::net::UnixDatagram::unbound().unwrap();
/// let n: libc::c_int = sys::getsockopt(&s, libc::SOL_SOCKET, libc::SO_TYPE).unwrap();
/// assert_eq!(n, libc::SOCK_DGRAM);
/// ```
pub unsafe trait SockOptValue: Copy + sealed::Sealed {}

macro_rules! sock_opt_values {
    ($($t:ty),* $(,)?) => {
        $(
            impl sealed::Sealed for $t {}
            // SAFETY: an integer, or a C struct made only of integer fields
            // (and integer arrays) whose sizes and alignments leave no
            // padding, checked by `sock_opt_values_have_no_padding` in the
            // tests: no padding, no pointers, every bit pattern valid.
            unsafe impl SockOptValue for $t {}
        )*
    };
}

sock_opt_values!(
    libc::c_int,            // flags, versions, buffer sizes, PACKET_TIMESTAMP
    libc::c_uint,           // PACKET_FANOUT
    libc::packet_mreq,      // PACKET_ADD_MEMBERSHIP
    libc::tpacket_req3,     // PACKET_RX_RING (TPACKET_V3)
    libc::tpacket_stats,    // PACKET_STATISTICS (TPACKET_V1/V2)
    libc::tpacket_stats_v3, // PACKET_STATISTICS (TPACKET_V3)
);

/// `setsockopt` with a plain-old-data value (see [`SockOptValue`]).
pub fn setsockopt<T: SockOptValue>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to `size_of::<T>()` initialised bytes (T has no
    // padding) that stay borrowed for the duration of the call, and the
    // length passed is exactly that size. The kernel only reads them; as T
    // holds no pointers, it is never given an address to follow, whatever
    // `level` and `name` are.
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

/// Attaches a classic BPF program to a socket (`SO_ATTACH_FILTER`).
///
/// Fails with `InvalidInput`, without a system call, if the program has
/// more instructions than the 16-bit length of `sock_fprog` can say (the
/// kernel itself takes at most 4096).
pub fn attach_filter(fd: &impl AsRawFd, program: &[libc::sock_filter]) -> io::Result<()> {
    let len = libc::c_ushort::try_from(program.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a filter program of {} instructions is too long",
                program.len()
            ),
        )
    })?;
    let prog = libc::sock_fprog {
        len,
        // The kernel only reads through this pointer (it copies the program).
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` is a fully initialised sock_fprog passed with its exact
    // size; its `filter` points to `len` sock_filter values (`len` is the
    // slice's length, checked above to fit), borrowed for the duration of the
    // call, which the kernel copies and does not write.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog as *const libc::sock_fprog as *const libc::c_void,
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `getsockopt` into a plain-old-data value (see [`SockOptValue`]).
///
/// Fails with `InvalidData` if the kernel returns a value of another size
/// than `T` (the wrong type for the option).
pub fn getsockopt<T: SockOptValue>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<T> {
    let mut value = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is writable for `len` bytes and `len` is a valid,
    // writable socklen_t; the kernel writes at most `len` bytes of the value
    // and then the length it wrote.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    })?;
    if len as usize != size_of::<T>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "socket option {level}/{name}: the kernel returned {len} bytes for a {}-byte value",
                size_of::<T>()
            ),
        ));
    }
    // SAFETY: every byte was zeroed and then possibly overwritten by the
    // kernel, so all are initialised, and every bit pattern is a valid T
    // (SockOptValue).
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

/// Waits up to `timeout_ms` (-1: no timeout) until `fd` is readable (a ring
/// block retired) or reports an error, or until `wake`, if given, is
/// readable: (`fd`'s revents, `wake` is readable). Interrupted: (0, false).
pub fn poll_readable_or(
    fd: RawFd,
    wake: Option<RawFd>,
    timeout_ms: i32,
) -> io::Result<(libc::c_short, bool)> {
    let mut pfd = [
        libc::pollfd {
            fd,
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        },
        libc::pollfd {
            // A negative descriptor is ignored by poll.
            fd: wake.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: two valid pollfds.
    match check(unsafe { libc::poll(pfd.as_mut_ptr(), 2, timeout_ms) }) {
        Ok(_) => Ok((pfd[0].revents, pfd[1].revents != 0)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok((0, false)),
        Err(e) => Err(e),
    }
}

/// The interface index a packet socket is bound to (`getsockname`): -1
/// once the interface was unregistered (deleted, or moved to another
/// network namespace).
pub fn bound_ifindex(fd: &impl AsRawFd) -> io::Result<i32> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `sll` is writable for `len` bytes and `len` is a valid,
    // writable socklen_t; the kernel writes at most `len` bytes.
    check(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
            &mut len,
        )
    })?;
    Ok(sll.sll_ifindex)
}

/// A shared, read-write mapping of a packet socket's ring.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the ring code
// synchronises with the kernel through atomic status words.
unsafe impl Send for Mapping {}
// SAFETY: shared between the capture thread and the writer of in-place
// blocks (`ring::HeldBlock`): each block's bytes are used by one owner at a
// time (handed over with the block), status words only atomically.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of the socket's ring, pre-faulted (MAP_POPULATE) so the
    /// first pass over the ring does not pay page faults.
    pub fn new(fd: &impl AsRawFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a null address lets the kernel choose where to map, so no
        // existing mapping is replaced; `len` and the descriptor are checked
        // by the kernel (a ring of another size fails). Nothing is read or
        // written here.
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
///
/// # Safety
///
/// Some interface requests make the kernel follow a pointer stored in
/// `req.ifr_ifru` (`ifru_data`: SIOCSHWTSTAMP, SIOCETHTOOL, ...) and read or
/// write the memory there. For such a `request`, that pointer must be valid
/// for every read and write the request does (for its whole size), and
/// nothing else may access that memory during the call. Requests that use
/// only the `ifreq` itself (SIOCGIFINDEX, SIOCGIFFLAGS, SIOCGIFMTU, ...) have
/// no requirement.
pub unsafe fn ifreq_ioctl(
    fd: &impl AsRawFd,
    request: libc::c_ulong,
    req: &mut libc::ifreq,
) -> io::Result<()> {
    // SAFETY: `req` is a valid, exclusively borrowed ifreq the kernel may read
    // and write in full; any pointer inside it is valid for `request`, as
    // the caller guarantees.
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
    // SAFETY: SIOCSHWTSTAMP reads and writes back one hwtstamp_config through
    // `ifru_data`, which points to `config`, alive and otherwise unused until
    // the call returns.
    unsafe { ifreq_ioctl(fd, libc::SIOCSHWTSTAMP, &mut req) }
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

/// Asks the kernel for a software transmit timestamp of every frame sent on
/// `fd`, numbered per socket from 0 (SO_TIMESTAMPING with OPT_ID, TSONLY:
/// the error queue then carries the stamp and the number, not the frame).
pub fn enable_tx_timestamps(fd: &impl AsRawFd) -> io::Result<()> {
    let flags = (libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY) as libc::c_int;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags)
}

/// Makes the calling thread real-time (SCHED_FIFO at `priority`), so that
/// its wake-up is not queued behind other work; needs CAP_SYS_NICE (or an
/// RLIMIT_RTPRIO), and fails harmlessly without.
pub fn set_fifo_priority(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0
    // is the calling thread.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) }).map(drop)
}

/// Sets the calling thread's nice value (negative needs CAP_SYS_NICE).
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: plain system calls with integer arguments; gettid names the
    // calling thread, whose priority alone setpriority then changes.
    check(unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) })
        .map(drop)
}

/// `PACKET_TX_TIMESTAMP` (linux/if_packet.h): the control message of a
/// packet socket's error queue that carries a `sock_extended_err`.
const PACKET_TX_TIMESTAMP: libc::c_int = 16;

/// Reads one transmit timestamp from `fd`'s error queue without waiting:
/// `(id, CLOCK_REALTIME ns)`, or `None` when the queue is empty. A message
/// without both parts (the kernel sends none such here) is skipped.
pub fn read_tx_timestamp(fd: &impl AsRawFd) -> io::Result<Option<(u32, u64)>> {
    loop {
        // u64 elements keep the control buffer aligned for cmsghdr.
        let mut control = [0u64; 64];
        let mut data = [0u8; 64];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: `msg` points to one iovec over `data` and to `control`,
        // both alive and writable for the lengths given, for the call.
        let n = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => Err(e),
            };
        }
        let mut ts: Option<u64> = None;
        let mut id: Option<u32> = None;
        // SAFETY: the CMSG_* helpers walk the control buffer the kernel
        // filled, within `msg_controllen`, which it set to what it wrote
        // (at most the buffer's size); each header they return lies within
        // that buffer, and the data read below is checked to fit its
        // header's length before it is read (unaligned reads: the data of a
        // cmsg is only guaranteed aligned to its header's alignment).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let h = &*c;
                let data = libc::CMSG_DATA(c);
                let len = h.cmsg_len as usize - (data as usize - c as usize);
                if h.cmsg_level == libc::SOL_SOCKET
                    && h.cmsg_type == libc::SCM_TIMESTAMPING
                    && len >= size_of::<libc::timespec>()
                {
                    let t = std::ptr::read_unaligned(data as *const libc::timespec);
                    ts = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                } else if h.cmsg_level == libc::SOL_PACKET
                    && h.cmsg_type == PACKET_TX_TIMESTAMP
                    && len >= size_of::<libc::sock_extended_err>()
                {
                    let e = std::ptr::read_unaligned(data as *const libc::sock_extended_err);
                    if e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING {
                        id = Some(e.ee_data);
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if let (Some(id), Some(ts)) = (id, ts) {
            return Ok(Some((id, ts)));
        }
    }
}

/// Waits for an RCU grace period of the whole machine
/// (`membarrier(MEMBARRIER_CMD_GLOBAL)`, which is `synchronize_rcu()` in the
/// kernel): when it returns, every packet that was being received when it
/// was called has been run through whatever socket filter it saw and put in
/// its ring (the receive path, filter and ring copy included, is one RCU
/// read-side section). Refused on a machine with one CPU online, where the
/// kernel returns without waiting (a preemptible receive path could still be
/// in the middle of a packet), and where the kernel refuses it (nohz_full).
pub fn rcu_barrier() -> io::Result<()> {
    // SAFETY: sysconf has no memory effects.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if cpus < 2 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "one CPU online: membarrier does not wait for a grace period",
        ));
    }
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes two integers and touches no user memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_GLOBAL,
            0 as libc::c_long,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

/// Whether this CPU has PREFETCHW (CPUID 8000_0001h ECX bit 8, "prfchw"
/// or "3dnowprefetch"), asked once; see [`prefetch_for_write`].
pub fn has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            let top = std::arch::x86_64::__cpuid(0x8000_0000).eax;
            top >= 0x8000_0001 && std::arch::x86_64::__cpuid(0x8000_0001).ecx & (1 << 8) != 0
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Asks the CPU to start loading the cache line `off` bytes into `bytes`
/// for writing, for the in-place converter, which reads and rewrites lines
/// of a ring block the kernel filled from another CPU (every line when
/// packets are short, the few around each header when they are long).
/// `owned` ([`has_prefetchw`]): PREFETCHW, which asks for the line owned;
/// otherwise a plain read prefetch (`_mm_prefetch::<_MM_HINT_ET0>` is
/// one unless the build enables `prfchw`; a line read that way comes
/// shared, and the stores that follow wait for the other CPU to give it
/// up). A hint: it never faults and changes nothing, so `off` is not
/// checked (the address is computed, never dereferenced).
#[inline(always)]
pub fn prefetch_for_write(bytes: &[u8], off: usize, owned: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = bytes.as_ptr().wrapping_add(off);
        if owned {
            // SAFETY: the caller checked that the CPU has PREFETCHW
            // (has_prefetchw). A prefetch never faults and writes nothing,
            // whatever the address; it uses no register but its operand,
            // and no flags.
            unsafe {
                std::arch::asm!(
                    "prefetchw [{0}]",
                    in(reg) p,
                    options(nostack, preserves_flags, readonly)
                )
            }
        } else {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: prefetch instructions never fault, whatever the
            // address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, off, owned);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    /// `ret #k`.
    fn ret(k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k,
        }
    }

    #[test]
    fn sock_opt_values_have_no_padding() {
        use std::mem::size_of;
        let c_int = size_of::<libc::c_int>();
        let c_uint = size_of::<libc::c_uint>();
        assert_eq!(size_of::<libc::packet_mreq>(), c_int + 2 + 2 + 8);
        assert_eq!(size_of::<libc::tpacket_req3>(), 7 * c_uint);
        assert_eq!(size_of::<libc::tpacket_stats>(), 2 * c_uint);
        assert_eq!(size_of::<libc::tpacket_stats_v3>(), 3 * c_uint);
    }

    #[test]
    fn attach_filter_attaches_and_refuses_overlong_programs() {
        let (a, b) = UnixDatagram::pair().unwrap();
        // A socket filter works on any socket: reject everything.
        attach_filter(&b, &[ret(0)]).unwrap();
        a.send(b"x").unwrap();
        b.set_nonblocking(true).unwrap();
        assert!(b.recv(&mut [0u8; 4]).is_err(), "the filter did not apply");
        // 65537 instructions do not fit the 16-bit length: refused, not cut
        // to the 1 instruction a truncated length would say.
        let (_, c) = UnixDatagram::pair().unwrap();
        let long = vec![ret(0); 65_537];
        let e = attach_filter(&c, &long).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let e = attach_filter(&c, &long[..65_536]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }

    #[test]
    fn getsockopt_checks_the_size_the_kernel_returns() {
        let s = UnixDatagram::unbound().unwrap();
        setsockopt(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, &(64 << 10)).unwrap();
        let n: libc::c_int = getsockopt(&s, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap();
        assert!(n >= 64 << 10, "{n}");
        // SO_RCVBUF is an int: reading it as a 12-byte struct is an error, not
        // a value with 8 bytes of zeros.
        let e = getsockopt::<libc::tpacket_stats_v3>(&s, libc::SOL_SOCKET, libc::SO_RCVBUF)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }
}
