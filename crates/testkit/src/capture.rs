//! Running capture processes and checking what they wrote.
//!
//! * [`read_pcap`]: a small pcap / pcapng reader written independently of
//!   `ringcap-format`, so tests do not trust ringcap's own reader.
//! * [`tcpdump_count`], [`tcpdump_filter_ok`]: tcpdump as an oracle for filters.
//! * [`ringcap_bin`]: where the `ringcap` binary is.
//! * [`ChildGuard`]: kills a child on drop (SIGTERM, then SIGKILL after a timeout).
//! * [`wait_for_stderr_line`]: waits for a "ready" line on a child's stderr and keeps
//!   collecting the rest in the background ([`StderrLog`]).
//! * [`start_tcpdump`]: tcpdump writing a file on a testbed's capture end.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

pub use crate::child::{ChildGuard, DEFAULT_TERM_TIMEOUT};
use crate::netns::{TempFile, Testbed};

mod read;
mod stderr;

pub use read::{
    parse_capture, read_capture, read_pcap, CaptureFile, CaptureFormat, CapturedPacket,
};
pub use stderr::{wait_for_stderr_line, wait_for_stderr_match, StderrLog};

// ---------------------------------------------------------------------------
// tcpdump as an oracle

/// Number of packets of the capture file `path` that match the pcap `filter`
/// according to tcpdump (`tcpdump -nn -r PATH -w - FILTER`, records counted with
/// [`parse_capture`], so multi-line decodes cannot skew the count). An empty filter
/// counts everything. Errors if tcpdump fails (e.g. the filter does not compile).
pub fn tcpdump_count(path: impl AsRef<Path>, filter: &str) -> io::Result<u64> {
    let path = path.as_ref();
    let mut cmd = std::process::Command::new("tcpdump");
    cmd.args(["-nn", "-r"]).arg(path).args(["-w", "-"]);
    if !filter.trim().is_empty() {
        cmd.arg(filter);
    }
    let out = crate::netns::output_with_timeout(cmd, Duration::from_secs(120))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "tcpdump -r {} {filter:?} failed ({}): {}",
            path.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    if out.stdout.is_empty() {
        return Ok(0);
    }
    Ok(parse_capture(&out.stdout)?.packets.len() as u64)
}

/// A packet as a test compares it: (timestamp in ns, wire length, bytes).
pub type Rec = (u64, u32, Vec<u8>);

/// The records of a pcap/pcapng stream. Panics on a stream that is not
/// whole (a test's oracle output).
pub fn records(bytes: &[u8]) -> Vec<Rec> {
    let mut rd = ringcap_format::Reader::new(bytes).expect("a capture stream");
    let mut v = Vec::new();
    while let Some(p) = rd.next_packet().expect("whole records") {
        v.push((p.ts_ns, p.wire_len, p.data.to_vec()));
    }
    v
}

/// Root's `tcpdump -r FILE -w - FILTER` of each file in turn, with
/// nanosecond timestamps, the records concatenated (not `-V`: tcpdump 4.99
/// leaves the timestamps of a later microsecond file unconverted in a
/// nanosecond output). Errors if tcpdump cannot run or fails on a file.
pub fn tcpdump_read(files: &[PathBuf], filter: &str) -> io::Result<Vec<Rec>> {
    let mut all = Vec::new();
    for f in files {
        let out = std::process::Command::new("tcpdump")
            .args(["--time-stamp-precision=nano", "-r"])
            .arg(f)
            .args(["-w", "-", filter])
            .stderr(std::process::Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "tcpdump -r {} '{filter}' failed ({})",
                f.display(),
                out.status
            )));
        }
        all.extend(records(&out.stdout));
    }
    Ok(all)
}

/// True when tcpdump compiles `expr` for Ethernet (runs it over an empty file).
pub fn tcpdump_filter_ok(expr: &str) -> bool {
    let Ok(tmp) = TempFile::new("empty", "pcap") else {
        return false;
    };
    if crate::netns::write_pcap(tmp.path(), &[]).is_err() {
        return false;
    }
    tcpdump_count(tmp.path(), expr).is_ok()
}

// ---------------------------------------------------------------------------
// The ringcap binary

/// Where the `ringcap` binary is, or `None` if it has not been built. Looks, in
/// order, at: the env var `RINGCAP_BIN`; the env var `CARGO_BIN_EXE_ringcap`
/// (cargo sets it when compiling the `ringcap` crate's own integration tests — use
/// `env!("CARGO_BIN_EXE_ringcap")` there); the directory of the running test
/// executable (`target/<profile>/deps/..` → `target/<profile>/ringcap`, which
/// follows `CARGO_TARGET_DIR`); `$CARGO_TARGET_DIR/{debug,release}/ringcap`; and
/// `target/{debug,release}/ringcap` of the workspace
/// (`CARGO_MANIFEST_DIR/../../target`).
pub fn find_ringcap_bin() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    for var in ["RINGCAP_BIN", "CARGO_BIN_EXE_ringcap"] {
        if let Some(p) = std::env::var_os(var) {
            candidates.push(PathBuf::from(p));
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        // target/<profile>/deps/test-xxxx → target/<profile>/ringcap
        for dir in exe.ancestors().skip(1).take(2) {
            candidates.push(dir.join("ringcap"));
        }
    }
    let mut roots = Vec::new();
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        roots.push(PathBuf::from(t));
    }
    roots.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    for r in roots {
        for profile in ["debug", "release"] {
            candidates.push(r.join(profile).join("ringcap"));
        }
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// [`find_ringcap_bin`], or `explicit` when given. Panics with instructions when the
/// binary cannot be found (build it with `cargo build -p ringcap`, or set
/// `RINGCAP_BIN`).
pub fn ringcap_bin_or(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    find_ringcap_bin().unwrap_or_else(|| {
        panic!(
            "ringcap binary not found: build it (`cargo build -p ringcap`) or set RINGCAP_BIN; \
             inside the ringcap crate's tests use env!(\"CARGO_BIN_EXE_ringcap\")"
        )
    })
}

/// The `ringcap` binary ([`find_ringcap_bin`]); panics if it is not built.
pub fn ringcap_bin() -> PathBuf {
    ringcap_bin_or(None)
}

/// A running tcpdump started by [`start_tcpdump`].
#[derive(Debug)]
pub struct Tcpdump {
    /// The tcpdump process (terminated on drop).
    pub child: ChildGuard,
    /// Its stderr.
    pub stderr: StderrLog,
}

impl Tcpdump {
    /// Waits up to `limit` for tcpdump to exit by itself (it does after `-c COUNT`
    /// packets), else SIGTERMs it so it flushes its file; returns its exit status.
    pub fn finish(mut self, limit: Duration) -> io::Result<ExitStatus> {
        if let Some(s) = self.child.wait_timeout(limit)? {
            return Ok(s);
        }
        self.child.terminate()
    }
}

/// Starts `tcpdump -i CAPTURE_IF -w OUT --immediate-mode -Z root -U [-c COUNT]
/// [FILTER]` in the capture namespace of `tb` and waits (up to 10 s) until it prints
/// `listening on`, so that every frame sent afterwards is captured.
pub fn start_tcpdump(
    tb: &Testbed,
    out: &Path,
    count: Option<u64>,
    filter: &str,
) -> io::Result<Tcpdump> {
    let mut cmd = tb.in_capture_ns("tcpdump");
    cmd.args(["-i", &tb.capture_if, "-w"]).arg(out).args([
        "--immediate-mode",
        "-Z",
        "root",
        "-U",
        "-nn",
    ]);
    if let Some(c) = count {
        cmd.args(["-c", &c.to_string()]);
    }
    if !filter.trim().is_empty() {
        cmd.arg(filter);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd)?;
    let (_, stderr) = wait_for_stderr_match(
        &mut child,
        |l| l.contains("listening on"),
        Duration::from_secs(10),
    )?;
    Ok(Tcpdump { child, stderr })
}

/// Starts `tcpdump -i PEER_IF -s 512 --time-stamp-precision=nano -w OUT
/// FILTER` in the peer namespace of `tb` (what left the capture end: the
/// oracle of injection tests) and waits until it listens. Stop it with
/// [`ChildGuard::terminate`].
pub fn start_peer_tcpdump(tb: &Testbed, out: &Path, filter: &str) -> io::Result<ChildGuard> {
    let mut cmd = tb.in_peer_ns("tcpdump");
    cmd.args(["-i", &tb.peer_if, "-w"])
        .arg(out)
        .args(["--immediate-mode", "-U", "-Z", "root", "-nn"])
        .args(["--time-stamp-precision=nano", "-s", "512", filter])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd)?;
    wait_for_stderr_match(
        &mut child,
        |l| l.contains("listening on"),
        Duration::from_secs(10),
    )?;
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn pcap_bytes(be: bool, nano: bool, pkts: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let w32 = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let w16 = |v: u16| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut b = Vec::new();
        b.extend_from_slice(&w32(if nano { 0xa1b2_3c4d } else { 0xa1b2_c3d4 }));
        b.extend_from_slice(&w16(2));
        b.extend_from_slice(&w16(4));
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&w32(65535));
        b.extend_from_slice(&w32(1));
        for (s, f, d) in pkts {
            b.extend_from_slice(&w32(*s));
            b.extend_from_slice(&w32(*f));
            b.extend_from_slice(&w32(d.len() as u32));
            b.extend_from_slice(&w32(d.len() as u32 + 4));
            b.extend_from_slice(d);
        }
        b
    }

    #[test]
    fn pcap_all_variants() {
        for be in [false, true] {
            for nano in [false, true] {
                let b = pcap_bytes(be, nano, &[(10, 5, b"abc"), (11, 0, b"")]);
                let c = parse_capture(&b).unwrap();
                assert_eq!(c.big_endian, be);
                assert_eq!(c.linktypes, vec![1]);
                let p = &c.packets;
                assert_eq!(p.len(), 2);
                let frac = if nano { 5 } else { 5000 };
                assert_eq!(p[0].ts_ns, 10_000_000_000 + frac);
                assert_eq!(p[0].data, b"abc");
                assert_eq!(p[0].wire_len, 7);
                assert_eq!(p[1].wire_len, 4);
            }
        }
        let b = pcap_bytes(false, false, &[(1, 1, b"abcd")]);
        assert!(parse_capture(&b[..b.len() - 1]).is_err());
    }

    fn block(be: bool, t: u32, body: &[u8]) -> Vec<u8> {
        let w32 = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut body = body.to_vec();
        while body.len() & 3 != 0 {
            body.push(0);
        }
        let len = body.len() as u32 + 12;
        let mut b = Vec::new();
        b.extend_from_slice(&w32(t));
        b.extend_from_slice(&w32(len));
        b.extend_from_slice(&body);
        b.extend_from_slice(&w32(len));
        b
    }

    fn ng_section(be: bool, tsresol: Option<u8>) -> Vec<u8> {
        let w32 = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let w16 = |v: u16| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut shb = Vec::new();
        shb.extend_from_slice(&w32(0x1a2b_3c4d));
        shb.extend_from_slice(&w16(1));
        shb.extend_from_slice(&w16(0));
        shb.extend_from_slice(&[0xff; 8]);
        let mut out = block(be, 0x0a0d_0d0a, &shb);
        let mut idb = Vec::new();
        idb.extend_from_slice(&w16(1));
        idb.extend_from_slice(&w16(0));
        idb.extend_from_slice(&w32(0));
        if let Some(r) = tsresol {
            idb.extend_from_slice(&w16(9));
            idb.extend_from_slice(&w16(1));
            idb.extend_from_slice(&[r, 0, 0, 0]);
            idb.extend_from_slice(&[0; 4]);
        }
        out.extend(block(be, 1, &idb));
        let ts: u64 = 1_700_000_000_123_456_789 / if tsresol == Some(9) { 1 } else { 1000 };
        let mut epb = Vec::new();
        epb.extend_from_slice(&w32(0));
        epb.extend_from_slice(&w32((ts >> 32) as u32));
        epb.extend_from_slice(&w32(ts as u32));
        epb.extend_from_slice(&w32(5));
        epb.extend_from_slice(&w32(60));
        epb.extend_from_slice(b"hello");
        out.extend(block(be, 6, &epb));
        let mut spb = Vec::new();
        spb.extend_from_slice(&w32(3));
        spb.extend_from_slice(b"xyz");
        out.extend(block(be, 3, &spb));
        out
    }

    #[test]
    fn pcapng_sections_and_resolutions() {
        let mut b = ng_section(false, None);
        b.extend(ng_section(true, Some(9)));
        let c = parse_capture(&b).unwrap();
        assert_eq!(c.format, CaptureFormat::PcapNg);
        assert_eq!(c.linktypes, vec![1, 1]);
        let p = &c.packets;
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].ts_ns, 1_700_000_000_123_456_000);
        assert_eq!(p[0].data, b"hello");
        assert_eq!(p[0].wire_len, 60);
        assert_eq!(p[1].data, b"xyz");
        assert_eq!(p[2].ts_ns, 1_700_000_000_123_456_789);
        assert_eq!(p[3].wire_len, 3);
    }

    #[test]
    fn reads_what_ringcap_format_writes() {
        let frames = vec![vec![1u8; 60], vec![2u8; 100]];
        let t = TempFile::new("unit", "pcap").unwrap();
        crate::netns::write_pcap(t.path(), &frames).unwrap();
        let p = read_pcap(t.path()).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].data, frames[1]);
        assert_eq!(p[1].wire_len, 100);
    }

    #[test]
    fn child_guard_kills_on_drop() {
        let g = ChildGuard::spawn(std::process::Command::new("sleep").arg("30"))
            .unwrap()
            .with_term_timeout(Duration::from_secs(2));
        let pid = g.id();
        let t0 = Instant::now();
        drop(g);
        assert!(t0.elapsed() < Duration::from_secs(3));
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists() || {
                // The pid may have been reused; it must at least not be our sleep.
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .map_or(true, |c| !c.contains("sleep"))
            }
        );
    }

    #[test]
    fn stderr_line_and_log() {
        let mut cmd = std::process::Command::new("sh");
        cmd.args([
            "-c",
            "echo one >&2; echo 'capturing on x' >&2; echo after >&2; exit 3",
        ])
        .stderr(Stdio::piped());
        let mut g = ChildGuard::spawn(&mut cmd).unwrap();
        let (line, log) =
            wait_for_stderr_line(&mut g, "capturing on", Duration::from_secs(10)).unwrap();
        assert_eq!(line, "capturing on x");
        let st = g.wait_timeout(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(st.code(), Some(3));
        assert_eq!(
            log.wait_eof(Duration::from_secs(5)),
            "one\ncapturing on x\nafter\n"
        );

        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "echo nope >&2"]).stderr(Stdio::piped());
        let mut g = ChildGuard::spawn(&mut cmd).unwrap();
        let e = wait_for_stderr_line(&mut g, "capturing", Duration::from_secs(10)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("nope"));

        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("20").stderr(Stdio::piped());
        let mut g = ChildGuard::spawn(&mut cmd).unwrap();
        let e = wait_for_stderr_line(&mut g, "x", Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn tcpdump_oracle() {
        if !crate::netns::have_program("tcpdump") {
            eprintln!("SKIP: tcpdump not installed");
            return;
        }
        assert!(tcpdump_filter_ok("udp and port 53"));
        assert!(tcpdump_filter_ok(""));
        assert!(!tcpdump_filter_ok("udp and and"));
        let ep = crate::frames::Endpoints::new([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]);
        let frames = crate::frames::mixed_sequence(&ep, 46);
        let t = TempFile::new("oracle", "pcap").unwrap();
        crate::netns::write_pcap(t.path(), &frames).unwrap();
        assert_eq!(tcpdump_count(t.path(), "").unwrap(), 46);
        assert_eq!(tcpdump_count(t.path(), "arp").unwrap(), 4);
        assert_eq!(tcpdump_count(t.path(), "vlan").unwrap(), 4);
        assert_eq!(tcpdump_count(t.path(), "ip6").unwrap(), 8);
        assert!(tcpdump_count(t.path(), "bogus bogus").is_err());
    }
}
