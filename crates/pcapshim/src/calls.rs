//! The exported calls on an activated handle: filters, reading, counters,
//! injection, closing, the descriptive getters, and the file functions that
//! libpcap answers on the handle's shadow.

use crate::ffi::{self, real, BpfInsn, BpfProgram, Handler, Opaque, PktHdr};
use crate::live::{Live, NoPacket};
use crate::{ours, text, with, Busy};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;

type Int1 = unsafe extern "C" fn(Opaque) -> c_int;

/// libpcap's one-argument int function `real` on a handle not ours.
fn forward1(p: Opaque, real: Option<Int1>) -> c_int {
    // SAFETY: `p` is not ours: libpcap's handle to libpcap's own function.
    real.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p) })
}

/// `pcap_compile`: libpcap compiles on the shadow (so the program is
/// exactly libpcap's); the text is kept for `pcap_setfilter`, which sends
/// text to ringcapd.
///
/// # Safety
/// As libpcap's: `fp` writable, `s` NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn pcap_compile(
    p: Opaque,
    fp: *mut BpfProgram,
    s: *const c_char,
    optimize: c_int,
    netmask: u32,
) -> c_int {
    type F = unsafe extern "C" fn(Opaque, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
    let f = real!(pcap_compile: F);
    with(
        p,
        ffi::PCAP_ERROR,
        || {
            f.map_or(ffi::PCAP_ERROR, |f| {
                // SAFETY: not ours: libpcap's handle and the caller's arguments.
                unsafe { f(p, fp, s, optimize, netmask) }
            })
        },
        |b| {
            let shadow = b.shadow();
            if shadow.is_null() {
                b.fail("not-yet-activated pcap_t passed to pcap_compile");
                return ffi::PCAP_ERROR;
            }
            let Some(f) = f else {
                b.fail("ringcap: the system's libpcap is not loaded");
                return ffi::PCAP_ERROR;
            };
            // SAFETY: libpcap's pcap_compile on libpcap's (shadow) handle.
            let r = unsafe { f(shadow, fp, s, optimize, netmask) };
            if r < 0 {
                copy_error(b, shadow);
                return r;
            }
            // SAFETY: libpcap just filled `fp` with bf_len instructions.
            let insns = unsafe { program(fp) };
            // SAFETY: the caller's contract on `s`.
            let t = unsafe { text(s) };
            b.live().remember(insns, t);
            r
        },
    )
}

/// The instructions of `fp`.
///
/// # Safety
/// `fp` is NULL or a program whose `bf_insns` holds `bf_len` instructions.
unsafe fn program(fp: *const BpfProgram) -> Vec<BpfInsn> {
    if fp.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    let (len, insns) = unsafe { ((*fp).bf_len as usize, (*fp).bf_insns) };
    if insns.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's contract: `len` instructions at `insns`.
    unsafe { std::slice::from_raw_parts(insns, len) }.to_vec()
}

/// libpcap's error on `shadow` into our handle's buffer.
fn copy_error(b: &mut impl crate::Fails, shadow: Opaque) {
    if let Some(g) = real!(pcap_geterr: unsafe extern "C" fn(Opaque) -> *mut c_char) {
        // SAFETY: libpcap's pcap_geterr on its own handle returns its
        // NUL-terminated error buffer.
        let msg = unsafe { text(g(shadow)) };
        b.fail(&msg);
    }
}

/// `pcap_setfilter`: the program (as `pcap_compile` made it on this
/// handle, with its text for the daemon's log) goes to ringcapd, which ANDs
/// it with the grant's filter.
///
/// # Safety
/// `fp` is a program (from `pcap_compile` for our handles).
#[no_mangle]
pub unsafe extern "C" fn pcap_setfilter(p: Opaque, fp: *mut BpfProgram) -> c_int {
    let f = real!(pcap_setfilter: unsafe extern "C" fn(Opaque, *mut BpfProgram) -> c_int);
    with(
        p,
        ffi::PCAP_ERROR,
        // SAFETY: not ours: libpcap's handle and program.
        || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, fp) }),
        |b| {
            // SAFETY: the caller's contract on `fp`.
            let insns = unsafe { program(fp) };
            let Some(t) = b.live().text_of(&insns) else {
                b.fail(
                    "ringcap: ringcapd takes filters as text: set a program made by \
                     pcap_compile on this handle",
                );
                return ffi::PCAP_ERROR;
            };
            match b.live().set_filter(&t, &insns) {
                Ok(()) => 0,
                Err(e) => {
                    b.fail(&e);
                    ffi::PCAP_ERROR
                }
            }
        },
    )
}

// ---------------------------------------------------------------------------
// Reading

/// Reads for `pcap_dispatch` / `pcap_loop`: up to `cnt` (<= 0: all there
/// is) packets to `cb`; -2 on a break, -1 at the end (message set).
fn read(b: &mut Busy, cnt: c_int, cb: Handler, user: *mut u8) -> c_int {
    let Some(cb) = cb else {
        b.fail("pcap_dispatch: no callback");
        return ffi::PCAP_ERROR;
    };
    let brk = &b.h.brk;
    if brk.swap(false, Ordering::Relaxed) {
        return ffi::PCAP_ERROR_BREAK;
    }
    let max = usize::try_from(cnt).unwrap_or(0);
    // SAFETY: `cb` is the tool's pcap_handler; the header and the data
    // (caplen bytes in the batch buffer) are valid during the call.
    let r = unsafe_dispatch(b.live_and_brk(), max, cb, user);
    match r {
        Ok(n) => {
            if n == 0 && b.h.brk.swap(false, Ordering::Relaxed) {
                return ffi::PCAP_ERROR_BREAK;
            }
            n as c_int
        }
        Err(NoPacket::Empty) => 0,
        Err(NoPacket::Over(msg)) => {
            b.fail(&msg);
            ffi::PCAP_ERROR
        }
    }
}

impl Busy<'_> {
    fn live_and_brk(&mut self) -> (&mut Live, &std::sync::atomic::AtomicBool) {
        let h = self.h;
        (self.live(), &h.brk)
    }
}

fn unsafe_dispatch(
    (live, brk): (&mut Live, &std::sync::atomic::AtomicBool),
    max: usize,
    cb: unsafe extern "C" fn(*mut u8, *const PktHdr, *const u8),
    user: *mut u8,
) -> Result<usize, NoPacket> {
    live.dispatch(max, brk, |h, data| {
        // SAFETY: the tool's callback with its own `user`, a header and
        // `h.caplen` bytes at `data` that stay valid during the call.
        unsafe { cb(user, h, data) }
    })
}

/// `pcap_dispatch`.
///
/// # Safety
/// As libpcap's.
#[no_mangle]
pub unsafe extern "C" fn pcap_dispatch(p: Opaque, cnt: c_int, cb: Handler, user: *mut u8) -> c_int {
    type F = unsafe extern "C" fn(Opaque, c_int, Handler, *mut u8) -> c_int;
    let f = real!(pcap_dispatch: F);
    // SAFETY: not ours: to libpcap with the caller's arguments.
    let other = || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, cnt, cb, user) });
    with(p, ffi::PCAP_ERROR, other, |b| read(b, cnt, cb, user))
}

/// `pcap_loop`: reads until `cnt` packets (<= 0: forever), a break or the end.
///
/// # Safety
/// As libpcap's.
#[no_mangle]
pub unsafe extern "C" fn pcap_loop(p: Opaque, cnt: c_int, cb: Handler, user: *mut u8) -> c_int {
    type F = unsafe extern "C" fn(Opaque, c_int, Handler, *mut u8) -> c_int;
    let f = real!(pcap_loop: F);
    // SAFETY: not ours: to libpcap with the caller's arguments.
    let other = || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, cnt, cb, user) });
    with(p, ffi::PCAP_ERROR, other, |b| {
        let mut done: c_int = 0;
        loop {
            let want = if cnt > 0 { cnt - done } else { 0 };
            let n = read(b, want, cb, user);
            if n < 0 {
                return n;
            }
            done = done.saturating_add(n);
            if cnt > 0 && done >= cnt {
                return 0;
            }
            if b.h.brk.swap(false, Ordering::Relaxed) {
                return ffi::PCAP_ERROR_BREAK;
            }
        }
    })
}

/// `pcap_next_ex`: 1 with a packet, 0 on timeout (or non-blocking and
/// nothing), -2 after a break, -1 at the end.
///
/// # Safety
/// As libpcap's: `hdr` and `data` writable.
#[no_mangle]
pub unsafe extern "C" fn pcap_next_ex(
    p: Opaque,
    hdr: *mut *mut PktHdr,
    data: *mut *const u8,
) -> c_int {
    type F = unsafe extern "C" fn(Opaque, *mut *mut PktHdr, *mut *const u8) -> c_int;
    let f = real!(pcap_next_ex: F);
    // SAFETY: not ours: to libpcap with the caller's arguments.
    let other = || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, hdr, data) });
    with(p, ffi::PCAP_ERROR, other, |b| {
        if b.h.brk.swap(false, Ordering::Relaxed) {
            return ffi::PCAP_ERROR_BREAK;
        }
        let (live, brk) = b.live_and_brk();
        match live.next(brk) {
            Ok(Some(d)) => {
                if !hdr.is_null() && !data.is_null() {
                    // SAFETY: the caller gives writable pointers; the header
                    // lives in the handle and the data in its batch buffer
                    // until the next read, as libpcap promises.
                    unsafe {
                        *hdr = &mut live.hdr;
                        *data = d;
                    }
                }
                1
            }
            Ok(None) => {
                if b.h.brk.swap(false, Ordering::Relaxed) {
                    ffi::PCAP_ERROR_BREAK
                } else {
                    0
                }
            }
            Err(NoPacket::Empty) => 0,
            Err(NoPacket::Over(msg)) => {
                b.fail(&msg);
                ffi::PCAP_ERROR
            }
        }
    })
}

/// `pcap_next`.
///
/// # Safety
/// As libpcap's: `h` writable.
#[no_mangle]
pub unsafe extern "C" fn pcap_next(p: Opaque, h: *mut PktHdr) -> *const u8 {
    if ours(p).is_none() {
        type F = unsafe extern "C" fn(Opaque, *mut PktHdr) -> *const u8;
        // SAFETY: not ours: to libpcap with the caller's arguments.
        return real!(pcap_next: F).map_or(std::ptr::null(), |f| unsafe { f(p, h) });
    }
    let mut hp: *mut PktHdr = std::ptr::null_mut();
    let mut d: *const u8 = std::ptr::null();
    // SAFETY: our handle; the out-pointers are locals.
    if unsafe { pcap_next_ex(p, &mut hp, &mut d) } != 1 || h.is_null() {
        return std::ptr::null();
    }
    // SAFETY: `hp` points at the handle's header (set just above); `h` is
    // the caller's writable header.
    unsafe { *h = *hp };
    d
}

/// `pcap_breakloop`: only sets a flag (safe from a signal handler).
///
/// # Safety
/// `p` is a handle.
#[no_mangle]
pub unsafe extern "C" fn pcap_breakloop(p: Opaque) {
    match ours(p) {
        Some(h) => h.brk.store(true, Ordering::Relaxed),
        None => {
            if let Some(f) = real!(pcap_breakloop: unsafe extern "C" fn(Opaque)) {
                // SAFETY: not ours: libpcap's handle to libpcap.
                unsafe { f(p) }
            }
        }
    }
}

/// `pcap_get_selectable_fd`: an eventfd readable while packets wait.
///
/// # Safety
/// `p` is a handle.
#[no_mangle]
pub unsafe extern "C" fn pcap_get_selectable_fd(p: Opaque) -> c_int {
    let f = real!(pcap_get_selectable_fd: Int1);
    with(p, -1, || forward1(p, f), |b| b.live().selectable_fd())
}

/// `pcap_fileno`: the same descriptor.
///
/// # Safety
/// `p` is a handle.
#[no_mangle]
pub unsafe extern "C" fn pcap_fileno(p: Opaque) -> c_int {
    let f = real!(pcap_fileno: Int1);
    with(p, -1, || forward1(p, f), |b| b.live().selectable_fd())
}

/// `pcap_get_required_select_timeout`: none needed for ours.
///
/// # Safety
/// `p` is a handle.
#[no_mangle]
pub unsafe extern "C" fn pcap_get_required_select_timeout(p: Opaque) -> *const c_void {
    if ours(p).is_some() {
        return std::ptr::null();
    }
    type F = unsafe extern "C" fn(Opaque) -> *const c_void;
    // SAFETY: not ours: libpcap's handle to libpcap.
    real!(pcap_get_required_select_timeout: F).map_or(std::ptr::null(), |f| unsafe { f(p) })
}

mod more;
pub use more::*;
