//! The scheduler: one thread per injecting session (or `ringcap inject`),
//! fed through a bounded queue, that sends each frame at its requested
//! time and reports when it left.
//!
//! Rate: a sender started with a [`RateLimit`] charges it for each frame
//! right before handing it to the kernel, on the monotonic clock read then
//! — whatever time the client asked for and however late it tolerates —
//! and refuses a frame that finds no tokens (`max_packets_per_second` or
//! `max_bits_per_second`). This is the only place injected frames are
//! counted against a rate.
//!
//! Withdrawal: [`Sender::withdraw_queued`] (a reloaded policy) refuses every
//! frame queued so far that has not left yet, when its turn comes.
//!
//! Timing: an absolute-time `clock_nanosleep` on CLOCK_REALTIME (with the
//! thread's timer slack at 1 ns) to [`SPIN_NS`] before the deadline, then a
//! spin on the clock; a frame already later than its tolerance is reported
//! missed and not sent. The kernel's software transmit timestamp (taken as
//! the frame leaves for the driver) is the reported send time. Frames go
//! out in the order given: one whose time is earlier than its
//! predecessor's goes as soon as it can (or is missed).

use crate::now_ns;
use crate::rate::{monotonic_ns, RateLimit};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, TrySendError};
use nix::sys::time::TimeSpec;
use nix::time::{clock_nanosleep, ClockId, ClockNanosleepFlags};
use ringcap_proto::{InjectReport, InjectStatus};
use ringcap_source::inject::Injector;
use ringcap_source::interface::Interface;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long before a deadline the sender stops sleeping and spins.
pub const SPIN_NS: u64 = 150_000;

/// How long a sent frame's report waits for its transmit timestamp before
/// it goes out without one. The sender never waits for a stamp itself: it
/// collects them between frames, so a late stamp delays no frame.
const TIMESTAMP_WAIT_NS: u64 = 100_000_000;

/// One frame to send.
#[derive(Debug, Clone)]
pub struct Job {
    /// The client's tag.
    pub tag: u64,
    /// When (CLOCK_REALTIME ns; 0 = now).
    pub at_ns: u64,
    /// How late it may still go.
    pub tolerance_ns: u64,
    /// The frame, as checked.
    pub frame: Vec<u8>,
    /// The fields the guard rewrote (told in the report).
    pub rewritten: crate::Rewritten,
}

/// A running scheduler on one interface.
pub struct Sender {
    jobs: Option<crossbeam_channel::Sender<Job>>,
    reports: Arc<Mutex<VecDeque<InjectReport>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Jobs queued so far (the queue is FIFO: the thread's count of jobs
    /// taken is the same numbering).
    submitted: AtomicU64,
    withdrawn: Arc<Withdrawn>,
    /// Frames queued or reported refused whose reports the client has not
    /// taken yet: what this sender's reports will hold at most.
    unread: AtomicUsize,
}

/// Jobs numbered below `before` are refused with `reason` when their turn
/// comes.
#[derive(Default)]
struct Withdrawn {
    before: AtomicU64,
    reason: Mutex<String>,
}

impl Withdrawn {
    fn reason(&self) -> String {
        lock(&self.reason).clone()
    }
}

impl Sender {
    /// Opens a sending socket on `iface` (needs CAP_NET_RAW) and starts the
    /// scheduler with room for `queue` frames, with no rate limit (root's
    /// `ringcap inject`).
    pub fn start(iface: &str, queue: usize) -> Result<Sender, String> {
        Sender::start_with(iface, queue, None)
    }

    /// [`Sender::start`], charging `limit` for every frame as it leaves.
    pub fn start_limited(
        iface: &str,
        queue: usize,
        limit: Arc<RateLimit>,
    ) -> Result<Sender, String> {
        Sender::start_with(iface, queue, Some(limit))
    }

    fn start_with(
        iface: &str,
        queue: usize,
        limit: Option<Arc<RateLimit>>,
    ) -> Result<Sender, String> {
        let i = Interface::open(iface).map_err(|e| e.to_string())?;
        let injector = Injector::open(&i).map_err(|e| e.to_string())?;
        injector
            .enable_tx_timestamps()
            .map_err(|e| format!("transmit timestamps on {iface}: {e}"))?;
        let (tx, rx) = bounded(queue.max(1));
        let reports = Arc::new(Mutex::new(VecDeque::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let withdrawn = Arc::new(Withdrawn::default());
        let thread = {
            let (reports, stop, withdrawn) = (reports.clone(), stop.clone(), withdrawn.clone());
            let ctx = Context {
                injector,
                jobs: rx,
                reports,
                stop,
                limit,
                withdrawn,
            };
            std::thread::Builder::new()
                .name("ringcap-inject".into())
                .spawn(move || run(ctx))
                .map_err(|e| format!("cannot start the sender: {e}"))?
        };
        Ok(Sender {
            jobs: Some(tx),
            reports,
            stop,
            thread: Some(thread),
            submitted: AtomicU64::new(0),
            withdrawn,
            unread: AtomicUsize::new(0),
        })
    }

    /// Queues `job`; gives it back when the queue is full (never waits).
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        match self.jobs.as_ref().map(|j| j.try_send(job)) {
            Some(Ok(())) => {
                self.submitted.fetch_add(1, Ordering::AcqRel);
                self.unread.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
            Some(Err(TrySendError::Full(j) | TrySendError::Disconnected(j))) => Err(j),
            None => unreachable!("jobs is only taken by Drop"),
        }
    }

    /// Adds a report made elsewhere (a refusal), so that every frame's
    /// report comes out of one queue.
    pub fn report(&self, r: InjectReport) {
        lock(&self.reports).push_back(r);
        self.unread.fetch_add(1, Ordering::AcqRel);
    }

    /// Frames queued or reported (refused) whose reports have not been
    /// taken: each has, or will have, a report in memory until
    /// [`Sender::take_reports`] takes it. A caller serving others bounds
    /// this before it accepts more frames.
    pub fn unread(&self) -> usize {
        self.unread.load(Ordering::Acquire)
    }

    /// Refuses, with `reason` (a rule, a colon, words), every frame queued
    /// so far that has not left yet: frames held to a grant no longer in
    /// force.
    pub fn withdraw_queued(&self, reason: &str) {
        *lock(&self.withdrawn.reason) = reason.to_string();
        self.withdrawn
            .before
            .store(self.submitted.load(Ordering::Acquire), Ordering::Release);
    }

    /// Up to `max` reports, oldest first.
    pub fn take_reports(&self, max: usize) -> Vec<InjectReport> {
        let mut q = lock(&self.reports);
        let n = q.len().min(max);
        self.unread.fetch_sub(n, Ordering::AcqRel);
        q.drain(..n).collect()
    }
}

impl Drop for Sender {
    /// Stops the scheduler: frames still queued are reported failed.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sleeps (then spins) until CLOCK_REALTIME reaches `t`; false if told to
/// stop first.
fn wait_until(t: u64, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = now_ns();
        if now >= t {
            return true;
        }
        let left = t - now;
        if left > SPIN_NS {
            // In steps of at most 50 ms, so a stop is noticed.
            let wake = (t - SPIN_NS).min(now + 50_000_000);
            let ts = TimeSpec::new((wake / 1_000_000_000) as _, (wake % 1_000_000_000) as _);
            let _ = clock_nanosleep(
                ClockId::CLOCK_REALTIME,
                ClockNanosleepFlags::TIMER_ABSTIME,
                &ts,
            );
        } else {
            std::hint::spin_loop();
        }
    }
}

/// What the scheduler thread owns.
struct Context {
    injector: Injector,
    jobs: Receiver<Job>,
    reports: Arc<Mutex<VecDeque<InjectReport>>>,
    stop: Arc<AtomicBool>,
    limit: Option<Arc<RateLimit>>,
    withdrawn: Arc<Withdrawn>,
}

fn run(ctx: Context) {
    let Context {
        injector,
        jobs,
        reports,
        stop,
        limit,
        withdrawn,
    } = ctx;
    // The number of the next job taken from the queue (as `submitted`).
    let mut taken: u64 = 0;
    // Wake-ups as close to the asked time as the kernel can (default slack
    // 50 µs), and not behind other threads where we may be real-time (it
    // spins at most SPIN_NS per frame, so it cannot starve the machine).
    let _ = nix::sys::prctl::set_timerslack(1);
    let _ = Injector::prefer_realtime();
    let mut next_id: u32 = 0;
    // Sent frames whose transmit timestamp has not been read yet, by id.
    let mut stamps = Stamps::default();
    let push = |r: InjectReport| lock(&reports).push_back(r);
    loop {
        stamps.collect(&injector, &push);
        let job = match jobs.recv_timeout(Duration::from_millis(10)) {
            Ok(j) => j,
            Err(RecvTimeoutError::Timeout) if !stop.load(Ordering::Relaxed) => continue,
            Err(_) => break,
        };
        let number = taken;
        taken += 1;
        let requested = if job.at_ns == 0 { now_ns() } else { job.at_ns };
        let report = |status, reason: Option<String>| InjectReport {
            tag: job.tag,
            requested_ns: requested,
            sent_ns: None,
            status,
            reason,
            rewritten: job.rewritten.names(),
        };
        if number < withdrawn.before.load(Ordering::Acquire) {
            push(report(InjectStatus::Refused, Some(withdrawn.reason())));
            continue;
        }
        // Collect stamps while there is time, then sleep and spin.
        if requested > now_ns() + 2 * SPIN_NS {
            stamps.collect(&injector, &push);
        }
        if !wait_until(requested, &stop) {
            push(report(
                InjectStatus::Failed,
                Some("the session ended before its time".into()),
            ));
            break;
        }
        let late = now_ns().saturating_sub(requested);
        if late > job.tolerance_ns {
            push(report(
                InjectStatus::Missed,
                Some(format!(
                    "{} µs late, tolerance {} µs",
                    late / 1000,
                    job.tolerance_ns / 1000
                )),
            ));
            continue;
        }
        // Withdrawn while it waited?
        if number < withdrawn.before.load(Ordering::Acquire) {
            push(report(InjectStatus::Refused, Some(withdrawn.reason())));
            continue;
        }
        // The rate, on the wire clock: charged now, as the frame leaves.
        if let Some(limit) = &limit {
            if let Err(over) = limit.charge(monotonic_ns(), job.frame.len()) {
                push(report(
                    InjectStatus::Refused,
                    Some(format!("{}: {}", over.rule, over.reason)),
                ));
                continue;
            }
        }
        if let Err(e) = injector.send(&job.frame) {
            push(report(InjectStatus::Failed, Some(format!("send: {e}"))));
            continue;
        }
        stamps
            .pending
            .push_back((next_id, now_ns(), report(InjectStatus::Sent, None)));
        next_id = next_id.wrapping_add(1);
    }
    // Whatever is still queued will not be sent.
    while let Ok(job) = jobs.try_recv() {
        push(InjectReport {
            tag: job.tag,
            requested_ns: job.at_ns,
            sent_ns: None,
            status: InjectStatus::Failed,
            reason: Some("the session ended before its time".into()),
            rewritten: job.rewritten.names(),
        });
    }
    let deadline = now_ns() + TIMESTAMP_WAIT_NS;
    while !stamps.pending.is_empty() && now_ns() < deadline {
        stamps.collect(&injector, &push);
        std::thread::sleep(Duration::from_micros(200));
    }
    stamps.flush(&push);
}

/// Reports of sent frames waiting for their transmit timestamps.
#[derive(Default)]
struct Stamps {
    /// (frame id, when it was sent, its report), oldest first.
    pending: VecDeque<(u32, u64, InjectReport)>,
}

impl Stamps {
    /// Reads every timestamp the kernel has ready and sends out the
    /// reports they complete; reports whose stamp is overdue (or was
    /// skipped: stamps come in sending order) go out without one.
    fn collect(&mut self, injector: &Injector, push: &impl Fn(InjectReport)) {
        while let Ok(Some((id, ts))) = injector.tx_timestamp() {
            while let Some((pid, _, _)) = self.pending.front() {
                let pid = *pid;
                if pid.wrapping_sub(id) as i32 > 0 {
                    break; // a stamp for a frame already reported
                }
                let (_, _, mut r) = self.pending.pop_front().expect("front exists");
                if pid == id {
                    r.sent_ns = Some(ts);
                    push(r);
                    break;
                }
                r.reason = Some("the kernel gave no transmit timestamp".into());
                push(r);
            }
        }
        let now = now_ns();
        while self
            .pending
            .front()
            .is_some_and(|(_, at, _)| now.saturating_sub(*at) > TIMESTAMP_WAIT_NS)
        {
            let (_, _, mut r) = self.pending.pop_front().expect("front exists");
            r.reason = Some("the kernel gave no transmit timestamp".into());
            push(r);
        }
    }

    /// Sends out every waiting report, stamp or not.
    fn flush(&mut self, push: &impl Fn(InjectReport)) {
        for (_, _, mut r) in self.pending.drain(..) {
            r.reason = Some("the kernel gave no transmit timestamp".into());
            push(r);
        }
    }
}
