//! The export path alone, for issue 28's "export of >= 1 M flow records per
//! second to a local collector": N distinct one-packet IPv4 UDP flows go
//! through a flow table into the exporter (as `ringcap capture` would at
//! the end of a file: every flow still open is flushed), nothing read from
//! a file or a socket.
//!
//! `cargo run --release -p ringcap-flow --example export_rate -- N URL
//! [PACE]` (URL as `--flows` takes it, e.g. `ipfix://127.0.0.1:9995`; PACE:
//! at most this many bytes of datagrams a second). Prints one
//! JSON line: records, wall and CPU seconds of the process (user+sys, all
//! threads, from /proc/self/stat) and the export counters.

use ringcap_flow::{ExportOptions, Exporter, FlowKey, FlowTable, PacketInfo, TableConfig, Target};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// User+sys CPU seconds of this process (all threads, exited ones too).
fn cpu_s() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command (which is in parentheses): utime is the
    // 12th, stime the 13th of them, in clock ticks (100 a second on Linux).
    let rest = s.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) as f64 / 100.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 && args.len() != 4 {
        eprintln!("usage: export_rate N URL [PACE_BYTES_PER_S]");
        std::process::exit(2);
    }
    let n: u32 = match args[1].parse() {
        Ok(n) if n > 0 => n,
        _ => {
            eprintln!("{}: give a number of flows", args[1]);
            std::process::exit(2);
        }
    };
    let target = match Target::parse(&args[2]) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let cfg = TableConfig {
        active_ns: 3_600_000_000_000,
        idle_ns: 3_600_000_000_000,
        max_flows: n,
    };
    let pace = args.get(3).and_then(|p| p.parse().ok());
    let mut table = FlowTable::new(cfg, 0x5eed);
    let opts = ExportOptions {
        pace_bytes_per_s: pace,
        ..ExportOptions::default()
    };
    let exporter = match Exporter::start(&[target], opts) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let tx = exporter.sender();
    let base_ns = 1_790_000_000_000_000_000u64;
    let (cpu0, t0) = (cpu_s(), Instant::now());
    for i in 0..n {
        let mut key = FlowKey {
            src: [0; 16],
            dst: [0; 16],
            sport: 1024 + (i % 50_000) as u16,
            dport: 53,
            proto: 17,
            v6: false,
            vlan: 0,
            icmp: 0,
            tunnel: ringcap_flow::NO_TUNNEL,
        };
        // 198.18.0.0/15: every flow its own source.
        key.src[..4].copy_from_slice(&(0xc612_0000u32 | (i & 0x1_ffff)).to_be_bytes());
        key.dst[..4].copy_from_slice(&(0xc613_0000u32 | (i >> 17)).to_be_bytes());
        let p = PacketInfo {
            key,
            octets: 46,
            tcp_flags: 0,
            icmp: 0,
        };
        table.add(&p, base_ns + u64::from(i) * 1000, &mut |r| tx.send(r, true));
    }
    let (cpu1, t1) = (cpu_s(), Instant::now());
    table.flush(&mut |r| tx.send(r, true));
    drop(tx);
    let stats = exporter.finish();
    let (cpu2, t2) = (cpu_s(), Instant::now());
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let export_wall = (t2 - t1).as_secs_f64();
    println!(
        "{{\"records\":{},\"table_wall_s\":{:.3},\"table_cpu_s\":{:.2},\"export_wall_s\":{:.3},\"export_cpu_s\":{:.2},\"records_per_s\":{:.0},\"messages\":{},\"export_errors\":{},\"queue_dropped\":{}}}",
        g(&stats.exported),
        (t1 - t0).as_secs_f64(),
        cpu1 - cpu0,
        export_wall,
        cpu2 - cpu1,
        g(&stats.exported) as f64 / export_wall,
        g(&stats.messages),
        g(&stats.export_errors),
        g(&stats.queue_dropped),
    );
}
