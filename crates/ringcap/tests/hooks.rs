//! `ringcap capture --hook xdp|netfilter` on real traffic over a veth pair
//! between two throw-away namespaces: exact bytes, lengths, order, no loss
//! and no duplicates of what each hook can see; filters as tcpdump's; the
//! same snap lengths and sampling as the packet hook; exact cleanup after
//! SIGKILL; clear errors.
//!
//! Frames are paced (PPS): an unpaced burst into a veth with XDP attached
//! overflows veth's 256-entry NAPI ring before XDP runs, and nothing counts
//! that loss. Only one XDP program fits an interface, so XDP captures on one
//! testbed run one after another.

mod common;

use common::*;
use ringcap_testkit::capture::{self, CapturedPacket};
use ringcap_testkit::frames::{self, Shape};
use ringcap_testkit::{skip_unless_netns, Testbed, TestbedOptions};
use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

/// Frames per second the peer sends at.
const PPS: u32 = 20_000;

fn epoch_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Captures `sent` with `ringcap --hook HOOK ARGS` alone on the interface.
/// Returns the report and the file (in a directory removed on drop).
fn capture_one(
    tb: &Testbed,
    hook: &str,
    args: &[&str],
    sent: &[Vec<u8>],
) -> (Finished, TempDir, String) {
    let dir = TempDir::new("hook");
    let out = dir.file("out.pcap");
    let mut a = vec!["--hook", hook, "-w", &out];
    a.extend_from_slice(args);
    let run = start(tb, &a);
    tb.send_from_peer(sent, PPS).expect("send");
    let fin = run.stop();
    fin.assert_ok(&format!("--hook {hook} {args:?}"));
    fin.assert_no_loss(&format!("--hook {hook} {args:?}"));
    (fin, dir, out)
}

/// Checks a whole-packet capture of exactly `want` (in send order: one
/// sender, so one order), byte for byte.
fn check_exact(want: &[Vec<u8>], got: &[CapturedPacket], what: &str) {
    let mut seen = HashSet::new();
    let got_seqs = tagged_seqs(got, what);
    for s in &got_seqs {
        assert!(seen.insert(*s), "{what}: seq {s} captured twice");
    }
    let want_seqs: Vec<u32> = want.iter().map(|f| frames::seq_of(f).unwrap()).collect();
    let missing: Vec<(u32, Shape)> = want_seqs
        .iter()
        .filter(|s| !seen.contains(s))
        .map(|&s| (s, frames::mixed_shape(s)))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: {} of {} missing: {:?}",
        missing.len(),
        want.len(),
        &missing[..missing.len().min(20)]
    );
    assert_eq!(got_seqs, want_seqs, "{what}: order or extra packets");
    for (p, f) in got.iter().zip(want) {
        assert_eq!(p.wire_len as usize, f.len(), "{what}: original length");
        assert_eq!(p.data, *f, "{what}: bytes");
    }
}

#[test]
fn xdp_captures_every_frame_exactly() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 920);
    let dir = TempDir::new("xdp-exact");
    let stats = dir.file("stats.json");
    let t0 = epoch_ns();
    let (fin, _d, out) = capture_one(&tb, "xdp", &["--stats-json", &stats], &sent);
    let t1 = epoch_ns();
    let file = capture::read_capture(&out).expect("read");
    assert_eq!(file.linktypes, vec![1]);
    check_exact(&sent, &file.packets, "--hook xdp");
    for p in &file.packets {
        assert!((t0..=t1).contains(&p.ts_ns), "timestamp outside the run");
    }
    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, "--hook xdp");
    assert_eq!(
        num(f, "packets_seen_by_interface"),
        sent.len() as u64,
        "{f}"
    );
    assert_eq!(num(f, "packets_filter_accepted"), sent.len() as u64, "{f}");
    assert_eq!(num(f, "packets_written"), sent.len() as u64, "{f}");
    let wire: u64 = sent.iter().map(|f| f.len() as u64).sum();
    assert_eq!(num(f, "bytes_on_wire"), wire);
    assert_eq!(fin.report_value("written"), Some(sent.len() as u64));
    assert!(fin.stderr.contains("link-type EN10MB"), "{}", fin.stderr);
}

/// The XDP hook and the packet hook on the same frames with the same
/// options write the same packets (the packet hook puts VLAN tags back, so
/// both record the frames as sent).
#[test]
fn xdp_snap_lengths_and_sampling_match_the_packet_hook() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 460);
    let variants: [&[&str]; 4] = [
        &["-s", "64"],
        &["-s", "headers"],
        &["-s", "headers", "--headers-max", "40"],
        &["--sample", "1:4", "--sample-mode", "count"],
    ];
    for v in variants {
        let dirs = [TempDir::new("xdp-v"), TempDir::new("pkt-v")];
        let outs = [dirs[0].file("out.pcap"), dirs[1].file("out.pcap")];
        let mut runs = Vec::new();
        for (hook, out) in ["xdp", "packet"].iter().zip(&outs) {
            let mut a = vec!["--hook", hook, "-w", out];
            a.extend_from_slice(v);
            runs.push(start(&tb, &a));
        }
        tb.send_from_peer(&sent, PPS).expect("send");
        let fins = stop_all(runs);
        for f in &fins {
            f.assert_ok(&format!("{v:?}"));
            f.assert_no_loss(&format!("{v:?}"));
        }
        let (x, p) = (read(&outs[0]), read(&outs[1]));
        assert!(!x.is_empty(), "{v:?}: nothing captured");
        assert_eq!(x.len(), p.len(), "{v:?}: xdp vs packet: number of packets");
        for (i, (a, b)) in x.iter().zip(&p).enumerate() {
            assert_eq!(a.data, b.data, "{v:?}: packet {i}: bytes");
            assert_eq!(a.wire_len, b.wire_len, "{v:?}: packet {i}: length");
            let gap = a.ts_ns.abs_diff(b.ts_ns);
            assert!(gap < 50_000_000, "{v:?}: packet {i}: stamps {gap} ns apart");
        }
    }
}

/// Filters, with a snap length shorter than what some of them read (the
/// hook copies as far as the filter reads, so the result must not change).
const FILTERS: [(&str, &str); 12] = [
    ("udp", "262144"),
    ("tcp port 20001", "20"),
    ("icmp or arp", "262144"),
    ("ip6", "262144"),
    ("vlan", "262144"),
    ("not udp", "262144"),
    ("ip[6:2] & 0x1fff != 0", "262144"),
    ("vlan 101 and udp", "30"),
    ("udp port 4789", "34"),
    ("ip6 and udp", "16"),
    ("greater 1000", "64"),
    ("tcp[tcpflags] & tcp-syn != 0", "40"),
];

/// Each filter on the frames as the hook sees them, against tcpdump reading
/// the same frames from a file (at the XDP hook VLAN tags are still in the
/// frame, as in a file; a live tcpdump on Linux sees them stripped, so its
/// `udp` also matches tagged UDP).
#[test]
fn xdp_filters_select_what_tcpdump_selects() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 460);
    let dir = TempDir::new("xdp-filters");
    let input = dir.file("sent.pcap");
    ringcap_testkit::netns::write_pcap(std::path::Path::new(&input), &sent).expect("pcap");
    let mut failures = Vec::new();
    for (filter, snap) in FILTERS {
        let (_, _d, out) = capture_one(&tb, "xdp", &["-s", snap, filter], &sent);
        let got = read(&out);
        let mine: BTreeSet<u32> = got.iter().filter_map(|p| frames::seq_of(&p.data)).collect();
        // With a snap length that cuts the tag off, match by arrival order.
        let theirs: BTreeSet<u32> = tcpdump_selects(&input, filter).into_iter().collect();
        let mine = if mine.len() == got.len() {
            mine
        } else {
            theirs
                .iter()
                .copied()
                .zip(&got)
                .filter(|(s, p)| {
                    let f = &sent[*s as usize];
                    f.get(..p.data.len()) == Some(&p.data[..]) && p.wire_len as usize == f.len()
                })
                .map(|(s, _)| s)
                .collect()
        };
        if mine != theirs || got.len() != theirs.len() {
            failures.push(format!(
                "{filter:?} -s {snap}: ringcap {} packets, tcpdump {}; only ringcap {:?}, only tcpdump {:?}",
                got.len(),
                theirs.len(),
                mine.difference(&theirs).take(8).collect::<Vec<_>>(),
                theirs.difference(&mine).take(8).collect::<Vec<_>>()
            ));
        }
        assert!(
            !theirs.is_empty() || filter == "vlan 101 and udp",
            "{filter}: tcpdump kept nothing"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The packets tcpdump selects from `input` with `filter`, in order.
fn tcpdump_packets(input: &str, filter: &str) -> Vec<CapturedPacket> {
    let mut cmd = std::process::Command::new("tcpdump");
    cmd.args(["-nn", "-r", input, "-w", "-", filter]);
    let (status, stdout, stderr) = run_limited(cmd, Duration::from_secs(30));
    assert!(status.success(), "tcpdump -r {input} {filter:?}: {stderr}");
    if stdout.is_empty() {
        return Vec::new();
    }
    capture::parse_capture(&stdout)
        .expect("tcpdump output")
        .packets
}

/// Writes `packets` (raw IP) as a LINKTYPE_RAW pcap.
fn write_raw_pcap(path: &str, packets: &[&[u8]]) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&65535u32.to_le_bytes());
    b.extend_from_slice(&101u32.to_le_bytes());
    for (i, p) in packets.iter().enumerate() {
        b.extend_from_slice(&(i as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(p.len() as u32).to_le_bytes());
        b.extend_from_slice(&(p.len() as u32).to_le_bytes());
        b.extend_from_slice(p);
    }
    std::fs::write(path, b).expect("write raw pcap");
}

/// What the netfilter hook can see of the mixed frames: untagged IPv4 and
/// IPv6 to this host that pass the IP layer's header checks (the two
/// IP-truncated and bad-IHL shapes do not).
/// Runts (a datagram shorter than Ethernet's minimum, its tag in the padding
/// the IP layer trims) and TCP cut inside its header are visible too, but
/// carry no tag: left out unless `runts`.
fn netfilter_visible(sent: &[Vec<u8>], runts: bool) -> Vec<Vec<u8>> {
    sent.iter()
        .filter(|f| {
            let s = frames::seq_of(f).unwrap();
            matches!(&f[12..14], [0x08, 0x00] | [0x86, 0xdd])
                && !matches!(
                    frames::mixed_shape(s),
                    Shape::TruncatedIpv4 | Shape::MalformedIhl
                )
                && (runts || !matches!(frames::mixed_shape(s), Shape::Runt | Shape::TruncatedTcp))
        })
        .map(|f| {
            // The IP layer trims Ethernet padding to the datagram's own length.
            let ip = &f[14..];
            let len = if ip[0] >> 4 == 4 {
                usize::from(u16::from_be_bytes([ip[2], ip[3]]))
            } else {
                40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]))
            };
            ip[..len.min(ip.len())].to_vec()
        })
        .collect()
}

#[test]
fn netfilter_captures_ip_packets_exactly() {
    skip_unless_netns!();
    let tb = Testbed::with_options(TestbedOptions {
        ipv6: true,
        ..TestbedOptions::default()
    })
    .expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 920);
    let want = netfilter_visible(&sent, false);
    let dir = TempDir::new("nf-exact");
    let stats = dir.file("stats.json");
    let (fin, _d, out) = capture_one(&tb, "netfilter", &["--stats-json", &stats], &sent);
    let file = capture::read_capture(&out).expect("read");
    assert_eq!(file.linktypes, vec![101], "raw IP");
    assert!(fin.stderr.contains("link-type RAW"), "{}", fin.stderr);
    // The peer's kernel may send an IPv6 multicast listener report or two:
    // untagged packets that are not the test's.
    let got: Vec<CapturedPacket> = file
        .packets
        .into_iter()
        .filter(|p| frames::seq_of(&p.data).is_some())
        .collect();
    check_exact(&want, &got, "--hook netfilter");
    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, "--hook netfilter");
    assert!(num(f, "packets_written") >= want.len() as u64, "{f}");
}

#[test]
fn netfilter_filters_select_what_tcpdump_selects() {
    skip_unless_netns!();
    let tb = Testbed::with_options(TestbedOptions {
        ipv6: true,
        ..TestbedOptions::default()
    })
    .expect("testbed");
    let sent = frames::mixed_sequence(&tb.endpoints(), 460);
    let dir = TempDir::new("nf-filters");
    let input = dir.file("sent-raw.pcap");
    let visible = netfilter_visible(&sent, true);
    write_raw_pcap(&input, &visible.iter().map(|v| &v[..]).collect::<Vec<_>>());
    let cases = [
        ("udp", "262144"),
        ("tcp port 20001", "20"),
        ("ip6 and udp", "16"),
        ("icmp", "262144"),
        ("ip[6:2] & 0x1fff != 0", "262144"),
        ("greater 1000", "64"),
        ("udp port 4789", "30"),
    ];
    // Netfilter programs do not exclude each other: all at once.
    let dirs: Vec<TempDir> = cases.iter().map(|_| TempDir::new("nf-f")).collect();
    let outs: Vec<String> = dirs.iter().map(|d| d.file("out.pcap")).collect();
    let runs: Vec<Running> = cases
        .iter()
        .zip(&outs)
        .map(|((f, snap), out)| start(&tb, &["--hook", "netfilter", "-s", snap, "-w", out, f]))
        .collect();
    tb.send_from_peer(&sent, PPS).expect("send");
    let fins = stop_all(runs);
    let mut failures = Vec::new();
    for (((filter, snap), fin), out) in cases.iter().zip(&fins).zip(&outs) {
        fin.assert_ok(filter);
        fin.assert_no_loss(filter);
        let theirs = tcpdump_packets(&input, filter);
        // The peer's kernel may send IPv6 multicast listener reports (hop
        // by hop header): not the test's.
        let got: Vec<CapturedPacket> = read(out)
            .into_iter()
            .filter(|p| !(p.data.first() == Some(&0x60) && p.data.get(6) == Some(&0)))
            .collect();
        let same = got.len() == theirs.len()
            && got.iter().zip(&theirs).all(|(a, b)| {
                a.wire_len as usize == b.data.len()
                    && b.data.get(..a.data.len()) == Some(&a.data[..])
            });
        if !same {
            failures.push(format!(
                "{filter:?} -s {snap}: ringcap {} packets, tcpdump {}",
                got.len(),
                theirs.len()
            ));
        }
        assert!(!theirs.is_empty(), "{filter}: tcpdump kept nothing");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn has_xdp(tb: &Testbed) -> bool {
    let mut cmd = std::process::Command::new("ip");
    cmd.args(["-n", &tb.capture_ns, "link", "show", "dev", &tb.capture_if]);
    let (status, stdout, stderr) = run_limited(cmd, Duration::from_secs(10));
    assert!(status.success(), "ip link show: {stderr}");
    String::from_utf8_lossy(&stdout).contains("xdp")
}

/// Ids of the netfilter BPF links process `pid` holds (from the fdinfo of
/// its descriptors).
fn netfilter_links_of(pid: u32) -> Vec<u64> {
    let dir = format!("/proc/{pid}/fdinfo");
    let mut ids = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let Ok(text) = std::fs::read_to_string(e.expect("fdinfo").path()) else {
            continue;
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        if field("link_type:").as_deref() == Some("netfilter") {
            if let Some(id) = field("link_id:").and_then(|v| v.parse().ok()) {
                ids.push(id);
            }
        }
    }
    ids
}

fn link_ids() -> HashSet<u64> {
    let mut cmd = std::process::Command::new("bpftool");
    cmd.args(["-j", "link", "show"]);
    let (_, stdout, _) = run_limited(cmd, Duration::from_secs(10));
    let v: serde_json::Value = serde_json::from_slice(&stdout).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["id"].as_u64())
        .collect()
}

/// Polls `cond` for up to 5 s.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

#[test]
fn sigkill_leaves_no_program_or_link_behind() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("kill");
    // XDP: the link holds the program on the interface.
    let out = dir.file("x.pcap");
    let mut run = start(&tb, &["--hook", "xdp", "-w", &out]);
    assert!(
        has_xdp(&tb),
        "no XDP program on the interface while capturing"
    );
    run.child.signal(libc::SIGKILL).expect("SIGKILL");
    run.child.wait_timeout(EXIT_LIMIT).expect("wait");
    assert!(
        eventually(|| !has_xdp(&tb)),
        "an XDP program is left on the interface after SIGKILL"
    );
    // Netfilter: two links (IPv4 and IPv6), gone with the process.
    if !have("bpftool") {
        ringcap_testkit::skip("bpftool not found: netfilter links not checked after SIGKILL");
        return;
    }
    let out = dir.file("n.pcap");
    let mut run = start(&tb, &["--hook", "netfilter", "-w", &out]);
    let pid = run.child.id();
    let mine = netfilter_links_of(pid);
    assert_eq!(mine.len(), 2, "netfilter links of ringcap {pid}: {mine:?}");
    run.child.signal(libc::SIGKILL).expect("SIGKILL");
    run.child.wait_timeout(EXIT_LIMIT).expect("wait");
    assert!(
        eventually(|| {
            let now = link_ids();
            mine.iter().all(|id| !now.contains(id))
        }),
        "netfilter links {mine:?} left after SIGKILL"
    );
}

#[test]
fn hook_errors_name_what_is_missing() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("hook-errors");
    let out = dir.file("a.pcap");
    let first = start(&tb, &["--hook", "xdp", "-w", &out]);
    // A second XDP capture on the interface: refused, naming the holder.
    let mut cmd = tb.in_capture_ns(bin());
    cmd.args([
        "capture",
        "-i",
        &tb.capture_if,
        "-B",
        "8M",
        "--hook",
        "xdp",
        "--duration",
        "1",
    ]);
    let (status, _, stderr) = run_limited(cmd, Duration::from_secs(30));
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("another XDP program is attached"),
        "{stderr}"
    );
    let fin = first.stop();
    fin.assert_ok("first xdp capture");
    // One thread per interface.
    let mut cmd = tb.in_capture_ns(bin());
    cmd.args([
        "capture",
        "-i",
        &tb.capture_if,
        "--hook",
        "netfilter",
        "--threads",
        "2",
        "--duration",
        "1",
    ]);
    let (status, _, stderr) = run_limited(cmd, Duration::from_secs(30));
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--threads must be 1"), "{stderr}");
    // Without CAP_BPF/CAP_NET_ADMIN (capsh drops them, as an ordinary
    // user would lack them): the message names the capabilities.
    if have("capsh") {
        let mut cmd = tb.in_capture_ns("capsh");
        cmd.args([
            "--drop=cap_bpf,cap_net_admin,cap_sys_admin,cap_perfmon",
            "--",
            "-c",
        ])
        .arg(format!(
            "{} capture -i {} -B 8M --hook xdp --duration 1",
            bin(),
            tb.capture_if
        ));
        let (status, _, stderr) = run_limited(cmd, Duration::from_secs(30));
        assert_eq!(status.code(), Some(3), "{stderr}");
        assert!(stderr.contains("CAP_BPF"), "{stderr}");
    }
}

/// A ring buffer too small for a burst: whatever the program could not
/// write is counted as dropped in the ring, and seen = written + dropped
/// (nothing is lost uncounted). Netfilter, so that veth's NAPI ring (which
/// an XDP program puts in front) cannot drop before the hook.
#[test]
fn full_ring_drops_are_counted() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let ep = tb.endpoints();
    let sent: Vec<Vec<u8>> = (0..20_000u32)
        .map(|i| frames::udp4(&ep, i, 40000, 9, 1472))
        .collect();
    let dir = TempDir::new("nf-full");
    let out = dir.file("out.pcap");
    let stats = dir.file("stats.json");
    let run = start_with(
        &tb,
        &["-i", &tb.capture_if, "-B", "1M"],
        &["--hook", "netfilter", "-w", &out, "--stats-json", &stats],
        std::process::Stdio::null(),
    );
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.stop();
    fin.assert_ok("full ring");
    let recs = json_records(&stats);
    let f = final_record(&recs);
    check_identities(f, true, "full ring");
    let seen = num(f, "packets_seen_by_interface");
    let dropped = num(f, "packets_dropped_ring");
    let written = num(f, "packets_written");
    assert_eq!(seen, sent.len() as u64, "{f}");
    assert_eq!(written + dropped, seen, "{f}");
    assert_eq!(read(&out).len() as u64, written);
    eprintln!("full ring: {written} written, {dropped} dropped in the ring");
}
