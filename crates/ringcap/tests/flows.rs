//! `ringcap capture --flows`: flow records checked by the collectors people
//! run. A capture file of many flows (TCP and UDP in both directions, VLAN,
//! IPv6, ICMP) is read with `--flows ipfix://` (and `netflow9://`) into
//! Debian's nfcapd; `nfdump` reads the flows back, and per 5-tuple and
//! direction the packets and bytes equal what the test sums from the file
//! itself (the testkit's reader and flow keys, IP lengths from the bytes),
//! and what softflowd exports from the same file into another nfcapd.
//! JSON lines are checked the same way, and unknown schemes are refused.

mod common;
mod flowkit;

use common::TempDir;
use flowkit::*;
use ringcap_testkit::capture::ChildGuard;
use ringcap_testkit::frames;
use ringcap_testkit::skip;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn ipfix_and_netflow9_into_nfcapd_count_what_the_file_holds() {
    if !collectors_here() {
        return;
    }
    let dir = TempDir::new("flows-nfcapd");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let want = file_sums(&pcap);
    assert!(want.len() > 300, "many flows: {}", want.len());
    for (scheme, sub) in [("ipfix", "ipfix"), ("netflow9", "nf9")] {
        let c = Collector::start(&dir.join(sub));
        let url = format!("{scheme}://127.0.0.1:{}", c.port);
        let run = common::ringcap(&["capture", "-r", pcap.to_str().unwrap(), "--flows", &url]);
        run.assert_ok(scheme);
        assert!(run.stderr.contains("0 export errors"), "{}", run.stderr);
        // No -w: the report must not claim the packets were kept.
        assert!(
            run.stderr.contains("none kept (no -w)") && !run.stderr.contains("packets written in"),
            "{}",
            run.stderr
        );
        let got = c.read();
        assert!(
            got == want,
            "{scheme}: nfdump's flows differ from the file:\n{}",
            diff(&want, &got)
        );
    }
}

/// nfdump keeps one TCP flags field: over IPFIX it showed the reverse
/// direction's flags (it stores each tcpControlBits it meets, and the
/// reverse one came last), so a SYN answered by a RST read `A.R..` and an
/// unanswered SYN no flags at all. The forward flags come last now.
#[test]
fn nfdump_shows_each_flows_own_tcp_flags_over_ipfix() {
    if !collectors_here() {
        return;
    }
    let dir = TempDir::new("flows-flags");
    let (a, b) = ep(1, false);
    let (c, _) = ep(2, false);
    // A SYN answered by RST|ACK; a SYN nobody answers.
    let frames = vec![
        tcp(&a, 1, 40000, 80, 0x02, 0),
        tcp(&b, 2, 80, 40000, 0x14, 0),
        tcp(&c, 3, 40001, 81, 0x02, 0),
    ];
    let pcap = dir.join("syn.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &frames).unwrap();
    let col = Collector::start(&dir.join("ipfix"));
    let url = format!("ipfix://127.0.0.1:{}", col.port);
    common::ringcap(&["capture", "-r", pcap.to_str().unwrap(), "--flows", &url])
        .assert_ok("ringcap");
    let lines = col.csv();
    let flags = |dport: &str| -> String {
        lines
            .iter()
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|f| f.len() > 8 && f[6] == dport)
            .map(|f| f[8].to_string())
            .unwrap_or_else(|| panic!("no flow to port {dport}: {lines:?}"))
    };
    for port in ["80", "81"] {
        let f = flags(port);
        assert!(
            f.contains('S') && !f.contains('R'),
            "port {port}: flags {f:?}: {lines:?}"
        );
    }
}

#[test]
fn softflowd_exports_the_same_counts() {
    if !collectors_here() {
        return;
    }
    if !have("softflowd") {
        skip("softflowd is not installed (Debian: apt-get install softflowd)");
        return;
    }
    let dir = TempDir::new("flows-softflowd");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let ours = Collector::start(&dir.join("ringcap"));
    let url = format!("ipfix://127.0.0.1:{}", ours.port);
    common::ringcap(&["capture", "-r", pcap.to_str().unwrap(), "--flows", &url])
        .assert_ok("ringcap");
    let ours = ours.read();
    let theirs = Collector::start(&dir.join("softflowd"));
    let ctl = dir.join("softflowd.ctl");
    let pid = dir.join("softflowd.pid");
    // softflowd reads a file a batch at each wake-up of its poll loop
    // (else once a minute), exports every flow at the end of the file and
    // exits: its control socket wakes it.
    let mut cmd = Command::new("softflowd");
    cmd.args([
        "-r",
        pcap.to_str().unwrap(),
        "-n",
        &format!("127.0.0.1:{}", theirs.port),
    ])
    .args([
        "-v",
        "10",
        "-6",
        "-d",
        "-c",
        ctl.to_str().unwrap(),
        "-p",
        pid.to_str().unwrap(),
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut sf = ChildGuard::spawn(&mut cmd).expect("start softflowd");
    let t = Instant::now();
    let status = loop {
        if let Some(s) = sf
            .wait_timeout(Duration::from_millis(200))
            .expect("wait softflowd")
        {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "softflowd did not finish the file"
        );
        let _ = Command::new("softflowctl")
            .args(["-c", ctl.to_str().unwrap(), "statistics"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    assert!(status.success(), "softflowd: {status:?}");
    let mut theirs = theirs.read();
    assert!(!theirs.is_empty(), "softflowd exported nothing");
    // softflowd counts the bytes a frame has past its link header, so a
    // frame with bytes after its IP packet (the testkit's trailer) counts
    // more there: for those flows packets are compared, bytes are not
    // (ringcap's are the IP lengths, checked against the file above).
    let (_, trailers) = file_sums_and_trailers(&pcap);
    assert!(
        trailers.len() < ours.len() / 2,
        "most flows compare bytes too"
    );
    for k in &trailers {
        if let (Some(o), Some(t)) = (ours.get(k), theirs.get_mut(k)) {
            assert!(t.1 > o.1, "{k:?}: softflowd counts the trailer");
            t.1 = o.1;
        }
    }
    assert!(
        ours == theirs,
        "ringcap vs softflowd:\n{}",
        diff(&ours, &theirs)
    );
}

#[test]
fn json_lines_from_a_file_sum_to_the_file() {
    let dir = TempDir::new("flows-json");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let out = dir.join("flows.json");
    let url = format!("json:{}", out.display());
    let run = common::ringcap(&["capture", "-r", pcap.to_str().unwrap(), "--flows", &url]);
    run.assert_ok("json");
    let mut got = Sums::new();
    let text = std::fs::read_to_string(&out).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let ip = |k: &str| v[k].as_str().unwrap().parse::<IpAddr>().unwrap();
        let n = |k: &str| v[k].as_u64().unwrap();
        let (s, d, sp, dp, pr) = (
            ip("src"),
            ip("dst"),
            n("sport") as u16,
            n("dport") as u16,
            n("proto") as u8,
        );
        // TCP conversations close (FIN both ways); the rest are open at the end.
        let why = if pr == 6 { "end" } else { "forced" };
        assert_eq!(v["end_reason"], why, "{line}");
        for (key, p, b) in [
            ((s, d, sp, dp, pr), n("packets"), n("octets")),
            ((d, s, dp, sp, pr), n("rev_packets"), n("rev_octets")),
        ] {
            if p > 0 {
                let e = got.entry(key).or_default();
                e.0 += p;
                e.1 += b;
            }
        }
    }
    let want = file_sums(&pcap);
    assert!(
        got == want,
        "json flows differ from the file:\n{}",
        diff(&want, &got)
    );
    // The same file gives the same flows every run.
    let again = dir.join("again.json");
    common::ringcap(&[
        "capture",
        "-r",
        pcap.to_str().unwrap(),
        "--flows",
        &format!("json:{}", again.display()),
    ])
    .assert_ok("json again");
    assert_eq!(text, std::fs::read_to_string(&again).unwrap());
}

#[test]
fn unknown_or_unbuilt_schemes_are_refused() {
    for (url, says) in [
        ("kafka://127.0.0.1:9092/a b", "topic"),
        ("kafka://127.0.0.1/flows", "HOST:PORT"),
        ("ipfix+tcp://127.0.0.1", "HOST:PORT"),
        ("sflow://127.0.0.1:6343", "unknown scheme"),
        ("ipfix://127.0.0.1", "HOST:PORT"),
    ] {
        let run = common::ringcap(&["capture", "-r", "/dev/null", "--flows", url]);
        assert_eq!(
            run.code(),
            Some(ringcap::failure::exit::USAGE),
            "{url}: {}",
            run.stderr
        );
        assert!(run.stderr.contains(says), "{url}: {}", run.stderr);
    }
    let run = common::ringcap(&["capture", "-r", "/dev/null", "--idle-timeout", "5"]);
    assert_eq!(
        run.code(),
        Some(ringcap::failure::exit::USAGE),
        "{}",
        run.stderr
    );
}

/// Live over veth: flows of the frames sent reach a JSON file while the
/// capture runs (the idle timeout fires without further packets: the
/// capture thread wakes for it), and the rest at the stop; per 5-tuple
/// the sums equal the frames sent.
#[test]
fn live_capture_exports_idle_flows_while_running() {
    ringcap_testkit::skip_unless_netns!();
    let tb = ringcap_testkit::Testbed::new().expect("testbed");
    let dir = TempDir::new("flows-live");
    let out = dir.join("flows.json");
    let e = tb.endpoints();
    let mut sent = Vec::new();
    for i in 0..50u32 {
        for k in 0..(1 + i % 3) {
            sent.push(frames::udp4(
                &e,
                i * 10 + k,
                30_000 + i as u16,
                53,
                20 + i as usize,
            ));
        }
    }
    let url = format!("json:{}", out.display());
    let run = common::start(&tb, &["--flows", &url, "--idle-timeout", "1", "udp"]);
    tb.send_from_peer(&sent, 2000).expect("send");
    // Idle after 1 s; the thread looks every 0.5 s.
    let t = Instant::now();
    let lines = loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if text.lines().count() >= 50 || t.elapsed() > Duration::from_secs(10) {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let f = run.stop();
    f.assert_ok("live flows");
    assert_eq!(
        lines.lines().count(),
        50,
        "idle flows exported while running:\n{lines}\n{}",
        f.stderr
    );
    let mut got = Sums::new();
    for line in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["end_reason"], "idle", "{line}");
        let key = (
            v["src"].as_str().unwrap().parse().unwrap(),
            v["dst"].as_str().unwrap().parse().unwrap(),
            v["sport"].as_u64().unwrap() as u16,
            v["dport"].as_u64().unwrap() as u16,
            v["proto"].as_u64().unwrap() as u8,
        );
        let e = got.entry(key).or_default();
        e.0 += v["packets"].as_u64().unwrap();
        e.1 += v["octets"].as_u64().unwrap();
    }
    let pcap = dir.join("sent.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &sent).unwrap();
    let want = file_sums(&pcap);
    assert!(
        got == want,
        "live flows differ from the frames sent:\n{}",
        diff(&want, &got)
    );
}

#[test]
fn a_collector_that_is_down_does_not_hold_the_capture() {
    let dir = TempDir::new("flows-down");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    // Nothing listens on this port; a JSON target alongside still gets
    // every flow.
    let port = free_udp_port();
    let out = dir.join("flows.json");
    let t = Instant::now();
    let run = common::ringcap(&[
        "capture",
        "-r",
        pcap.to_str().unwrap(),
        "--flows",
        &format!("ipfix://127.0.0.1:{port}"),
        "--flows",
        &format!("json:{}", out.display()),
    ]);
    // The capture was not held, but the export was incomplete: exit 1.
    common::assert_no_panic(&run.stderr, "collector down");
    assert_eq!(run.code(), Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("error: flow export incomplete"),
        "{}",
        run.stderr
    );
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    let flows = std::fs::read_to_string(&out).unwrap().lines().count();
    assert!(
        run.stderr.contains(&format!("flows: {flows} exported")),
        "{}",
        run.stderr
    );
    // Both to standard output: refused.
    let run = common::ringcap(&[
        "capture",
        "-r",
        pcap.to_str().unwrap(),
        "-w",
        "-",
        "--flows",
        "json:-",
    ]);
    assert_eq!(
        run.code(),
        Some(ringcap::failure::exit::USAGE),
        "{}",
        run.stderr
    );
}
