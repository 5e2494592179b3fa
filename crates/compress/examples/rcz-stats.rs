//! Encode speed and size of a pcap file's records (classic pcap, either
//! resolution, host byte order): `rcz-stats FILE.pcap [-v] [-n PASSES] [-b RECORDS]`. Prints
//! packets, bytes per packet, and packets per second of one core
//! (encoding only, records already in memory, best of PASSES, default 5). With -v,
//! the size and tag of every record.

use ringcap_compress::{Encoder, FileHeader, Resolution};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: rcz-stats FILE.pcap [-v] [-n PASSES]");
        std::process::exit(2);
    };
    let verbose = args.iter().any(|a| a == "-v");
    // -n PASSES (default 5): with many, `perf stat -e task-clock` of runs
    // with different counts gives the CPU time of one pass, which a busy
    // machine's scheduling does not inflate as it does the wall time.
    let passes: usize = args
        .iter()
        .position(|a| a == "-n")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    // -b RECORDS: also end a block every RECORDS records (as ringcap's
    // writer does at each batch it writes).
    let per_block: usize = args
        .iter()
        .position(|a| a == "-b")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    let b = std::fs::read(path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(1)
    });
    if b.len() < 24 {
        eprintln!("{path}: not a pcap file");
        std::process::exit(1);
    }
    let u = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let nano = match u(0) {
        0xa1b2_c3d4 => false,
        0xa1b2_3c4d => true,
        _ => {
            eprintln!("{path}: not a little-endian pcap file");
            std::process::exit(1);
        }
    };
    let linktype = u(20);
    let mut recs = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let (s, f, cap, wire) = (
            u(at) as u64,
            u(at + 4) as u64,
            u(at + 8) as usize,
            u(at + 12),
        );
        let ts = if nano {
            s * 1_000_000_000 + f
        } else {
            s * 1_000_000 + f
        };
        let Some(d) = b.get(at + 16..at + 16 + cap) else {
            break;
        };
        recs.push((ts, wire, d));
        at += 16 + cap;
    }
    let header = FileHeader {
        version: ringcap_compress::VERSION,
        resolution: if nano {
            Resolution::Nano
        } else {
            Resolution::Micro
        },
        linktype,
        snaplen: u(16),
    };
    let mut best = f64::MAX;
    let mut size = 0;
    for _ in 0..passes {
        let mut out = header.to_bytes().to_vec();
        let mut e = Encoder::new(linktype);
        let t = Instant::now();
        for (i, &(ts, wire, d)) in recs.iter().enumerate() {
            if e.push(ts, wire, d) || (i + 1) % per_block == 0 {
                e.finish_block(&mut out);
            }
        }
        e.finish_block(&mut out);
        best = best.min(t.elapsed().as_secs_f64());
        size = out.len();
    }
    if verbose {
        let mut e = Encoder::new(linktype);
        for (i, &(ts, wire, d)) in recs.iter().enumerate() {
            let before = e.pending_bytes();
            e.push(ts, wire, d);
            println!(
                "{i} caplen {} -> {} bytes",
                d.len(),
                e.pending_bytes() - before
            );
        }
    }
    let n = recs.len().max(1) as f64;
    #[cfg(feature = "stats")]
    {
        let mut e = Encoder::new(linktype);
        let mut out = Vec::new();
        for (i, &(ts, wire, d)) in recs.iter().enumerate() {
            if e.push(ts, wire, d) || (i + 1) % per_block == 0 {
                e.finish_block(&mut out);
            }
        }
        let st = e.stats();
        let names = [
            "literal",
            "open-literal",
            "kind+flags",
            "slot number",
            "dts",
            "fields+runs",
            "raw tail",
            "compressed-records",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "new-ctx-records",
            "",
            "",
            "",
        ];
        for (i, v) in st.iter().enumerate() {
            if *v != 0 {
                println!("  {:<20} {:>10} {:>8.3} B/pkt", names[i], v, *v as f64 / n);
            }
        }
    }
    println!(
        "packets {} bytes {} bytes_per_packet {:.2} pcap_bytes_per_packet {:.2} encode_pps {:.0}",
        recs.len(),
        size,
        size as f64 / n,
        b.len() as f64 / n,
        n / best.max(1e-9)
    );
}
