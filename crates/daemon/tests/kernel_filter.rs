//! A session alone on an interface has its filter run by the kernel (the
//! hub puts it on its socket and stops filtering that session's packets in
//! user space); a second session joining puts the accept-all filter back,
//! and its leaving narrows it again. The test switches back and forth a
//! dozen times while traffic for both flows at a steady rate, so that every
//! switch finds packets the old program judged in the ring, in the block the
//! kernel is filling and in flight on the sending CPU. The lone session
//! must get exactly what its filter (ANDed with the framework) keeps of
//! everything sent — none of the other session's packets from before a
//! narrowing, none of its own lost around a widening — and the other
//! session only packets of its own filter.

mod common;

use common::*;
use ringcap_client::{Client as DaemonClient, OpenRequest, Snap};
use ringcap_testkit::{frames, Testbed};
use std::process::Command;
use std::time::{Duration, Instant};

const FRAMEWORK: &str = "not port 22";
/// Ports, TCP flags through an indexed load, IPv6, fragments, the length.
const LONE: &str =
    "(udp and dst port 20001) or tcp[tcpflags] & tcp-syn != 0 or ip6 or ip[6:2] & 0x3fff != 0 or greater 1000";
const OTHER: &str = "udp and dst port 20002";

/// The hub's packet socket filters in the capture namespace, as `ss` shows
/// them: one line of `bpf filter (N):` per socket with a filter.
fn socket_filters(tb: &Testbed) -> Vec<usize> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &tb.capture_ns,
            "ss",
            "-0",
            "-b",
            "-a",
            "-n",
        ])
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("bpf filter (")?;
            rest.split(')').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn a_lone_session_gets_exactly_its_packets_while_the_kernel_filter_switches() {
    if !can_run() {
        return;
    }
    let began = Instant::now();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(
        &tb,
        &format!(
            "[[grant]]\nusers = [\"nobody\", \"root\"]\ninterfaces = [\"{}\"]\ncapture_filter = \"{FRAMEWORK}\"\nmax_snaplen = 96\n",
            tb.capture_if
        ),
    );
    let out = open_dir("kernel-filter");
    let lone = start_client(&tb, &d, NOBODY, &out, "lone", &["-s", "96", "--", LONE]);

    // Both ports, a fifth of those frames with a VLAN tag (the kernel filter
    // sees them untagged, as user space does), and every third frame of the
    // mixed shapes (fragments, options, IPv6 extension headers, ARP, full
    // size; not the tagged ones, which the offline oracle cannot judge), at a
    // rate the testbed keeps up with for the whole back and forth.
    let ep = tb.endpoints();
    let sent: Vec<Vec<u8>> = (0..216_000u32)
        .map(|s| {
            let shape = frames::mixed_shape(s);
            if s % 3 == 2 && !shape.is_vlan_tagged() {
                return frames::build(shape, &ep, s, frames::mixed_flow(s));
            }
            let f = frames::udp4(&ep, s, 40_000, 20_001 + (s % 2) as u16, 20);
            if s % 5 == 4 {
                frames::insert_vlan_tags(&f, &[(0x8100, 7)])
            } else {
                f
            }
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let narrowed_alone = socket_filters(&tb);
    let mut widened = Vec::new();
    let (mut other_got, mut other_wrong) = (0u64, 0u64);
    let other_oracle = Oracle::new(FRAMEWORK, OTHER);
    std::thread::scope(|s| {
        let traffic = s.spawn(|| tb.send_from_peer(&sent, 24_000));
        // tcpreplay's start.
        std::thread::sleep(Duration::from_millis(300));
        for round in 0..12u64 {
            // Alone long enough for the hub to narrow again (it does at
            // most every 250 ms).
            std::thread::sleep(Duration::from_millis(300 + 13 * round));
            let mut other = DaemonClient::connect(&d.socket)
                .expect("connect")
                .open(OpenRequest {
                    snaplen: Snap::Bytes(96),
                    ..OpenRequest::new(&tb.capture_if, OTHER)
                })
                .expect("open the other session");
            std::thread::sleep(Duration::from_millis(60 + 7 * round));
            if round == 0 {
                widened = socket_filters(&tb);
            }
            let t0 = Instant::now();
            let mut got = 0;
            while got == 0 && t0.elapsed() < Duration::from_secs(2) {
                got += other
                    .packets(|p| {
                        if !other_oracle.accepts(p.data) {
                            other_wrong += 1;
                        }
                    })
                    .expect("read the other session");
                let _ = other.wait(Duration::from_millis(20));
            }
            // Its packets reach it while the lone session's filter was on
            // the socket when it joined: the filter was widened.
            assert!(got > 0, "round {round}: the other session got nothing");
            other_got += got;
            drop(other);
        }
        traffic.join().expect("traffic thread").expect("send");
    });
    assert_eq!(
        other_wrong, 0,
        "the other session got packets outside its filter"
    );
    let done = lone.stop();
    done.assert_ok("lone");
    let counters = done.final_counters("lone");
    for k in ["packets_dropped_client", "packets_dropped_ring"] {
        assert_eq!(num(&counters, k), 0, "{k} in {counters}");
    }
    let want = Oracle::new(FRAMEWORK, LONE).expect(&sent, 96);
    assert_packets(&done.packets(), &want, "the lone session");
    d.stop();
    eprintln!(
        "filters alone {narrowed_alone:?}, with two {widened:?}; the other got {other_got}; test took {:?}",
        began.elapsed()
    );
    // The switch really happened: a narrowed program (several
    // instructions) alone, accept-all (one) with two sessions.
    assert!(
        narrowed_alone.iter().any(|&n| n > 1),
        "no narrowed filter alone: {narrowed_alone:?}"
    );
    assert!(
        widened.contains(&1) && !widened.iter().any(|&n| n > 1),
        "not widened with two sessions: {widened:?}"
    );
}
