//! The flow stage's counters, shared by the exporters (UDP, TCP, Kafka)
//! and read by the front ends at any time: a module of their own so that
//! each exporter can count without depending on the others.

use crate::netflow::StatsReport;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the exporters and flow tables have done: shared, read at any time.
#[derive(Debug, Default)]
pub struct FlowStats {
    /// Flows begun.
    pub created: AtomicU64,
    /// Flows held now (all tables).
    pub active: AtomicU64,
    /// Flow records handed to the exporter thread.
    pub exported: AtomicU64,
    /// Flows exported early because a table was full.
    pub evicted_early: AtomicU64,
    /// Records dropped because the exporter's queue was full.
    pub queue_dropped: AtomicU64,
    /// Messages (datagrams, lines) sent.
    pub messages: AtomicU64,
    /// Sends that failed (collector down, disk full, a broken TCP
    /// connection, a Kafka delivery that failed).
    pub export_errors: AtomicU64,
    /// Connections to a TCP collector that failed (retried with back-off).
    pub connect_failures: AtomicU64,
    /// Records lost after the exporter took them (a TCP collector's or
    /// Kafka's queue full, or not empty at the end).
    pub export_dropped: AtomicU64,
    /// Packets in no flow (not IP).
    pub not_ip: AtomicU64,
}

impl FlowStats {
    /// One line for the final report.
    pub fn summary(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "flows: {} exported ({} evicted early), {} export errors, {} dropped at the exporter queue, {} lost after it, {} packets not IP",
            g(&self.exported),
            g(&self.evicted_early),
            g(&self.export_errors),
            g(&self.queue_dropped),
            g(&self.export_dropped),
            g(&self.not_ip)
        )
    }

    /// Why the export did not deliver everything, if it did not: sends that
    /// failed (over UDP the ICMP "port unreachable" of an earlier datagram
    /// shows on a later send: what was sent around it is lost too, and how
    /// much is not known), records lost. Connections that failed and were
    /// made later (a collector that came late) lost nothing. `None`: every
    /// record was handed over.
    pub fn failure(&self) -> Option<String> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (errors, connects) = (g(&self.export_errors), g(&self.connect_failures));
        let lost = g(&self.queue_dropped) + g(&self.export_dropped);
        if errors + lost == 0 {
            return None;
        }
        let mut why = Vec::new();
        if errors > 0 {
            why.push(format!(
                "{errors} sends failed (a collector not listening, over UDP: records sent around them are lost too)"
            ));
        }
        if connects > 0 {
            why.push(format!("{connects} connections to the collector failed"));
        }
        if lost > 0 {
            why.push(format!("{lost} records lost"));
        }
        Some(format!("flow export incomplete: {}", why.join("; ")))
    }

    /// The counters as `"name":value` pairs of a JSON object (no braces),
    /// for `--stats-json`.
    pub fn json_fields(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "\"created\":{},\"active\":{},\"exported\":{},\"evicted_early\":{},\"queue_dropped\":{},\"export_dropped\":{},\"export_errors\":{},\"connect_failures\":{},\"messages\":{},\"not_ip\":{}",
            g(&self.created),
            g(&self.active),
            g(&self.exported),
            g(&self.evicted_early),
            g(&self.queue_dropped),
            g(&self.export_dropped),
            g(&self.export_errors),
            g(&self.connect_failures),
            g(&self.messages),
            g(&self.not_ip)
        )
    }

    /// The statistics options record's values.
    pub fn report(&self) -> StatsReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsReport {
            messages: g(&self.messages),
            records: g(&self.exported),
            observed_flows: g(&self.created),
            ignored_packets: g(&self.not_ip),
            not_sent: g(&self.queue_dropped) + g(&self.export_dropped),
        }
    }
}

/// Moves a gauge that several tables share (flows held now) by one table's
/// change: its size was `was` at the last publish and is `now`.
pub fn move_gauge(gauge: &AtomicU64, was: u64, now: u64) {
    if now >= was {
        gauge.fetch_add(now - was, Ordering::Relaxed);
    } else {
        gauge.fetch_sub(was - now, Ordering::Relaxed);
    }
}
