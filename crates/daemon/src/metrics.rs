//! An optional Prometheus text endpoint (`--metrics 127.0.0.1:PORT`): every
//! session's counters, labelled with its session number, uid and
//! interfaces, for a local scraper. Loopback only (the daemon has no network
//! listener for clients, and this one refuses any other address); read-only;
//! every request gets the same page, whatever it asks for.

use crate::server::Shared;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Listens on `addr` (a loopback address) and serves until the daemon stops.
pub fn start(addr: SocketAddr, shared: Arc<Shared>) -> Result<(), String> {
    if !addr.ip().is_loopback() {
        return Err(format!(
            "--metrics {addr}: only a loopback address (127.0.0.1 or ::1) is served"
        ));
    }
    let listener = TcpListener::bind(addr).map_err(|e| format!("--metrics {addr}: {e}"))?;
    std::thread::Builder::new()
        .name("ringcapd-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if shared.stopping.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
                // The request is read (bounded) and ignored.
                let mut buf = [0u8; 2048];
                let _ = conn.read(&mut buf);
                let body = page(&shared);
                let _ = write!(
                    conn,
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        })
        .map_err(|e| format!("starting the metrics thread: {e}"))?;
    Ok(())
}

/// Label values escaped as the text format wants.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The page: one gauge family per counter, a sample per session.
pub fn page(shared: &Shared) -> String {
    let mut sessions: Vec<_> = shared
        .sessions
        .lock()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    sessions.sort_by_key(|s: &ringcap_proto::SessionInfo| s.session);
    let mut out = String::new();
    let _ = writeln!(out, "# HELP ringcapd_sessions Sessions running now.");
    let _ = writeln!(out, "# TYPE ringcapd_sessions gauge");
    let _ = writeln!(out, "ringcapd_sessions {}", sessions.len());
    type Get = fn(&ringcap_proto::SessionCounters) -> u64;
    let families: [(&str, &str, Get); 8] = [
        (
            "packets_seen_by_interface",
            "Packets the interface counted since the session began.",
            |c| c.packets_seen_by_interface,
        ),
        (
            "packets_filter_accepted",
            "Packets the session's filters accepted.",
            |c| c.packets_filter_accepted,
        ),
        (
            "packets_sampled_out",
            "Packets left out by sampling.",
            |c| c.packets_sampled_out,
        ),
        (
            "packets_rate_limited",
            "Packets refused by the session's rate limits.",
            |c| c.packets_rate_limited,
        ),
        (
            "packets_dropped_ring",
            "Packets the shared kernel ring lost.",
            |c| c.packets_dropped_ring,
        ),
        (
            "packets_dropped_client",
            "Packets dropped because the client's ring was full.",
            |c| c.packets_dropped_client,
        ),
        ("packets_delivered", "Packets handed to the client.", |c| {
            c.packets_delivered
        }),
        ("bytes_delivered", "Bytes handed to the client.", |c| {
            c.bytes_delivered
        }),
    ];
    for (name, help, get) in families {
        let _ = writeln!(out, "# HELP ringcapd_session_{name}_total {help}");
        let _ = writeln!(out, "# TYPE ringcapd_session_{name}_total counter");
        for s in &sessions {
            let _ = writeln!(
                out,
                "ringcapd_session_{name}_total{{session=\"{}\",uid=\"{}\",interfaces=\"{}\"}} {}",
                s.session,
                s.uid,
                label(&s.interfaces.join(",")),
                get(&s.counters)
            );
        }
    }
    out
}
