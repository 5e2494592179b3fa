//! The supervisor thread of a capture: waits for its bells (stop, the
//! writer's attention, rotation), the end of the duration or the next
//! reading of the interfaces' counters, turns the writer's log into events
//! and, at the end, joins everything in order.

use super::setup::Running;
use super::*;
use crate::source::SourceError;
use crossbeam_channel::Sender;
use ringcap_sink::bell::wait_readable;

/// The supervisor's bells as bits of what `wait_readable` returns: a bell's
/// bit is its place in the list it waits on.
const STOP_BELL: u32 = 1 << 0;
const ATTENTION_BELL: u32 = 1 << 1;
const ROTATE_BELL: u32 = 1 << 2;

/// How often the interfaces' counters are read while nothing else reads
/// them (no status lines): an interface deleted under the capture takes its
/// counters with it, and the final report then shows them as last read.
const COUNTERS_EVERY: Duration = Duration::from_secs(1);

fn drain_log(shared: &Shared, completed_seen: &mut usize, tx: &Sender<Event>) {
    if let Ok(mut l) = shared.log.lock() {
        for m in l.drain(..) {
            let _ = tx.send(Event::Notice(m));
        }
    }
    if let Ok(c) = shared.completed.lock() {
        for p in c.iter().skip(*completed_seen) {
            let _ = tx.send(Event::FileCompleted(p.clone()));
        }
        *completed_seen = c.len();
    }
}

pub(super) fn supervise(
    inner: Arc<CaptureState>,
    running: Running,
    duration: Option<Duration>,
    tx: Sender<Event>,
    began: Instant,
) -> Option<EngineError> {
    let mut error: Option<EngineError> = None;
    let mut completed_seen = 0;
    let mut counted = Instant::now();
    loop {
        // Woken by a bell (a stop, the writer, a rotation), by the end of
        // the duration or to read the interfaces' counters.
        let mut timeout = duration.map(|d| d.saturating_sub(began.elapsed()));
        if let Some(live) = &inner.live {
            if counted.elapsed() >= COUNTERS_EVERY {
                live.refresh(&inner.board);
                counted = Instant::now();
            }
            let next = COUNTERS_EVERY.saturating_sub(counted.elapsed());
            timeout = Some(timeout.map_or(next, |t| t.min(next)));
        }
        // In the order of the *_BELL bits above.
        let bells = [inner.stop.fd(), inner.attention.fd(), inner.rotate.fd()];
        match wait_readable(&bells, timeout) {
            Ok(ringing) => {
                if ringing & STOP_BELL != 0 {
                    inner.stop.noticed();
                }
                // Cleared before looking at what it stands for: what comes
                // after this rings again.
                if ringing & ATTENTION_BELL != 0 {
                    inner.attention.clear();
                }
                if ringing & ROTATE_BELL != 0 && inner.rotate.clear() {
                    inner.writer.request_rotation();
                }
            }
            Err(_) => std::thread::sleep(SUPERVISE_FALLBACK),
        }
        if duration.is_some_and(|d| began.elapsed() >= d) {
            inner.stop.request();
        }
        if error.is_none() {
            if let Some(f) = inner.writer.failure.lock().ok().and_then(|f| f.clone()) {
                let f = EngineError::from_write(f);
                let _ = tx.send(Event::Error(f.clone()));
                error = Some(f);
                inner.stop.request();
            }
        }
        drain_log(&inner.writer, &mut completed_seen, &tx);
        if running.threads.iter().any(|h| h.is_finished()) {
            inner.stop.request();
        }
        if inner.stop.requested() {
            break;
        }
    }
    // Count the interfaces first, then let the threads drain the rings.
    if let Some(live) = &inner.live {
        live.refresh(&inner.board);
    }
    let Running {
        threads,
        leases,
        writer,
        full,
    } = running;
    for h in threads {
        let failed = match h.join() {
            Ok(Ok(())) => None,
            Ok(Err(SourceError::Input(m))) => Some(EngineError::usage(format!(
                "{m} (the packets before it were written)"
            ))),
            Ok(Err(SourceError::Os(m))) => Some(EngineError::runtime(m)),
            Err(_) => Some(EngineError::runtime("a capture thread panicked")),
        };
        if let Some(f) = failed {
            if error.is_none() {
                let _ = tx.send(Event::Error(f.clone()));
                error = Some(f);
            }
        }
    }
    drop(full);
    writer.join();
    if let Some(live) = &inner.live {
        live.refresh(&inner.board);
    }
    if let Some(f) = inner.writer.failure.lock().ok().and_then(|f| f.clone()) {
        // A write failure outranks what it caused.
        let f = EngineError::from_write(f);
        if error.as_ref() != Some(&f) {
            error = Some(f);
        }
    }
    drain_log(&inner.writer, &mut completed_seen, &tx);
    drop(leases);
    let _ = tx.send(Event::Finished);
    error
}
