//! The messages themselves: what a client may ask ([`Request`]) and what the
//! daemon may answer ([`Response`]), as plain serde types.
//!
//! Conventions, the same for every type here:
//! - `#[serde(deny_unknown_fields)]` everywhere: a misspelt or invented key is
//!   an error, never silently ignored (ignoring it would let a client believe
//!   an option it misspelt is in force).
//! - Enums are tagged by `"type"` in `snake_case` at the top level
//!   (`{"type":"set_filter","filter":"tcp"}`); the small choice enums inside
//!   a message are externally tagged (`{"bytes":96}`, `{"headers":{"max":128}}`).
//! - `Option` fields are left out of the encoding when `None`; on decoding
//!   both a missing key and `null` mean `None`. Every other field is required.
//! - Unit variants (`{"type":"stats"}`) refuse extra keys too. serde's
//!   internally tagged enums ignore `deny_unknown_fields` for unit variants
//!   (`{"type":"stats","x":1}` would decode), so each one is read through
//!   `no_fields`, which deserializes an empty struct that denies them.
//! - serde also reads a struct from a JSON array of its fields in order
//!   (`["set_filter","tcp"]`). That form is left alone: it yields the same
//!   typed values and goes through the same bounds, so it widens nothing, and
//!   refusing it would take a hand-written deserializer for every type.
//!   Encoders always write objects.
//! - Types only: the bounds on every value live in [`crate::validate`], and
//!   the only way bytes become these types is [`crate::decode_request`] /
//!   [`crate::decode_response`], which run serde and then the bounds.

pub use crate::flows::{FlowRequest, FlowSettings};
use serde::{Deserialize, Deserializer, Serialize};

mod inject;
mod response;

pub use inject::{InjectFrame, InjectReport, InjectStatus};
pub use response::{Response, ENDED_AS_ASKED};

/// Which way a message goes; the header's kind field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum MessageKind {
    /// Client → daemon.
    Request = 1,
    /// Daemon → client.
    Response = 2,
}

impl MessageKind {
    /// "request" or "response".
    pub fn name(self) -> &'static str {
        match self {
            MessageKind::Request => "request",
            MessageKind::Response => "response",
        }
    }
}

/// A client's request to the daemon (client → daemon).
///
/// Every request travels without file descriptors; the daemon closes any
/// that come with one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Start a capture session on this connection.
    ///
    /// Answered by [`Response::Accepted`] (with the ring's descriptors) or
    /// [`Response::Refused`]. One session per connection: closing the
    /// connection ends it.
    Open {
        /// Interfaces to capture on: 1 to 16 names, none repeated.
        interfaces: Vec<String>,
        /// The client's own filter as text (tcpdump syntax, may be empty):
        /// a label for listings and audit lines only. The daemon never
        /// compiles it; what it enforces is `program`.
        filter: String,
        /// The client's filter compiled by the client (libpcap, for frames as
        /// in a file). Required when `filter` is not empty; absent means
        /// every packet the grant allows. The daemon validates it and ANDs it
        /// with the grant's framework program.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        program: Option<FilterProgram>,
        /// How much of each packet to keep (the grant may cap it further).
        snaplen: SnapRequest,
        /// Sampling the client asks for (the grant may force more).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sample: Option<SampleRequest>,
        /// Format of the records in the ring or the dump files.
        format: OutputFormat,
        /// Daemon dump mode: the daemon writes the packets to files it names
        /// under the user's directory instead of (only) the ring.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dump: Option<DumpRequest>,
        /// End the session after this many seconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_s: Option<f64>,
        /// End the session after this many packets delivered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u64>,
        /// Ask for the compressed header stream instead of raw records: each
        /// chunk of the ring is then one self-contained ringcap-compress
        /// block (nanosecond timestamps, the interface's link type).
        compress: bool,
        /// Only inject on the interface: capture nothing into the ring.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        inject_only: bool,
        /// Flow records of what the session keeps, in the ring (the grant
        /// must say `flows = true`); with `packets: false` no packets at
        /// all. Absent: packets only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flows: Option<FlowRequest>,
    },
    /// Replace the client's filter of the running session (still ANDed with
    /// the framework filter).
    SetFilter {
        /// The new filter as text (a label, as in `Open`).
        filter: String,
        /// The new filter compiled by the client (as in `Open`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        program: Option<FilterProgram>,
    },
    /// Ask for the session's counters: answered by [`Response::Stats`].
    #[serde(deserialize_with = "no_fields")]
    Stats,
    /// Close the current dump file and start the next one now: answered by
    /// [`Response::DumpPublished`].
    #[serde(deserialize_with = "no_fields")]
    Checkpoint,
    /// Push out whatever the daemon holds for this session (partial ring
    /// batch, buffered dump data): answered by [`Response::Ok`].
    #[serde(deserialize_with = "no_fields")]
    Flush,
    /// End the session: answered by [`Response::Ended`].
    #[serde(deserialize_with = "no_fields")]
    Close,
    /// List the caller's dump files: answered by [`Response::Dumps`].
    #[serde(deserialize_with = "no_fields")]
    ListDumps,
    /// Open one of the caller's dump files: answered by [`Response::Dump`]
    /// with a read-only descriptor.
    FetchDump {
        /// A bare file name in the caller's dump directory.
        name: String,
    },
    /// Delete one of the caller's dump files: answered by [`Response::Ok`].
    DeleteDump {
        /// A bare file name in the caller's dump directory.
        name: String,
    },
    /// List sessions (the caller's own; root sees all): answered by
    /// [`Response::Sessions`].
    #[serde(deserialize_with = "no_fields")]
    Sessions,
    /// Send frames on the session's (first) interface at the times given;
    /// the grant's `[grant.inject]` decides what may leave. Answered by
    /// [`Response::Ok`] once every frame is refused or queued; each frame
    /// then gets exactly one [`InjectReport`] (ask with `InjectReports`).
    /// A session with too many frames whose reports it has not asked for
    /// (4096 + 1024 for ringcapd) gets [`Response::Error`] instead, and none
    /// of the request's frames is taken or reported.
    Inject {
        /// The frames, in sending order.
        frames: Vec<InjectFrame>,
    },
    /// Ask for the transmit reports ready so far: answered by
    /// [`Response::InjectReports`].
    #[serde(deserialize_with = "no_fields")]
    InjectReports,
    /// Stored packets of one interface (the files of the policy's
    /// `[[store]]` for it) in a time window, held to the grant as a live
    /// session would be. Answered by [`Response::Retrieving`] with one
    /// descriptor, the read end of a pipe carrying the answer as a pcap
    /// stream, then by [`Response::Retrieved`] once the stream has ended; or
    /// by [`Response::Refused`]. Not on a connection with a session.
    Retrieve {
        /// The interface whose stored packets are asked for.
        interface: String,
        /// The client's filter as text: a label, and what the daemon's
        /// index planner narrows the files to read by (a Rust parser; no
        /// client text reaches libpcap in the daemon). What decides is
        /// `program`.
        filter: String,
        /// The client's filter compiled by the client (as in `Open`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        program: Option<FilterProgram>,
        /// How much of each packet to keep (the grant may cap it further).
        snaplen: SnapRequest,
        /// Packets at or after this time, ns since the epoch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_ns: Option<u64>,
        /// Packets before this time, ns since the epoch (absent: now).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before_ns: Option<u64>,
        /// Most bytes of answer wanted (the grant may cap it further).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
    },
}

/// A classic BPF program compiled by the client (hostile text never reaches
/// libpcap inside the daemon: clients compile, the daemon validates).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterProgram {
    /// The instructions, 16 lowercase hex digits each: `code` (4), `jt`
    /// (2), `jf` (2), `k` (8), big-endian, at most
    /// [`MAX_CLIENT_INSTRUCTIONS`](crate::validate::MAX_CLIENT_INSTRUCTIONS).
    pub code: String,
    /// The program tests VLAN tags and expects them in the frame's bytes
    /// (libpcap's offline code for `vlan`): the daemon runs it on frames
    /// with their tags put back. Only the client's own program sees that
    /// view; the framework decides on the frame as the kernel delivered it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tagged: bool,
}

impl FilterProgram {
    /// Encodes `(code, jt, jf, k)` instructions.
    pub fn encode(instructions: &[(u16, u8, u8, u32)], tagged: bool) -> FilterProgram {
        use std::fmt::Write;
        let mut code = String::with_capacity(instructions.len() * 16);
        for (c, jt, jf, k) in instructions {
            let _ = write!(code, "{c:04x}{jt:02x}{jf:02x}{k:08x}");
        }
        FilterProgram { code, tagged }
    }

    /// Decodes the instructions; `None` if `code` is not a whole number of
    /// 16-digit lowercase hex instructions.
    pub fn instructions(&self) -> Option<Vec<(u16, u8, u8, u32)>> {
        let b = self.code.as_bytes();
        if !b.len().is_multiple_of(16)
            || !b
                .iter()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        {
            return None;
        }
        let hex = |s: &[u8]| u32::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok();
        b.chunks_exact(16)
            .map(|i| {
                Some((
                    hex(&i[0..4])? as u16,
                    hex(&i[4..6])? as u8,
                    hex(&i[6..8])? as u8,
                    hex(&i[8..16])?,
                ))
            })
            .collect()
    }
}

/// How much of each packet to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SnapRequest {
    /// Keep at most this many bytes: `{"bytes": 96}`, 1..=262144.
    Bytes(u32),
    /// Keep exactly the protocol headers, never more than `max` bytes:
    /// `{"headers": {"max": 128}}`, max 14..=65535.
    Headers {
        /// Upper bound on the bytes kept.
        max: u32,
    },
}

/// Sampling: keep one packet (or one flow) in `N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SampleRequest {
    /// One packet in N: `{"packets": N}`, 1..=2^31.
    Packets(u32),
    /// One flow in N (by a direction-independent 5-tuple hash):
    /// `{"flows": N}`, 1..=2^31.
    Flows(u32),
}

/// The format of the records the client receives or the daemon writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputFormat {
    /// Classic pcap.
    Pcap,
    /// pcapng.
    Pcapng,
}

/// Daemon dump mode: when to rotate to a new file (any limit reached
/// rotates; none given means one file for the whole session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpRequest {
    /// Rotate after this many seconds (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotate_seconds: Option<u64>,
    /// Rotate after this many packets (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotate_packets: Option<u64>,
    /// Rotate after this many bytes (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotate_bytes: Option<u64>,
}

/// The settings in force for a session after the policy was applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Effective {
    /// Interfaces captured on.
    pub interfaces: Vec<String>,
    /// The client's filter, as given.
    pub filter: String,
    /// The grant's framework filter every client filter is ANDed with.
    pub framework_filter: String,
    /// Snap length after the grant's cap.
    pub snaplen: SnapRequest,
    /// Sampling after the grant's forcing (`None`: every packet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<SampleRequest>,
    /// Packet fields hidden from the client (e.g. `payload`, `ip.id`).
    pub hide: Vec<String>,
    /// Whether addresses are anonymized (Crypto-PAn).
    pub anonymize: bool,
    /// Rate limit in packets per second, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_packets_per_second: Option<u64>,
    /// Rate limit in bits per second, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bits_per_second: Option<u64>,
    /// Longest the session may run, in seconds, if limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_s: Option<f64>,
    /// Index of the grant the session was admitted under.
    pub grant: u32,
    /// Chunks in the ring are compressed blocks (ringcap-compress, one
    /// self-contained block per chunk) instead of raw records.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compress: bool,
    /// The ringcap-compress format version of those blocks; absent from
    /// daemons that sent only version 2 (so clients too old for a newer
    /// version refuse the reply as an unknown field instead of misreading
    /// the blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress_format: Option<u16>,
    /// Flow records in force (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<FlowSettings>,
}

/// The shared-memory ring's geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingInfo {
    /// Size in bytes of the data memfd (≥ 1).
    pub capacity: u64,
}

/// Per-session counters, the same identities as `ringcap capture` reports.
///
/// Every packet the interface showed the session ends in exactly one of
/// "not accepted by the filters", sampled out, rate-limited, dropped
/// (kernel ring or client ring), delivered or, for a session of flow
/// records only, taken into its flows (`packets_to_flows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionCounters {
    /// Packets the interface(s) saw.
    pub packets_seen_by_interface: u64,
    /// Packets accepted by the framework and client filters.
    pub packets_filter_accepted: u64,
    /// Accepted packets removed by sampling.
    pub packets_sampled_out: u64,
    /// Packets over the grant's rate limit (counted, not delivered).
    pub packets_rate_limited: u64,
    /// Packets dropped in the kernel's ring (the daemon fell behind).
    pub packets_dropped_ring: u64,
    /// Packets dropped because this client's ring was full.
    pub packets_dropped_client: u64,
    /// Packets written to the client's ring (or dump).
    pub packets_delivered: u64,
    /// Bytes written to the client's ring (or dump).
    pub bytes_delivered: u64,
    /// Flow records written to the client's ring (absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flows_delivered: u64,
    /// Flow records exported early because the session's table was full.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flows_evicted: u64,
    /// Flow records dropped because the client's ring was full.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flows_dropped_client: u64,
    /// Packets a session of flow records only took into its flow tables:
    /// for it, the end of a packet that others have in `packets_delivered`
    /// (accepted = sampled out + dropped + rate limited + delivered + this).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub packets_to_flows: u64,
}

/// One of the caller's dump files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpFile {
    /// Bare file name.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Last modification, seconds since the Unix epoch.
    pub modified_s: u64,
}

/// One session, as listed by [`Request::Sessions`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionInfo {
    /// The daemon's id for the session.
    pub session: u64,
    /// The owner's uid (from SO_PEERCRED).
    pub uid: u32,
    /// Interfaces captured on.
    pub interfaces: Vec<String>,
    /// The client's filter.
    pub filter: String,
    /// Counters so far.
    pub counters: SessionCounters,
    /// Start time, seconds since the Unix epoch.
    pub started_s: u64,
}

impl Request {
    /// How many file descriptors travel with this request: always 0.
    pub fn fds_expected(&self) -> usize {
        0
    }

    /// The `"type"` tag, for logs.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Request::Open { .. } => "open",
            Request::SetFilter { .. } => "set_filter",
            Request::Stats => "stats",
            Request::Checkpoint => "checkpoint",
            Request::Flush => "flush",
            Request::Close => "close",
            Request::ListDumps => "list_dumps",
            Request::FetchDump { .. } => "fetch_dump",
            Request::DeleteDump { .. } => "delete_dump",
            Request::Sessions => "sessions",
            Request::Inject { .. } => "inject",
            Request::InjectReports => "inject_reports",
            Request::Retrieve { .. } => "retrieve",
        }
    }
}

/// Deserializes the rest of a unit variant's object (everything but
/// `"type"`) as a struct with no fields, so that any key is an error.
fn no_fields<'de, D: Deserializer<'de>>(deserializer: D) -> Result<(), D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct NoFields {}
    NoFields::deserialize(deserializer).map(|NoFields {}| ())
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
