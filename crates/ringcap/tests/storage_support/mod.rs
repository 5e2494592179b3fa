//! Helpers for the storage integration tests: temporary directories, input
//! capture files, running ringcap (offline and live), checking output files
//! with tshark/capinfos and an independent reader, and guards for mounts and
//! users. Everything a test creates is removed by a drop guard.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use ringcap_testkit::capture::{read_capture, wait_for_stderr_line, CaptureFile};
use ringcap_testkit::frames::{self, Endpoints};
use ringcap_testkit::netns::{have_program, is_root};
use ringcap_testkit::{skip, CapturedPacket, ChildGuard, StderrLog, Testbed};

/// The ringcap binary cargo built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ringcap"))
}

/// True (after [`skip`]) when one of the programs is missing.
pub fn skip_without(programs: &[&str]) -> bool {
    for p in programs {
        if !have_program(p) {
            skip(format!("{p} not installed"));
            return true;
        }
    }
    false
}

// ---------------------------------------------------------------------------
// Temporary directories

pub use ringcap_testkit::TempDir;

/// A tmpfs of `size` (e.g. "2m") mounted on a fresh directory; unmounted on drop.
#[derive(Debug)]
pub struct TmpfsMount {
    /// Mount point.
    pub dir: PathBuf,
    _parent: TempDir,
}

impl TmpfsMount {
    /// Mounts; `None` (after [`skip`]) when mounting is not possible here.
    pub fn new(size: &str) -> Option<TmpfsMount> {
        if !is_root() {
            skip("mounting a tmpfs needs root");
            return None;
        }
        let parent = TempDir::new("tmpfs");
        let dir = parent.join("mnt");
        std::fs::create_dir(&dir).expect("mount point");
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(&dir)
            .status();
        if !matches!(st, Ok(s) if s.success()) {
            skip(format!("cannot mount a tmpfs: {st:?}"));
            return None;
        }
        Some(TmpfsMount {
            dir,
            _parent: parent,
        })
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// A small ext4 filesystem (a file on a loop device, no journal, no reserved
/// blocks) mounted on a fresh directory; unmounted and detached on drop. Unlike
/// tmpfs on older kernels it always supports O_DIRECT.
#[derive(Debug)]
pub struct LoopExt4 {
    /// Mount point.
    pub dir: PathBuf,
    device: Option<String>,
    mounted: bool,
    _parent: TempDir,
}

impl LoopExt4 {
    /// Makes and mounts it; `None` (after [`skip`]) when that is not possible here.
    pub fn new(size_mib: u64) -> Option<LoopExt4> {
        if !is_root() {
            skip("a loop filesystem needs root");
            return None;
        }
        let parent = TempDir::new("loopfs");
        let img = parent.join("fs.img");
        let dir = parent.join("mnt");
        std::fs::create_dir(&dir).expect("mount point");
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(size_mib << 20))
            .expect("image");
        let mut me = LoopExt4 {
            dir,
            device: None,
            mounted: false,
            _parent: parent,
        };
        let mkfs = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-O", "^has_journal", "-m", "0", "-b", "4096"])
            .arg(&img)
            .output();
        if !matches!(&mkfs, Ok(o) if o.status.success()) {
            skip(format!("mkfs.ext4 failed: {mkfs:?}"));
            return None;
        }
        let lo = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&img)
            .output();
        match lo {
            Ok(o) if o.status.success() => {
                me.device = Some(String::from_utf8_lossy(&o.stdout).trim().to_string())
            }
            other => {
                skip(format!("losetup failed: {other:?}"));
                return None;
            }
        }
        let st = Command::new("mount")
            .arg(me.device.as_deref().unwrap())
            .arg(&me.dir)
            .status();
        if !matches!(st, Ok(s) if s.success()) {
            skip(format!("cannot mount the loop filesystem: {st:?}"));
            return None;
        }
        me.mounted = true;
        let _ = std::fs::remove_dir(me.dir.join("lost+found"));
        Some(me)
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        if self.mounted {
            let ok = Command::new("umount")
                .arg(&self.dir)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            }
        }
        if let Some(dev) = &self.device {
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}

/// A system user made for one test with `useradd`; removed (`userdel`) on drop.
#[derive(Debug)]
pub struct TestUser {
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: u32,
    /// Primary gid.
    pub gid: u32,
}

impl TestUser {
    /// Creates the user; `None` (after [`skip`]) when that is not possible.
    pub fn new() -> Option<TestUser> {
        if !is_root() || !have_program("useradd") && !Path::new("/usr/sbin/useradd").exists() {
            skip("cannot create users here");
            return None;
        }
        let name = format!("rcst{}", std::process::id() % 1_000_000);
        let st = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(&name)
            .status();
        if !matches!(st, Ok(s) if s.success()) {
            skip(format!("useradd failed: {st:?}"));
            return None;
        }
        let id = |flag: &str| -> u32 {
            let o = Command::new("id")
                .arg(flag)
                .arg(&name)
                .output()
                .expect("id");
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse()
                .expect("id number")
        };
        let (uid, gid) = (id("-u"), id("-g"));
        Some(TestUser { name, uid, gid })
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

// ---------------------------------------------------------------------------
// Input files

/// One packet of an input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkt {
    /// Timestamp, ns since the epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub wire_len: u32,
    /// Captured bytes.
    pub data: Vec<u8>,
}

impl From<&CapturedPacket> for Pkt {
    fn from(p: &CapturedPacket) -> Pkt {
        Pkt {
            ts_ns: p.ts_ns,
            wire_len: p.wire_len,
            data: p.data.clone(),
        }
    }
}

/// Made-up endpoints for generated frames (198.18.0.0/15, locally administered MACs).
pub fn endpoints() -> Endpoints {
    Endpoints::new(
        [0x02, 0x52, 0x43, 0x53, 0, 2],
        [0x02, 0x52, 0x43, 0x53, 0, 1],
    )
}

/// `n` UDP frames numbered from 0, frame `i` being `size(i)` bytes (>= 60),
/// timestamps `t0_ns + i * step_ns`.
pub fn udp_packets(n: usize, size: impl Fn(usize) -> usize, t0_ns: u64, step_ns: u64) -> Vec<Pkt> {
    let ep = endpoints();
    (0..n)
        .map(|i| {
            let len = size(i).max(60);
            let f = frames::udp4(&ep, i as u32, 40000, 9, len - 42);
            Pkt {
                ts_ns: t0_ns + i as u64 * step_ns,
                wire_len: f.len() as u32,
                data: f,
            }
        })
        .collect()
}

/// A size pattern that varies between 60 and about 1500 bytes.
pub fn varied(i: usize) -> usize {
    60 + (i * 7919) % 1440
}

/// 2021-01-01T00:00:00.123456789Z: timestamps with all nine digits used.
pub const T0: u64 = 1_609_459_200_123_456_789;

/// Bytes of a nanosecond pcap file (little-endian, Ethernet, snaplen 262144).
pub fn pcap_bytes(pkts: &[Pkt]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&262_144u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for p in pkts {
        b.extend_from_slice(&((p.ts_ns / 1_000_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&((p.ts_ns % 1_000_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
        b.extend_from_slice(&p.wire_len.to_le_bytes());
        b.extend_from_slice(&p.data);
    }
    b
}

/// Writes a nanosecond pcap file.
pub fn write_input(path: &Path, pkts: &[Pkt]) {
    let mut f = std::fs::File::create(path).expect("create input");
    f.write_all(&pcap_bytes(pkts)).expect("write input");
}

/// Size of one pcap record of `p`.
pub fn pcap_record_len(p: &Pkt) -> u64 {
    16 + p.data.len() as u64
}

// ---------------------------------------------------------------------------
// Running ringcap

/// Result of one ringcap run.
#[derive(Debug)]
pub struct Run {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// How long it took.
    pub elapsed: Duration,
}

impl Run {
    /// The exit code (-1 when killed by a signal).
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    /// Panics unless the exit status is `code`.
    pub fn expect_code(&self, code: i32, what: &str) -> &Run {
        assert_eq!(
            self.code(),
            code,
            "{what}: exit status {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

/// Runs `ringcap ARGS` (killed after `limit`).
pub fn ringcap<S: AsRef<OsStr>>(args: &[S], limit: Duration) -> Run {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let child = ChildGuard::spawn(&mut cmd).expect("spawn ringcap");
    let out: Output = child
        .wait_output(limit)
        .unwrap_or_else(|e| panic!("ringcap {:?}: {e}", args_text(args)));
    Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: t0.elapsed(),
    }
}

fn args_text<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Arguments from paths and strings.
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        Vec::<std::ffi::OsString>::from([$(std::ffi::OsString::from($a)),*])
    };
}

/// `ringcap capture -r INPUT EXTRA...`, 60 s limit.
pub fn offline(input: &Path, extra: &[std::ffi::OsString]) -> Run {
    let mut a: Vec<std::ffi::OsString> = args!["capture", "-r", input];
    a.extend(extra.iter().cloned());
    ringcap(&a, Duration::from_secs(60))
}

/// A live ringcap capture in a testbed's capture namespace.
pub struct Live {
    /// The process.
    pub child: ChildGuard,
    /// Its stderr.
    pub log: StderrLog,
}

impl Live {
    /// Starts `ringcap capture -i CAPTURE_IF -B 8 EXTRA...` and waits for "capturing on".
    pub fn start(tb: &Testbed, extra: &[std::ffi::OsString]) -> Live {
        let mut cmd = tb.in_capture_ns(bin().to_str().expect("utf-8 path"));
        cmd.args(["capture", "-i", &tb.capture_if, "-B", "8M"]);
        cmd.args(extra);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = ChildGuard::spawn(&mut cmd)
            .expect("spawn ringcap")
            .with_term_timeout(Duration::from_secs(10));
        let (_, log) = wait_for_stderr_line(&mut child, "capturing on ", Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("ringcap did not start: {e}"));
        Live { child, log }
    }

    /// Sends `sig`.
    pub fn signal(&mut self, sig: i32) {
        self.child.signal(sig).expect("signal ringcap");
    }

    /// Stops it with SIGINT and returns the exit status and the whole stderr.
    pub fn stop(mut self) -> (ExitStatus, String) {
        self.signal(libc::SIGINT);
        let st = self
            .child
            .wait_timeout(Duration::from_secs(15))
            .expect("wait")
            .unwrap_or_else(|| panic!("ringcap did not stop: {}", self.log.text()));
        let text = self.log.wait_eof(Duration::from_secs(5));
        (st, text)
    }

    /// Waits up to `limit` for it to exit by itself.
    pub fn wait(mut self, limit: Duration) -> (ExitStatus, String) {
        let st = match self.child.wait_timeout(limit).expect("wait") {
            Some(s) => s,
            None => panic!("ringcap still running after {limit:?}: {}", self.log.text()),
        };
        let text = self.log.wait_eof(Duration::from_secs(5));
        (st, text)
    }
}

/// Sends `frames` from the testbed's peer at `pps` (panics on failure).
pub fn send(tb: &Testbed, frames: &[Vec<u8>], pps: u32) {
    tb.send_from_peer(frames, pps).expect("send frames");
}

/// `n` numbered UDP frames for the testbed, `len` bytes each.
pub fn testbed_frames(tb: &Testbed, first: u32, n: u32, len: usize) -> Vec<Vec<u8>> {
    let ep = tb.endpoints();
    (first..first + n)
        .map(|s| frames::udp4(&ep, s, 40000, 7000, len - 42))
        .collect()
}

// ---------------------------------------------------------------------------
// Checking output

/// Every entry of `dir` (hidden ones too), sorted, except the indexes a
/// capture keeps beside its files (`.NAME.ringcap-index`, tests/query.rs).
pub fn list(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| !(n.starts_with('.') && n.ends_with(".ringcap-index")))
        .collect();
    v.sort();
    v
}

/// The visible files of `dir` whose names end in `ext` and do not appear in `except`, sorted by name.
pub fn outputs(dir: &Path, ext: &str, except: &[&str]) -> Vec<PathBuf> {
    list(dir)
        .into_iter()
        .filter(|n| !n.starts_with('.') && n.ends_with(ext) && !except.contains(&n.as_str()))
        .map(|n| dir.join(n))
        .collect()
}

/// The sequence number at the end of a series file name (`...-NNNNNN.ext`).
pub fn seq_of_name(p: &Path) -> u64 {
    let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
    let digits = stem.rsplit('-').next().unwrap_or("");
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{} has no sequence number", p.display()))
}

/// `files` sorted by the sequence number in their names.
pub fn by_seq(mut files: Vec<PathBuf>) -> Vec<PathBuf> {
    files.sort_by_key(|f| seq_of_name(f));
    files
}

/// Panics if `dir` holds a hidden partial file.
pub fn assert_no_partials(dir: &Path) {
    let hidden: Vec<String> = list(dir)
        .into_iter()
        .filter(|n| n.starts_with('.') || n.contains("ringcap-partial"))
        .collect();
    assert!(
        hidden.is_empty(),
        "partial/hidden files left in {}: {hidden:?}",
        dir.display()
    );
}

fn tool_stderr_clean(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| !l.contains("This could be dangerous") && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Packets tshark reads from `path`; panics if tshark complains (exit status or
/// anything on stderr besides the root warning).
pub fn tshark_count(path: &Path) -> usize {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args(["-T", "fields", "-e", "frame.number"])
        .stdin(Stdio::null())
        .output()
        .expect("run tshark");
    let err = tool_stderr_clean(&out.stderr);
    assert!(
        out.status.success() && err.is_empty(),
        "tshark -r {}: {} {err}",
        path.display(),
        out.status
    );
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Packet counts capinfos reports for each file (one capinfos run); panics if
/// capinfos reports any problem.
pub fn capinfos_counts(paths: &[PathBuf]) -> Vec<u64> {
    if paths.is_empty() {
        return Vec::new();
    }
    let out = Command::new("capinfos")
        .args(["-c", "-M", "-T", "-r"])
        .args(paths)
        .stdin(Stdio::null())
        .output()
        .expect("run capinfos");
    let err = tool_stderr_clean(&out.stderr);
    assert!(
        out.status.success() && err.is_empty(),
        "capinfos {paths:?}: {} {err}",
        out.status
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let counts: Vec<u64> = text
        .lines()
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            cols.last()
                .and_then(|c| c.trim().parse().ok())
                .unwrap_or_else(|| panic!("capinfos line {l:?}"))
        })
        .collect();
    assert_eq!(counts.len(), paths.len(), "capinfos output:\n{text}");
    counts
}

/// Reads every file with the independent reader, capinfos and tshark, checks
/// they agree, and returns the packets of each file.
pub fn read_all_valid(paths: &[PathBuf]) -> Vec<Vec<Pkt>> {
    let caps = capinfos_counts(paths);
    paths
        .iter()
        .zip(caps)
        .map(|(p, c)| {
            let f = read_capture(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            let n = tshark_count(p);
            assert_eq!(
                (f.packets.len(), n as u64),
                (c as usize, c),
                "{}: reader / tshark / capinfos disagree",
                p.display()
            );
            f.packets.iter().map(Pkt::from).collect()
        })
        .collect()
}

/// The whole independent parse of a file.
pub fn parse(path: &Path) -> CaptureFile {
    read_capture(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The last line of a `--stats-json` file, which must be the final record.
pub fn final_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let last = text.lines().last().expect("stats-json is empty");
    let v: serde_json::Value = serde_json::from_str(last).expect("stats-json line is JSON");
    assert_eq!(
        v["final"],
        serde_json::Value::Bool(true),
        "last record: {last}"
    );
    v
}

/// A counter of a JSON record.
pub fn counter(v: &serde_json::Value, name: &str) -> u64 {
    v[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {v}"))
}

/// Sequence number carried by a generated frame.
pub fn seq(p: &Pkt) -> u32 {
    frames::seq_of(&p.data).expect("frame without a sequence tag")
}

/// Waits until `cond` holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// File mode bits.
pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Convenience: io::Result to panic with context.
pub fn ok<T>(r: io::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

// ---------------------------------------------------------------------------
// pcapng blocks (little-endian files, as ringcap writes them)

/// One pcapng block.
#[derive(Debug, Clone)]
pub struct Block {
    /// Block type.
    pub btype: u32,
    /// Offset in the file.
    pub offset: usize,
    /// Body (between the length fields).
    pub body: Vec<u8>,
}

/// Splits a little-endian pcapng file into blocks; panics on malformed framing.
pub fn pcapng_blocks(b: &[u8]) -> Vec<Block> {
    let mut v = Vec::new();
    let mut off = 0;
    while off < b.len() {
        assert!(b.len() - off >= 12, "block header truncated at {off}");
        let btype = u32::from_le_bytes(b[off..off + 4].try_into().unwrap());
        let len = u32::from_le_bytes(b[off + 4..off + 8].try_into().unwrap()) as usize;
        assert!(
            len >= 12 && len.is_multiple_of(4) && off + len <= b.len(),
            "bad block length {len} at {off}"
        );
        let trail = u32::from_le_bytes(b[off + len - 4..off + len].try_into().unwrap()) as usize;
        assert_eq!(trail, len, "trailing length at {off}");
        v.push(Block {
            btype,
            offset: off,
            body: b[off + 8..off + len - 4].to_vec(),
        });
        off += len;
    }
    v
}

/// The options of a block body whose fixed part is `fixed` bytes long.
pub fn block_options(body: &[u8], fixed: usize) -> Vec<(u16, Vec<u8>)> {
    let mut v = Vec::new();
    let mut o = fixed;
    while o + 4 <= body.len() {
        let code = u16::from_le_bytes([body[o], body[o + 1]]);
        let len = u16::from_le_bytes([body[o + 2], body[o + 3]]) as usize;
        if code == 0 {
            break;
        }
        let val = body
            .get(o + 4..o + 4 + len)
            .unwrap_or_else(|| panic!("option {code} truncated"));
        v.push((code, val.to_vec()));
        o += 4 + len.div_ceil(4) * 4;
    }
    v
}

/// The value of option `code`, if present.
pub fn option(opts: &[(u16, Vec<u8>)], code: u16) -> Option<&[u8]> {
    opts.iter()
        .find(|(c, _)| *c == code)
        .map(|(_, v)| v.as_slice())
}

/// A 64-bit little-endian option value.
pub fn option_u64(opts: &[(u16, Vec<u8>)], code: u16) -> Option<u64> {
    option(opts, code).map(|v| u64::from_le_bytes(v[..8].try_into().expect("8-byte option")))
}

/// End offsets of every record (EPB or pcap record) and the header end, for a
/// file's bytes: (header_end, record_ends, is_packet).
pub fn record_ends(b: &[u8]) -> (usize, Vec<(usize, bool)>) {
    if b[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
        let blocks = pcapng_blocks(b);
        let first_idb = blocks
            .iter()
            .position(|bl| bl.btype == 1)
            .expect("pcapng file without an IDB");
        let idb = &blocks[first_idb];
        let header_end = idb.offset + idb.body.len() + 12;
        let ends = blocks[first_idb + 1..]
            .iter()
            .map(|bl| (bl.offset + bl.body.len() + 12, bl.btype == 6))
            .collect();
        (header_end, ends)
    } else {
        let mut off = 24;
        let mut ends = Vec::new();
        while off < b.len() {
            let caplen = u32::from_le_bytes(b[off + 8..off + 12].try_into().unwrap()) as usize;
            off += 16 + caplen;
            ends.push((off, true));
        }
        (24, ends)
    }
}
