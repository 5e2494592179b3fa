//! Unmodified libpcap tools through ringcapd (issue 29), as the
//! unprivileged user `nobody` with no capability, through `ringcap run` and
//! libringcap_pcap.so against a real ringcapd over veth: the Debian tcpdump
//! binary captures exactly what root's tcpdump captures with
//! `(framework) and (filter)` at the grant's snap cap — the same file, byte
//! for byte — and stops by itself at `-c N`; `tcpdump -D` lists only the
//! granted interface; on one no grant covers it fails with a libpcap-style
//! message naming the rule; interrupted, it writes what it had and ends its
//! session; a C program that reads only when `pcap_get_selectable_fd` polls
//! readable gets every packet, and the descriptor is not readable while
//! nothing waits. After each tool, ringcapd holds no session. Other tools:
//! pcapshim_tools.rs.

mod common;
mod pcapshim_helpers;

use common::*;
use pcapshim_helpers::*;
use ringcap_testkit::capture::{wait_for_stderr_match, ChildGuard, StderrLog};
use ringcap_testkit::{frames, TempDir, Testbed};
use std::process::Stdio;
use std::time::Duration;

#[test]
fn tcpdump_through_the_library_writes_what_root_tcpdump_writes() {
    if !can_run() {
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(
        &tb,
        &format!("capture_filter = \"{FRAMEWORK}\"\nmax_snaplen = {CAP}\n"),
    );
    let out = open_dir("pcapshim-out");
    let td = TempDir::new("pcapshim-tcpdump");
    let filter = "udp or icmp or arp";
    let sent = frames::mixed_sequence(&tb.endpoints(), 23 * 4 * 20);
    let want = Oracle::new(FRAMEWORK, filter).expect(&sent, CAP as usize);
    assert!(want.len() > 500, "{} packets expected", want.len());

    let oracle = start_tcpdump(
        &tb,
        &td.join("root.pcap"),
        CAP,
        &format!("({FRAMEWORK}) and ({filter})"),
    );
    // Asks for more than the cap; -c: exits by itself after exactly what
    // the combined filter accepts.
    let file = out.join("nobody.pcap");
    let count = want.len().to_string();
    let mut cmd = run_as_nobody(
        &tb,
        &d,
        &[
            "tcpdump",
            "-i",
            &tb.capture_if,
            "-s",
            "1000",
            "--time-stamp-precision=nano",
            "--immediate-mode",
            "-U",
            "-nn",
            "-c",
            &count,
            "-w",
            file.to_str().expect("path"),
            filter,
        ],
    );
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn ringcap run tcpdump");
    let (_, log) = wait_for_stderr_match(
        &mut child,
        |l| l.contains("listening on"),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| panic!("tcpdump through ringcap run did not start: {e}"));

    tb.send_from_peer(&sent, 20_000).expect("send");
    let status = child
        .wait_timeout(Duration::from_secs(30))
        .expect("wait")
        .unwrap_or_else(|| panic!("tcpdump -c {count} did not exit: {}", log.text()));
    let stderr = log.wait_eof(Duration::from_secs(5));
    std::thread::sleep(SETTLE);
    let root = oracle.stop();
    assert!(status.success(), "tcpdump as nobody: {status}\n{stderr}");
    assert!(
        stderr.contains(&format!("{count} packets captured")),
        "tcpdump's summary: {stderr}"
    );
    assert!(
        stderr.contains("0 packets dropped by kernel"),
        "tcpdump's summary: {stderr}"
    );
    assert_packets(
        &root,
        &want,
        "root tcpdump (the oracle) against the frames sent",
    );

    let got = std::fs::read(&file).expect("nobody's file");
    let root_bytes = std::fs::read(td.join("root.pcap")).expect("root's file");
    if got != root_bytes {
        let mine = read(&file);
        assert_packets(
            &mine,
            &root
                .iter()
                .map(|p| (p.wire_len, p.data.clone()))
                .collect::<Vec<_>>(),
            "tcpdump through ringcapd against root tcpdump",
        );
        for (i, (g, w)) in mine.iter().zip(&root).enumerate() {
            assert_eq!(g.ts_ns, w.ts_ns, "packet {i}'s timestamp");
        }
        panic!(
            "the files differ in their headers: {:02x?} vs {:02x?}",
            &got[..24.min(got.len())],
            &root_bytes[..24.min(root_bytes.len())]
        );
    }
    assert_no_panic(&d.stop(), "ringcapd");
}

#[test]
fn tcpdump_lists_the_granted_interface_and_names_the_rule_for_others() {
    if !can_run() {
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, "");
    let (status, stderr) = run_limited(
        &mut run_as_nobody(
            &tb,
            &d,
            &["tcpdump", "-i", "lo", "-c", "1", "-w", "/dev/null"],
        ),
        Duration::from_secs(30),
    );
    assert!(
        !status.success(),
        "tcpdump -i lo as nobody succeeded: {stderr}"
    );
    assert!(
        stderr.contains("tcpdump: lo: You don't have permission")
            && stderr.contains("ringcapd: refused by grant 1, rule interfaces: interface \"lo\""),
        "tcpdump's message: {stderr}"
    );
    assert_no_panic(&stderr, "tcpdump");

    // tcpdump -D lists only what the grant covers (libpcap's list probed).
    let (status, stdout, stderr) = run_limited_out(
        &mut run_as_nobody(&tb, &d, &["tcpdump", "-D"]),
        Duration::from_secs(30),
    );
    assert!(status.success(), "tcpdump -D: {stderr}");
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once('.').map(|(_, rest)| rest))
        .map(|rest| rest.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(names, [tb.capture_if.as_str()], "tcpdump -D:\n{stdout}");
    assert_idle(&tb, &d, "after tcpdump -D");
}

#[test]
fn selectable_fd_is_readable_exactly_when_packets_wait() {
    if !can_run() {
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, &format!("capture_filter = \"{FRAMEWORK}\"\n"));
    let dir = open_dir("pcapshim-select");
    let exe = compile_c(
        &dir,
        "selectable",
        include_str!("../../pcapshim/tests/selectable.c"),
    );
    let filter = "udp";
    let sent = untagged_frames(&tb, 0..23 * 40);
    let want = Oracle::new(FRAMEWORK, filter).expect(&sent, 65535).len();
    // All there is per wake-up, and one packet per wake-up (dumpcap's way).
    for per in ["-1", "1"] {
        let mut cmd = run_as_nobody(
            &tb,
            &d,
            &[
                exe.to_str().expect("path"),
                &tb.capture_if,
                filter,
                &want.to_string(),
                per,
            ],
        );
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = ChildGuard::spawn(&mut cmd).expect("spawn");
        let (_, log) = wait_for_stderr_match(&mut child, |l| l == "ready", Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("the C program did not start: {e}"));
        // Paced: the reads are woken many times, not once at the end.
        tb.send_from_peer(&sent, 2_000).expect("send");
        let out = child.wait_output(Duration::from_secs(30)).expect("wait");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let text = format!(
            "{per} per dispatch: stdout:\n{stdout}\nstderr:\n{}",
            log.text()
        );
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(
            stdout.contains("idle 0\n"),
            "readable before any packet: {text}"
        );
        assert!(stdout.contains(&format!("got {want}\n")), "{text}");
        let empty: u64 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("empty "))
            .and_then(|v| v.parse().ok())
            .expect("empty N");
        assert!(
            empty <= 2,
            "readable with nothing to read {empty} times: {text}"
        );
        assert!(
            stdout.contains(&format!("stats {want} 0")),
            "pcap_stats: {text}"
        );
    }
    assert_idle(&tb, &d, "after the C programs exited");
}

#[test]
fn tcpdump_interrupted_ends_its_session_and_keeps_its_packets() {
    if !can_run() {
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, "");
    let out = open_dir("pcapshim-sigint");
    let file = out.join("int.pcap");
    let (mut child, log) =
        tcpdump_as_nobody(&tb, &d, &["-U", "-w", file.to_str().expect("path"), "udp"]);
    let sent = untagged_frames(&tb, 0..23 * 10);
    let want = Oracle::new("", "udp").expect(&sent, 262_144);
    tb.send_from_peer(&sent, 5_000).expect("send");
    std::thread::sleep(SETTLE);
    child.signal(libc::SIGINT).expect("SIGINT");
    let status = child
        .wait_timeout(Duration::from_secs(10))
        .expect("wait")
        .unwrap_or_else(|| panic!("tcpdump ignored SIGINT: {}", log.text()));
    let stderr = log.wait_eof(Duration::from_secs(5));
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains(&format!("{} packets captured", want.len()))
            && stderr.contains(&format!("{} packets received by filter", want.len()))
            && stderr.contains("0 packets dropped by kernel"),
        "tcpdump's summary: {stderr}"
    );
    assert_packets(&read(&file), &want, "tcpdump interrupted");
    assert_idle(&tb, &d, "after SIGINT");
}

/// tcpdump opens its next file from its packet callback at a `-C`
/// rotation (a call nested in its read): through the library it rotates
/// and keeps every packet, as root's tcpdump does (it exited at the first
/// rotation with "tcpdump: ").
#[test]
fn tcpdump_rotates_its_files_through_the_library() {
    if !can_run() {
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, "");
    let out = open_dir("pcapshim-rotate");
    let file = out.join("c.pcap");
    let ep = tb.endpoints();
    // 2,500 frames of ~1 KB: three files of 1,000,000 bytes at -C 1.
    let sent: Vec<Vec<u8>> = (0..2500)
        .map(|s| frames::udp4(&ep, s, 4000, 5300, 1000))
        .collect();
    let path = file.to_str().expect("path");
    let args = ["-C", "1", "-c", "2500", "-w", path, "udp port 5300"];
    let (mut child, log) = tcpdump_as_nobody(&tb, &d, &args);
    tb.send_from_peer(&sent, 5_000).expect("send");
    let status = child
        .wait_timeout(Duration::from_secs(30))
        .expect("wait")
        .unwrap_or_else(|| panic!("tcpdump -c 2500 did not exit: {}", log.text()));
    let stderr = log.wait_eof(Duration::from_secs(5));
    assert!(status.success(), "{status}: {stderr}");
    let mut files: Vec<_> = std::fs::read_dir(out.path())
        .expect("out")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().contains("c.pcap"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}: {stderr}");
    let got: Vec<Vec<u8>> = files
        .iter()
        .flat_map(|f| read(f).into_iter().map(|p| p.data))
        .collect();
    assert_eq!(got.len(), sent.len(), "{files:?}: {stderr}");
    assert!(got.iter().zip(&sent).all(|(g, s)| g == s), "{stderr}");
    assert_idle(&tb, &d, "after tcpdump -C");
}

/// Calls nested in a read on the same handle (the packet callback's
/// pcap_stats, pcap_snapshot, pcap_datalink and pcap_dump_open; a signal
/// handler's pcap_stats) are answered as libpcap answers them (they failed
/// with -1 and no message), and a fork()ed child closing its copy of the
/// handle leaves the parent's capture running (it ended the session).
#[test]
fn nested_calls_are_answered_and_a_forked_child_leaves_the_capture() {
    if !can_run() {
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, &format!("capture_filter = \"{FRAMEWORK}\"\n"));
    let dir = open_dir("pcapshim-nested");
    let sent = untagged_frames(&tb, 0..23 * 10);
    let want = Oracle::new(FRAMEWORK, "udp").expect(&sent, 65535);
    // Paced over ~2 s: the alarm set at the first packet comes during a read.
    let (stdout, dump) = run_nested(&tb, &d, &dir, "udp", want.len(), None, &sent, 100);
    assert!(
        stdout.contains("callback stats 0 snapshot 65535 datalink 1\n"),
        "{stdout}"
    );
    assert!(stdout.contains("dump opened\n"), "{stdout}");
    assert!(stdout.contains("handler stats 0\n"), "{stdout}");
    assert_packets(&read(&dump), &want, "the file opened from the callback");
    assert_idle(&tb, &d, "after the C program exited");
}

/// The netmask a tool gives `pcap_compile` holds through the library (its
/// program goes to ringcapd, not its text compiled again without it):
/// `ip broadcast` with a /24 mask matches x.y.z.255 (it matched nothing).
#[test]
fn the_netmask_given_to_pcap_compile_holds() {
    if !can_run() {
        return;
    }
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(&tb, "");
    let dir = open_dir("pcapshim-netmask");
    let ep = tb.endpoints();
    let bcast = ep.with_ipv4(ep.src_ip, std::net::Ipv4Addr::new(198, 18, 0, 255));
    let sent: Vec<Vec<u8>> = (0..20)
        .map(|s| match s % 2 {
            0 => frames::udp4(&bcast, s, 4000, 5301, 40),
            _ => frames::udp4(&ep, s, 4000, 5301, 40),
        })
        .collect();
    let want: Vec<(u32, Vec<u8>)> = sent
        .iter()
        .step_by(2)
        .map(|f| (f.len() as u32, f.clone()))
        .collect();
    let (_, dump) = run_nested(
        &tb,
        &d,
        &dir,
        "ip broadcast",
        want.len(),
        Some("0xffffff00"),
        &sent,
        1_000,
    );
    assert_packets(&read(&dump), &want, "ip broadcast, netmask 255.255.255.0");
    assert_idle(&tb, &d, "after the C program exited");
}

/// Runs crates/pcapshim/tests/nested.c as nobody on `filter` until it has
/// `count` packets, sending `sent` at `pps` once it is ready: its stdout
/// (checked: exit 0, `got COUNT`) and the file it dumped to.
#[allow(clippy::too_many_arguments)]
fn run_nested(
    tb: &Testbed,
    d: &Daemon,
    dir: &TempDir,
    filter: &str,
    count: usize,
    netmask: Option<&str>,
    sent: &[Vec<u8>],
    pps: u32,
) -> (String, std::path::PathBuf) {
    let exe = compile_c(dir, "nested", include_str!("../../pcapshim/tests/nested.c"));
    let dump = dir.join("dump.pcap");
    let count = count.to_string();
    let mut args = vec![
        exe.to_str().expect("path"),
        &tb.capture_if,
        filter,
        &count,
        dump.to_str().expect("path"),
    ];
    args.extend(netmask);
    let mut cmd = run_as_nobody(tb, d, &args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn");
    let (_, log) = wait_for_stderr_match(&mut child, |l| l == "ready", Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("the C program did not start: {e}"));
    tb.send_from_peer(sent, pps).expect("send");
    let out = child.wait_output(Duration::from_secs(30)).expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = format!("stdout:\n{stdout}\nstderr:\n{}", log.text());
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(stdout.contains(&format!("got {count}\n")), "{text}");
    (stdout, dump)
}

/// `tcpdump -i CAPTURE_IF ARGS...` as nobody through the library, once it
/// says it is listening: the child and its stderr.
fn tcpdump_as_nobody(tb: &Testbed, d: &Daemon, args: &[&str]) -> (ChildGuard, StderrLog) {
    let mut all = vec!["tcpdump", "-i", &tb.capture_if];
    all.extend(args);
    let mut cmd = run_as_nobody(tb, d, &all);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn");
    let (_, log) = wait_for_stderr_match(
        &mut child,
        |l| l.contains("listening on"),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| panic!("tcpdump did not start: {e}"));
    (child, log)
}
