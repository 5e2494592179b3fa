//! Retrieval of stored packets under policy: where the stored captures of
//! each interface are (`[[store]]`), what a grant allows of them
//! (`[grant.retrieve]`), and [`decide_retrieve`], the sibling of
//! [`crate::decide`] that holds a retrieval request to the policy.
//!
//! A retrieval is admitted by [`crate::decide`] itself: the request becomes
//! the `Open` request of a one-interface capture session with the same
//! filter and snap length, so the same grant is chosen by the same rules and
//! the same [`Decision`] comes out (framework program ANDed with the
//! client's, `exclude`, snap cap, masks, anonymization). What is particular
//! to stored packets is decided after it, here, and returned next to it as a
//! [`Retrieval`]: the store, the time window and the bounds. Default deny: a
//! grant without `[grant.retrieve]` allows no retrieval, an interface
//! without a `[[store]]` has nothing to retrieve, and a grant that forces
//! sampling is refused (a retrieval does not sample).
//!
//! ```toml
//! [[store]]
//! interface = "eth0"
//! dir = "/srv/pcap/eth0"     # rotated, indexed files of root's `ringcap capture`
//!
//! [[grant]]
//! users = ["alice"]
//! interfaces = ["eth0"]
//! [grant.retrieve]
//! max_window = "1h"          # longest --after..--before span (required)
//! max_bytes = "1G"           # most bytes one answer holds (required)
//! max_queries = 2            # retrievals one user runs at once (default 1, at most 16)
//! max_time = "5m"            # longest a retrieval may take (default 5m)
//! ```
//!
//! Both tables refuse keys they do not know. `dir` must be absolute; the
//! daemon checks at each retrieval that it is a real directory (no symbolic
//! link anywhere on its path) that only its owner, root or the daemon's
//! user, can write.

use crate::admit::Refusal;
use crate::decide::{decide, Decision, OpenRequest};
use crate::error::PolicyError;
use crate::policy::{valid_interface_name, Peer, Policy, Source};
use crate::units;
use ringcap_proto::{OutputFormat, SnapRequest};
use ringcap_stages::{Instruction, Sampling};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use toml::{Spanned, Value};

/// Most retrievals one user may run at once, whatever a grant says.
pub const MAX_QUERIES: u32 = 16;
/// Longest a retrieval may take when the grant does not say (`max_time`).
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(300);

/// One `[[store]]`: the directory of an interface's stored captures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    /// The interface whose packets the files hold.
    pub interface: String,
    /// The directory (absolute).
    pub dir: PathBuf,
    /// Line of the `[[store]]` header.
    pub line: usize,
}

/// `[grant.retrieve]`: what a grant allows of stored packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrieveGrant {
    /// Longest time window one retrieval may ask for.
    pub max_window: Duration,
    /// Most bytes (pcap header and records) one answer may hold.
    pub max_bytes: u64,
    /// Retrievals one user may run at once.
    pub max_queries: u32,
    /// Longest one retrieval may take.
    pub max_time: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    interface: Option<Spanned<String>>,
    dir: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetrieve {
    max_window: Option<Spanned<Value>>,
    max_bytes: Option<Spanned<Value>>,
    max_queries: Option<Spanned<Value>>,
    max_time: Option<Spanned<Value>>,
}

fn duration(src: &Source, v: &Spanned<Value>, key: &str) -> Result<Duration, PolicyError> {
    let d = match v.get_ref() {
        Value::String(s) => {
            units::parse_duration(s).map_err(|e| src.err(v.span(), format!("{key}: {e}")))?
        }
        _ => {
            return Err(src.err(
                v.span(),
                format!("{key}: expected a duration string such as \"90s\", \"30m\" or \"1h\""),
            ))
        }
    };
    if d.is_zero() {
        return Err(src.err(v.span(), format!("{key}: must be longer than 0")));
    }
    Ok(d)
}

pub(crate) fn stores(src: &Source, raw: &[Spanned<RawStore>]) -> Result<Vec<Store>, PolicyError> {
    let mut out: Vec<Store> = Vec::new();
    for s in raw {
        let here = s.span();
        let line = PolicyError::at(src.0, here.clone(), "").line;
        let r = s.get_ref();
        let Some(i) = &r.interface else {
            return Err(src.err(here, "store: needs interface = \"NAME\""));
        };
        if !valid_interface_name(i.get_ref()) {
            return Err(src.err(
                i.span(),
                format!(
                    "store.interface: \"{}\" is not an interface name",
                    i.get_ref()
                ),
            ));
        }
        if out.iter().any(|o| &o.interface == i.get_ref()) {
            return Err(src.err(
                i.span(),
                format!(
                    "store.interface: \"{}\" has a store already: one directory per interface",
                    i.get_ref()
                ),
            ));
        }
        let Some(dir) = src.path(&r.dir, "store.dir")? else {
            return Err(src.err(here, "store: needs dir = \"/ABSOLUTE/PATH\""));
        };
        out.push(Store {
            interface: i.get_ref().clone(),
            dir,
            line,
        });
    }
    Ok(out)
}

pub(crate) fn retrieve_grant(
    src: &Source,
    r: &Spanned<RawRetrieve>,
) -> Result<RetrieveGrant, PolicyError> {
    let here = r.span();
    let r = r.get_ref();
    let Some(w) = &r.max_window else {
        return Err(src.err(
            here,
            "retrieve.max_window: required: the longest time window one retrieval may ask for",
        ));
    };
    let Some(b) = &r.max_bytes else {
        return Err(src.err(
            here,
            "retrieve.max_bytes: required: the most bytes one answer may hold",
        ));
    };
    let max_bytes = src.size(b, "retrieve.max_bytes")?;
    if max_bytes == 0 {
        return Err(src.err(b.span(), "retrieve.max_bytes: must be more than 0"));
    }
    let max_queries = match &r.max_queries {
        None => 1,
        Some(q) => {
            let n = src.count(q, "retrieve.max_queries", 1)?;
            if n > u64::from(MAX_QUERIES) {
                return Err(src.err(
                    q.span(),
                    format!("retrieve.max_queries: at most {MAX_QUERIES}"),
                ));
            }
            n as u32
        }
    };
    Ok(RetrieveGrant {
        max_window: duration(src, w, "retrieve.max_window")?,
        max_bytes,
        max_queries,
        max_time: r
            .max_time
            .as_ref()
            .map(|t| duration(src, t, "retrieve.max_time"))
            .transpose()?
            .unwrap_or(DEFAULT_MAX_TIME),
    })
}

/// `ringcapd --check`'s line for a grant's retrieval rights.
pub(crate) fn describe_grant(r: Option<&RetrieveGrant>) -> String {
    match r {
        None => "not allowed".into(),
        Some(r) => format!(
            "stored packets, windows of at most {}, answers of at most {}, {} at once, each at most {}",
            units::format_duration(r.max_window),
            units::format_size(r.max_bytes),
            r.max_queries,
            units::format_duration(r.max_time)
        ),
    }
}

/// What a client asks of an interface's stored packets (the `Retrieve`
/// message's fields, bounds checked by the codec).
#[derive(Debug, Clone, PartialEq)]
pub struct RetrieveRequest {
    /// The interface whose stored packets are asked for.
    pub interface: String,
    /// The client's filter text: a label for the audit log, and what the
    /// index planner (Rust, bounded) narrows the files to read by. Never
    /// compiled by the daemon.
    pub filter: String,
    /// The client's compiled filter (what decides).
    pub program: Option<Vec<Instruction>>,
    /// The client's program expects VLAN tags in the frame's bytes.
    pub program_tagged: bool,
    /// Snap length asked for (the grant caps it).
    pub snap: SnapRequest,
    /// Packets at or after this time (ns since the epoch).
    pub after_ns: Option<u64>,
    /// Packets before this time (ns since the epoch); absent: now.
    pub before_ns: Option<u64>,
    /// Most bytes the client wants (the grant caps it).
    pub max_bytes: Option<u64>,
}

/// What is particular to a retrieval, decided next to its [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retrieval {
    /// The store's directory.
    pub dir: PathBuf,
    /// Packets at or after this time (ns).
    pub after_ns: u64,
    /// Packets before this time (ns).
    pub before_ns: u64,
    /// Most bytes of the answer (the smaller of asked and granted).
    pub max_bytes: u64,
    /// Retrievals the user may run at once.
    pub max_queries: u32,
    /// Longest the retrieval may take.
    pub max_time: Duration,
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
        return Err(refuse(
            "retrieve.max_window",
            format!(
                "the time window is {} long; this grant allows at most {} (give --after and --before closer together)",
                units::format_duration(Duration::from_nanos(span)),
                units::format_duration(rights.max_window)
            ),
        ));
    }
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
        },
    ))
}
