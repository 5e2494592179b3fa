//! The Python binding (python/ringcap, over libringcap.so): pytest tests in
//! python/tests/live_session.py run as the unprivileged user `nobody` with
//! the system /usr/bin/python3 against a real ringcapd over veth. This
//! harness makes the testbed, starts the daemon and tcpdump (root), sends
//! the traffic and hands tcpdump's file (or the offline oracle's count) to
//! the Python side, which compares (see live_session.py's docstring); the
//! tcpdump comparison covers a session with `compress=True` too.

mod common;

use common::*;
use ringcap_testkit::capture::{start_peer_tcpdump, ChildGuard};
use ringcap_testkit::netns::have_program;
use ringcap_testkit::{frames, skip, TempDir, Testbed};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";
const FRAMEWORK: &str = "not port 20001";
const CAP: u32 = 128;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding libringcap.so (`target/<profile>`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf();
    assert!(
        dir.join("libringcap.so").exists(),
        "{}/libringcap.so is missing: run `cargo build -p ringcap-capi` first",
        dir.display()
    );
    dir
}

fn can_run_python() -> bool {
    if !can_run() {
        return false;
    }
    let ok = std::process::Command::new(PYTHON)
        .args(["-c", "import pytest"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok || !have_program("tcpreplay") {
        skip(
            "/usr/bin/python3 with pytest is not installed (scripts/setup installs python3-pytest)",
        );
        return false;
    }
    true
}

/// The Python side: pytest running one test of live_session.py as nobody.
struct PyTest {
    child: ChildGuard,
    dir: TempDir,
}

fn start_pytest(tb: &Testbed, d: &Daemon, test: &str, filter: &str) -> PyTest {
    start_pytest_with(tb, d, test, filter, |_| {})
}

/// [`start_pytest`], with `prepare` putting files into the shared
/// directory before pytest starts.
fn start_pytest_with(
    tb: &Testbed,
    d: &Daemon,
    test: &str,
    filter: &str,
    prepare: impl FnOnce(&Path),
) -> PyTest {
    let dir = open_dir("py-live");
    prepare(dir.path());
    let mut cmd = as_user(tb, NOBODY, Path::new(PYTHON));
    cmd.args(["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-s"])
        .arg(format!(
            "{}::{test}",
            repo().join("python/tests/live_session.py").display()
        ))
        .env("PYTHONPATH", repo().join("python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // RINGCAP_TEST_LIBRINGCAP: another build (e.g. release, to measure).
        .env(
            "RINGCAP_LIB",
            std::env::var_os("RINGCAP_TEST_LIBRINGCAP")
                .map(PathBuf::from)
                .unwrap_or_else(|| lib_dir().join("libringcap.so")),
        )
        .env("RINGCAP_DAEMON", &d.socket)
        .env("RINGCAP_TEST_IF", &tb.capture_if)
        .env("RINGCAP_TEST_DIR", dir.path())
        .env("RINGCAP_TEST_FILTER", filter)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn pytest");
    let start = Instant::now();
    while !dir.join("ready").exists() {
        if let Ok(Some(_)) = child.try_wait() {
            let out = child
                .wait_output(Duration::from_secs(5))
                .expect("pytest output");
            panic!(
                "pytest exited before its session was open:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "pytest did not open its session"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    PyTest { child, dir }
}

impl PyTest {
    /// Says the traffic is over; waits for pytest's verdict; returns the
    /// directory it shared with the test.
    fn finish(self, what: &str) -> TempDir {
        std::fs::write(self.dir.join("sent"), b"").expect("write sent");
        let out = self
            .child
            .wait_output(Duration::from_secs(120))
            .expect("pytest");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{what}: pytest failed:\n{text}");
        assert!(text.contains("1 passed"), "{what}: pytest output:\n{text}");
        self.dir
    }
}

#[test]
fn python_as_nobody_receives_exactly_what_tcpdump_captures() {
    if !can_run_python() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(
        &tb,
        &format!("capture_filter = \"{FRAMEWORK}\"\nmax_snaplen = {CAP}\n"),
    );
    let filter = "udp or icmp or arp";
    let py = start_pytest(&tb, &d, "test_capture_matches_tcpdump", filter);
    // One line a session: the plain one, then the one opened with
    // compress=True, which reads the same traffic over a compressed stream.
    let ready = std::fs::read_to_string(py.dir.join("ready")).expect("ready");
    let lines: Vec<&str> = ready.lines().collect();
    assert_eq!(lines.len(), 2, "effective settings: {ready}");
    for (line, compressed) in lines.iter().zip([false, true]) {
        assert!(
            line.contains(&format!("snaplen {CAP}"))
                && line.contains(&format!("and ({filter})"))
                && line.contains("compressed stream") == compressed,
            "effective settings (compressed: {compressed}): {line}"
        );
    }
    let td = TempDir::new("py-tcpdump");
    let tcpdump = start_tcpdump(
        &tb,
        &td.join("want.pcap"),
        CAP,
        &format!("({FRAMEWORK}) and ({filter})"),
    );
    let sent = frames::mixed_sequence(&tb.endpoints(), 23 * 4 * 50);
    tb.send_from_peer(&sent, 20_000).expect("send");
    std::thread::sleep(SETTLE);
    let want = tcpdump.stop();
    // The oracle itself against the frames sent (a check of the test).
    assert_packets(
        &want,
        &Oracle::new(FRAMEWORK, filter).expect(&sent, CAP as usize),
        "tcpdump against the frames sent",
    );
    std::fs::copy(td.join("want.pcap"), py.dir.join("tcpdump.pcap")).expect("copy tcpdump's file");
    py.finish("python against tcpdump");
    d.stop();
}

/// `udp` frames of the testbed's mixed shapes (untagged), and how many
/// the grant and the filter `udp` let through.
fn udp_traffic(tb: &Testbed, n: u32) -> (Vec<Vec<u8>>, usize) {
    let sent = untagged_frames(tb, 0..n);
    let want = Oracle::new("", "udp").expect(&sent, CAP as usize).len();
    (sent, want)
}

#[test]
fn python_iterates_a_full_session_ring_and_keeps_up_at_the_top_rate() {
    if !can_run_python() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    // Big enough for every packet sent (about 60 bytes each with headers).
    let d = Daemon::for_nobody(&tb, "ring_size = \"128M\"\n");

    // 1. The ring fills while nobody reads; then the iterator empties it.
    let py = start_pytest(
        &tb,
        &d,
        "test_iterator_rate_out_of_a_full_session_buffer",
        "",
    );
    let (sent, want) = udp_traffic(&tb, 23 * 30_000);
    assert!(want >= 250_000, "{want} packets");
    tb.send_from_peer(&sent, 0).expect("send");
    std::thread::sleep(SETTLE);
    std::fs::write(py.dir.join("expected"), want.to_string()).expect("write expected");
    let dir = py.finish("iterator out of a full ring");
    let rate = std::fs::read_to_string(dir.join("rate")).expect("rate");
    eprintln!("python iterator out of a full session ring: {rate} (packets/s, packets, seconds)");

    // 2. Reading while the generator sends as fast as it can.
    let py = start_pytest(
        &tb,
        &d,
        "test_iterator_keeps_up_at_the_top_rate_with_headers",
        "",
    );
    let (sent, want) = udp_traffic(&tb, 23 * 20_000);
    tb.send_from_peer(&sent, 0).expect("send");
    std::thread::sleep(SETTLE);
    std::fs::write(py.dir.join("expected"), want.to_string()).expect("write expected");
    py.finish("iterator at the top rate");
    d.stop();
}

#[test]
fn python_as_nobody_injects_what_the_grant_allows_with_reports() {
    if !can_run_python() {
        return;
    }
    const N: u16 = 300;
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(&tb, &binding_inject_grant(&tb));
    let td = TempDir::new("py-inject-peer");
    let peer = td.join("peer.pcap");
    let mut tcpdump = start_peer_tcpdump(&tb, &peer, "udp").expect("tcpdump on the peer");
    let py = start_pytest_with(&tb, &d, "test_inject_with_reports", "", |dir| {
        binding_inject_frames(&tb, dir, N);
    });
    let dir = py.finish("python inject");
    std::thread::sleep(Duration::from_millis(500));
    tcpdump.terminate().expect("stop tcpdump");
    let reports: Vec<SeenReport> = std::fs::read_to_string(dir.join("reports"))
        .expect("the reports")
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, ' ').collect();
            assert_eq!(f.len(), 5, "report line {l:?}");
            SeenReport {
                tag: f[0].parse().expect("tag"),
                status: f[1].to_string(),
                requested_ns: f[2].parse().expect("requested_ns"),
                sent_ns: f[3].parse().expect("sent_ns"),
                reason: f[4].to_string(),
            }
        })
        .collect();
    check_binding_injection("python", N, &reports, &read(&peer));
    d.stop();
}
