//! Sends frames the grant's guard refuses, in full batches, without asking
//! for their reports, until ringcapd stops taking them; then takes every
//! report and sends once more. The test client of ringcapd's bound on a
//! session's unread inject reports (crates/daemon/tests/inject_hostile.rs),
//! run as an unprivileged user.
//!
//! ```text
//! inject_flood SOCKET INTERFACE MAX_BATCHES
//! ```
//!
//! Prints one JSON line: `{"accepted":N,"error":MESSAGE,"reports":M,
//! "refused_reports":R,"after":"ok"|ERROR}` (`error` null if MAX_BATCHES
//! batches were all taken), or `{"open_error":...}`.

use ringcap_client::{Client, InjectFrame, InjectStatus, OpenRequest, MAX_INJECT_BATCH};
use std::path::Path;
use std::process::ExitCode;

/// An Ethernet header with an EtherType no guard understands (IEEE's
/// local experimental 0x88b5) and nothing after it: refused by any grant.
fn frame() -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
    f.extend_from_slice(&[0x88, 0xb5]);
    f
}

fn batch(first_tag: u64) -> Vec<InjectFrame> {
    (0..MAX_INJECT_BATCH as u64)
        .map(|i| InjectFrame {
            tag: first_tag + i,
            at_ns: 0,
            tolerance_ns: 1_000_000_000,
            data: frame(),
        })
        .collect()
}

fn run() -> Result<serde_json::Value, String> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 4 {
        return Err("usage: inject_flood SOCKET INTERFACE MAX_BATCHES".into());
    }
    let max: u64 = a[3]
        .parse()
        .map_err(|_| format!("{}: not a number", a[3]))?;
    let client = Client::connect(Path::new(&a[1])).map_err(|e| e.to_string())?;
    let mut s = match client.open(OpenRequest::inject_only(&a[2])) {
        Ok(s) => s,
        Err(e) => return Ok(serde_json::json!({ "open_error": e.to_string() })),
    };
    let (mut accepted, mut error) = (0u64, None);
    for _ in 0..max {
        match s.inject(batch(accepted)) {
            Ok(()) => accepted += MAX_INJECT_BATCH as u64,
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let (mut reports, mut refused) = (0u64, 0u64);
    loop {
        let got = s.inject_reports().map_err(|e| e.to_string())?;
        if got.is_empty() {
            break;
        }
        reports += got.len() as u64;
        refused += got
            .iter()
            .filter(|r| r.status == InjectStatus::Refused)
            .count() as u64;
    }
    let after = match s.inject(batch(accepted)) {
        Ok(()) => "ok".to_string(),
        Err(e) => e.to_string(),
    };
    Ok(serde_json::json!({
        "accepted": accepted,
        "error": error,
        "reports": reports,
        "refused_reports": refused,
        "after": after,
    }))
}

fn main() -> ExitCode {
    match run() {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("inject_flood: {e}");
            ExitCode::FAILURE
        }
    }
}
