//! How the counters are shown: a live status line, JSON interval records and
//! the final report.

use crate::Counters;
use serde::Serialize;

/// One JSON record (`--stats-json`): the totals at top level under the
/// counter names, per-interface counters under `interfaces`.
#[derive(Debug, Serialize)]
pub struct JsonRecord<'a> {
    /// Seconds since the Unix epoch (fractional).
    pub time: f64,
    /// Seconds since the capture started.
    pub elapsed_s: f64,
    /// True for the record written at exit.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Totals over all interfaces.
    #[serde(flatten)]
    pub total: Counters,
    /// Per interface, by name.
    pub interfaces: serde_json::Map<String, serde_json::Value>,
    /// Current output file, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<&'a str>,
}

/// Renders one JSON line (no trailing newline).
pub fn json_line(
    time: f64,
    elapsed_s: f64,
    is_final: bool,
    per: &[(String, Counters)],
    total: &Counters,
    file: Option<&str>,
) -> String {
    let mut interfaces = serde_json::Map::new();
    for (name, c) in per {
        interfaces.insert(name.clone(), serde_json::to_value(c).unwrap_or_default());
    }
    let rec = JsonRecord {
        time,
        elapsed_s,
        is_final,
        total: *total,
        interfaces,
        file,
    };
    serde_json::to_string(&rec).unwrap_or_default()
}

/// The live status line: rates since the previous line, totals of drops.
pub fn status_line(now: &Counters, before: &Counters, seconds: f64, file: Option<&str>) -> String {
    let secs = seconds.max(1e-3);
    let pps =
        (now.packets_delivered - before.packets_delivered.min(now.packets_delivered)) as f64 / secs;
    let mbps = (now.bytes_on_wire.saturating_sub(before.bytes_on_wire)) as f64 * 8.0 / secs / 1e6;
    let mut s = format!(
        "{:>10.0} pps {:>9.1} Mbit/s  written {}  dropped ring {} writer {} iface {}",
        pps,
        mbps,
        now.packets_written,
        now.packets_dropped_ring,
        now.packets_dropped_writer,
        now.packets_dropped_by_interface
    );
    if now.ring_blocks + now.writer_buffer_bytes > 0 {
        s.push_str(&format!(
            "  high water ring {:.0}% writer {:.0}%",
            pct(now.ring_blocks_high_water, now.ring_blocks),
            pct(now.writer_buffer_high_water_bytes, now.writer_buffer_bytes)
        ));
    }
    if let Some(f) = file {
        s.push_str("  → ");
        s.push_str(f);
    }
    s
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The report printed at exit, in the README's terms (seen by the
/// interface, accepted, sampled out, delivered, dropped in the ring, ...).
/// `kept`: the packets went somewhere (`-w`, or a client's ring). A capture
/// with nowhere to put them (flows only, or counting) counts what the writer
/// took (which is what the rates and losses are about) as "counted", and
/// the last line says that none was kept.
pub fn final_report(
    per: &[(String, Counters)],
    total: &Counters,
    seconds: f64,
    kept: bool,
) -> String {
    let mut out = String::new();
    let block = |out: &mut String, title: &str, c: &Counters| {
        out.push_str(&format!("{title}\n"));
        let line = |out: &mut String, label: &str, v: u64| {
            out.push_str(&format!("  {label:<34}{v:>14}\n"))
        };
        line(out, "seen by the interface", c.packets_seen_by_interface);
        line(
            out,
            "dropped by the interface",
            c.packets_dropped_by_interface,
        );
        line(out, "accepted by the filter", c.packets_filter_accepted);
        line(out, "sampled out", c.packets_sampled_out);
        line(out, "delivered", c.packets_delivered);
        line(out, "dropped in the ring", c.packets_dropped_ring);
        if c.packets_rate_limited + c.packets_dropped_client > 0 {
            line(out, "rate-limited (daemon policy)", c.packets_rate_limited);
            line(
                out,
                "dropped in the client's ring",
                c.packets_dropped_client,
            );
        }
        if c.packets_after_count > 0 {
            line(out, "read after the -c count", c.packets_after_count);
        }
        if c.packets_not_read > 0 {
            line(out, "not read (came after the stop)", c.packets_not_read);
        }
        // Nothing is written without a place to keep it: say "counted".
        let (packets, bytes) = match kept {
            true => ("written", "bytes written"),
            false => ("counted (none kept)", "bytes counted"),
        };
        line(out, packets, c.packets_written);
        line(out, "dropped by the writer", c.packets_dropped_writer);
        line(out, "merged by offload", c.packets_merged_by_offload);
        line(out, "bytes on wire", c.bytes_on_wire);
        line(out, bytes, c.bytes_written);
        if c.ring_blocks > 0 {
            line(out, "ring high water (blocks)", c.ring_blocks_high_water);
            line(out, "ring size (blocks)", c.ring_blocks);
        }
        if c.writer_buffer_bytes > 0 {
            line(
                out,
                "writer buffer high water (bytes)",
                c.writer_buffer_high_water_bytes,
            );
            line(out, "writer buffer size (bytes)", c.writer_buffer_bytes);
        }
        out.push_str(&format!("  {:<34}{:>13.4}%\n", "lost", c.lost_pct()));
    };
    for (name, c) in per {
        block(&mut out, &format!("interface {name}:"), c);
    }
    if per.len() != 1 {
        block(&mut out, "total:", total);
    }
    if kept {
        out.push_str(&format!(
            "{} packets written in {:.2} s\n",
            total.packets_written, seconds
        ));
    } else {
        out.push_str(&format!(
            "{} packets counted in {:.2} s; none kept (no -w)\n",
            total.packets_written, seconds
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_counter_names_and_final() {
        let c = Counters {
            packets_written: 3,
            ..Default::default()
        };
        let line = json_line(1.5, 0.5, true, &[("eth0".into(), c)], &c, None);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["final"], true);
        assert_eq!(v["packets_written"], 3);
        assert_eq!(v["interfaces"]["eth0"]["packets_written"], 3);
    }

    #[test]
    fn high_water_marks_show_when_known() {
        let c = Counters {
            ring_blocks_high_water: 64,
            ring_blocks: 256,
            writer_buffer_high_water_bytes: 192 << 20,
            writer_buffer_bytes: 256 << 20,
            ..Default::default()
        };
        let r = final_report(&[("eth0".into(), c)], &c, 1.0, true);
        assert!(r.contains("ring high water (blocks)"), "{r}");
        assert!(r.contains(&format!("{:>14}", 192u64 << 20)), "{r}");
        let line = status_line(&c, &Counters::default(), 1.0, None);
        assert!(line.contains("high water ring 25% writer 75%"), "{line}");
        let none = Counters::default();
        assert!(!final_report(&[("f".into(), none)], &none, 1.0, true).contains("high water"));
        assert!(!status_line(&none, &none, 1.0, None).contains("high water"));
    }

    #[test]
    fn report_mentions_every_stage() {
        let c = Counters::default();
        let r = final_report(&[("eth0".into(), c)], &c, 1.0, true);
        let counted = final_report(&[("eth0".into(), c)], &c, 1.0, false);
        assert!(counted.ends_with("none kept (no -w)\n"), "{counted}");
        assert!(!counted.contains("packets written in"), "{counted}");
        // Without a place to keep them, nothing reads as written.
        assert!(!counted.contains("written"), "{counted}");
        assert!(counted.contains("counted (none kept)"), "{counted}");
        for w in [
            "seen by the interface",
            "accepted by the filter",
            "delivered",
            "dropped in the ring",
            "written",
            "dropped by the writer",
            "lost",
        ] {
            assert!(r.contains(w), "{w}");
        }
    }
}
