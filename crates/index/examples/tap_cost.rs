//! What the index costs a capture, without the capture: feeds a pcapng
//! file that `ringcap capture` wrote (its own block layout) through the
//! indexer's tap in ring-block-sized writes, as the writer does, then
//! publishes it; prints the tap's and the index thread's time per packet.
//! `cargo run --release -p ringcap-index --example tap_cost FILE.pcapng`
//! (its index is written beside it).

mod common;
use common::cpu_seconds;

use std::path::PathBuf;
use std::time::Instant;

use ringcap_format::{record_at, RecordFormat};
use ringcap_index::background::Indexer;
use ringcap_sink::FileObserver;

/// Blocks of 4 MiB, as the bench's ring.
const WRITE: usize = 4 << 20;

fn main() {
    let path = PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: tap_cost FILE.pcapng"),
    );
    let bytes = std::fs::read(&path).expect("read");
    // The header: blocks up to the first packet block (one with a time);
    // then writes of whole blocks, as the ring's.
    let block = |at| record_at(RecordFormat::Pcapng, &bytes, at);
    let mut head = 0;
    while let Some((len, None)) = block(head) {
        head += len;
    }
    let mut cuts = vec![0, head];
    let (mut at, mut packets) = (head, 0u64);
    while let Some((len, ts)) = block(at) {
        packets += u64::from(ts.is_some());
        if at + len - cuts[cuts.len() - 1] > WRITE {
            cuts.push(at);
        }
        at += len;
    }
    cuts.push(bytes.len());
    for rep in 0..3 {
        let ix = Indexer::start(|| {});
        let mut tap = ix.tap(&path).expect("tap");
        let t = Instant::now();
        for w in cuts.windows(2) {
            tap.wrote(w[0] as u64, &bytes[w[0]..w[1]]);
        }
        let tapped = t.elapsed();
        drop(tap);
        // The index thread's CPU (the fsync's wait for the disk is not
        // the indexer's work).
        let cpu = cpu_seconds();
        ix.published(&path);
        ix.finish();
        let finished = std::time::Duration::from_secs_f64(cpu_seconds() - cpu);
        let ns = |d: std::time::Duration| d.as_nanos() as f64 / packets as f64;
        println!(
            "rep {rep}: {packets} packets: tap {:.1} ns/packet, index thread {:.1} ns CPU/packet",
            ns(tapped),
            ns(finished)
        );
    }
}
