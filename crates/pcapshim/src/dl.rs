//! Programs that load libpcap themselves. scapy (through ctypes) and other
//! interpreters do not link libpcap: they `dlopen("libpcap.so.0.8")` and
//! look every function up on that handle with `dlsym(handle, name)`, which
//! searches only that library and its dependencies — never a preloaded one.
//! So this library answers `dlopen` too: a request for libpcap by any of
//! its names gets a handle to *this* library, whose dependencies include
//! the system's libpcap (it is linked with `-lpcap`, see build.rs). A
//! lookup on that handle finds this library's live-capture functions first
//! and libpcap's for everything else, exactly as for a linked program.
//! Every other `dlopen` goes to the C library unchanged.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;

/// The C library's `dlopen` (the next definition after this library's).
fn next_dlopen() -> Option<DlopenFn> {
    static NEXT: OnceLock<usize> = OnceLock::new();
    let addr = *NEXT.get_or_init(|| {
        // SAFETY: a NUL-terminated literal; RTLD_NEXT is a valid pseudo
        // handle for dlsym.
        unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()) as usize }
    });
    if addr == 0 {
        return None;
    }
    // SAFETY: `addr` is the non-null address of the C library's `dlopen`,
    // whose prototype is DlopenFn.
    Some(unsafe { std::mem::transmute::<usize, DlopenFn>(addr) })
}

/// Whether a `dlopen` argument names libpcap: `libpcap.so`, `libpcap.so.N…`
/// alone or at the end of a path.
fn names_libpcap(name: &[u8]) -> bool {
    let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    base == b"libpcap.so" || base.starts_with(b"libpcap.so.")
}

/// A handle to this library (the file the dynamic linker loaded it from).
fn own_handle(open: DlopenFn) -> *mut c_void {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let here = names_libpcap as *const () as *const c_void;
    // SAFETY: `here` is an address inside this library; `info` is a valid
    // out-parameter.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: dli_fname is the NUL-terminated path of a loaded object (this
    // one): RTLD_NOLOAD only takes another reference to it.
    unsafe { open(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD) }
}

/// `dlopen`: libpcap's names get this library (and, through it, the
/// system's libpcap); anything else is the C library's business.
///
/// # Safety
/// As the C library's `dlopen`: `filename` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
    let Some(open) = next_dlopen() else {
        return std::ptr::null_mut();
    };
    if !filename.is_null() {
        // SAFETY: the caller's contract.
        let name = unsafe { CStr::from_ptr(filename) }.to_bytes();
        if names_libpcap(name) {
            let own = own_handle(open);
            if !own.is_null() {
                return own;
            }
        }
    }
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { open(filename, flags) }
}

#[cfg(test)]
mod tests {
    use super::names_libpcap;

    #[test]
    fn libpcap_names() {
        for yes in [
            &b"libpcap.so"[..],
            b"libpcap.so.0.8",
            b"libpcap.so.1",
            b"/usr/lib/x86_64-linux-gnu/libpcap.so.1.10.3",
        ] {
            assert!(names_libpcap(yes), "{}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"libpcapng.so"[..],
            b"libpcap.a",
            b"/opt/libpcap.so/libc.so.6",
            b"libc.so.6",
            b"",
            b"libwireshark.so.16",
        ] {
            assert!(!names_libpcap(no), "{}", String::from_utf8_lossy(no));
        }
    }
}
