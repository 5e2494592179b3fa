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
//! index = false              # narrow by the files' indexes (default: see below)
//! ```
//!
//! `index`: whether a retrieval may narrow what it reads by the stored
//! files' indexes. An index lists the keys of *every* stored packet, so
//! which groups of records a retrieval reads, and so how long it takes,
//! depends on packets the grant hides from the user (its `capture_filter`
//! and `exclude`): a user could time retrievals of a hidden host to learn
//! when it talked. The packets returned never depend on hidden ones (each
//! is held to the filter's keys on its own), only the time. The default
//! is therefore `true` only for a grant that hides no packet (no
//! `capture_filter`, no `exclude`); `index = true` accepts the timing
//! channel for a faster answer, `index = false` scans every file of the
//! window. A grant with `hide` or `anonymize` never narrows by index: the
//! client's filter is about the packets as delivered (see
//! `ringcap_stages::session`), the index's keys about the stored ones.
//!
//! Both tables refuse keys they do not know. `dir` must be absolute; the
//! daemon checks at each retrieval that it is a real directory (no symbolic
//! link anywhere on its path) that only its owner, root or the daemon's
//! user, can write.

use crate::error::PolicyError;
use crate::source::{valid_interface_name, Source};
use crate::units;
use ringcap_proto::SnapRequest;
use ringcap_stages::Instruction;
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
    /// `index`, if the grant says (see the module docs for the default).
    pub index: Option<bool>,
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
    index: Option<Spanned<Value>>,
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
        index: match &r.index {
            None => None,
            Some(v) => match v.get_ref() {
                Value::Boolean(b) => Some(*b),
                _ => return Err(src.err(v.span(), "retrieve.index: expected true or false")),
            },
        },
    })
}

/// `ringcapd --check`'s line for a grant's retrieval rights.
pub(crate) fn describe_grant(r: Option<&RetrieveGrant>) -> String {
    match r {
        None => "not allowed".into(),
        Some(r) => format!(
            "stored packets, windows of at most {}, answers of at most {}, {} at once, each at most {}{}",
            units::format_duration(r.max_window),
            units::format_size(r.max_bytes),
            r.max_queries,
            units::format_duration(r.max_time),
            match r.index {
                None => "",
                Some(true) => ", narrowed by index",
                Some(false) => ", no index",
            }
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
    /// Whether the files' indexes may narrow what is read (see the module
    /// docs): the client's filter text is then planned against them.
    pub use_index: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::decide_retrieve;
    use crate::policy::{Peer, Policy};
    use ringcap_stages::Snap;

    const BASE: &str = r#"
[[store]]
interface = "eth0"
dir = "/srv/pcap/eth0"

[[grant]]
users = ["nobody"]
interfaces = ["eth0", "eth1"]
capture_filter = "not port 22"
max_snaplen = 128
hide = ["payload"]
[grant.retrieve]
max_window = "1h"
max_bytes = "1G"
max_queries = 2
"#;

    fn nobody() -> Peer {
        Peer {
            uid: 65534,
            gid: 65534,
            groups: vec![],
        }
    }

    fn req(interface: &str, after: Option<u64>, before: Option<u64>) -> RetrieveRequest {
        RetrieveRequest {
            interface: interface.into(),
            filter: String::new(),
            program: None,
            program_tagged: false,
            snap: SnapRequest::Bytes(0),
            after_ns: after,
            before_ns: before,
            max_bytes: None,
        }
    }

    const H: u64 = 3_600_000_000_000;

    #[test]
    fn stores_and_rights_are_parsed_strictly() {
        let p = Policy::from_toml(BASE).unwrap();
        assert_eq!(p.stores.len(), 1);
        assert_eq!(p.stores[0].dir, PathBuf::from("/srv/pcap/eth0"));
        let r = p.grants[0].retrieve.as_ref().unwrap();
        assert_eq!(
            (r.max_window, r.max_bytes, r.max_queries),
            (Duration::from_secs(3600), 1 << 30, 2)
        );
        assert_eq!(r.max_time, DEFAULT_MAX_TIME);
        let d = p.describe();
        assert!(
            d.contains("store:             eth0 in /srv/pcap/eth0 (line 2)"),
            "{d}"
        );
        assert!(
            d.contains("windows of at most 1h, answers of at most 1 GiB, 2 at once"),
            "{d}"
        );
        for (bad, words) in [
            (BASE.replace("dir = ", "directory = "), "unknown field"),
            (
                BASE.replace("max_queries = 2", "max_querys = 2"),
                "unknown field",
            ),
            (
                BASE.replace("max_window = \"1h\"\n", ""),
                "retrieve.max_window: required",
            ),
            (
                BASE.replace("max_bytes = \"1G\"\n", ""),
                "retrieve.max_bytes: required",
            ),
            (
                BASE.replace("max_queries = 2", "max_queries = 17"),
                "at most 16",
            ),
            (BASE.replace("/srv/pcap/eth0", "srv/pcap"), "absolute"),
            (
                BASE.replace("interface = \"eth0\"", "interface = \"a/b\""),
                "not an interface name",
            ),
            (
                format!("{BASE}\n[[store]]\ninterface = \"eth0\"\ndir = \"/x\"\n"),
                "has a store already",
            ),
        ] {
            let e = Policy::from_toml(&bad)
                .err()
                .unwrap_or_else(|| panic!("accepted:\n{bad}"));
            assert!(e.to_string().contains(words), "{e} lacks {words:?}");
        }
    }

    #[test]
    fn a_retrieval_gets_decide_s_decision_and_its_bounds() {
        let p = Policy::from_toml(BASE).unwrap();
        let now = 100 * H;
        let (d, r) =
            decide_retrieve(&p, &nobody(), &req("eth0", Some(now - H), None), now).unwrap();
        assert_eq!(d.snap, Snap::Bytes(128), "the snap cap");
        assert_eq!(d.framework_text, "not port 22");
        assert_eq!(d.hide.len(), 1);
        assert_eq!(
            (r.after_ns, r.before_ns, r.max_bytes),
            (now - H, now, 1 << 30)
        );
        // The request may ask for less, never more.
        let mut small = req("eth0", Some(now - 1), None);
        small.max_bytes = Some(10);
        assert_eq!(
            decide_retrieve(&p, &nobody(), &small, now)
                .unwrap()
                .1
                .max_bytes,
            10
        );
        small.max_bytes = Some(u64::MAX);
        assert_eq!(
            decide_retrieve(&p, &nobody(), &small, now)
                .unwrap()
                .1
                .max_bytes,
            1 << 30
        );
        let rule =
            |r: RetrieveRequest, who: Peer| decide_retrieve(&p, &who, &r, now).unwrap_err().rule;
        assert_eq!(
            rule(req("eth0", Some(now - H - 1), None), nobody()),
            "retrieve.max_window"
        );
        assert_eq!(
            rule(req("eth0", None, None), nobody()),
            "retrieve.max_window"
        );
        // Without a start, the refusal says to give one, and how.
        let why = decide_retrieve(&p, &nobody(), &req("eth0", None, None), now)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("no start was given (--after)") && why.contains("- 3600)"),
            "{why}"
        );
        assert_eq!(
            rule(req("eth0", Some(now), Some(now)), nobody()),
            "retrieve.max_window"
        );
        assert_eq!(rule(req("eth1", Some(now - 1), None), nobody()), "store");
        assert_eq!(
            rule(req("eth2", Some(now - 1), None), nobody()),
            "interfaces"
        );
        let root = Peer::default();
        assert_eq!(rule(req("eth0", Some(now - 1), None), root), "default deny");
        // No [grant.retrieve]: no retrieval, default deny.
        let live_only = Policy::from_toml(
            &BASE.replace("[grant.retrieve]", "[grant.nothing]").replace(
                "max_window = \"1h\"\nmax_bytes = \"1G\"\nmax_queries = 2\n",
                "",
            ),
        )
        .err();
        assert!(live_only.is_some(), "unknown table refused");
        let live_only = Policy::from_toml(BASE.split("[grant.retrieve]").next().unwrap()).unwrap();
        assert_eq!(
            decide_retrieve(
                &live_only,
                &nobody(),
                &req("eth0", Some(now - 1), None),
                now
            )
            .unwrap_err()
            .rule,
            "retrieve"
        );
        // Forced sampling: refused rather than served unsampled.
        let sampled =
            Policy::from_toml(&BASE.replace("hide = [\"payload\"]", "sample = \"1:10\"")).unwrap();
        assert_eq!(
            decide_retrieve(&sampled, &nobody(), &req("eth0", Some(now - 1), None), now)
                .unwrap_err()
                .rule,
            "sample"
        );
    }

    /// The index narrows only for grants that hide no packet, unless the
    /// grant says; never with hidden fields or anonymized addresses.
    #[test]
    fn the_index_is_used_only_where_it_shows_nothing_hidden() {
        let now = 1_800_000_000_000_000_000;
        let grant = |extra: &str, index: &str| {
            format!(
                "[[store]]\ninterface = \"eth0\"\ndir = \"/srv/pcap/eth0\"\n\n[[grant]]\n\
                 users = [\"nobody\"]\ninterfaces = [\"eth0\"]\n{extra}\n[grant.retrieve]\n\
                 max_window = \"1h\"\nmax_bytes = \"1G\"\n{index}\n"
            )
        };
        for (extra, index, want) in [
            ("", "", true),
            ("capture_filter = \"not port 22\"", "", false),
            ("exclude = \"host 10.0.0.1\"", "", false),
            ("capture_filter = \"not port 22\"", "index = true", true),
            ("", "index = false", false),
            ("hide = [\"ip.ttl\"]", "index = true", false),
            ("anonymize = true", "index = true", false),
        ] {
            // The key file is only named here: the daemon reads it.
            let text = format!(
                "anonymization_key = \"/etc/ringcapd/anon.key\"\n{}",
                grant(extra, index)
            );
            let p = Policy::from_toml(&text).unwrap_or_else(|e| panic!("{extra} {index}: {e}"));
            let (_, r) = decide_retrieve(&p, &nobody(), &req("eth0", Some(now - H), None), now)
                .unwrap_or_else(|e| panic!("{extra} {index}: {e:?}"));
            assert_eq!(r.use_index, want, "{extra} {index}");
        }
        let bad = grant("", "index = \"yes\"");
        let e = Policy::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("retrieve.index: expected true or false"), "{e}");
    }
}
