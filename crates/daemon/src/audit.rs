//! The audit log: one line per session start, change and end, and per
//! refusal (who, what they asked, what the policy gave, the counters), on
//! standard error (journald under systemd).

use ringcap_proto::SessionCounters;

/// Writes one audit line.
pub fn log(event: &str, session: Option<u64>, uid: u32, detail: &str) {
    let s = session.map(|s| format!(" session={s}")).unwrap_or_default();
    eprintln!("ringcapd: audit: {event}{s} uid={uid} {detail}");
}

/// Counters in one audit field.
pub fn counters(c: &SessionCounters) -> String {
    format!(
        "accepted={} sampled_out={} rate_limited={} dropped_ring={} dropped_client={} delivered={}",
        c.packets_filter_accepted,
        c.packets_sampled_out,
        c.packets_rate_limited,
        c.packets_dropped_ring,
        c.packets_dropped_client,
        c.packets_delivered
    )
}
