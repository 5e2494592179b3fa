//! Holds a `udp` session and sends its filter again every INTERVAL_MS for
//! HOLD_S seconds, reading packets meanwhile; with OTHER, sends OTHER first
//! each time (a filter that may match nothing), then `udp`. The test client of ringcapd's
//! rate limits across filter changes (crates/daemon/tests/limits.rs), run as
//! an unprivileged user.
//!
//! ```text
//! refilter SOCKET INTERFACE INTERVAL_MS HOLD_S [OTHER]
//! ```
//!
//! Says `ready` on stderr once the session is open, then prints one JSON line:
//! `{"packets":N,"filters_sent":M,"counters":{...}}` (the final counters).

use ringcap_client::{Client, OpenRequest};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn run() -> Result<serde_json::Value, String> {
    let a: Vec<String> = std::env::args().collect();
    if !(5..=6).contains(&a.len()) {
        return Err("usage: refilter SOCKET INTERFACE INTERVAL_MS HOLD_S [OTHER]".into());
    }
    let every = Duration::from_millis(a[3].parse().map_err(|_| format!("{}: not ms", a[3]))?);
    let hold = Duration::from_secs_f64(a[4].parse().map_err(|_| format!("{}: not s", a[4]))?);
    let mut s = Client::connect(Path::new(&a[1]))
        .and_then(|c| c.open(OpenRequest::new(&a[2], "udp")))
        .map_err(|e| e.to_string())?;
    eprintln!("ready");
    std::io::stderr().flush().map_err(|e| e.to_string())?;
    let (mut packets, mut sent) = (0u64, 0u64);
    let t0 = Instant::now();
    let mut next = t0 + every;
    while t0.elapsed() < hold {
        s.wait(Duration::from_millis(10))
            .map_err(|e| e.to_string())?;
        packets += s.packets(|_| {}).map_err(|e| e.to_string())?;
        if Instant::now() >= next {
            if let Some(other) = a.get(5) {
                s.set_filter(other).map_err(|e| e.to_string())?;
                sent += 1;
            }
            s.set_filter("udp").map_err(|e| e.to_string())?;
            sent += 1;
            next += every;
        }
    }
    let (_, c) = s.stop().map_err(|e| e.to_string())?;
    packets += s.packets(|_| {}).map_err(|e| e.to_string())?;
    Ok(serde_json::json!({
        "packets": packets,
        "filters_sent": sent,
        "counters": {
            "accepted": c.packets_filter_accepted,
            "rate_limited": c.packets_rate_limited,
            "delivered": c.packets_delivered,
        },
    }))
}

fn main() -> ExitCode {
    match run() {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("refilter: {e}");
            ExitCode::FAILURE
        }
    }
}
