//! `--hook xdp` with the capture filter in the XDP program, and `--hook xdp
//! --monitor`, on real traffic over a veth pair between throw-away
//! namespaces: both write exactly the packets the packet hook writes for
//! the same frames, filter and snap length (bytes and lengths); with
//! --monitor the receiving namespace's own sockets get nothing (every frame
//! is dropped at the driver), without it they get everything; --monitor is
//! refused with the other hooks.

mod common;

use common::*;
use ringcap_testkit::frames;
use ringcap_testkit::{skip_unless_netns, Testbed};
use std::process::Stdio;
use std::time::Duration;

/// Frames per second the peer sends at (paced: see tests/hooks.rs).
const PPS: u32 = 20_000;

/// Filters and snap lengths: kernel-side filter decisions on VLAN, IPv6,
/// fragments, TCP flags and lengths, snap lengths shorter than what they
/// read. The packet hook's filter sees VLAN frames untagged (the kernel
/// strips the tag first), the XDP program sees the tag in the bytes (as a
/// file does), so untagged-frame tests say `not vlan` to mean the same
/// frames at both hooks.
const VARIANTS: [(&str, &str); 4] = [
    ("udp and not vlan", "64"),
    ("vlan and udp", "100"),
    (
        "(ip[6:2] & 0x1fff != 0 or tcp[tcpflags] & tcp-syn != 0 or ip6) and not vlan",
        "40",
    ),
    ("(greater 600 or arp) and not vlan", "262144"),
];

fn capture(
    tb: &Testbed,
    args: &[&str],
    sent: &[Vec<u8>],
) -> Vec<ringcap_testkit::capture::CapturedPacket> {
    let dir = TempDir::new("xdpmon");
    let out = dir.file("out.pcap");
    let mut a = vec!["-w", &out];
    a.extend_from_slice(args);
    let run = start(tb, &a);
    tb.send_from_peer(sent, PPS).expect("send");
    let fin = run.stop();
    fin.assert_ok(&format!("{args:?}"));
    fin.assert_no_loss(&format!("{args:?}"));
    assert!(
        !fin.stderr.contains("cannot run in the XDP program"),
        "{args:?}: the filter fell back to user space: {}",
        fin.stderr
    );
    read(&out)
}

#[test]
fn kernel_filter_and_monitor_write_what_the_packet_hook_writes() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 460);
    for (filter, snap) in VARIANTS {
        let packet = capture(&tb, &["--hook", "packet", "-s", snap, filter], &sent);
        let xdp = capture(&tb, &["--hook", "xdp", "-s", snap, filter], &sent);
        let monitor = capture(
            &tb,
            &["--hook", "xdp", "--monitor", "-s", snap, filter],
            &sent,
        );
        assert!(!packet.is_empty(), "{filter}: the packet hook kept nothing");
        assert!(
            packet.len() < sent.len(),
            "{filter}: the packet hook kept everything"
        );
        for (name, got) in [("xdp", &xdp), ("xdp --monitor", &monitor)] {
            let what = format!("{filter:?} -s {snap}: {name} vs packet");
            assert_eq!(got.len(), packet.len(), "{what}: number of packets");
            for (i, (a, b)) in got.iter().zip(&packet).enumerate() {
                assert_eq!(a.data, b.data, "{what}: packet {i}: bytes");
                assert_eq!(a.wire_len, b.wire_len, "{what}: packet {i}: length");
            }
        }
    }
}

/// UDP datagrams from the peer to a socket in the capture namespace:
/// returns how many the socket received.
fn udp_received(tb: &Testbed, n: u32) -> u32 {
    let port = 41_000 + (std::process::id() % 1000) as u16;
    let ip = tb.capture_ip.to_string();
    let recv = format!(
        "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('{ip}',{port}))\ns.settimeout(1.5)\nprint('ready',flush=True)\nn=0\ntry:\n  while True:\n    s.recv(2048); n+=1\nexcept socket.timeout:\n  pass\nprint(n)\n"
    );
    let mut rx = tb.in_capture_ns("python3");
    rx.args(["-c", &recv])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = rx.spawn().expect("python3 receiver");
    let mut out = child.stdout.take().expect("stdout");
    let mut buf = [0u8; 6];
    std::io::Read::read_exact(&mut out, &mut buf).expect("receiver ready");
    let send = format!(
        "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range({n}):\n  s.sendto(b'monitor-test',('{ip}',{port})); time.sleep(0.005)\n"
    );
    let mut tx = tb.in_peer_ns("python3");
    tx.args(["-c", &send]);
    let (status, _, err) = run_limited(tx, Duration::from_secs(20));
    assert!(status.success(), "sender: {err}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("receiver output");
    let _ = child.wait();
    rest.trim()
        .parse()
        .unwrap_or_else(|_| panic!("receiver said {rest:?}"))
}

#[test]
fn monitor_takes_the_interfaces_traffic_from_the_host() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    // A fixed neighbour entry: with --monitor the capture end answers no ARP.
    let mut neigh = std::process::Command::new("ip");
    let mac = tb
        .capture_mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    neigh.args([
        "-n",
        &tb.peer_ns,
        "neigh",
        "replace",
        &tb.capture_ip.to_string(),
        "lladdr",
        &mac,
        "dev",
        &tb.peer_if,
    ]);
    let (status, _, err) = run_limited(neigh, Duration::from_secs(10));
    assert!(status.success(), "ip neigh: {err}");
    const N: u32 = 40;
    for monitor in [false, true] {
        let dir = TempDir::new("xdpmon-host");
        let out = dir.file("out.pcap");
        let mut args = vec!["--hook", "xdp", "-w", &out];
        if monitor {
            args.push("--monitor");
        }
        args.push("udp and portrange 41000-41999");
        let run = start(&tb, &args);
        let got = udp_received(&tb, N);
        let fin = run.stop();
        fin.assert_ok(&format!("monitor {monitor}"));
        let captured = read(&out);
        let udp = captured
            .iter()
            .filter(|p| p.data.ends_with(b"monitor-test"))
            .count();
        assert_eq!(udp, N as usize, "monitor {monitor}: datagrams captured");
        if monitor {
            assert_eq!(got, 0, "--monitor: the host's socket received frames");
        } else {
            assert_eq!(got, N, "without --monitor the host's socket lost datagrams");
        }
    }
}

#[test]
fn monitor_is_refused_without_the_xdp_hook() {
    for hook in ["packet", "netfilter"] {
        let fin = ringcap(&[
            "capture",
            "-i",
            "lo",
            "--hook",
            hook,
            "--monitor",
            "-w",
            "/dev/null",
        ]);
        assert_eq!(
            fin.code(),
            Some(2),
            "--hook {hook} --monitor: {}",
            fin.stderr
        );
        assert!(fin.stderr.contains("--monitor"), "{}", fin.stderr);
        assert!(fin.stderr.contains("--hook xdp"), "{}", fin.stderr);
    }
}

/// A filter the translator refuses (protochain loops backwards) runs in
/// user space, with a warning, and still selects what `tcpdump -r` selects;
/// --monitor still drops (the fallback program returns the same verdict).
#[test]
fn untranslatable_filters_fall_back_to_user_space() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 460);
    let dir = TempDir::new("xdpmon-fallback");
    let input = dir.file("sent.pcap");
    ringcap_testkit::netns::write_pcap(std::path::Path::new(&input), &sent).expect("pcap");
    let filter = "ip6 protochain 17 or udp";
    let theirs = tcpdump_selects(&input, filter);
    assert!(!theirs.is_empty(), "tcpdump kept nothing");
    for monitor in [false, true] {
        let out = dir.file(&format!("out-{monitor}.pcap"));
        let mut a = vec!["--hook", "xdp", "-w", &out];
        if monitor {
            a.push("--monitor");
        }
        a.push(filter);
        let run = start(&tb, &a);
        tb.send_from_peer(&sent, PPS).expect("send");
        let fin = run.stop();
        fin.assert_ok(filter);
        fin.assert_no_loss(filter);
        assert!(
            fin.stderr.contains("cannot run in the XDP program"),
            "no fallback warning: {}",
            fin.stderr
        );
        let mine = tagged_seqs(&read(&out), filter);
        assert_eq!(mine, theirs, "--monitor {monitor}: ringcap vs tcpdump -r");
    }
}
