//! Injection: the frames a caller queues (`ringcap_inject`) and the
//! transmit reports it reads back (`ringcap_inject_reports`). Separate
//! because it is the only way data goes from C to the daemon's interface.

use crate::errors::{guard, write_text, Fail};
use crate::handle::{enter, ringcap_session};
use crate::session::running;
use crate::{
    RINGCAP_ERR_ARG, RINGCAP_INJECT_FAILED, RINGCAP_INJECT_MISSED, RINGCAP_INJECT_REFUSED,
    RINGCAP_INJECT_SENT,
};
use ringcap_client::{InjectFrame, InjectStatus};
use std::ffi::{c_char, c_int};

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
