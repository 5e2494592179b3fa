//! Whole packets written from the kernel's ring blocks in place
//! (`--zero-copy`, issue 15): real frames over veth, captured at the same
//! time by ringcap in place, by ringcap's copy path and by tcpdump. The
//! in-place file must hold exactly the copy path's packets (bytes, original
//! lengths, timestamps), every frame sent once, VLAN tags put back; tshark,
//! capinfos and tcpdump must read it; rotation, repair of a cut file and
//! the counters must work as for the copy path.
//!
//! Needs root and network namespaces; prints SKIP otherwise (fails under
//! RINGCAP_REQUIRE_PRIVILEGED_TESTS=1). The tshark/capinfos checks are
//! skipped, saying so, where those programs are missing.

mod common;

use common::{
    bin, by_seq, check_identities, final_record, json_records, num, read, run_limited, start,
    start_with, tagged_seqs, TempDir,
};
use ringcap_testkit::capture::{self, CapturedPacket};
use ringcap_testkit::netns::have_program;
use ringcap_testkit::{frames, skip_unless_netns, Testbed};
use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Mixed frames per run: 40 of each of the 23 shapes (VLAN, QinQ, IPv6,
/// fragments, short and long frames).
const MIXED_N: usize = 920;

/// Every frame sent, once, byte for byte, with its original length.
fn check_all_sent(sent: &[Vec<u8>], got: &[CapturedPacket], what: &str) {
    let index = by_seq(sent);
    let mut seen = HashSet::new();
    for (p, s) in got.iter().zip(tagged_seqs(got, what)) {
        let i = *index
            .get(&s)
            .unwrap_or_else(|| panic!("{what}: seq {s} never sent"));
        assert!(seen.insert(s), "{what}: seq {s} captured twice");
        assert_eq!(p.wire_len as usize, sent[i].len(), "{what}: seq {s} length");
        assert_eq!(p.data, sent[i], "{what}: seq {s} bytes");
    }
    assert_eq!(seen.len(), sent.len(), "{what}: frames missing");
}

/// Counts packets with capinfos, tshark and tcpdump; each must read the
/// whole file without complaint. None for a program that is missing.
fn readers_count(path: &str) -> Vec<(&'static str, u64)> {
    let mut out = Vec::new();
    let run = |prog: &str, args: &[&str]| {
        let mut cmd = Command::new(prog);
        cmd.args(args).stdin(Stdio::null());
        let (status, stdout, stderr) = run_limited(cmd, Duration::from_secs(60));
        let text = String::from_utf8_lossy(&stdout).into_owned();
        assert!(
            status.success()
                && !stderr.contains("truncated")
                && !stderr.contains("bogus")
                && !stderr.contains("appears to be damaged")
                && !stderr.contains("isn't a capture file"),
            "{prog} {args:?}: {status}: {stderr}"
        );
        text
    };
    if have_program("capinfos") {
        let t = run("capinfos", &["-c", "-M", path]);
        let n = t
            .lines()
            .find_map(|l| l.strip_prefix("Number of packets:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("capinfos output: {t}"));
        out.push(("capinfos", n));
    } else {
        eprintln!("SKIP (part): capinfos is not installed");
    }
    if have_program("tshark") {
        let t = run(
            "tshark",
            &["-n", "-r", path, "-T", "fields", "-e", "frame.len"],
        );
        out.push(("tshark", t.lines().count() as u64));
    } else {
        eprintln!("SKIP (part): tshark is not installed");
    }
    // tcpdump (libpcap) reads it without complaint; its count is of what
    // it writes back out (a line may not be a packet).
    run("tcpdump", &["-nn", "-r", path]);
    out.push((
        "tcpdump",
        capture::tcpdump_count(path, "").expect("tcpdump -r"),
    ));
    out
}

/// Lengths of the buffers registered with the io_uring instances of
/// process `pid` (the `UserBufs` lines of /proc/PID/fdinfo).
fn registered_buffers(pid: u32) -> Vec<u64> {
    let mut out = Vec::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for fd in fds.flatten() {
        let is_uring =
            std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy().contains("io_uring"));
        if !is_uring {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let mut lines = info.lines().skip_while(|l| !l.starts_with("UserBufs:"));
        let n: usize = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        out.extend(lines.take(n).filter_map(|l| {
            l.rsplit_once('/')
                .and_then(|(_, len)| len.trim().parse::<u64>().ok())
        }));
    }
    out
}

/// The in-place capture `run` writes its blocks from its rings' memory,
/// registered once with io_uring (not pinned page by page at each write):
/// one buffer per ring, `ring_bytes` in all. Not checked (saying so)
/// where io_uring is switched off.
fn check_registered(run: &common::Running, threads: u32, ring_bytes: u64, what: &str) {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .is_ok_and(|v| v.trim() != "0");
    if disabled {
        eprintln!("SKIP (part): io_uring is disabled here (kernel.io_uring_disabled)");
        return;
    }
    let bufs = registered_buffers(run.child.id());
    assert_eq!(
        (bufs.len(), bufs.iter().sum::<u64>()),
        (threads as usize, ring_bytes),
        "{what}: buffers registered with io_uring: {bufs:?}"
    );
}

fn whole_frames_in_place(threads: u32) {
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("zero-copy");
    let (zc, copy) = (dir.file("zc.pcapng"), dir.file("copy.pcapng"));
    let stats = dir.file("zc.json");
    let threads_s = threads.to_string();
    let sent = frames::mixed_sequence(&tb.endpoints(), MIXED_N);
    let what = format!("--threads {threads}");
    let a = start(
        &tb,
        &[
            "--threads",
            &threads_s,
            "--format",
            "pcapng",
            "--zero-copy",
            "on",
            "-w",
            &zc,
            "--stats-json",
            &stats,
        ],
    );
    let b = start(
        &tb,
        &[
            "--threads",
            &threads_s,
            "--format",
            "pcapng",
            "--zero-copy",
            "off",
            "-w",
            &copy,
        ],
    );
    check_registered(&a, threads, 8 << 20, &what);
    tb.send_from_peer(&sent, 0).expect("send");
    let (fa, fb) = (a.stop(), b.stop());
    fa.assert_ok("in place");
    fa.assert_no_loss("in place");
    fb.assert_ok("copy path");
    let got = read(&zc);
    check_all_sent(&sent, &got, &what);
    // The same packets as the copy path, in the same order per thread
    // (with one thread, in the same order overall). Each packet socket
    // stamps a packet itself (the kernel reads the clock per socket when
    // the frame carries no stamp), so the two files' timestamps differ by
    // microseconds: equal within 100 ms (a unit error would be 1000x).
    let reference = read(&copy);
    let stamps: std::collections::HashMap<Vec<u8>, u64> = reference
        .iter()
        .map(|p| (p.data.clone(), p.ts_ns))
        .collect();
    for p in &got {
        let other = stamps[&p.data];
        assert!(
            p.ts_ns.abs_diff(other) < 100_000_000,
            "{what}: timestamp {} vs the copy path's {other}",
            p.ts_ns
        );
    }
    let key = |p: &CapturedPacket| (p.wire_len, p.data.clone());
    if threads == 1 {
        if let Some(i) = (0..got.len().max(reference.len()))
            .find(|&i| got.get(i).map(key) != reference.get(i).map(key))
        {
            let show = |p: Option<&CapturedPacket>| {
                p.map(|p| (p.wire_len, p.data.len(), frames::seq_of(&p.data)))
            };
            panic!(
                "{what}: packet {i} of {}/{} differs from the copy path's: {:?} vs {:?}",
                got.len(),
                reference.len(),
                show(got.get(i)),
                show(reference.get(i))
            );
        }
    } else {
        let mut x: Vec<_> = got.iter().map(key).collect();
        let mut y: Vec<_> = reference.iter().map(key).collect();
        x.sort();
        y.sort();
        assert!(
            x == y,
            "{what}: the in-place file differs from the copy path's"
        );
    }
    for (prog, n) in readers_count(&zc) {
        assert_eq!(n, sent.len() as u64, "{what}: {prog} counts");
    }
    let f = final_record(&json_records(&stats)).clone();
    check_identities(&f, true, &what);
    assert_eq!(num(&f, "packets_written"), sent.len() as u64, "{what}: {f}");
    let wire: u64 = sent.iter().map(|f| f.len() as u64).sum();
    assert_eq!(num(&f, "bytes_on_wire"), wire, "{what}: bytes_on_wire");
    assert_eq!(
        num(&f, "bytes_written"),
        std::fs::metadata(&zc).unwrap().len(),
        "{what}: bytes_written vs the file's size"
    );
    if threads == 1 {
        repair_cuts_cleanly(&dir, &zc, &got);
    }
}

/// A copy of `path` cut at several places (as a crash during a block write
/// leaves it, including a page of zeros after the cut), repaired: a valid
/// prefix of the packets, readable by the other tools.
fn repair_cuts_cleanly(dir: &TempDir, path: &str, all: &[CapturedPacket]) {
    let bytes = std::fs::read(path).unwrap();
    for (i, cut) in [bytes.len() / 3, 4096 + 100, bytes.len() - 5]
        .into_iter()
        .enumerate()
    {
        for zeros in [0usize, 4096] {
            let p = dir.file(&format!("cut-{i}-{zeros}.pcapng"));
            let mut b = bytes[..cut].to_vec();
            b.resize(cut + zeros, 0);
            std::fs::write(&p, &b).unwrap();
            let out = Command::new(bin())
                .args(["repair", &p])
                .output()
                .expect("ringcap repair");
            assert!(
                out.status.success(),
                "repair {cut}+{zeros}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let got = read(&p);
            assert!(!got.is_empty() || cut < 8192, "cut at {cut}: nothing kept");
            assert!(
                got.iter()
                    .zip(all)
                    .all(|(a, b)| a.data == b.data && a.ts_ns == b.ts_ns),
                "cut at {cut}: not a prefix"
            );
            for (prog, n) in readers_count(&p) {
                assert_eq!(n, got.len() as u64, "cut at {cut}+{zeros}: {prog}");
            }
        }
    }
}

#[test]
fn whole_frames_in_place_equal_the_copy_path_one_thread() {
    skip_unless_netns!();
    whole_frames_in_place(1);
}

#[test]
fn whole_frames_in_place_equal_the_copy_path_two_threads() {
    skip_unless_netns!();
    whole_frames_in_place(2);
}

/// Rotation splits ring blocks at packet boundaries: every file is valid,
/// no file has more packets than asked, and together they hold every frame.
/// With no `--format`: a directory defaults to pcapng, which `--zero-copy
/// on` (refused for anything it cannot write in place) accepts.
#[test]
fn rotation_splits_blocks_between_files() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("zero-copy-rotate");
    let out_dir = dir.file("out");
    let stats = dir.file("s.json");
    let sent = frames::mixed_sequence(&tb.endpoints(), MIXED_N);
    let run = start(
        &tb,
        &[
            "--zero-copy",
            "on",
            "--rotate-packets",
            "150",
            "-w",
            &format!("{out_dir}/"),
            "--stats-json",
            &stats,
        ],
    );
    // Two bursts, so that ring blocks and files do not line up.
    tb.send_from_peer(&sent[..400], 0).expect("send");
    std::thread::sleep(Duration::from_millis(200));
    tb.send_from_peer(&sent[400..], 0).expect("send");
    let fin = run.stop();
    fin.assert_ok("rotation");
    fin.assert_no_loss("rotation");
    let mut files: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        // Not the hidden indexes beside the files.
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{} files: {files:?}", files.len());
    let mut all = Vec::new();
    for f in &files {
        let name = f.to_str().unwrap();
        assert!(!name.contains("ringcap-partial"), "{name} left partial");
        assert!(name.ends_with(".pcapng"), "{name}: a directory gets pcapng");
        let got = read(name);
        assert!(
            !got.is_empty() && got.len() <= 150,
            "{name}: {} packets",
            got.len()
        );
        for (prog, n) in readers_count(name) {
            assert_eq!(n, got.len() as u64, "{name}: {prog}");
        }
        all.extend(got);
    }
    check_all_sent(&sent, &all, "rotation");
    check_identities(final_record(&json_records(&stats)), true, "rotation");
}

/// Where the ring blocks cannot go out as they are, `--zero-copy on` is
/// refused with the reason, before anything is captured.
#[test]
fn refused_where_it_cannot_apply() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("zero-copy-refused");
    let out = dir.file("x.pcapng");
    let cases: [(&[&str], &str); 4] = [
        (&["--format", "pcapng", "-s", "headers"], "-s headers"),
        (&["--format", "pcap"], "pcapng"),
        (&["--format", "pcapng", "-c", "10"], "-c"),
        (
            &["--format", "pcapng", "--write-mode", "buffered"],
            "buffered",
        ),
    ];
    for (args, why) in cases {
        let mut cmd = tb.in_capture_ns(bin());
        cmd.args([
            "capture",
            "-i",
            &tb.capture_if,
            "-B",
            "8M",
            "--zero-copy",
            "on",
            "-w",
            &out,
        ])
        .args(args)
        .stdin(Stdio::null());
        let (status, _, stderr) = run_limited(cmd, Duration::from_secs(20));
        assert_eq!(status.code(), Some(2), "{args:?}: {status} {stderr}");
        assert!(
            stderr.contains("--zero-copy on") && stderr.contains(why),
            "{args:?}: {stderr}"
        );
    }
    // On by itself for a cut capture too (the auto rule): the kernel cuts
    // the packets, each written in place at 64 bytes.
    let run = start_with(
        &tb,
        &["-i", &tb.capture_if, "-B", "8M"],
        &["--format", "pcapng", "-s", "64", "-w", &out],
        Stdio::null(),
    );
    let sent = frames::mixed_sequence(&tb.endpoints(), 46);
    tb.send_from_peer(&sent, 0).expect("send");
    run.stop().assert_ok("snap 64");
    let got = capture::read_capture(&out).expect("read").packets;
    assert_eq!(got.len(), sent.len());
    // Byte for byte the sent frames cut at 64, with their lengths on the
    // wire (most of them one run of equal layouts for the converter).
    let mut x: Vec<_> = got.iter().map(|p| (p.wire_len, p.data.clone())).collect();
    let mut y: Vec<_> = sent
        .iter()
        .map(|f| (f.len() as u32, f[..f.len().min(64)].to_vec()))
        .collect();
    x.sort();
    y.sort();
    assert!(
        x == y,
        "snap 64 in place: the packets differ from what was sent"
    );
    let bytes = std::fs::read(&out).expect("read the file");
    assert!(
        bytes.windows(4).any(|w| w == 0x8052_4350u32.to_ne_bytes()),
        "snap 64 with --zero-copy auto: no padding block, so not written in place"
    );
    for (prog, n) in readers_count(&out) {
        assert_eq!(n, sent.len() as u64, "snap 64 in place: {prog} counts");
    }
}
