//! Two captures in one process on the same veth interface, each with its own
//! filter, snap length and sink: the first is stopped while the second keeps
//! capturing. Each file must hold exactly what tcpdump (run as root with the
//! same filter, on the same traffic) captured, cut to its snap length; the
//! counters of each capture are its own and add up; the offloads that both
//! turned off come back only when the second ends; a transform in the slot
//! rewrites what it is given and nothing else.
//!
//! The engine reads /sys/class/net, which shows the interfaces of the network
//! namespace sysfs was mounted in, so the captures run in a child process
//! started with `ip netns exec` (this same test binary, in its `engine_child`
//! role), driven over its stdin and stdout.

use ringcap_engine::{
    Capture, CaptureSpec, Event, LiveSpec, OutputPlan, RecordFormat, SinkSpec, Snap, SourceSpec,
    TimestampSource, Transform,
};
use ringcap_engine::{Sampling, TransformFactory};
use ringcap_format::TsResolution;
use ringcap_testkit::capture::{read_capture, start_tcpdump, CapturedPacket};
use ringcap_testkit::{frames, skip_unless_netns, TempDir, Testbed};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const CHILD_ENV: &str = "RINGCAP_ENGINE_TEST_CHILD";

/// Zeroes the destination MAC: a stand-in for the privacy transforms.
struct ZeroDstMac;

impl Transform for ZeroDstMac {
    fn apply(&mut self, _linktype: u32, frame: &mut [u8], _wire_len: u32) {
        let n = frame.len().min(6);
        frame[..n].fill(0);
    }
}

fn spec(iface: &str, filter: &str, snap: Snap, out: PathBuf, format: RecordFormat) -> CaptureSpec {
    CaptureSpec {
        source: SourceSpec::Live(LiveSpec {
            interfaces: vec![iface.to_string()],
            threads: 1,
            ring_bytes: 8 << 20,
            promiscuous: true,
            fix_offloads: true,
            tstamp: TimestampSource::Host,
            hook: ringcap_engine::Hook::Packet,
            monitor: false,
        }),
        filter: filter.to_string(),
        snap,
        sampling: Sampling::All,
        transforms: Vec::new(),
        sink: SinkSpec {
            writer_buffer_bytes: 16 << 20,
            flush_interval: Duration::from_millis(100),
            ..SinkSpec::new(OutputPlan::Single(out), format)
        },
        count: None,
        duration: None,
        observer: None,
    }
}

fn gro_on(iface: &str) -> bool {
    let out = Command::new("ethtool")
        .arg("-k")
        .arg(iface)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == "generic-receive-offload: on")
}

fn line(stdin: &mut impl BufRead) -> String {
    let mut l = String::new();
    stdin.read_line(&mut l).unwrap();
    l.trim().to_string()
}

/// The child's role: runs the captures in the capture namespace.
#[test]
fn engine_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let iface = std::env::var("RINGCAP_ENGINE_TEST_IF").unwrap();
    let mut stdin = BufReader::new(std::io::stdin());
    let mut out = std::io::stdout();
    let mut a = spec(
        &iface,
        "udp",
        Snap::Bytes(64),
        dir.join("a.pcap"),
        RecordFormat::Pcap(TsResolution::Nano),
    );
    let zero: TransformFactory = Arc::new(|| Box::new(ZeroDstMac) as Box<dyn Transform>);
    a.transforms = vec![zero];
    let b = spec(
        &iface,
        "tcp or icmp",
        Snap::Bytes(96),
        dir.join("b.pcapng"),
        RecordFormat::Pcapng,
    );
    let ca = Capture::start(a).unwrap();
    let cb = Capture::start(b).unwrap();
    writeln!(out, "ready gro={}", gro_on(&iface)).unwrap();
    assert_eq!(line(&mut stdin), "stop-a");
    ca.stop();
    let events: Vec<Event> = ca.events().iter().collect();
    let oa = ca.join();
    assert!(oa.error.is_none(), "{:?}", oa.error);
    assert_eq!(events.last(), Some(&Event::Finished), "{events:?}");
    writeln!(
        out,
        "{} gro={}",
        report_outcome("a", &oa.total),
        gro_on(&iface)
    )
    .unwrap();
    assert_eq!(line(&mut stdin), "stop-b");
    cb.stop();
    let ob = cb.join();
    assert!(ob.error.is_none(), "{:?}", ob.error);
    writeln!(
        out,
        "{} gro={}",
        report_outcome("b", &ob.total),
        gro_on(&iface)
    )
    .unwrap();
}

fn report_outcome(name: &str, t: &ringcap_engine::Counters) -> String {
    format!(
        "{name} accepted={} delivered={} written={} dropped_ring={} dropped_writer={} sampled_out={}",
        t.packets_filter_accepted,
        t.packets_delivered,
        t.packets_written,
        t.packets_dropped_ring,
        t.packets_dropped_writer,
        t.packets_sampled_out
    )
}

fn field(line: &str, name: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {line}"))
        .parse()
        .unwrap()
}

fn read(p: &Path) -> Vec<CapturedPacket> {
    read_capture(p).unwrap().packets
}

fn check_against(oracle: &[CapturedPacket], got: &[CapturedPacket], snap: usize, what: &str) {
    assert_eq!(got.len(), oracle.len(), "{what}: packet count");
    for (i, (g, o)) in got.iter().zip(oracle).enumerate() {
        assert_eq!(g.wire_len, o.wire_len, "{what}: packet {i} length");
        let want = &o.data[..o.data.len().min(snap)];
        assert_eq!(g.data, want, "{what}: packet {i} bytes");
    }
}

#[test]
fn two_captures_share_an_interface_and_stop_separately() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("engine-two");
    // GRO on, so that both captures turn it off (--fix-offloads).
    let st = tb
        .in_capture_ns("ethtool")
        .args(["-K", &tb.capture_if, "gro", "on"])
        .status()
        .unwrap();
    assert!(st.success());
    let td_udp = start_tcpdump(&tb, &dir.join("td-udp.pcap"), None, "udp").unwrap();
    let td_rest = start_tcpdump(&tb, &dir.join("td-rest.pcap"), None, "tcp or icmp").unwrap();

    let exe = std::env::current_exe().unwrap();
    let mut child = tb
        .in_capture_ns(exe.to_str().unwrap())
        .args(["--exact", "engine_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .env("RINGCAP_ENGINE_TEST_IF", &tb.capture_if)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    // The child's lines, past what the test harness prints around them.
    let next = |from: &mut BufReader<std::process::ChildStdout>| loop {
        let mut l = String::new();
        if from.read_line(&mut l).unwrap() == 0 {
            panic!("the child ended early (its error is above)");
        }
        // The harness prints "test engine_child ... " in front of the first.
        for key in ["ready ", "a accepted", "b accepted"] {
            if let Some(at) = l.find(key) {
                return l[at..].trim().to_string();
            }
        }
    };
    let ready = next(&mut from);
    assert_eq!(ready, "ready gro=false", "both captures hold GRO off");

    let first = frames::mixed_sequence(&tb.endpoints(), 600);
    tb.send_from_peer(&first, 4000).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    writeln!(to, "stop-a").unwrap();
    let a = next(&mut from);
    assert!(
        a.ends_with("gro=false"),
        "GRO must stay off while b runs: {a}"
    );

    // Numbered on from the first run, so the two runs can be told apart.
    let second: Vec<Vec<u8>> = frames::mixed_sequence(&tb.endpoints(), 1200)
        .into_iter()
        .skip(600)
        .collect();
    tb.send_from_peer(&second, 4000).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    writeln!(to, "stop-b").unwrap();
    let b = next(&mut from);
    assert!(b.ends_with("gro=true"), "GRO restored after the last: {b}");
    assert!(child.wait().unwrap().success(), "child failed");
    td_udp.finish(Duration::from_millis(300)).unwrap();
    td_rest.finish(Duration::from_millis(300)).unwrap();

    // a: the UDP of the first run only, 64 bytes, destination MAC zeroed.
    let oracle_udp = read(&dir.join("td-udp.pcap"));
    let first_udp: Vec<CapturedPacket> = oracle_udp
        .iter()
        .filter(|p| frames::seq_of(&p.data).is_some_and(|s| s < 600))
        .cloned()
        .map(|mut p| {
            p.data[..6].fill(0);
            p
        })
        .collect();
    assert!(first_udp.len() > 50, "too little UDP in the first run");
    assert!(
        oracle_udp.len() > first_udp.len(),
        "no UDP in the second run"
    );
    let got_a = read(&dir.join("a.pcap"));
    check_against(&first_udp, &got_a, 64, "capture a (udp, -s 64)");
    // b: TCP and ICMP of both runs, 96 bytes.
    let oracle_rest = read(&dir.join("td-rest.pcap"));
    let got_b = read(&dir.join("b.pcapng"));
    check_against(&oracle_rest, &got_b, 96, "capture b (tcp or icmp, -s 96)");

    // Counters: each capture's own, adding up.
    for (l, n) in [(&a, got_a.len()), (&b, got_b.len())] {
        assert_eq!(field(l, "written"), n as u64, "{l}");
        assert_eq!(field(l, "delivered"), n as u64, "{l}");
        assert_eq!(
            field(l, "accepted"),
            field(l, "delivered") + field(l, "dropped_ring") + field(l, "sampled_out"),
            "{l}"
        );
        assert_eq!(
            field(l, "dropped_ring") + field(l, "dropped_writer"),
            0,
            "{l}"
        );
    }
}
