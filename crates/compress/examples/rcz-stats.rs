//! Encode speed and size of a pcap file's records (classic pcap, either
//! resolution, host byte order): `rcz-stats FILE.pcap [-v]`. Prints
//! packets, bytes per packet, and packets per second of one core
//! (encoding only, records already in memory, best of 5 passes). With -v,
//! the size and tag of every record.

use ringcap_compress::{Encoder, FileHeader, Resolution};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: rcz-stats FILE.pcap [-v]");
        std::process::exit(2);
    };
    let verbose = args.iter().any(|a| a == "-v");
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
    for _ in 0..5 {
        let mut out = header.to_bytes().to_vec();
        let mut e = Encoder::new(linktype);
        let t = Instant::now();
        for &(ts, wire, d) in &recs {
            if e.push(ts, wire, d) {
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
        for &(ts, wire, d) in &recs {
            if e.push(ts, wire, d) {
                e.finish_block(&mut out);
            }
        }
        let st = e.stats();
        let names = [
            "literal",
            "open-literal",
            "tag+ext",
            "slot(sel3)",
            "dts",
            "fields+runs+tail",
            "tail",
            "compressed-records",
            "l4csum",
            "ack",
            "tsval",
            "tsecr",
            "wire",
            "ipid",
            "frag",
            "seq",
            "win",
            "caplen",
            "newslot",
            "runs",
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
