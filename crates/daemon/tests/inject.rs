//! Injection through ringcapd by an unprivileged user (`ringcap inject
//! --daemon` as nobody), judged by a capture on the peer end of the veth:
//! only frames the grant's inject filter allows ever leave, with the
//! daemon's identity and fixed fields and valid checksums; the token
//! bucket holds the configured rate at saturation; four clients at once
//! each get exactly their own reports, the transmit timestamps agree with
//! the peer's receive times, and the send-time error stays small.

mod common;

use common::*;
use ringcap_testkit::capture::{start_peer_tcpdump, CapturedPacket};
use ringcap_testkit::frames::{self, internet_checksum, l4_checksum, Endpoints};
use ringcap_testkit::netns::write_pcap_spaced;
use ringcap_testkit::Testbed;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

/// The tests here measure timing: one at a time, so they do not load the
/// machine for each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn grant(tb: &Testbed, rate: u32, burst: u32, settable: &str) -> String {
    format!(
        "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\n[grant.inject]\n\
         filter = \"udp dst portrange 33434-33534\"\nsettable = [{settable}]\n\
         max_packets_per_second = {rate}\nburst = {burst}\n",
        tb.capture_if
    )
}

/// UDP frames `gap_ns` apart as a pcap readable by nobody; the IP ID of
/// frame i is `id_base + i` (the only thing a grant that fixes payloads
/// leaves to identify a frame by).
fn write_frames(path: &Path, frames: &[Vec<u8>], gap_ns: u64) {
    write_pcap_spaced(path, frames, gap_ns).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// A UDP frame with the given fields (checksums right for what it says).
#[allow(clippy::too_many_arguments)] // one test helper naming every field
fn udp(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    id: u16,
    ttl: u8,
    tos: u8,
    sport: u16,
    dport: u16,
) -> Vec<u8> {
    let ep = Endpoints::new(src_mac, dst_mac).with_ipv4(src, dst);
    let mut f = frames::udp4(&ep, u32::from(id), sport, dport, 24);
    f[15] = tos;
    f[18..20].copy_from_slice(&id.to_be_bytes());
    f[22] = ttl;
    f[24..26].copy_from_slice(&[0, 0]);
    let c = internet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

fn ip_id(p: &CapturedPacket) -> u16 {
    u16::from_be_bytes([p.data[18], p.data[19]])
}

/// A frame from the capture end to the peer, TTL 64, TOS 0, to port 33434.
fn plain(tb: &Testbed, id: u16, sport: u16) -> Vec<u8> {
    udp(
        tb.capture_mac,
        tb.peer_mac,
        tb.capture_ip,
        tb.peer_ip,
        id,
        64,
        0,
        sport,
        33434,
    )
}

/// `ringcap inject --daemon -r INPUT --report REPORT` as nobody, starting
/// `start` from now.
fn inject_cmd(
    tb: &Testbed,
    d: &Daemon,
    input: &Path,
    report: &Path,
    start: &str,
) -> std::process::Command {
    let mut cmd = as_user(tb, NOBODY, &ringcap_bin());
    cmd.arg("inject")
        .arg(d.arg())
        .args(["-i", &tb.capture_if, "-r"])
        .arg(input)
        .args(["--start", start, "--tolerance", "500", "--report"])
        .arg(report);
    cmd
}

fn inject_as_nobody(tb: &Testbed, d: &Daemon, input: &Path, report: &Path) -> (bool, String) {
    let mut cmd = inject_cmd(tb, d, input, report, "+1");
    let (status, _, stderr) = run_limited_out(&mut cmd, Duration::from_secs(60));
    (status.code() == Some(0), stderr)
}

fn reports(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn only_what_the_grant_allows_leaves_with_the_daemons_identity() {
    if !can_run() {
        return;
    }
    let _serial = serial();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(
        &tb,
        &grant(&tb, 100_000, 1000, "\"ip.ttl\", \"ip.id\", \"udp.dport\""),
    );
    let dir = open_dir("inject-guard");
    // 1200 randomized frames: spoofed MACs and addresses, any TOS, TTL,
    // ports in and out of the allowed range.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let n = 1200u16;
    let mut asked: HashMap<u16, (u8, u16)> = HashMap::new();
    let sent: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let r = rnd();
            let dport = if r % 2 == 0 {
                33434 + (r >> 8) as u16 % 101
            } else {
                (r >> 8) as u16
            };
            let ttl = 1 + (r >> 24) as u8 % 60;
            asked.insert(i, (ttl, dport));
            udp(
                [0x02, 0x66, (r >> 32) as u8, 0, 0, 9],
                tb.peer_mac,
                Ipv4Addr::new(198, 19, (r >> 40) as u8, (r >> 48) as u8),
                tb.peer_ip,
                i,
                ttl,
                (r >> 56) as u8,
                (r >> 16) as u16 | 1,
                dport,
            )
        })
        .collect();
    let input = dir.join("frames.pcap");
    write_frames(&input, &sent, 200_000);
    let peer = dir.join("peer.pcap");
    let mut td = start_peer_tcpdump(&tb, &peer, "udp").expect("tcpdump");
    let report = dir.join("report.jsonl");
    let (_, stderr) = inject_as_nobody(&tb, &d, &input, &report);
    println!("{}", stderr.trim());
    std::thread::sleep(Duration::from_millis(500));
    td.terminate().unwrap();

    let rs = reports(&report);
    assert_eq!(rs.len(), n as usize, "one report per frame: {stderr}");
    assert!(
        stderr.contains("rewritten by the grant (eth.src, ip.src"),
        "{stderr}"
    );
    let in_range = |p: u16| (33434..=33534).contains(&p);
    let mut sent_tags = HashSet::new();
    let mut rewritten: HashMap<u16, Vec<String>> = HashMap::new();
    for r in &rs {
        let tag = r["tag"].as_u64().unwrap() as u16;
        let names = r["rewritten"].as_array().map_or(Vec::new(), |a| {
            a.iter().map(|v| v.as_str().unwrap().to_string()).collect()
        });
        rewritten.insert(tag, names);
        let (_, dport) = asked[&tag];
        match r["status"].as_str().unwrap() {
            "sent" => {
                assert!(in_range(dport), "frame {tag} to port {dport} was sent: {r}");
                sent_tags.insert(tag);
            }
            "refused" => {
                assert!(
                    !in_range(dport),
                    "frame {tag} to port {dport} was refused: {r}"
                );
                assert!(r["reason"].as_str().unwrap().starts_with("filter:"), "{r}");
            }
            s => panic!("frame {tag}: {s}: {r}"),
        }
    }
    assert!(sent_tags.len() > 400, "{} sent", sent_tags.len());
    let got = read(&peer);
    assert_eq!(
        got.len(),
        sent_tags.len(),
        "the peer received {} frames, {} were reported sent",
        got.len(),
        sent_tags.len()
    );
    let first_sport = {
        let first = got.iter().min_by_key(|p| ip_id(p)).unwrap();
        u16::from_be_bytes([first.data[34], first.data[35]])
    };
    for p in &got {
        let f = &p.data;
        let id = ip_id(p);
        assert!(
            sent_tags.contains(&id),
            "frame {id} arrived but was not reported sent"
        );
        let (ttl, dport) = asked[&id];
        // Its report names exactly the fields that left other than sent.
        let s = &sent[usize::from(id)];
        let mut want = Vec::new();
        for (name, bytes) in [
            ("eth.src", 6..12),
            ("ip.tos", 15..16),
            ("ip.flags", 20..22),
            ("ip.src", 26..30),
            ("udp.sport", 34..36),
            ("payload", 42..s.len()),
        ] {
            if s[bytes.clone()] != f[bytes] {
                want.push(name.to_string());
            }
        }
        assert_eq!(rewritten[&id], want, "frame {id}: rewritten");
        assert_eq!(f[6..12], tb.capture_mac, "frame {id}: source MAC");
        assert_eq!(
            f[26..30],
            tb.capture_ip.octets(),
            "frame {id}: source address"
        );
        assert_eq!(f[15], 0, "frame {id}: TOS (not settable) forced to 0");
        assert_eq!(f[22], ttl, "frame {id}: TTL (settable) as asked");
        assert_eq!(
            u16::from_be_bytes([f[36], f[37]]),
            dport,
            "frame {id}: dport"
        );
        assert_eq!(
            u16::from_be_bytes([f[34], f[35]]),
            first_sport,
            "frame {id}: sport held to the first frame's"
        );
        assert!(
            f[42..].iter().take(24).all(|&b| b == 0),
            "frame {id}: payload (not settable) zeroed"
        );
        assert_eq!(
            internet_checksum(&f[14..34]),
            0,
            "frame {id}: IPv4 checksum"
        );
        let ip_len = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let mut seg = f[34..14 + ip_len].to_vec();
        let c = u16::from_be_bytes([seg[6], seg[7]]);
        seg[6..8].copy_from_slice(&[0, 0]);
        let src = IpAddr::V4(Ipv4Addr::new(f[26], f[27], f[28], f[29]));
        let dst = IpAddr::V4(Ipv4Addr::new(f[30], f[31], f[32], f[33]));
        let want = match l4_checksum(src, dst, 17, &seg) {
            0 => 0xffff,
            c => c,
        };
        assert_eq!(c, want, "frame {id}: UDP checksum");
    }
    d.stop();
}

#[test]
fn the_token_buckets_hold_the_rate_at_saturation() {
    if !can_run() {
        return;
    }
    let _serial = serial();
    let tb = Testbed::new().expect("testbed");
    let sent: Vec<Vec<u8>> = (0..3000u16).map(|i| plain(&tb, i, 40000)).collect();
    let bits_per_frame = sent[0].len() as u64 * 8;
    // 2000 frames/s offered for 1.5 s; 500/s allowed, first by the frame
    // bucket, then by the bit bucket alone (500 frames' bits per second).
    // The buckets are charged on the wire clock when each frame leaves: with
    // a depth of one frame, every bit of jitter in the sender's wake-ups
    // would waste tokens (the bucket is full and the next frame not there
    // yet), so the saturated rate is measured with a depth of 10.
    for (what, rule, limits) in [
        (
            "frames",
            "max_packets_per_second:",
            grant(&tb, 500, 10, "\"ip.id\""),
        ),
        (
            "bits",
            "max_bits_per_second:",
            grant(&tb, 100_000, 10, "\"ip.id\"")
                + &format!("max_bits_per_second = {}\n", 500 * bits_per_frame),
        ),
    ] {
        let d = Daemon::start(&tb, &limits);
        let dir = open_dir(&format!("inject-rate-{what}"));
        let input = dir.join("frames.pcap");
        write_frames(&input, &sent, 500_000);
        let report = dir.join("report.jsonl");
        let (_, stderr) = inject_as_nobody(&tb, &d, &input, &report);
        println!("{}", stderr.trim());
        let rs = reports(&report);
        assert_eq!(rs.len(), 3000);
        let mut times: Vec<u64> = rs.iter().filter_map(|r| r["sent_ns"].as_u64()).collect();
        let refused: Vec<&str> = rs
            .iter()
            .filter(|r| r["status"] == "refused")
            .map(|r| r["reason"].as_str().unwrap())
            .collect();
        assert!(
            refused
                .iter()
                .all(|r| r.starts_with(rule) && r.contains(&format!(" {what} per second"))),
            "{what}: {:?}",
            refused.first()
        );
        times.sort_unstable();
        // The steady state, after the bucket's initial burst (the bit
        // bucket holds a 1514-byte frame's bits: a few dozen small frames).
        let steady: Vec<u64> = times
            .iter()
            .copied()
            .filter(|t| *t >= times[0] + 250_000_000)
            .collect();
        let span = (steady[steady.len() - 1] - steady[0]) as f64 / 1e9;
        let rate = (steady.len() - 1) as f64 / span;
        println!(
            "{what} limit: sent {} refused {} over {span:.3} s: {rate:.1} frames/s (configured 500)",
            times.len(),
            refused.len()
        );
        assert!(
            (rate - 500.0).abs() <= 10.0,
            "{what} limit: achieved {rate:.1} frames/s, configured 500"
        );
        d.stop();
    }
}

#[test]
fn four_clients_at_once_get_their_own_reports_on_time() {
    if !can_run() {
        return;
    }
    let _serial = serial();
    let tb = Testbed::new().expect("testbed");
    // The rate is per user and interface: room for all four (4000/s).
    let d = Daemon::start(&tb, &grant(&tb, 5000, 100, "\"ip.id\""));
    let dir = open_dir("inject-four");
    const PER: u16 = 2500;
    let inputs: Vec<_> = (0..4u16)
        .map(|k| {
            let frames: Vec<Vec<u8>> = (0..PER)
                .map(|i| plain(&tb, k * 10_000 + i, 40000 + k))
                .collect();
            let p = dir.join(format!("c{k}.pcap"));
            write_frames(&p, &frames, 1_000_000);
            p
        })
        .collect();
    let peer = dir.join("peer.pcap");
    let mut td = start_peer_tcpdump(&tb, &peer, "udp").expect("tcpdump");
    let handles: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(k, input)| {
            let report = dir.join(format!("c{k}.jsonl"));
            let mut cmd = inject_cmd(&tb, &d, input, &report, "+2");
            (
                std::thread::spawn(move || run_limited_out(&mut cmd, Duration::from_secs(60))),
                report,
            )
        })
        .collect();
    let mut per_client = Vec::new();
    for (h, report) in handles {
        let (status, _, stderr) = h.join().unwrap();
        println!("{}", stderr.trim());
        assert!(status.success(), "{stderr}");
        per_client.push(reports(&report));
    }
    std::thread::sleep(Duration::from_millis(500));
    td.terminate().unwrap();
    let got = read(&peer);
    let arrived: HashMap<u16, u64> = got.iter().map(|p| (ip_id(p), p.ts_ns)).collect();
    assert_eq!(
        got.len(),
        4 * PER as usize,
        "the peer received {}",
        got.len()
    );
    let mut err: Vec<i64> = Vec::new();
    for (k, rs) in per_client.iter().enumerate() {
        assert_eq!(rs.len(), PER as usize, "client {k}: {} reports", rs.len());
        let tags: HashSet<u64> = rs.iter().map(|r| r["tag"].as_u64().unwrap()).collect();
        assert_eq!(tags.len(), PER as usize, "client {k}: tags repeated");
        for r in rs {
            assert_eq!(r["status"], "sent", "client {k}: {r}");
            let tag = r["tag"].as_u64().unwrap() as u16;
            let (req, at) = (
                r["requested_ns"].as_u64().unwrap(),
                r["sent_ns"].as_u64().unwrap(),
            );
            assert!(at >= req, "client {k} tag {tag}: sent early");
            err.push((at - req) as i64);
            // The frame with this client's IP ID arrived when its report says it left.
            let rx = arrived[&(k as u16 * 10_000 + tag)];
            let d = rx as i64 - at as i64;
            assert!(
                d.abs() <= 20_000_000,
                "client {k} tag {tag}: received {d} ns from its transmit timestamp"
            );
        }
    }
    err.sort_unstable();
    let (median, p99) = (err[err.len() / 2], err[err.len() * 99 / 100]);
    println!(
        "10000 frames through ringcapd, 4 clients: send-time error median {} us, p99 {} us, max {} us",
        median / 1000,
        p99 / 1000,
        err[err.len() - 1] / 1000
    );
    assert!(median <= 100_000, "median {median} ns");
    // Loose on purpose: precision is measured by bench/run's inject phase on a
    // quiet machine; a shared 2-core CI machine stalls threads for milliseconds
    // (p99 5 ms seen). 50 ms still catches a scheduler that sleeps to the
    // wrong time, and nothing may be early or missed (the 500 ms tolerance
    // only spares the test a frame given up during a stall of the machine).
    assert!(p99 <= 50_000_000, "p99 {p99} ns");
    d.stop();
}
