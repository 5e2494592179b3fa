//! "Refused means refused", through a real ringcapd, as the unprivileged
//! user nobody (`ringcap inject --daemon`), judged by a capture on the peer
//! end of the veth:
//!
//! * shapes the guard does not understand never leave, however loose the
//!   grant's filter: an IPv6 atomic fragment and an IPv4 later fragment
//!   carrying bytes the grant does not let the client choose, IP-in-IP
//!   with a spoofed inner source (the hostile review's findings 4 and 5);
//! * the rate holds on the wire clock per user and interface: back-dated
//!   and far-future frames from several sessions of one user at once leave
//!   no faster than `burst + rate × T` over any window, as the peer saw
//!   them arrive (finding 6);
//! * a reload tightens a running inject session: frames it queued under the
//!   old grant are refused, and a policy without injection ends it.

mod common;

use common::*;
use ringcap_testkit::capture::start_peer_tcpdump;
use ringcap_testkit::netns::{write_pcap_spaced, TestbedOptions};
use ringcap_testkit::Testbed;
use std::path::Path;
use std::time::Duration;

/// One test at a time: they measure timing.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn inject_grant(tb: &Testbed, filter: &str, settable: &str, rate: u32, burst: u32) -> String {
    format!(
        "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\n[grant.inject]\n\
         filter = \"{filter}\"\nsettable = [{settable}]\n\
         max_packets_per_second = {rate}\nburst = {burst}\n",
        tb.capture_if
    )
}

fn write_frames(path: &Path, frames: &[Vec<u8>], gap_ns: u64) {
    write_pcap_spaced(path, frames, gap_ns).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// `ringcap inject --daemon` as nobody: `start` as `--start` takes it,
/// tolerance in ms; returns the reports.
fn inject(
    tb: &Testbed,
    d: &Daemon,
    input: &Path,
    report: &Path,
    start: &str,
    tolerance_ms: u32,
) -> std::process::Command {
    let mut cmd = as_user(tb, NOBODY, &ringcap_bin());
    cmd.arg("inject")
        .arg(d.arg())
        .args(["-i", &tb.capture_if, "-r"])
        .arg(input)
        .args(["--start", start, "--tolerance", &tolerance_ms.to_string()])
        .arg("--report")
        .arg(report);
    cmd
}

fn reports(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn eth(tb: &Testbed, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = tb.peer_mac.to_vec();
    f.extend_from_slice(&tb.capture_mac);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, id: u16, frag: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = ringcap_testkit::frames::internet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = sport.to_be_bytes().to_vec();
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(payload);
    h
}

const MARK: &[u8] = b"HOSTILE-PAYLOAD-THE-GRANT-DOES-NOT-ALLOW";

#[test]
fn fragments_and_tunnels_never_leave() {
    if !can_run() {
        return;
    }
    let _serial = serial();
    let tb = Testbed::with_options(TestbedOptions {
        ipv6: true,
        ..TestbedOptions::default()
    })
    .expect("testbed");
    // The loosest filter there is, nothing settable.
    let d = Daemon::start(&tb, &inject_grant(&tb, "", "", 1000, 100));
    let dir = open_dir("inject-hostile-shapes");
    let (me, peer) = (tb.capture_ip.octets(), tb.peer_ip.octets());
    let x = u16::from(me[2]);
    let v6 = |last: u16| std::net::Ipv6Addr::new(0xfd52, 0x4300, x, 0, 0, 0, 0, last).octets();
    // 0: IPv6 atomic fragment (fragment header, offset 0, M = 0) of UDP.
    let mut atomic = vec![17, 0, 0, 0, 0, 0, 0x12, 0x34];
    atomic.extend(udp(5353, 33434, MARK));
    let mut ip6 = 0x6000_0000u32.to_be_bytes().to_vec();
    ip6.extend_from_slice(&(atomic.len() as u16).to_be_bytes());
    ip6.extend_from_slice(&[44, 64]);
    ip6.extend_from_slice(&v6(0x66));
    ip6.extend_from_slice(&v6(2));
    ip6.extend(atomic);
    // 1: IPv4 later fragment (offset 8 bytes) with arbitrary bytes.
    let later = ipv4(me, peer, 17, 0x77, 1, MARK);
    // 2: IP-in-IP, inner 198.19.66.66 -> peer:53.
    let inner = ipv4([198, 19, 66, 66], peer, 17, 1, 0, &udp(5353, 53, MARK));
    let ipip = ipv4(me, peer, 4, 0x78, 0, &inner);
    // 3: a plain UDP frame, which goes (payload zeroed).
    let plain = ipv4(me, peer, 17, 0x79, 0, &udp(40000, 33434, MARK));
    let frames = vec![
        eth(&tb, 0x86dd, &ip6),
        eth(&tb, 0x0800, &later),
        eth(&tb, 0x0800, &ipip),
        eth(&tb, 0x0800, &plain),
    ];
    let input = dir.join("frames.pcap");
    write_frames(&input, &frames, 1_000_000);
    let cap = dir.join("peer.pcap");
    let mut td = start_peer_tcpdump(&tb, &cap, "").expect("tcpdump");
    let report = dir.join("report.jsonl");
    let (_, _, stderr) = run_limited_out(
        &mut inject(&tb, &d, &input, &report, "+0.5", 500),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(500));
    td.terminate().unwrap();
    let rs = reports(&report);
    assert_eq!(rs.len(), 4, "{stderr}");
    let by_tag = |t: u64| rs.iter().find(|r| r["tag"] == t).unwrap().clone();
    for (tag, rule) in [(0, "fragment:"), (1, "fragment:"), (2, "tunnel:")] {
        let r = by_tag(tag);
        assert_eq!(r["status"], "refused", "frame {tag}: {r}");
        assert!(
            r["reason"].as_str().unwrap().starts_with(rule),
            "frame {tag}: {r}"
        );
    }
    assert_eq!(by_tag(3)["status"], "sent", "{}", by_tag(3));
    let got = read(&cap);
    let marked = got
        .iter()
        .filter(|p| p.data.windows(MARK.len()).any(|w| w == MARK))
        .count();
    assert_eq!(
        marked, 0,
        "a frame carried the payload the grant does not allow"
    );
    // What came from the daemon's side (its kernel also sends IPv6
    // neighbour discovery and MLD; the peer answers the plain frame with an
    // ICMP port unreachable): no fragment, no tunnel, one plain frame.
    let ours: Vec<&[u8]> = got
        .iter()
        .map(|p| p.data.as_slice())
        .filter(|d| d.len() > 54 && d[6..12] == tb.capture_mac)
        .collect();
    let v4 = |d: &&[u8]| d[12..14] == [8, 0];
    let v6 = |d: &&[u8]| d[12..14] == [0x86, 0xdd];
    assert!(!ours
        .iter()
        .any(|d| v4(d) && d[20..22] != [0, 0] && d[20..22] != [0x40, 0]));
    assert!(!ours.iter().any(|d| v4(d) && d[23] == 4), "IP-in-IP left");
    assert!(
        !ours.iter().any(|d| v6(d) && d[20] == 44),
        "an IPv6 fragment left"
    );
    let plain: Vec<_> = ours
        .iter()
        .filter(|d| v4(d) && d[23] == 17 && d[36..38] == [0x82, 0x9a])
        .collect();
    assert_eq!(plain.len(), 1, "the plain frame left the daemon once");
    d.stop();
}

/// Arrival times (ns) of the frames of `cap` with UDP destination 33434.
fn arrivals(cap: &Path) -> Vec<u64> {
    let mut t: Vec<u64> = read(cap)
        .iter()
        .filter(|p| p.data.len() >= 42 && p.data[23] == 17 && p.data[36..38] == [0x82, 0x9a])
        .map(|p| p.ts_ns)
        .collect();
    t.sort_unstable();
    t
}

/// Panics unless every window [t_i, t_j] of `times` holds at most
/// `burst + rate × (T + slack)` frames.
fn assert_bound(times: &[u64], rate: u64, burst: u64, slack_ns: u64) {
    for i in 0..times.len() {
        for j in i..times.len() {
            let n = (j - i + 1) as u64;
            let span = times[j] - times[i] + slack_ns;
            let allowed = burst * 1_000_000_000 + rate * span;
            assert!(
                n * 1_000_000_000 <= allowed,
                "{n} frames arrived within {} ms: more than burst {burst} + {rate}/s",
                (times[j] - times[i]) / 1_000_000
            );
        }
    }
}

#[test]
fn the_rate_holds_on_the_wire_clock_across_sessions() {
    if !can_run() {
        return;
    }
    let _serial = serial();
    let tb = Testbed::new().expect("testbed");
    let (rate, burst) = (5u64, 2u64);
    let d = Daemon::start(
        &tb,
        &inject_grant(
            &tb,
            "udp dst portrange 33434-33534",
            "\"ip.id\"",
            rate as u32,
            burst as u32,
        ),
    );
    let dir = open_dir("inject-hostile-rate");
    let (me, peer) = (tb.capture_ip.octets(), tb.peer_ip.octets());
    let frames = |k: u16, n: u16| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let ip = ipv4(me, peer, 17, k * 1000 + i, 0, &udp(40000, 33434, &[0; 16]));
                eth(&tb, 0x0800, &ip)
            })
            .collect()
    };
    let cap = dir.join("peer.pcap");
    let mut td = start_peer_tcpdump(&tb, &cap, "udp").expect("tcpdump");
    std::thread::sleep(Duration::from_millis(300));
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // Three sessions of nobody at once, each asking for exactly the grant's
    // rate on the requested-time clock: 100 frames 200 ms apart starting
    // 25 s in the past (tolerance 60 s: all of them "in time"), 20 frames
    // 200 ms apart from 1 s ahead, and 100 frames 5 ms apart from now.
    let plan = [
        (format!("{:.3}", now_s - 25.0), 200_000_000u64, 100u16),
        ("+1".to_string(), 200_000_000, 20),
        ("+0.2".to_string(), 5_000_000, 100),
    ];
    let total: usize = plan.iter().map(|p| usize::from(p.2)).sum();
    let started = std::time::Instant::now();
    let handles: Vec<_> = plan
        .iter()
        .enumerate()
        .map(|(k, (start, gap, n))| {
            let input = dir.join(format!("c{k}.pcap"));
            write_frames(&input, &frames(k as u16 + 1, *n), *gap);
            let report = dir.join(format!("c{k}.jsonl"));
            let mut cmd = inject(&tb, &d, &input, &report, start, 60_000);
            (
                std::thread::spawn(move || run_limited_out(&mut cmd, Duration::from_secs(60))),
                report,
                usize::from(*n),
            )
        })
        .collect();
    let mut all = Vec::new();
    for (h, report, n) in handles {
        let (_, _, stderr) = h.join().unwrap();
        let rs = reports(&report);
        assert_eq!(rs.len(), n, "{stderr}");
        all.extend(rs);
    }
    let elapsed = started.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    td.terminate().unwrap();
    let sent = all.iter().filter(|r| r["status"] == "sent").count();
    let over = all
        .iter()
        .filter(|r| {
            r["status"] == "refused"
                && r["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("max_packets_per_second:")
        })
        .count();
    let times = arrivals(&cap);
    println!(
        "3 sessions, {total} frames (back-dated, ahead, paced) in {elapsed:?}: {sent} sent, {over} refused by the rate, {} arrived",
        times.len()
    );
    // Over the whole run and over every window, as the peer saw them.
    let span = elapsed.as_nanos() as u64;
    assert!(
        sent as u64 <= burst + rate * span / 1_000_000_000 + 1,
        "{sent} frames in {elapsed:?}"
    );
    assert_bound(&times, rate, burst, 20_000_000);
    assert_eq!(times.len(), sent, "arrivals = frames reported sent");
    assert_eq!(
        sent + over,
        total,
        "every frame sent or refused by the rate"
    );
    // And the rate is not wasted: the paced session alone asks for more
    // than the grant for 0.5 s, the one ahead for 4 s after it.
    assert!(sent >= 15, "only {sent} frames sent");
    d.stop();
}

#[test]
fn a_reload_tightens_running_inject_sessions() {
    if !can_run() {
        return;
    }
    let _serial = serial();
    let tb = Testbed::new().expect("testbed");
    let loose = inject_grant(&tb, "udp", "\"ip.id\"", 1000, 100);
    let mut d = Daemon::start(&tb, &loose);
    let dir = open_dir("inject-hostile-reload");
    let (me, peer) = (tb.capture_ip.octets(), tb.peer_ip.octets());
    let frames: Vec<Vec<u8>> = (0..50u16)
        .map(|i| {
            eth(
                &tb,
                0x0800,
                &ipv4(me, peer, 17, i, 0, &udp(40000, 33434, &[])),
            )
        })
        .collect();
    let input = dir.join("frames.pcap");
    write_frames(&input, &frames, 1_000_000);
    let cap = dir.join("peer.pcap");
    let mut td = start_peer_tcpdump(&tb, &cap, "udp").expect("tcpdump");
    let mut run = |name: &str, tighter: String| {
        let report = dir.join(format!("{name}.jsonl"));
        // Queued for 3 s from now; the policy changes before their time.
        let mut cmd = inject(&tb, &d, &input, &report, "+3", 500);
        let h = std::thread::spawn(move || run_limited_out(&mut cmd, Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(1200));
        assert!(d.reload(&tighter), "{name}: the reload was refused");
        let (_, _, stderr) = h.join().unwrap();
        let rs = reports(&report);
        assert_eq!(rs.len(), 50, "{name}: {stderr}");
        for r in &rs {
            assert_eq!(r["status"], "refused", "{name}: {r}");
            assert!(
                r["reason"].as_str().unwrap().starts_with("policy:"),
                "{name}: {r}"
            );
        }
        assert!(d.reload(&loose));
    };
    // A filter the queued frames no longer match.
    run(
        "filter",
        inject_grant(&tb, "udp dst port 9", "\"ip.id\"", 1000, 100),
    );
    // No injection at all.
    run(
        "none",
        format!(
            "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\n",
            tb.capture_if
        ),
    );
    std::thread::sleep(Duration::from_millis(500));
    td.terminate().unwrap();
    assert_eq!(
        arrivals(&cap).len(),
        0,
        "frames queued under the old grant left"
    );
    d.stop();
}

/// A client that sends frames and never asks for their reports cannot make
/// the daemon hold reports without end (hostile review qa-d26 #3: refused
/// frames' reports grew the daemon by ~80 MB a second): once a session has
/// `UNREAD` (4096 + 1024) frames whose reports it has not taken, further
/// requests are refused whole, with a message saying what to do, and none of
/// their frames gets a report; every frame taken has exactly one; once they
/// are taken, the session sends again.
#[test]
fn unread_inject_reports_are_bounded() {
    if !can_run() {
        return;
    }
    let _s = serial();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(&tb, &inject_grant(&tb, "udp", "", 1000, 1000));
    let mut cmd = as_user(&tb, NOBODY, &example_bin("inject_flood"));
    cmd.arg(&d.socket).arg(&tb.capture_if).arg("1000");
    let r = json_answer(&mut cmd, Duration::from_secs(60));
    assert_eq!(r["accepted"], 5120, "{r}");
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("ask for them (InjectReports)")),
        "{r}"
    );
    assert_eq!(r["reports"], 5120, "{r}");
    assert_eq!(r["refused_reports"], 5120, "{r}");
    assert_eq!(r["after"], "ok", "{r}");
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}
