//! pktd's "dozen": twelve clients (nobody), each with its own filter, at
//! once on a traffic run sent as fast as the testbed's generator goes, snap
//! length 96: none loses a packet — each output is exactly what its filter
//! (ANDed with the framework) keeps of the frames sent, computed offline by
//! libpcap's interpreter. A thirteenth session that never reads overflows
//! its own ring: its drops are counted, the twelve still lose nothing.

mod common;

use common::*;
use ringcap_client::{Client as DaemonClient, OpenRequest, Snap};
use ringcap_testkit::Testbed;
use std::time::{Duration, Instant};

const FRAMEWORK: &str = "not port 22";

#[test]
fn twelve_clients_lose_nothing_next_to_one_that_never_reads() {
    if !can_run() {
        return;
    }
    let began = Instant::now();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(
        &tb,
        &format!(
            "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{0}\"]\ncapture_filter = \"{FRAMEWORK}\"\nmax_snaplen = 96\n\n[[grant]]\nusers = [\"root\"]\ninterfaces = [\"{0}\"]\ncapture_filter = \"{FRAMEWORK}\"\nring_size = \"1M\"\n",
            tb.capture_if
        ),
    );
    let peer = tb.peer_ip.to_string();
    let src_udp = format!("src host {peer} and udp");
    let filters: [&str; 12] = [
        "",
        "udp",
        "tcp",
        "icmp or icmp6",
        "arp",
        "ip6",
        "udp and dst port 20002",
        "not udp",
        "greater 300",
        "tcp[tcpflags] & tcp-syn != 0",
        &src_udp,
        "ip[6:2] & 0x3fff != 0",
    ];
    let out = open_dir("dozen");
    let mut clients: Vec<Client> = filters
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let c = start_client(
                &tb,
                &d,
                NOBODY,
                &out,
                &format!("c{i}"),
                &["-s", "96", "--", f],
            );
            assert!(c.ready.contains("snaplen 96 bytes"), "{}", c.ready);
            c
        })
        .collect();
    let mut idle = DaemonClient::connect(&d.socket)
        .expect("connect")
        .open(OpenRequest {
            snaplen: Snap::Bytes(96),
            ..OpenRequest::new(&tb.capture_if, "")
        })
        .expect("open the session that never reads");

    let sent = untagged_frames(&tb, 0..23 * 1300);
    let t0 = Instant::now();
    tb.send_from_peer(&sent, 0).expect("send");
    let rate = sent.len() as f64 / t0.elapsed().as_secs_f64();
    std::thread::sleep(SETTLE);

    let (s, ring) = whole_counters(&mut idle, sent.len() as u64);
    assert!(
        ring.packets_dropped > 0 && s.packets_dropped_client == ring.packets_dropped,
        "{s:?} {ring:?}"
    );
    assert_eq!(
        s.packets_filter_accepted,
        s.packets_delivered + s.packets_dropped_client,
        "{s:?}"
    );
    assert_eq!(s.packets_filter_accepted, sent.len() as u64, "{s:?}");

    std::thread::sleep(SETTLE);
    for c in &mut clients {
        c.child.signal(libc::SIGINT).expect("SIGINT");
    }
    for (i, (c, f)) in clients.into_iter().zip(filters).enumerate() {
        let done = c.wait(Duration::from_secs(30));
        let what = format!("client {i} ({f:?})");
        done.assert_ok(&what);
        let counters = done.final_counters(&what);
        for k in [
            "packets_dropped_client",
            "packets_dropped_ring",
            "packets_rate_limited",
        ] {
            assert_eq!(num(&counters, k), 0, "{what}: {k} in {counters}");
        }
        let want = Oracle::new(FRAMEWORK, f).expect(&sent, 96);
        assert!(
            !want.is_empty(),
            "{what} keeps nothing of the traffic: a useless filter"
        );
        assert_packets(&done.packets(), &want, &what);
    }
    drop(idle);
    d.stop();
    eprintln!(
        "{} frames sent at {rate:.0} frames/s; test took {:?}",
        sent.len(),
        began.elapsed()
    );
}
