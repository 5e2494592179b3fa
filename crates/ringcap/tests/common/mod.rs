//! Helpers shared by `capture_engine.rs` and `capture_errors.rs`: running the
//! `ringcap` binary inside a testbed's capture namespace, stopping it, reading
//! its JSON counters, and matching captured packets to the frames sent.
//!
//! Each test file uses a different subset of these, hence the `dead_code` allowance.
#![allow(dead_code)]

use ringcap_testkit::capture::{self, wait_for_stderr_line, CapturedPacket, ChildGuard, StderrLog};
use ringcap_testkit::frames;
use ringcap_testkit::Testbed;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// The ringcap binary cargo built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ringcap")
}

/// How long to wait after the last frame was sent before stopping a capture: the
/// ring hands a partly filled block over after a 50 ms retire timeout.
pub const SETTLE: Duration = Duration::from_millis(300);

/// Longest a ringcap process may take to exit after SIGINT or by itself.
pub const EXIT_LIMIT: Duration = Duration::from_secs(15);

pub use ringcap_testkit::TempDir;

/// A finished ringcap process.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stderr: String,
}

impl Finished {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics (with stderr) unless ringcap exited 0 and did not panic.
    pub fn assert_ok(&self, what: &str) {
        assert_no_panic(&self.stderr, what);
        assert_eq!(
            self.code(),
            Some(0),
            "{what}: ringcap exit status {:?}; stderr:\n{}",
            self.status,
            self.stderr
        );
    }

    /// The value of a line of the final report such as `  written   N`
    /// (the first line whose label is exactly `label`).
    pub fn report_value(&self, label: &str) -> Option<u64> {
        self.stderr.lines().find_map(|l| {
            let t = l.trim();
            let rest = t.strip_prefix(label)?;
            if !rest.starts_with("  ") {
                return None;
            }
            rest.trim().parse().ok()
        })
    }
}

impl Finished {
    /// Panics with a clear message if the final report shows packets dropped in
    /// the kernel ring or by the writer: the test's frames were sent at rates an
    /// 8 MiB ring must absorb, so a loss there is ringcap's, not the test's.
    pub fn assert_no_loss(&self, what: &str) {
        for label in ["dropped in the ring", "dropped by the writer"] {
            let n: u64 = self
                .stderr
                .lines()
                .filter_map(|l| {
                    let rest = l.trim().strip_prefix(label)?;
                    rest.starts_with("  ")
                        .then(|| rest.trim().parse::<u64>().ok())?
                })
                .sum();
            assert_eq!(
                n, 0,
                "{what}: ringcap reports packets {label}; report:\n{}",
                self.stderr
            );
        }
    }
}

pub fn assert_no_panic(stderr: &str, what: &str) {
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{what}: ringcap panicked; stderr:\n{stderr}"
    );
}

/// A ringcap capture running in a testbed's capture namespace.
pub struct Running {
    pub child: ChildGuard,
    pub log: StderrLog,
    /// The `capturing on ...` line.
    pub ready_line: String,
}

/// `ringcap capture -i CAPTURE_IF -B 8M ARGS...` in the capture namespace,
/// stdout discarded; waits for `capturing on `.
pub fn start(tb: &Testbed, args: &[&str]) -> Running {
    start_with(tb, &["-i", &tb.capture_if, "-B", "8M"], args, Stdio::null())
}

/// `ringcap capture BASE... ARGS...` in the capture namespace with the given stdout;
/// waits for `capturing on `.
pub fn start_with(tb: &Testbed, base: &[&str], args: &[&str], stdout: Stdio) -> Running {
    let mut cmd = tb.in_capture_ns(bin());
    cmd.arg("capture")
        .args(base)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn ringcap");
    let (ready_line, log) =
        match wait_for_stderr_line(&mut child, "capturing on ", Duration::from_secs(20)) {
            Ok(x) => x,
            Err(e) => panic!("ringcap {base:?} {args:?} did not start capturing: {e}"),
        };
    Running {
        child,
        log,
        ready_line,
    }
}

impl Running {
    /// Waits [`SETTLE`], sends SIGINT and waits for the exit.
    pub fn stop(mut self) -> Finished {
        std::thread::sleep(SETTLE);
        self.child.signal(libc::SIGINT).expect("SIGINT ringcap");
        self.wait(EXIT_LIMIT)
    }

    /// Waits up to `limit` for ringcap to exit by itself; panics if it does not.
    pub fn wait(mut self, limit: Duration) -> Finished {
        let status = match self.child.wait_timeout(limit).expect("wait ringcap") {
            Some(s) => s,
            None => {
                let _ = self.child.terminate();
                panic!(
                    "ringcap did not exit within {limit:?}; stderr:\n{}",
                    self.log.text()
                );
            }
        };
        let stderr = self.log.wait_eof(Duration::from_secs(5));
        Finished { status, stderr }
    }
}

/// Runs `cmd` (stdout/stderr captured) with a time limit; panics if it does not
/// finish. Returns (status, stdout, stderr).
pub fn run_limited(mut cmd: Command, limit: Duration) -> (ExitStatus, Vec<u8>, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let desc = format!("{cmd:?}");
    let child = ChildGuard::spawn(&mut cmd).unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    let out = child
        .wait_output(limit)
        .unwrap_or_else(|e| panic!("{desc}: {e}"));
    (
        out.status,
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `ringcap ARGS...` (no namespace: offline captures and option errors), with a
/// time limit.
pub fn ringcap(args: &[&str]) -> Finished {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    let (status, _, stderr) = run_limited(cmd, Duration::from_secs(60));
    Finished { status, stderr }
}

/// The capture file at `path`, parsed by the testkit's independent reader.
pub fn read(path: impl AsRef<Path>) -> Vec<CapturedPacket> {
    let path = path.as_ref();
    capture::read_pcap(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The sequence numbers of packets, in file order (`None` for untagged packets).
pub fn seqs(pkts: &[CapturedPacket]) -> Vec<Option<u32>> {
    pkts.iter().map(|p| frames::seq_of(&p.data)).collect()
}

/// The sequence numbers of packets, panicking on an untagged packet (something the
/// The sequence numbers tcpdump selects from `input` with `filter`, in order.
pub fn tcpdump_selects(input: &str, filter: &str) -> Vec<u32> {
    let mut cmd = std::process::Command::new("tcpdump");
    cmd.args(["-nn", "-r", input, "-w", "-"]);
    if !filter.is_empty() {
        cmd.arg(filter);
    }
    let (status, stdout, stderr) = run_limited(cmd, Duration::from_secs(30));
    assert!(status.success(), "tcpdump -r {input} {filter:?}: {stderr}");
    if stdout.is_empty() {
        return Vec::new();
    }
    let file = capture::parse_capture(&stdout).expect("tcpdump output");
    tagged_seqs(&file.packets, filter)
}

/// test did not send).
pub fn tagged_seqs(pkts: &[CapturedPacket], what: &str) -> Vec<u32> {
    pkts.iter()
        .enumerate()
        .map(|(i, p)| {
            frames::seq_of(&p.data).unwrap_or_else(|| {
                panic!(
                    "{what}: packet {i} ({} bytes) carries no sequence tag: {:02x?}",
                    p.data.len(),
                    &p.data[..p.data.len().min(64)]
                )
            })
        })
        .collect()
}

/// The JSON records of a `--stats-json` file.
pub fn json_records(path: impl AsRef<Path>) -> Vec<serde_json::Value> {
    let path = path.as_ref();
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: bad JSON line {l:?}: {e}", path.display()))
        })
        .collect()
}

/// The final record (`"final": true`), which must be the last one.
pub fn final_record(records: &[serde_json::Value]) -> &serde_json::Value {
    let last = records.last().expect("at least one JSON record");
    assert_eq!(
        last["final"],
        serde_json::Value::Bool(true),
        "last JSON record is not final: {last}"
    );
    assert_eq!(
        records.iter().filter(|r| r["final"] == true).count(),
        1,
        "exactly one final record"
    );
    last
}

pub const COUNTERS: [&str; 12] = [
    "packets_seen_by_interface",
    "packets_dropped_by_interface",
    "packets_filter_accepted",
    "packets_dropped_ring",
    "packets_sampled_out",
    "packets_delivered",
    "packets_after_count",
    "packets_written",
    "packets_dropped_writer",
    "packets_merged_by_offload",
    "bytes_on_wire",
    "bytes_written",
];

/// A counter of a JSON object (panics if missing or not a u64).
pub fn num(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("counter {key} missing or not a number in {v}"))
}

/// Checks the accounting identities on one set of counters (top level or one
/// interface). `exact`: the capture was quiet (final record), so
/// delivered = written + dropped_writer exactly; otherwise `<=`.
pub fn check_identities(c: &serde_json::Value, exact: bool, what: &str) {
    for k in COUNTERS {
        num(c, k);
    }
    let accepted = num(c, "packets_filter_accepted");
    let sampled = num(c, "packets_sampled_out");
    let ring = num(c, "packets_dropped_ring");
    let delivered = num(c, "packets_delivered");
    let after_count = num(c, "packets_after_count");
    let written = num(c, "packets_written");
    let dropped_writer = num(c, "packets_dropped_writer");
    assert_eq!(
        accepted,
        sampled + ring + delivered + after_count,
        "{what}: filter_accepted != sampled_out + dropped_ring + delivered + after_count in {c}"
    );
    if exact {
        assert_eq!(
            delivered,
            written + dropped_writer,
            "{what}: delivered != written + dropped_writer in {c}"
        );
    } else {
        assert!(
            written + dropped_writer <= delivered,
            "{what}: written + dropped_writer > delivered in {c}"
        );
    }
}

/// Checks that every interface's counters add up to the top-level totals
/// (bytes_written excepted: file headers count only in the total).
pub fn check_interface_sums(rec: &serde_json::Value, what: &str) {
    let ifaces = rec["interfaces"]
        .as_object()
        .unwrap_or_else(|| panic!("{what}: no interfaces map in {rec}"));
    for k in COUNTERS {
        if k == "bytes_written" {
            continue;
        }
        let sum: u64 = ifaces.values().map(|v| num(v, k)).sum();
        assert_eq!(
            sum,
            num(rec, k),
            "{what}: per-interface {k} do not sum to the total in {rec}"
        );
    }
}

/// Index of the frames sent, by sequence number.
pub fn by_seq(sent: &[Vec<u8>]) -> HashMap<u32, usize> {
    sent.iter()
        .enumerate()
        .map(|(i, f)| (frames::seq_of(f).expect("sent frames are tagged"), i))
        .collect()
}

/// True when `program` runs (`program --version`).
#[allow(unused_imports)] // not every test binary runs external programs
pub use ringcap_testkit::netns::have_program as have;

/// Stops several captures at once: one [`SETTLE`] wait, SIGINT to each, then waits
/// for each to exit.
pub fn stop_all(runs: Vec<Running>) -> Vec<Finished> {
    std::thread::sleep(SETTLE);
    let mut runs = runs;
    for r in &mut runs {
        r.child.signal(libc::SIGINT).expect("SIGINT ringcap");
    }
    runs.into_iter().map(|r| r.wait(EXIT_LIMIT)).collect()
}
