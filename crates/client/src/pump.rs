//! The per-session loop: how a client drains its session's ring, sleeps,
//! counts, and ends — one place for the command line (`ringcap capture
//! --daemon`), the C ABI (so also Python) and the libpcap shim, so they all
//! behave the same way.
//!
//! A [`Pump`] is driven by its owner's loop: [`Pump::turn`] waits (or naps
//! while packets keep coming), hands every batch in the ring to a closure,
//! and when the session is over returns its [`End`] — after handing over
//! what the ring still held (the daemon counted those as delivered). The
//! session is over when the daemon ended it or went away, or when the
//! client stops it: [`Pump::stop`] (a signal, an output that failed, such
//! as a broken pipe, the tool closing its handle) or the packet count
//! reached. Owners that read on their own schedule (a C caller's
//! `ringcap_dispatch`) use the parts: [`Pump::drain`] and [`Pump::finish`].

use crate::{ClientError, Records, Session, SessionCounters};
use std::time::{Duration, Instant};

/// How long the loop naps between drains while packets keep coming: the
/// daemon then fills several chunks per nap (and skips the wake-up write),
/// where waiting would take one wake-up per chunk. A session's ring holds
/// far more than a nap's worth at any rate the daemon can deliver.
pub const BUSY_NAP: Duration = Duration::from_millis(5);

/// Why the client ends its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Interrupted (a signal) or closed by its owner.
    Interrupted,
    /// The packet count was reached.
    Count,
    /// Where the packets go failed (a broken pipe, a full disk): why.
    Output(String),
}

/// Who ended a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndedBy {
    /// The daemon (its policy's duration or count, a reload, its own end,
    /// or the connection to it closed).
    Daemon,
    /// The client, for this reason.
    Client(Stop),
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// Who ended it.
    pub by: EndedBy,
    /// The daemon's words for it.
    pub reason: String,
    /// The daemon's final counters for the session.
    pub counters: SessionCounters,
}

impl End {
    /// True if the session ended as its client asked (a stop, its count or
    /// duration) or at its grant's `max_duration`; false if it failed, the
    /// output failed, or the daemon ended it otherwise (a reload that no
    /// longer allows it, the dump quota, the daemon stopping, the
    /// connection lost): a command exits non-zero then.
    pub fn as_asked(&self) -> bool {
        match &self.by {
            EndedBy::Client(Stop::Interrupted | Stop::Count) => true,
            EndedBy::Client(Stop::Output(_)) => false,
            EndedBy::Daemon => self.reason.starts_with(ringcap_proto::ENDED_AS_ASKED),
        }
    }
}

/// One batch out of the ring.
pub enum Batch<'a> {
    /// Packet records (at most the count's rest).
    Records(Records<'a>),
    /// A compressed block as the daemon coded it (see [`Pump::blocks`]).
    Block(&'a [u8], ringcap_compress::BlockInfo),
}

/// What a pump has read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Packets handed over.
    pub packets: u64,
    /// Their bytes on the wire (and those after the count; not counted for
    /// compressed blocks).
    pub wire_bytes: u64,
    /// Packets read after the count was reached (delivered by the daemon,
    /// not handed over).
    pub after_count: u64,
}

/// The loop state of one session (see the module docs).
#[derive(Debug)]
pub struct Pump {
    /// Packets still to hand over (`u64::MAX`: no count).
    left: u64,
    counted: bool,
    blocks: bool,
    /// The last drain found packets: nap instead of waiting.
    busy: bool,
    stop: Option<Stop>,
    /// What was read.
    pub tally: Tally,
    last_stats: Option<(Instant, SessionCounters)>,
}

impl Pump {
    /// A pump that hands over `count` packets (`None`: all) and then ends
    /// the session.
    pub fn new(count: Option<u64>) -> Pump {
        Pump {
            left: count.unwrap_or(u64::MAX),
            counted: count.is_some(),
            blocks: false,
            busy: false,
            stop: None,
            tally: Tally::default(),
            last_stats: None,
        }
    }

    /// Hands over a compressed stream's blocks as they are
    /// ([`Batch::Block`]) instead of decoded records; only for a session
    /// whose stream is compressed and a pump without a count.
    pub fn blocks(mut self) -> Pump {
        self.blocks = true;
        self
    }

    /// Ends the session at the next [`Pump::turn`] or [`Pump::finish`]
    /// (the first reason given is kept).
    pub fn stop(&mut self, why: Stop) {
        self.stop.get_or_insert(why);
    }

    /// Whether the client is ending the session (stopped, or count reached).
    pub fn stopping(&self) -> bool {
        self.stop.is_some() || (self.counted && self.left == 0)
    }

    /// Hands every batch in the ring now to `f` (records cut at the count:
    /// those after it are only counted), then gives the space back to the
    /// daemon; returns how many packets `f` got.
    pub fn drain(
        &mut self,
        s: &mut Session,
        mut f: impl FnMut(Batch<'_>),
    ) -> Result<u64, ClientError> {
        let before = self.tally.packets;
        if self.blocks && !self.counted {
            let n = s.blocks(|block, info| f(Batch::Block(block, info)))?;
            self.tally.packets += n;
        } else {
            let (left, tally) = (&mut self.left, &mut self.tally);
            s.chunks(|records| {
                tally.wire_bytes += records.wire_bytes;
                let (head, rest) = records.split(*left);
                if *left != u64::MAX {
                    *left -= head.count;
                }
                tally.after_count += rest;
                tally.packets += head.count;
                if head.count > 0 {
                    f(Batch::Records(head));
                }
            })?;
        }
        let n = self.tally.packets - before;
        self.busy = n > 0;
        Ok(n)
    }

    /// Waits for packets: naps [`BUSY_NAP`] if the last drain found some,
    /// else sleeps on the ring for up to `idle`; not at all when the
    /// client is stopping.
    pub fn wait(&mut self, s: &mut Session, idle: Duration) -> Result<(), ClientError> {
        if self.stopping() {
            return Ok(());
        }
        if self.busy {
            std::thread::sleep(BUSY_NAP);
        } else {
            s.wait(idle)?;
        }
        Ok(())
    }

    /// If the session is over — the daemon ended it (asked without
    /// blocking) or the client is stopping (then the daemon is asked to
    /// end it, and this waits until it has) — hands what the ring still
    /// holds to `f` and returns the end; else `None`.
    pub fn finish(
        &mut self,
        s: &mut Session,
        f: impl FnMut(Batch<'_>),
    ) -> Result<Option<End>, ClientError> {
        let (by, (reason, counters)) = if let Some(end) = s.ended() {
            (EndedBy::Daemon, end)
        } else if self.stopping() {
            let why = self.stop.clone().unwrap_or(Stop::Count);
            (EndedBy::Client(why), s.stop()?)
        } else {
            return Ok(None);
        };
        // What the daemon delivered until the end is still in the ring.
        self.drain(s, f)?;
        Ok(Some(End {
            by,
            reason,
            counters,
        }))
    }

    /// One turn of a session's loop: [`wait`](Pump::wait), hand what the
    /// ring holds to `f`, then [`finish`](Pump::finish).
    pub fn turn(
        &mut self,
        s: &mut Session,
        idle: Duration,
        mut f: impl FnMut(Batch<'_>),
    ) -> Result<Option<End>, ClientError> {
        self.wait(s, idle)?;
        self.drain(s, &mut f)?;
        self.finish(s, f)
    }

    /// The session's counters, asked of the daemon when `every` has passed
    /// since the last time (`None` before that; the last answer if it
    /// did not answer now).
    pub fn poll_stats(&mut self, s: &mut Session, every: Duration) -> Option<SessionCounters> {
        if self.last_stats.is_some_and(|(at, _)| at.elapsed() < every) {
            return None;
        }
        let asked = s.stats().ok();
        let keep = asked
            .or(self.last_stats.map(|(_, c)| c))
            .unwrap_or_default();
        self.last_stats = Some((Instant::now(), keep));
        Some(keep)
    }

    /// The daemon's counters as last asked by [`Pump::poll_stats`] (zeros
    /// before).
    pub fn last_stats(&self) -> SessionCounters {
        self.last_stats.map(|(_, c)| c).unwrap_or_default()
    }
}
