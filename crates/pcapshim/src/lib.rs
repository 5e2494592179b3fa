//! libringcap_pcap.so: the live-capture part of libpcap's API, served by
//! ringcapd, for unmodified libpcap tools. Preloaded (`ringcap run -- TOOL`
//! or `LD_PRELOAD=.../libringcap_pcap.so TOOL`), it answers libpcap's
//! live-capture calls; the tool still links the system's libpcap, which
//! answers everything else (files, dumpers, `pcap_open_dead`, offline
//! filters, name tables, `pcap_findalldevs`): those symbols are not
//! defined here, so the dynamic linker finds libpcap's.
//!
//! A live handle of this library is a pointer the real libpcap never sees:
//! a `Handle` in the registry. Every exported function that takes a
//! `pcap_t *` asks the registry first; a pointer that is not ours (an
//! offline or dead handle) goes to libpcap's function of the same name
//! (`dlsym(RTLD_NEXT)`). Calls on our handle that libpcap must answer with
//! a real `pcap_t` (`pcap_dump_open`, `pcap_compile`) get the handle's
//! *shadow*: a dead libpcap handle with the session's link type, capped
//! snap length and timestamp precision, so a file a tool writes has the
//! header libpcap would have written.
//!
//! `pcap_findalldevs` is libpcap's list cut down to the interfaces ringcapd
//! admits the user on (`devs`); an open on an interface no grant covers is
//! refused by the daemon, with the rule, as `PCAP_ERROR_PERM_DENIED`.
//!
//! The rules of the C boundary: no panic crosses it (each entry point runs
//! under `catch_unwind`); one call at a time on a handle's session. A call
//! made while another runs on the same handle *from the same thread* (a
//! packet callback, a signal handler interrupting a read: tcpdump opens its
//! next file from the callback at `-C`/`-G` rotations and reads its counters
//! from SIGUSR1) is nested: the outer call is suspended, so what lives
//! outside the session (the shadow, the facts and counters in [`Seen`], the
//! message buffer) answers it — the dumper opens, the getters,
//! `pcap_stats`, `pcap_breakloop`, `pcap_geterr`; any other nested call
//! fails with -1 and says why. A call from another thread while one runs
//! fails with -1 (libpcap's handles are not shared between threads either).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod devs;
mod dl;
mod ffi;
mod live;
mod registry;

use ffi::{real, Opaque};
use live::{describe, Live};
use ringcap_client::ClientError;
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::Arc;

/// A live handle of this library (what its `pcap_t *` points to).
pub struct Handle {
    /// Set while a call runs on the handle: the only way to `live`.
    busy: AtomicBool,
    /// The thread ([`me`]) whose call holds `busy` (0: none).
    owner: AtomicUsize,
    /// What a nested call may read (see the module docs).
    seen: Arc<Seen>,
    /// `pcap_breakloop`.
    brk: AtomicBool,
    errbuf: UnsafeCell<[c_char; ffi::ERRBUF_SIZE]>,
    /// libpcap's dead handle standing in for this one (after activation).
    shadow: AtomicPtr<c_void>,
    live: UnsafeCell<Live>,
}

/// Facts and counters of a handle kept outside its session, for nested
/// calls: set at activation, and by the reads and `pcap_stats`.
#[derive(Debug, Default)]
pub struct Seen {
    /// Snap length after the grant's cap (0 before activation).
    pub snaplen: AtomicI32,
    /// Nanosecond time stamps (set at activation).
    pub nano: AtomicBool,
    /// The daemon's accepted and dropped counts, as last known.
    pub recv: AtomicU32,
    pub drop: AtomicU32,
    /// Packets handed to the tool (a floor for received: the daemon's
    /// counters can trail what it already delivered).
    pub handed: AtomicU64,
}

impl Seen {
    /// `pcap_stats` from what is known here.
    pub fn stat(&self) -> ffi::Stat {
        let handed = self.handed.load(Ordering::Relaxed) as u32; // 32-bit, wraps
        ffi::Stat {
            ps_recv: self.recv.load(Ordering::Relaxed).max(handed),
            ps_drop: self.drop.load(Ordering::Relaxed),
            ps_ifdrop: 0,
        }
    }
}

/// This thread's mark: the address of a thread-local (no system call, and
/// readable from a signal handler: const-initialised, nothing to drop).
fn me() -> usize {
    thread_local! { static MARK: u8 = const { 0 }; }
    MARK.with(|m| m as *const u8 as usize)
}

/// A call nested in another on the same handle and thread (see the module
/// docs): it reaches only what lives outside the session.
pub(crate) struct Nested<'a> {
    pub(crate) h: &'a Handle,
}

impl Nested<'_> {
    pub(crate) fn shadow(&self) -> Opaque {
        self.h.shadow.load(Ordering::Acquire)
    }
}

/// What a failing call on a handle says about itself.
pub(crate) trait Fails {
    fn fail(&mut self, msg: &str);
}

impl Fails for Busy<'_> {
    fn fail(&mut self, msg: &str) {
        Busy::fail(self, msg)
    }
}

impl Fails for Nested<'_> {
    fn fail(&mut self, msg: &str) {
        // SAFETY: errbuf is ERRBUF_SIZE bytes inside the handle; the only
        // other writer, the outer call on this thread, is suspended.
        unsafe { ffi::write_errbuf(self.h.errbuf.get().cast::<c_char>(), msg) }
    }
}

// SAFETY: `live` is reached only through `Busy` (one caller at a time,
// enforced by `busy`); `errbuf` is written only by the caller holding
// `busy`, by a call nested in it on the same thread while it is suspended
// (`Nested`), or by the creator before the handle is shared, and read by
// libpcap-style callers after the failing call returned; `seen` and
// `shadow` are atomics.
unsafe impl Sync for Handle {}

/// Exclusive access to a handle for the duration of one call.
struct Busy<'a> {
    h: &'a Handle,
}

impl Busy<'_> {
    fn live(&mut self) -> &mut Live {
        // SAFETY: `busy` is held by this guard (set with compare_exchange in
        // `enter`), so no other reference to `live` exists; the handle
        // outlives the call (it is freed only by pcap_close, which holds
        // `busy` itself).
        unsafe { &mut *self.h.live.get() }
    }

    fn fail(&mut self, msg: &str) {
        // SAFETY: errbuf is ERRBUF_SIZE bytes inside the handle, and this
        // guard holds `busy`: nobody else writes it now.
        unsafe { ffi::write_errbuf(self.h.errbuf.get().cast::<c_char>(), msg) }
    }

    fn shadow(&self) -> Opaque {
        self.h.shadow.load(Ordering::Acquire)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.h.owner.store(0, Ordering::Release);
        self.h.busy.store(false, Ordering::Release);
    }
}

/// The handle behind `p` if this library made it.
fn ours(p: Opaque) -> Option<&'static Handle> {
    if !registry::contains(p as usize) {
        return None;
    }
    // SAFETY: registered addresses come from Box::into_raw in pcap_create
    // and leave the registry before pcap_close frees them.
    Some(unsafe { &*(p as *const Handle) })
}

/// One call at a time: `None` if a call is already running on `h`.
fn enter(h: &Handle) -> Option<Busy<'_>> {
    h.busy
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
        .ok()
        .map(|_| {
            h.owner.store(me(), Ordering::Release);
            Busy { h }
        })
}

/// A nested call on `h` (see the module docs), if this is one.
fn nested(h: &Handle) -> Option<Nested<'_>> {
    (h.busy.load(Ordering::Acquire) && h.owner.load(Ordering::Acquire) == me())
        .then_some(Nested { h })
}

/// Runs `f` on our handle `p`, or returns `other` for libpcap's; `-1`
/// (or `err`) for a concurrent or nested call (the latter says so) or a
/// panic.
fn with<T>(p: Opaque, err: T, other: impl FnOnce() -> T, f: impl FnOnce(&mut Busy) -> T) -> T {
    let Some(h) = ours(p) else {
        return other();
    };
    let Some(mut b) = enter(h) else {
        if let Some(mut n) = nested(h) {
            n.fail(
                "ringcap: this call cannot be made from a packet callback or a signal \
                 handler of a read on the same handle (libringcap_pcap)",
            );
        }
        return err;
    };
    guarded(&mut b, err, f)
}

/// [`with`], with `n` answering a nested call.
pub(crate) fn with_nested<T>(
    p: Opaque,
    err: T,
    other: impl FnOnce() -> T,
    f: impl FnOnce(&mut Busy) -> T,
    n: impl FnOnce(&mut Nested) -> T,
) -> T {
    let Some(h) = ours(p) else {
        return other();
    };
    match enter(h) {
        Some(mut b) => guarded(&mut b, err, f),
        None => match nested(h) {
            Some(mut nest) => catch_unwind(AssertUnwindSafe(|| n(&mut nest))).unwrap_or(err),
            None => err,
        },
    }
}

/// `f` under `catch_unwind`: a panic is `err`, said.
fn guarded<T>(b: &mut Busy, err: T, f: impl FnOnce(&mut Busy) -> T) -> T {
    match catch_unwind(AssertUnwindSafe(|| f(b))) {
        Ok(v) => v,
        Err(_) => {
            b.fail("ringcap: internal error (a bug in libringcap_pcap)");
            err
        }
    }
}

/// The text at `p` (NULL: empty).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

// ---------------------------------------------------------------------------
// Creation and activation

/// `pcap_create`: a handle of this library for `source` (NULL: "any").
///
/// # Safety
/// `source` is NULL or a string; `errbuf` is NULL or PCAP_ERRBUF_SIZE bytes.
#[no_mangle]
pub unsafe extern "C" fn pcap_create(source: *const c_char, errbuf: *mut c_char) -> Opaque {
    // SAFETY: the caller's contract on `source`.
    let dev = unsafe { text(source) };
    let dev = if dev.is_empty() {
        "any".to_string()
    } else {
        dev
    };
    let seen = Arc::new(Seen::default());
    let h = Box::new(Handle {
        busy: AtomicBool::new(false),
        owner: AtomicUsize::new(0),
        seen: seen.clone(),
        brk: AtomicBool::new(false),
        errbuf: UnsafeCell::new([0; ffi::ERRBUF_SIZE]),
        shadow: AtomicPtr::new(std::ptr::null_mut()),
        live: UnsafeCell::new(Live::new(&dev, seen)),
    });
    let p = Box::into_raw(h);
    if !registry::insert(p as usize) {
        // SAFETY: `p` came from Box::into_raw just above and was never shared.
        drop(unsafe { Box::from_raw(p) });
        // SAFETY: the caller's contract on `errbuf`.
        unsafe { ffi::write_errbuf(errbuf, "ringcap: too many open capture handles") };
        return std::ptr::null_mut();
    }
    p.cast()
}

/// Opens the session; the shadow handle for libpcap's file functions.
fn activate(b: &mut Busy) -> c_int {
    if b.live().running.is_some() {
        b.fail("the handle is already activated");
        return ffi::PCAP_ERROR_ACTIVATED;
    }
    let device = b.live().config.device.clone();
    if let Err(e) = b.live().activate() {
        let code = match e {
            ClientError::Refused { .. } => ffi::PCAP_ERROR_PERM_DENIED,
            _ => ffi::PCAP_ERROR,
        };
        let msg = match code {
            ffi::PCAP_ERROR => format!("{device}: {}", describe(&e)),
            _ => describe(&e),
        };
        b.fail(&msg);
        return code;
    }
    let snap = b.live().running.as_ref().map_or(262_144, |r| r.snaplen);
    let precision = if b.live().config.nano {
        ffi::PRECISION_NANO
    } else {
        ffi::PRECISION_MICRO
    };
    let Some(open_dead) = real!(pcap_open_dead_with_tstamp_precision:
        unsafe extern "C" fn(c_int, c_int, c_uint) -> Opaque)
    else {
        b.fail("ringcap: the system's libpcap is not loaded");
        return ffi::PCAP_ERROR;
    };
    // SAFETY: libpcap's pcap_open_dead_with_tstamp_precision(int, int, u_int).
    let shadow = unsafe { open_dead(ffi::DLT_EN10MB, snap as c_int, precision as c_uint) };
    if shadow.is_null() {
        b.fail("ringcap: libpcap could not make a handle for files");
        return ffi::PCAP_ERROR;
    }
    b.h.seen.snaplen.store(snap as i32, Ordering::Release);
    b.h.seen
        .nano
        .store(precision == ffi::PRECISION_NANO, Ordering::Release);
    b.h.shadow.store(shadow, Ordering::Release);
    0
}

/// `pcap_activate`.
///
/// # Safety
/// `p` is a handle from `pcap_create` (or libpcap's).
#[no_mangle]
pub unsafe extern "C" fn pcap_activate(p: Opaque) -> c_int {
    with(
        p,
        ffi::PCAP_ERROR,
        || match real!(pcap_activate: unsafe extern "C" fn(Opaque) -> c_int) {
            // SAFETY: not ours: libpcap's own handle, to libpcap.
            Some(f) => unsafe { f(p) },
            None => ffi::PCAP_ERROR,
        },
        activate,
    )
}

/// `pcap_open_live`: create, set, activate.
///
/// # Safety
/// `device` is NULL or a string; `errbuf` is NULL or PCAP_ERRBUF_SIZE bytes.
#[no_mangle]
pub unsafe extern "C" fn pcap_open_live(
    device: *const c_char,
    snaplen: c_int,
    promisc: c_int,
    to_ms: c_int,
    errbuf: *mut c_char,
) -> Opaque {
    // SAFETY: the caller's contracts, passed on.
    let p = unsafe { pcap_create(device, errbuf) };
    let Some(h) = ours(p) else {
        return std::ptr::null_mut();
    };
    let failed = with(
        p,
        Some("busy".to_string()),
        || None,
        |b| {
            let c = &mut b.live().config;
            c.snaplen = snaplen;
            c.promisc = promisc != 0;
            c.timeout_ms = to_ms;
            let r = activate(b);
            if r < 0 {
                // SAFETY: errbuf is ERRBUF_SIZE bytes inside the handle, NUL-terminated.
                let msg = unsafe { CStr::from_ptr(h.errbuf.get().cast::<c_char>()) };
                let msg = msg.to_string_lossy().into_owned();
                let dev = b.live().config.device.clone();
                Some(if r == ffi::PCAP_ERROR_PERM_DENIED {
                    format!("{dev}: You don't have permission to perform this capture on that device ({msg})")
                } else {
                    msg
                })
            } else {
                None
            }
        },
    );
    match failed {
        None => p,
        Some(msg) => {
            // SAFETY: the caller's contract on `errbuf`.
            unsafe { ffi::write_errbuf(errbuf, &msg) };
            // SAFETY: `p` is ours, made above, used by nobody else.
            unsafe { pcap_close(p) };
            std::ptr::null_mut()
        }
    }
}

/// A setter: `f` on our handle before activation (`PCAP_ERROR_ACTIVATED`
/// after), libpcap's `real` on theirs.
fn setter(
    p: Opaque,
    v: c_int,
    real: Option<unsafe extern "C" fn(Opaque, c_int) -> c_int>,
    f: impl FnOnce(&mut Live, c_int) -> c_int,
) -> c_int {
    with(
        p,
        ffi::PCAP_ERROR,
        || match real {
            // SAFETY: not ours: libpcap's handle to libpcap's setter.
            Some(r) => unsafe { r(p, v) },
            None => ffi::PCAP_ERROR,
        },
        |b| {
            if b.live().running.is_some() {
                b.fail("can't perform  operation on activated capture");
                return ffi::PCAP_ERROR_ACTIVATED;
            }
            f(b.live(), v)
        },
    )
}

type SetFn = unsafe extern "C" fn(Opaque, c_int) -> c_int;

macro_rules! setters {
    ($($name:ident => |$l:ident, $v:ident| $body:expr;)*) => {$(
        /// libpcap's setter of the same name (before activation).
        ///
        /// # Safety
        /// `p` is a handle from `pcap_create` (or libpcap's).
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: Opaque, v: c_int) -> c_int {
            setter(p, v, real!($name: SetFn), |$l: &mut Live, $v: c_int| $body)
        }
    )*};
}

setters! {
    pcap_set_snaplen => |l, v| { l.config.snaplen = v; 0 };
    pcap_set_promisc => |l, v| { l.config.promisc = v != 0; 0 };
    pcap_set_timeout => |l, v| { l.config.timeout_ms = v; 0 };
    pcap_set_immediate_mode => |l, v| { l.config.immediate = v != 0; 0 };
    pcap_set_buffer_size => |l, v| { l.config.buffer_size = v; 0 };
    pcap_set_tstamp_precision => |l, v| match v {
        ffi::PRECISION_MICRO | ffi::PRECISION_NANO => { l.config.nano = v == ffi::PRECISION_NANO; 0 }
        _ => -12, // PCAP_ERROR_TSTAMP_PRECISION_NOTSUP
    };
    pcap_set_tstamp_type => |_l, v| if v == ffi::PCAP_TSTAMP_HOST { 0 } else {
        ffi::PCAP_WARNING_TSTAMP_TYPE_NOTSUP
    };
    pcap_set_rfmon => |_l, v| if v == 0 { 0 } else { -6 }; // PCAP_ERROR_RFMON_NOTSUP
    pcap_set_protocol_linux => |_l, _v| 0;
}

/// `pcap_can_set_rfmon`: never (not a wireless monitor).
///
/// # Safety
/// `p` is a handle from `pcap_create` (or libpcap's).
#[no_mangle]
pub unsafe extern "C" fn pcap_can_set_rfmon(p: Opaque) -> c_int {
    let r = real!(pcap_can_set_rfmon: unsafe extern "C" fn(Opaque) -> c_int);
    // SAFETY: not ours: libpcap's handle to libpcap.
    with(
        p,
        ffi::PCAP_ERROR,
        || r.map_or(ffi::PCAP_ERROR, |f| unsafe { f(p) }),
        |_| 0,
    )
}

mod calls;
pub use calls::*;
