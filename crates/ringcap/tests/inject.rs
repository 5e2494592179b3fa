//! `ringcap inject` as root: the frames of a file leave at their relative
//! times (never early; the send-time error is measured and bounded
//! loosely), each gets exactly one report, and a capture on the peer end
//! receives exactly those frames, with receive times that agree with the
//! reported transmit timestamps.

mod common;

use common::*;
use ringcap_testkit::capture::start_peer_tcpdump;
use ringcap_testkit::frames::{self, Endpoints};
use ringcap_testkit::netns::write_pcap_spaced;
use ringcap_testkit::{skip, skip_unless_netns, Testbed};
use std::time::Duration;

const N: u32 = 2000;

#[test]
fn frames_leave_on_time_with_one_report_each_and_arrive_intact() {
    skip_unless_netns!();
    if !have("tcpdump") {
        return skip("tcpdump is needed");
    }
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("inject-local");
    // From the capture end to the peer: 1000 frames per second.
    let ep = Endpoints::new(tb.capture_mac, tb.peer_mac).with_ipv4(tb.capture_ip, tb.peer_ip);
    let sent: Vec<Vec<u8>> = (0..N)
        .map(|i| frames::udp4(&ep, i, 40000, 33434, 32))
        .collect();
    let input = dir.join("frames.pcap");
    write_pcap_spaced(&input, &sent, 1_000_000).unwrap();

    let peer_pcap = dir.join("peer.pcap");
    let mut td = start_peer_tcpdump(&tb, &peer_pcap, "udp port 33434").expect("tcpdump");

    let report = dir.join("report.jsonl");
    let out = tb
        .in_capture_ns(bin())
        .args(["inject", "-i", &tb.capture_if, "-r"])
        .arg(&input)
        .args(["--start", "+1", "--tolerance", "100", "--report"])
        .arg(&report)
        .output()
        .expect("ringcap inject");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ringcap inject: {stderr}");
    println!("{}", stderr.trim());
    std::thread::sleep(Duration::from_millis(500));
    td.terminate().expect("stop tcpdump");

    let reports: Vec<serde_json::Value> = std::fs::read_to_string(&report)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), N as usize, "one report per frame");
    let mut tags: Vec<u64> = reports.iter().map(|r| r["tag"].as_u64().unwrap()).collect();
    tags.sort_unstable();
    assert_eq!(
        tags,
        (0..u64::from(N)).collect::<Vec<_>>(),
        "each tag exactly once"
    );
    let mut err: Vec<i64> = Vec::new();
    let mut sent_at = vec![0u64; N as usize];
    for r in &reports {
        assert_eq!(r["status"], "sent", "{r}");
        let (req, at) = (
            r["requested_ns"].as_u64().unwrap(),
            r["sent_ns"].as_u64().unwrap(),
        );
        assert!(at >= req, "sent {} ns early: {r}", req - at);
        err.push((at - req) as i64);
        sent_at[r["tag"].as_u64().unwrap() as usize] = at;
    }
    err.sort_unstable();
    let (median, p99) = (err[err.len() / 2], err[err.len() * 99 / 100]);
    println!(
        "send-time error: median {} µs, p99 {} µs, max {} µs",
        median / 1000,
        p99 / 1000,
        err[err.len() - 1] / 1000
    );
    assert!(median <= 100_000, "median {median} ns");
    // Loose on purpose: precision is measured by bench/run's inject phase on a
    // quiet machine; a shared 2-core CI machine stalls threads for milliseconds
    // (p99 5 ms seen). Half the 100 ms tolerance still catches a scheduler that
    // sleeps to the wrong time, and nothing may be early or missed.
    assert!(p99 <= 50_000_000, "p99 {p99} ns");

    let got = read(&peer_pcap);
    assert_eq!(
        got.len(),
        N as usize,
        "the peer received {} of {N}",
        got.len()
    );
    for p in &got {
        let seq = frames::seq_of(&p.data).expect("tagged") as usize;
        assert_eq!(p.data, sent[seq], "frame {seq} arrived changed");
        let d = p.ts_ns as i64 - sent_at[seq] as i64;
        assert!(
            d.abs() <= 20_000_000,
            "frame {seq}: received {d} ns after its transmit timestamp"
        );
    }
}
