//! Flow records through ringcapd, under policy: a grant of flow records
//! only gives an unprivileged user (`nobody`, `ringcap capture --daemon
//! --flows ipfix://…`, no `-w`) flows that Debian's nfcapd stores and nfdump
//! reads back with, per 5-tuple and direction, exactly the packets and IP
//! bytes of what the grant's packets would have been — the oracle is root's
//! tcpdump with the combined filter, summed by the flow tests' own reader —
//! with the addresses masked as the grant's `hide` says; and no packet
//! reaches the client. Hostile requests: packets under a flows-only grant,
//! flows without the grant, tables and timeouts out of range, and a user
//! trying to hold more flow tables than its budget.

mod common;
#[path = "../../ringcap/tests/flowkit/mod.rs"]
mod flowkit;

use common::*;
use flowkit::{collectors_here, diff, traffic, Collector, Sums};
use ringcap_testkit::{TempDir, Testbed};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const FRAMEWORK: &str = "not port 514";
const CLIENT: &str = "not icmp and not icmp6";

/// The sums with every address masked as `hide = ["ip.addr"]` masks it
/// (zeroed), merged per masked 5-tuple.
fn masked(sums: &Sums) -> Sums {
    let zero = |a: &IpAddr| match a {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let mut out = Sums::new();
    for ((s, d, sp, dp, p), (n, b)) in sums {
        let e = out.entry((zero(s), zero(d), *sp, *dp, *p)).or_default();
        e.0 += n;
        e.1 += b;
    }
    out
}

fn grant(tb: &Testbed, extra: &str) -> String {
    format!(
        "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\ncapture_filter = \"{FRAMEWORK}\"\n{extra}",
        tb.capture_if
    )
}

#[test]
fn a_flows_only_grant_gives_nfdump_the_grants_packets_masked() {
    if !can_run() || !collectors_here() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(
        &tb,
        &grant(&tb, "flows = true\npackets = false\nhide = [\"ip.addr\"]\n"),
    );
    let dir = open_dir("flowsd-out");
    let collector = Collector::start(&dir.join("nfcapd"));
    let td = TempDir::new("flowsd-tcpdump");
    let orig = td.join("orig.pcap");
    let tcpdump = start_tcpdump(
        &tb,
        &orig,
        262_144,
        &format!("({FRAMEWORK}) and ({CLIENT})"),
    );

    let json = dir.join("c.json");
    let url = format!("ipfix://127.0.0.1:{}", collector.port);
    let client = flows_client(&d, &tb, &url, &json, &[]);
    let sent = traffic();
    tb.send_from_peer(&sent, 5000).expect("send");
    // While it runs: every packet the filters accepted went into flows
    // (`ringcap stats --daemon --json`).
    wait_accepted(&tb, &d, 1000, Duration::from_secs(10));
    let s = &stats_json(&tb, &d, Some(NOBODY))[0]["counters"];
    assert_eq!(s["packets_to_flows"], s["packets_filter_accepted"], "{s}");
    assert_eq!(s["packets_delivered"], 0, "{s}");
    let fin = client.stop();
    std::thread::sleep(SETTLE);
    let want_packets = tcpdump.stop();
    fin.assert_ok("flows client");
    assert!(
        fin.stderr.contains("no packets"),
        "the session was not flows-only: {}",
        fin.stderr
    );
    let got = collector.read();
    let want = masked(&flowkit::file_sums(&orig));
    assert!(want_packets.len() > 500, "{} packets", want_packets.len());
    assert!(want.len() > 100, "{} masked flows", want.len());
    let total = |s: &Sums| s.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
    println!(
        "nfdump: {} directed flows {:?}; tcpdump, masked: {} {:?}",
        got.len(),
        total(&got),
        want.len(),
        total(&want)
    );
    assert_eq!(
        got,
        want,
        "nfdump's flows differ from the grant's packets:\n{}",
        diff(&got, &want)
    );
    // Every address is masked; ICMP and port 514 are not there.
    for (s, dd, _, dp, p) in got.keys() {
        assert!(s.is_unspecified() && dd.is_unspecified(), "{s} {dd}");
        assert!(*p != 1 && *dp != 514);
    }
    // No packet reached the client: the packets the filters accepted are
    // in the flows, none was delivered (or written) as a packet.
    let c = final_record(&fin.json);
    assert_eq!(num(&c, "packets_delivered"), 0, "{c}");
    assert_eq!(num(&c, "packets_written"), 0, "{c}");
    assert_eq!(
        num(&c, "packets_filter_accepted"),
        want_packets.len() as u64,
        "{c}"
    );
    // ... and the daemon says where they went.
    let into = format!("{} packets taken into flow records", want_packets.len());
    assert!(fin.stderr.contains(&into), "{}", fin.stderr);
    // The audit line says what the session was given.
    let log = d.stop();
    assert!(
        log.contains("idle_timeout_s: 60, max_flows: 16384, packets: false"),
        "{log}"
    );
}

/// `ringcap capture --daemon -i CAPTURE_IF --flows URL --idle-timeout 60
/// --stats-json JSON ARGS -- CLIENT` as nobody, in this test's own network
/// namespace (where the collector listens on 127.0.0.1: the session's
/// interface is the daemon's); started and capturing.
fn flows_client(d: &Daemon, tb: &Testbed, url: &str, json: &Path, args: &[&str]) -> Client {
    flows_client_with(d, tb, url, json, args, CLIENT)
}

/// [`flows_client`] with the client's filter `filter`.
fn flows_client_with(
    d: &Daemon,
    tb: &Testbed,
    url: &str,
    json: &Path,
    args: &[&str],
    filter: &str,
) -> Client {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid",
        NOBODY.0,
        "--regid",
        NOBODY.1,
        "--clear-groups",
        "--inh-caps=-all",
    ])
    .arg(ringcap_bin())
    .arg("capture")
    .arg(d.arg())
    .args(["-i", &tb.capture_if, "--flows", url, "--idle-timeout", "60"])
    .arg("--stats-json")
    .arg(json)
    .args(args)
    .args(["--", filter]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ringcap_testkit::capture::ChildGuard::spawn(&mut cmd).expect("spawn");
    let (ready, log) = ringcap_testkit::capture::wait_for_stderr_line(
        &mut child,
        "capturing on ",
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| panic!("the flows client did not start: {e}"));
    let out = args
        .iter()
        .position(|a| *a == "-w")
        .map_or_else(|| json.with_extension("none"), |i| args[i + 1].into());
    Client {
        child,
        log,
        ready,
        out,
        json: json.to_path_buf(),
    }
}

/// What a client asking for packets (`-w`) and flows got under a grant of
/// `extra` (`top`: top-level keys of the policy): nfdump's sums, the packets it wrote and their sums, and the sums
/// of root's tcpdump with the combined filter.
struct Both {
    flows: Sums,
    packets: Vec<ringcap_testkit::CapturedPacket>,
    delivered: Sums,
    tcpdump: Sums,
}

fn flows_and_packets(tb: &Testbed, top: &str, extra: &str) -> Both {
    let d = Daemon::start(tb, &format!("{top}{}", grant(tb, extra)));
    let dir = open_dir("flowsd-both");
    let collector = Collector::start(&dir.join("nfcapd"));
    let td = TempDir::new("flowsd-both-tcpdump");
    let orig = td.join("orig.pcap");
    let tcpdump = start_tcpdump(tb, &orig, 262_144, &format!("({FRAMEWORK}) and ({CLIENT})"));
    let url = format!("ipfix://127.0.0.1:{}", collector.port);
    let pcap = dir.join("c.pcap");
    let client = flows_client(
        &d,
        tb,
        &url,
        &dir.join("c.json"),
        &["-w", &pcap.to_string_lossy()],
    );
    tb.send_from_peer(&traffic(), 5000).expect("send");
    let fin = client.stop();
    std::thread::sleep(SETTLE);
    let want = tcpdump.stop();
    fin.assert_ok("flows and packets client");
    let c = fin.final_counters("flows and packets client");
    let packets = fin.packets();
    assert_eq!(packets.len(), want.len(), "{c}");
    let flows = collector.read();
    let delivered = flowkit::file_sums(&pcap);
    assert_eq!(
        flows,
        delivered,
        "nfdump's flows differ from the packets delivered:\n{}",
        diff(&flows, &delivered)
    );
    d.stop();
    Both {
        flows,
        packets,
        delivered,
        tcpdump: flowkit::file_sums(&orig),
    }
}

/// Flows and packets: the flows nfdump shows sum, per 5-tuple and
/// direction, to exactly the packets the client wrote (the grant's masks
/// applied to both, once), and those are tcpdump's, masked.
#[test]
fn flows_and_packets_together_count_the_packets_delivered() {
    if !can_run() || !collectors_here() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let b = flows_and_packets(&tb, "", "flows = true\nhide = [\"ip.addr\"]\n");
    for p in &b.packets {
        let k = ringcap_testkit::frames::flow_key(&p.data).expect("frame");
        assert!(
            k.src.is_some_and(|a| a.is_unspecified()) && k.dst.is_some_and(|a| a.is_unspecified()),
            "a delivered packet with addresses: {k:?}"
        );
    }
    assert_eq!(b.delivered, masked(&b.tcpdump));
}

/// Under `anonymize = true` (Crypto-PAn), flow records carry the very
/// addresses the packets show: one flow per conversation, as in tcpdump's
/// capture, none with an address of the traffic sent.
#[test]
fn anonymized_flows_carry_the_packets_addresses() {
    if !can_run() || !collectors_here() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let keys = TempDir::new("flowsd-key");
    let key = keys.join("anon.key");
    let made = Command::new(ringcap_bin())
        .arg("anonymize-key")
        .arg(&key)
        .status()
        .expect("ringcap anonymize-key");
    assert!(made.success());
    let b = flows_and_packets(
        &tb,
        &format!("anonymization_key = \"{}\"\n", key.display()),
        "flows = true\nanonymize = true\n",
    );
    // Anonymization is one to one: as many directed flows as tcpdump's,
    // with the same packet and byte counts, and none of the real addresses.
    assert_eq!(b.flows.len(), b.tcpdump.len());
    let counts = |s: &Sums| {
        let mut v: Vec<(u16, u16, u8, u64, u64)> = s
            .iter()
            .map(|((_, _, sp, dp, p), (n, by))| (*sp, *dp, *p, *n, *by))
            .collect();
        v.sort();
        v
    };
    assert_eq!(counts(&b.flows), counts(&b.tcpdump));
    let real: std::collections::BTreeSet<IpAddr> =
        b.tcpdump.keys().flat_map(|k| [k.0, k.1]).collect();
    for k in b.flows.keys() {
        assert!(
            !real.contains(&k.0) && !real.contains(&k.1),
            "a flow with a real address: {k:?}"
        );
    }
}

/// A flows-only session does not get around the grant's rates: its flows
/// count only the packets the rate allows, the rest are counted as rate
/// limited, and the two add up to what the filters accepted.
#[test]
fn rates_hold_for_flow_records_too() {
    if !can_run() || !collectors_here() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(
        &tb,
        &grant(
            &tb,
            "flows = true\npackets = false\nmax_packets_per_second = 100\n",
        ),
    );
    let dir = open_dir("flowsd-rate");
    let collector = Collector::start(&dir.join("nfcapd"));
    let url = format!("ipfix://127.0.0.1:{}", collector.port);
    let client = flows_client(&d, &tb, &url, &dir.join("c.json"), &[]);
    let t0 = std::time::Instant::now();
    tb.send_from_peer(&traffic(), 5000).expect("send");
    let sending = t0.elapsed().as_secs_f64();
    let fin = client.stop();
    fin.assert_ok("rate-limited flows client");
    let got = collector.read();
    let in_flows: u64 = got.values().map(|v| v.0).sum();
    let c = final_record(&fin.json);
    let (accepted, limited) = (
        num(&c, "packets_filter_accepted"),
        num(&c, "packets_rate_limited"),
    );
    println!("accepted {accepted}, rate limited {limited}, in flows {in_flows}");
    assert!(accepted >= 1000, "{c}");
    // The bucket holds one second (100) and refills 100/s while packets come
    // (timestamps are the kernel's: a little more than the sending took).
    let most = 100 + (100.0 * (sending + 0.5)).ceil() as u64;
    assert!(
        (100..=most).contains(&in_flows),
        "{in_flows} packets in flows (at most {most}); {c}"
    );
    assert_eq!(in_flows + limited, accepted, "{c}");
    d.stop();
}

/// A flows-only session keeps each packet's headers only, so its filter
/// judges that record: it cannot pick packets by payload it is never given.
/// `udp[60] = 0x54` (payload byte 52, the same in every packet sent) took
/// all 50 packets into flows, because the client's program ran on the
/// packet as captured; now none, while `udp` (within the headers) takes all.
#[test]
fn a_flows_only_filter_cannot_read_the_payload() {
    if !can_run() || !collectors_here() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(&tb, &grant(&tb, "flows = true\npackets = false\n"));
    let dir = open_dir("flowsd-payload");
    let collector = Collector::start(&dir.join("nfcapd"));
    let url = format!("ipfix://127.0.0.1:{}", collector.port);
    let ep = tb.endpoints();
    let sent: Vec<Vec<u8>> = (0..50u32)
        .map(|seq| ringcap_testkit::frames::udp4(&ep, seq, 5000, 6000, 200))
        .collect();
    let clients: Vec<_> = [("payload", "udp[60] = 0x54", 0), ("headers", "udp", 50)]
        .into_iter()
        .map(|(name, filter, want)| {
            let json = dir.join(format!("{name}.json"));
            (
                name,
                want,
                flows_client_with(&d, &tb, &url, &json, &[], filter),
            )
        })
        .collect();
    tb.send_from_peer(&sent, 5000).expect("send");
    for (name, want, c) in clients {
        let fin = c.stop();
        fin.assert_ok(name);
        let c = final_record(&fin.json);
        assert_eq!(num(&c, "packets_filter_accepted"), want, "{name}: {c}");
    }
    d.stop();
}

/// `flow_session` (crates/client/examples) as nobody: its first JSON line,
/// and the second when it held the session.
fn flow_session(tb: &Testbed, d: &Daemon, args: [&str; 5]) -> std::process::Child {
    let mut cmd = as_user(tb, NOBODY, &example_bin("flow_session"));
    cmd.arg(&d.socket)
        .arg(&tb.capture_if)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn flow_session")
}

fn lines(child: std::process::Child) -> Vec<Value> {
    let guard = ringcap_testkit::capture::ChildGuard::new(child);
    let out = guard
        .wait_output(Duration::from_secs(30))
        .expect("flow_session ends");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "flow_session: {}: {text} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

fn once(tb: &Testbed, d: &Daemon, args: [&str; 5]) -> Value {
    lines(flow_session(tb, d, args)).remove(0)
}

#[test]
fn hostile_flow_requests_are_refused_capped_or_counted() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let mut d = Daemon::start(
        &tb,
        &grant(
            &tb,
            "flows = true\npackets = false\nmax_flows = 1000\nmin_flow_timeout = \"5s\"\n",
        ),
    );
    let out = open_dir("flowsd-hostile");
    let pcap = out.join("x.pcap");
    let pcap = pcap.to_string_lossy();
    let url = "ipfix://127.0.0.1:9";

    // Packets under a flows-only grant: with or without flows, by the CLI.
    for args in [
        vec!["-i", tb.capture_if.as_str(), "-w", &pcap],
        vec!["-i", tb.capture_if.as_str(), "-w", &pcap, "--flows", url],
    ] {
        let (st, err) = run_capture(&tb, &d, NOBODY, &args);
        assert!(!st.success(), "{args:?} accepted: {err}");
        assert!(err.contains("rule packets"), "{args:?}: {err}");
    }
    // ... and by the protocol.
    let r = once(&tb, &d, ["60", "15", "100", "1", "0"]);
    assert_eq!(r["refused"], "packets", "{r}");

    // Out of the hard limits: refused by the daemon's decoder.
    for (args, field) in [
        (["60", "15", "4194305", "0", "0"], "flows.max_flows"),
        (["0", "15", "100", "0", "0"], "flows.active_timeout_s"),
        (["60", "86401", "100", "0", "0"], "flows.idle_timeout_s"),
    ] {
        let r = once(&tb, &d, args);
        assert!(
            r["error"].as_str().is_some_and(|e| e.contains(field)),
            "{args:?}: {r}"
        );
    }
    // Within them but beyond the grant: capped, and said.
    let r = once(&tb, &d, ["1", "2", "4194304", "0", "0"]);
    assert_eq!(r["accepted"], true, "{r}");
    assert_eq!(
        r["flows"],
        serde_json::json!({"active_timeout_s": 5, "idle_timeout_s": 5, "max_flows": 1000, "packets": false}),
        "{r}"
    );
    assert!(r["snaplen"].as_str().unwrap().starts_with("Headers"), "{r}");

    // The budget: a session holding the whole of max_flows leaves no room
    // for another table until it ends.
    let holder = flow_session(&tb, &d, ["60", "15", "1000", "0", "4"]);
    std::thread::sleep(Duration::from_millis(1500));
    let r = once(&tb, &d, ["60", "15", "1", "0", "0"]);
    assert_eq!(r["refused"], "max_flows", "{r}");
    let held = lines(holder);
    assert_eq!(held[0]["flows"]["max_flows"], 1000, "{held:?}");
    assert_eq!(held[1]["packets_read"], 0, "{held:?}");
    assert_eq!(held[1]["counters"]["packets_delivered"], 0, "{held:?}");
    // Given back once that session is gone (its table dropped).
    let mut again = Value::Null;
    for _ in 0..20 {
        again = once(&tb, &d, ["60", "15", "600", "0", "0"]);
        if again["accepted"] == true {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(again["accepted"], true, "{again}");

    // A reload that takes flow records away ends a session that has them.
    let running = flow_session(&tb, &d, ["60", "15", "100", "0", "4"]);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(d.reload(&grant(&tb, "")));
    let ended = lines(running);
    let why = ended[1]["ended"].as_str().unwrap_or_default();
    assert!(
        why.contains("no longer allows this session (flows:"),
        "{ended:?}"
    );
    // Flows without `flows = true`: refused with the rule's name.
    let (st, err) = run_capture(
        &tb,
        &d,
        NOBODY,
        &["-i", tb.capture_if.as_str(), "--flows", url],
    );
    assert!(!st.success());
    assert!(err.contains("rule flows"), "{err}");
    let r = once(&tb, &d, ["60", "15", "100", "1", "0"]);
    assert_eq!(r["refused"], "flows", "{r}");
    // --check shows the flow rights.
    let check = Command::new(ringcapd_bin())
        .args(["--check", "--config"])
        .arg(&d.config)
        .output()
        .expect("ringcapd --check");
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(text.contains("flow records:   not allowed"), "{text}");
    d.stop();
}
