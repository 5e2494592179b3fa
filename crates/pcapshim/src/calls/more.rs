//! The rest of the calls on a handle: blocking mode, counters, injection,
//! errors, closing, what the handle is (link type, snap length, precision),
//! and libpcap's file functions, answered on the shadow.

use super::{forward1, Int1};
use crate::ffi::{self, real, Opaque, Stat};
use crate::{ours, registry, text, with, with_nested, Fails, Handle, Nested};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;

/// `pcap_setnonblock`.
///
/// # Safety
/// `errbuf` is NULL or PCAP_ERRBUF_SIZE bytes.
#[no_mangle]
pub unsafe extern "C" fn pcap_setnonblock(
    p: Opaque,
    nonblock: c_int,
    errbuf: *mut c_char,
) -> c_int {
    type F = unsafe extern "C" fn(Opaque, c_int, *mut c_char) -> c_int;
    let f = real!(pcap_setnonblock: F);
    // SAFETY: not ours: to libpcap with the caller's arguments.
    let other = || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, nonblock, errbuf) });
    with(p, ffi::PCAP_ERROR, other, |b| {
        b.live().nonblock = nonblock != 0;
        0
    })
}

/// `pcap_getnonblock`.
///
/// # Safety
/// `errbuf` is NULL or PCAP_ERRBUF_SIZE bytes.
#[no_mangle]
pub unsafe extern "C" fn pcap_getnonblock(p: Opaque, errbuf: *mut c_char) -> c_int {
    type F = unsafe extern "C" fn(Opaque, *mut c_char) -> c_int;
    let f = real!(pcap_getnonblock: F);
    // SAFETY: not ours: to libpcap with the caller's arguments.
    let other = || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, errbuf) });
    with(p, ffi::PCAP_ERROR, other, |b| {
        c_int::from(b.live().nonblock)
    })
}

/// `pcap_stats`: what ringcapd counted for the session.
///
/// # Safety
/// `ps` is writable.
#[no_mangle]
pub unsafe extern "C" fn pcap_stats(p: Opaque, ps: *mut Stat) -> c_int {
    // Looked up only for libpcap's handles: a first call from a signal
    // handler on ours must not enter the dynamic linker.
    let other = || {
        let f = real!(pcap_stats: unsafe extern "C" fn(Opaque, *mut Stat) -> c_int);
        // SAFETY: not ours: to libpcap with the caller's arguments.
        f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, ps) })
    };
    let put = |s: Stat| {
        if !ps.is_null() {
            // SAFETY: the caller's writable pcap_stat.
            unsafe { *ps = s };
        }
        0
    };
    with_nested(
        p,
        ffi::PCAP_ERROR,
        other,
        |b| match b.live().stats() {
            Ok(s) => put(s),
            Err(e) => {
                b.fail(&e);
                ffi::PCAP_ERROR
            }
        },
        // From a signal handler (tcpdump's SIGUSR1) or a callback: the
        // counters as last known (a waiting read refreshes them every second).
        |n| match n.shadow().is_null() {
            true => {
                n.fail("the handle is not activated");
                ffi::PCAP_ERROR
            }
            false => put(n.h.seen.stat()),
        },
    )
}

/// `pcap_inject`: through the grant's inject rights; the bytes sent or -1.
///
/// # Safety
/// `buf` holds `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn pcap_inject(p: Opaque, buf: *const c_void, size: usize) -> c_int {
    type F = unsafe extern "C" fn(Opaque, *const c_void, usize) -> c_int;
    let f = real!(pcap_inject: F);
    // SAFETY: not ours: to libpcap with the caller's arguments.
    let other = || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, buf, size) });
    with(p, ffi::PCAP_ERROR, other, |b| {
        if buf.is_null() || size > 262_144 {
            b.fail("pcap_inject: no frame, or one larger than 262144 bytes");
            return ffi::PCAP_ERROR;
        }
        // SAFETY: the caller's contract: `size` readable bytes at `buf`.
        let frame = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size) };
        match b.live().inject(frame) {
            Ok(()) => size as c_int,
            Err(e) => {
                b.fail(&e);
                ffi::PCAP_ERROR
            }
        }
    })
}

/// `pcap_sendpacket`: 0 or -1.
///
/// # Safety
/// `buf` holds `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn pcap_sendpacket(p: Opaque, buf: *const u8, size: c_int) -> c_int {
    if ours(p).is_none() {
        type F = unsafe extern "C" fn(Opaque, *const u8, c_int) -> c_int;
        // SAFETY: not ours: to libpcap with the caller's arguments.
        return real!(pcap_sendpacket: F).map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, buf, size) });
    }
    let Ok(n) = usize::try_from(size) else {
        return ffi::PCAP_ERROR;
    };
    // SAFETY: our handle; the caller's contract on `buf`.
    if unsafe { pcap_inject(p, buf.cast(), n) } < 0 {
        ffi::PCAP_ERROR
    } else {
        0
    }
}

/// `pcap_geterr`: the handle's message buffer.
///
/// # Safety
/// `p` is a handle.
#[no_mangle]
pub unsafe extern "C" fn pcap_geterr(p: Opaque) -> *mut c_char {
    match ours(p) {
        Some(h) => h.errbuf.get().cast::<c_char>(),
        None => {
            type F = unsafe extern "C" fn(Opaque) -> *mut c_char;
            // SAFETY: not ours: libpcap's handle to libpcap.
            real!(pcap_geterr: F).map_or(std::ptr::null_mut(), |f| unsafe { f(p) })
        }
    }
}

/// `pcap_perror`.
///
/// # Safety
/// `prefix` is NULL or a string.
#[no_mangle]
pub unsafe extern "C" fn pcap_perror(p: Opaque, prefix: *const c_char) {
    match ours(p) {
        Some(h) => {
            // SAFETY: the caller's contract; errbuf is NUL-terminated.
            let (pre, msg) = unsafe { (text(prefix), text(h.errbuf.get().cast::<c_char>())) };
            eprintln!("{pre}: {msg}");
        }
        None => {
            type F = unsafe extern "C" fn(Opaque, *const c_char);
            if let Some(f) = real!(pcap_perror: F) {
                // SAFETY: not ours: libpcap's handle to libpcap.
                unsafe { f(p, prefix) }
            }
        }
    }
}

/// `pcap_close`: ends the session (the daemon's final counters are taken),
/// frees the shadow and the handle.
///
/// # Safety
/// `p` is a handle not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn pcap_close(p: Opaque) {
    let Some(h) = ours(p) else {
        if let Some(f) = real!(pcap_close: unsafe extern "C" fn(Opaque)) {
            // SAFETY: not ours: libpcap's handle to libpcap.
            unsafe { f(p) }
        }
        return;
    };
    // A call still running (a callback closing its own handle) keeps it.
    if h.busy
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    registry::remove(p as usize);
    let shadow = h.shadow.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !shadow.is_null() {
        if let Some(f) = real!(pcap_close: unsafe extern "C" fn(Opaque)) {
            // SAFETY: the shadow is libpcap's handle, made by it, closed once.
            unsafe { f(shadow) }
        }
    }
    // SAFETY: `p` came from Box::into_raw in pcap_create, is out of the
    // registry and held busy by us: nothing else reaches it now.
    let boxed = unsafe { Box::from_raw(p.cast::<Handle>()) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(boxed)));
}

/// A getter that libpcap answers with `real` on theirs and `mine` on
/// ours; `nested` answers a nested call (from what lives outside the
/// session).
fn getter(
    p: Opaque,
    real: impl FnOnce() -> Option<Int1>,
    mine: impl FnOnce(&mut crate::Busy) -> c_int,
    nested: impl FnOnce(&mut Nested) -> c_int,
) -> c_int {
    // `real` is looked up only for libpcap's handles (not in a signal
    // handler's call on ours).
    with_nested(p, ffi::PCAP_ERROR, || forward1(p, real()), mine, nested)
}

macro_rules! getters {
    ($($name:ident => |$b:ident| $body:expr, nested |$n:ident| $nbody:expr;)*) => {$(
        /// libpcap's function of the same name.
        ///
        /// # Safety
        /// `p` is a handle.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: Opaque) -> c_int {
            getter(p, || real!($name: Int1), |$b| $body, |$n| $nbody)
        }
    )*};
}

/// For a nested getter: `v` once activated (a nested call is always made
/// on an activated handle, from a read; but a signal may come earlier).
fn nested_activated(n: &mut Nested, v: c_int) -> c_int {
    match n.shadow().is_null() {
        true => ffi::PCAP_ERROR_NOT_ACTIVATED,
        false => v,
    }
}

/// PCAP_ERROR_NOT_ACTIVATED unless `b` is activated, else `v`.
fn activated(b: &mut crate::Busy, v: c_int) -> c_int {
    if b.live().running.is_none() {
        return ffi::PCAP_ERROR_NOT_ACTIVATED;
    }
    v
}

getters! {
    pcap_datalink => |b| activated(b, ffi::DLT_EN10MB),
        nested |n| nested_activated(n, ffi::DLT_EN10MB);
    pcap_datalink_ext => |b| activated(b, ffi::DLT_EN10MB),
        nested |n| nested_activated(n, ffi::DLT_EN10MB);
    pcap_snapshot => |b| {
        let s = b.live().running.as_ref().map(|r| r.snaplen as c_int);
        s.unwrap_or(ffi::PCAP_ERROR_NOT_ACTIVATED)
    }, nested |n| {
        let s = n.h.seen.snaplen.load(Ordering::Acquire);
        nested_activated(n, s)
    };
    pcap_is_swapped => |b| activated(b, 0), nested |n| nested_activated(n, 0);
    // A live handle has no file version (libpcap's are 0 too).
    pcap_major_version => |b| activated(b, 0), nested |n| nested_activated(n, 0);
    pcap_minor_version => |b| activated(b, 0), nested |n| nested_activated(n, 0);
    pcap_bufsize => |b| {
        let n = b.live().config.buffer_size;
        activated(b, n)
    }, nested |n| {
        n.fail("pcap_bufsize: not from a callback or signal handler (libringcap_pcap)");
        ffi::PCAP_ERROR
    };
    pcap_get_tstamp_precision => |b| {
        if b.live().config.nano { ffi::PRECISION_NANO } else { ffi::PRECISION_MICRO }
    }, nested |n| {
        let nano = n.h.seen.nano.load(Ordering::Acquire);
        nested_activated(n, if nano { ffi::PRECISION_NANO } else { ffi::PRECISION_MICRO })
    };
}

/// `pcap_file`: none (a live capture).
///
/// # Safety
/// `p` is a handle.
#[no_mangle]
pub unsafe extern "C" fn pcap_file(p: Opaque) -> *mut c_void {
    if ours(p).is_some() {
        return std::ptr::null_mut();
    }
    // SAFETY: not ours: libpcap's handle to libpcap.
    real!(pcap_file: unsafe extern "C" fn(Opaque) -> *mut c_void)
        .map_or(std::ptr::null_mut(), |f| unsafe { f(p) })
}

/// A one-element `int` list from malloc (libpcap's free functions call free()).
fn int_list(out: *mut *mut c_int, v: Option<c_int>) -> c_int {
    let Some(v) = v else {
        if !out.is_null() {
            // SAFETY: the caller's writable out-pointer.
            unsafe { *out = std::ptr::null_mut() };
        }
        return 0;
    };
    // SAFETY: malloc has no preconditions.
    let list = unsafe { libc::malloc(std::mem::size_of::<c_int>()) }.cast::<c_int>();
    if list.is_null() || out.is_null() {
        // SAFETY: NULL or the block just allocated.
        unsafe { libc::free(list.cast()) };
        return ffi::PCAP_ERROR;
    }
    // SAFETY: `list` holds one int; `out` is the caller's writable pointer.
    unsafe {
        *list = v;
        *out = list;
    }
    1
}

/// `pcap_list_datalinks`: Ethernet only.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn pcap_list_datalinks(p: Opaque, out: *mut *mut c_int) -> c_int {
    type F = unsafe extern "C" fn(Opaque, *mut *mut c_int) -> c_int;
    let f = real!(pcap_list_datalinks: F);
    // SAFETY: not ours: to libpcap with the caller's arguments.
    let other = || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, out) });
    with(p, ffi::PCAP_ERROR, other, |b| match activated(b, 0) {
        0 => int_list(out, Some(ffi::DLT_EN10MB)),
        e => e,
    })
}

/// `pcap_list_tstamp_types`: the host's clock (ringcapd's), the one type.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn pcap_list_tstamp_types(p: Opaque, out: *mut *mut c_int) -> c_int {
    type F = unsafe extern "C" fn(Opaque, *mut *mut c_int) -> c_int;
    let f = real!(pcap_list_tstamp_types: F);
    // SAFETY: not ours: to libpcap with the caller's arguments.
    let other = || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, out) });
    with(p, ffi::PCAP_ERROR, other, |_| {
        int_list(out, Some(ffi::PCAP_TSTAMP_HOST))
    })
}

/// Two-argument int calls: `pcap_set_datalink` (Ethernet only) and
/// `pcap_setdirection` (both directions only).
macro_rules! int2 {
    ($($name:ident => |$b:ident, $v:ident| $body:expr;)*) => {$(
        /// libpcap's function of the same name.
        ///
        /// # Safety
        /// `p` is a handle.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: Opaque, v: c_int) -> c_int {
            let f = real!($name: unsafe extern "C" fn(Opaque, c_int) -> c_int);
            // SAFETY: not ours: to libpcap with the caller's arguments.
            let other = || f.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p, v) });
            with(p, ffi::PCAP_ERROR, other, |$b| { let $v = v; $body })
        }
    )*};
}

int2! {
    pcap_set_datalink => |b, v| if v == ffi::DLT_EN10MB { 0 } else {
        b.fail("ringcapd delivers Ethernet frames (DLT_EN10MB) only");
        ffi::PCAP_ERROR
    };
    pcap_setdirection => |b, v| if v == ffi::PCAP_D_INOUT { 0 } else {
        b.fail("ringcapd delivers both directions: a direction cannot be chosen (pcap_setdirection, tcpdump -Q)");
        ffi::PCAP_ERROR
    };
}

/// libpcap's dumper functions on our handle get the shadow.
macro_rules! on_shadow {
    ($($name:ident($arg:ident: $ty:ty);)*) => {$(
        /// libpcap's function of the same name (on the shadow for our handles).
        ///
        /// # Safety
        /// As libpcap's.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: Opaque, $arg: $ty) -> Opaque {
            type F = unsafe extern "C" fn(Opaque, $ty) -> Opaque;
            let f = real!($name: F);
            // SAFETY: not ours: to libpcap with the caller's arguments.
            let other = || f.map_or(std::ptr::null_mut(), |f| unsafe { f(p, $arg) });
            // Nested too: tcpdump opens its next file from its packet
            // callback (-C, -G).
            with_nested(
                p,
                std::ptr::null_mut(),
                other,
                |b| {
                    let s = b.shadow();
                    // SAFETY: libpcap's function on its own (shadow)
                    // handle with the caller's argument.
                    on_shadow(b, s, f, |f, s| unsafe { f(s, $arg) })
                },
                |n| {
                    let s = n.shadow();
                    // SAFETY: as above.
                    on_shadow(n, s, f, |f, s| unsafe { f(s, $arg) })
                },
            )
        }
    )*};
}

/// libpcap's `f` on the shadow (through `call`), its error copied to ours.
fn on_shadow<F>(
    who: &mut impl crate::Fails,
    shadow: Opaque,
    f: Option<F>,
    call: impl FnOnce(F, Opaque) -> Opaque,
) -> Opaque {
    let Some(f) = f.filter(|_| !shadow.is_null()) else {
        who.fail("pcap_dump_open: the handle is not activated");
        return std::ptr::null_mut();
    };
    let d = call(f, shadow);
    if d.is_null() {
        super::copy_error(who, shadow);
    }
    d
}

on_shadow! {
    pcap_dump_open(fname: *const c_char);
    pcap_dump_open_append(fname: *const c_char);
    pcap_dump_fopen(fp: *mut c_void);
}
