//! The combination rules [`crate::decide`] applies (snap caps, forced
//! sampling), the refusal it returns, and the texts that show a decision.
//! The rules are in the crate docs.

use crate::policy::MAX_SNAPLEN;
use ringcap_stages::{SampleMode, Sampling, Snap};
use std::fmt;

/// The longest client filter text taken, in bytes (a label: the daemon
/// compiles no client text, but keeps it for listings and audit lines).
pub const MAX_CLIENT_FILTER_LEN: usize = 16 * 1024;

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 0-based index of the grant whose rule refused it; None when no grant
    /// applies (default deny).
    pub grant: Option<usize>,
    /// The rule: a policy key ("interfaces", "capture_filter", "sample",
    /// "sample_flows"), "filter" for the client's own filter, or
    /// "default deny".
    pub rule: &'static str,
    /// What was wrong, for the client.
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.grant {
            Some(i) => write!(
                f,
                "refused by grant {} ({}): {}",
                i + 1,
                self.rule,
                self.reason
            ),
            None => write!(f, "refused ({}): {}", self.rule, self.reason),
        }
    }
}

impl std::error::Error for Refusal {}

/// The snap length a session gets: never more bytes than either side says,
/// and headers-only if either side is headers-only. The byte bound of
/// `Snap::Bytes(n)` is n and of `Snap::Headers { max }` is max; the result
/// keeps min(request bound, cap bound) bytes, as `Headers` if either is
/// `Headers`. So a 128-byte request under a "headers" cap gets the headers,
/// at most 128 bytes; a headers request under a 96-byte cap gets the headers,
/// at most 96 bytes. A request of `Bytes(0)` (tcpdump's "default") means as
/// much as the cap allows.
pub fn cap_snap(request: Snap, cap: Snap) -> Snap {
    let bound = |s: Snap| match s {
        Snap::Bytes(n) => n,
        Snap::Headers { max } => max,
    };
    let asked = match bound(request) {
        0 => MAX_SNAPLEN,
        n => n,
    };
    let n = asked.min(bound(cap));
    match (request, cap) {
        (Snap::Bytes(_), Snap::Bytes(_)) => Snap::Bytes(n),
        _ => Snap::Headers { max: n },
    }
}

/// Treats 1:1 as no sampling.
fn normalize(s: Sampling) -> Sampling {
    match s {
        Sampling::Packets { n, .. } | Sampling::Flows { n } if n <= 1 => Sampling::All,
        s => s,
    }
}

/// The sampling a session gets: the stricter of the request and the grant's
/// forced sampling, which is the larger N of the same kind (packets with
/// packets, flows with flows; with packets the request's mode, random or
/// count, is kept, both select one packet in N). A request without sampling
/// gets the forced one (packets forced: random mode, in the kernel). Packet
/// and flow sampling select different things and one cannot stand in for the
/// other, so a request of one kind under a grant forcing the other is refused
/// with the forcing key as the rule.
pub fn force_sampling(
    request: Sampling,
    forced: Sampling,
) -> Result<Sampling, (&'static str, String)> {
    match (normalize(request), normalize(forced)) {
        (r, Sampling::All) => Ok(r),
        (Sampling::All, Sampling::Packets { n, .. }) => Ok(Sampling::Packets {
            n,
            mode: SampleMode::Random,
        }),
        (Sampling::All, f) => Ok(f),
        (Sampling::Packets { n: r, mode }, Sampling::Packets { n: f, .. }) => {
            Ok(Sampling::Packets { n: r.max(f), mode })
        }
        (Sampling::Flows { n: r }, Sampling::Flows { n: f }) => {
            Ok(Sampling::Flows { n: r.max(f) })
        }
        (Sampling::Flows { .. }, Sampling::Packets { n, .. }) => Err((
            "sample",
            format!(
                "this grant forces sampling of 1:{n} packets, which cannot be combined with flow sampling; ask for 1:N packets (N >= {n}) or no sampling"
            ),
        )),
        (Sampling::Packets { .. }, Sampling::Flows { n }) => Err((
            "sample_flows",
            format!(
                "this grant forces sampling of 1:{n} flows, which cannot be combined with packet sampling; ask for 1:N flows (N >= {n}) or no sampling"
            ),
        )),
    }
}

/// The filter text shown for a session: "(framework) and (client)".
///
/// Only for people to read: what is enforced is the program built from the
/// two filters compiled apart. A client filter is admitted only if it
/// compiles alone, so its parentheses balance and the text reads the same.
pub fn combined_filter_text(framework: &str, client: &str) -> String {
    ringcap_stages::filter::combined_text(framework, client)
}

/// "headers, at most 256 bytes" / "128 bytes".
pub(crate) fn snap_text(s: Snap) -> String {
    match s {
        Snap::Bytes(n) => format!("{n} bytes"),
        Snap::Headers { max } => format!("headers, at most {max} bytes"),
    }
}

/// "1:10 packets (random)" / "1:10 flows" / "none".
pub(crate) fn sampling_text(s: Sampling) -> String {
    match normalize(s) {
        Sampling::All => "none".into(),
        Sampling::Packets { n, mode } => format!(
            "1:{n} packets ({})",
            match mode {
                SampleMode::Random => "random",
                SampleMode::Count => "every Nth",
            }
        ),
        Sampling::Flows { n } => format!("1:{n} flows"),
    }
}

/// "200000 packets/s, 500000000 bits/s" / "unlimited".
pub(crate) fn rate_text(pps: Option<u64>, bps: Option<u64>) -> String {
    let parts: Vec<String> = [
        pps.map(|p| format!("{p} packets/s")),
        bps.map(|b| format!("{b} bits/s")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "unlimited".into()
    } else {
        parts.join(", ")
    }
}
