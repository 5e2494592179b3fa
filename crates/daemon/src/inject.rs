//! A session's injection: its grant's guard (the shape of injected frames,
//! `ringcap_inject::guard`), its scheduler, and the rate limit of its user
//! on its interface, made on the session's first `Inject` request. Every
//! frame of a request gets exactly one report: refused by the guard or a
//! full queue right away, or sent / missed / refused by the rate / failed
//! by the scheduler when its time comes. A request that would leave more
//! than [`UNREAD`] reports untaken is refused whole (no frame taken, no
//! report made): the reports wait in the daemon's memory.
//!
//! The rate is the grant's per user and interface, across sessions: the
//! buckets live in [`RATES`], one per (uid, interface index), and every
//! session of that user on that interface charges the same one when a
//! frame leaves (`ringcap_inject::rate`). A new session does not bring a
//! full bucket with it: an entry is forgotten only once nobody holds it and
//! it has refilled to its depth (when a fresh one would be no different).
//! The first grant that allows a user on an interface decides its rights,
//! so its sessions there share one grant's rates; a reload retunes the
//! bucket to the new grant's as each session looks at it.
//!
//! A reloaded policy reaches a running session through
//! [`Injecting::hold_to`]: new rates retune the shared buckets (never
//! refilling them); a new filter or settable list rebuilds the guard and
//! refuses the frames still queued under the old one; a policy that no
//! longer grants injection ends it, with the reason in every later report.

use ringcap_inject::rate::{monotonic_ns, RateLimit, Rates};
use ringcap_inject::{now_ns, Guard, Identity, Job, Sender};
use ringcap_policy::{InjectGrant, SettableField};
use ringcap_proto::{InjectFrame, InjectReport, InjectStatus};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Frames a session may have waiting for their time.
pub const QUEUE: usize = 4096;

/// Frames a session may have whose reports it has not taken (queued ones
/// included): each report is held in the daemon's memory until the client
/// asks for it, so a client that never asks is refused more frames instead
/// of growing the daemon (hostile review qa-d26 #3: refused frames' reports
/// piled up at ~80 MB/s).
pub const UNREAD: usize = QUEUE + 1024;

/// The rate limits of the daemon's users: one per (uid, interface index),
/// shared by all of that user's sessions on that interface.
static RATES: Mutex<Option<Limits>> = Mutex::new(None);

/// Rate limits by (uid, interface index).
type Limits = HashMap<(u32, i32), Arc<RateLimit>>;

/// The rate limit of `uid` on the interface of `identity`, held to `rates`.
fn rate_limit(uid: u32, identity: &Identity, rates: Rates) -> Arc<RateLimit> {
    let now = monotonic_ns();
    let mut all = RATES.lock().unwrap_or_else(|e| e.into_inner());
    let all = all.get_or_insert_with(HashMap::new);
    // Forget buckets nobody holds that have refilled: they give nothing a
    // new one would not. (Bounded by users × interfaces either way.)
    all.retain(|_, l| Arc::strong_count(l) > 1 || !l.idle(now));
    let l = all
        .entry((uid, identity.index))
        .or_insert_with(|| Arc::new(RateLimit::new(rates)))
        .clone();
    l.retune(rates);
    l
}

/// What of a grant the guard is built from (a reload that changes only
/// the rates keeps the guard and its session's first values).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    filter: String,
    settable: Vec<SettableField>,
}

impl Shape {
    fn of(grant: &InjectGrant) -> Shape {
        Shape {
            filter: grant.filter.clone(),
            settable: grant.settable.clone(),
        }
    }
}

/// A session's injection state.
pub struct Injecting {
    /// The guard, or why injection ended (a reload that no longer grants it).
    guard: Result<Guard, String>,
    shape: Shape,
    iface: String,
    max_len: usize,
    limit: Arc<RateLimit>,
    sender: Sender,
}

impl Injecting {
    /// Starts injecting on `iface` under `grant` for user `uid`.
    pub fn start(grant: &InjectGrant, iface: &str, uid: u32) -> Result<Injecting, String> {
        let identity = Identity::of(iface)?;
        let limit = rate_limit(uid, &identity, Rates::of(grant, identity.max_len()));
        Ok(Injecting {
            guard: Ok(Guard::new(grant, identity)?),
            shape: Shape::of(grant),
            iface: iface.to_string(),
            max_len: identity.max_len(),
            sender: Sender::start_limited(iface, QUEUE, limit.clone())?,
            limit,
        })
    }

    /// Holds the session to `grant` (the inject rights of its grant in the
    /// policy now in force; None = no longer allowed). Returns what changed,
    /// for the audit log.
    pub fn hold_to(&mut self, grant: Option<&InjectGrant>) -> Option<String> {
        let Some(grant) = grant else {
            if self.guard.is_err() {
                return None;
            }
            let why = "policy: the policy was reloaded and no longer allows injection";
            self.guard = Err(why.into());
            self.sender.withdraw_queued(why);
            return Some("injection ended: the reloaded policy does not allow it".into());
        };
        let rates = Rates::of(grant, self.max_len);
        let retuned = self.limit.rates() != rates;
        self.limit.retune(rates);
        let shape = Shape::of(grant);
        if shape == self.shape && self.guard.is_ok() {
            return retuned.then(|| {
                format!(
                    "injection rate now {} frames/s (bits/s: {:?}), burst {}",
                    rates.packets_per_second, rates.bits_per_second, rates.burst
                )
            });
        }
        self.shape = shape;
        self.guard = Identity::of(&self.iface)
            .and_then(|id| Guard::new(grant, id))
            .map_err(|e| format!("policy: the reloaded grant's guard cannot be built: {e}"));
        self.sender.withdraw_queued(
            "policy: the policy was reloaded before this frame's time; frames queued under the old grant are not sent",
        );
        Some(format!(
            "injection held to the reloaded grant (filter {:?})",
            grant.filter
        ))
    }

    /// Checks and queues `frames` (the daemon's own copies); refuses the
    /// whole request, and makes no report for it, when the session's
    /// unread reports would pass [`UNREAD`].
    pub fn submit(&mut self, frames: Vec<InjectFrame>) -> Result<(), String> {
        let unread = self.sender.unread();
        if unread + frames.len() > UNREAD {
            return Err(format!(
                "{unread} frames' reports are not taken yet (at most {UNREAD}): ask for them \
                 (InjectReports) before sending more; none of these {} frames was taken",
                frames.len()
            ));
        }
        for f in frames {
            let at = if f.at_ns == 0 { now_ns() } else { f.at_ns };
            let mut data = f.data;
            let refusal = match &mut self.guard {
                Err(why) => Some(why.clone()),
                Ok(g) => match g.check(&mut data) {
                    Err(r) => Some(format!("{}: {}", r.rule, r.reason)),
                    Ok(rewritten) => self
                        .sender
                        .submit(Job {
                            tag: f.tag,
                            at_ns: f.at_ns,
                            tolerance_ns: f.tolerance_ns,
                            frame: data,
                            rewritten,
                        })
                        .err()
                        .map(|_| format!("queue: {QUEUE} frames are already waiting")),
                },
            };
            if let Some(reason) = refusal {
                self.sender.report(InjectReport {
                    tag: f.tag,
                    requested_ns: at,
                    sent_ns: None,
                    status: InjectStatus::Refused,
                    reason: Some(reason),
                    rewritten: Vec::new(),
                });
            }
        }
        Ok(())
    }

    /// Up to `max` reports.
    pub fn reports(&self, max: usize) -> Vec<InjectReport> {
        self.sender.take_reports(max)
    }
}
