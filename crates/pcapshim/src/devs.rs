//! `pcap_findalldevs`: libpcap's list of the system's devices, cut down to
//! those ringcapd admits this user on (one probe session per device), so
//! `tcpdump -D` lists what the user can capture on.

use crate::ffi::{self, real};
use crate::live::{admitted, describe};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// `pcap_if_t` (the fields this file reads; libpcap allocates and frees it).
#[repr(C)]
pub struct PcapIf {
    next: *mut PcapIf,
    name: *mut c_char,
    description: *mut c_char,
    addresses: *mut c_void,
    flags: c_uint,
}

type FindAll = unsafe extern "C" fn(*mut *mut PcapIf, *mut c_char) -> c_int;
type FreeAll = unsafe extern "C" fn(*mut PcapIf);

/// `pcap_findalldevs`.
///
/// # Safety
/// `alldevsp` is writable; `errbuf` is NULL or PCAP_ERRBUF_SIZE bytes.
#[no_mangle]
pub unsafe extern "C" fn pcap_findalldevs(
    alldevsp: *mut *mut PcapIf,
    errbuf: *mut c_char,
) -> c_int {
    let (Some(find), Some(free)) = (
        real!(pcap_findalldevs: FindAll),
        real!(pcap_freealldevs: FreeAll),
    ) else {
        // SAFETY: the caller's contract on `errbuf`.
        unsafe { ffi::write_errbuf(errbuf, "ringcap: the system's libpcap is not loaded") };
        return ffi::PCAP_ERROR;
    };
    if alldevsp.is_null() {
        return ffi::PCAP_ERROR;
    }
    // SAFETY: libpcap's own function with the caller's arguments.
    let r = unsafe { find(alldevsp, errbuf) };
    if r != 0 {
        return r;
    }
    // Walk the list through a pointer to each link, unlinking refused nodes.
    let mut link: *mut *mut PcapIf = alldevsp;
    loop {
        // SAFETY: `link` is `alldevsp` or the `next` field of a node
        // libpcap allocated and we kept; both are valid to read.
        let node = unsafe { *link };
        if node.is_null() {
            return 0;
        }
        // SAFETY: `node` is a live node of libpcap's list; its name is a
        // NUL-terminated string (or NULL, then not admitted).
        let name = unsafe { (*node).name };
        let keep = if name.is_null() {
            Ok(false)
        } else {
            // SAFETY: see above.
            admitted(&unsafe { CStr::from_ptr(name) }.to_string_lossy())
        };
        match keep {
            // SAFETY: `node` stays in the list; its `next` field is the next link.
            Ok(true) => link = unsafe { &raw mut (*node).next },
            Ok(false) => {
                // SAFETY: unlink `node`, then hand it alone (next = NULL) to
                // libpcap's free function, which frees exactly that node.
                unsafe {
                    *link = (*node).next;
                    (*node).next = std::ptr::null_mut();
                    free(node);
                }
            }
            Err(e) => {
                // SAFETY: the whole remaining list is libpcap's; the caller
                // gets none of it and an error, as libpcap would.
                unsafe {
                    free(*alldevsp);
                    *alldevsp = std::ptr::null_mut();
                    ffi::write_errbuf(errbuf, &describe(&e));
                }
                return ffi::PCAP_ERROR;
            }
        }
    }
}
