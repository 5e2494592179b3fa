//! The command line as a tcpdump user meets it (issue 13's defects): outputs
//! opened before anything starts, `-w /dev/null`, `--help` grouped with every
//! enumerated value listed, unknown options reported as options, and offline
//! pcapng input with several link types.

mod common;

use common::*;
use ringcap_format::pcapng;
use ringcap_format::read::Reader;
use ringcap_testkit::frames::{self, Endpoints};
use ringcap_testkit::{skip_unless_netns, Testbed};
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

fn endpoints() -> Endpoints {
    Endpoints::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .with_ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
}

/// A pcapng file with two interfaces, Ethernet (0) and raw IP (1), and the
/// same frames on both (the raw-IP copies without their Ethernet header).
fn two_linktypes(path: &std::path::Path) -> Vec<(u32, Vec<u8>)> {
    let ep = endpoints();
    let mut packets = Vec::new();
    for seq in 0..40u32 {
        let f = match seq % 3 {
            0 => frames::udp4(&ep, seq, 4000, 53, 40),
            1 => frames::tcp4_with_options(&ep, seq, 4001, 80, 30),
            _ => frames::icmp4_echo(&ep, seq, 7, 20),
        };
        packets.push((0u32, f.clone()));
        packets.push((1u32, f[14..].to_vec()));
    }
    let mut b = pcapng::section_header("test", "test", None);
    for (lt, name) in [(1u16, "eth"), (101u16, "raw")] {
        b.extend_from_slice(&pcapng::interface_description(
            &pcapng::InterfaceDescription {
                linktype: lt,
                snaplen: 65535,
                name,
                filter: None,
                description: None,
            },
        ));
    }
    for (i, (iface, data)) in packets.iter().enumerate() {
        let mut rec = vec![0u8; pcapng::epb_len(data.len())];
        let len = data.len() as u32;
        pcapng::write_epb_header(
            &mut rec,
            *iface,
            1_700_000_000_000_000_000 + i as u64,
            len,
            len,
        );
        rec[pcapng::EPB_DATA_OFFSET..pcapng::EPB_DATA_OFFSET + data.len()].copy_from_slice(data);
        pcapng::write_epb_trailer(&mut rec, len);
        b.extend_from_slice(&rec);
    }
    std::fs::write(path, b).unwrap();
    packets
}

/// (interface id, link type, bytes) of every packet of a pcapng file.
fn packets_of(path: &std::path::Path) -> Vec<(usize, u32, Vec<u8>)> {
    let mut r = Reader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        let (i, d) = (p.interface, p.data.to_vec());
        out.push((i, r.interfaces()[i].linktype, d));
    }
    out
}

#[test]
fn pcapng_input_with_two_link_types_is_filtered_per_link_type() {
    let dir = TempDir::new("two-linktypes");
    let input = dir.join("in.pcapng");
    let sent = two_linktypes(&input);
    let out = dir.file("out.pcapng");
    let fin = ringcap(&[
        "capture",
        "-r",
        input.to_str().unwrap(),
        "--format",
        "pcapng",
        "-w",
        &out,
        "udp",
    ]);
    fin.assert_ok("two link types, pcapng out");
    let got = packets_of(std::path::Path::new(&out));
    // What the filter selects on each link type: the UDP frames, both copies.
    let want: Vec<(usize, u32, Vec<u8>)> = sent
        .iter()
        .filter(|(iface, f)| {
            let ip = if *iface == 0 { &f[14..] } else { &f[..] };
            ip[9] == 17
        })
        .map(|(iface, f)| {
            (
                *iface as usize,
                if *iface == 0 { 1 } else { 101 },
                f.clone(),
            )
        })
        .collect();
    assert_eq!(want.len(), 28);
    assert_eq!(
        got, want,
        "one interface per input interface, filtered per link type"
    );
    // tshark agrees on the interfaces and lengths.
    if ringcap_testkit::netns::have_program("tshark") {
        let t = Command::new("tshark")
            .args([
                "-r",
                &out,
                "-T",
                "fields",
                "-e",
                "frame.interface_id",
                "-e",
                "frame.len",
            ])
            .output()
            .unwrap();
        let lines: Vec<String> = String::from_utf8_lossy(&t.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        let expect: Vec<String> = want
            .iter()
            .map(|(i, _, f)| format!("{i}\t{}", f.len()))
            .collect();
        assert_eq!(lines, expect, "tshark's view of the output");
    }
    // pcap output cannot hold two link types: refused before writing.
    let pcap_out = dir.file("out.pcap");
    let fin = ringcap(&["capture", "-r", input.to_str().unwrap(), "-w", &pcap_out]);
    assert_eq!(fin.code(), Some(2), "{}", fin.stderr);
    assert!(
        fin.stderr.contains("link types") && fin.stderr.contains("pcapng"),
        "{}",
        fin.stderr
    );
    assert!(
        !std::path::Path::new(&pcap_out).exists(),
        "refused, yet wrote {pcap_out}"
    );
}

#[test]
fn dev_null_is_a_valid_output() {
    let dir = TempDir::new("devnull");
    let input = dir.join("in.pcap");
    let sent = frames::mixed_sequence(&endpoints(), 50);
    ringcap_testkit::netns::write_pcap(&input, &sent).unwrap();
    for format in ["pcap", "pcapng"] {
        let json = dir.file(&format!("stats-{format}.json"));
        let fin = ringcap(&[
            "capture",
            "-r",
            input.to_str().unwrap(),
            "--format",
            format,
            "-w",
            "/dev/null",
            "--stats-json",
            &json,
        ]);
        fin.assert_ok(&format!("-w /dev/null --format {format}"));
        let recs = json_records(&json);
        let f = final_record(&recs);
        assert_eq!(num(f, "packets_written"), sent.len() as u64, "{f}");
    }
    assert!(std::path::Path::new("/dev/null").exists());
}

#[test]
fn help_is_grouped_and_lists_values() {
    let out = Command::new(bin())
        .args(["capture", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // clap wraps lines to the terminal width: compare with single spaces.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for heading in [
        "Input:",
        "Output:",
        "What to keep:",
        "Capture:",
        "Files: rotation and retention:",
        "Reporting:",
    ] {
        assert!(text.contains(heading), "no heading {heading:?} in:\n{text}");
    }
    for values in [
        "[possible values: pcap, pcapng, compressed]",
        "[possible values: direct, uring, buffered]",
        "[possible values: random, count]",
        "[possible values: host, adapter]",
        "[possible values: nano, micro]",
    ] {
        assert!(flat.contains(values), "no {values:?} in:\n{text}");
    }
    let top = Command::new(bin()).arg("--help").output().unwrap();
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(
        !top.contains("bench-sink"),
        "bench-sink is for bench/, not users:\n{top}"
    );
}

#[test]
fn unknown_option_is_reported_as_an_option() {
    let fin = ringcap(&[
        "capture",
        "-r",
        "in.pcap",
        "--anonymise",
        "KEY",
        "-w",
        "out.pcap",
    ]);
    assert_eq!(fin.code(), Some(2), "{}", fin.stderr);
    assert!(fin.stderr.contains("--anonymise"), "{}", fin.stderr);
    assert!(!fin.stderr.contains("filter expression"), "{}", fin.stderr);
}

/// A bad --stats-json path fails before the ring is allocated and before
/// `capturing on` (which scripts wait for), and no output file is made.
#[test]
fn bad_stats_json_fails_before_capturing() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("stats-first");
    let out = dir.file("out.pcap");
    let t = Instant::now();
    let mut cmd = tb.in_capture_ns(bin());
    cmd.args([
        "capture",
        "-i",
        &tb.capture_if,
        "-w",
        &out,
        "--stats-json",
        "/nonexistent-rc/x.json",
    ]);
    let (status, _, stderr) = run_limited(cmd, Duration::from_secs(15));
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--stats-json"), "{stderr}");
    assert!(
        !stderr.contains("capturing on"),
        "started before failing:\n{stderr}"
    );
    assert!(
        !std::path::Path::new(&out).exists(),
        "made {out} before failing"
    );
    // The default 256 MiB ring was never allocated (that takes ~0.5 s here).
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// `ringcap demo` (what README's first command runs) captures every frame
/// it sends.
#[test]
fn demo_captures_every_frame() {
    skip_unless_netns!();
    let dir = TempDir::new("demo");
    let out = dir.file("demo.pcap");
    let mut cmd = Command::new(bin());
    cmd.args(["demo", "--count", "200", "--output", &out]);
    let (status, stdout, stderr) = run_limited(cmd, Duration::from_secs(60));
    let text = format!("{}{stderr}", String::from_utf8_lossy(&stdout));
    assert!(status.success(), "{text}");
    assert!(text.contains("captured 200"), "{text}");
    assert_eq!(read(&out).len(), 200, "{text}");
}

/// `-w NAME.pcapng` writes pcapng and `-w NAME.pcap` pcap, as dumpcap and
/// tshark read the name; an explicit `--format` wins over the name.
#[test]
fn the_output_name_chooses_the_format_unless_format_is_given() {
    let dir = TempDir::new("format-by-name");
    let input = dir.join("in.pcap");
    let sent = frames::mixed_sequence(&endpoints(), 23);
    ringcap_testkit::netns::write_pcap(&input, &sent).expect("write input");
    let magic = |p: &str| {
        let b = std::fs::read(p).expect("read output");
        u32::from_le_bytes(b[..4].try_into().unwrap())
    };
    let run = |out: &str, extra: &[&str]| {
        let mut args = vec!["capture", "-r", input.to_str().unwrap(), "-w", out];
        args.extend_from_slice(extra);
        ringcap(&args).assert_ok(out);
    };
    let ng = dir.file("by-name.pcapng");
    run(&ng, &[]);
    assert_eq!(magic(&ng), 0x0a0d_0d0a, "{ng} is not pcapng");
    assert_eq!(read(&ng).len(), sent.len());
    let pcap = dir.file("by-name.pcap");
    run(&pcap, &[]);
    assert_eq!(magic(&pcap), 0xa1b2_3c4d, "{pcap} is not nanosecond pcap");
    let forced = dir.file("forced.pcapng");
    run(&forced, &["--format", "pcap"]);
    assert_eq!(
        magic(&forced),
        0xa1b2_3c4d,
        "--format pcap lost to the name"
    );
}

/// `-F FILE` reads the filter as tcpdump's -F does (comments to the end of
/// a line, several lines): the packets kept are those `tcpdump -F` keeps
/// from the same file; a filter on the command line as well, a missing file
/// and a file too big to be a filter are usage errors.
#[test]
fn filter_from_a_file_as_tcpdump_reads_it() {
    let dir = TempDir::new("filter-file");
    let input = dir.join("in.pcap");
    let sent = frames::mixed_sequence(&endpoints(), 300);
    ringcap_testkit::netns::write_pcap(&input, &sent).unwrap();
    let input = input.to_str().unwrap().to_string();
    let ff = dir.join("web-dns.bpf");
    std::fs::write(
        &ff,
        "# what we keep\n(udp and port 53) # names\n or\n tcp # all TCP\n",
    )
    .unwrap();
    let ff = ff.to_str().unwrap().to_string();
    let out = dir.file("out.pcap");
    ringcap(&["capture", "-r", &input, "-F", &ff, "-w", &out]).assert_ok("-F");
    let ours = tagged_seqs(&read(&out), "-F");
    let mut cmd = Command::new("tcpdump");
    cmd.args(["-nn", "-r", &input, "-F", &ff, "-w", "-"]);
    let (status, stdout, stderr) = run_limited(cmd, Duration::from_secs(30));
    assert!(status.success(), "tcpdump -F: {stderr}");
    let theirs = tagged_seqs(
        &ringcap_testkit::capture::parse_capture(&stdout)
            .expect("tcpdump output")
            .packets,
        "tcpdump -F",
    );
    assert!(
        !ours.is_empty() && ours.len() < sent.len(),
        "{}",
        ours.len()
    );
    assert_eq!(ours, theirs, "-F keeps what tcpdump -F keeps");

    let big = dir.join("big.bpf");
    std::fs::write(&big, "udp ".repeat(300_000)).unwrap();
    let big = big.to_str().unwrap().to_string();
    let missing = dir.join("missing.bpf").to_str().unwrap().to_string();
    for (args, says) in [
        (vec!["-F", ff.as_str(), "udp"], "give one of them"),
        (vec!["-F", missing.as_str()], "No such file"),
        (vec!["-F", big.as_str()], "not a filter expression"),
    ] {
        let mut a = vec!["capture", "-r", &input, "-w", &out, "--overwrite"];
        a.extend(args.iter().copied());
        let fin = ringcap(&a);
        assert_eq!(fin.code(), Some(2), "{args:?}: {}", fin.stderr);
        assert!(fin.stderr.contains(says), "{args:?}: {}", fin.stderr);
    }
}

/// Through ringcapd, options the daemon cannot honour are refused with the
/// reason, before any connection, not silently dropped (`--sample-mode
/// count` became random sampling; -W with --dump was ignored).
#[test]
fn options_ringcapd_cannot_honour_are_refused() {
    let dir = TempDir::new("daemon-options");
    let sock = dir.join("none.sock");
    let daemon = format!("--daemon={}", sock.display());
    let out = dir.file("x.pcap");
    for (extra, says) in [
        (vec!["--threads", "2", "-w", &out], "--threads"),
        (vec!["-B", "64M", "-w", &out], "-B"),
        (vec!["-p", "-w", &out], "-p (the capture is shared"),
        (vec!["--zero-copy", "on", "-w", &out], "--zero-copy on"),
        (vec!["--tstamp", "adapter", "-w", &out], "--tstamp adapter"),
        (
            vec!["--sample", "1:4", "--sample-mode", "count", "-w", &out],
            "--sample-mode count",
        ),
        (vec!["--dump", "-W", "2"], "dump_quota decides"),
        (
            vec!["--dump", "--post-rotate", "/bin/true"],
            "--post-rotate with --dump",
        ),
    ] {
        let mut a = vec!["capture", daemon.as_str(), "-i", "lo"];
        a.extend(extra.iter().copied());
        let fin = ringcap(&a);
        assert_eq!(fin.code(), Some(2), "{extra:?}: {}", fin.stderr);
        assert!(
            fin.stderr.contains("cannot be honoured") && fin.stderr.contains(says),
            "{extra:?}: {}",
            fin.stderr
        );
    }
    // Without them, the same command goes on to the (absent) daemon.
    let fin = ringcap(&["capture", daemon.as_str(), "-i", "lo", "-w", &out]);
    assert!(!fin.stderr.contains("cannot be honoured"), "{}", fin.stderr);
    assert_ne!(fin.code(), Some(0), "{}", fin.stderr);
}

/// Mistakes found by the QA pass are usage errors (exit 2) said before
/// anything is made: an interface given twice; -Z without the right to
/// change user (it failed after the first file was opened, and left it
/// hidden); an empty time window asked of ringcapd.
#[test]
fn more_mistakes_are_usage_errors_before_anything_is_made() {
    let dir = TempDir::new("mistakes");
    let out = dir.file("x.pcap");
    let fin = ringcap(&["capture", "-i", "lo", "-i", "lo", "-w", &out]);
    assert_eq!(fin.code(), Some(2), "{}", fin.stderr);
    assert!(
        fin.stderr.contains("-i lo is given twice"),
        "{}",
        fin.stderr
    );
    let fin = ringcap(&[
        "query",
        "--daemon=/nonexistent/none.sock",
        "-i",
        "lo",
        "--after",
        "1800000000",
        "--before",
        "1700000000",
        "-w",
        &out,
        "udp",
    ]);
    assert_eq!(fin.code(), Some(2), "{}", fin.stderr);
    assert!(
        fin.stderr.contains("the time window is empty"),
        "{}",
        fin.stderr
    );
    // -Z as an unprivileged user, into a directory it may write.
    let open = TempDir::new("mistakes-open");
    std::fs::set_permissions(
        open.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let input = open.join("in.pcap");
    ringcap_testkit::netns::write_pcap(&input, &frames::mixed_sequence(&endpoints(), 5)).unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(bin())
        .args(["capture", "-r"])
        .arg(&input)
        .args(["-Z", "nobody", "-w"])
        .arg(open.join("z.pcap"))
        .output()
        .expect("setpriv");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("needs root"), "{err}");
    let left: Vec<_> = std::fs::read_dir(open.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("in.pcap")],
        "files left"
    );
}
