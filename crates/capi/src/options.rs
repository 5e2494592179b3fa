//! `ringcap_options`: what a caller asks for, its versions (a caller built
//! against an older `ringcap.h` passes a smaller struct), the init entry
//! points, and the translation into the client's `OpenRequest`. Separate
//! because the struct-version rules are a contract of their own, read
//! before any session exists.

use crate::errors::{text, Fail};
use crate::{RINGCAP_ERR_ARG, RINGCAP_FORMAT_PCAP, RINGCAP_FORMAT_PCAPNG};
use ringcap_client::{default_socket, DumpRequest, OpenRequest, OutputFormat, Sample, Snap};
use std::ffi::c_char;
use std::path::PathBuf;
use std::time::Duration;

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

/// The defaults (whole packets, no filter, default socket, uncompressed),
/// `size` set to this library's `sizeof(ringcap_options)`. Every field but
/// `size` is all-zero bits, which `ringcap_options_init_sized` relies on.
pub(crate) fn default_options() -> ringcap_options {
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
pub(crate) unsafe fn read_options(opts: *const ringcap_options) -> Result<ringcap_options, Fail> {
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

pub(crate) fn request(o: &ringcap_options) -> Result<(PathBuf, OpenRequest), Fail> {
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
