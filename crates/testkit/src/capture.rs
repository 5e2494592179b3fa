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

use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::child::{ChildGuard, DEFAULT_TERM_TIMEOUT};
use crate::netns::{TempFile, Testbed};

/// One packet read from a capture file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedPacket {
    /// Timestamp in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length of the packet on the wire (may exceed `data.len()` when cut by snaplen).
    pub wire_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Format of a capture file as detected by [`read_capture`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap, microsecond timestamps.
    PcapMicro,
    /// Classic pcap, nanosecond timestamps.
    PcapNano,
    /// pcapng.
    PcapNg,
}

/// A whole capture file: format, link types and packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureFile {
    /// Detected format.
    pub format: CaptureFormat,
    /// True when the file (first section, for pcapng) is big-endian.
    pub big_endian: bool,
    /// Link type of the file (pcap) or of every interface in order (pcapng).
    pub linktypes: Vec<u16>,
    /// Snap length of the file (pcap) or of the first interface (pcapng; 0 = none).
    pub snaplen: u32,
    /// The packets in file order.
    pub packets: Vec<CapturedPacket>,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads every packet of a pcap (µs or ns, either byte order) or pcapng (EPB, SPB
/// and obsolete PB; any number of sections and interfaces; `if_tsresol` and
/// `if_tsoffset` honoured) file.
pub fn read_pcap(path: impl AsRef<Path>) -> io::Result<Vec<CapturedPacket>> {
    Ok(read_capture(path)?.packets)
}

/// Like [`read_pcap`], also returning the format and link types.
pub fn read_capture(path: impl AsRef<Path>) -> io::Result<CaptureFile> {
    let path = path.as_ref();
    let bytes = std::fs::read(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    parse_capture(&bytes).map_err(|e| bad(format!("{}: {e}", path.display())))
}

/// Parses a capture file held in memory (see [`read_pcap`]).
pub fn parse_capture(b: &[u8]) -> io::Result<CaptureFile> {
    if b.len() < 4 {
        return Err(bad("file shorter than a magic number"));
    }
    let m = [b[0], b[1], b[2], b[3]];
    match m {
        [0x0a, 0x0d, 0x0d, 0x0a] => parse_pcapng(b),
        _ => parse_pcap(b),
    }
}

#[derive(Clone, Copy)]
struct Endian(bool); // true = big

impl Endian {
    fn u16(self, b: &[u8], off: usize) -> io::Result<u16> {
        let s: [u8; 2] = b
            .get(off..off + 2)
            .ok_or_else(|| bad(format!("truncated at {off}")))?
            .try_into()
            .expect("2 bytes");
        Ok(if self.0 {
            u16::from_be_bytes(s)
        } else {
            u16::from_le_bytes(s)
        })
    }

    fn u32(self, b: &[u8], off: usize) -> io::Result<u32> {
        let s: [u8; 4] = b
            .get(off..off + 4)
            .ok_or_else(|| bad(format!("truncated at {off}")))?
            .try_into()
            .expect("4 bytes");
        Ok(if self.0 {
            u32::from_be_bytes(s)
        } else {
            u32::from_le_bytes(s)
        })
    }
}

fn parse_pcap(b: &[u8]) -> io::Result<CaptureFile> {
    if b.len() < 24 {
        return Err(bad("pcap file header truncated"));
    }
    let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let be = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let (e, nano) = match (le, be) {
        (0xa1b2_c3d4, _) => (Endian(false), false),
        (0xa1b2_3c4d, _) => (Endian(false), true),
        (_, 0xa1b2_c3d4) => (Endian(true), false),
        (_, 0xa1b2_3c4d) => (Endian(true), true),
        _ => return Err(bad(format!("unknown magic {le:#010x}"))),
    };
    let snaplen = e.u32(b, 16)?;
    let linktype = (e.u32(b, 20)? & 0xffff) as u16;
    let mut packets = Vec::new();
    let mut off = 24;
    while off < b.len() {
        if b.len() - off < 16 {
            return Err(bad(format!("record header truncated at {off}")));
        }
        let secs = u64::from(e.u32(b, off)?);
        let frac = u64::from(e.u32(b, off + 4)?);
        let caplen = e.u32(b, off + 8)? as usize;
        let wire_len = e.u32(b, off + 12)?;
        let data = b
            .get(off + 16..off + 16 + caplen)
            .ok_or_else(|| bad(format!("record data truncated at {off}")))?;
        let ts_ns = secs * 1_000_000_000 + if nano { frac } else { frac * 1000 };
        packets.push(CapturedPacket {
            ts_ns,
            wire_len,
            data: data.to_vec(),
        });
        off += 16 + caplen;
    }
    Ok(CaptureFile {
        format: if nano {
            CaptureFormat::PcapNano
        } else {
            CaptureFormat::PcapMicro
        },
        big_endian: e.0,
        linktypes: vec![linktype],
        snaplen,
        packets,
    })
}

struct Iface {
    snaplen: u32,
    /// Timestamp units per second.
    units: u128,
    offset_s: i64,
}

fn parse_pcapng(b: &[u8]) -> io::Result<CaptureFile> {
    let mut e = Endian(false);
    let mut first_be = None;
    let mut all_linktypes = Vec::new();
    let mut first_snaplen = None;
    let mut ifaces: Vec<Iface> = Vec::new();
    let mut packets = Vec::new();
    let mut off = 0;
    while off < b.len() {
        if b.len() - off < 12 {
            return Err(bad(format!("block header truncated at {off}")));
        }
        let raw_type = u32::from_le_bytes(b[off..off + 4].try_into().expect("4"));
        if raw_type == 0x0a0d_0d0a {
            // Section header: byte order from the byte-order magic.
            let bom = &b
                .get(off + 8..off + 12)
                .ok_or_else(|| bad("SHB truncated"))?;
            e = match bom {
                [0x1a, 0x2b, 0x3c, 0x4d] => Endian(true),
                [0x4d, 0x3c, 0x2b, 0x1a] => Endian(false),
                _ => return Err(bad(format!("bad byte-order magic at {off}"))),
            };
            first_be.get_or_insert(e.0);
            ifaces.clear();
        }
        let btype = e.u32(b, off)?;
        let blen = e.u32(b, off + 4)? as usize;
        if blen < 12 || blen & 3 != 0 || off + blen > b.len() {
            return Err(bad(format!("bad block length {blen} at {off}")));
        }
        if e.u32(b, off + blen - 4)? as usize != blen {
            return Err(bad(format!("trailing block length mismatch at {off}")));
        }
        let body = &b[off + 8..off + blen - 4];
        match btype {
            0x0a0d_0d0a => {}
            1 => {
                // Interface description.
                let linktype = e.u16(body, 0)?;
                let snaplen = e.u32(body, 4)?;
                let mut iface = Iface {
                    snaplen,
                    units: 1_000_000,
                    offset_s: 0,
                };
                let mut o = 8;
                while o + 4 <= body.len() {
                    let code = e.u16(body, o)?;
                    let len = usize::from(e.u16(body, o + 2)?);
                    let val = body
                        .get(o + 4..o + 4 + len)
                        .ok_or_else(|| bad(format!("IDB option truncated at {off}")))?;
                    match code {
                        0 => break,
                        9 if len >= 1 => {
                            let r = val[0];
                            let exp = u32::from(r & 0x7f);
                            iface.units = if r & 0x80 != 0 {
                                1u128.checked_shl(exp).unwrap_or(0)
                            } else {
                                10u128.checked_pow(exp).unwrap_or(0)
                            };
                            if iface.units == 0 {
                                return Err(bad(format!("unusable if_tsresol {r:#x}")));
                            }
                        }
                        14 if len >= 8 => {
                            let lo = e.u32(val, 0)?;
                            let hi = e.u32(val, 4)?;
                            iface.offset_s = if e.0 {
                                ((u64::from(lo) << 32) | u64::from(hi)) as i64
                            } else {
                                ((u64::from(hi) << 32) | u64::from(lo)) as i64
                            };
                        }
                        _ => {}
                    }
                    o += 4 + len.div_ceil(4) * 4;
                }
                all_linktypes.push(linktype);
                first_snaplen.get_or_insert(snaplen);
                ifaces.push(iface);
            }
            6 | 2 => {
                // Enhanced packet block, or the obsolete packet block (whose interface
                // id is 16 bits followed by a drops count).
                let ifid = if btype == 6 {
                    e.u32(body, 0)? as usize
                } else {
                    usize::from(e.u16(body, 0)?)
                };
                let iface = ifaces
                    .get(ifid)
                    .ok_or_else(|| bad(format!("packet for unknown interface {ifid} at {off}")))?;
                let ts = (u64::from(e.u32(body, 4)?) << 32) | u64::from(e.u32(body, 8)?);
                let caplen = e.u32(body, 12)? as usize;
                let wire_len = e.u32(body, 16)?;
                let data = body
                    .get(20..20 + caplen)
                    .ok_or_else(|| bad(format!("packet data truncated at {off}")))?;
                let ns = u128::from(ts) * 1_000_000_000 / iface.units;
                let ts_ns = (ns as i128 + i128::from(iface.offset_s) * 1_000_000_000) as u64;
                packets.push(CapturedPacket {
                    ts_ns,
                    wire_len,
                    data: data.to_vec(),
                });
            }
            3 => {
                // Simple packet block: interface 0, no timestamp.
                let iface = ifaces
                    .first()
                    .ok_or_else(|| bad(format!("SPB without interface at {off}")))?;
                let wire_len = e.u32(body, 0)?;
                let mut caplen = wire_len as usize;
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                caplen = caplen.min(body.len() - 4);
                packets.push(CapturedPacket {
                    ts_ns: 0,
                    wire_len,
                    data: body[4..4 + caplen].to_vec(),
                });
            }
            _ => {}
        }
        off += blen;
    }
    Ok(CaptureFile {
        format: CaptureFormat::PcapNg,
        big_endian: first_be.unwrap_or(false),
        linktypes: all_linktypes,
        snaplen: first_snaplen.unwrap_or(0),
        packets,
    })
}

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

/// Handle to a child's stderr as collected by a background thread (see
/// [`wait_for_stderr_line`]). Cloneable; all clones see the same text.
#[derive(Debug, Clone)]
pub struct StderrLog {
    text: Arc<Mutex<String>>,
    done: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl StderrLog {
    /// Everything read so far (complete lines, each ending in `\n`).
    pub fn text(&self) -> String {
        self.text.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// True when the collected text contains `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.text().contains(needle)
    }

    /// Waits up to `limit` for stderr to reach end of file (normally after the child
    /// exited), then returns the whole text; returns what there is on timeout.
    pub fn wait_eof(&self, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let finished = {
                let g = self.done.lock().unwrap_or_else(|e| e.into_inner());
                !matches!(g.as_ref(), Some(h) if !h.is_finished())
            };
            if finished || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut g = self.done.lock().unwrap_or_else(|e| e.into_inner());
        if g.as_ref().is_some_and(|h| h.is_finished()) {
            if let Some(h) = g.take() {
                let _ = h.join();
            }
        }
        drop(g);
        self.text()
    }
}

/// Reads the child's stderr (which must be `Stdio::piped()`) until a line starts
/// with `prefix`, and returns that line (without the newline) and a [`StderrLog`]
/// that keeps collecting the rest of stderr in a background thread (the matching
/// line and the ones before it are in it too).
///
/// Errors with `TimedOut` after `timeout`, or `UnexpectedEof` if stderr closes
/// first (the child died); the message includes everything read.
pub fn wait_for_stderr_line(
    child: &mut Child,
    prefix: &str,
    timeout: Duration,
) -> io::Result<(String, StderrLog)> {
    wait_for_stderr_match(child, |l| l.starts_with(prefix), timeout)
}

/// Like [`wait_for_stderr_line`] with any predicate on the line.
pub fn wait_for_stderr_match(
    child: &mut Child,
    mut pred: impl FnMut(&str) -> bool,
    timeout: Duration,
) -> io::Result<(String, StderrLog)> {
    let stderr = child.stderr.take().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "child stderr not piped (or already taken)",
        )
    })?;
    let text = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel::<String>();
    let t2 = Arc::clone(&text);
    let handle = std::thread::spawn(move || {
        let mut r = BufReader::new(stderr);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    let line = line.trim_end_matches(['\n', '\r']).to_string();
                    {
                        let mut t = t2.lock().unwrap_or_else(|e| e.into_inner());
                        t.push_str(&line);
                        t.push('\n');
                    }
                    // The receiver may be gone; keep collecting anyway.
                    let _ = tx.send(line);
                }
            }
        }
    });
    let log = StderrLog {
        text,
        done: Arc::new(Mutex::new(Some(handle))),
    };
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if pred(&line) {
                    return Ok((line, log));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no matching stderr line within {timeout:?}; stderr so far:\n{}",
                        log.text()
                    ),
                ))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "stderr closed before a matching line; stderr:\n{}",
                        log.text()
                    ),
                ))
            }
        }
    }
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
