//! libpcap's C types as this library sees them (Linux, 64-bit layouts from
//! `pcap/pcap.h` and `pcap/bpf.h`) and the way to the system's libpcap:
//! `dlsym(RTLD_NEXT, name)` — the library that would have answered had this
//! one not been preloaded.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `PCAP_ERRBUF_SIZE`.
pub const ERRBUF_SIZE: usize = 256;
/// `DLT_EN10MB`: every ringcapd interface delivers Ethernet frames.
pub const DLT_EN10MB: c_int = 1;
/// `PCAP_ERROR`.
pub const PCAP_ERROR: c_int = -1;
/// `PCAP_ERROR_BREAK`.
pub const PCAP_ERROR_BREAK: c_int = -2;
/// `PCAP_ERROR_NOT_ACTIVATED`.
pub const PCAP_ERROR_NOT_ACTIVATED: c_int = -3;
/// `PCAP_ERROR_ACTIVATED`.
pub const PCAP_ERROR_ACTIVATED: c_int = -4;
/// `PCAP_ERROR_PERM_DENIED`: what a policy refusal is reported as.
pub const PCAP_ERROR_PERM_DENIED: c_int = -8;
/// `PCAP_TSTAMP_HOST`: the host's clock, the one type ringcapd gives.
pub const PCAP_TSTAMP_HOST: c_int = 0;
/// `PCAP_WARNING_TSTAMP_TYPE_NOTSUP`.
pub const PCAP_WARNING_TSTAMP_TYPE_NOTSUP: c_int = 3;
/// `PCAP_TSTAMP_PRECISION_MICRO`.
pub const PRECISION_MICRO: c_int = 0;
/// `PCAP_TSTAMP_PRECISION_NANO`.
pub const PRECISION_NANO: c_int = 1;
/// `PCAP_D_INOUT`.
pub const PCAP_D_INOUT: c_int = 0;

/// `struct timeval` (x86_64/aarch64 Linux: two longs).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Timeval {
    pub tv_sec: libc::c_long,
    pub tv_usec: libc::c_long,
}

/// `struct pcap_pkthdr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PktHdr {
    pub ts: Timeval,
    pub caplen: u32,
    pub len: u32,
}

/// `struct pcap_stat` (Linux: no Windows fields).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Stat {
    pub ps_recv: c_uint,
    pub ps_drop: c_uint,
    pub ps_ifdrop: c_uint,
}

/// `struct bpf_insn`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BpfInsn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// `struct bpf_program`.
#[repr(C)]
#[derive(Debug)]
pub struct BpfProgram {
    pub bf_len: c_uint,
    pub bf_insns: *mut BpfInsn,
}

/// `pcap_handler`.
pub type Handler = Option<unsafe extern "C" fn(*mut u8, *const PktHdr, *const u8)>;

/// An opaque `pcap_t *` or `pcap_dumper_t *` of the real libpcap.
pub type Opaque = *mut c_void;

/// The address of the system libpcap's `name` (NUL-terminated), 0 if there
/// is none. libpcap is this library's own dependency (build.rs), so it is
/// always in the search order after this library, also in a program that
/// does not link it.
pub fn lookup(name: &'static str) -> usize {
    debug_assert!(name.ends_with('\0'));
    // SAFETY: `name` is NUL-terminated (above); RTLD_NEXT is a valid pseudo
    // handle for dlsym; dlsym only reads the string.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast::<c_char>()) as usize }
}

/// The system libpcap's function `name` as a value of type `$ty` (an
/// `unsafe extern "C" fn` type that must be the function's real
/// signature), or `None` if there is no such function. Looked up once.
macro_rules! real {
    ($name:ident : $ty:ty) => {{
        static ADDR: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let addr = *ADDR.get_or_init(|| $crate::ffi::lookup(concat!(stringify!($name), "\0")));
        if addr == 0 {
            None
        } else {
            // SAFETY: `addr` is the non-null address of libpcap's exported
            // function of this name, and `$ty` is its C prototype from
            // pcap.h (each use site names the matching type).
            Some(unsafe { std::mem::transmute::<usize, $ty>(addr) })
        }
    }};
}
pub(crate) use real;

/// Writes `msg` into a `PCAP_ERRBUF_SIZE` buffer, truncated, NUL-terminated.
///
/// # Safety
/// `buf` is NULL or points to `ERRBUF_SIZE` writable bytes.
pub unsafe fn write_errbuf(buf: *mut c_char, msg: &str) {
    if buf.is_null() {
        return;
    }
    let bytes = msg.as_bytes();
    let n = bytes.len().min(ERRBUF_SIZE - 1);
    // SAFETY: the caller gives ERRBUF_SIZE writable bytes at `buf`; we write
    // n + 1 <= ERRBUF_SIZE of them, from a slice that does not overlap it.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}
