//! Indexing cost and query time on one large generated file (run with
//! `cargo run --release -p ringcap-index --example index_cost [PACKETS]`):
//! writes PACKETS (default 500,000) mixed-size packets over 20,000
//! interleaved flows to a pcap file in $TMPDIR, indexes it, and times a
//! selective query through the index against a scan of the same file.

mod common;
use common::cpu_seconds;

use std::io::Write;
use std::time::Instant;

use ringcap_format::{pcap, TsResolution};
use ringcap_index::{build_index, plan, run, OutFormat, Output, Query, Window};

fn main() {
    let packets: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500_000);
    let dir = std::env::temp_dir().join(format!("ringcap-index-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("big.pcap");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    w.write_all(&pcap::file_header(1, 262_144, TsResolution::Nano))
        .unwrap();
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut ts = 1_764_000_000_000_000_000u64;
    let mut frame = vec![0u8; 1514];
    for _ in 0..packets {
        let flow = rnd() % 20_000;
        let len = match rnd() % 10 {
            0..=3 => 66,
            4..=5 => 590,
            _ => 1514,
        };
        // Ethernet, IPv4 (198.18.0.0/15 hosts by flow), TCP.
        let f = &mut frame[..len];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        f[23] = 6;
        f[26..30].copy_from_slice(&[198, 18, (flow % 200) as u8, 1]);
        f[30..34].copy_from_slice(&[198, 19, (flow / 200) as u8, 2]);
        f[34..36].copy_from_slice(&(1024 + flow as u16).to_be_bytes());
        f[36..38].copy_from_slice(&[0, 80]);
        f[46] = 0x50;
        ts += 1_000;
        let mut h = [0u8; 16];
        pcap::write_record_header(&mut h, ts, len as u32, len as u32, TsResolution::Nano);
        w.write_all(&h).unwrap();
        w.write_all(f).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let t = Instant::now();
    let cpu0 = cpu_seconds();
    let r = build_index(&path).expect("index");
    let cpu = cpu_seconds() - cpu0;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "indexed {} packets, {:.1} MB in {:.3} s ({:.3} s of CPU: {:.0} ns/packet), {:.0} MB/s; index {} B = {:.3}% ({} groups, {} keys)",
        r.packets,
        r.capture_len as f64 / 1e6,
        secs,
        cpu,
        cpu * 1e9 / r.packets as f64,
        r.capture_len as f64 / 1e6 / secs,
        r.index_len,
        100.0 * r.index_len as f64 / r.capture_len as f64,
        r.groups,
        r.keys
    );
    for filter in [
        "host 198.18.7.1 and port 1031",
        "port 1031",
        "host 198.19.3.2",
    ] {
        for use_index in [true, false] {
            let t = Instant::now();
            let mut out = Output::new(Box::new(std::io::sink()), OutFormat::Pcap);
            let q = Query {
                filter,
                plan: plan(filter),
                window: Window::default(),
                use_index,
                stop: None,
                readers: ringcap_index::readers_here(),
            };
            let st = run(&q, std::slice::from_ref(&path), &mut out, &mut |_| {}).expect("query");
            println!(
                "  '{filter}' {}: {} packets in {:.4} s, read {} of {} bytes (warm page cache)",
                if use_index { "indexed" } else { "scan   " },
                st.matched,
                t.elapsed().as_secs_f64(),
                st.bytes_read,
                st.file_bytes
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
