//! The daemon's answer ([`Response`]) and what each answer says of itself
//! (the descriptors that travel with it, its `"type"` tag). Separate from
//! the requests because it is what a client decodes, as a request is what
//! the daemon decodes; the values both sides carry stay in the parent.

use super::inject::InjectReport;
use super::{is_zero, no_fields, DumpFile, Effective, RingInfo, SessionCounters, SessionInfo};
use serde::{Deserialize, Serialize};

/// The first words of [`Response::Ended`]'s reason when a session ended
/// as its client asked (its duration or packet count) or at its grant's
/// `max_duration`: a client exits 0 on them, and not on any other end (a
/// failure, a reload that no longer allows the session, the dump quota,
/// the daemon stopping).
pub const ENDED_AS_ASKED: &str = "the capture ended as asked";

/// The daemon's answer to a request (daemon → client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Response {
    /// The session is open, with the settings actually in force.
    ///
    /// Sent with exactly [`ACCEPTED_FDS`](crate::ACCEPTED_FDS) descriptors,
    /// in this order:
    /// 0. ([`ACCEPTED_FD_RING`](crate::ACCEPTED_FD_RING)) the ring's data
    ///    memfd (sealed; map it read-only),
    /// 1. ([`ACCEPTED_FD_CONSUMER`](crate::ACCEPTED_FD_CONSUMER)) the
    ///    consumer-position memfd (the client writes its read position there;
    ///    the daemon treats it as untrusted),
    /// 2. ([`ACCEPTED_FD_EVENT`](crate::ACCEPTED_FD_EVENT)) an eventfd the
    ///    daemon signals after a batch of records.
    Accepted {
        /// The daemon's id for this session (as shown by `Sessions`).
        session: u64,
        /// What the policy made of the request.
        effective: Effective,
        /// The shared-memory ring's geometry.
        ring: RingInfo,
    },
    /// The request was refused by the policy.
    Refused {
        /// Index of the grant that refused it, if one matched at all.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant: Option<u32>,
        /// The rule that refused it (e.g. `grant[0].interfaces`).
        rule: String,
        /// Why, in words.
        reason: String,
    },
    /// The session's counters.
    Stats {
        /// Counters since the session started.
        counters: SessionCounters,
    },
    /// The request was carried out.
    #[serde(deserialize_with = "no_fields")]
    Ok,
    /// The request could not be carried out (or could not be decoded).
    Error {
        /// What went wrong, in words.
        message: String,
    },
    /// The session ended (on `Close`, its duration or count limit, a policy
    /// reload that no longer allows it, or an error).
    Ended {
        /// Why, in words.
        reason: String,
        /// Final counters.
        counters: SessionCounters,
    },
    /// A dump file was closed and is ready to fetch.
    DumpPublished {
        /// Its bare file name.
        name: String,
    },
    /// The caller's dump files.
    Dumps {
        /// The files, in the daemon's order (oldest first).
        files: Vec<DumpFile>,
    },
    /// A dump file, opened read-only.
    ///
    /// Sent with exactly [`DUMP_FDS`](crate::DUMP_FDS) descriptor: a
    /// read-only descriptor of the file.
    Dump {
        /// Its bare file name.
        name: String,
        /// Its size when it was opened.
        bytes: u64,
    },
    /// Sessions the caller may see.
    Sessions {
        /// One entry per session.
        sessions: Vec<SessionInfo>,
        /// Sessions the caller may see that did not fit in this reply (the
        /// reply is bounded whatever other users run; absent when 0).
        #[serde(default, skip_serializing_if = "is_zero")]
        more: u64,
    },
    /// Transmit reports, in the order the frames were given (at most
    /// [`MAX_REPORTS`](crate::validate::MAX_REPORTS) per message; ask again
    /// for more).
    InjectReports {
        /// The reports.
        reports: Vec<InjectReport>,
    },
    /// A retrieval was admitted: the answer follows on the pipe.
    ///
    /// Sent with exactly [`RETRIEVING_FDS`](crate::RETRIEVING_FDS)
    /// descriptor: the read end of a pipe carrying a pcap stream
    /// (nanosecond timestamps), which ends (EOF) when the answer is complete
    /// or cut; [`Response::Retrieved`] then says which.
    Retrieving {
        /// What the policy made of the request (one interface).
        effective: Effective,
        /// The window in force: packets at or after this time (ns)...
        after_ns: u64,
        /// ... and before this one (ns).
        before_ns: u64,
        /// Most bytes the answer may hold.
        max_bytes: u64,
    },
    /// A retrieval's stream has ended.
    Retrieved {
        /// Packets written.
        packets: u64,
        /// Bytes written (pcap header and records).
        bytes: u64,
        /// Files looked at.
        files: u64,
        /// Why the answer was cut short (a limit, an error), if it was:
        /// what came is whole records, but not all that matched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cut: Option<String>,
    },
}

impl Response {
    /// How many file descriptors travel with this response:
    /// [`ACCEPTED_FDS`](crate::ACCEPTED_FDS) with `Accepted`,
    /// [`DUMP_FDS`](crate::DUMP_FDS) with `Dump`, none otherwise.
    pub fn fds_expected(&self) -> usize {
        match self {
            Response::Accepted { .. } => crate::ACCEPTED_FDS,
            Response::Dump { .. } => crate::DUMP_FDS,
            Response::Retrieving { .. } => crate::RETRIEVING_FDS,
            _ => 0,
        }
    }

    /// The `"type"` tag, for logs.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Response::Accepted { .. } => "accepted",
            Response::Refused { .. } => "refused",
            Response::Stats { .. } => "stats",
            Response::Ok => "ok",
            Response::Error { .. } => "error",
            Response::Ended { .. } => "ended",
            Response::DumpPublished { .. } => "dump_published",
            Response::Dumps { .. } => "dumps",
            Response::Dump { .. } => "dump",
            Response::Sessions { .. } => "sessions",
            Response::InjectReports { .. } => "inject_reports",
            Response::Retrieving { .. } => "retrieving",
            Response::Retrieved { .. } => "retrieved",
        }
    }
}
