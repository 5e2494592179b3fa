//! Helpers shared by ringcapd's integration tests: a daemon started inside a
//! testbed's capture namespace with a policy written for the test, `ringcap
//! capture --daemon` clients run as the real unprivileged user `nobody`
//! (setpriv), tcpdump as the root oracle, an offline oracle computed from the
//! frames sent, and the accounting checks.
//!
//! Every process is wrapped in a [`ChildGuard`] (killed on drop, so a failing
//! assertion leaves nothing running) and started inside the testbed's
//! namespaces (which the [`Testbed`] deletes, killing what is left).
//!
//! Each test binary uses a different subset of these, hence the allowance.
#![allow(dead_code)]

use ringcap_stages::filter::Target;
use ringcap_testkit::capture::{
    wait_for_stderr_line, wait_for_stderr_match, ChildGuard, StderrLog,
};
use ringcap_testkit::netns::have_program;
use ringcap_testkit::{frames, netns_skip_reason, skip, CapturedPacket, TempDir, Testbed};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The unprivileged user (and its group) clients run as.
pub const NOBODY: (&str, &str) = ("nobody", "nogroup");
/// A second unprivileged system user, named by no grant in these tests.
pub const OTHER: (&str, &str) = ("daemon", "daemon");

/// How long after the last frame a capture is stopped: the kernel retires a
/// partly filled block after its timeout, the daemon ships a partial chunk
/// after 50 ms and the client flushes its file.
pub const SETTLE: Duration = Duration::from_millis(600);

/// The daemon cargo built for these tests.
pub fn ringcapd_bin() -> &'static str {
    env!("CARGO_BIN_EXE_ringcapd")
}

/// Newest modification time of the files under `dir` (recursively).
fn newest(dir: &Path) -> Option<SystemTime> {
    let mut best = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let t = if p.is_dir() {
            newest(&p)
        } else {
            e.metadata().ok().and_then(|m| m.modified().ok())
        };
        if t > best {
            best = t;
        }
    }
    best
}

/// The `ringcap` binary, next to this test executable
/// (`target/<profile>/deps/<test>` → `target/<profile>/ringcap`). Cargo only
/// builds it for the ringcap package's own tests, so `cargo build -p ringcap`
/// must run first: this fails clearly if it is missing or older than the
/// client sources it is built from (RINGCAP_ALLOW_STALE_BIN=1 skips that
/// check, for a tree that others are editing while the tests run).
pub fn ringcap_bin() -> PathBuf {
    built(
        "ringcap",
        &["client/src", "ringcap/src", "proto/src", "shm/src"],
        "cargo build -p ringcap",
    )
}

/// An example program of the client crate (`target/<profile>/examples/NAME`),
/// built by `cargo build -p ringcap-client --examples` (scripts/test does).
pub fn example_bin(name: &str) -> PathBuf {
    built(
        &format!("examples/{name}"),
        &["client/src", "client/examples", "proto/src", "shm/src"],
        "cargo build -p ringcap-client --examples",
    )
}

/// `target/<profile>/<rel>`, checked to exist and to be newer than the
/// sources under `crates/<srcs>`; `build` says how to make it.
fn built(rel: &str, srcs: &[&str], build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join(rel))
        .expect("the test executable is in target/<profile>/deps");
    let Ok(meta) = std::fs::metadata(&bin) else {
        panic!(
            "{} is missing: run `{build}` before `cargo test -p ringcap-daemon`",
            bin.display()
        );
    };
    if std::env::var_os("RINGCAP_ALLOW_STALE_BIN").is_some_and(|v| v == "1") {
        return bin;
    }
    let made = meta.modified().expect("mtime of a built program");
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for src in srcs {
        if let Some(t) = newest(&crates.join(src)) {
            assert!(
                t <= made,
                "{} is older than crates/{src}: run `{build}` before `cargo test -p ringcap-daemon`",
                bin.display()
            );
        }
    }
    bin
}

/// True when these tests can run here (root, network namespaces, the tools,
/// the users); otherwise skips (or fails under RINGCAP_REQUIRE_PRIVILEGED_TESTS).
pub fn can_run() -> bool {
    if let Some(reason) = netns_skip_reason() {
        skip(reason);
        return false;
    }
    for prog in ["tcpdump", "tcpreplay", "setpriv", "ethtool"] {
        if !have_program(prog) {
            skip(format!("`{prog}` is not installed"));
            return false;
        }
    }
    for (user, _) in [NOBODY, OTHER] {
        if nix::unistd::User::from_name(user).ok().flatten().is_none() {
            skip(format!("there is no user `{user}` here"));
            return false;
        }
    }
    // Fails clearly now rather than in the middle of a test.
    ringcap_bin();
    true
}

/// A directory every user may write (clients run as nobody write there).
pub fn open_dir(tag: &str) -> TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = TempDir::new(tag);
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod 0777");
    d
}

// ---------------------------------------------------------------------------
// The daemon

/// ringcapd running in a testbed's capture namespace.
pub struct Daemon {
    /// The process (SIGTERM, then SIGKILL, on drop).
    pub child: ChildGuard,
    /// Its stderr (audit lines, reload messages).
    pub log: StderrLog,
    /// Holds the policy file and the socket.
    pub dir: TempDir,
    /// The control socket.
    pub socket: PathBuf,
    /// The policy file.
    pub config: PathBuf,
}

/// The top of a policy file for `dir`: its socket and dump directory.
pub fn policy_head(dir: &Path) -> String {
    format!(
        "socket = \"{}\"\ndump_dir = \"{}\"\n",
        dir.join("ringcapd.sock").display(),
        dir.join("dumps").display()
    )
}

impl Daemon {
    /// Writes a policy of `grants` (TOML `[[grant]]` tables) and starts
    /// `ringcapd --config FILE` as root in the capture namespace; waits until
    /// it listens.
    pub fn start(tb: &Testbed, grants: &str) -> Daemon {
        Daemon::start_with(tb, grants, &[])
    }

    /// A daemon whose one grant lets `nobody` capture on the testbed's
    /// capture interface, with `extra` grant keys (TOML lines).
    pub fn for_nobody(tb: &Testbed, extra: &str) -> Daemon {
        Daemon::start(
            tb,
            &format!(
                "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\n{extra}",
                tb.capture_if
            ),
        )
    }

    /// [`Daemon::start`] with more command-line arguments.
    pub fn start_with(tb: &Testbed, grants: &str, args: &[&str]) -> Daemon {
        let dir = TempDir::new("ringcapd");
        let config = dir.join("policy.toml");
        std::fs::write(&config, format!("{}{grants}", policy_head(dir.path())))
            .expect("write the policy");
        let mut cmd = tb.in_capture_ns(ringcapd_bin());
        cmd.arg("--config")
            .arg(&config)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = ChildGuard::spawn(&mut cmd).expect("spawn ringcapd");
        let (_, log) = wait_for_stderr_line(
            &mut child,
            "ringcapd: listening on",
            Duration::from_secs(20),
        )
        .unwrap_or_else(|e| panic!("ringcapd did not start: {e}"));
        Daemon {
            child,
            log,
            socket: dir.join("ringcapd.sock"),
            config,
            dir,
        }
    }

    /// `--daemon=SOCKET`.
    pub fn arg(&self) -> String {
        format!("--daemon={}", self.socket.display())
    }

    /// Replaces the policy file with `text` (whole file, head included),
    /// sends SIGHUP and waits for the daemon to say what it made of it:
    /// true if it reloaded, false if it kept the old policy.
    pub fn reload_raw(&mut self, text: &str) -> bool {
        let count = |t: &str| t.matches("ringcapd: policy ").count();
        let before = count(&self.log.text());
        std::fs::write(&self.config, text).expect("write the policy");
        self.child.signal(libc::SIGHUP).expect("SIGHUP ringcapd");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.log.text();
            if count(&text) > before {
                let last = text
                    .lines()
                    .rfind(|l| l.contains("ringcapd: policy "))
                    .unwrap_or_default()
                    .to_string();
                return last.contains("policy reloaded");
            }
            assert!(
                Instant::now() < deadline,
                "ringcapd said nothing within 10 s of SIGHUP; log:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`Daemon::reload_raw`] with the usual head and `grants`.
    pub fn reload(&mut self, grants: &str) -> bool {
        let text = format!("{}{grants}", policy_head(self.dir.path()));
        self.reload_raw(&text)
    }

    /// Panics (with the log) unless the daemon is still running.
    pub fn assert_running(&mut self, what: &str) {
        if let Some(s) = self.child.try_wait().expect("try_wait ringcapd") {
            panic!(
                "{what}: ringcapd exited ({s}); log:\n{}",
                self.log.wait_eof(Duration::from_secs(2))
            );
        }
        assert_no_panic(&self.log.text(), "ringcapd");
    }

    /// SIGTERM and waits; panics unless it exits 0 without a panic. Returns its log.
    pub fn stop(mut self) -> String {
        self.assert_running("before stopping");
        self.child.signal(libc::SIGTERM).expect("SIGTERM ringcapd");
        let status = self
            .child
            .wait_timeout(Duration::from_secs(15))
            .expect("wait ringcapd");
        let log = self.log.wait_eof(Duration::from_secs(5));
        assert_no_panic(&log, "ringcapd");
        match status {
            Some(s) => assert!(s.success(), "ringcapd exited {s}; log:\n{log}"),
            None => panic!("ringcapd did not stop within 15 s of SIGTERM; log:\n{log}"),
        }
        log
    }
}

/// `ringcap stats --daemon=SOCKET --json` as `user` (root when None): one
/// JSON object per session.
pub fn stats_json(tb: &Testbed, d: &Daemon, user: Option<(&str, &str)>) -> Vec<serde_json::Value> {
    let mut cmd = match user {
        Some(u) => as_user(tb, u, &ringcap_bin()),
        None => tb.in_capture_ns(ringcap_bin().to_str().expect("utf-8 path")),
    };
    cmd.args(["stats", &d.arg(), "--json"]);
    let (status, stdout, stderr) = run_limited_out(&mut cmd, Duration::from_secs(20));
    assert!(status.success(), "ringcap stats: {status}: {stderr}");
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// Waits (up to `limit`) until the daemon's sessions have accepted `n`
/// packets in all, then [`SETTLE`] more: on a loaded machine a fixed pause
/// after sending is not enough for the daemon to have seen the traffic.
pub fn wait_accepted(tb: &Testbed, d: &Daemon, n: u64, limit: Duration) {
    let t0 = std::time::Instant::now();
    loop {
        let accepted: u64 = stats_json(tb, d, None)
            .iter()
            .map(|s| {
                s["counters"]["packets_filter_accepted"]
                    .as_u64()
                    .unwrap_or(0)
            })
            .sum();
        if accepted >= n || t0.elapsed() >= limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(SETTLE);
}

/// A session's counters and its ring's, read again until they account
/// for all `sent` packets (10 s at most): the hub publishes its counts every
/// 100 ms of its own time and, on a loaded machine, may still be writing
/// and dropping after a test's settle time. The caller asserts on them.
pub fn whole_counters(
    session: &mut ringcap_client::Session,
    sent: u64,
) -> (ringcap_client::SessionCounters, ringcap_shm::RingCounters) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ring = session.ring_counters();
        let s = session.stats().expect("stats");
        let whole = ring.packets_written + ring.packets_dropped >= sent
            && s.packets_filter_accepted >= sent
            && s.packets_filter_accepted >= s.packets_delivered + s.packets_dropped_client;
        if whole || Instant::now() >= deadline {
            return (s, ring);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn assert_no_panic(log: &str, what: &str) {
    assert!(
        !log.contains("panicked") && !log.contains("RUST_BACKTRACE"),
        "{what} panicked; log:\n{log}"
    );
}

// ---------------------------------------------------------------------------
// Clients: `ringcap capture --daemon` as an unprivileged user

/// `ip netns exec CAPTURE_NS setpriv --reuid USER --regid GROUP --clear-groups
/// --inh-caps=-all PROGRAM`: a real unprivileged process, no capabilities.
pub fn as_user(tb: &Testbed, user: (&str, &str), program: &Path) -> Command {
    let mut c = tb.in_capture_ns("setpriv");
    c.args([
        "--reuid",
        user.0,
        "--regid",
        user.1,
        "--clear-groups",
        "--inh-caps=-all",
    ])
    .arg(program);
    c
}

/// Runs `cmd` (an example client: stdout piped) to its end, within `limit`;
/// its one JSON line, once it exited 0.
pub fn json_answer(cmd: &mut Command, limit: Duration) -> serde_json::Value {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = ChildGuard::spawn(cmd)
        .expect("spawn the client")
        .wait_output(limit)
        .expect("the client ends");
    json_of(&out)
}

/// The one JSON line an example client printed, once it exited 0.
pub fn json_of(out: &std::process::Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}: {text} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// Like [`as_user`] but with exactly the supplementary groups `groups`
/// (numeric gids, comma-separated) instead of none.
pub fn as_user_in_groups(
    tb: &Testbed,
    user: (&str, &str),
    groups: &str,
    program: &Path,
) -> Command {
    let mut c = tb.in_capture_ns("setpriv");
    c.args([
        "--reuid",
        user.0,
        "--regid",
        user.1,
        "--groups",
        groups,
        "--inh-caps=-all",
    ])
    .arg(program);
    c
}

/// `ringcap capture --daemon=SOCKET ARGS...` as `user`.
pub fn capture_cmd(tb: &Testbed, d: &Daemon, user: (&str, &str), args: &[&str]) -> Command {
    let mut c = as_user(tb, user, &ringcap_bin());
    c.arg("capture").arg(d.arg()).args(args);
    c
}

/// A running `ringcap capture --daemon` client.
pub struct Client {
    pub child: ChildGuard,
    pub log: StderrLog,
    /// Its `capturing on ... through ringcapd (...)` line.
    pub ready: String,
    /// Its output file.
    pub out: PathBuf,
    /// Its --stats-json file.
    pub json: PathBuf,
}

/// A client that has exited.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stderr: String,
    pub out: PathBuf,
    pub json: PathBuf,
}

/// Starts `ringcap capture --daemon=SOCKET -i CAPTURE_IF -w DIR/NAME.pcap
/// --stats-json DIR/NAME.json ARGS...` as `user` and waits until it captures.
pub fn start_client(
    tb: &Testbed,
    d: &Daemon,
    user: (&str, &str),
    dir: &TempDir,
    name: &str,
    args: &[&str],
) -> Client {
    let out = dir.join(format!("{name}.pcap"));
    let json = dir.join(format!("{name}.json"));
    let (o, j) = (out.to_string_lossy(), json.to_string_lossy());
    let mut base = vec!["-i", tb.capture_if.as_str(), "-w", &o, "--stats-json", &j];
    base.extend_from_slice(args);
    let mut cmd = capture_cmd(tb, d, user, &base);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn ringcap");
    let (ready, log) =
        match wait_for_stderr_line(&mut child, "capturing on ", Duration::from_secs(20)) {
            Ok(x) => x,
            Err(e) => panic!("client {name} ({args:?}) did not start capturing: {e}"),
        };
    Client {
        child,
        log,
        ready,
        out,
        json,
    }
}

impl Client {
    /// SIGINT now (no settle time) and waits for the exit.
    pub fn interrupt(mut self) -> Finished {
        self.child.signal(libc::SIGINT).expect("SIGINT ringcap");
        self.wait(Duration::from_secs(20))
    }

    /// Waits [`SETTLE`], then [`Client::interrupt`].
    pub fn stop(self) -> Finished {
        std::thread::sleep(SETTLE);
        self.interrupt()
    }

    /// Waits up to `limit` for the client to exit by itself.
    pub fn wait(mut self, limit: Duration) -> Finished {
        let status = match self.child.wait_timeout(limit).expect("wait ringcap") {
            Some(s) => s,
            None => {
                let _ = self.child.terminate();
                panic!(
                    "client did not exit within {limit:?}; stderr:\n{}",
                    self.log.text()
                );
            }
        };
        let stderr = self.log.wait_eof(Duration::from_secs(5));
        Finished {
            status,
            stderr,
            out: self.out,
            json: self.json,
        }
    }
}

impl Finished {
    /// Panics unless the client exited 0 without a panic.
    pub fn assert_ok(&self, what: &str) {
        assert_no_panic(&self.stderr, what);
        assert_eq!(
            self.status.code(),
            Some(0),
            "{what}: exit status {}; stderr:\n{}",
            self.status,
            self.stderr
        );
    }

    /// The packets it wrote.
    pub fn packets(&self) -> Vec<CapturedPacket> {
        read(&self.out)
    }

    /// Its final --stats-json record, with the accounting identities checked.
    pub fn final_counters(&self, what: &str) -> serde_json::Value {
        let rec = final_record(&self.json);
        check_identities(&rec, what);
        rec
    }
}

/// Runs `ringcap capture --daemon=SOCKET ARGS...` as `user` to its end
/// (for refusals); returns the exit status and stderr.
pub fn run_capture(
    tb: &Testbed,
    d: &Daemon,
    user: (&str, &str),
    args: &[&str],
) -> (ExitStatus, String) {
    let mut cmd = capture_cmd(tb, d, user, args);
    run_limited(&mut cmd, Duration::from_secs(30))
}

/// Runs `cmd` (stdin closed, output collected) with a time limit.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> (ExitStatus, String) {
    let (status, _, stderr) = run_limited_out(cmd, limit);
    (status, stderr)
}

/// [`run_limited`], also returning stdout.
pub fn run_limited_out(cmd: &mut Command, limit: Duration) -> (ExitStatus, String, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let desc = format!("{cmd:?}");
    let child = ChildGuard::spawn(cmd).unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    let out = child
        .wait_output(limit)
        .unwrap_or_else(|e| panic!("{desc}: {e}"));
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------
// tcpdump, run as root: the oracle

/// A running tcpdump.
pub struct Tcpdump {
    pub child: ChildGuard,
    pub log: StderrLog,
    pub out: PathBuf,
}

/// `tcpdump -i CAPTURE_IF -s SNAPLEN --time-stamp-precision=nano -w OUT
/// --immediate-mode -U -Z root -nn FILTER` as root in the capture namespace;
/// waits until it listens.
pub fn start_tcpdump(tb: &Testbed, out: &Path, snaplen: u32, filter: &str) -> Tcpdump {
    let mut cmd = tb.in_capture_ns("tcpdump");
    cmd.args(["-i", &tb.capture_if, "-s", &snaplen.to_string()])
        .args(["--time-stamp-precision=nano", "--immediate-mode", "-U"])
        .args(["-Z", "root", "-nn", "-w"])
        .arg(out)
        .arg(filter)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn tcpdump");
    let (_, log) = wait_for_stderr_match(
        &mut child,
        |l| l.contains("listening on"),
        Duration::from_secs(10),
    )
    .unwrap_or_else(|e| panic!("tcpdump did not start: {e}"));
    Tcpdump {
        child,
        log,
        out: out.to_path_buf(),
    }
}

impl Tcpdump {
    /// SIGTERM (tcpdump writes out and exits), then its packets.
    pub fn stop(mut self) -> Vec<CapturedPacket> {
        let _ = self.child.terminate();
        let log = self.log.wait_eof(Duration::from_secs(5));
        assert!(
            log.lines()
                .any(|l| l.trim() == "0 packets dropped by kernel"),
            "tcpdump (the oracle) lost packets or did not say: {log}"
        );
        read(&self.out)
    }
}

// ---------------------------------------------------------------------------
// Files and counters

/// The packets of a capture file (the testkit's independent reader).
pub fn read(path: &Path) -> Vec<CapturedPacket> {
    ringcap_testkit::read_pcap(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The final record of a --stats-json file (it must be the last, and the only final one).
pub fn final_record(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let recs: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect();
    let last = recs
        .last()
        .unwrap_or_else(|| panic!("{}: no JSON record", path.display()))
        .clone();
    assert_eq!(last["final"], true, "last record is not final: {last}");
    assert_eq!(
        recs.iter().filter(|r| r["final"] == true).count(),
        1,
        "exactly one final record in {}",
        path.display()
    );
    last
}

/// A counter of a JSON record (panics if it is missing).
pub fn num(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("counter {key} missing or not a number in {v}"))
}

/// The daemon client's accounting: every accepted packet is sampled out,
/// dropped (kernel ring, client ring), rate-limited or delivered, and every
/// delivered packet is written (the capture is over: nothing in flight).
pub fn check_identities(c: &serde_json::Value, what: &str) {
    let accepted = num(c, "packets_filter_accepted");
    let parts = [
        "packets_sampled_out",
        "packets_dropped_ring",
        "packets_rate_limited",
        "packets_dropped_client",
        "packets_delivered",
    ];
    let sum: u64 = parts.iter().map(|k| num(c, k)).sum();
    assert_eq!(
        accepted, sum,
        "{what}: accepted != sampled_out + dropped_ring + rate_limited + dropped_client + delivered in {c}"
    );
    assert_eq!(
        num(c, "packets_written") + num(c, "packets_after_count"),
        num(c, "packets_delivered"),
        "{what}: written (+ after count) != delivered in {c}"
    );
}

// ---------------------------------------------------------------------------
// The offline oracle

/// The frame as the kernel's filter sees it: the receive path takes the
/// outer VLAN tag (802.1Q or 802.1ad) out of the bytes before AF_PACKET.
pub fn kernel_view(frame: &[u8]) -> Vec<u8> {
    if frame.len() >= 18 {
        let et = u16::from_be_bytes([frame[12], frame[13]]);
        if et == 0x8100 || et == 0x88a8 {
            let mut v = frame[..12].to_vec();
            v.extend_from_slice(&frame[16..]);
            return v;
        }
    }
    frame.to_vec()
}

/// A filter compiled with libpcap for frames as the kernel sees them (no
/// VLAN keyword may be used: a live handle would compile those differently).
pub struct Oracle {
    program: ringcap_stages::Program,
}

impl Oracle {
    /// `(framework) and (client)`, both compiled alone and ANDed.
    pub fn new(framework: &str, client: &str) -> Oracle {
        for f in [framework, client] {
            assert!(
                !f.split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|w| w == "vlan"),
                "the offline oracle does not do VLAN filters: {f}"
            );
        }
        let c = |e: &str| {
            ringcap_stages::compile(e, 1, 262_144, Target::Offline)
                .unwrap_or_else(|e| panic!("oracle filter: {e}"))
        };
        let program = ringcap_stages::Program::and(&c(framework), &c(client))
            .unwrap_or_else(|e| panic!("oracle AND: {e}"));
        Oracle { program }
    }

    /// True if the kernel would accept `frame`.
    pub fn accepts(&self, frame: &[u8]) -> bool {
        let v = kernel_view(frame);
        self.program.run(&v, v.len() as u32) > 0
    }

    /// What a client with this filter and a `snap`-byte snap length must
    /// receive of `sent`, in order: (wire length, bytes).
    pub fn expect(&self, sent: &[Vec<u8>], snap: usize) -> Vec<(u32, Vec<u8>)> {
        sent.iter()
            .filter(|f| self.accepts(f))
            .map(|f| (f.len() as u32, f[..f.len().min(snap)].to_vec()))
            .collect()
    }
}

/// Panics with the first difference unless `got` is exactly `want` (wire
/// lengths and bytes, in order).
pub fn assert_packets(got: &[CapturedPacket], want: &[(u32, Vec<u8>)], what: &str) {
    for (i, (g, (wl, data))) in got.iter().zip(want).enumerate() {
        assert!(
            g.wire_len == *wl && g.data == *data,
            "{what}: packet {i} differs: got seq {:?} ({:?}), wire_len {}, {} bytes; want seq {:?} ({:?}), wire_len {wl}, {} bytes\n got {:02x?}\nwant {:02x?}",
            frames::seq_of(&g.data),
            frames::seq_of(&g.data).map(frames::mixed_shape),
            g.wire_len,
            g.data.len(),
            frames::seq_of(data),
            frames::seq_of(data).map(frames::mixed_shape),
            data.len(),
            &g.data[..g.data.len().min(48)],
            &data[..data.len().min(48)]
        );
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} packets, {} expected (missing or extra from index {})",
        got.len(),
        want.len(),
        got.len().min(want.len())
    );
}

// ---------------------------------------------------------------------------
// Traffic

/// The testkit's mixed frames with sequence numbers `seqs`, leaving out the
/// VLAN-tagged shapes: tests other than the tcpdump oracle test check
/// enforcement and robustness, and keep the question of how filters see
/// VLAN tags (which the oracle test pins to tcpdump's answer) out of them.
pub fn untagged_frames(tb: &Testbed, seqs: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    let ep = tb.endpoints();
    seqs.filter(|&s| !frames::mixed_shape(s).is_vlan_tagged())
        .map(|s| frames::build(frames::mixed_shape(s), &ep, s, frames::mixed_flow(s)))
        .collect()
}

/// Sequence numbers of packets (None for a packet the test did not send).
pub fn seqs(pkts: &[CapturedPacket]) -> Vec<Option<u32>> {
    pkts.iter().map(|p| frames::seq_of(&p.data)).collect()
}

// ---------------------------------------------------------------------------
// Injection through the bindings (C, Python): one workload, one check

/// The inject grant the bindings' tests run under.
pub fn binding_inject_grant(tb: &Testbed) -> String {
    format!(
        "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\n[grant.inject]\n\
         filter = \"udp dst portrange 33434-33534\"\nsettable = [\"ip.id\", \"udp.dport\"]\n\
         max_packets_per_second = 1000\nburst = 50\n",
        tb.capture_if
    )
}

/// Frames to the peer, 2 ms apart in a pcap readable by nobody: frame i has
/// IP ID i and goes to UDP port 33434 + i % 100, except every tenth, to
/// port 40000, which the grant refuses.
pub fn binding_inject_frames(tb: &Testbed, dir: &Path, n: u16) -> PathBuf {
    let ep =
        frames::Endpoints::new(tb.capture_mac, tb.peer_mac).with_ipv4(tb.capture_ip, tb.peer_ip);
    let sent: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let dport = if i % 10 == 9 { 40000 } else { 33434 + i % 100 };
            // udp4 puts the sequence number in the IP ID.
            frames::udp4(&ep, u32::from(i), 45000, dport, 32)
        })
        .collect();
    let path = dir.join("inject.pcap");
    ringcap_testkit::netns::write_pcap_spaced(&path, &sent, 2_000_000).expect("write frames");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    path
}

/// One transmit report as a binding printed it.
#[derive(Debug, Clone)]
pub struct SeenReport {
    pub tag: u64,
    pub status: String,
    pub requested_ns: u64,
    pub sent_ns: u64,
    pub reason: String,
}

/// Reports for the frames of [`binding_inject_frames`] and what the peer
/// captured: one report per frame; the port-40000 frames refused by the
/// filter rule and absent on the peer; every other frame sent, not early,
/// seen on the peer (by its IP ID) within 20 ms of its transmit timestamp.
pub fn check_binding_injection(
    what: &str,
    n: u16,
    reports: &[SeenReport],
    peer: &[CapturedPacket],
) {
    assert_eq!(reports.len(), n as usize, "{what}: one report per frame");
    let mut seen = std::collections::HashSet::new();
    let arrived: std::collections::HashMap<u16, u64> = peer
        .iter()
        .filter(|p| p.data.len() >= 42 && p.data[23] == 17)
        .map(|p| (u16::from_be_bytes([p.data[18], p.data[19]]), p.ts_ns))
        .collect();
    let mut sent = 0;
    for r in reports {
        assert!(
            r.tag < u64::from(n) && seen.insert(r.tag),
            "{what}: tag {}",
            r.tag
        );
        let i = r.tag as u16;
        if i % 10 == 9 {
            assert_eq!(r.status, "refused", "{what}: frame {i}: {r:?}");
            assert!(r.reason.starts_with("filter"), "{what}: frame {i}: {r:?}");
            assert!(
                !arrived.contains_key(&i),
                "{what}: refused frame {i} arrived"
            );
            continue;
        }
        assert_eq!(r.status, "sent", "{what}: frame {i}: {r:?}");
        assert!(r.sent_ns >= r.requested_ns, "{what}: frame {i} sent early");
        let rx = arrived
            .get(&i)
            .unwrap_or_else(|| panic!("{what}: frame {i} never arrived"));
        let d = *rx as i64 - r.sent_ns as i64;
        assert!(
            d.abs() <= 20_000_000,
            "{what}: frame {i}: received {d} ns from its report"
        );
        sent += 1;
    }
    assert_eq!(
        arrived.len(),
        sent,
        "{what}: the peer received other frames"
    );
}

/// Nanoseconds since the epoch now.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// `ns` as seconds since the epoch with 9 decimals (`--after`/`--before`).
pub fn secs(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// `ringcap query --daemon -i IF ARGS… FILTER` as nobody: success, stderr
/// and the answer's bytes.
pub fn retrieve_as_nobody(
    tb: &Testbed,
    d: &Daemon,
    iface: &str,
    args: &[&str],
    filter: &str,
) -> (bool, String, Vec<u8>) {
    let out = open_dir("retrieve-out");
    let file = out.join("answer.pcap");
    let mut cmd = as_user(tb, NOBODY, &ringcap_bin());
    cmd.args(["query", &d.arg(), "-i", iface])
        .args(args)
        .arg("-w")
        .arg(&file)
        .arg(filter);
    let (st, _, err) = run_limited_out(&mut cmd, Duration::from_secs(60));
    let bytes = std::fs::read(&file).unwrap_or_default();
    (st.success(), err, bytes)
}
