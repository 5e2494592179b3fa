//! libringcap (crates/capi) from C: the example program in
//! examples/c/ringcap_example.c, compiled here with the system C compiler
//! against the built libringcap.so, run as the unprivileged user `nobody`
//! against a real ringcapd over veth, receives exactly the packets tcpdump
//! (root, the combined filter, the capped snap length) captures: same
//! bytes, wire lengths and timestamps, and counters that say so; so does a
//! second copy that asks for a compressed stream (`options.compress`).

mod common;

use common::*;
use ringcap_testkit::capture::wait_for_stderr_line;
use ringcap_testkit::capture::{start_peer_tcpdump, ChildGuard};
use ringcap_testkit::{frames, TempDir, Testbed};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const FRAMEWORK: &str = "not port 20001";
const CAP: u32 = 128;

/// The directory holding libringcap.so (`target/<profile>`), built by
/// `cargo build` (scripts/test builds the workspace first); fails clearly if
/// it is missing or older than its sources (RINGCAP_ALLOW_STALE_BIN=1 skips
/// the age check).
pub fn libringcap_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf();
    let lib = dir.join("libringcap.so");
    let meta = std::fs::metadata(&lib).unwrap_or_else(|_| {
        panic!(
            "{} is missing: run `cargo build -p ringcap-capi` first",
            lib.display()
        )
    });
    if std::env::var_os("RINGCAP_ALLOW_STALE_BIN").is_some_and(|v| v == "1") {
        return dir;
    }
    let built = meta.modified().expect("mtime");
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for src in ["capi/src", "client/src", "proto/src", "shm/src"] {
        for e in std::fs::read_dir(crates.join(src))
            .expect("read sources")
            .flatten()
        {
            let t = e.metadata().and_then(|m| m.modified()).expect("mtime");
            assert!(
                t <= built,
                "{} is older than {}: run `cargo build -p ringcap-capi`",
                lib.display(),
                e.path().display()
            );
        }
    }
    dir
}

/// Compiles examples/c/NAME.c into `dir` with `cc`, linked to
/// libringcap.so (found through an rpath, as an installed copy would be
/// through ld.so.conf).
fn compile_example(dir: &TempDir, name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = libringcap_dir();
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(root.join("crates/capi/include"))
        .arg(root.join(format!("examples/c/{name}.c")))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lringcap")
        .output()
        .expect("run cc (scripts/setup installs gcc)");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Starts the C example as nobody (`-s 1000 -w DIR/NAME.pcap`, then
/// `extra`, then the filter) and waits until it captures.
fn start_example(
    tb: &Testbed,
    d: &Daemon,
    exe: &Path,
    out: &TempDir,
    name: &str,
    extra: &[&str],
    filter: &str,
) -> Client {
    let pcap = out.join(format!("{name}.pcap"));
    let mut cmd = as_user(tb, NOBODY, exe);
    cmd.arg("-S")
        .arg(&d.socket)
        .args(["-i", &tb.capture_if, "-s", "1000", "-w"])
        .arg(&pcap)
        .args(extra)
        .arg(filter)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn the C example");
    let (ready, log) = wait_for_stderr_line(
        &mut child,
        "ringcap_example: capturing: ",
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| panic!("the C example ({name}) did not start: {e}"));
    Client {
        child,
        log,
        ready,
        out: pcap,
        json: out.join("unused.json"),
    }
}

/// Two copies of the example, one asking for a compressed stream
/// (`options.compress`, `-z`), capture the same traffic: both files hold
/// exactly tcpdump's packets.
#[test]
fn the_c_example_as_nobody_receives_exactly_what_tcpdump_captures() {
    if !can_run() {
        return;
    }
    if !ringcap_testkit::netns::have_program("cc") {
        ringcap_testkit::skip("`cc` is not installed (scripts/setup installs gcc)");
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(
        &tb,
        &format!("capture_filter = \"{FRAMEWORK}\"\nmax_snaplen = {CAP}\n"),
    );
    let out = open_dir("capi-out");
    let exe = compile_example(&out, "ringcap_example");
    let td = TempDir::new("capi-tcpdump");
    let filter = "udp or icmp or arp";
    let plain = start_example(&tb, &d, &exe, &out, "c", &[], filter);
    let packed = start_example(&tb, &d, &exe, &out, "c-compressed", &["-z"], filter);
    for (c, compressed) in [(&plain, false), (&packed, true)] {
        assert!(
            c.ready.contains(&format!("snaplen {CAP}"))
                && c.ready.contains("grant 1,")
                && c.ready.contains("compressed stream") == compressed,
            "effective settings (compressed: {compressed}): {}",
            c.ready
        );
    }
    let tcpdump = start_tcpdump(
        &tb,
        &td.join("want.pcap"),
        CAP,
        &format!("({FRAMEWORK}) and ({filter})"),
    );
    let sent = frames::mixed_sequence(&tb.endpoints(), 23 * 4 * 50);
    tb.send_from_peer(&sent, 20_000).expect("send");
    std::thread::sleep(SETTLE);
    let finished = [
        ("the C example", plain.interrupt()),
        ("the C example (compressed)", packed.interrupt()),
    ];
    let want = tcpdump.stop();

    // The oracle saw what the grant allows (a check of the test itself).
    assert_packets(
        &want,
        &Oracle::new(FRAMEWORK, filter).expect(&sent, CAP as usize),
        "tcpdump against the frames sent",
    );
    assert!(want.len() > 1000, "{} packets", want.len());

    for (what, f) in &finished {
        f.assert_ok(what);
        let got = read(&f.out);
        assert_packets(
            &got,
            &want
                .iter()
                .map(|p| (p.wire_len, p.data.clone()))
                .collect::<Vec<_>>(),
            &format!("{what} against tcpdump"),
        );
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.ts_ns, w.ts_ns, "{what}: packet {i}'s timestamp");
        }
        // Its counters (from ringcap_stop) say the same.
        let n = want.len();
        assert!(
            f.stderr
                .contains(&format!(" dropped_client 0 delivered {n} "))
                && f.stderr.contains(&format!("wrote {n} packets")),
            "{what}'s report for {n} packets:\n{}",
            f.stderr
        );
    }
    // Both files are byte for byte the same (same header, same records).
    assert_eq!(
        std::fs::read(&finished[0].1.out).expect("the plain file"),
        std::fs::read(&finished[1].1.out).expect("the compressed session's file"),
        "the compressed session's file differs from the plain one"
    );
    d.stop();
}

#[test]
fn the_c_inject_example_as_nobody_sends_what_the_grant_allows_with_reports() {
    if !can_run() {
        return;
    }
    if !ringcap_testkit::netns::have_program("cc") {
        ringcap_testkit::skip("`cc` is not installed (scripts/setup installs gcc)");
        return;
    }
    const N: u16 = 300;
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(&tb, &binding_inject_grant(&tb));
    let out = open_dir("capi-inject");
    let exe = compile_example(&out, "ringcap_inject");
    let input = binding_inject_frames(&tb, out.path(), N);
    let peer = out.join("peer.pcap");
    let mut td = start_peer_tcpdump(&tb, &peer, "udp").expect("tcpdump on the peer");
    let mut cmd = as_user(&tb, NOBODY, &exe);
    cmd.arg("-S")
        .arg(&d.socket)
        .args(["-i", &tb.capture_if, "-d", "1000", "-r"])
        .arg(&input);
    let (status, stdout, stderr) = run_limited_out(&mut cmd, Duration::from_secs(60));
    assert!(status.success(), "ringcap_inject: {stderr}");
    std::thread::sleep(Duration::from_millis(500));
    td.terminate().expect("stop tcpdump");
    let reports: Vec<SeenReport> = stdout
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
    check_binding_injection("the C example", N, &reports, &read(&peer));
    d.stop();
}
