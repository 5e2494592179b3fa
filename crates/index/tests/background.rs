//! The background indexer: every published file gets its index, from the
//! keys its tap took while it was written, or by reading it back; and it
//! says which of the two causes a read-back had (files published faster
//! than it indexes them, beyond `GATHERED` waiting, are not files "cut
//! after a failed write").

use ringcap_index::background::{Indexer, ReadBack, GATHERED};
use ringcap_index::index_path;
use ringcap_sink::FileObserver;
use ringcap_testkit::TempDir;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A pcap file with one 60-byte Ethernet frame carrying `n`.
fn one_packet_pcap(n: u8) -> Vec<u8> {
    let mut b = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for v in [1_700_000_000u32, u32::from(n), 60, 60] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    let mut frame = [0u8; 60];
    frame[59] = n;
    b.extend_from_slice(&frame);
    b
}

/// Holds the indexing thread until the test has published every file.
static GATE: AtomicBool = AtomicBool::new(false);

fn wait_for_gate() {
    let t = Instant::now();
    while !GATE.load(Ordering::Acquire) && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn read_backs_are_told_apart_by_cause() {
    let dir = TempDir::new("index-background");
    let ix = Indexer::start(wait_for_gate);
    let tapped = GATHERED + 3;
    let mut files = Vec::new();
    for n in 0..tapped {
        let path = dir.join(format!("c{n}.pcap"));
        let bytes = one_packet_pcap(n as u8);
        let mut tap = ix.tap(&path).expect("a tap while indexing");
        std::fs::write(&path, &bytes).expect("write");
        // As the writer does: the file's header, then its records.
        tap.wrote(0, &bytes[..24]);
        tap.wrote(24, &bytes[24..]);
        drop(tap);
        ix.published(&path);
        files.push(path);
    }
    // One file nobody tapped (recovered from an earlier run, say).
    let untapped = dir.join("recovered.pcap");
    std::fs::write(&untapped, one_packet_pcap(99)).expect("write");
    ix.published(&untapped);
    files.push(untapped);
    GATE.store(true, Ordering::Release);
    ix.finish();
    for f in &files {
        assert!(index_path(f).exists(), "{} has its index", f.display());
    }
    assert_eq!(
        ix.read_back(),
        ReadBack {
            untapped: 1,
            set_aside: tapped - GATHERED,
        }
    );
}
