//! scapy (Debian's python3-scapy, unmodified, `conf.use_pcap = True`) through
//! libringcap_pcap.so as `nobody` (issue 29). scapy does not link libpcap: it
//! dlopens it through ctypes and looks every function up on that handle, so
//! these tests fail unless the library answers that `dlopen` too.
//! `sniff()` gets exactly what root tcpdump gets with the grant's framework
//! filter ANDed and the snap cap; scapy's libpcap socket sends only what the
//! grant's inject rules allow and sees the refusals as libpcap errors.

mod common;
mod pcapshim_helpers;

use common::*;
use pcapshim_helpers::*;
use ringcap_testkit::capture::{start_peer_tcpdump, wait_for_stderr_match, ChildGuard};
use ringcap_testkit::{TempDir, Testbed};
use std::process::Stdio;
use std::time::Duration;

const SCRIPT: &str = include_str!("../../pcapshim/tests/scapy_client.py");
const PYTHON: &str = "/usr/bin/python3";

/// The client script in `dir` (readable by nobody), or None (skip) when
/// the system's python has no scapy.
fn script(dir: &TempDir) -> Option<String> {
    let ok = std::process::Command::new(PYTHON)
        .args(["-c", "import scapy.all"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        ringcap_testkit::skip("python3-scapy is not installed (scripts/setup installs it)");
        return None;
    }
    let path = dir.join("scapy_client.py");
    std::fs::write(&path, SCRIPT).expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    Some(path.to_str().expect("path").to_string())
}

#[test]
fn scapy_sniff_through_the_library_gets_what_root_tcpdump_gets() {
    if !can_run() {
        return;
    }
    let dir = open_dir("pcapshim-scapy-sniff");
    let Some(script) = script(&dir) else { return };
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(
        &tb,
        &format!("capture_filter = \"{FRAMEWORK}\"\nmax_snaplen = {CAP}\n"),
    );
    let td = TempDir::new("pcapshim-scapy-root");
    let filter = "udp or icmp";
    let sent = untagged_frames(&tb, 0..23 * 20);
    let oracle_filter = Oracle::new(FRAMEWORK, filter);
    let want = oracle_filter.expect(&sent, CAP as usize);
    let kept: Vec<&Vec<u8>> = sent.iter().filter(|f| oracle_filter.accepts(f)).collect();
    let oracle = start_tcpdump(
        &tb,
        &td.join("root.pcap"),
        CAP,
        &format!("({FRAMEWORK}) and ({filter})"),
    );
    let out = dir.join("scapy.pcap");
    let count = want.len().to_string();
    let mut cmd = run_as_nobody(
        &tb,
        &d,
        &[
            PYTHON,
            &script,
            "sniff",
            &tb.capture_if,
            filter,
            &count,
            out.to_str().expect("path"),
        ],
    );
    cmd.env("HOME", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn scapy");
    let (_, log) = wait_for_stderr_match(
        &mut child,
        |l| l.contains("sniffing"),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("scapy through ringcap run did not start: {e}"));
    std::thread::sleep(Duration::from_millis(300));
    tb.send_from_peer(&sent, 5_000).expect("send");
    let st = child
        .wait_timeout(Duration::from_secs(40))
        .expect("wait scapy")
        .unwrap_or_else(|| panic!("scapy sniff(count={count}) did not end"));
    std::thread::sleep(SETTLE);
    let root = oracle.stop();
    assert_packets(
        &root,
        &want,
        "root tcpdump (the oracle) against the frames sent",
    );
    let err = log.wait_eof(Duration::from_secs(5));
    assert!(st.success(), "scapy: {st}\n{err}");
    let got = read(&out);
    assert_eq!(
        got.len(),
        want.len(),
        "scapy got {} packets, the oracle {}",
        got.len(),
        want.len()
    );
    // scapy 2.5 copies `len` bytes (the wire length), not `caplen`, from
    // what pcap_next_ex returns: past the capped snap it reads on into the
    // session's own ring. The first caplen bytes are the oracle's; what
    // follows must never be the part of the packet the cap cut off.
    let cap = CAP as usize;
    let mut beyond = 0;
    for (i, ((g, (wl, w)), frame)) in got.iter().zip(&want).zip(&kept).enumerate() {
        assert!(
            g.data.len() >= w.len(),
            "packet {i}: scapy has {} bytes, caplen {}",
            g.data.len(),
            w.len()
        );
        assert_eq!(
            g.data[..w.len()],
            w[..],
            "packet {i}: scapy's bytes differ from root tcpdump's"
        );
        assert_eq!(
            g.data.len(),
            *wl as usize,
            "packet {i}: scapy's length is not the wire length"
        );
        if frame.len() >= cap + 16 {
            beyond += 1;
            assert_ne!(
                g.data[cap..],
                frame[cap..],
                "packet {i}: the bytes past the grant's snap cap reached the client"
            );
        }
    }
    assert!(
        beyond > 0,
        "no frame longer than the cap was sent: the cap was not tried"
    );
    assert_idle(&tb, &d, "after scapy exited");
}

#[test]
fn scapy_sends_only_what_the_grant_allows() {
    if !can_run() {
        return;
    }
    let dir = open_dir("pcapshim-scapy-send");
    let Some(script) = script(&dir) else { return };
    shim();
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(&tb, &binding_inject_grant(&tb));
    let n = 60u16;
    let input = binding_inject_frames(&tb, dir.path(), n);
    let peer = dir.join("peer.pcap");
    let mut td = start_peer_tcpdump(&tb, &peer, "udp").expect("tcpdump on the peer");
    let mut cmd = run_as_nobody(
        &tb,
        &d,
        &[
            PYTHON,
            &script,
            "send",
            &tb.capture_if,
            input.to_str().expect("path"),
        ],
    );
    cmd.env("HOME", dir.path());
    let (status, stdout, stderr) = run_limited_out(&mut cmd, Duration::from_secs(90));
    std::thread::sleep(Duration::from_millis(500));
    td.terminate().expect("stop tcpdump");
    assert!(status.success(), "scapy send: {status}\n{stdout}\n{stderr}");
    check_sent_lines(&stdout, n, &read(&peer));
    assert_idle(&tb, &d, "after scapy exited");
}
