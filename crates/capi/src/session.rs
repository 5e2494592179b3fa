//! A session's life and control: open, close, stop, counters, filter,
//! checkpoint, flush, wait, ended, and what the daemon says about it
//! (`ringcap_describe`, `ringcap_next_dump`). Separate from the packet
//! reads (`records`) and injection (`inject`), which only use a session.

use crate::errors::{guard, text, write_text, Fail};
use crate::handle::{duration_ms, enter, ringcap_session, set_aside, Inner};
use crate::options::{read_options, request, ringcap_options};
use crate::{RINGCAP_ERR_ARG, RINGCAP_ERR_ENDED, RINGCAP_OK};
use ringcap_client::{Batch, Client, Pump, Sample, Session, SessionCounters, Snap, Stop};
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int};
use std::sync::atomic::AtomicBool;

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

pub(crate) fn running(inner: &mut Inner) -> Result<&mut Session, Fail> {
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
