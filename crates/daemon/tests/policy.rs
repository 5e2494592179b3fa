//! The policy is enforced on real clients run as `nobody`: no client filter
//! widens the framework filter (one that does not compile alone is refused
//! with libpcap's message, exit 2), a snap length above the cap is capped,
//! an interface outside the grant is refused naming the rule (exit 3), a
//! user no grant names is refused by default deny (exit 3), and of several
//! matching grants the first in the file applies.

mod common;

use common::*;
use ringcap_testkit::{frames, Testbed};

fn grant(users: &str, groups: &str, interfaces: &str, filter: &str, snap: &str) -> String {
    format!(
        "\n[[grant]]\nusers = [{users}]\ngroups = [{groups}]\ninterfaces = [{interfaces}]\ncapture_filter = \"{filter}\"\nmax_snaplen = {snap}\n"
    )
}

#[test]
fn client_filters_cannot_widen_the_framework_and_other_requests_are_held_to_the_grant() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let iface = format!("\"{}\"", tb.capture_if);
    let d = Daemon::start(&tb, &grant("\"nobody\"", "", &iface, "udp", "64"));
    let out = open_dir("policy-out");
    let w = out.file("refused.pcap");

    // Filters built to escape "(framework) and (client)": each is compiled
    // alone (by the client: the daemon takes programs only), so each is
    // refused with libpcap's message, exit 2.
    for f in [
        "udp) or (tcp",
        "1=1) or (1=1",
        ") or (",
        "tcp or (",
        "udp and (tcp or",
    ] {
        let (status, stderr) =
            run_capture(&tb, &d, NOBODY, &["-i", &tb.capture_if, "-w", &w, "--", f]);
        assert_eq!(status.code(), Some(2), "filter {f:?}: {status}; {stderr}");
        assert!(
            stderr.contains("refused (filter)")
                && stderr.contains("can't parse filter expression: syntax error"),
            "filter {f:?}: no libpcap message: {stderr}"
        );
    }

    // An interface outside the grant: refused, exit 3, naming the rule.
    let (status, stderr) = run_capture(&tb, &d, NOBODY, &["-i", "lo", "-w", &w]);
    assert_eq!(status.code(), Some(3), "lo: {status}; {stderr}");
    assert!(
        stderr.contains("refused by grant 1, rule interfaces") && stderr.contains("\"lo\""),
        "lo: {stderr}"
    );
    // An interface that does not exist at all: the same answer, nothing opened.
    let (status, stderr) = run_capture(&tb, &d, NOBODY, &["-i", "rcnosuch0", "-w", &w]);
    assert_eq!(status.code(), Some(3), "rcnosuch0: {status}; {stderr}");
    assert!(stderr.contains("rule interfaces"), "rcnosuch0: {stderr}");

    // A real user that no grant names: default deny, exit 3.
    let (status, stderr) = run_capture(&tb, &d, OTHER, &["-i", &tb.capture_if, "-w", &w]);
    assert_eq!(status.code(), Some(3), "{}: {status}; {stderr}", OTHER.0);
    assert!(stderr.contains("default deny"), "{}: {stderr}", OTHER.0);
    assert!(
        !std::path::Path::new(&w).exists(),
        "a refused client wrote {w}"
    );
    if let Some(l) = d.log.text().lines().find(|l| l.contains("audit: start")) {
        panic!("a refused request started a session: {l}");
    }
    // An output the client cannot write: it fails, and its session ends.
    let (status, stderr) = run_capture(
        &tb,
        &d,
        NOBODY,
        &["-i", &tb.capture_if, "-w", "/nonexistent-rc-dir/x.pcap"],
    );
    assert!(!status.success(), "{status}: {stderr}");
    assert!(stderr.contains("/nonexistent-rc-dir"), "{stderr}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !d.log.text().contains("audit: end") {
        assert!(
            std::time::Instant::now() < deadline,
            "the failed client's session did not end: {}",
            d.log.text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // A filter that compiles and would take everything, and a snap length
    // far above the cap: the framework still decides, the cap still cuts.
    let c = start_client(
        &tb,
        &d,
        NOBODY,
        &out,
        "wide",
        &["-s", "5000", "tcp or not tcp"],
    );
    assert!(c.ready.contains("snaplen 64 bytes"), "{}", c.ready);
    let sent = untagged_frames(&tb, 0..23 * 40);
    tb.send_from_peer(&sent, 20_000).expect("send");
    let f = c.stop();
    f.assert_ok("wide client");
    f.final_counters("wide client");
    let file = ringcap_testkit::capture::read_capture(&f.out).expect("read");
    assert_eq!(file.snaplen, 64, "the file header's snap length");
    let got = file.packets;
    assert!(
        got.iter().all(|p| p.data.len() <= 64),
        "a packet above the cap"
    );
    assert!(
        got.iter().any(|p| p.data.len() == 64),
        "no packet cut at the cap"
    );
    assert_packets(
        &got,
        &Oracle::new("udp", "").expect(&sent, 64),
        "wide client",
    );
    d.stop();
}

#[test]
fn the_first_matching_grant_in_the_file_applies() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let iface = format!("\"{}\"", tb.capture_if);
    // Grant 1 names nobody on the testbed's interface only; grant 2 names
    // nobody's group on any interface; grant 3 is never reached.
    let g1 = grant("\"nobody\"", "", &iface, "udp", "64");
    let g2 = grant("", "\"nogroup\"", "\"*\"", "", "200");
    let g3 = grant("\"nobody\"", "", &iface, "icmp", "32");
    let mut d = Daemon::start(&tb, &format!("{g1}{g2}{g3}"));
    let out = open_dir("first-match");

    // On the testbed's interface: grant 1 (udp, 64 bytes), not 2 or 3.
    let a = start_client(&tb, &d, NOBODY, &out, "a", &["-s", "1000"]);
    assert!(
        a.ready.contains("grant 1,") && a.ready.contains("snaplen 64 bytes"),
        "{}",
        a.ready
    );
    // On lo, which grant 1 does not allow: the search goes on to grant 2.
    let lo = {
        let (o, j) = (out.file("lo.pcap"), out.file("lo.json"));
        let mut cmd = capture_cmd(
            &tb,
            &d,
            NOBODY,
            &["-i", "lo", "-w", &o, "--stats-json", &j, "-s", "1000"],
        );
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mut child = ringcap_testkit::ChildGuard::spawn(&mut cmd).expect("spawn");
        let (line, _log) = ringcap_testkit::wait_for_stderr_line(
            &mut child,
            "capturing on ",
            std::time::Duration::from_secs(20),
        )
        .expect("the lo client starts");
        assert!(
            line.contains("grant 2,") && line.contains("snaplen 200 bytes"),
            "{line}"
        );
        child
    };
    let sent = untagged_frames(&tb, 0..23 * 20);
    tb.send_from_peer(&sent, 20_000).expect("send");
    let fa = a.stop();
    fa.assert_ok("client a");
    fa.final_counters("client a");
    assert_packets(
        &fa.packets(),
        &Oracle::new("udp", "").expect(&sent, 64),
        "grant 1",
    );
    drop(lo);
    let log = d.log.text();
    let audit: Vec<&str> = log.lines().filter(|l| l.contains("audit: start")).collect();
    assert!(
        audit.len() == 2 && audit[0].contains("grant=1") && audit[1].contains("grant=2"),
        "audit lines: {audit:?}"
    );

    // The same grants in the other order: now the broad one comes first and
    // is what nobody gets on the testbed's interface.
    assert!(d.reload(&format!("{g2}{g1}{g3}")), "reload");
    let b = start_client(&tb, &d, NOBODY, &out, "b", &["-s", "1000"]);
    assert!(
        b.ready.contains("grant 1,")
            && b.ready.contains("snaplen 200 bytes")
            && b.ready.contains("framework filter none"),
        "{}",
        b.ready
    );
    let sent = untagged_frames(&tb, 10_000..10_000 + 23 * 20);
    tb.send_from_peer(&sent, 20_000).expect("send");
    let fb = b.stop();
    fb.assert_ok("client b");
    fb.final_counters("client b");
    assert_packets(
        &fb.packets(),
        &Oracle::new("", "").expect(&sent, 200),
        "grant 2 first",
    );
    assert!(
        fb.packets()
            .iter()
            .all(|p| frames::seq_of(&p.data).is_some()),
        "a packet the test did not send"
    );
    // The daemon stopping ends running sessions; their clients say so and exit.
    let c = start_client(&tb, &d, NOBODY, &out, "c", &[]);
    d.stop();
    let fc = c.wait(std::time::Duration::from_secs(10));
    // Not as the client asked: exit status 1, the reason said.
    assert_no_panic(&fc.stderr, "client c");
    assert_eq!(fc.status.code(), Some(1), "client c: {}", fc.stderr);
    assert!(
        fc.stderr
            .contains("ringcapd ended the session: the daemon is stopping"),
        "{}",
        fc.stderr
    );
}

/// A client replaces its filter while packets flow: the new one is still
/// ANDed with the framework (a filter that would take everything gets what
/// the framework allows), one that does not compile alone is refused and
/// the old one stays, and around each switch no packet that both filters
/// keep is lost or delivered twice.
#[test]
fn setfilter_is_still_held_to_the_framework_and_loses_or_repeats_nothing() {
    if !can_run() {
        return;
    }
    use ringcap_client::{Client as DaemonClient, ClientError, OpenRequest};
    let tb = Testbed::new().expect("testbed");
    let framework = "udp or icmp";
    let d = Daemon::start(
        &tb,
        &format!(
            "[[grant]]\nusers = [\"root\"]\ninterfaces = [\"{}\"]\ncapture_filter = \"{framework}\"\n",
            tb.capture_if
        ),
    );
    let mut s = DaemonClient::connect(&d.socket)
        .expect("connect")
        .open(OpenRequest::new(&tb.capture_if, "udp"))
        .expect("open");
    let sent = untagged_frames(&tb, 0..23 * 800);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let read = |s: &mut ringcap_client::Session, got: &mut Vec<Vec<u8>>| {
        s.wait(std::time::Duration::from_millis(20)).expect("wait");
        s.packets(|p| got.push(p.data.to_vec())).expect("packets");
    };
    let switched_at = std::thread::scope(|sc| {
        let sender = sc.spawn(|| tb.send_from_peer(&sent, 15_000));
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_millis(400) {
            read(&mut s, &mut got);
        }
        match s.set_filter("udp) or (tcp") {
            Err(ClientError::Refused { rule, reason, .. }) => {
                assert_eq!(rule, "filter", "{reason}");
                assert!(reason.contains("syntax error"), "{reason}");
            }
            other => panic!("an escaping filter was not refused: {other:?}"),
        }
        let before = got.len();
        // Back and forth between two filters that both keep UDP, while
        // packets flow; the last one would take everything.
        for i in 0..12 {
            s.set_filter(if i % 2 == 0 { "udp or icmp" } else { "udp" })
                .expect("set_filter");
            read(&mut s, &mut got);
        }
        s.set_filter("tcp or not tcp").expect("set_filter");
        while !sender.is_finished() {
            read(&mut s, &mut got);
        }
        sender.join().expect("sender").expect("send");
        before
    });
    std::thread::sleep(SETTLE);
    let (_, counters) = s.stop().expect("stop");
    let mut got_rest = Vec::new();
    s.packets(|p| got_rest.push(p.data.to_vec()))
        .expect("packets");
    got.extend(got_rest);
    assert_eq!(counters.packets_delivered, got.len() as u64, "{counters:?}");
    // Every packet the filters accepted, across all the switches, is
    // accounted for (nothing sampled, limited or dropped here).
    assert_eq!(
        counters.packets_filter_accepted,
        counters.packets_delivered
            + counters.packets_dropped_client
            + counters.packets_dropped_ring
            + counters.packets_rate_limited
            + counters.packets_sampled_out,
        "{counters:?}"
    );

    let fw = Oracle::new(framework, "");
    let udp = Oracle::new("udp", "");
    let seq = |p: &[u8]| frames::seq_of(p).expect("a packet the test sent");
    let seqs: Vec<u32> = got.iter().map(|p| seq(p)).collect();
    for w in seqs.windows(2) {
        assert!(
            w[0] < w[1],
            "out of order or repeated around a switch: {} then {}",
            w[0],
            w[1]
        );
    }
    for (i, p) in got.iter().enumerate() {
        assert!(
            fw.accepts(p),
            "packet {i} (seq {}) is outside the framework",
            seqs[i]
        );
        if i < switched_at {
            assert!(udp.accepts(p), "packet {i} before the switch is not udp");
        }
    }
    // Every UDP frame (kept by both filters) is there exactly once, and
    // ICMP appears after the switch.
    let want_udp: Vec<u32> = sent
        .iter()
        .filter(|f| udp.accepts(f))
        .map(|f| seq(f))
        .collect();
    let got_udp: Vec<u32> = got
        .iter()
        .filter(|p| udp.accepts(p))
        .map(|p| seq(p))
        .collect();
    assert_eq!(got_udp, want_udp, "UDP frames lost or repeated");
    assert!(
        got.iter().any(|p| !udp.accepts(p)),
        "the new filter never applied"
    );
    d.stop();
}

/// A grant's rate limit: excess is counted (rate-limited), never silently
/// dropped; its maximum duration ends the session with a reason.
#[test]
fn rate_limits_are_counted_and_the_duration_ends_the_session() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, "max_packets_per_second = 500\nmax_duration = \"3s\"\n");
    let out = open_dir("rate");
    let t0 = std::time::Instant::now();
    let c = start_client(&tb, &d, NOBODY, &out, "limited", &[]);
    assert!(c.ready.contains("capturing on"), "{}", c.ready);
    let sent = untagged_frames(&tb, 0..23 * 200);
    tb.send_from_peer(&sent, 0).expect("send");
    let f = c.wait(std::time::Duration::from_secs(15));
    let took = t0.elapsed();
    // Ended by the grant's max_duration: as the grant says, exit status 0.
    f.assert_ok("limited client");
    assert!(
        f.stderr.contains(
            "ringcapd ended the session: the capture ended as asked by the grant: its max_duration is 3s"
        ) && took >= std::time::Duration::from_secs(3),
        "after {took:?}: {}",
        f.stderr
    );
    let c = f.final_counters("limited client");
    let limited = num(&c, "packets_rate_limited");
    let delivered = num(&c, "packets_delivered");
    assert_eq!(num(&c, "packets_filter_accepted"), sent.len() as u64, "{c}");
    // A burst of one second's worth, then 500/s: the frames took well under a second.
    assert!(
        (400..=1100).contains(&delivered) && limited == sent.len() as u64 - delivered,
        "{c}"
    );
    // What was delivered is the first second's worth, then some: frames
    // sent, in order, each once.
    let got = f.packets();
    assert_eq!(got.len() as u64, delivered);
    let mut at = 0;
    for (i, p) in got.iter().enumerate() {
        let Some(j) = sent[at..].iter().position(|s| *s == p.data) else {
            panic!("rate-limited packet {i} is not a frame sent, in order");
        };
        at += j + 1;
        if i < 400 {
            assert_eq!(j, 0, "rate-limited packet {i}: a gap within the burst");
        }
    }
    d.stop();
}

/// `max_snaplen = "headers"`: a client asking for whole packets gets the
/// protocol headers only (at most 256 bytes), never a byte of payload.
#[test]
fn a_headers_cap_keeps_only_the_headers() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let iface = format!("\"{}\"", tb.capture_if);
    let d = Daemon::start(&tb, &grant("\"nobody\"", "", &iface, "", "\"headers\""));
    let out = open_dir("headers-cap");
    let c = start_client(&tb, &d, NOBODY, &out, "h", &["-s", "1000"]);
    assert!(
        c.ready
            .contains("snaplen headers (at most 256 bytes), the grant's cap"),
        "{}",
        c.ready
    );
    let sent = untagged_frames(&tb, 0..23 * 20);
    tb.send_from_peer(&sent, 20_000).expect("send");
    let f = c.stop();
    f.assert_ok("headers client");
    f.final_counters("headers client");
    let got = f.packets();
    assert_eq!(got.len(), sent.len());
    for (i, (g, s)) in got.iter().zip(&sent).enumerate() {
        assert!(
            g.data.len() <= 256 && s.starts_with(&g.data) && g.wire_len as usize == s.len(),
            "packet {i}: {} bytes, not a prefix of the frame sent",
            g.data.len()
        );
        let shape = frames::mixed_shape(frames::seq_of(s).expect("tagged"));
        if matches!(shape, frames::Shape::Udp4 | frames::Shape::Udp4Max) {
            // Ethernet 14 + IPv4 20 + UDP 8: the tag in the payload is not kept.
            assert_eq!(g.data.len(), 42, "packet {i} ({shape:?})");
            assert_eq!(frames::seq_of(&g.data), None, "packet {i}: payload kept");
        }
    }
    d.stop();
}

/// Sampling forced by the grant: a client asking for less gets the grant's
/// 1:N, what it leaves out is counted as sampled out, and a client asking
/// for the other kind of sampling is refused naming the rule.
#[test]
fn forced_sampling_is_applied_and_counted() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, "sample = \"1:4\"\n");
    let out = open_dir("sampling");
    let (status, stderr) = run_capture(
        &tb,
        &d,
        NOBODY,
        &["-i", &tb.capture_if, "--sample-flows", "1:2"],
    );
    assert_eq!(status.code(), Some(3), "{status}: {stderr}");
    assert!(stderr.contains("rule sample:"), "{stderr}");
    let c = start_client(&tb, &d, NOBODY, &out, "s", &["--sample", "1:2"]);
    assert!(c.ready.contains("sampling 1 packet in 4"), "{}", c.ready);
    let sent = untagged_frames(&tb, 0..23 * 200);
    tb.send_from_peer(&sent, 20_000).expect("send");
    let f = c.stop();
    f.assert_ok("sampled client");
    let rec = f.final_counters("sampled client");
    let (accepted, delivered) = (
        num(&rec, "packets_filter_accepted"),
        num(&rec, "packets_delivered"),
    );
    assert_eq!(accepted, sent.len() as u64, "{rec}");
    let expected = accepted / 4;
    assert!(
        delivered.abs_diff(expected) < expected / 4,
        "1:4 of {accepted} kept {delivered}: {rec}"
    );
    assert_eq!(
        num(&rec, "packets_sampled_out"),
        accepted - delivered,
        "{rec}"
    );
    // Those kept are frames sent, in order, each once.
    let got = f.packets();
    assert_eq!(got.len() as u64, delivered);
    let mut at = 0;
    for (i, p) in got.iter().enumerate() {
        let j = sent[at..]
            .iter()
            .position(|s| *s == p.data)
            .unwrap_or_else(|| panic!("sampled packet {i} is not a frame sent, in order"));
        at += j + 1;
    }
    d.stop();
}

/// Group grants go by the groups the kernel says the client's process has
/// (SO_PEERGROUPS), like file permissions do, not by the group database:
/// a process of nobody given the group `users` (100) is in it although the
/// database does not list nobody there, and nobody without it is not.
#[test]
fn group_grants_go_by_the_kernels_groups() {
    if !can_run() {
        return;
    }
    let Some(users) = nix::unistd::Group::from_name("users").ok().flatten() else {
        ringcap_testkit::skip("there is no group `users` here");
        return;
    };
    let gid = users.gid.as_raw().to_string();
    let tb = Testbed::new().expect("testbed");
    let iface = format!("\"{}\"", tb.capture_if);
    let d = Daemon::start(&tb, &grant("", "\"users\"", &iface, "", "96"));
    let mut with = as_user_in_groups(&tb, NOBODY, &gid, &ringcap_bin());
    with.args([
        "capture",
        &d.arg(),
        "-i",
        &tb.capture_if,
        "--duration",
        "0.5",
    ]);
    let (status, stderr) = run_limited(&mut with, std::time::Duration::from_secs(20));
    assert_eq!(
        status.code(),
        Some(0),
        "nobody with group {gid}: {status}; {stderr}"
    );
    assert!(
        stderr.contains("capturing on") && stderr.contains("grant 1,"),
        "{stderr}"
    );
    let (status, stderr) = run_capture(&tb, &d, NOBODY, &["-i", &tb.capture_if]);
    assert_eq!(
        status.code(),
        Some(3),
        "nobody without groups: {status}; {stderr}"
    );
    assert!(stderr.contains("default deny"), "{stderr}");
    d.stop();
}
