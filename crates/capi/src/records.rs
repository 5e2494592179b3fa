//! Packets out to the caller: through a callback (`ringcap_dispatch`,
//! `ringcap_loop`, stopped by `ringcap_breakloop`) or copied into the
//! caller's arrays (`ringcap_read_batch`, `ringcap_next_batch`). Separate
//! because it is where the ring's bytes cross into C memory.

use crate::errors::{guard, Fail};
use crate::handle::{duration_ms, enter, ringcap_session, Inner};
use crate::{RINGCAP_ERR_ARG, RINGCAP_ERR_ENDED, RINGCAP_ERR_TOO_SMALL};
use ringcap_client::Packet;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
