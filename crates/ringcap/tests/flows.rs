//! `ringcap capture --flows`: flow records checked by the collectors people
//! run. A capture file of many flows (TCP and UDP in both directions, VLAN,
//! IPv6, ICMP) is read with `--flows ipfix://` (and `netflow9://`) into
//! Debian's nfcapd; `nfdump` reads the flows back, and per 5-tuple and
//! direction the packets and bytes equal what the test sums from the file
//! itself (the testkit's reader and flow keys, IP lengths from the bytes),
//! and what softflowd exports from the same file into another nfcapd.
//! JSON lines are checked the same way, and unknown schemes are refused.

mod common;

use common::TempDir;
use ringcap_testkit::capture::{read_pcap, ChildGuard};
use ringcap_testkit::frames::{self, Endpoints};
use ringcap_testkit::skip;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// (src, dst, sport, dport, proto).
type FiveTuple = (IpAddr, IpAddr, u16, u16, u8);
/// Five-tuple -> (packets, bytes).
type Sums = BTreeMap<FiveTuple, (u64, u64)>;

fn ep(i: u32, v6: bool) -> (Endpoints, Endpoints) {
    let c4 = Ipv4Addr::new(198, 18, (i >> 8) as u8, i as u8);
    let s4 = Ipv4Addr::new(198, 19, 0, 1 + (i % 7) as u8);
    let c6: Ipv6Addr = format!("2001:db8::{:x}", 0x100 + i).parse().unwrap();
    let s6: Ipv6Addr = format!("2001:db8:1::{:x}", 1 + i % 7).parse().unwrap();
    let mac_c = [2, 0, 0, 0, (i >> 8) as u8, i as u8];
    let mac_s = [2, 0, 0, 1, 0, 1];
    let a = Endpoints::new(mac_c, mac_s).with_ipv4(c4, s4);
    let b = Endpoints::new(mac_s, mac_c).with_ipv4(s4, c4);
    if v6 {
        (a.with_ipv6(c6, s6), b.with_ipv6(s6, c6))
    } else {
        (a, b)
    }
}

/// A TCP segment of `len` payload bytes with `flags` (checksums are not
/// what flow exporters look at).
fn tcp(e: &Endpoints, seq: u32, sport: u16, dport: u16, flags: u8, len: usize) -> Vec<u8> {
    let mut f = frames::tcp4_with_options(e, seq, sport, dport, len);
    f[14 + 20 + 13] = flags;
    f
}

/// Many conversations of several kinds, interleaved.
fn traffic() -> Vec<Vec<u8>> {
    let mut convs: Vec<Vec<Vec<u8>>> = Vec::new();
    for i in 0..240u32 {
        let seq = i * 100;
        let port = 20_000 + i as u16;
        let mut c = Vec::new();
        match i % 6 {
            0 => {
                let (a, b) = ep(i, false);
                c.push(tcp(&a, seq, port, 80, 0x02, 0));
                c.push(tcp(&b, seq + 1, 80, port, 0x12, 0));
                for k in 0..(i % 5 + 1) {
                    c.push(tcp(&a, seq + 2 + k, port, 80, 0x18, 100 + k as usize));
                    c.push(tcp(&b, seq + 20 + k, 80, port, 0x18, 900 + i as usize));
                }
                c.push(tcp(&a, seq + 40, port, 80, 0x11, 0));
                c.push(tcp(&b, seq + 41, 80, port, 0x11, 0));
            }
            1 => {
                let (a, b) = ep(i, false);
                for k in 0..(i % 4 + 1) {
                    c.push(frames::udp4(&a, seq + k, port, 53, 30 + k as usize));
                    c.push(frames::udp4(&b, seq + 10 + k, 53, port, 200));
                }
            }
            2 => {
                let (a, b) = ep(i, false);
                let vid = 100 + (i % 3) as u16;
                c.push(frames::vlan_udp4(&a, seq, vid, port, 4789, 500));
                c.push(frames::vlan_udp4(&b, seq + 1, vid, 4789, port, 60));
                c.push(frames::vlan_udp4(&a, seq + 2, vid, port, 4789, 700));
            }
            3 => {
                let (a, b) = ep(i, true);
                for k in 0..3 {
                    c.push(frames::udp6(&a, seq + k, port, 443, 1200));
                    c.push(frames::udp6(&b, seq + 10 + k, 443, port, 80));
                }
            }
            4 => {
                let (a, b) = ep(i, false);
                c.push(frames::icmp4_echo(&a, seq, i as u16, 56));
                let mut reply = frames::icmp4_echo(&b, seq + 1, i as u16, 56);
                reply[14 + 20] = 0; // echo reply
                c.push(reply);
            }
            _ => {
                // One way only.
                let (a, _) = ep(i, false);
                for k in 0..5 {
                    c.push(frames::udp4(&a, seq + k, port, 514, 120));
                }
            }
        }
        convs.push(c);
    }
    // Interleave: one packet of each conversation in turn.
    let mut out = Vec::new();
    let mut k = 0;
    loop {
        let mut any = false;
        for c in &convs {
            if let Some(f) = c.get(k) {
                out.push(f.clone());
                any = true;
            }
        }
        if !any {
            break;
        }
        k += 1;
    }
    out
}

/// The file's own sums, from the testkit's reader and flow keys; bytes are
/// IP lengths read from the frames here.
fn file_sums(path: &Path) -> Sums {
    file_sums_and_trailers(path).0
}

/// [`file_sums`], and the keys of flows with frames that carry bytes past
/// their IP packet (the testkit's sequence trailer on short frames).
fn file_sums_and_trailers(path: &Path) -> (Sums, std::collections::BTreeSet<FiveTuple>) {
    let mut sums = Sums::new();
    let mut trailers = std::collections::BTreeSet::new();
    for p in read_pcap(path).unwrap() {
        let k = frames::flow_key(&p.data).expect("frame");
        let (Some(src), Some(dst)) = (k.src, k.dst) else {
            continue;
        };
        let ip = 14 + 4 * k.vlans.len();
        let len = match k.ethertype {
            0x0800 => u64::from(u16::from_be_bytes([p.data[ip + 2], p.data[ip + 3]])),
            _ => 40 + u64::from(u16::from_be_bytes([p.data[ip + 4], p.data[ip + 5]])),
        };
        let proto = k.proto as u8;
        let (sp, dp) = if proto == 1 || proto == 58 {
            (0, 0)
        } else {
            (k.src_port, k.dst_port)
        };
        let e = sums.entry((src, dst, sp, dp, proto)).or_default();
        e.0 += 1;
        e.1 += len;
        if p.data.len() as u64 > ip as u64 + len {
            trailers.insert((src, dst, sp, dp, proto));
        }
    }
    (sums, trailers)
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// nfcapd on 127.0.0.1:PORT writing into `dir`, stopped (and its file
/// completed) by [`Collector::read`].
struct Collector {
    child: ChildGuard,
    port: u16,
    dir: std::path::PathBuf,
}

impl Collector {
    fn start(dir: &Path) -> Collector {
        std::fs::create_dir_all(dir).unwrap();
        let port = free_udp_port();
        let mut cmd = Command::new("nfcapd");
        cmd.args([
            "-b",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "3600",
            "-w",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let child = ChildGuard::spawn(&mut cmd).expect("start nfcapd");
        // Ready when its socket is bound: a bind to the port fails then.
        let t = Instant::now();
        while UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            assert!(t.elapsed() < Duration::from_secs(10), "nfcapd did not bind");
            std::thread::sleep(Duration::from_millis(50));
        }
        Collector {
            child,
            port,
            dir: dir.to_path_buf(),
        }
    }

    /// Stops nfcapd and reads its flows with nfdump: per direction.
    fn read(mut self) -> Sums {
        // Give the last datagrams time to be stored.
        std::thread::sleep(Duration::from_millis(500));
        let _ = self.child.terminate();
        let out = Command::new("nfdump")
            .arg("-R")
            .arg(&self.dir)
            .args(["-q", "-o", "csv"])
            .output()
            .expect("nfdump");
        assert!(
            out.status.success(),
            "nfdump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut sums = Sums::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split(',').collect();
            if f.len() < 15 || f[0] == "ts" {
                continue;
            }
            let (Ok(sa), Ok(da)) = (f[3].parse::<IpAddr>(), f[4].parse::<IpAddr>()) else {
                continue;
            };
            let proto: u8 = match f[7] {
                "TCP" => 6,
                "UDP" => 17,
                "ICMP" => 1,
                "ICMP6" => 58,
                n => n
                    .parse()
                    .unwrap_or_else(|_| panic!("protocol {n} in {line}")),
            };
            let port = |s: &str| -> u16 { s.split('.').next().unwrap_or("0").parse().unwrap_or(0) };
            let (sp, dp) = if proto == 1 || proto == 58 {
                (0, 0)
            } else {
                (port(f[5]), port(f[6]))
            };
            let n = |s: &str| -> u64 {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("count {s} in {line}"))
            };
            let (ipkt, ibyt, opkt, obyt) = (n(f[11]), n(f[12]), n(f[13]), n(f[14]));
            if ipkt > 0 {
                let e = sums.entry((sa, da, sp, dp, proto)).or_default();
                e.0 += ipkt;
                e.1 += ibyt;
            }
            if opkt > 0 {
                let e = sums.entry((da, sa, dp, sp, proto)).or_default();
                e.0 += opkt;
                e.1 += obyt;
            }
        }
        sums
    }
}

fn diff(a: &Sums, b: &Sums) -> String {
    let mut s = String::new();
    for (k, v) in a {
        if b.get(k) != Some(v) {
            s += &format!("{k:?}: {v:?} vs {:?}\n", b.get(k));
        }
    }
    for (k, v) in b {
        if !a.contains_key(k) {
            s += &format!("{k:?}: missing vs {v:?}\n");
        }
    }
    s.lines().take(20).collect::<Vec<_>>().join("\n")
}

fn collectors_here() -> bool {
    for t in ["nfcapd", "nfdump"] {
        if !have(t) {
            skip(format!(
                "{t} is not installed (Debian: apt-get install nfdump)"
            ));
            return false;
        }
    }
    true
}

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
        let got = c.read();
        assert!(
            got == want,
            "{scheme}: nfdump's flows differ from the file:\n{}",
            diff(&want, &got)
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
        ("kafka://127.0.0.1:9092/flows", "not built"),
        ("ipfix+tcp://127.0.0.1:4739", "not built"),
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
    run.assert_ok("collector down");
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
