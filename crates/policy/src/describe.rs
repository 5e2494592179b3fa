//! `ringcapd --check`'s report: the policy as the daemon understands it, with
//! names resolved to ids and every default spelled out, so an administrator
//! sees what a grant allows rather than what the file seems to say.

use crate::admit::{rate_text, sampling_text, snap_text};
use crate::policy::{Grant, Named, Policy, MAX_SNAPLEN};
use crate::units::{format_duration, format_size};
use ringcap_stages::Snap;
use std::fmt::Write;

fn named(kind: &str, id: &str, list: &[Named]) -> Option<String> {
    if list.is_empty() {
        return None;
    }
    let items: Vec<String> = list
        .iter()
        .map(|n| format!("{} ({id} {})", n.name, n.id))
        .collect();
    Some(format!("{kind} {}", items.join(", ")))
}

fn grant(out: &mut String, g: &Grant, count: usize) {
    let who: Vec<String> = [
        named("users", "uid", &g.users),
        named("groups", "gid", &g.groups),
    ]
    .into_iter()
    .flatten()
    .collect();
    let line = |out: &mut String, key: &str, value: String| {
        let _ = writeln!(out, "  {:<15} {value}", format!("{key}:"));
    };
    let _ = writeln!(out, "grant {} of {count} (line {})", g.index + 1, g.line);
    line(out, "who", who.join("; "));
    line(
        out,
        "interfaces",
        if g.interfaces.is_empty() {
            "any".into()
        } else {
            g.interfaces.join(", ")
        },
    );
    line(
        out,
        "capture filter",
        if g.capture_filter.trim().is_empty() {
            "none (every packet), ANDed with each client's filter".into()
        } else {
            format!(
                "{} ({} instructions), ANDed with each client's filter",
                g.capture_filter,
                g.capture_program.instructions.len()
            )
        },
    );
    line(
        out,
        "exclude",
        if g.exclude.is_empty() {
            "none".into()
        } else {
            format!(
                "{} (never delivered: tested at every layer, tunnels and MPLS included)",
                g.exclude
            )
        },
    );
    line(
        out,
        "snap cap",
        match g.max_snap {
            Snap::Bytes(MAX_SNAPLEN) => format!("none ({MAX_SNAPLEN} bytes)"),
            s => snap_text(s),
        },
    );
    line(
        out,
        "sampling",
        format!("{} forced", sampling_text(g.sampling)),
    );
    line(
        out,
        "hidden fields",
        if g.hide.is_empty() {
            "none".into()
        } else {
            g.hide
                .iter()
                .map(|h| h.name())
                .collect::<Vec<_>>()
                .join(", ")
        },
    );
    line(
        out,
        "anonymize",
        if g.anonymize {
            "addresses, with Crypto-PAn".into()
        } else {
            "no".into()
        },
    );
    line(
        out,
        "rate",
        rate_text(g.max_packets_per_second, g.max_bits_per_second),
    );
    line(
        out,
        "duration",
        g.max_duration.map_or("unlimited".into(), |d| {
            format!("at most {}", format_duration(d))
        }),
    );
    line(
        out,
        "dump quota",
        if g.dump_quota == 0 {
            "daemon dumps not allowed".into()
        } else {
            format_size(g.dump_quota)
        },
    );
    line(out, "ring size", format_size(g.ring_size));
    line(out, "flow records", g.flow.describe());
    line(
        out,
        "inject",
        match &g.inject {
            None => "not allowed".into(),
            Some(i) => format!(
                "frames matching {}; settable: {}; {}, burst {}",
                if i.filter.trim().is_empty() {
                    "anything".to_string()
                } else {
                    format!("\"{}\"", i.filter)
                },
                if i.settable.is_empty() {
                    "nothing".to_string()
                } else {
                    i.settable
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                rate_text(Some(i.max_packets_per_second), i.max_bits_per_second),
                i.burst
            ),
        },
    );
    line(
        out,
        "retrieve",
        crate::retrieve::describe_grant(g.retrieve.as_ref()),
    );
}

impl Policy {
    /// The policy as the daemon understands it, for `ringcapd --check`.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "socket:            {}", self.socket.display());
        let _ = writeln!(out, "dump_dir:          {}", self.dump_dir.display());
        let _ = writeln!(
            out,
            "anonymization_key: {}",
            self.anonymization_key
                .as_ref()
                .map_or("none".to_string(), |k| k.display().to_string())
        );
        for s in &self.stores {
            let _ = writeln!(
                out,
                "store:             {} in {} (line {})",
                s.interface,
                s.dir.display(),
                s.line
            );
        }
        if self.grants.is_empty() {
            out.push_str("no grants: every client is refused (default deny)\n");
            return out;
        }
        out.push_str(
            "Grants are tried in this order; the first that names the client (its uid, gid or a\n\
             supplementary group) and allows the interface applies. A client no grant matches is\n\
             refused (default deny).\n",
        );
        for g in &self.grants {
            out.push('\n');
            grant(&mut out, g, self.grants.len());
        }
        out
    }
}
