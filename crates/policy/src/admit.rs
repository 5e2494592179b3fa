//! Admission: a client's capture request held to its grant. The result is
//! either the effective settings a session runs with, or a refusal that names
//! the rule that refused it. The combination rules are in the crate docs.

use crate::fields::HideField;
use crate::policy::{Grant, Peer, Policy, ETHERNET, MAX_SNAPLEN};
use crate::units;
use ringcap_stages::filter::Target;
use ringcap_stages::{compile, Program, SampleMode, Sampling, Snap};
use std::fmt;
use std::time::Duration;

/// The longest client filter text taken, in bytes: compiling is done by the
/// daemon, so its cost is bounded before libpcap sees the text.
pub const MAX_CLIENT_FILTER_LEN: usize = 16 * 1024;

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureRequest {
    /// Interface name.
    pub interface: String,
    /// The client's filter, tcpdump syntax ("" = everything the grant allows).
    pub filter: String,
    /// The snap length asked for (`Snap::Bytes(0)` = as much as allowed).
    pub snap: Snap,
    /// The sampling asked for.
    pub sampling: Sampling,
}

/// The settings a session runs with after its grant's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    /// 0-based index of the grant that admitted it.
    pub grant: usize,
    /// Interface.
    pub interface: String,
    /// The combined filter as text, for display and audit only:
    /// "(framework) and (client)", or the one side that is not empty.
    pub filter: String,
    /// The combined program, built by [`Program::and`] from the two filters
    /// compiled separately: what is enforced. Its accepting returns are
    /// `snap.kernel_snaplen()`. Sampling is not in it (see `sampling`).
    pub program: Program,
    /// The snap length after the cap.
    pub snap: Snap,
    /// The sampling after the grant's forced sampling; the daemon adds it
    /// (e.g. [`Program::add_sampler`]) after the filter.
    pub sampling: Sampling,
    /// Fields masked before the client sees a packet.
    pub hide: Vec<HideField>,
    /// Addresses anonymized with Crypto-PAn (the policy's key).
    pub anonymize: bool,
    /// Packets per second (None = unlimited).
    pub max_packets_per_second: Option<u64>,
    /// Bits per second (None = unlimited).
    pub max_bits_per_second: Option<u64>,
    /// Longest session (None = unlimited).
    pub max_duration: Option<Duration>,
    /// Bytes of daemon dumps kept for the user; 0 = no daemon dumps.
    pub dump_quota: u64,
    /// Bytes of the session's shared-memory ring.
    pub ring_size: u64,
}

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

impl Grant {
    /// Holds `request` to this grant, compiling for frames as they are in a
    /// file or as a daemon sees them with VLAN tags put back
    /// ([`Target::Offline`]).
    pub fn admit(&self, request: &CaptureRequest) -> Result<Effective, Refusal> {
        self.admit_for(request, Target::Offline)
    }

    /// [`Grant::admit`], compiling both filters for `target` (a daemon that
    /// attaches the program to a kernel socket on the interface compiles for
    /// `Target::Kernel`, which sees VLAN tags through ancillary loads).
    pub fn admit_for(
        &self,
        request: &CaptureRequest,
        target: Target,
    ) -> Result<Effective, Refusal> {
        let refuse = |rule: &'static str, reason: String| Refusal {
            grant: Some(self.index),
            rule,
            reason,
        };
        if !self.allows_interface(&request.interface) {
            return Err(refuse(
                "interfaces",
                format!(
                    "interface \"{}\" is not one this grant allows ({})",
                    request.interface,
                    self.interfaces.join(", ")
                ),
            ));
        }
        if request.filter.len() > MAX_CLIENT_FILTER_LEN {
            return Err(refuse(
                "filter",
                format!(
                    "the filter is {} bytes long; at most {MAX_CLIENT_FILTER_LEN} are taken",
                    request.filter.len()
                ),
            ));
        }
        let sampling =
            force_sampling(request.sampling, self.sampling).map_err(|(r, why)| refuse(r, why))?;
        let snap = cap_snap(request.snap, self.max_snap);
        let snaplen = snap.kernel_snaplen();
        // Both sides compiled alone, then combined instruction by instruction:
        // no text of the client's is ever parsed together with the framework's.
        let framework = compile(&self.capture_filter, ETHERNET, snaplen, target).map_err(|e| {
            refuse(
                "capture_filter",
                format!(
                    "the grant's capture_filter does not compile here: {}",
                    e.message
                ),
            )
        })?;
        let client = compile(&request.filter, ETHERNET, snaplen, target)
            .map_err(|e| refuse("filter", format!("libpcap: {}", e.message)))?;
        let program = Program::and(&framework, &client).map_err(|e| refuse("capture_filter", e))?;
        Ok(Effective {
            grant: self.index,
            interface: request.interface.clone(),
            filter: combined_filter_text(&self.capture_filter, &request.filter),
            program,
            snap,
            sampling,
            hide: self.hide.clone(),
            anonymize: self.anonymize,
            max_packets_per_second: self.max_packets_per_second,
            max_bits_per_second: self.max_bits_per_second,
            max_duration: self.max_duration,
            dump_quota: self.dump_quota,
            ring_size: self.ring_size,
        })
    }
}

impl Policy {
    /// Finds the grant for `peer` on the request's interface
    /// ([`Policy::grant_for`]) and holds the request to it; with no grant,
    /// the refusal's rule is "default deny".
    pub fn admit(&self, peer: &Peer, request: &CaptureRequest) -> Result<Effective, Refusal> {
        match self.grant_for(peer, &request.interface) {
            Some((_, grant)) => grant.admit(request),
            None => Err(Refusal {
                grant: None,
                rule: "default deny",
                reason: format!(
                    "no grant allows uid {} (gid {}, groups {:?}) to capture on \"{}\"",
                    peer.uid, peer.gid, peer.groups, request.interface
                ),
            }),
        }
    }
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

/// One line for the audit log and the client: every effective setting.
impl fmt::Display for Effective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "grant {}, interface {}, filter \"{}\", snap {}, sampling {}, hide {}, anonymize {}, rate {}, duration {}, dump quota {}, ring {}",
            self.grant + 1,
            self.interface,
            self.filter,
            snap_text(self.snap),
            sampling_text(self.sampling),
            if self.hide.is_empty() {
                "none".to_string()
            } else {
                self.hide.iter().map(|h| h.name()).collect::<Vec<_>>().join(",")
            },
            if self.anonymize { "yes" } else { "no" },
            rate_text(self.max_packets_per_second, self.max_bits_per_second),
            self.max_duration
                .map_or("unlimited".to_string(), units::format_duration),
            if self.dump_quota == 0 {
                "none".to_string()
            } else {
                units::format_size(self.dump_quota)
            },
            units::format_size(self.ring_size),
        )
    }
}
