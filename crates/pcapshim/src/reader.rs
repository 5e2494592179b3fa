//! The reader thread of a live handle: the session's ring → a queue the
//! tool's thread takes whole.
//!
//! Why a reader thread: `pcap_get_selectable_fd` must return a descriptor
//! that becomes readable when packets wait, with nobody calling into the
//! library. The session's own wake-up pipe is written by the daemon only
//! while the reader says it sleeps (see `ringcap-shm`), so a thread sleeps
//! there for the tool: it moves whole chunks of records from the shared
//! ring into a bounded queue and signals an eventfd, readable exactly while
//! the queue holds packets (or the session has ended). The tool's thread
//! takes the queue's buffer whole (a swap, one lock per batch, no lock or
//! system call per packet). When the queue is full the thread stops
//! reading, so the daemon's ring fills and the daemon counts the drops:
//! `pcap_stats` reports them.

use ringcap_client::{Batch, Pump, Session, SessionCounters};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long the reader thread sleeps at a time (it checks for the end).
pub(crate) const SLICE: Duration = Duration::from_millis(50);
/// Longest a record waits in the reader before the tool gets it (libpcap's
/// own buffer timeout is the tool's, often 1 s: shorter here, so a tool
/// printing packets stays lively).
pub(crate) const MAX_HOLD: Duration = Duration::from_millis(50);
/// Shortest nap of the reader while records wait for their batch.
const STEP: Duration = Duration::from_millis(1);
/// Batch size at which the reader hands records over without waiting.
const HANDOFF: usize = 256 * 1024;

/// How a session ended (seen by the reader thread).
#[derive(Debug, Clone)]
pub(crate) enum End {
    /// The daemon ended it (reason).
    Ended(String),
    /// Reading failed.
    Failed(String),
}

pub(crate) struct Queue {
    /// Records, as in the ring: sec, nsec, caplen, wire length (u32 LE), data.
    pub(crate) buf: Vec<u8>,
    /// Bytes above which the reader stops taking chunks from the ring.
    pub(crate) limit: usize,
    pub(crate) end: Option<End>,
}

pub(crate) struct Shared {
    pub(crate) session: Mutex<Session>,
    pub(crate) queue: Mutex<Queue>,
    /// Signalled when the queue gains packets or an end, or frees room.
    pub(crate) cond: Condvar,
    /// Readable while the queue holds packets or an end.
    pub(crate) wake: OwnedFd,
    /// Whether `wake` is readable now; changed with the queue locked, so
    /// that a tool reading with `pcap_loop` costs no system call on it.
    pub(crate) armed: AtomicBool,
    pub(crate) stop: AtomicBool,
    /// Bumped when the filter changes: records read before are discarded.
    pub(crate) generation: AtomicU64,
    /// How long records may wait for a batch (`None`: immediate mode).
    pub(crate) hold: Option<Duration>,
    /// The last counters the daemon gave (for `pcap_stats` when it cannot ask).
    pub(crate) last: Mutex<SessionCounters>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not make every later call panic too.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Makes the descriptor readable (a system call only if it was not).
    pub(crate) fn arm(&self) {
        if !self.armed.swap(true, Ordering::AcqRel) {
            let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        }
    }

    /// Makes it unreadable (a system call only if it was readable).
    pub(crate) fn clear(&self) {
        if self.armed.swap(false, Ordering::AcqRel) {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&self.wake, &mut b);
        }
    }
}

/// The reader thread: ring → queue, until stopped or the session ends.
///
/// Records are handed to the tool in batches, as libpcap's ring hands out
/// blocks: at once in immediate mode, else when `HANDOFF` bytes are there
/// or the oldest record has waited `hold` (the tool's timeout, at most
/// `MAX_HOLD`). While records wait, the thread naps (see [`nap`]) instead
/// of sleeping on the daemon's wake-up pipe, so a busy session costs a few
/// wake-ups of each thread per `hold`, not a wake-up, a lock hand-over and
/// four system calls per chunk the daemon appends.
pub(crate) fn reader(shared: Arc<Shared>) {
    let mut staging: Vec<u8> = Vec::new();
    // When the oldest record in `staging` was taken, and under which filter.
    let mut since: Option<Instant> = None;
    let mut staged_gen = 0u64;
    let capacity = lock(&shared.session).ring_capacity();
    let mut pump = Pump::new(None);
    while !shared.stop.load(Ordering::Acquire) {
        {
            let mut q = lock(&shared.queue);
            while q.buf.len() >= q.limit && !shared.stop.load(Ordering::Acquire) {
                q = shared
                    .cond
                    .wait_timeout(q, SLICE)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        if let (Some(t), Some(hold)) = (since, shared.hold) {
            std::thread::sleep(nap(t.elapsed(), hold, staging.len(), capacity));
        }
        // Never hold the session while taking the queue (see `Live::stats`).
        let (generation, result, ended) = {
            let mut s = lock(&shared.session);
            let generation = shared.generation.load(Ordering::Acquire);
            if generation != staged_gen {
                // Taken under the filter the tool replaced.
                staging.clear();
                since = None;
                staged_gen = generation;
            }
            let mut take = |b: Batch<'_>| {
                if let Batch::Records(r) = b {
                    staging.extend_from_slice(r.bytes);
                }
            };
            let mut result = if since.is_some() {
                Ok(false)
            } else {
                s.wait(SLICE)
            }
            .and_then(|_| pump.drain(&mut s, &mut take));
            let mut ended = None;
            if matches!(result, Ok(0)) {
                // The session's end as every client sees it (ringcap-client's
                // loop): what the daemon delivered before it is taken too.
                match pump.finish(&mut s, &mut take) {
                    Ok(end) => ended = end,
                    Err(e) => result = Err(e),
                }
            }
            (generation, result, ended)
        };
        if !staging.is_empty() && since.is_none() {
            since = Some(Instant::now());
        }
        let over = result.is_err() || ended.is_some();
        let due = match (since, shared.hold) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(t), Some(hold)) => staging.len() >= HANDOFF || t.elapsed() >= hold,
        };
        if !due && !over {
            continue;
        }
        let mut q = lock(&shared.queue);
        if generation == shared.generation.load(Ordering::Acquire) && !staging.is_empty() {
            if q.buf.is_empty() {
                std::mem::swap(&mut q.buf, &mut staging);
            } else {
                q.buf.extend_from_slice(&staging);
            }
        }
        staging.clear();
        since = None;
        if let Err(e) = result {
            q.end = Some(End::Failed(e.to_string()));
        } else if let Some(end) = ended {
            *lock(&shared.last) = end.counters;
            q.end = Some(End::Ended(end.reason));
        }
        let stop = q.end.is_some();
        if !q.buf.is_empty() || stop {
            shared.arm();
            shared.cond.notify_all();
        }
        drop(q);
        if stop {
            return;
        }
    }
}

/// How long the reader may sleep with `staged` bytes taken over `elapsed`
/// and waiting: until the batch is due, but short enough that the ring
/// (`capacity` bytes) fills to a quarter at most at the rate seen so far,
/// and never under `STEP`.
fn nap(elapsed: Duration, hold: Duration, staged: usize, capacity: usize) -> Duration {
    let secs = elapsed.as_secs_f64().max(STEP.as_secs_f64());
    let rate = staged as f64 / secs;
    let safe = if rate > 0.0 {
        Duration::from_secs_f64((capacity as f64 / 4.0 / rate).min(1.0))
    } else {
        hold
    };
    hold.saturating_sub(elapsed).min(safe).max(STEP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naps_end_when_the_batch_is_due_and_before_the_ring_fills() {
        let ms = Duration::from_millis;
        // Slow traffic: sleep until the batch is due.
        assert_eq!(nap(ms(10), ms(50), 1_000, 4 << 20), ms(40));
        // Due already: the shortest step.
        assert_eq!(nap(ms(60), ms(50), 1_000, 4 << 20), STEP);
        // 100 MB/s into a 4 MiB ring: a quarter fills in about 10 ms.
        let n = nap(ms(5), ms(50), 500_000, 4 << 20);
        assert!(n > ms(9) && n < ms(12), "{n:?}");
        // Faster than the ring can take: never below the step.
        assert_eq!(nap(ms(1), ms(50), 100 << 20, 64 << 10), STEP);
        // Nothing staged yet (not called so, but sound): until due.
        assert_eq!(nap(Duration::ZERO, ms(20), 0, 4 << 20), ms(20));
    }
}
