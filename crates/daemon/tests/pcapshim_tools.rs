//! More unmodified libpcap tools through ringcapd (issue 29), as `nobody`
//! through `ringcap run` and libringcap_pcap.so: tshark (dumpcap) gets the
//! packets root tcpdump gets, tcpdump prints the lines root tcpdump prints;
//! `pcap_sendpacket` sends what the grant's inject rules allow and reports
//! the refusals; softflowd exports flows of what the grant allows; and a
//! throughput measurement against root tcpdump (ignored by default).

mod common;
mod pcapshim_helpers;

use common::*;
use pcapshim_helpers::*;
use ringcap_testkit::capture::{start_peer_tcpdump, wait_for_stderr_match, ChildGuard};
use ringcap_testkit::{frames, TempDir, Testbed};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn tshark_and_tcpdump_text_through_the_library_match_root_tcpdump() {
    if !can_run() {
        return;
    }
    if !ringcap_testkit::netns::have_program("tshark") {
        ringcap_testkit::skip("`tshark` is not installed");
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(
        &tb,
        &format!("capture_filter = \"{FRAMEWORK}\"\nmax_snaplen = {CAP}\n"),
    );
    let out = open_dir("pcapshim-tshark");
    let td = TempDir::new("pcapshim-tshark-root");
    let filter = "udp or icmp";
    let sent = untagged_frames(&tb, 0..23 * 30);
    let want = Oracle::new(FRAMEWORK, filter).expect(&sent, CAP as usize);
    let count = want.len().to_string();
    let oracle = start_tcpdump(
        &tb,
        &td.join("root.pcap"),
        CAP,
        &format!("({FRAMEWORK}) and ({filter})"),
    );

    // tshark (its dumpcap reads through the selectable descriptor).
    let shark_file = out.join("tshark.pcapng");
    let mut shark = run_as_nobody(
        &tb,
        &d,
        &[
            "tshark",
            "-i",
            &tb.capture_if,
            "-f",
            filter,
            "-c",
            &count,
            "-w",
            shark_file.to_str().expect("path"),
        ],
    );
    shark
        .env("HOME", out.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut shark = ChildGuard::spawn(&mut shark).expect("spawn tshark");
    let (_, shark_log) = wait_for_stderr_match(
        &mut shark,
        |l| l.contains("Capturing on"),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("tshark through ringcap run did not start: {e}"));

    // tcpdump printing its usual lines.
    let mut text = run_as_nobody(
        &tb,
        &d,
        &["tcpdump", "-i", &tb.capture_if, "-nn", "-c", &count, filter],
    );
    text.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut text = ChildGuard::spawn(&mut text).expect("spawn tcpdump");
    let (_, text_log) = wait_for_stderr_match(
        &mut text,
        |l| l.contains("listening on"),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| panic!("tcpdump (text) did not start: {e}"));
    // dumpcap says "Capturing on" as it opens; its filter follows.
    std::thread::sleep(Duration::from_millis(500));

    tb.send_from_peer(&sent, 5_000).expect("send");
    let shark_status = shark
        .wait_timeout(Duration::from_secs(30))
        .expect("wait tshark")
        .unwrap_or_else(|| panic!("tshark -c {count} did not exit: {}", shark_log.text()));
    let text_out = text.wait_output(Duration::from_secs(30)).expect("tcpdump");
    std::thread::sleep(SETTLE);
    let root = oracle.stop();
    assert_packets(
        &root,
        &want,
        "root tcpdump (the oracle) against the frames sent",
    );
    let shark_err = shark_log.wait_eof(Duration::from_secs(5));
    assert!(
        shark_status.success(),
        "tshark: {shark_status}\n{shark_err}"
    );
    assert_packets(
        &read(&shark_file),
        &want,
        "tshark through ringcapd against the oracle",
    );
    for (i, (g, w)) in read(&shark_file).iter().zip(&root).enumerate() {
        assert_eq!(
            g.ts_ns / 1000,
            w.ts_ns / 1000,
            "tshark: packet {i}'s timestamp"
        );
    }

    // The lines root tcpdump prints for its own file.
    let (st, root_lines, err) = run_limited_out(
        Command::new("tcpdump")
            .args(["-nn", "-r"])
            .arg(td.join("root.pcap")),
        Duration::from_secs(30),
    );
    assert!(st.success(), "tcpdump -r: {err}");
    let lines = String::from_utf8_lossy(&text_out.stdout);
    assert!(
        text_out.status.success(),
        "tcpdump (text): {}\n{}",
        text_out.status,
        text_log.text()
    );
    assert_eq!(lines, root_lines, "tcpdump's lines against root tcpdump's");
    assert_idle(&tb, &d, "after tshark and tcpdump exited");
    assert_no_panic(&d.stop(), "ringcapd");
}

#[test]
fn pcap_sendpacket_goes_through_the_grants_inject_rights() {
    if !can_run() {
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(&tb, &binding_inject_grant(&tb));
    let dir = open_dir("pcapshim-inject");
    let exe = compile_c(
        &dir,
        "inject",
        include_str!("../../pcapshim/tests/inject.c"),
    );
    let n = 60u16;
    let input = binding_inject_frames(&tb, dir.path(), n);
    let peer = dir.join("peer.pcap");
    let mut td = start_peer_tcpdump(&tb, &peer, "udp").expect("tcpdump on the peer");
    let (status, stdout, stderr) = run_limited_out(
        &mut run_as_nobody(
            &tb,
            &d,
            &[
                exe.to_str().expect("path"),
                &tb.capture_if,
                input.to_str().expect("path"),
            ],
        ),
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_millis(500));
    td.terminate().expect("stop tcpdump");
    assert!(status.success(), "inject: {status}\n{stdout}\n{stderr}");
    check_sent_lines(&stdout, n, &read(&peer));
    assert_idle(&tb, &d, "after the injecting program exited");
}

/// CPU seconds (user + system) `/usr/bin/time -f "cpu %U %S"` reported.
fn cpu_of(stderr: &str) -> f64 {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("cpu "))
        .map(|l| l.split(' ').filter_map(|v| v.parse::<f64>().ok()).sum())
        .next_back()
        .unwrap_or_else(|| panic!("no cpu line in {stderr}"))
}

/// A measurement more than a check (run by hand: `cargo test -p
/// ringcap-daemon --test pcapshim_tools -- --ignored --nocapture`): N frames at
/// tcpreplay's top rate, root tcpdump and tcpdump through the library side
/// by side at a headers snap length; both must get every frame; prints the
/// CPU per packet of each (the library's tool process only: the daemon's
/// share is not counted here).
#[test]
#[ignore]
fn throughput_against_root_tcpdump() {
    if !can_run() || !Path::new("/usr/bin/time").exists() {
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, "");
    let out = open_dir("pcapshim-rate");
    // RINGCAP_PCAPSHIM_FRAMES: more frames, less weight on start-up costs.
    let n: usize = std::env::var("RINGCAP_PCAPSHIM_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let ep =
        frames::Endpoints::new(tb.peer_mac, tb.capture_mac).with_ipv4(tb.peer_ip, tb.capture_ip);
    let sent: Vec<Vec<u8>> = (0..n as u32)
        .map(|i| frames::udp4(&ep, i, 4000, 5000, 18))
        .collect();
    let count = n.to_string();
    let tool = |file: &str| -> Vec<String> {
        [
            "/usr/bin/time",
            "-f",
            "cpu %U %S",
            "tcpdump",
            "-i",
            &tb.capture_if,
            "-s",
            "96",
            "-c",
            &count,
            "-w",
            file,
            "udp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let root_file = out.join("root.pcap");
    let mut root = tb.in_capture_ns("/usr/bin/time");
    root.args(&tool(root_file.to_str().expect("p"))[1..]);
    let shim_file = out.join("shim.pcap");
    let shim_args = tool(shim_file.to_str().expect("p"));
    let shim_args: Vec<&str> = shim_args.iter().map(String::as_str).collect();
    let mut lib = run_as_nobody(&tb, &d, &shim_args);
    let mut started = Vec::new();
    for (name, cmd) in [("root", &mut root), ("library", &mut lib)] {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut c = ChildGuard::spawn(cmd).expect("spawn");
        let (_, log) = wait_for_stderr_match(
            &mut c,
            |l| l.contains("listening on"),
            Duration::from_secs(20),
        )
        .unwrap_or_else(|e| panic!("{name} tcpdump: {e}"));
        started.push((name, c, log));
    }
    let t0 = std::time::Instant::now();
    tb.send_from_peer(&sent, 0).expect("send");
    let secs = t0.elapsed().as_secs_f64();
    for (name, mut c, log) in started {
        let st = c.wait_timeout(Duration::from_secs(10)).expect("wait");
        if st.is_none() {
            let _ = c.signal(libc::SIGINT);
            let _ = c.wait_timeout(Duration::from_secs(10));
        }
        let err = log.wait_eof(Duration::from_secs(5));
        let file = if name == "root" {
            &root_file
        } else {
            &shim_file
        };
        let got = read(file).len();
        let cpu = cpu_of(&err);
        println!(
            "{name}: {got}/{n} packets at {:.0} frames/s, {:.0} ns CPU per packet",
            n as f64 / secs,
            cpu * 1e9 / n as f64
        );
        assert_eq!(got, n, "{name} lost packets: {err}");
    }
}

/// softflowd (unmodified, as nobody through the library) exports flows of
/// exactly the IP packets the grant lets it see to an nfcapd the test runs
/// (root, the capture namespace's loopback): as many packets as the oracle
/// accepts, none on the port the framework filter excludes.
#[test]
fn softflowd_exports_flows_of_what_the_grant_allows() {
    if !can_run() {
        return;
    }
    for prog in ["softflowd", "softflowctl", "nfcapd", "nfdump"] {
        if !ringcap_testkit::netns::have_program(prog) {
            ringcap_testkit::skip(format!("`{prog}` is not installed"));
            return;
        }
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, &format!("capture_filter = \"{FRAMEWORK}\"\n"));
    let dir = open_dir("pcapshim-flows");
    let flows = dir.join("flows");
    std::fs::create_dir_all(&flows).expect("flow dir");
    // A port of our own in the capture namespace's loopback.
    let port = (20_000 + std::process::id() % 20_000).to_string();
    // The namespace's loopback (down in a new namespace) carries the export.
    let up = tb
        .in_capture_ns("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .expect("ip link set lo up");
    assert!(up.success(), "ip link set lo up");
    let mut collector = tb.in_capture_ns("nfcapd");
    collector
        .args(["-b", "127.0.0.1", "-p", &port, "-t", "3600", "-w"])
        .arg(&flows)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let collector = ChildGuard::spawn(&mut collector).expect("spawn nfcapd");
    std::thread::sleep(Duration::from_millis(500));

    let filter = "ip";
    let target = format!("127.0.0.1:{port}");
    let (pid, ctl) = (dir.join("softflowd.pid"), dir.join("softflowd.ctl"));
    let mut probe = run_as_nobody(
        &tb,
        &d,
        &[
            "softflowd",
            "-D",
            "-i",
            &tb.capture_if,
            "-n",
            &target,
            "-v",
            "10",
            // Flows expire 1 s after their last packet, checked every second.
            "-t",
            "general=1",
            "-t",
            "udp=1",
            "-t",
            "tcp=1",
            "-t",
            "icmp=1",
            "-t",
            "expint=1",
            "-p",
            pid.to_str().expect("path"),
            "-c",
            ctl.to_str().expect("path"),
            filter,
        ],
    );
    probe
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut probe = ChildGuard::spawn(&mut probe).expect("spawn softflowd");
    let (_, probe_log) = wait_for_stderr_match(&mut probe, |_| true, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("softflowd said nothing: {e}"));
    // Capturing once its session carries its filter.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !stats_json(&tb, &d, None)
        .iter()
        .any(|s| s.to_string().contains(&format!("\"{filter}\"")))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "softflowd never set its filter"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let sent = untagged_frames(&tb, 0..23 * 20);
    let want = Oracle::new(FRAMEWORK, filter).expect(&sent, 65535);
    tb.send_from_peer(&sent, 5_000).expect("send");
    // Every flow expires and is exported (TCP flows without a FIN only
    // when told).
    std::thread::sleep(Duration::from_secs(2));
    let mut ctl_cmd = as_user(&tb, NOBODY, Path::new("/usr/sbin/softflowctl"));
    ctl_cmd.arg("-c").arg(&ctl).arg("expire-all");
    let (st, _, err) = run_limited_out(&mut ctl_cmd, Duration::from_secs(20));
    assert!(st.success(), "softflowctl expire-all: {err}");
    std::thread::sleep(Duration::from_secs(1));
    probe.signal(libc::SIGTERM).expect("SIGTERM softflowd");
    let st = probe.wait_timeout(Duration::from_secs(10)).expect("wait");
    let Some(exit) = st else {
        panic!("softflowd did not exit on SIGTERM");
    };
    std::thread::sleep(Duration::from_millis(500));
    let mut collector = collector;
    collector.signal(libc::SIGTERM).expect("SIGTERM nfcapd");
    let nfcapd = collector
        .wait_output(Duration::from_secs(10))
        .expect("nfcapd");
    let nfcapd = format!(
        "{}{}",
        String::from_utf8_lossy(&nfcapd.stdout),
        String::from_utf8_lossy(&nfcapd.stderr)
    );
    let (st, csv, err) = run_limited_out(
        Command::new("nfdump")
            .arg("-R")
            .arg(&flows)
            .args(["-q", "-o", "csv"]),
        Duration::from_secs(30),
    );
    assert!(st.success(), "nfdump: {err}");
    // ts,te,td,sa,da,sp,dp,pr,flg,fwd,stos,ipkt,ibyt,...
    let mut packets = 0u64;
    for line in csv.lines().filter(|l| l.contains(',')) {
        let f: Vec<&str> = line.split(',').collect();
        assert!(f.len() > 12, "nfdump line {line:?}");
        assert!(
            f[5] != "20001" && f[6] != "20001",
            "a flow the framework excludes: {line}"
        );
        packets += f[11]
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("ipkt in {line:?}"));
    }
    assert_eq!(
        packets,
        want.len() as u64,
        "packets in the exported flows:\n{csv}\nnfcapd: {nfcapd}\nflow files: {:?}\nsoftflowd ({exit}):\n{}",
        std::fs::read_dir(&flows).map(|r| r.flatten().map(|e| e.file_name()).collect::<Vec<_>>()),
        probe_log.wait_eof(Duration::from_secs(2))
    );
    assert_idle(&tb, &d, "after softflowd exited");
}
