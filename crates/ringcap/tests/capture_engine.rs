//! Integration tests of the capture engine: real frames sent over a veth pair
//! between two throw-away network namespaces (ringcap-testkit's `Testbed`),
//! captured by the `ringcap` binary and checked byte for byte against what was
//! sent, with tcpdump as the oracle for filters.
//!
//! Every test that needs namespaces prints `SKIP: ...` and passes when not root
//! (fails, with `RINGCAP_REQUIRE_PRIVILEGED_TESTS=1`).

mod common;

use common::*;
use ringcap_testkit::capture::{self, CapturedPacket};
use ringcap_testkit::frames::{self, Endpoints, Shape};
use ringcap_testkit::{skip_unless_netns, Testbed};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Now, in nanoseconds since the Unix epoch.
fn epoch_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Number of mixed frames per full-capture run: 40 of each of the 23 shapes.
const MIXED_N: usize = 920;

/// Checks a full (default snaplen) capture of `sent`: every frame once, byte for
/// byte, with its original length, nothing else, and send order kept within
/// each flow.
fn check_full_capture(sent: &[Vec<u8>], got: &[CapturedPacket], what: &str) {
    let index = by_seq(sent);
    let seqs = tagged_seqs(got, what);
    let mut seen = HashSet::new();
    for (p, &s) in got.iter().zip(&seqs) {
        let i = *index
            .get(&s)
            .unwrap_or_else(|| panic!("{what}: captured seq {s} was never sent"));
        assert!(seen.insert(s), "{what}: seq {s} captured twice");
        let f = &sent[i];
        let shape = frames::mixed_shape(s);
        assert_eq!(
            p.wire_len as usize,
            f.len(),
            "{what}: seq {s} ({shape:?}) original length"
        );
        assert_eq!(
            p.data, *f,
            "{what}: seq {s} ({shape:?}) captured bytes differ from the sent frame"
        );
    }
    let missing: Vec<(u32, Shape)> = (0..sent.len() as u32)
        .filter(|s| !seen.contains(s))
        .map(|s| (s, frames::mixed_shape(s)))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: {} of {} frames missing: {:?}",
        missing.len(),
        sent.len(),
        &missing[..missing.len().min(20)]
    );
    // Order within a flow: (shape, flow) is finer than any kernel flow hash, so
    // these frames all went through one fanout member.
    let mut last: HashMap<(Shape, u32), u32> = HashMap::new();
    for &s in &seqs {
        let key = (frames::mixed_shape(s), frames::mixed_flow(s));
        if let Some(prev) = last.insert(key, s) {
            assert!(
                prev < s,
                "{what}: flow {key:?}: seq {s} captured after {prev}"
            );
        }
    }
}

/// Sends `MIXED_N` mixed frames and captures them with `--threads threads`.
fn mixed_full_capture(threads: u32) {
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("mixed");
    let out = dir.file("out.pcap");
    let stats = dir.file("stats.json");
    let threads_s = threads.to_string();
    let sent = frames::mixed_sequence(&tb.endpoints(), MIXED_N);
    let t_start = epoch_ns();
    let run = start(
        &tb,
        &["--threads", &threads_s, "-w", &out, "--stats-json", &stats],
    );
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.stop();
    fin.assert_ok("mixed capture");
    fin.assert_no_loss("mixed capture");
    let t_end = epoch_ns();
    let got = read(&out);
    let what = format!("--threads {threads}");
    check_full_capture(&sent, &got, &what);
    // Host timestamps: nanosecond pcap, taken while the capture ran, and never
    // going back within a flow.
    let file = capture::read_capture(&out).expect("read");
    assert_eq!(file.format, capture::CaptureFormat::PcapNano, "{what}");
    assert_eq!(file.linktypes, vec![1], "{what}");
    let mut last_ts: HashMap<(Shape, u32), u64> = HashMap::new();
    for p in &got {
        assert!(
            (t_start..=t_end).contains(&p.ts_ns),
            "{what}: timestamp {} outside the capture [{t_start}, {t_end}]",
            p.ts_ns
        );
        let s = frames::seq_of(&p.data).unwrap();
        let key = (frames::mixed_shape(s), frames::mixed_flow(s));
        if let Some(prev) = last_ts.insert(key, p.ts_ns) {
            assert!(prev <= p.ts_ns, "{what}: seq {s}: timestamp went back");
        }
    }

    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, &what);
    assert_eq!(num(f, "packets_written"), sent.len() as u64, "{what}: {f}");
    assert_eq!(
        num(f, "packets_delivered"),
        sent.len() as u64,
        "{what}: {f}"
    );
    let wire: u64 = sent.iter().map(|f| f.len() as u64).sum();
    assert_eq!(num(f, "bytes_on_wire"), wire, "{what}: bytes_on_wire");
    let size = std::fs::metadata(&out).expect("out").len();
    assert_eq!(
        num(f, "bytes_written"),
        size,
        "{what}: bytes_written vs the size of the file"
    );
    assert_eq!(fin.report_value("written"), Some(sent.len() as u64));
}

#[test]
fn mixed_frames_captured_exactly_one_thread() {
    skip_unless_netns!();
    mixed_full_capture(1);
}

#[test]
fn mixed_frames_captured_exactly_two_threads() {
    skip_unless_netns!();
    mixed_full_capture(2);
}

// ---------------------------------------------------------------------------
// Snap lengths

/// Starts a reference tcpdump (full frames, no filter, stops after `n` packets) so
/// that truncated captures, whose sequence tags may be cut off, can be matched to
/// the frames sent by arrival position: every packet socket of the interface sees
/// the frames in the same order.
fn reference_tcpdump(tb: &Testbed, dir: &TempDir, n: usize) -> (capture::Tcpdump, String) {
    let path = dir.file("reference.pcap");
    let td = capture::start_tcpdump(tb, std::path::Path::new(&path), Some(n as u64), "")
        .expect("start tcpdump");
    (td, path)
}

/// The frames sent, in the order the reference capture saw them.
fn arrival_order<'a>(
    sent: &'a [Vec<u8>],
    reference: &[CapturedPacket],
    what: &str,
) -> Vec<&'a Vec<u8>> {
    let index = by_seq(sent);
    let order: Vec<&Vec<u8>> = tagged_seqs(reference, what)
        .iter()
        .map(|s| &sent[index[s]])
        .collect();
    assert_eq!(
        order.len(),
        sent.len(),
        "{what}: the reference tcpdump did not see every frame"
    );
    order
}

/// Captures `sent` with each of `variants` (extra ringcap arguments) at once, plus
/// a reference tcpdump; returns the frames in arrival order and each variant's
/// packets.
fn capture_variants(
    tb: &Testbed,
    sent: &[Vec<u8>],
    variants: &[&[&str]],
) -> (Vec<Vec<u8>>, Vec<Vec<CapturedPacket>>) {
    let dir = TempDir::new("variants");
    let (td, ref_path) = reference_tcpdump(tb, &dir, sent.len());
    let mut runs = Vec::new();
    let mut outs = Vec::new();
    // One directory per ringcap process: a ringcap starting in a directory takes
    // over other processes' partial files there (see
    // concurrent_captures_in_one_directory_keep_their_files).
    let dirs: Vec<TempDir> = variants.iter().map(|_| TempDir::new("variant")).collect();
    for (i, v) in variants.iter().enumerate() {
        let out = dirs[i].file("out.pcap");
        let mut args: Vec<&str> = vec!["-w", &out];
        args.extend_from_slice(v);
        runs.push(start(tb, &args));
        outs.push(out);
    }
    tb.send_from_peer(sent, 0).expect("send");
    let fins = stop_all(runs);
    td.finish(Duration::from_secs(5)).expect("tcpdump");
    for (f, v) in fins.iter().zip(variants) {
        f.assert_ok(&format!("ringcap {v:?}"));
        f.assert_no_loss(&format!("ringcap {v:?}"));
    }
    let reference = read(&ref_path);
    let order = arrival_order(sent, &reference, "reference tcpdump")
        .into_iter()
        .cloned()
        .collect();
    (order, outs.iter().map(read).collect())
}

/// Checks that `got[i]` is the first `expect_len(frame)` bytes of the i-th frame
/// to arrive, with the full original length.
fn check_truncated(
    order: &[Vec<u8>],
    got: &[CapturedPacket],
    expect_len: impl Fn(&[u8]) -> usize,
    what: &str,
) {
    assert_eq!(got.len(), order.len(), "{what}: number of packets");
    for (i, (p, f)) in got.iter().zip(order).enumerate() {
        let s = frames::seq_of(f).expect("tagged");
        let shape = frames::mixed_shape(s);
        let want = expect_len(f);
        assert_eq!(
            p.data.len(),
            want,
            "{what}: packet {i} (seq {s}, {shape:?}, {} bytes): captured length",
            f.len()
        );
        assert_eq!(
            p.data,
            f[..want],
            "{what}: packet {i} (seq {s}, {shape:?}) is not a prefix of the sent frame"
        );
        assert_eq!(
            p.wire_len as usize,
            f.len(),
            "{what}: packet {i} (seq {s}, {shape:?}) original length"
        );
    }
}

#[test]
fn snaplen_64_keeps_first_64_bytes() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 460);
    let (order, got) = capture_variants(
        &tb,
        &sent,
        &[&["-s", "64"], &["-s", "64", "--format", "pcapng"]],
    );
    check_truncated(&order, &got[0], |f| f.len().min(64), "-s 64");
    check_truncated(
        &order,
        &got[1],
        |f| f.len().min(64),
        "-s 64 --format pcapng",
    );
}

/// An IPv4/TCP frame whose TCP header has 12 bytes of options (NOP, NOP,
/// timestamps: data offset 8), with a tagged payload: headers = 14 + 20 + 32 = 66.
fn tcp_with_12_bytes_of_options(ep: &Endpoints, seq: u32) -> Vec<u8> {
    let payload = frames::tagged_payload(seq, 40);
    let mut tcp = Vec::new();
    tcp.extend_from_slice(&12345u16.to_be_bytes());
    tcp.extend_from_slice(&80u16.to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&0u32.to_be_bytes());
    tcp.push(8 << 4);
    tcp.push(0x18);
    tcp.extend_from_slice(&1000u16.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 0]);
    tcp.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    tcp.extend_from_slice(&payload);
    let c = frames::l4_checksum(ep.src_ip.into(), ep.dst_ip.into(), frames::proto::TCP, &tcp);
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, frames::proto::TCP, 0, 0]);
    ip.extend_from_slice(&ep.src_ip.octets());
    ip.extend_from_slice(&ep.dst_ip.octets());
    let c = frames::internet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = ep.dst_mac.to_vec();
    f.extend_from_slice(&ep.src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&tcp);
    f
}

/// Header lengths worked out by hand for shapes whose headers are unambiguous.
fn hand_header_len(shape: Shape) -> Option<usize> {
    Some(match shape {
        Shape::Udp4 | Shape::Udp4Max | Shape::Runt => 14 + 20 + 8,
        Shape::Tcp4Options => 14 + 20 + 20 + frames::TCP_SYN_OPTIONS.len(),
        Shape::VlanUdp4 => 14 + 4 + 20 + 8,
        Shape::QinQUdp4 => 14 + 8 + 20 + 8,
        Shape::Ipv4Options => 14 + 20 + frames::IPV4_OPTIONS.len() + 8,
        Shape::IcmpEcho => 14 + 20 + 8,
        Shape::ArpRequest | Shape::ArpReply => 14 + 28,
        Shape::Ipv4FragFirst => 14 + 20 + 8,
        Shape::Ipv4FragLater => 14 + 20,
        Shape::Udp6 => 14 + 40 + 8,
        Shape::Icmp6Echo => 14 + 40 + 8,
        // hop-by-hop 8, dstopts 8, routing 24, fragment 8, AH 24, TCP 20
        Shape::Ipv6ExtTcp | Shape::Ipv6ExtTcpRt0 => 14 + 40 + 8 + 8 + 24 + 8 + 24 + 20,
        // outer IPv4, GRE with key, inner IPv4, UDP
        Shape::GreUdp4 => 14 + 20 + 8 + 20 + 8,
        // outer IPv4, UDP, VXLAN, inner Ethernet, IPv4, UDP
        Shape::Vxlan => 14 + 20 + 8 + 8 + 14 + 20 + 8,
        _ => return None,
    })
}

#[test]
fn snaplen_headers_keeps_exactly_the_headers() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let ep = tb.endpoints();
    let mut sent = frames::mixed_sequence(&ep, 460);
    // Two frames with a 12-byte-options TCP header, tagged far from the others.
    for s in [100_000, 100_001] {
        sent.push(tcp_with_12_bytes_of_options(&ep, s));
    }
    // The oracle agrees with the hand-computed lengths where they are clear.
    for f in &sent {
        let s = frames::seq_of(f).unwrap();
        let want = if s >= 100_000 {
            Some(66)
        } else {
            hand_header_len(frames::mixed_shape(s))
        };
        if let Some(w) = want {
            assert_eq!(
                ringcap_wire::header_len(f, 256),
                w,
                "seq {s} {:?}: wire crate vs hand",
                frames::mixed_shape(s)
            );
        }
    }
    let (order, got) = capture_variants(&tb, &sent, &[&["-s", "headers"]]);
    check_truncated(
        &order,
        &got[0],
        |f| ringcap_wire::header_len(f, 256),
        "-s headers",
    );
    // By hand: VLAN UDP keeps 46 bytes.
    let vlan_at = order
        .iter()
        .position(|f| frames::mixed_shape(frames::seq_of(f).unwrap()) == Shape::VlanUdp4)
        .unwrap();
    assert_eq!(got[0][vlan_at].data.len(), 46);
}

/// `--headers-max 40` caps what `-s headers` keeps: each packet keeps
/// `header_len(frame, 40)` bytes, as offline (`offline_snaplen_and_headers`).
/// Lists every shape that differs.
#[test]
fn snaplen_headers_max_caps_at_40() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 230);
    let (order, got) = capture_variants(&tb, &sent, &[&["-s", "headers", "--headers-max", "40"]]);
    let got = &got[0];
    assert_eq!(got.len(), order.len());
    let mut wrong: BTreeSet<String> = BTreeSet::new();
    for (p, f) in got.iter().zip(&order) {
        let shape = frames::mixed_shape(frames::seq_of(f).unwrap());
        let want = ringcap_wire::header_len(f, 40);
        assert!(p.data.len() <= 40, "{shape:?}: kept {} > 40", p.data.len());
        assert_eq!(p.data, f[..p.data.len()], "{shape:?}: not a prefix");
        assert_eq!(p.wire_len as usize, f.len(), "{shape:?}: original length");
        if p.data.len() != want {
            wrong.insert(format!(
                "{shape:?}: kept {} bytes, header_len(frame, 40) = {want}",
                p.data.len()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "-s headers --headers-max 40 (live):\n{}",
        wrong.into_iter().collect::<Vec<_>>().join("\n")
    );
}

// ---------------------------------------------------------------------------
// Filters

/// Filters compared with live tcpdump, and for some the shapes they must select
/// as seen on a live Linux interface (the outer VLAN tag already stripped, so
/// `udp` also matches single-tagged UDP).
fn filter_cases() -> Vec<(&'static str, Option<Vec<Shape>>)> {
    use Shape::*;
    vec![
        ("udp", None),
        ("tcp port 20001", None),
        ("icmp or arp", Some(vec![IcmpEcho, ArpRequest, ArpReply])),
        (
            "ip6",
            Some(vec![Udp6, Ipv6ExtTcp, Icmp6Echo, Ipv6ExtTcpRt0]),
        ),
        ("vlan", Some(vec![VlanUdp4, QinQUdp4])),
        ("not udp", None),
        ("ip[6:2] & 0x1fff != 0", Some(vec![Ipv4FragLater])),
        ("vlan 101 and udp", None),
        ("udp port 4789", Some(vec![Vxlan])),
        ("ip6 and tcp", None),
        ("ether broadcast", Some(vec![ArpRequest])),
        ("greater 1000", Some(vec![Udp4Max])),
        ("ip proto 47 or sctp", Some(vec![GreUdp4, Sctp4])),
        ("tcp[tcpflags] & tcp-syn != 0", None),
    ]
}

/// Runs ringcap and tcpdump with the same filters side by side on the same
/// frames, and compares what each selected.
fn compare_filters_live(cases: &[(&'static str, Option<Vec<Shape>>)]) {
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("filters");
    let sent = frames::mixed_sequence(&tb.endpoints(), 460);
    let mut runs = Vec::new();
    let mut dumps = Vec::new();
    // One directory per ringcap process (see capture_variants).
    let dirs: Vec<TempDir> = cases.iter().map(|_| TempDir::new("filter")).collect();
    for (i, (f, _)) in cases.iter().enumerate() {
        let out = dirs[i].file("rc.pcap");
        let td_out = dir.join(format!("td{i}.pcap"));
        dumps.push((
            capture::start_tcpdump(&tb, &td_out, None, f).expect("tcpdump"),
            td_out,
        ));
        runs.push((start(&tb, &["-w", &out, f]), out));
    }
    tb.send_from_peer(&sent, 0).expect("send");
    let (runs, outs): (Vec<_>, Vec<_>) = runs.into_iter().unzip();
    let fins = stop_all(runs);
    let mut failures = Vec::new();
    for (((fin, out), (td, td_out)), (filter, shapes)) in
        fins.iter().zip(&outs).zip(dumps).zip(cases)
    {
        fin.assert_ok(filter);
        fin.assert_no_loss(filter);
        td.finish(Duration::ZERO).expect("tcpdump");
        let mine: BTreeSet<u32> = tagged_seqs(&read(out), filter).into_iter().collect();
        let theirs: BTreeSet<u32> = tagged_seqs(&read(&td_out), filter).into_iter().collect();
        let shape_list = |s: &BTreeSet<u32>| -> BTreeSet<String> {
            s.iter()
                .map(|&q| format!("{:?}", frames::mixed_shape(q)))
                .collect()
        };
        if mine != theirs {
            failures.push(format!(
                "filter {filter:?}: ringcap kept {} frames (shapes {:?}), tcpdump {} (shapes {:?}); only ringcap: {:?}; only tcpdump: {:?}",
                mine.len(),
                shape_list(&mine),
                theirs.len(),
                shape_list(&theirs),
                mine.difference(&theirs).take(10).collect::<Vec<_>>(),
                theirs.difference(&mine).take(10).collect::<Vec<_>>(),
            ));
        }
        if let Some(shapes) = shapes {
            let want: BTreeSet<u32> = (0..sent.len() as u32)
                .filter(|s| shapes.contains(&frames::mixed_shape(*s)))
                .collect();
            if mine != want {
                failures.push(format!(
                    "filter {filter:?}: ringcap kept shapes {:?}, expected exactly {shapes:?}",
                    shape_list(&mine)
                ));
            }
        }
        assert!(
            !mine.is_empty() || shapes.is_none(),
            "{filter}: nothing kept"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn filters_select_what_tcpdump_selects() {
    skip_unless_netns!();
    let cases = filter_cases();
    let (a, b) = cases.split_at(cases.len() / 2);
    // Two halves, so fewer processes share one interface at a time.
    compare_filters_live(a);
    compare_filters_live(b);
}

/// Two captures writing different files in one directory: each must end with its
/// own complete file. A ringcap starting up treats every hidden partial file in
/// its output directory as left over by a crash and "recovers" it (renames it to
/// its final name) — including the file another ringcap is still writing, which
/// then fails at exit when its own rename finds nothing.
#[test]
fn concurrent_captures_in_one_directory_keep_their_files() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("shared-dir");
    let a = dir.file("a.pcap");
    let b = dir.file("b.pcap");
    let sent = frames::mixed_sequence(&tb.endpoints(), 100);
    // A flushes often, so its partial file holds a valid header when B starts.
    let run_a = start(&tb, &["-w", &a, "--flush-interval", "0.1"]);
    std::thread::sleep(Duration::from_millis(400));
    let run_b = start(&tb, &["-w", &b]);
    tb.send_from_peer(&sent, 0).expect("send");
    let fins = stop_all(vec![run_a, run_b]);
    for f in &fins {
        assert_no_panic(&f.stderr, "concurrent captures");
        f.assert_no_loss("concurrent captures");
    }
    assert!(
        fins.iter().all(|f| f.code() == Some(0)),
        "capture A exited {:?}, capture B {:?}\n--- A's stderr:\n{}\n--- B's stderr:\n{}",
        fins[0].code(),
        fins[1].code(),
        fins[0].stderr,
        fins[1].stderr
    );
    for (name, path) in [("A", &a), ("B", &b)] {
        let got = read(path);
        assert_eq!(got.len(), sent.len(), "capture {name}: packets in {path}");
    }
}

// ---------------------------------------------------------------------------
// Sampling

#[test]
fn sample_random_keeps_about_one_in_four() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("sample-random");
    let out = dir.file("out.pcap");
    let stats = dir.file("stats.json");
    let n = 4000usize;
    let sent = frames::mixed_sequence(&tb.endpoints(), n);
    let run = start(
        &tb,
        &["--sample", "1:4", "-w", &out, "--stats-json", &stats],
    );
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.stop();
    fin.assert_ok("--sample 1:4");
    fin.assert_no_loss("--sample 1:4");
    let got = read(&out);
    // Binomial(4000, 1/4): mean 1000, sd 27.4; 6 sd either side.
    let k = got.len() as f64;
    let (mean, sd) = (n as f64 / 4.0, (n as f64 * 0.25 * 0.75).sqrt());
    assert!(
        (k - mean).abs() <= 6.0 * sd,
        "--sample 1:4 kept {k} of {n} (expected {mean} ± {:.0})",
        6.0 * sd
    );
    // What was kept is intact and unique.
    let index = by_seq(&sent);
    let mut seen = HashSet::new();
    for (p, s) in got.iter().zip(tagged_seqs(&got, "sample")) {
        assert!(seen.insert(s), "seq {s} twice");
        assert_eq!(p.data, sent[index[&s]], "seq {s} bytes");
    }
    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, "--sample 1:4 final");
    assert_eq!(num(f, "packets_filter_accepted"), n as u64, "{f}");
    assert_eq!(num(f, "packets_delivered"), got.len() as u64, "{f}");
    assert_eq!(num(f, "packets_written"), got.len() as u64, "{f}");
    assert_eq!(
        num(f, "packets_sampled_out") + num(f, "packets_delivered"),
        n as u64,
        "{f}"
    );
}

#[test]
fn sample_count_keeps_exactly_every_fourth() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 1000);
    let (order, got) = capture_variants(
        &tb,
        &sent,
        &[&[
            "--sample",
            "1:4",
            "--sample-mode",
            "count",
            "--threads",
            "1",
        ]],
    );
    let want: Vec<u32> = order
        .iter()
        .skip(3)
        .step_by(4)
        .map(|f| frames::seq_of(f).unwrap())
        .collect();
    let kept = tagged_seqs(&got[0], "count sampling");
    assert_eq!(kept.len(), 250, "kept {} of 1000", kept.len());
    assert_eq!(
        kept, want,
        "count sampling must keep the 4th, 8th, ... frame"
    );
}

/// Flow `i` of [`two_way_flows`]: its endpoints (MACs from `base`, addresses in
/// `base`'s /24 and fd52:4300:X::/64) and ports.
fn flow_endpoints(base: &Endpoints, i: u32) -> (Endpoints, u16, u16) {
    let x = base.dst_ip.octets()[2];
    let a4 = std::net::Ipv4Addr::new(198, 18, x, 10 + (i % 50) as u8);
    let b4 = std::net::Ipv4Addr::new(198, 18, x, 100 + (i % 37) as u8);
    let a6 = std::net::Ipv6Addr::new(0xfd52, 0x4300, u16::from(x), 0, 0, 0, 1, i as u16);
    let b6 = std::net::Ipv6Addr::new(0xfd52, 0x4300, u16::from(x), 0, 0, 0, 2, 7);
    let ep = Endpoints::new(base.src_mac, base.dst_mac)
        .with_ipv4(a4, b4)
        .with_ipv6(a6, b6);
    (ep, 30000 + i as u16, 40000 + (i * 7 % 1000) as u16)
}

/// `flows` flows (UDP/IPv4, TCP/IPv4, UDP/IPv6 in turn), each with
/// `per_dir` packets A→B and as many B→A (addresses and ports swapped),
/// interleaved. Frame `k` of flow `i` has seq `i * 2 * per_dir + k`.
fn two_way_flows(base: &Endpoints, flows: u32, per_dir: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for k in 0..2 * per_dir {
        for i in 0..flows {
            let (ep, pa, pb) = flow_endpoints(base, i);
            let seq = i * 2 * per_dir + k;
            let back = k % 2 == 1;
            let ep = if back {
                let mut r = ep;
                std::mem::swap(&mut r.src_ip, &mut r.dst_ip);
                std::mem::swap(&mut r.src_ip6, &mut r.dst_ip6);
                r
            } else {
                ep
            };
            let (sp, dp) = if back { (pb, pa) } else { (pa, pb) };
            let f = match i % 3 {
                0 => frames::udp4(&ep, seq, sp, dp, 20),
                1 => frames::tcp4_with_options(&ep, seq, sp, dp, 20),
                _ => frames::udp6(&ep, seq, sp, dp, 20),
            };
            out.push(f);
        }
    }
    out
}

#[test]
fn sample_flows_keeps_whole_flows_both_directions() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("sample-flows");
    let out = dir.file("out.pcap");
    let stats = dir.file("stats.json");
    let (flows, per_dir) = (240u32, 3u32);
    let sent = two_way_flows(&tb.endpoints(), flows, per_dir);
    let run = start(
        &tb,
        &["--sample-flows", "1:4", "-w", &out, "--stats-json", &stats],
    );
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.stop();
    fin.assert_ok("--sample-flows 1:4");
    fin.assert_no_loss("--sample-flows 1:4");
    let got = read(&out);
    let index = by_seq(&sent);
    let mut per_flow: HashMap<u32, BTreeSet<u32>> = HashMap::new();
    for (p, s) in got.iter().zip(tagged_seqs(&got, "flow sampling")) {
        assert_eq!(p.data, sent[index[&s]], "seq {s} bytes");
        assert!(
            per_flow
                .entry(s / (2 * per_dir))
                .or_default()
                .insert(s % (2 * per_dir)),
            "seq {s} captured twice"
        );
    }
    for (flow, ks) in &per_flow {
        assert_eq!(
            ks.len() as u32,
            2 * per_dir,
            "flow {flow} (kind {}) kept only packets {ks:?} of 0..{} (odd = B→A)",
            flow % 3,
            2 * per_dir
        );
    }
    // Binomial(240, 1/4): mean 60, sd 6.7; 6 sd either side.
    let kept = per_flow.len() as f64;
    assert!(
        (20.0..=100.0).contains(&kept),
        "kept {kept} of {flows} flows with --sample-flows 1:4"
    );
    // Each kind of flow is sampled at all.
    for kind in 0..3 {
        assert!(
            per_flow.keys().any(|f| f % 3 == kind),
            "no flow of kind {kind} kept: {:?}",
            per_flow.keys().collect::<Vec<_>>()
        );
    }
    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, "--sample-flows final");
    assert_eq!(
        num(f, "packets_sampled_out") + num(f, "packets_delivered"),
        num(f, "packets_filter_accepted"),
        "{f}"
    );
    assert_eq!(num(f, "packets_filter_accepted"), sent.len() as u64, "{f}");
    assert_eq!(num(f, "packets_written"), got.len() as u64, "{f}");
}

// ---------------------------------------------------------------------------
// Counters

#[test]
fn counters_add_up_in_every_json_record() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("counters");
    let out = dir.file("out.pcap");
    let stats = dir.file("stats.json");
    let sent = frames::mixed_sequence(&tb.endpoints(), 3000);
    let run = start(
        &tb,
        &[
            "-w",
            &out,
            "--stats-json",
            &stats,
            "--stats-interval",
            "0.2",
        ],
    );
    let epoch = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    std::thread::sleep(Duration::from_millis(500));
    let t_send = epoch();
    tb.send_from_peer(&sent, 6000).expect("send");
    let t_sent = epoch();
    std::thread::sleep(Duration::from_millis(1200));
    let fin = run.stop();
    fin.assert_ok("counters");
    fin.assert_no_loss("counters");
    let got = read(&out);
    assert_eq!(got.len(), sent.len());

    let recs = json_records(&stats);
    assert!(
        recs.len() >= 6,
        "expected interval records every 0.2 s, got {}",
        recs.len()
    );
    let f = final_record(&recs);
    let mut prev: Option<&serde_json::Value> = None;
    let mut quiet = 0;
    for (i, r) in recs.iter().enumerate() {
        let what = format!("record {i}");
        let t = r["time"].as_f64().expect("time");
        let is_final = r["final"] == true;
        // Quiet: before the first frame, or well after the last (the capture
        // thread refreshes the kernel's counts every 250 ms).
        let is_quiet = t < t_send || t > t_sent + 0.6;
        for k in COUNTERS {
            num(r, k);
        }
        check_interface_sums(r, &what);
        let ifc = &r["interfaces"][tb.capture_if.as_str()];
        assert!(
            ifc.is_object(),
            "{what}: no entry for {} in {r}",
            tb.capture_if
        );
        if is_quiet || is_final {
            quiet += 1;
            check_identities(r, is_final, &what);
            check_identities(ifc, is_final, &format!("{what} interface"));
        }
        let written = num(r, "packets_written") + num(r, "packets_dropped_writer");
        assert!(written <= num(r, "packets_delivered"), "{what}: {r}");
        assert!(
            num(r, "packets_seen_by_interface") >= num(r, "packets_filter_accepted") || !is_quiet,
            "{what}: seen_by_interface < filter_accepted: {r}"
        );
        if let Some(p) = prev {
            for k in COUNTERS {
                assert!(
                    num(r, k) >= num(p, k),
                    "{what}: {k} went down: {p} then {r}"
                );
            }
        }
        prev = Some(r);
    }
    assert!(quiet >= 3, "too few quiet records to check: {quiet}");
    check_identities(f, true, "final");
    assert_eq!(num(f, "packets_written"), got.len() as u64, "final: {f}");
    assert_eq!(
        num(f, "packets_filter_accepted"),
        sent.len() as u64,
        "final: {f}"
    );
    assert!(
        num(f, "packets_seen_by_interface") >= num(f, "packets_filter_accepted"),
        "final: {f}"
    );
    assert_eq!(num(f, "packets_dropped_ring"), 0, "final: {f}");
    assert_eq!(fin.report_value("accepted by the filter"), Some(3000));
    assert_eq!(fin.report_value("written"), Some(3000));
}

// ---------------------------------------------------------------------------
// Several interfaces

#[test]
fn same_interface_twice_is_refused() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("twice");
    let out = dir.file("out.pcap");
    let mut cmd = tb.in_capture_ns(bin());
    cmd.args(["capture", "-i", &tb.capture_if, "-i", &tb.capture_if])
        .args(["-B", "8M", "-w", &out]);
    let (status, _, stderr) = run_limited(cmd, Duration::from_secs(20));
    assert_no_panic(&stderr, "-i A -i A");
    assert_eq!(status.code(), Some(2), "-i A -i A: stderr:\n{stderr}");
    assert!(
        stderr.contains(&tb.capture_if) && stderr.contains("twice"),
        "message should name the interface and say it was given twice: {stderr}"
    );
    assert!(!std::path::Path::new(&out).exists(), "no output file");
}

/// The testbed's veth end and the capture namespace's loopback (up, and silent:
/// nothing in the namespace talks) captured together. The testkit can only send
/// on its one veth pair, so the second interface carries no traffic; the test
/// checks that each is accounted separately and the totals are their sums.
#[test]
fn two_interfaces_are_accounted_separately() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("two-ifaces");
    let out = dir.file("out.pcapng");
    let stats = dir.file("stats.json");
    let sent = frames::mixed_sequence(&tb.endpoints(), 230);
    let run = start_with(
        &tb,
        &["-i", &tb.capture_if, "-i", "lo", "-B", "8M"],
        &["--format", "pcapng", "-w", &out, "--stats-json", &stats],
        Stdio::null(),
    );
    assert!(
        run.ready_line.contains(&tb.capture_if) && run.ready_line.contains("lo"),
        "{}",
        run.ready_line
    );
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.stop();
    fin.assert_ok("two interfaces");
    fin.assert_no_loss("two interfaces");
    let file = capture::read_capture(&out).expect("read pcapng");
    assert_eq!(file.format, capture::CaptureFormat::PcapNg);
    assert_eq!(file.linktypes, vec![1, 1], "one IDB per interface");
    check_full_capture(&sent, &file.packets, "two interfaces");

    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, "two interfaces total");
    check_interface_sums(f, "two interfaces final");
    let ifaces = f["interfaces"].as_object().expect("interfaces");
    assert_eq!(ifaces.len(), 2, "{f}");
    let veth = &f["interfaces"][tb.capture_if.as_str()];
    let lo = &f["interfaces"]["lo"];
    check_identities(veth, true, "veth");
    check_identities(lo, true, "lo");
    assert_eq!(num(veth, "packets_written"), sent.len() as u64, "{f}");
    assert_eq!(
        num(veth, "packets_filter_accepted"),
        sent.len() as u64,
        "{f}"
    );
    assert_eq!(num(lo, "packets_written"), 0, "{f}");
    assert_eq!(num(lo, "packets_filter_accepted"), 0, "{f}");
    assert_eq!(num(f, "packets_written"), sent.len() as u64, "{f}");
    // The report has one block per interface and a total.
    assert!(
        fin.stderr
            .contains(&format!("interface {}:", tb.capture_if))
            && fin.stderr.contains("interface lo:")
            && fin.stderr.contains("total:"),
        "{}",
        fin.stderr
    );
}

// ---------------------------------------------------------------------------
// Standard output

#[test]
fn stdout_stream_is_readable_by_tcpdump() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("stdout");
    let sent = frames::mixed_sequence(&tb.endpoints(), 460);
    let mut run = start_with(
        &tb,
        &["-i", &tb.capture_if, "-B", "8M"],
        &["-w", "-"],
        Stdio::piped(),
    );
    let mut stdout = run.child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).map(|_| v)
    });
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.stop();
    fin.assert_ok("-w -");
    fin.assert_no_loss("-w -");
    let bytes = reader.join().unwrap().expect("read stdout");
    // Our independent reader: the stream is exactly the capture.
    let file = capture::parse_capture(&bytes).expect("stdout is a pcap stream");
    assert_eq!(file.format, capture::CaptureFormat::PcapNano);
    check_full_capture(&sent, &file.packets, "-w -");
    // And tcpdump reads it from a pipe.
    let copy = dir.join("copy.pcap");
    let mut td = std::process::Command::new("tcpdump")
        .args(["-nn", "-r", "-", "-w"])
        .arg(&copy)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump");
    std::io::Write::write_all(td.stdin.as_mut().unwrap(), &bytes).expect("pipe to tcpdump");
    drop(td.stdin.take());
    let out = td.wait_with_output().expect("tcpdump");
    assert!(
        out.status.success(),
        "tcpdump -r - failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        read(&copy).len(),
        sent.len(),
        "packets tcpdump read from the pipe"
    );
}

// ---------------------------------------------------------------------------
// Stopping

/// Runs `tcpdump -r FILE` and panics unless it reads the whole file cleanly.
fn tcpdump_reads_cleanly(path: &str) -> u64 {
    let mut cmd = std::process::Command::new("tcpdump");
    cmd.args(["-nn", "-r", path]);
    let (status, stdout, stderr) = run_limited(cmd, Duration::from_secs(30));
    assert!(
        status.success() && !stderr.contains("truncated") && !stderr.contains("bogus"),
        "tcpdump -r {path}: {status}: {stderr}"
    );
    capture::tcpdump_count(path, "").expect("tcpdump count");
    String::from_utf8_lossy(&stdout).lines().count() as u64
}

#[test]
fn sigint_mid_traffic_leaves_a_complete_file() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("sigint");
    let out = dir.file("out.pcap");
    let stats = dir.file("stats.json");
    let sent = frames::mixed_sequence(&tb.endpoints(), 3000);
    let mut run = start(&tb, &["-w", &out, "--stats-json", &stats, "--threads", "2"]);
    let fin = std::thread::scope(|s| {
        let sender = s.spawn(|| tb.send_from_peer(&sent, 5000));
        std::thread::sleep(Duration::from_millis(250));
        run.child.signal(libc::SIGINT).expect("SIGINT");
        let fin = run.wait(EXIT_LIMIT);
        sender.join().unwrap().expect("send");
        fin
    });
    fin.assert_ok("SIGINT during traffic");
    fin.assert_no_loss("SIGINT during traffic");
    let got = read(&out);
    assert!(
        !got.is_empty() && got.len() < sent.len(),
        "expected part of the traffic, got {} of {}",
        got.len(),
        sent.len()
    );
    // Whatever was captured is intact and unique.
    let index = by_seq(&sent);
    let mut seen = HashSet::new();
    for (p, s) in got.iter().zip(tagged_seqs(&got, "sigint")) {
        assert!(seen.insert(s), "seq {s} twice");
        assert_eq!(p.data, sent[index[&s]], "seq {s}");
    }
    tcpdump_reads_cleanly(&out);
    let recs = json_records(&stats);
    let f = final_record(&recs);
    assert_eq!(num(f, "packets_written"), got.len() as u64, "{f}");
    assert_eq!(
        num(f, "packets_delivered"),
        num(f, "packets_written") + num(f, "packets_dropped_writer"),
        "{f}"
    );
    // Traffic was still arriving when the capture stopped, so the kernel may have
    // accepted a few packets into the ring after the last block was read: the
    // capture is not quiet, only `>=` is required here.
    assert!(
        num(f, "packets_filter_accepted")
            >= num(f, "packets_sampled_out")
                + num(f, "packets_dropped_ring")
                + num(f, "packets_delivered"),
        "{f}"
    );
}

#[test]
fn duration_stops_by_itself() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("duration");
    let out = dir.file("out.pcap");
    let sent = frames::mixed_sequence(&tb.endpoints(), 50);
    let t0 = Instant::now();
    let run = start(&tb, &["-w", &out, "--duration", "1"]);
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.wait(Duration::from_secs(10));
    let took = t0.elapsed();
    fin.assert_ok("--duration 1");
    fin.assert_no_loss("--duration 1");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "--duration 1 took {took:?}"
    );
    let got = read(&out);
    check_full_capture(&sent, &got, "--duration 1");
    tcpdump_reads_cleanly(&out);
}

fn count_stops_after_exactly(threads: &str) {
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("count");
    let out = dir.file("out.pcap");
    let stats = dir.file("stats.json");
    let (td, ref_path) = reference_tcpdump(&tb, &dir, 100);
    let sent = frames::mixed_sequence(&tb.endpoints(), 100);
    let run = start(
        &tb,
        &[
            "-w",
            &out,
            "-c",
            "10",
            "--threads",
            threads,
            "--stats-json",
            &stats,
        ],
    );
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.wait(Duration::from_secs(10));
    td.finish(Duration::from_secs(5)).expect("tcpdump");
    let what = format!("-c 10 --threads {threads}");
    fin.assert_ok(&what);
    fin.assert_no_loss(&what);
    let got = read(&out);
    assert_eq!(got.len(), 10, "{what}: packets written");
    let index = by_seq(&sent);
    let seqs = tagged_seqs(&got, &what);
    for (p, s) in got.iter().zip(&seqs) {
        assert_eq!(p.data, sent[index[s]], "{what}: seq {s}");
    }
    if threads == "1" {
        let order = arrival_order(&sent, &read(&ref_path), "reference");
        let first: Vec<u32> = order[..10]
            .iter()
            .map(|f| frames::seq_of(f).unwrap())
            .collect();
        assert_eq!(seqs, first, "{what}: the first 10 frames to arrive");
    }
    assert_eq!(
        fin.report_value("written"),
        Some(10),
        "{what}: {}",
        fin.stderr
    );
    let recs = json_records(&stats);
    let f = final_record(&recs);
    assert_eq!(num(f, "packets_written"), 10, "{what}: {f}");
    assert_eq!(num(f, "packets_delivered"), 10, "{what}: {f}");
}

#[test]
fn count_stops_after_exactly_10_one_thread() {
    skip_unless_netns!();
    count_stops_after_exactly("1");
}

#[test]
fn count_stops_after_exactly_10_two_threads() {
    skip_unless_netns!();
    count_stops_after_exactly("2");
}

/// With `-c 10` and 100 frames already in the ring, the final record (written
/// after the traffic ended: the capture is quiet) must still account for every
/// packet the filter accepted: accepted = sampled out + dropped ring + delivered
/// + read after the count (the packets that were in the ring behind the 10th).
#[test]
fn count_capture_accounts_for_every_accepted_packet() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("count-accounting");
    let out = dir.file("out.pcap");
    let stats = dir.file("stats.json");
    let sent = frames::mixed_sequence(&tb.endpoints(), 100);
    let run = start(&tb, &["-w", &out, "-c", "10", "--stats-json", &stats]);
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.wait(Duration::from_secs(10));
    fin.assert_ok("-c 10");
    assert_eq!(read(&out).len(), 10);
    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, "-c 10 final record");
    assert_eq!(num(f, "packets_delivered"), 10, "-c 10 final record: {f}");
}

// ---------------------------------------------------------------------------
// Offline (-r): no namespace needed, so these run without root too.

/// Endpoints for offline files (no testbed): the testbed's address plan.
fn offline_endpoints() -> Endpoints {
    Endpoints::new([0x02, 0x52, 0x43, 0, 7, 2], [0x02, 0x52, 0x43, 0, 7, 1]).with_ipv4(
        std::net::Ipv4Addr::new(198, 18, 7, 2),
        std::net::Ipv4Addr::new(198, 18, 7, 3),
    )
}

/// Writes `frames` to DIR/in.pcap (and, with editcap, DIR/in.pcapng).
fn offline_inputs(dir: &TempDir, frames: &[Vec<u8>]) -> Vec<String> {
    let pcap = dir.file("in.pcap");
    ringcap_testkit::netns::write_pcap(std::path::Path::new(&pcap), frames).expect("write pcap");
    let mut inputs = vec![pcap.clone()];
    if have("editcap") {
        let ng = dir.file("in.pcapng");
        let mut cmd = std::process::Command::new("editcap");
        cmd.args(["-F", "pcapng", &pcap, &ng]);
        let (status, _, stderr) = run_limited(cmd, Duration::from_secs(30));
        assert!(status.success(), "editcap: {stderr}");
        inputs.push(ng);
    } else {
        ringcap_testkit::skip("editcap not found: pcapng input not tested");
    }
    inputs
}

#[test]
fn offline_filters_match_tcpdump_pcap_and_pcapng() {
    if !have("tcpdump") {
        ringcap_testkit::skip("tcpdump not found");
        return;
    }
    let dir = TempDir::new("offline-filters");
    let sent = frames::mixed_sequence(&offline_endpoints(), 460);
    // Offline both ringcap and tcpdump see VLAN tags in the bytes, so `udp` does
    // not match tagged UDP on either side and the comparison is like for like.
    let filters = [
        "",
        "udp",
        "tcp port 20001",
        "icmp or arp",
        "ip6",
        "vlan",
        "not udp",
        "ip[6:2] & 0x1fff != 0",
        "vlan and udp",
        "vlan 101 and vlan 201 and udp",
        "udp port 4789",
        "ip6 and tcp",
        "greater 1000",
        "ether broadcast or sctp",
    ];
    let mut failures = Vec::new();
    for input in offline_inputs(&dir, &sent) {
        for (i, filter) in filters.iter().enumerate() {
            let out = dir.file(&format!("out-{i}-{}.pcap", input.ends_with("ng") as u8));
            let mut args = vec!["capture", "-r", &input, "-w", &out];
            if !filter.is_empty() {
                args.push(filter);
            }
            let fin = ringcap(&args);
            fin.assert_ok(&format!("-r {input} {filter:?}"));
            let got = read(&out);
            let mine = tagged_seqs(&got, filter);
            let theirs = tcpdump_selects(&input, filter);
            if mine != theirs {
                failures.push(format!(
                    "-r {input} {filter:?}: ringcap {} packets, tcpdump {}; first ringcap {:?}, first tcpdump {:?}",
                    mine.len(),
                    theirs.len(),
                    &mine[..mine.len().min(8)],
                    &theirs[..theirs.len().min(8)]
                ));
            }
            if filter.is_empty() {
                // Unfiltered: every frame, byte for byte, timestamps kept.
                let input_pkts = read(&input);
                assert_eq!(got.len(), sent.len());
                for (k, (p, q)) in got.iter().zip(&input_pkts).enumerate() {
                    assert_eq!(p.data, sent[k], "-r {input}: packet {k} bytes");
                    assert_eq!(p.wire_len as usize, sent[k].len(), "packet {k} length");
                    assert_eq!(p.ts_ns, q.ts_ns, "-r {input}: packet {k} timestamp");
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn offline_snaplen_and_headers() {
    let dir = TempDir::new("offline-snap");
    let sent = frames::mixed_sequence(&offline_endpoints(), 230);
    let input = offline_inputs(&dir, &sent).remove(0);
    type LenFn = fn(&[u8]) -> usize;
    let cases: [(&[&str], LenFn); 3] = [
        (&["-s", "64"], |f| f.len().min(64)),
        (&["-s", "headers"], |f| ringcap_wire::header_len(f, 256)),
        (&["-s", "headers", "--headers-max", "40"], |f| {
            ringcap_wire::header_len(f, 40)
        }),
    ];
    for (i, (extra, len)) in cases.iter().enumerate() {
        let out = dir.file(&format!("out{i}.pcap"));
        let mut args = vec!["capture", "-r", &input, "-w", &out];
        args.extend_from_slice(extra);
        let fin = ringcap(&args);
        fin.assert_ok(&format!("{extra:?}"));
        check_truncated(&sent, &read(&out), len, &format!("offline {extra:?}"));
    }
}

#[test]
fn offline_sampling_count_and_flows() {
    let dir = TempDir::new("offline-sample");
    let sent = frames::mixed_sequence(&offline_endpoints(), 400);
    let input = offline_inputs(&dir, &sent).remove(0);
    let out = dir.file("count.pcap");
    let stats = dir.file("count.json");
    let fin = ringcap(&[
        "capture",
        "-r",
        &input,
        "-w",
        &out,
        "--sample",
        "1:4",
        "--sample-mode",
        "count",
        "--stats-json",
        &stats,
    ]);
    fin.assert_ok("offline count sampling");
    let kept = tagged_seqs(&read(&out), "count");
    let want: Vec<u32> = (0..400).skip(3).step_by(4).collect();
    assert_eq!(kept, want);
    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, "offline count sampling");
    assert_eq!(num(f, "packets_sampled_out"), 300, "{f}");

    let (flows, per_dir) = (240u32, 2u32);
    let sent = two_way_flows(&offline_endpoints(), flows, per_dir);
    let input = dir.file("flows.pcap");
    ringcap_testkit::netns::write_pcap(std::path::Path::new(&input), &sent).unwrap();
    let out = dir.file("flows-out.pcap");
    let fin = ringcap(&["capture", "-r", &input, "-w", &out, "--sample-flows", "1:4"]);
    fin.assert_ok("offline flow sampling");
    let mut per_flow: HashMap<u32, usize> = HashMap::new();
    for s in tagged_seqs(&read(&out), "flows") {
        *per_flow.entry(s / (2 * per_dir)).or_default() += 1;
    }
    for (flow, n) in &per_flow {
        assert_eq!(
            *n as u32,
            2 * per_dir,
            "offline: flow {flow} only partly kept"
        );
    }
    assert!(
        (20..=100).contains(&per_flow.len()),
        "offline: kept {} of {flows} flows",
        per_flow.len()
    );
}

/// Byte offsets of the records of a pcap file written by `write_pcap`.
fn pcap_record_offsets(frames: &[Vec<u8>]) -> Vec<usize> {
    let mut off = 24;
    frames
        .iter()
        .map(|f| {
            let o = off;
            off += 16 + f.len();
            o
        })
        .collect()
}

/// Byte offsets of the blocks of a pcapng file (little-endian, as editcap writes
/// on this machine) and their types.
fn pcapng_blocks(b: &[u8]) -> Vec<(usize, u32)> {
    let mut v = Vec::new();
    let mut off = 0;
    while off + 8 <= b.len() {
        let t = u32::from_le_bytes(b[off..off + 4].try_into().unwrap());
        let len = u32::from_le_bytes(b[off + 4..off + 8].try_into().unwrap()) as usize;
        v.push((off, t));
        if len < 12 {
            break;
        }
        off += len;
    }
    v
}

/// Runs an offline capture of a bad input; checks exit 2, no panic, the input's
/// name and `byte N` in the message, and returns the packets written.
fn bad_input(dir: &TempDir, name: &str, bytes: &[u8], offset: usize) -> usize {
    let input = dir.file(name);
    std::fs::write(&input, bytes).unwrap();
    let out = dir.file(&format!("{name}.out.pcap"));
    let fin = ringcap(&["capture", "-r", &input, "-w", &out]);
    assert_no_panic(&fin.stderr, name);
    assert_eq!(fin.code(), Some(2), "{name}: stderr:\n{}", fin.stderr);
    let needle = format!("byte {offset}:");
    assert!(
        fin.stderr.contains(&needle) && fin.stderr.contains(name),
        "{name}: the message should name the file and say {needle:?}: {}",
        fin.stderr
    );
    if std::path::Path::new(&out).exists() {
        read(&out).len()
    } else {
        0
    }
}

#[test]
fn offline_bad_inputs_name_the_byte_offset() {
    let dir = TempDir::new("offline-bad");
    let sent = frames::mixed_sequence(&offline_endpoints(), 30);
    let good = dir.join("good.pcap");
    ringcap_testkit::netns::write_pcap(&good, &sent).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let offs = pcap_record_offsets(&sent);

    // Not a capture file at all; an empty file; a cut file header.
    bad_input(
        &dir,
        "garbage.bin",
        b"this is not a capture file, just some text\n",
        0,
    );
    bad_input(&dir, "empty.pcap", b"", 0);
    bad_input(&dir, "header-cut.pcap", &bytes[..10], 0);
    // Cut inside record 5's header, then inside record 12's data: the packets
    // before the cut are written.
    let n = bad_input(&dir, "cut-header.pcap", &bytes[..offs[5] + 7], offs[5]);
    assert_eq!(n, 5, "packets before the cut record");
    let n = bad_input(&dir, "cut-data.pcap", &bytes[..offs[12] + 20], offs[12]);
    assert_eq!(n, 12, "packets before the cut record");
    // The first record's header cut: "byte 24".
    bad_input(&dir, "first-cut.pcap", &bytes[..30], 24);
    // A record claiming a gigantic captured length.
    let mut huge = bytes[..offs[3] + 16].to_vec();
    huge[offs[3] + 8..offs[3] + 12].copy_from_slice(&0xfff0_0000u32.to_le_bytes());
    huge.extend_from_slice(&[0u8; 64]);
    bad_input(&dir, "huge-caplen.pcap", &huge, offs[3]);

    if have("editcap") {
        let ng = dir.file("good.pcapng");
        let mut cmd = std::process::Command::new("editcap");
        cmd.args(["-F", "pcapng"]).arg(&good).arg(&ng);
        let (status, _, stderr) = run_limited(cmd, Duration::from_secs(30));
        assert!(status.success(), "editcap: {stderr}");
        let ngb = std::fs::read(&ng).unwrap();
        let blocks = pcapng_blocks(&ngb);
        let epbs: Vec<usize> = blocks
            .iter()
            .filter(|(_, t)| *t == 6)
            .map(|(o, _)| *o)
            .collect();
        assert_eq!(epbs.len(), sent.len(), "editcap wrote one EPB per frame");
        let n = bad_input(&dir, "cut.pcapng", &ngb[..epbs[7] + 30], epbs[7]);
        assert_eq!(n, 7, "pcapng: packets before the cut block");
        // A block whose trailing length does not match.
        let mut bad = ngb.clone();
        let (o, _) = blocks.iter().find(|(o, _)| *o == epbs[2]).unwrap();
        let len = u32::from_le_bytes(bad[o + 4..o + 8].try_into().unwrap()) as usize;
        bad[o + len - 4] ^= 0x40;
        bad_input(&dir, "mismatch.pcapng", &bad, epbs[2]);
    } else {
        ringcap_testkit::skip("editcap not found: pcapng bad inputs not tested");
    }
}

// ---------------------------------------------------------------------------
// More live cases

/// Sampling behind a filter: the filter-accepted count covers only what the
/// filter accepts (the kernel sampler's filter-only counting socket), and
/// sampled out + delivered add up to it.
#[test]
fn sampling_behind_a_filter_counts_only_filtered_packets() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let base = tb.endpoints();
    let (flows, per_dir) = (180u32, 2u32);
    let sent = two_way_flows(&base, flows, per_dir);
    // Flows of kind 0 (UDP/IPv4) and 2 (UDP/IPv6) are UDP.
    let udp_frames = sent
        .iter()
        .filter(|f| (frames::seq_of(f).unwrap() / (2 * per_dir)) % 3 != 1)
        .count() as u64;
    let cases: [&[&str]; 3] = [
        &["--sample-flows", "1:4", "udp"],
        &["--sample", "1:4", "udp"],
        &["--sample", "1:4", "--sample-mode", "count", "udp"],
    ];
    let dirs: Vec<TempDir> = cases
        .iter()
        .map(|_| TempDir::new("sample-filter"))
        .collect();
    let mut runs = Vec::new();
    for (c, d) in cases.iter().zip(&dirs) {
        let out = d.file("out.pcap");
        let stats = d.file("stats.json");
        let mut args = vec!["-w", &out, "--stats-json", &stats];
        args.extend_from_slice(c);
        runs.push(start(&tb, &args));
    }
    tb.send_from_peer(&sent, 0).expect("send");
    let fins = stop_all(runs);
    let mut failures = Vec::new();
    for ((c, d), fin) in cases.iter().zip(&dirs).zip(&fins) {
        fin.assert_ok(&format!("{c:?}"));
        fin.assert_no_loss(&format!("{c:?}"));
        let got = read(d.join("out.pcap"));
        for s in tagged_seqs(&got, "sample+filter") {
            assert_ne!(
                (s / (2 * per_dir)) % 3,
                1,
                "{c:?}: kept a TCP frame (seq {s})"
            );
        }
        let recs = json_records(d.join("stats.json"));
        let f = final_record(&recs);
        let accepted = num(f, "packets_filter_accepted");
        let sampled = num(f, "packets_sampled_out");
        let delivered = num(f, "packets_delivered");
        if accepted != udp_frames
            || sampled + delivered != accepted
            || num(f, "packets_written") != got.len() as u64
        {
            failures.push(format!(
                "{c:?}: {udp_frames} UDP frames sent; final record says accepted {accepted}, sampled out {sampled}, delivered {delivered}, written {} (file has {})",
                num(f, "packets_written"),
                got.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Jumbo frames on a 9000-byte MTU: captured whole, not counted as merged by an
/// offload (a full-size frame with one VLAN tag is MTU + 18 bytes).
#[test]
fn jumbo_frames_captured_whole() {
    skip_unless_netns!();
    let tb = Testbed::with_options(ringcap_testkit::TestbedOptions {
        mtu: Some(9000),
        ..Default::default()
    })
    .expect("testbed");
    let dir = TempDir::new("jumbo");
    let out = dir.file("out.pcap");
    let stats = dir.file("stats.json");
    let ep = tb.endpoints();
    let mut sent = Vec::new();
    for s in 0..60u32 {
        sent.push(match s % 3 {
            0 => frames::udp4(&ep, s, 1000, 2000, 9000 - 28),
            1 => frames::vlan_udp4(&ep, s, 42, 1000, 2000, 9000 - 28),
            _ => frames::udp4(&ep, s, 1000, 2000, 100 + s as usize),
        });
    }
    let run = start(&tb, &["-w", &out, "--stats-json", &stats]);
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.stop();
    fin.assert_ok("jumbo");
    fin.assert_no_loss("jumbo");
    let got = read(&out);
    assert_eq!(got.len(), sent.len());
    for (p, s) in got.iter().zip(tagged_seqs(&got, "jumbo")) {
        assert_eq!(p.data, sent[s as usize], "seq {s}");
        assert_eq!(p.wire_len as usize, sent[s as usize].len());
    }
    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, "jumbo");
    assert_eq!(num(f, "packets_merged_by_offload"), 0, "{f}");
}

#[test]
fn stdout_pcapng_stream_and_sigterm() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 230);
    let mut run = start_with(
        &tb,
        &["-i", &tb.capture_if, "-B", "8M"],
        &["-w", "-", "--format", "pcapng"],
        Stdio::piped(),
    );
    let mut stdout = run.child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).map(|_| v)
    });
    tb.send_from_peer(&sent, 0).expect("send");
    std::thread::sleep(SETTLE);
    // SIGTERM stops as cleanly as SIGINT.
    run.child.signal(libc::SIGTERM).expect("SIGTERM");
    let fin = run.wait(EXIT_LIMIT);
    fin.assert_ok("-w - --format pcapng, SIGTERM");
    fin.assert_no_loss("-w - --format pcapng, SIGTERM");
    let bytes = reader.join().unwrap().expect("stdout");
    let file = capture::parse_capture(&bytes).expect("stdout is pcapng");
    assert_eq!(file.format, capture::CaptureFormat::PcapNg);
    check_full_capture(&sent, &file.packets, "-w - pcapng");
}

/// `-B` is the ring size per interface (KiB as tcpdump's, or with a unit),
/// split over the threads: the `capturing on` line must report the size
/// asked for.
#[test]
fn ring_size_per_interface_is_what_b_asks_for() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let mut wrong = Vec::new();
    for (b, mib, threads) in [
        ("8192", "8", "1"),
        ("4M", "4", "1"),
        ("8192", "8", "2"),
        ("16M", "16", "2"),
    ] {
        let run = start_with(
            &tb,
            &["-i", &tb.capture_if],
            &["-B", b, "--threads", threads],
            Stdio::null(),
        );
        let line = run.ready_line.clone();
        let fin = run.stop();
        fin.assert_ok(&line);
        if !line.contains(&format!("ring {mib} MiB per interface")) {
            wrong.push(format!("-B {b} --threads {threads}: {line}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `-s headers` keeps a header cut short by the end of the packet, up to that
/// end: IPv4 datagrams that end 1, 10, 12 or 19 bytes into their TCP header, or
/// 4 bytes into their UDP header (then Ethernet padding to 60 bytes), keep
/// 14 + 20 + that many bytes, worked out by hand, and never the padding.
#[test]
fn snaplen_headers_keeps_headers_cut_by_the_packet_end() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let ep = tb.endpoints();
    let mut sent = Vec::new();
    let mut want: HashMap<u32, usize> = HashMap::new();
    for round in 0..8u32 {
        let base = 200_000 + round * 16;
        for (i, keep) in [1usize, 10, 12, 19].into_iter().enumerate() {
            let s = base + i as u32;
            sent.push(frames::tcp_header_cut(&ep, s, 40_000 + i as u16, 80, keep));
            want.insert(s, 14 + 20 + keep);
        }
        sent.push(frames::udp_header_cut(&ep, base + 8, 40_010, 53, 4));
        want.insert(base + 8, 14 + 20 + 4);
        // A whole UDP header, for contrast.
        sent.push(frames::udp4(&ep, base + 9, 40_011, 53, 32));
        want.insert(base + 9, 14 + 20 + 8);
    }
    let (order, got) = capture_variants(&tb, &sent, &[&["-s", "headers"]]);
    check_truncated(
        &order,
        &got[0],
        |f| want[&frames::seq_of(f).expect("tagged")],
        "-s headers, headers cut by the packet end",
    );
}
