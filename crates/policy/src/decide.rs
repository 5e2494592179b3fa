//! The one admission point: [`decide`] takes who is asking (from the
//! kernel), what they ask ([`OpenRequest`], the `Open` message's fields as
//! they came off the wire and passed its bounds) and the policy, and returns
//! either a [`Decision`] — everything the daemon enforces for the session,
//! in one object — or a [`Refusal`] naming the rule.
//!
//! Nothing downstream re-reads the policy or compiles text: the hub runs the
//! decision's [`SessionFilter`] (the grant's framework program compiled when
//! the policy was loaded, the client's program checked here, the `exclude`
//! rule), the ring sink its rates, the dump writer its quota, the inject
//! guard its `inject` rules. A `SetFilter` and a policy reload call
//! [`decide`] again with the session's request and apply the new decision,
//! or end the session with the refusal.
//!
//! The client's filter arrives compiled (the client runs libpcap in its own
//! process); its text is a label. The program is checked
//! ([`ringcap_stages::session::client_program`]) before anything runs it.

use crate::admit::{
    cap_snap, combined_filter_text, force_sampling, rate_text, sampling_text, snap_text, Refusal,
    MAX_CLIENT_FILTER_LEN,
};
use crate::fields::HideField;
use crate::policy::{Grant, InjectGrant, Peer, Policy};
use crate::retrieve::{Retrieval, RetrieveRequest};
use crate::units;
use ringcap_proto::{
    DumpRequest, FlowRequest, FlowSettings, OutputFormat, SampleRequest, SnapRequest,
};
use ringcap_stages::{Instruction, SampleMode, Sampling, SessionFilter, Snap};
use std::fmt;
use std::time::Duration;

/// Smallest shared-memory ring a session gets.
pub const MIN_RING: u64 = 64 << 10;

/// What a client asks for: the `Open` request's fields, moved from the
/// wire message unchanged (the codec has checked their bounds).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenRequest {
    /// Interfaces.
    pub interfaces: Vec<String>,
    /// The client's filter text: a label (audit, listings, file headers).
    pub filter: String,
    /// The client's compiled filter, `None` for every packet.
    pub program: Option<Vec<Instruction>>,
    /// The client's program expects VLAN tags in the frame's bytes.
    pub program_tagged: bool,
    /// Snap length asked for.
    pub snap: SnapRequest,
    /// Sampling asked for.
    pub sample: Option<SampleRequest>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Files written by the daemon instead of packets to the client.
    pub dump: Option<DumpRequest>,
    /// Format of the dump files.
    pub format: OutputFormat,
    /// Only inject: no capture.
    pub inject_only: bool,
    /// Compressed blocks in the ring instead of raw records.
    pub compress: bool,
    /// Flow records asked for (and whether packets too).
    pub flows: Option<FlowRequest>,
}

/// Everything enforced for one session, decided in one place.
#[derive(Debug, Clone)]
pub struct Decision {
    /// 0-based index of the grant that admitted it.
    pub grant: usize,
    /// What was asked (kept to decide again on a reload).
    pub request: OpenRequest,
    /// The grant's framework filter text (display only).
    pub framework_text: String,
    /// What the hub runs on each packet.
    pub filter: SessionFilter,
    /// Snap length after the cap.
    pub snap: Snap,
    /// Sampling after the grant's forced sampling.
    pub sampling: Sampling,
    /// Fields masked before the client sees a packet.
    pub hide: Vec<HideField>,
    /// Addresses anonymized with the policy's key.
    pub anonymize: bool,
    /// Packets per second (None = unlimited).
    pub max_packets_per_second: Option<u64>,
    /// Bits per second (None = unlimited).
    pub max_bits_per_second: Option<u64>,
    /// Longest the session may run: the shorter of asked and granted.
    pub duration: Option<Duration>,
    /// Bytes of the session's shared-memory ring (a power of two).
    pub ring_size: u64,
    /// Bytes of dump files the user may keep (0 = no dumps).
    pub dump_quota: u64,
    /// Injection rights (None = none).
    pub inject: Option<InjectGrant>,
    /// Flow records in force (None = none): timeouts raised to the grant's
    /// minimum, table size cut to the grant's `max_flows`.
    pub flows: Option<FlowSettings>,
    /// Packets reach the client (false: flow records only).
    pub packets: bool,
    /// Flows the user's tables may hold at once, all sessions together (the
    /// grant's `max_flows`; the daemon's budget holds the user to it).
    pub flow_budget: u32,
}

impl Decision {
    /// True if `other` enforces the same things (a reload that changes
    /// nothing for this session leaves it alone).
    pub fn same_as(&self, other: &Decision) -> bool {
        self.grant == other.grant
            && self.filter == other.filter
            && self.snap == other.snap
            && self.sampling == other.sampling
            && self.hide == other.hide
            && self.anonymize == other.anonymize
            && self.max_packets_per_second == other.max_packets_per_second
            && self.max_bits_per_second == other.max_bits_per_second
            && self.duration == other.duration
            && self.ring_size == other.ring_size
            && self.dump_quota == other.dump_quota
            && self.framework_text == other.framework_text
            && self.flows == other.flows
            && self.packets == other.packets
            && self.flow_budget == other.flow_budget
    }
}

/// One line for the audit log: every setting in force.
impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "grant {}, interfaces {}, filter \"{}\", exclude {}, snap {}, sampling {}, hide {}, anonymize {}, rate {}, duration {}, dump quota {}, ring {}, packets {}, flows {}",
            self.grant + 1,
            self.request.interfaces.join(","),
            combined_filter_text(&self.framework_text, &self.request.filter),
            if self.filter.exclude.is_some() { "yes" } else { "no" },
            snap_text(self.snap),
            sampling_text(self.sampling),
            if self.hide.is_empty() {
                "none".to_string()
            } else {
                self.hide.iter().map(|h| h.name()).collect::<Vec<_>>().join(",")
            },
            if self.anonymize { "yes" } else { "no" },
            rate_text(self.max_packets_per_second, self.max_bits_per_second),
            self.duration
                .map_or("unlimited".to_string(), units::format_duration),
            if self.dump_quota == 0 {
                "none".to_string()
            } else {
                units::format_size(self.dump_quota)
            },
            units::format_size(self.ring_size),
            if self.packets { "yes" } else { "no" },
            self.flows.map_or("none".to_string(), |f| format!(
                "active {} s, idle {} s, table {}",
                f.active_timeout_s, f.idle_timeout_s, f.max_flows
            )),
        )
    }
}

fn snap_of(s: SnapRequest) -> Snap {
    match s {
        SnapRequest::Bytes(n) => Snap::Bytes(n),
        SnapRequest::Headers { max } => Snap::Headers { max },
    }
}

fn sampling_of(s: Option<SampleRequest>) -> Sampling {
    match s {
        None | Some(SampleRequest::Packets(1)) | Some(SampleRequest::Flows(1)) => Sampling::All,
        Some(SampleRequest::Packets(n)) => Sampling::Packets {
            n,
            mode: SampleMode::Random,
        },
        Some(SampleRequest::Flows(n)) => Sampling::Flows { n },
    }
}

/// Decides `req` from `peer` under `policy`. Default deny: every interface
/// must be allowed by one and the same grant (one framework per session).
pub fn decide(policy: &Policy, peer: &Peer, req: &OpenRequest) -> Result<Decision, Refusal> {
    let deny = |reason: String| Refusal {
        grant: None,
        rule: "default deny",
        reason,
    };
    let Some(first) = req.interfaces.first() else {
        return Err(deny("no interface given".into()));
    };
    let grant = match policy.grant_for(peer, first) {
        Some((_, g)) => g,
        None => {
            // A grant names the client but not this interface: its
            // `interfaces` rule refused, which tells the client more.
            return Err(match policy.grants.iter().find(|g| g.applies_to(peer)) {
                Some(g) => refusal(g, "interfaces", not_allowed(g, first)),
                None => deny(format!(
                    "no grant allows uid {} (gid {}, groups {:?}) to capture on \"{first}\"",
                    peer.uid, peer.gid, peer.groups
                )),
            });
        }
    };
    for iface in &req.interfaces[1..] {
        match policy.grant_for(peer, iface) {
            Some((_, g)) if g.index == grant.index => {}
            Some((_, g)) => {
                return Err(refusal(
                    g,
                    "interfaces",
                    format!(
                        "{first} and {iface} fall under different grants ({} and {}): open one session for each",
                        grant.index + 1,
                        g.index + 1
                    ),
                ))
            }
            None => return Err(refusal(grant, "interfaces", not_allowed(grant, iface))),
        }
    }
    decide_under(grant, req)
}

fn refusal(grant: &Grant, rule: &'static str, reason: String) -> Refusal {
    Refusal {
        grant: Some(grant.index),
        rule,
        reason,
    }
}

pub(crate) fn not_allowed(grant: &Grant, iface: &str) -> String {
    format!(
        "interface \"{iface}\" is not one this grant allows ({})",
        grant.interfaces.join(", ")
    )
}

/// Holds `req` to `grant` (which allows every interface of it).
pub(crate) fn decide_under(grant: &Grant, req: &OpenRequest) -> Result<Decision, Refusal> {
    let refuse = |rule: &'static str, reason: String| refusal(grant, rule, reason);
    if req.filter.len() > MAX_CLIENT_FILTER_LEN {
        return Err(refuse(
            "filter",
            format!(
                "the filter is {} bytes long; at most {MAX_CLIENT_FILTER_LEN} are taken",
                req.filter.len()
            ),
        ));
    }
    let flows = decide_flows(
        grant,
        req.flows.as_ref(),
        req.dump.is_some(),
        req.inject_only,
    )?;
    let packets = flows.is_none_or(|f| f.packets);
    let sampling =
        force_sampling(sampling_of(req.sample), grant.sampling).map_err(|(r, w)| refuse(r, w))?;
    // A session of flow records only keeps the protocol headers of each
    // packet for its flow table (masks and anonymization run on them as on
    // any packet; the octets come from the IP header): no payload is ever
    // copied for it, whatever snap length it asked for.
    let snap = if packets {
        cap_snap(snap_of(req.snap), grant.max_snap)
    } else {
        cap_snap(
            Snap::Headers {
                max: crate::policy::HEADERS_MAX,
            },
            grant.max_snap,
        )
    };
    let snaplen = snap.kernel_snaplen();
    let client =
        match &req.program {
            None if !req.filter.trim().is_empty() => return Err(refuse(
                "filter",
                "the filter came as text only: this daemon takes filters compiled by the client"
                    .into(),
            )),
            None => ringcap_stages::Program::accept_all(snaplen),
            Some(p) => ringcap_stages::session::client_program(p, snaplen)
                .map_err(|e| refuse("filter", format!("the compiled filter is refused: {e}")))?,
        };
    let mut framework = grant.capture_program.clone();
    framework.set_snaplen(snaplen);
    // When the grant hides bytes (fields, addresses, what lies past its snap
    // cap, or the payload of a session of flow records only) the client
    // judges packets as delivered, after the cut, the masks and
    // anonymization (see ringcap_stages::session): a filter run on the
    // packet as captured could select by what it never sees.
    let hides_bytes =
        grant.rewrites() || grant.max_snap != Snap::Bytes(crate::policy::MAX_SNAPLEN) || !packets;
    let filter = SessionFilter::new(
        framework,
        grant.capture_tagged,
        client,
        req.program_tagged,
        grant.exclude_rule.clone(),
        hides_bytes,
    )
    .map_err(|e| refuse("filter", e))?;
    if req.dump.is_some() {
        if grant.dump_quota == 0 {
            return Err(refuse(
                "dump_quota",
                "the grant has no dump_quota: daemon dumps are not allowed".into(),
            ));
        }
        if req.interfaces.len() != 1 {
            return Err(refuse(
                "dump",
                "a daemon dump records one interface: open one dump per interface".into(),
            ));
        }
    }
    let duration = match (req.duration, grant.max_duration) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(Decision {
        grant: grant.index,
        request: req.clone(),
        framework_text: grant.capture_filter.clone(),
        filter,
        snap,
        sampling,
        hide: grant.hide.clone(),
        anonymize: grant.anonymize,
        max_packets_per_second: grant.max_packets_per_second,
        max_bits_per_second: grant.max_bits_per_second,
        duration,
        ring_size: grant.ring_size.max(MIN_RING).next_power_of_two(),
        dump_quota: grant.dump_quota,
        inject: grant.inject.clone(),
        flows,
        packets,
        flow_budget: grant.flow.max_flows,
    })
}

/// What a session gets of flows and packets under `grant`: the flow
/// settings in force (`None`: no flow records), or the refusal.
pub(crate) fn decide_flows(
    grant: &Grant,
    request: Option<&FlowRequest>,
    dump: bool,
    inject_only: bool,
) -> Result<Option<FlowSettings>, Refusal> {
    let g = &grant.flow;
    let refuse = |rule: &'static str, reason: String| Refusal {
        grant: Some(grant.index),
        rule,
        reason,
    };
    let Some(r) = request else {
        if !g.packets && !inject_only {
            return Err(refuse(
                "packets",
                if dump {
                    "this grant gives flow records only (packets = false): no daemon dumps of packets"
                        .into()
                } else {
                    "this grant gives flow records only (packets = false): ask for flow records without packets"
                        .into()
                },
            ));
        }
        return Ok(None);
    };
    if !g.flows {
        return Err(refuse(
            "flows",
            "this grant does not give flow records (flows = true is not set)".into(),
        ));
    }
    if r.packets && !g.packets {
        return Err(refuse(
            "packets",
            "this grant gives flow records only (packets = false): ask with packets off".into(),
        ));
    }
    Ok(Some(FlowSettings {
        active_timeout_s: r.active_timeout_s.max(g.min_timeout_s),
        idle_timeout_s: r.idle_timeout_s.max(g.min_timeout_s),
        max_flows: r.max_flows.min(g.max_flows),
        packets: r.packets,
    }))
}

/// Decides a retrieval `req` from `peer` under `policy` at time `now_ns`:
/// [`crate::decide`]'s [`Decision`] for the same filter and snap on the
/// interface, and the [`Retrieval`] it allows. Default deny.
pub fn decide_retrieve(
    policy: &Policy,
    peer: &Peer,
    req: &RetrieveRequest,
    now_ns: u64,
) -> Result<(Decision, Retrieval), Refusal> {
    let open = OpenRequest {
        interfaces: vec![req.interface.clone()],
        filter: req.filter.clone(),
        program: req.program.clone(),
        program_tagged: req.program_tagged,
        snap: req.snap,
        sample: None,
        duration: None,
        count: None,
        dump: None,
        format: OutputFormat::Pcap,
        inject_only: false,
        compress: false,
        // Packets: refused by decide() under a flows-only grant.
        flows: None,
    };
    let d = decide(policy, peer, &open)?;
    let refuse = |rule: &'static str, reason: String| Refusal {
        grant: Some(d.grant),
        rule,
        reason,
    };
    let Some(grant) = policy.grants.get(d.grant) else {
        return Err(refuse("default deny", "the grant is gone".into()));
    };
    let Some(rights) = &grant.retrieve else {
        return Err(refuse(
            "retrieve",
            "the grant has no [grant.retrieve]: stored packets are not served to this user".into(),
        ));
    };
    if d.sampling != Sampling::All {
        return Err(refuse(
            if matches!(d.sampling, Sampling::Flows { .. }) {
                "sample_flows"
            } else {
                "sample"
            },
            "the grant forces sampling, which a retrieval of stored packets does not do".into(),
        ));
    }
    let Some(store) = policy.stores.iter().find(|s| s.interface == req.interface) else {
        return Err(refuse(
            "store",
            format!("no [[store]] holds packets of \"{}\"", req.interface),
        ));
    };
    let after = req.after_ns.unwrap_or(0);
    let before = req.before_ns.unwrap_or(now_ns);
    if before <= after {
        return Err(refuse(
            "retrieve.max_window",
            "the time window is empty (--before must be later than --after)".into(),
        ));
    }
    let span = before - after;
    let max = u64::try_from(rights.max_window.as_nanos()).unwrap_or(u64::MAX);
    if span > max {
        let allowed = units::format_duration(rights.max_window);
        let why = match req.after_ns {
            // Without a start the window reaches back to 1970: say how to
            // give one, not how long that is.
            None => format!(
                "no start was given (--after), so the window reaches back to 1970; this grant allows at most {allowed}: give --after (RFC 3339 or seconds since the epoch; the last {allowed} is --after $(($(date +%s) - {})))",
                rights.max_window.as_secs()
            ),
            Some(_) => format!(
                "the time window is {} long; this grant allows at most {allowed} (give --after and --before closer together)",
                units::format_duration(Duration::from_nanos(span)),
            ),
        };
        return Err(refuse("retrieve.max_window", why));
    }
    let use_index = !grant.rewrites()
        && rights
            .index
            .unwrap_or(grant.capture_filter.trim().is_empty() && grant.exclude_rule.is_none());
    Ok((
        d,
        Retrieval {
            dir: store.dir.clone(),
            after_ns: after,
            before_ns: before,
            max_bytes: req
                .max_bytes
                .map_or(rights.max_bytes, |b| b.min(rights.max_bytes)),
            max_queries: rights.max_queries,
            max_time: rights.max_time,
            use_index,
        },
    ))
}
