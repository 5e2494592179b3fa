//! The Paris-traceroute example (crates/client/examples/paris_traceroute.rs)
//! run as `nobody` through ringcapd in three namespaces — source (the
//! daemon's interface) — router — target — under a grant that allows only
//! UDP probes to ports 33434–33534 with only the TTL and IP ID settable. It
//! must find the router and the target, with RTTs from the transmit and
//! receive timestamps; tcpdump as root on the router checks what left.

mod common;

use common::*;
use ringcap_testkit::capture::start_peer_tcpdump;
use ringcap_testkit::Testbed;
use std::time::Duration;

#[test]
fn traceroute_finds_the_router_and_the_target_unprivileged() {
    if !can_run() {
        return;
    }
    let mut tb = Testbed::new().expect("testbed");
    let target = tb.add_target().expect("a target behind the peer");
    let d = Daemon::start(
        &tb,
        &format!(
            "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\ncapture_filter = \"icmp\"\n\
             max_snaplen = 128\n[grant.inject]\nfilter = \"udp dst portrange 33434-33534\"\n\
             settable = [\"ip.ttl\", \"ip.id\"]\nmax_packets_per_second = 100\nburst = 10\n",
            tb.capture_if
        ),
    );
    let dir = open_dir("traceroute");
    let probes = dir.join("probes.pcap");
    let mut td = start_peer_tcpdump(&tb, &probes, "udp").expect("tcpdump on the router");
    let mut cmd = as_user(&tb, NOBODY, &example_bin("paris_traceroute"));
    cmd.arg("--daemon")
        .arg(&d.socket)
        .args(["-i", &tb.capture_if, "--max-ttl", "4", "--probes", "3"])
        .arg(target.ip.to_string());
    let (status, stdout, stderr) = run_limited_out(&mut cmd, Duration::from_secs(30));
    println!("{stdout}{stderr}");
    assert!(status.success(), "paris_traceroute: {stderr}");
    std::thread::sleep(Duration::from_millis(300));
    td.terminate().expect("stop tcpdump");

    // Hop 1 is the router (its address toward the source), hop 2 the
    // target, which answers port unreachable; the trace ends there.
    let hops: Vec<Vec<&str>> = stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(hops.len(), 2, "{stdout}");
    for (hop, want) in hops.iter().zip([tb.peer_ip, target.ip]) {
        assert_eq!(hop[1], want.to_string(), "{stdout}");
        let rtts: Vec<f64> = hop[2..]
            .chunks(2)
            .map(|c| {
                assert_eq!(c.get(1), Some(&"ms"), "{stdout}");
                c[0].parse().unwrap()
            })
            .collect();
        assert_eq!(rtts.len(), 3, "three answered probes: {stdout}");
        assert!(
            rtts.iter().all(|r| *r > 0.0 && *r < 100.0),
            "RTTs in ms: {rtts:?}"
        );
    }

    // What left: 12 probes (TTL 1..4, 3 each), all in one flow from the
    // source's own address, each with its own IP ID.
    let got = read(&probes);
    // (The one ordinary datagram that resolved the router's MAC has TTL 64.)
    let probes: Vec<_> = got
        .iter()
        .filter(|p| p.data.len() >= 42 && p.data[23] == 17 && p.data[22] <= 4)
        .collect();
    assert_eq!(
        probes.len(),
        12,
        "{} probes reached the router",
        probes.len()
    );
    let mut ids = std::collections::HashSet::new();
    for (k, p) in probes.iter().enumerate() {
        let f = &p.data;
        assert_eq!(f[22], 1 + (k / 3) as u8, "probe {k}: TTL");
        assert_eq!(
            f[26..30],
            tb.capture_ip.octets(),
            "probe {k}: source address"
        );
        assert_eq!(f[30..34], target.ip.octets(), "probe {k}: destination");
        assert_eq!(f[34..36], 45000u16.to_be_bytes(), "probe {k}: source port");
        assert!(ids.insert([f[18], f[19]]), "probe {k}: IP ID repeated");
    }
    d.stop();
}
