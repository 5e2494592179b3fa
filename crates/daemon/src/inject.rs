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
    /// Frames queued since the session started (for the audit log).
    pub queued: u64,
    /// Frames refused since the session started.
    pub refused: u64,
}

impl Injecting {
    /// Starts injecting on `iface` under `grant`.
    pub fn start(grant: &InjectGrant, iface: &str) -> Result<Injecting, String> {
        let identity = Identity::of(iface)?;
        let mtu = std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(1500);
        Ok(Injecting {
            guard: Guard::new(grant, identity, mtu, now_ns())?,
            sender: Sender::start(iface, QUEUE)?,
            queued: 0,
            refused: 0,
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
            match refusal {
                Some(reason) => {
                    self.refused += 1;
                    self.sender.report(InjectReport {
                        tag: f.tag,
                        requested_ns: at,
                        sent_ns: None,
                        status: InjectStatus::Refused,
                        reason: Some(reason),
                    });
                }
                None => self.queued += 1,
            }
        }
    }

    /// Up to `max` reports.
    pub fn reports(&self, max: usize) -> Vec<InjectReport> {
        self.sender.take_reports(max)
    }
}
