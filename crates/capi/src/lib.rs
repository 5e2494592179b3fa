//! libringcap: a stable C ABI over the Rust client of ringcapd
//! (`ringcap-client`), for tools written in C, C++ or anything with a C FFI
//! (the Python package in `python/` is a ctypes binding over it). The
//! declarations and their documentation are in `include/ringcap.h`; a test
//! checks that header against this file.
//!
//! Rules at the boundary:
//! - every call returns an `int` (or a pointer / count) and reports failures
//!   as a negative `RINGCAP_ERR_*` code plus a message written into a
//!   caller-provided buffer (NUL-terminated, truncated to its size; the
//!   buffer may be NULL);
//! - no panic crosses it: every entry point runs under `catch_unwind` and
//!   turns a panic into `RINGCAP_ERR_INTERNAL`;
//! - a session is used by one thread at a time; a second call on a session
//!   while one is running (from another thread, or from inside a packet
//!   callback) is refused with `RINGCAP_ERR_BUSY`, except
//!   `ringcap_breakloop`, which only sets a flag.

#![allow(non_camel_case_types)]

use ringcap_client::{
    default_socket, Batch, Client, ClientError, DumpRequest, End, EndedBy, InjectFrame,
    InjectReport, InjectStatus, OpenRequest, OutputFormat, Packet, Pump, Sample, Session,
    SessionCounters, Snap, Stop,
};
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Success.
pub const RINGCAP_OK: c_int = 0;
/// A bad argument (NULL where a value is needed, text that is not UTF-8,
/// an option out of range, an options struct of an unknown size).
pub const RINGCAP_ERR_ARG: c_int = -1;
/// The socket or the shared-memory ring failed (also: the daemon cannot be
/// reached, or it closed the connection).
pub const RINGCAP_ERR_IO: c_int = -2;
/// The daemon's policy refused the request.
pub const RINGCAP_ERR_REFUSED: c_int = -3;
/// The daemon answered with an error.
pub const RINGCAP_ERR_DAEMON: c_int = -4;
/// The daemon's answer did not make sense.
pub const RINGCAP_ERR_PROTOCOL: c_int = -5;
/// The session has ended (the call needs a running session).
pub const RINGCAP_ERR_ENDED: c_int = -6;
/// A bug in libringcap (a Rust panic, caught at the boundary).
pub const RINGCAP_ERR_INTERNAL: c_int = -7;
/// The caller's buffer cannot hold the next packet.
pub const RINGCAP_ERR_TOO_SMALL: c_int = -8;
/// Another call on this session is running (another thread, or a packet
/// callback calling back into the library).
pub const RINGCAP_ERR_BUSY: c_int = -9;

/// `ringcap_inject_report.status`: the frame left at `sent_ns`.
pub const RINGCAP_INJECT_SENT: i32 = 0;
/// Its time had passed by more than its tolerance: not sent.
pub const RINGCAP_INJECT_MISSED: i32 = 1;
/// The grant refused it (`reason` says which rule): not sent.
pub const RINGCAP_INJECT_REFUSED: i32 = 2;
/// Sending failed, or the session ended before its time (`reason`).
pub const RINGCAP_INJECT_FAILED: i32 = 3;

/// `ringcap_options.format`: classic pcap dump files.
pub const RINGCAP_FORMAT_PCAP: u32 = 0;
/// `ringcap_options.format`: pcapng dump files.
pub const RINGCAP_FORMAT_PCAPNG: u32 = 1;

/// Whole packets: the snap length asked for when `snaplen` is 0.
const WHOLE: u32 = 262_144;

/// What to capture (see `ringcap.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ringcap_options {
    /// `sizeof(ringcap_options)` as the caller was compiled with.
    pub size: u32,
    /// Bytes to keep of each packet (0: whole packets).
    pub snaplen: u32,
    /// Nonzero: keep exactly the protocol headers (at most `snaplen`, or
    /// 65535 when `snaplen` is 0).
    pub headers_only: u32,
    /// Keep one packet in N (0: no sampling asked).
    pub sample_packets: u32,
    /// Keep one flow in N (0: no flow sampling asked).
    pub sample_flows: u32,
    /// Dump file format: `RINGCAP_FORMAT_PCAP` or `RINGCAP_FORMAT_PCAPNG`.
    pub format: u32,
    /// End the session after this many packets (0: no limit).
    pub count: u64,
    /// End the session after this many seconds (0: no limit).
    pub duration_s: f64,
    /// The daemon's socket (NULL: `$RINGCAP_DAEMON`, else the default).
    pub socket_path: *const c_char,
    /// Interfaces, comma-separated (required).
    pub interfaces: *const c_char,
    /// Filter in tcpdump syntax (NULL or "": all the grant allows).
    pub filter: *const c_char,
    /// Nonzero: daemon dump mode (the daemon writes files under your dump
    /// directory instead of delivering packets).
    pub dump: u32,
    /// Nonzero: the session only injects (captures nothing).
    pub inject_only: u32,
    /// Dump mode: rotate after this many seconds (0: never).
    pub rotate_seconds: u64,
    /// Dump mode: rotate after this many packets (0: never).
    pub rotate_packets: u64,
    /// Dump mode: rotate after this many bytes (0: never).
    pub rotate_bytes: u64,
    /// Nonzero: have the daemon compress the stream it hands this session
    /// (per-flow header compression in the shared ring); the library
    /// decodes it, so packets come out the same. Added after the first
    /// version of the struct: read only when `size` covers it.
    pub compress: u32,
}

/// `sizeof(ringcap_options)` of the first version of the struct (before
/// `compress`), as programs built against that `ringcap.h` pass it.
pub(crate) const OPTIONS_V1_SIZE: usize = std::mem::offset_of!(ringcap_options, compress);

/// The struct sizes this library accepts, oldest first: every version's
/// `sizeof(ringcap_options)`. A caller's `size` must be one of them.
pub(crate) const OPTIONS_SIZES: [usize; 2] =
    [OPTIONS_V1_SIZE, std::mem::size_of::<ringcap_options>()];

/// A session's counters (see `ringcap.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ringcap_stats {
    /// Packets the interface(s) saw.
    pub seen_by_interface: u64,
    /// Packets accepted by the grant's and your filter.
    pub filter_accepted: u64,
    /// Accepted packets removed by sampling.
    pub sampled_out: u64,
    /// Packets over the grant's rate limit.
    pub rate_limited: u64,
    /// Packets dropped in the daemon's kernel ring.
    pub dropped_ring: u64,
    /// Packets dropped because your session's ring was full.
    pub dropped_client: u64,
    /// Packets delivered to your ring (or dump files).
    pub delivered: u64,
    /// Bytes delivered.
    pub bytes_delivered: u64,
}

impl From<SessionCounters> for ringcap_stats {
    fn from(c: SessionCounters) -> ringcap_stats {
        ringcap_stats {
            seen_by_interface: c.packets_seen_by_interface,
            filter_accepted: c.packets_filter_accepted,
            sampled_out: c.packets_sampled_out,
            rate_limited: c.packets_rate_limited,
            dropped_ring: c.packets_dropped_ring,
            dropped_client: c.packets_dropped_client,
            delivered: c.packets_delivered,
            bytes_delivered: c.bytes_delivered,
        }
    }
}

/// One packet's header (see `ringcap.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ringcap_pkthdr {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Bytes of the packet you have.
    pub caplen: u32,
    /// Length on the wire.
    pub wire_len: u32,
}

/// A packet callback: `user` as given, the header, `caplen` bytes of data
/// (valid only during the call).
pub type ringcap_handler =
    Option<unsafe extern "C" fn(user: *mut c_void, h: *const ringcap_pkthdr, data: *const u8)>;

/// An open session (opaque to C).
pub struct ringcap_session {
    /// Set while a call runs on the session: the only way to `inner`.
    busy: AtomicBool,
    /// Set by `ringcap_breakloop`, cleared when a loop returns.
    breakloop: AtomicBool,
    inner: UnsafeCell<Inner>,
}

struct Inner {
    session: Session,
    /// The session's loop (ringcap-client's, shared with the command line
    /// and the libpcap shim): draining, the ends.
    pump: Pump,
    /// Records taken out of the ring but not handed out yet (a packet count
    /// or a caller's buffer ran out mid-chunk), in the ring's record format:
    /// ts_ns u64, caplen u32, wire_len u32, data.
    pending: Vec<u8>,
    /// How far `pending` has been handed out.
    pending_off: usize,
    /// The session is over (stopped by `ringcap_stop`, or ended by the
    /// daemon and seen by a read): how, and its final counters.
    end: Option<End>,
    /// Completed dump files not handed out yet.
    dumps: VecDeque<String>,
    /// Transmit reports fetched from the daemon, not handed out yet.
    reports: VecDeque<InjectReport>,
}

/// A failure: a code and a message.
struct Fail {
    code: c_int,
    msg: String,
}

impl Fail {
    fn new(code: c_int, msg: impl Into<String>) -> Fail {
        Fail {
            code,
            msg: msg.into(),
        }
    }
}

impl From<ClientError> for Fail {
    fn from(e: ClientError) -> Fail {
        let code = match &e {
            ClientError::Io(_) => RINGCAP_ERR_IO,
            ClientError::Refused { .. } => RINGCAP_ERR_REFUSED,
            ClientError::Daemon(_) => RINGCAP_ERR_DAEMON,
            ClientError::Protocol(_) => RINGCAP_ERR_PROTOCOL,
        };
        Fail::new(code, e.to_string())
    }
}

/// Copies `msg` into the caller's buffer (truncated at a character
/// boundary, NUL-terminated); nothing if it is NULL or empty.
fn write_text(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let mut n = msg.len().min(len - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller promises `buf` points to `len` writable bytes
    // (documented for every errbuf/len pair in ringcap.h); we write n < len
    // bytes and a NUL at index n < len. `msg` cannot overlap a C buffer the
    // caller owns.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// Runs `f`, turning an error into its code plus message and a panic into
/// `RINGCAP_ERR_INTERNAL`: nothing unwinds into C.
fn guard(errbuf: *mut c_char, errlen: usize, f: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            write_text(errbuf, errlen, &e.msg);
            e.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            write_text(
                errbuf,
                errlen,
                &format!("internal error in libringcap (please report): {what}"),
            );
            RINGCAP_ERR_INTERNAL
        }
    }
}

/// A C string argument as UTF-8 (`None` for NULL).
fn text<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes NULL (handled above) or a NUL-terminated
    // string that stays valid for the call (ringcap.h says so for every
    // `const char *` argument).
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map(Some)
        .map_err(|_| Fail::new(RINGCAP_ERR_ARG, format!("{what} is not UTF-8")))
}

/// Exclusive access to a session for one call.
struct Busy<'a> {
    s: &'a ringcap_session,
}

impl<'a> Busy<'a> {
    fn inner(&mut self) -> &mut Inner {
        self.parts().0
    }

    /// The session's state and its break-loop flag.
    fn parts(&mut self) -> (&mut Inner, &'a AtomicBool) {
        // SAFETY: `Busy` exists only while `busy` is set by this call (see
        // `enter`), and every path to `inner` goes through a `Busy` (and its
        // `&mut self`), so this is the only reference to it. The flag is an
        // atomic outside the UnsafeCell.
        (unsafe { &mut *self.s.inner.get() }, &self.s.breakloop)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.s.busy.store(false, Ordering::Release);
    }
}

/// Claims the session for this call.
fn enter<'a>(s: *const ringcap_session) -> Result<Busy<'a>, Fail> {
    if s.is_null() {
        return Err(Fail::new(RINGCAP_ERR_ARG, "the session is NULL"));
    }
    // SAFETY: a non-NULL session pointer comes from `ringcap_open` and is
    // valid until `ringcap_close` (ringcap.h); only the atomics are touched
    // through this shared reference until `busy` is ours.
    let s = unsafe { &*s };
    if s.busy.swap(true, Ordering::Acquire) {
        return Err(Fail::new(
            RINGCAP_ERR_BUSY,
            "another call on this session is running (another thread, or a packet callback)",
        ));
    }
    Ok(Busy { s })
}

impl Inner {
    /// Hands out up to `limit` packets, oldest first, to `deliver`, which
    /// returns false to refuse one (its buffer is full): that packet and
    /// every later one stay pending. `stop` is checked before each packet
    /// (a loop was broken). Returns how many were delivered.
    /// With `finish`, it looks whether the session is over instead of only
    /// draining (see [`Inner::read_or_end`]).
    fn read(
        &mut self,
        limit: usize,
        stop: &AtomicBool,
        mut deliver: impl FnMut(Packet<'_>) -> bool,
        finish: bool,
    ) -> Result<usize, Fail> {
        let mut count = 0usize;
        // What was set aside before comes first.
        while self.pending_off < self.pending.len() {
            if count >= limit || stop.load(Ordering::Relaxed) {
                return Ok(count);
            }
            let p = &self.pending[self.pending_off..];
            let ts_ns = u64::from_le_bytes(p[..8].try_into().expect("8 bytes"));
            let caplen = u32::from_le_bytes(p[8..12].try_into().expect("4 bytes")) as usize;
            let wire_len = u32::from_le_bytes(p[12..16].try_into().expect("4 bytes"));
            let pkt = Packet {
                ts_ns,
                wire_len,
                data: &p[16..16 + caplen],
            };
            if !deliver(pkt) {
                return Ok(count);
            }
            count += 1;
            self.pending_off += 16 + caplen;
        }
        self.pending.clear();
        self.pending_off = 0;
        if count >= limit || stop.load(Ordering::Relaxed) {
            return Ok(count);
        }
        let mut refused = false;
        let pending = &mut self.pending;
        let hand = |b: Batch<'_>| {
            let Batch::Records(records) = b else {
                return; // blocks are asked for only by the command line
            };
            for p in records.packets() {
                if !refused && count < limit && !stop.load(Ordering::Relaxed) && deliver(p) {
                    count += 1;
                    continue;
                }
                refused = true;
                set_aside(pending, p);
            }
        };
        if finish {
            if self.end.is_none() {
                self.end = self.pump.finish(&mut self.session, hand)?;
            }
        } else {
            self.pump.drain(&mut self.session, hand)?;
        }
        Ok(count)
    }

    /// Reads as [`Inner::read`]; when nothing came, looks whether the
    /// session is over (reading what the ring still held, or ending it if
    /// `ringcap_stop` asked). `None`: over, and every packet has been read.
    fn read_or_end(
        &mut self,
        limit: usize,
        stop: &AtomicBool,
        mut deliver: impl FnMut(Packet<'_>) -> bool,
    ) -> Result<Option<usize>, Fail> {
        let n = self.read(limit, stop, &mut deliver, false)?;
        if n > 0 {
            return Ok(Some(n));
        }
        let n = self.read(limit, stop, deliver, true)?;
        Ok((n > 0 || self.end.is_none() || self.has_pending()).then_some(n))
    }

    fn has_pending(&self) -> bool {
        self.pending_off < self.pending.len()
    }

    /// Stopped by `ringcap_stop`.
    fn stopped(&self) -> bool {
        matches!(&self.end, Some(e) if e.by != EndedBy::Daemon)
    }

    /// The final counters, once the session is over.
    fn final_counters(&self) -> Option<SessionCounters> {
        self.end.as_ref().map(|e| e.counters)
    }
}

/// Keeps a packet for a later read, in the format of `Inner::pending`.
fn set_aside(pending: &mut Vec<u8>, p: Packet<'_>) {
    pending.extend_from_slice(&p.ts_ns.to_le_bytes());
    pending.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
    pending.extend_from_slice(&p.wire_len.to_le_bytes());
    pending.extend_from_slice(p.data);
}

fn duration_ms(timeout_ms: c_int) -> Duration {
    Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0))
}

/// The defaults (whole packets, no filter, default socket, uncompressed),
/// `size` set to this library's `sizeof(ringcap_options)`. Every field but
/// `size` is all-zero bits, which `ringcap_options_init_sized` relies on.
fn default_options() -> ringcap_options {
    ringcap_options {
        size: std::mem::size_of::<ringcap_options>() as u32,
        snaplen: 0,
        headers_only: 0,
        sample_packets: 0,
        sample_flows: 0,
        format: RINGCAP_FORMAT_PCAP,
        count: 0,
        duration_s: 0.0,
        socket_path: std::ptr::null(),
        interfaces: std::ptr::null(),
        filter: std::ptr::null(),
        dump: 0,
        inject_only: 0,
        rotate_seconds: 0,
        rotate_packets: 0,
        rotate_bytes: 0,
        compress: 0,
    }
}

/// Fills the first `size` bytes of `opts` (the caller's
/// `sizeof(ringcap_options)`) with the defaults and sets `size` to it:
/// never more than the caller's struct holds, whichever `ringcap.h` it was
/// built against. `ringcap.h`'s `ringcap_options_init()` macro calls this.
/// A size this library does not know is stored as it is, and
/// `ringcap_open` refuses it.
///
/// # Safety
/// `opts` is NULL or points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ringcap_options_init_sized(opts: *mut ringcap_options, size: usize) {
    if opts.is_null() {
        return;
    }
    // Every default is all-zero bits (0, 0.0, NULL, RINGCAP_FORMAT_PCAP),
    // padding included: see `default_options` and the tests.
    let n = size.min(std::mem::size_of::<ringcap_options>());
    // SAFETY: `opts` is non-NULL with `size` writable bytes (contract) and
    // n <= size. Bytes only: the caller's struct may be smaller than ours.
    unsafe { std::ptr::write_bytes(opts.cast::<u8>(), 0, n) };
    if size >= std::mem::size_of::<u32>() {
        // SAFETY: `size` starts the struct and the caller has at least its
        // 4 bytes; `opts` is suitably aligned for a ringcap_options (contract).
        unsafe { std::ptr::addr_of_mut!((*opts).size).write(u32::try_from(size).unwrap_or(0)) };
    }
}

/// The function programs built against the first `ringcap.h` (before
/// `compress`) call: fills the first version of the struct (its
/// `OPTIONS_V1_SIZE` bytes) and nothing after it, since their struct ends
/// there. Programs built against this `ringcap.h` reach
/// `ringcap_options_init_sized` through the header's macro of this name.
///
/// # Safety
/// `opts` is NULL or points to a writable first-version `ringcap_options`.
#[no_mangle]
pub unsafe extern "C" fn ringcap_options_init(opts: *mut ringcap_options) {
    // SAFETY: the contract above is `ringcap_options_init_sized`'s with
    // size = OPTIONS_V1_SIZE.
    unsafe { ringcap_options_init_sized(opts, OPTIONS_V1_SIZE) }
}

/// The caller's options as this library's struct: the first `size` bytes
/// copied from the caller, every later field (one the caller's version of
/// `ringcap.h` does not have) left at its default.
///
/// # Safety
/// `opts` is non-NULL and points to a struct whose first field is `size`,
/// with `size` readable bytes.
unsafe fn read_options(opts: *const ringcap_options) -> Result<ringcap_options, Fail> {
    // SAFETY: non-NULL; every version of the struct starts with its `size`
    // field, which is all we read before checking it.
    let size = unsafe { std::ptr::addr_of!((*opts).size).read() } as usize;
    if !OPTIONS_SIZES.contains(&size) {
        return Err(Fail::new(
            RINGCAP_ERR_ARG,
            format!(
                "options.size is {size}, this libringcap knows {OPTIONS_SIZES:?} (call ringcap_options_init)"
            ),
        ));
    }
    let mut o = default_options();
    // SAFETY: the caller's struct has `size` readable bytes (its version's
    // sizeof, one of OPTIONS_SIZES), size <= sizeof(ringcap_options), and
    // every field is plain data whose bytes came from a struct of the same
    // layout up to `size` (the versions only add fields at the end); `o` is
    // a local, so no overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            opts.cast::<u8>(),
            (&mut o as *mut ringcap_options).cast::<u8>(),
            size,
        )
    };
    Ok(o)
}

fn request(o: &ringcap_options) -> Result<(PathBuf, OpenRequest), Fail> {
    let arg = |m: String| Fail::new(RINGCAP_ERR_ARG, m);
    let interfaces = text(o.interfaces, "interfaces")?
        .ok_or_else(|| arg("no interface given (options.interfaces is NULL)".into()))?;
    let filter = text(o.filter, "filter")?.unwrap_or("");
    let mut req = OpenRequest::new("", filter);
    req.interfaces = interfaces
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if req.interfaces.is_empty() {
        return Err(arg("no interface given".into()));
    }
    req.snaplen = match (o.headers_only != 0, o.snaplen) {
        (false, 0) => Snap::Bytes(WHOLE),
        (false, n) => Snap::Bytes(n.min(WHOLE)),
        (true, 0) => Snap::Headers { max: 65_535 },
        (true, n) => Snap::Headers { max: n.min(65_535) },
    };
    req.sample = match (o.sample_packets, o.sample_flows) {
        (0, 0) => None,
        (n, 0) => Some(Sample::Packets(n)),
        (0, n) => Some(Sample::Flows(n)),
        _ => {
            return Err(arg(
                "sample_packets and sample_flows: one or the other".into()
            ))
        }
    };
    req.format = match o.format {
        RINGCAP_FORMAT_PCAP => OutputFormat::Pcap,
        RINGCAP_FORMAT_PCAPNG => OutputFormat::Pcapng,
        f => return Err(arg(format!("format {f}: 0 (pcap) or 1 (pcapng)"))),
    };
    req.count = (o.count > 0).then_some(o.count);
    if !(o.duration_s.is_finite() && o.duration_s >= 0.0) {
        return Err(arg(format!("duration_s {}", o.duration_s)));
    }
    req.duration = (o.duration_s > 0.0).then(|| Duration::from_secs_f64(o.duration_s));
    let nz = |v: u64| (v > 0).then_some(v);
    req.dump = (o.dump != 0).then(|| DumpRequest {
        rotate_seconds: nz(o.rotate_seconds),
        rotate_packets: nz(o.rotate_packets),
        rotate_bytes: nz(o.rotate_bytes),
    });
    req.inject_only = o.inject_only != 0;
    req.compress = o.compress != 0;
    let socket = text(o.socket_path, "socket_path")?
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(default_socket);
    Ok((socket, req))
}

/// Opens a session (pktd: `wire_init`). On success stores it in `*out` and
/// returns `RINGCAP_OK`.
///
/// # Safety
/// `opts` points to a `ringcap_options` filled by `ringcap_options_init`
/// (any version of the struct: `size` readable bytes; its strings
/// NUL-terminated), `out` to a writable pointer, `errbuf` to
/// `errlen` writable bytes (or NULL).
#[no_mangle]
pub unsafe extern "C" fn ringcap_open(
    opts: *const ringcap_options,
    out: *mut *mut ringcap_session,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        if opts.is_null() || out.is_null() {
            return Err(Fail::new(RINGCAP_ERR_ARG, "opts or out is NULL"));
        }
        // SAFETY: non-NULL; the caller's struct has the `size` it says
        // (ringcap_options_init sets it to the caller's sizeof).
        let o = unsafe { read_options(opts) }?;
        let (socket, req) = request(&o)?;
        let session = Client::connect(&socket)?.open(req)?;
        let s = Box::new(ringcap_session {
            busy: AtomicBool::new(false),
            breakloop: AtomicBool::new(false),
            inner: UnsafeCell::new(Inner {
                session,
                pump: Pump::new(None),
                pending: Vec::new(),
                pending_off: 0,
                end: None,
                dumps: VecDeque::new(),
                reports: VecDeque::new(),
            }),
        });
        // SAFETY: `out` is non-NULL and writable (contract).
        unsafe { out.write(Box::into_raw(s)) };
        Ok(RINGCAP_OK)
    })
}

/// Ends the session if it still runs and frees it (pktd: `wire_done`);
/// `final_stats` (may be NULL) gets the final counters. Packets not read
/// are discarded (`ringcap_stop` first to read them).
///
/// # Safety
/// `s` comes from `ringcap_open` and is not used after this call (unless
/// `RINGCAP_ERR_BUSY` is returned: then nothing was freed).
#[no_mangle]
pub unsafe extern "C" fn ringcap_close(
    s: *mut ringcap_session,
    final_stats: *mut ringcap_stats,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let busy = enter(s)?;
        std::mem::forget(busy);
        // SAFETY: we hold `busy` (never released: the session goes away),
        // and `s` came from Box::into_raw in `ringcap_open`.
        let boxed = unsafe { Box::from_raw(s) };
        let inner = boxed.inner.into_inner();
        let counters = match inner.final_counters() {
            Some(c) => Ok(c),
            None => inner.session.close().map(|(_, c)| c).map_err(Fail::from),
        }?;
        if !final_stats.is_null() {
            // SAFETY: non-NULL and writable (contract).
            unsafe { final_stats.write(counters.into()) };
        }
        Ok(RINGCAP_OK)
    })
}

/// Asks the daemon to end the session and waits until it has; the final
/// counters go to `final_stats` (may be NULL). Packets delivered before the
/// end stay readable (`ringcap_dispatch` / `ringcap_read_batch` until 0).
///
/// # Safety
/// `s` from `ringcap_open`; `final_stats` NULL or writable; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_stop(
    s: *mut ringcap_session,
    final_stats: *mut ringcap_stats,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        let inner = b.inner();
        if inner.end.is_none() {
            inner.pump.stop(Stop::Interrupted);
            // What the ring still holds is kept for the reads after.
            let pending = &mut inner.pending;
            inner.end = inner.pump.finish(&mut inner.session, |b| {
                if let Batch::Records(r) = b {
                    r.packets().for_each(|p| set_aside(pending, p));
                }
            })?;
        }
        let c = inner.final_counters().unwrap_or_default();
        if !final_stats.is_null() {
            // SAFETY: non-NULL and writable (contract).
            unsafe { final_stats.write(c.into()) };
        }
        Ok(RINGCAP_OK)
    })
}

/// The session's counters now (pktd: `wire_stats`).
///
/// # Safety
/// `s` from `ringcap_open`; `stats` writable; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_get_stats(
    s: *mut ringcap_session,
    stats: *mut ringcap_stats,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        if stats.is_null() {
            return Err(Fail::new(RINGCAP_ERR_ARG, "stats is NULL"));
        }
        let mut b = enter(s)?;
        let inner = b.inner();
        let c = match inner.final_counters() {
            Some(c) => c,
            None => inner.session.stats()?,
        };
        // SAFETY: non-NULL and writable (contract).
        unsafe { stats.write(c.into()) };
        Ok(RINGCAP_OK)
    })
}

fn running(inner: &mut Inner) -> Result<&mut Session, Fail> {
    if inner.stopped() {
        return Err(Fail::new(RINGCAP_ERR_ENDED, "the session was stopped"));
    }
    Ok(&mut inner.session)
}

/// Replaces your filter (still ANDed with the grant's) (pktd: `wire_setfilter`).
///
/// # Safety
/// `s` from `ringcap_open`; `filter` NULL or NUL-terminated; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_setfilter(
    s: *mut ringcap_session,
    filter: *const c_char,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let f = text(filter, "filter")?.unwrap_or("");
        let mut b = enter(s)?;
        running(b.inner())?.set_filter(f)?;
        Ok(RINGCAP_OK)
    })
}

/// Dump mode: closes the current dump file and starts the next now (pktd:
/// `wire_checkpoint`).
///
/// # Safety
/// `s` from `ringcap_open`; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_checkpoint(
    s: *mut ringcap_session,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        running(b.inner())?.checkpoint()?;
        Ok(RINGCAP_OK)
    })
}

/// Asks the daemon to push out what it holds for the session (pktd:
/// `wire_flush`); a round trip (the daemon hands partial batches over every
/// 50 ms by itself).
///
/// # Safety
/// `s` from `ringcap_open`; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_flush(
    s: *mut ringcap_session,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        running(b.inner())?.flush()?;
        Ok(RINGCAP_OK)
    })
}

/// Waits up to `timeout_ms` for packets (pktd: `wire_activity`): 1 if
/// packets may be ready or the session ended, 0 on timeout.
///
/// # Safety
/// `s` from `ringcap_open`; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_wait(
    s: *mut ringcap_session,
    timeout_ms: c_int,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        let inner = b.inner();
        if inner.has_pending() {
            return Ok(1);
        }
        Ok(c_int::from(inner.session.wait(duration_ms(timeout_ms))?))
    })
}

/// 1 if the session has ended (why goes into `reason`, may be NULL), else 0.
///
/// # Safety
/// `s` from `ringcap_open`; `reason` NULL or `reason_len` writable bytes;
/// errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_ended(
    s: *mut ringcap_session,
    reason: *mut c_char,
    reason_len: usize,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        let inner = b.inner();
        if inner.stopped() {
            write_text(reason, reason_len, "stopped by the client");
            return Ok(1);
        }
        if let Some(e) = &inner.end {
            write_text(reason, reason_len, &e.reason);
            return Ok(1);
        }
        Ok(match inner.session.ended() {
            Some((why, _)) => {
                write_text(reason, reason_len, &why);
                1
            }
            None => 0,
        })
    })
}

fn call(
    cb: unsafe extern "C" fn(*mut c_void, *const ringcap_pkthdr, *const u8),
    user: *mut c_void,
    p: Packet<'_>,
) {
    let h = ringcap_pkthdr {
        ts_ns: p.ts_ns,
        caplen: p.data.len() as u32,
        wire_len: p.wire_len,
    };
    // SAFETY: the caller's handler gets its own `user`, a header that lives
    // for the call, and `caplen` readable bytes that stay mapped (read-only)
    // until we return; ringcap.h says the data is valid only during the call.
    unsafe { cb(user, &h, p.data.as_ptr()) };
}

/// Calls `handler` for the packets there now, at most `cnt` (`cnt` <= 0:
/// all), without waiting (pcap_dispatch). Returns how many.
///
/// # Safety
/// `s` from `ringcap_open`; `handler` a valid function that may call only
/// `ringcap_breakloop` on this session; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_dispatch(
    s: *mut ringcap_session,
    cnt: c_int,
    handler: ringcap_handler,
    user: *mut c_void,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let cb = handler.ok_or_else(|| Fail::new(RINGCAP_ERR_ARG, "handler is NULL"))?;
        let mut b = enter(s)?;
        let (inner, stop) = b.parts();
        let limit = usize::try_from(cnt)
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or(usize::MAX);
        let n = inner.read(
            limit,
            stop,
            |p| {
                call(cb, user, p);
                true
            },
            false,
        );
        stop.store(false, Ordering::Relaxed);
        Ok(c_int::try_from(n?).unwrap_or(c_int::MAX))
    })
}

/// Calls `handler` for every packet, waiting for more, until `cnt` packets
/// (`cnt` <= 0: no limit), the session ends, or `ringcap_breakloop`
/// (pcap_loop). Returns how many.
///
/// # Safety
/// As `ringcap_dispatch`.
#[no_mangle]
pub unsafe extern "C" fn ringcap_loop(
    s: *mut ringcap_session,
    cnt: c_int,
    handler: ringcap_handler,
    user: *mut c_void,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let cb = handler.ok_or_else(|| Fail::new(RINGCAP_ERR_ARG, "handler is NULL"))?;
        let mut b = enter(s)?;
        let (inner, stop) = b.parts();
        let want = usize::try_from(cnt)
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or(usize::MAX);
        let mut total = 0usize;
        let result = loop {
            if stop.load(Ordering::Relaxed) || total >= want {
                break Ok(total);
            }
            match inner.read_or_end(want - total, stop, |p| {
                call(cb, user, p);
                true
            }) {
                Ok(Some(0)) => {}
                Ok(Some(n)) => {
                    total += n;
                    continue;
                }
                Ok(None) => break Ok(total),
                Err(e) => break Err(e),
            }
            if let Err(e) = inner
                .pump
                .wait(&mut inner.session, Duration::from_millis(100))
            {
                break Err(e.into());
            }
        };
        stop.store(false, Ordering::Relaxed);
        result.map(|n| c_int::try_from(n).unwrap_or(c_int::MAX))
    })
}

/// Makes a running `ringcap_loop` / `ringcap_dispatch` return after the
/// current packet (any thread, a packet callback, a signal handler).
///
/// # Safety
/// `s` from `ringcap_open`, not yet closed.
#[no_mangle]
pub unsafe extern "C" fn ringcap_breakloop(s: *mut ringcap_session) {
    if s.is_null() {
        return;
    }
    // SAFETY: valid session (contract); only an atomic is touched, through a
    // shared reference, which another call's exclusive access to `inner`
    // (an UnsafeCell) does not conflict with.
    unsafe { (*s).breakloop.store(true, Ordering::Relaxed) };
}

/// Copies the packets there now into the caller's arrays without waiting:
/// up to `max_packets` headers into `hdrs` and their bytes, back to back,
/// into `buf`. Returns how many (0: none now).
///
/// # Safety
/// `s` from `ringcap_open`; `hdrs` `max_packets` writable headers; `buf`
/// `buf_len` writable bytes; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_read_batch(
    s: *mut ringcap_session,
    hdrs: *mut ringcap_pkthdr,
    max_packets: usize,
    buf: *mut u8,
    buf_len: usize,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        // SAFETY: the caller's arrays as documented above (the contract of
        // `copy_batch`).
        let n = unsafe { copy_batch(b.inner(), hdrs, max_packets, buf, buf_len, false) }?;
        Ok(n.unwrap_or(0) as c_int)
    })
}

/// As `ringcap_read_batch`, but waits up to `timeout_ms` when no packet is
/// there, and says when the session is over: returns how many packets (0:
/// none came in time), or `RINGCAP_ERR_ENDED` once the session has ended
/// and every packet delivered before its end was read. The read loop of
/// ringcap-client (`Pump`), shared with the command line and the libpcap
/// shim: a loop over this call is the whole session.
///
/// # Safety
/// As `ringcap_read_batch`.
#[no_mangle]
pub unsafe extern "C" fn ringcap_next_batch(
    s: *mut ringcap_session,
    timeout_ms: c_int,
    hdrs: *mut ringcap_pkthdr,
    max_packets: usize,
    buf: *mut u8,
    buf_len: usize,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        let inner = b.inner();
        for first in [true, false] {
            // SAFETY: as in `ringcap_read_batch` (same contract).
            match unsafe { copy_batch(inner, hdrs, max_packets, buf, buf_len, true) }? {
                None => return Err(Fail::new(RINGCAP_ERR_ENDED, "the session has ended")),
                Some(0) if first => {
                    let idle = duration_ms(timeout_ms);
                    inner.pump.wait(&mut inner.session, idle)?;
                }
                Some(n) => return Ok(n as c_int),
            }
        }
        Ok(0)
    })
}

/// Copies packets into the caller's arrays (see `ringcap_read_batch`);
/// with `finish`, `None` once the session is over and all was read.
///
/// # Safety
/// `hdrs` has `max_packets` writable headers, `buf` `buf_len` writable bytes.
unsafe fn copy_batch(
    inner: &mut Inner,
    hdrs: *mut ringcap_pkthdr,
    max_packets: usize,
    buf: *mut u8,
    buf_len: usize,
    finish: bool,
) -> Result<Option<usize>, Fail> {
    if hdrs.is_null() || (buf.is_null() && buf_len > 0) || max_packets == 0 {
        return Err(Fail::new(
            RINGCAP_ERR_ARG,
            "hdrs or buf is NULL, or max_packets is 0",
        ));
    }
    let max = max_packets.min(c_int::MAX as usize);
    let never = AtomicBool::new(false);
    let mut used = 0usize;
    let mut n = 0usize;
    let mut too_big = None;
    let copy = |p: Packet<'_>| {
        let len = p.data.len();
        if buf_len - used < len {
            if n == 0 {
                too_big = Some(len);
            }
            return false;
        }
        // SAFETY: `hdrs` has `max_packets` slots and `read` hands out at
        // most `max` <= max_packets packets, so slot n exists; `buf` has
        // `buf_len` bytes and used + len <= buf_len was just checked; the
        // ring (or our pending copy) cannot overlap the caller's buffers.
        unsafe {
            hdrs.add(n).write(ringcap_pkthdr {
                ts_ns: p.ts_ns,
                caplen: len as u32,
                wire_len: p.wire_len,
            });
            std::ptr::copy_nonoverlapping(p.data.as_ptr(), buf.add(used), len);
        }
        used += len;
        n += 1;
        true
    };
    let got = if finish {
        inner.read_or_end(max, &never, copy)?
    } else {
        Some(inner.read(max, &never, copy, false)?)
    };
    if let Some(len) = too_big {
        return Err(Fail::new(
            RINGCAP_ERR_TOO_SMALL,
            format!("the next packet has {len} bytes, the buffer {buf_len}"),
        ));
    }
    Ok(got)
}

/// The settings the daemon applied, as text (grant, snap length, filters,
/// sampling; ", compressed stream" if the daemon compresses it),
/// NUL-terminated into `buf`; returns the full length.
///
/// # Safety
/// `s` from `ringcap_open`; `buf` NULL or `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ringcap_describe(
    s: *mut ringcap_session,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    guard(std::ptr::null_mut(), 0, || {
        let mut b = enter(s)?;
        let inner = b.inner();
        let e = &inner.session.effective;
        let snap = match e.snaplen {
            Snap::Bytes(n) => format!("snaplen {n}"),
            Snap::Headers { max } => format!("headers (at most {max} bytes)"),
        };
        let text = format!(
            "session {} on {}, grant {}, {snap}, filter ({}) and ({}){}{}",
            inner.session.id,
            e.interfaces.join(","),
            u64::from(e.grant) + 1,
            e.framework_filter,
            e.filter,
            match e.sample {
                Some(Sample::Packets(n)) => format!(", 1 packet in {n}"),
                Some(Sample::Flows(n)) => format!(", 1 flow in {n}"),
                None => String::new(),
            },
            if e.compress {
                ", compressed stream"
            } else {
                ""
            }
        );
        write_text(buf, len, &text);
        Ok(c_int::try_from(text.len()).unwrap_or(c_int::MAX))
    })
}

/// Dump mode: the name of the next dump file the daemon completed, into
/// `name` (NUL-terminated); 1 if there was one, 0 if not.
///
/// # Safety
/// `s` from `ringcap_open`; `name` `len` writable bytes; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_next_dump(
    s: *mut ringcap_session,
    name: *mut c_char,
    len: usize,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        let inner = b.inner();
        let names = inner.session.published();
        inner.dumps.extend(names);
        match inner.dumps.pop_front() {
            Some(first) => {
                write_text(name, len, &first);
                Ok(1)
            }
            None => Ok(0),
        }
    })
}

/// The library's version (the crate's, e.g. "0.1.0"), a static string.
#[no_mangle]
pub extern "C" fn ringcap_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// A static description of an error code.
#[no_mangle]
pub extern "C" fn ringcap_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        RINGCAP_OK => c"success",
        RINGCAP_ERR_ARG => c"bad argument",
        RINGCAP_ERR_IO => c"socket or ring failure",
        RINGCAP_ERR_REFUSED => c"refused by the daemon's policy",
        RINGCAP_ERR_DAEMON => c"the daemon answered with an error",
        RINGCAP_ERR_PROTOCOL => c"unexpected answer from the daemon",
        RINGCAP_ERR_ENDED => c"the session has ended",
        RINGCAP_ERR_INTERNAL => c"internal error in libringcap",
        RINGCAP_ERR_TOO_SMALL => c"buffer too small for the next packet",
        RINGCAP_ERR_BUSY => c"another call on this session is running",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

#[cfg(test)]
mod tests;

/// A frame to inject (see `ringcap.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ringcap_inject_frame {
    /// Your name for it, echoed in its report.
    pub tag: u64,
    /// When to send it: CLOCK_REALTIME nanoseconds (0: now).
    pub at_ns: u64,
    /// How late it may still go; later it is reported missed.
    pub tolerance_ns: u64,
    /// The whole Ethernet frame.
    pub data: *const u8,
    /// Its length in bytes.
    pub len: u32,
    /// Zero.
    pub reserved: u32,
}

/// Bytes of `ringcap_inject_report.reason`, its NUL included.
pub const RINGCAP_REASON_SIZE: usize = 128;

/// The report of one injected frame (see `ringcap.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ringcap_inject_report {
    /// The frame's tag.
    pub tag: u64,
    /// When it was asked for (for "now": when the sender took it up).
    pub requested_ns: u64,
    /// When it left (the kernel's transmit timestamp); 0 if it did not or
    /// the kernel did not say.
    pub sent_ns: u64,
    /// `RINGCAP_INJECT_*`.
    pub status: i32,
    /// Zero.
    pub reserved: u32,
    /// Why it was refused or failed (NUL-terminated, truncated; "" if sent).
    pub reason: [c_char; RINGCAP_REASON_SIZE],
}

/// Queues `n` frames to send on the session's interface at their times
/// (libwire: `wire_inject`); the library copies them and sends them to the
/// daemon in batches of 64. Each frame gets exactly one report
/// (`ringcap_inject_reports`), refused ones too. Returns `n`, or an error if
/// a batch as a whole was refused (no injection rights, say): frames of
/// earlier batches are queued then.
///
/// # Safety
/// `s` from `ringcap_open`; `frames` points to `n` frames whose `data`
/// point to `len` readable bytes each; errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_inject(
    s: *mut ringcap_session,
    frames: *const ringcap_inject_frame,
    n: usize,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        if n == 0 {
            return Ok(0);
        }
        if frames.is_null() {
            return Err(Fail::new(RINGCAP_ERR_ARG, "frames is NULL"));
        }
        let count = c_int::try_from(n)
            .map_err(|_| Fail::new(RINGCAP_ERR_ARG, format!("{n} frames: too many")))?;
        // SAFETY: non-NULL, and the caller promises `n` frames there.
        let frames = unsafe { std::slice::from_raw_parts(frames, n) };
        let session = running(b.inner())?;
        for batch in frames.chunks(ringcap_client::MAX_INJECT_BATCH) {
            let mut out = Vec::with_capacity(batch.len());
            for f in batch {
                if f.data.is_null() && f.len > 0 {
                    return Err(Fail::new(
                        RINGCAP_ERR_ARG,
                        format!("frame {}: data is NULL", f.tag),
                    ));
                }
                let data = if f.len == 0 {
                    Vec::new()
                } else {
                    // SAFETY: non-NULL with `len` readable bytes (contract);
                    // copied out before anything else happens.
                    unsafe { std::slice::from_raw_parts(f.data, f.len as usize) }.to_vec()
                };
                out.push(InjectFrame {
                    tag: f.tag,
                    at_ns: f.at_ns,
                    tolerance_ns: f.tolerance_ns,
                    data,
                });
            }
            session.inject(out)?;
        }
        Ok(count)
    })
}

/// Copies up to `max` transmit reports into `out` (oldest first), asking
/// the daemon for more when none are held; returns how many (0: none
/// ready now).
///
/// # Safety
/// `s` from `ringcap_open`; `out` points to `max` writable reports;
/// errbuf as above.
#[no_mangle]
pub unsafe extern "C" fn ringcap_inject_reports(
    s: *mut ringcap_session,
    out: *mut ringcap_inject_report,
    max: usize,
    errbuf: *mut c_char,
    errlen: usize,
) -> c_int {
    guard(errbuf, errlen, || {
        let mut b = enter(s)?;
        if max == 0 {
            return Ok(0);
        }
        if out.is_null() {
            return Err(Fail::new(RINGCAP_ERR_ARG, "out is NULL"));
        }
        let inner = b.inner();
        if inner.reports.is_empty() {
            let fresh = running(inner)?.inject_reports()?;
            inner.reports.extend(fresh);
        }
        let n = max.min(inner.reports.len()).min(c_int::MAX as usize);
        for i in 0..n {
            let r = inner.reports.pop_front().expect("n <= len");
            let mut c = ringcap_inject_report {
                tag: r.tag,
                requested_ns: r.requested_ns,
                sent_ns: r.sent_ns.unwrap_or(0),
                status: match r.status {
                    InjectStatus::Sent => RINGCAP_INJECT_SENT,
                    InjectStatus::Missed => RINGCAP_INJECT_MISSED,
                    InjectStatus::Refused => RINGCAP_INJECT_REFUSED,
                    InjectStatus::Failed => RINGCAP_INJECT_FAILED,
                },
                reserved: 0,
                reason: [0; RINGCAP_REASON_SIZE],
            };
            write_text(
                c.reason.as_mut_ptr(),
                RINGCAP_REASON_SIZE,
                r.reason.as_deref().unwrap_or(""),
            );
            // SAFETY: i < n <= max, and `out` has `max` writable reports.
            unsafe { out.add(i).write(c) };
        }
        Ok(n as c_int)
    })
}
