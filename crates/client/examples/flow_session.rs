//! Opens a session with flow records and says what became of it: the test
//! client of ringcapd's flow tests (crates/daemon/tests/flows.rs), run as an
//! unprivileged user.
//!
//! ```text
//! flow_session SOCKET INTERFACE ACTIVE_S IDLE_S MAX_FLOWS PACKETS(0|1) HOLD_S
//! ```
//!
//! Prints one JSON line: `{"refused":RULE,"reason":...}`, `{"error":...}`,
//! or `{"accepted":true,"flows":{...},"snaplen":...}`; when accepted, holds
//! the session for HOLD_S seconds reading flow records, then prints
//! `{"flows_read":N,"packets_read":M,"ended":WHY,"counters":{...}}`.

use ringcap_client::{Client, ClientError, FlowRequest, OpenRequest};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn num<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("{s}: not a number"))
}

fn run() -> Result<(), String> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 8 {
        return Err(
            "usage: flow_session SOCKET INTERFACE ACTIVE_S IDLE_S MAX_FLOWS PACKETS HOLD_S".into(),
        );
    }
    let mut req = OpenRequest::new(&a[2], "");
    req.flows = Some(FlowRequest {
        active_timeout_s: num(&a[3])?,
        idle_timeout_s: num(&a[4])?,
        max_flows: num(&a[5])?,
        packets: a[6] == "1",
    });
    let hold = Duration::from_secs_f64(num(&a[7])?);
    let client = Client::connect(Path::new(&a[1])).map_err(|e| e.to_string())?;
    let mut s = match client.open(req) {
        Ok(s) => s,
        Err(ClientError::Refused { rule, reason, .. }) => {
            println!(
                "{}",
                serde_json::json!({ "refused": rule, "reason": reason })
            );
            return Ok(());
        }
        Err(e) => {
            println!("{}", serde_json::json!({ "error": e.to_string() }));
            return Ok(());
        }
    };
    let f = s.effective.flows;
    println!(
        "{}",
        serde_json::json!({
            "accepted": true,
            "flows": f.map(|f| serde_json::json!({
                "active_timeout_s": f.active_timeout_s,
                "idle_timeout_s": f.idle_timeout_s,
                "max_flows": f.max_flows,
                "packets": f.packets,
            })),
            "snaplen": format!("{:?}", s.effective.snaplen),
        })
    );
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let (mut flows, mut packets) = (0u64, 0u64);
    let t0 = Instant::now();
    while t0.elapsed() < hold {
        s.wait(Duration::from_millis(50))
            .map_err(|e| e.to_string())?;
        packets += s.packets(|_| {}).map_err(|e| e.to_string())?;
        flows += s.flows(|_| {}).map_err(|e| e.to_string())?;
    }
    let (reason, c) = s.stop().map_err(|e| e.to_string())?;
    packets += s.packets(|_| {}).map_err(|e| e.to_string())?;
    flows += s.flows(|_| {}).map_err(|e| e.to_string())?;
    println!(
        "{}",
        serde_json::json!({
            "flows_read": flows,
            "packets_read": packets,
            "ended": reason,
            "counters": {
                "packets_delivered": c.packets_delivered,
                "flows_delivered": c.flows_delivered,
                "flows_evicted": c.flows_evicted,
                "flows_dropped_client": c.flows_dropped_client,
            }
        })
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flow_session: {e}");
            ExitCode::from(2)
        }
    }
}
