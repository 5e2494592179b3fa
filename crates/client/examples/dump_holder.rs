//! Fetches each of the user's dump files as it appears and keeps every
//! descriptor open; deletes every other file itself and leaves the rest to
//! the daemon's retention. The test client of ringcapd's dump quota against
//! descriptors kept open (crates/daemon/tests/dump.rs), run as an
//! unprivileged user.
//!
//! ```text
//! dump_holder SOCKET SECONDS
//! ```
//!
//! Prints one JSON line: `{"held":N,"gone":[{"name":..,"bytes":..,
//! "deleted_by_me":..},...]}`, where `gone` are the files held that are no
//! longer in the directory (their link count is 0) and `bytes` what each
//! still holds on disk through the kept descriptor; `missed` the files
//! listed that could not be fetched, and why.

use ringcap_client::Client;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn run() -> Result<serde_json::Value, String> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 3 {
        return Err("usage: dump_holder SOCKET SECONDS".into());
    }
    let secs: f64 = a[2]
        .parse()
        .map_err(|_| format!("{}: not a number", a[2]))?;
    let mut c = Client::connect(Path::new(&a[1])).map_err(|e| e.to_string())?;
    let (mut held, mut seen, mut missed) = (Vec::new(), HashSet::new(), Vec::new());
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs_f64(secs) {
        for f in c.list_dumps().map_err(|e| e.to_string())? {
            if !seen.insert(f.name.clone()) {
                continue;
            }
            // Retention may have taken it since the listing.
            let file = match c.fetch_dump(&f.name) {
                Ok((file, _)) => file,
                Err(e) => {
                    missed.push(format!("{}: {e}", f.name));
                    continue;
                }
            };
            // (Retention may take it first: then it is not mine.)
            let mine = held.len() % 2 == 0 && c.delete_dump(&f.name).is_ok();
            held.push((f.name, file, mine));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut gone = Vec::new();
    for (name, file, mine) in &held {
        let m = file.metadata().map_err(|e| e.to_string())?;
        if m.nlink() == 0 {
            gone.push(serde_json::json!({
                "name": name,
                "bytes": m.blocks() * 512,
                "deleted_by_me": mine,
            }));
        }
    }
    Ok(serde_json::json!({ "held": held.len(), "gone": gone, "missed": missed }))
}

fn main() -> ExitCode {
    match run() {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dump_holder: {e}");
            ExitCode::FAILURE
        }
    }
}
