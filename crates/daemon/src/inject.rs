//! A session's injection: its grant's guard (the policy for injected
//! frames, `ringcap_inject::guard`) and its scheduler, made on the session's
//! first `Inject` request. Every frame of a request gets exactly one report:
//! refused by the guard or a full queue right away, or sent / missed /
//! failed by the scheduler.

use ringcap_inject::guard::Identity;
use ringcap_inject::{now_ns, Guard, Job, Sender};
use ringcap_policy::InjectGrant;
use ringcap_proto::{InjectFrame, InjectReport, InjectStatus};

/// Frames a session may have waiting for their time.
pub const QUEUE: usize = 4096;

/// A session's injection state.
pub struct Injecting {
    guard: Guard,
    sender: Sender,
}

impl Injecting {
    /// Starts injecting on `iface` under `grant`.
    pub fn start(grant: &InjectGrant, iface: &str) -> Result<Injecting, String> {
        Ok(Injecting {
            guard: Guard::new(grant, Identity::of(iface)?)?,
            sender: Sender::start(iface, QUEUE)?,
        })
    }

    /// Checks and queues `frames` (the daemon's own copies).
    pub fn submit(&mut self, frames: Vec<InjectFrame>) {
        for f in frames {
            let at = if f.at_ns == 0 { now_ns() } else { f.at_ns };
            let mut data = f.data;
            let refusal = match self.guard.check(&mut data, at) {
                Err(r) => Some(format!("{}: {}", r.rule, r.reason)),
                Ok(()) => self
                    .sender
                    .submit(Job {
                        tag: f.tag,
                        at_ns: f.at_ns,
                        tolerance_ns: f.tolerance_ns,
                        frame: data,
                    })
                    .err()
                    .map(|_| format!("queue: {QUEUE} frames are already waiting")),
            };
            if let Some(reason) = refusal {
                self.sender.report(InjectReport {
                    tag: f.tag,
                    requested_ns: at,
                    sent_ns: None,
                    status: InjectStatus::Refused,
                    reason: Some(reason),
                });
            }
        }
    }

    /// Up to `max` reports.
    pub fn reports(&self, max: usize) -> Vec<InjectReport> {
        self.sender.take_reports(max)
    }
}
