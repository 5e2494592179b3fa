//! Tests of the testkit itself against real namespaces, veth pairs, tcpreplay and
//! tcpdump. Each skips (prints `SKIP: ...`, or fails when
//! `RINGCAP_REQUIRE_PRIVILEGED_TESTS=1`) when namespaces cannot be made here.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use ringcap_testkit::capture::{self, start_tcpdump};
use ringcap_testkit::frames::{self, mixed_shape, Shape};
use ringcap_testkit::netns::have_program;
use ringcap_testkit::{read_pcap, skip, skip_unless_netns, TempFile, Testbed, TestbedOptions};

fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ns_exists(name: &str) -> bool {
    netns_list()
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

fn skip_without_tools() -> bool {
    for p in ["tcpreplay", "tcpdump", "ethtool"] {
        if !have_program(p) {
            skip(format!("{p} not installed"));
            return true;
        }
    }
    false
}

#[test]
fn mixed_frames_arrive_byte_for_byte() {
    skip_unless_netns!();
    if skip_without_tools() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 100);
    let out = TempFile::new("rt", "pcap").unwrap();
    let rx0 = tb.capture_if_counter("rx_packets");
    let td = start_tcpdump(&tb, out.path(), Some(100), "").expect("tcpdump");
    tb.send_from_peer(&sent, 2000).expect("send");
    let status = td.finish(Duration::from_secs(10)).expect("tcpdump exit");
    assert!(status.success(), "tcpdump: {status}");

    let got = read_pcap(out.path()).expect("read");
    assert_eq!(got.len(), 100, "captured count");
    let mut by_seq = HashMap::new();
    for p in &got {
        let seq = frames::seq_of(&p.data).expect("every captured frame has a tag");
        assert_eq!(p.wire_len as usize, p.data.len());
        assert!(by_seq.insert(seq, p).is_none(), "seq {seq} captured twice");
    }
    for (seq, f) in sent.iter().enumerate() {
        let p = by_seq
            .get(&(seq as u32))
            .unwrap_or_else(|| panic!("seq {seq} ({:?}) missing", mixed_shape(seq as u32)));
        assert_eq!(
            &p.data,
            f,
            "seq {seq} ({:?}) differs",
            mixed_shape(seq as u32)
        );
    }
    // Capture order is send order on a single veth queue.
    let order: Vec<u32> = got
        .iter()
        .map(|p| frames::seq_of(&p.data).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "order {order:?}");
    assert!(got.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    assert!(tb.capture_if_counter("rx_packets") - rx0 >= 100);
    // Nothing was sent back by the capture namespace's kernel.
    assert_eq!(tb.capture_if_counter("tx_packets"), 0);
}

#[test]
fn names_unique_and_drop_removes_namespaces() {
    skip_unless_netns!();
    if !have_program("ethtool") {
        skip("ethtool not installed");
        return;
    }
    let a = Testbed::new().expect("testbed a");
    let b = Testbed::new().expect("testbed b");
    let names = [
        a.capture_ns.clone(),
        a.peer_ns.clone(),
        b.capture_ns.clone(),
        b.peer_ns.clone(),
    ];
    let mut uniq = names.to_vec();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), 4);
    assert_ne!(a.capture_if, b.capture_if);
    assert_ne!(a.capture_if, a.peer_if);
    for tb in [&a, &b] {
        assert!(tb.capture_if.len() <= 15 && tb.peer_if.len() <= 15);
        assert_eq!(
            tb.capture_mac[0] & 0x03,
            0x02,
            "locally administered unicast"
        );
        assert_eq!(tb.capture_ip.octets()[..2], [198, 18]);
    }
    for n in &names {
        assert!(ns_exists(n), "{n} exists while the testbed lives");
    }
    // A process left running inside is killed on drop.
    let mut sleeper = a.in_capture_ns("sleep");
    let sleeper = sleeper.arg("60").spawn().unwrap();
    // `ip netns exec` enters the namespace a moment after the spawn: only
    // then can the testbed find the process there.
    let pid = sleeper.id().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !std::process::Command::new("ip")
        .args(["netns", "pids", &a.capture_ns])
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .any(|p| p == pid)
        })
    {
        assert!(
            std::time::Instant::now() < deadline,
            "sleep never entered the namespace"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(a);
    drop(b);
    for n in &names {
        assert!(!ns_exists(n), "{n} deleted on drop");
    }
    let mut sleeper = sleeper;
    let st = sleeper.wait().unwrap();
    assert!(!st.success(), "sleep was killed");

    // And when the test body panics.
    let mut seen = None;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let tb = Testbed::new().expect("testbed");
        seen = Some((tb.capture_ns.clone(), tb.peer_ns.clone()));
        panic!("deliberate");
    }));
    assert!(r.is_err());
    let (c, p) = seen.unwrap();
    assert!(!ns_exists(&c) && !ns_exists(&p), "deleted after panic");
}

#[test]
fn options_ipv6_link_down_mtu() {
    skip_unless_netns!();
    if !have_program("ethtool") {
        skip("ethtool not installed");
        return;
    }
    let tb = Testbed::with_options(TestbedOptions {
        ipv6: true,
        capture_if_up: false,
        mtu: Some(9000),
        ..TestbedOptions::default()
    })
    .expect("testbed");
    let link = tb
        .in_capture_ns("ip")
        .args(["-o", "link", "show", &tb.capture_if])
        .output()
        .unwrap();
    let link = String::from_utf8_lossy(&link.stdout).into_owned();
    assert!(link.contains("mtu 9000"), "{link}");
    assert!(link.contains("PROMISC"), "{link}");
    assert!(!link.contains(",UP"), "capture end is down: {link}");
    let addr = tb
        .in_peer_ns("ip")
        .args(["-o", "addr", "show", &tb.peer_if])
        .output()
        .unwrap();
    let addr = String::from_utf8_lossy(&addr.stdout).into_owned();
    assert!(addr.contains("inet6 fd52:4300:"), "{addr}");
    tb.set_capture_if_up(true).unwrap();
    let link = tb
        .in_capture_ns("ip")
        .args(["-o", "link", "show", &tb.capture_if])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&link.stdout).contains(",UP"));

    // Defaults: IPv6 off, offloads off.
    let tb = Testbed::new().expect("testbed");
    let v6 = tb
        .in_capture_ns("cat")
        .arg(format!(
            "/proc/sys/net/ipv6/conf/{}/disable_ipv6",
            tb.capture_if
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&v6.stdout).trim(), "1");
    let k = tb
        .in_capture_ns("ethtool")
        .args(["-k", &tb.capture_if])
        .output()
        .unwrap();
    let k = String::from_utf8_lossy(&k.stdout).into_owned();
    for f in [
        "generic-receive-offload: off",
        "tcp-segmentation-offload: off",
        "generic-segmentation-offload: off",
    ] {
        assert!(k.contains(f), "{f} in {k}");
    }
}

#[test]
fn send_is_bounded_and_counts_match() {
    skip_unless_netns!();
    if skip_without_tools() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let too_many = vec![vec![0u8; 60]; ringcap_testkit::netns::MAX_SEND_FRAMES + 1];
    assert!(tb.send_from_peer(&too_many, 1000).is_err());
    drop(too_many);

    // 2000 frames as fast as tcpreplay goes: the interface counters see them all.
    let ep = tb.endpoints();
    let sent: Vec<Vec<u8>> = (0..2000)
        .map(|i| frames::udp4(&ep, i, 1000, 2000, 100))
        .collect();
    let rx0 = tb.capture_if_counter("rx_packets");
    let tx0 = tb.peer_if_counter("tx_packets");
    tb.send_from_peer(&sent, 0).expect("send");
    assert_eq!(tb.peer_if_counter("tx_packets") - tx0, 2000);
    assert_eq!(tb.capture_if_counter("rx_packets") - rx0, 2000);

    // The capture file oracle agrees with what was sent.
    let out = TempFile::new("count", "pcap").unwrap();
    let td = start_tcpdump(&tb, out.path(), Some(46), "").expect("tcpdump");
    tb.send_from_peer(&frames::mixed_sequence(&ep, 46), 5000)
        .expect("send");
    assert!(td.finish(Duration::from_secs(10)).unwrap().success());
    assert_eq!(capture::tcpdump_count(out.path(), "").unwrap(), 46);
    assert_eq!(capture::tcpdump_count(out.path(), "arp").unwrap(), 4);
    assert_eq!(
        capture::tcpdump_count(out.path(), "ip6").unwrap(),
        Shape::ALL
            .iter()
            .filter(|s| matches!(
                s,
                Shape::Udp6 | Shape::Ipv6ExtTcp | Shape::Ipv6ExtTcpRt0 | Shape::Icmp6Echo
            ))
            .count() as u64
            * 2
    );
}
