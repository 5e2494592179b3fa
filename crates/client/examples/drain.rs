//! Drains a session: the Rust side of the benchmark's client-loop
//! comparison (bench/run, clients phase; the C and Python sides are
//! bench/clients/drain.c and drain.py, the same steps).
//!
//! ```text
//! drain SOCKET INTERFACE COUNT
//! ```
//!
//! Opens a session (`udp`, 96 bytes), prints `ready`, waits for a line on
//! stdin (the benchmark fills the session's ring meanwhile), then reads
//! until COUNT packets (or 2 s without one) and prints
//! `drained N packets B bytes in S s`.

use ringcap_client::{Client, OpenRequest, Snap};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn run() -> Result<(), String> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 4 {
        return Err("usage: drain SOCKET INTERFACE COUNT".into());
    }
    let count: u64 = a[3].parse().map_err(|_| format!("{}: not a count", a[3]))?;
    let mut req = OpenRequest::new(&a[2], "udp");
    req.snaplen = Snap::Bytes(96);
    let mut s = Client::connect(Path::new(&a[1]))
        .and_then(|c| c.open(req))
        .map_err(|e| e.to_string())?;
    println!("ready");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let (mut n, mut bytes) = (0u64, 0u64);
    let t0 = Instant::now();
    let mut last = Instant::now();
    while n < count && last.elapsed() < Duration::from_secs(2) {
        let got = s
            .packets(|p| {
                n += 1;
                bytes += p.data.len() as u64;
            })
            .map_err(|e| e.to_string())?;
        if got == 0 {
            s.wait(Duration::from_millis(10))
                .map_err(|e| e.to_string())?;
        } else {
            last = Instant::now();
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("drained {n} packets {bytes} bytes in {secs:.6} s");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drain: {e}");
            ExitCode::from(2)
        }
    }
}
