//! Flow records under a grant: the keys `flows`, `packets`, `max_flows` and
//! `min_flow_timeout`, and how [`crate::decide`] holds a request's flow
//! part and its packet part to them.
//!
//! | key | meaning | default |
//! | --- | --- | --- |
//! | `flows` | the user may receive flow records (RFC 5103 biflows) of what the grant covers: made from the packets *after* the grant's filters, sampling, snap cap, masks and anonymization, so a flow's key shows exactly what the packets would | `false` |
//! | `packets` | the user may receive packets; `false` = flow records only (needs `flows = true`): a session must then ask for flows without packets, and no packet byte reaches it | `true` |
//! | `max_flows` | flows the user's flow tables may hold at once, all of its sessions together (each flow costs the daemon ~[`FLOW_BYTES`] bytes, counted against the user); a session asking for a bigger table gets this many (said in its effective settings) | 65536 |
//! | `min_flow_timeout` | the shortest active or idle timeout a session gets (a request below it is raised to it, and told): short timeouts mean more records, and finer timing of what the grant shows | `"1s"` |
//!
//! Refusals name the rule: `flows` (flow records asked without `flows =
//! true`), `packets` (packets asked, or a dump, under `packets = false`).

use std::time::Duration;

/// Default `max_flows`.
pub const DEFAULT_MAX_FLOWS: u32 = 65_536;
/// Largest `max_flows` a grant may give (the protocol's hard limit on one
/// table, [`ringcap_proto::flows::FLOW_TABLE`]).
pub const MAX_FLOWS: u32 = *ringcap_proto::flows::FLOW_TABLE.end();
/// Default `min_flow_timeout`.
pub const DEFAULT_MIN_FLOW_TIMEOUT: Duration = Duration::from_secs(1);
/// What the daemon counts per flow of a table (entry, list links and two
/// index slots, rounded up): the unit of the user's flow budget.
pub const FLOW_BYTES: u64 = 256;

/// A grant's flow rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowGrant {
    /// Flow records allowed.
    pub flows: bool,
    /// Packets allowed.
    pub packets: bool,
    /// Flows the user's tables may hold at once, all sessions together.
    pub max_flows: u32,
    /// Shortest timeout, whole seconds.
    pub min_timeout_s: u32,
}

impl Default for FlowGrant {
    fn default() -> FlowGrant {
        FlowGrant {
            flows: false,
            packets: true,
            max_flows: DEFAULT_MAX_FLOWS,
            min_timeout_s: DEFAULT_MIN_FLOW_TIMEOUT.as_secs() as u32,
        }
    }
}

impl FlowGrant {
    /// The `--check` line.
    pub(crate) fn describe(&self) -> String {
        match (self.flows, self.packets) {
            (false, _) => "not allowed (packets only)".into(),
            (true, p) => {
                format!(
                "allowed{}; at most {} flows held per user (~{} of tables), timeouts at least {} s",
                if p { ", with packets" } else { ", flow records ONLY (no packets)" },
                self.max_flows,
                crate::units::format_size(u64::from(self.max_flows) * FLOW_BYTES),
                self.min_timeout_s
            )
            }
        }
    }
}

/// Reads a grant's flow keys (`[flows, packets]`, `max_flows`,
/// `min_flow_timeout`); `here` is the grant's span, for errors about the
/// grant as a whole.
pub(crate) fn parse(
    src: &str,
    here: std::ops::Range<usize>,
    [flows, packets]: [&Option<toml::Spanned<bool>>; 2],
    max_flows: &Option<toml::Spanned<toml::Value>>,
    min_timeout: &Option<toml::Spanned<toml::Value>>,
) -> Result<FlowGrant, crate::PolicyError> {
    let err = |span, reason: String| crate::PolicyError::at(src, span, reason);
    let mut g = FlowGrant {
        flows: flows.as_ref().is_some_and(|f| *f.get_ref()),
        packets: packets.as_ref().is_none_or(|p| *p.get_ref()),
        ..FlowGrant::default()
    };
    if !g.packets && !g.flows {
        let span = packets.as_ref().map_or(here, |p| p.span());
        return Err(err(
            span,
            "packets: packets = false gives flow records only, and needs flows = true".into(),
        ));
    }
    if let Some(v) = max_flows {
        g.max_flows = match v.get_ref() {
            toml::Value::Integer(n) if (1..=i64::from(MAX_FLOWS)).contains(n) => *n as u32,
            toml::Value::Integer(n) if *n > 0 => {
                return Err(err(
                    v.span(),
                    format!("max_flows: at most {MAX_FLOWS} flows per user"),
                ))
            }
            _ => {
                return Err(err(
                    v.span(),
                    "max_flows: expected a whole number from 1 up".into(),
                ))
            }
        };
    }
    if let Some(v) = min_timeout {
        let d = match v.get_ref() {
            toml::Value::String(s) => crate::units::parse_duration(s)
                .map_err(|e| err(v.span(), format!("min_flow_timeout: {e}")))?,
            _ => {
                return Err(err(
                    v.span(),
                    "min_flow_timeout: expected a duration string such as \"10s\" or \"1m\"".into(),
                ))
            }
        };
        let max = *ringcap_proto::flows::FLOW_TIMEOUT_S.end();
        if d < Duration::from_secs(1) || d > Duration::from_secs(u64::from(max)) {
            return Err(err(
                v.span(),
                format!("min_flow_timeout: from 1 s to {max} s"),
            ));
        }
        g.min_timeout_s = d.as_secs() as u32;
    }
    Ok(g)
}
