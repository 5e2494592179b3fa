//! The session handle (`ringcap_session`, opaque to C) and its state:
//! the busy flag that gives one call at a time exclusive access (`enter`,
//! `Busy`), and `Inner`'s reads, which hand packets out of the ring or out
//! of what an earlier call set aside. Separate because every entry point on
//! a session goes through it, and its `unsafe` access rule lives in one place.

use crate::errors::Fail;
use crate::{RINGCAP_ERR_ARG, RINGCAP_ERR_BUSY};
use ringcap_client::{Batch, End, EndedBy, InjectReport, Packet, Pump, Session, SessionCounters};
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An open session (opaque to C).
pub struct ringcap_session {
    /// Set while a call runs on the session: the only way to `inner`.
    pub(crate) busy: AtomicBool,
    /// Set by `ringcap_breakloop`, cleared when a loop returns.
    pub(crate) breakloop: AtomicBool,
    pub(crate) inner: UnsafeCell<Inner>,
}

pub(crate) struct Inner {
    pub(crate) session: Session,
    /// The session's loop (ringcap-client's, shared with the command line
    /// and the libpcap shim): draining, the ends.
    pub(crate) pump: Pump,
    /// Records taken out of the ring but not handed out yet (a packet count
    /// or a caller's buffer ran out mid-chunk), in the ring's record format:
    /// ts_ns u64, caplen u32, wire_len u32, data.
    pub(crate) pending: Vec<u8>,
    /// How far `pending` has been handed out.
    pub(crate) pending_off: usize,
    /// The session is over (stopped by `ringcap_stop`, or ended by the
    /// daemon and seen by a read): how, and its final counters.
    pub(crate) end: Option<End>,
    /// Completed dump files not handed out yet.
    pub(crate) dumps: VecDeque<String>,
    /// Transmit reports fetched from the daemon, not handed out yet.
    pub(crate) reports: VecDeque<InjectReport>,
}

/// Exclusive access to a session for one call.
pub(crate) struct Busy<'a> {
    s: &'a ringcap_session,
}

impl<'a> Busy<'a> {
    pub(crate) fn inner(&mut self) -> &mut Inner {
        self.parts().0
    }

    /// The session's state and its break-loop flag.
    pub(crate) fn parts(&mut self) -> (&mut Inner, &'a AtomicBool) {
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
pub(crate) fn enter<'a>(s: *const ringcap_session) -> Result<Busy<'a>, Fail> {
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
    pub(crate) fn read(
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
    pub(crate) fn read_or_end(
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

    pub(crate) fn has_pending(&self) -> bool {
        self.pending_off < self.pending.len()
    }

    /// Stopped by `ringcap_stop`.
    pub(crate) fn stopped(&self) -> bool {
        matches!(&self.end, Some(e) if e.by != EndedBy::Daemon)
    }

    /// The final counters, once the session is over.
    pub(crate) fn final_counters(&self) -> Option<SessionCounters> {
        self.end.as_ref().map(|e| e.counters)
    }
}

/// Keeps a packet for a later read, in the format of `Inner::pending`.
pub(crate) fn set_aside(pending: &mut Vec<u8>, p: Packet<'_>) {
    pending.extend_from_slice(&p.ts_ns.to_le_bytes());
    pending.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
    pending.extend_from_slice(&p.wire_len.to_le_bytes());
    pending.extend_from_slice(p.data);
}

pub(crate) fn duration_ms(timeout_ms: c_int) -> Duration {
    Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0))
}
