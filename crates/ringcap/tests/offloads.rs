//! Receive offloads that merge packets before capture (GRO): the warning that
//! names the exact ethtool fix, and `--fix-offloads`, which turns them off for
//! the capture and restores exactly what it changed when the capture ends (by
//! SIGINT or SIGTERM).
//!
//! The capture-side veth of a throw-away testbed has GRO switched on or off
//! with `ethtool -K` inside its namespace; `ethtool -k` is the oracle.
//!
//! To see packets really merged, GRO on veth also needs the NAPI instance to
//! hold packets across polls (`gro_flush_timeout` + `napi_defer_hard_irqs`):
//! then a burst of consecutive TCP segments arrives as one large packet.

mod common;

use common::*;
use ringcap_testkit::capture::{start_tcpdump, CapturedPacket};
use ringcap_testkit::frames::{self, Endpoints};
use ringcap_testkit::{skip_unless_netns, Testbed};
use std::time::Duration;

/// True when `ethtool -k` says generic-receive-offload is on for the capture interface.
fn gro_on(tb: &Testbed) -> bool {
    let out = tb
        .in_capture_ns("ethtool")
        .arg("-k")
        .arg(&tb.capture_if)
        .output()
        .expect("run ethtool -k");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("generic-receive-offload:"))
        .unwrap_or_else(|| panic!("no generic-receive-offload line in ethtool -k:\n{text}"));
    line.split(':')
        .nth(1)
        .is_some_and(|v| v.trim().starts_with("on"))
}

fn set_gro(tb: &Testbed, on: bool) {
    let st = tb
        .in_capture_ns("ethtool")
        .args(["-K", &tb.capture_if, "gro", if on { "on" } else { "off" }])
        .status()
        .expect("run ethtool -K");
    assert!(st.success(), "ethtool -K {} gro {on} failed", tb.capture_if);
    assert_eq!(gro_on(tb), on, "GRO did not switch to {on}");
}

#[test]
fn gro_on_gives_a_warning_with_the_ethtool_fix_and_is_left_alone() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    set_gro(&tb, true);
    let dir = TempDir::new("offload-warn");
    let run = start(&tb, &["-w", &dir.file("out.pcap")]);
    assert!(gro_on(&tb), "without --fix-offloads GRO must stay on");
    let fin = run.stop();
    fin.assert_ok("capture with GRO on");
    let fix = format!("ethtool -K {} gro off", tb.capture_if);
    assert!(
        fin.stderr.contains("warning") && fin.stderr.contains(&fix),
        "no warning naming `{fix}` in:\n{}",
        fin.stderr
    );
    assert!(fin.stderr.contains("--fix-offloads"), "{}", fin.stderr);
    assert!(
        gro_on(&tb),
        "GRO changed by a capture without --fix-offloads"
    );
}

/// Starts a `--fix-offloads` capture with GRO on, checks GRO is off while it
/// runs, stops it with `signal` and checks GRO is back on.
fn fix_and_restore(signal: i32, what: &str) {
    let tb = Testbed::new().expect("testbed");
    set_gro(&tb, true);
    let dir = TempDir::new("offload-fix");
    let mut run = start(&tb, &["--fix-offloads", "-w", &dir.file("out.pcap")]);
    assert!(
        !gro_on(&tb),
        "{what}: GRO still on during a --fix-offloads capture"
    );
    std::thread::sleep(SETTLE);
    run.child.signal(signal).expect("signal ringcap");
    let fin = run.wait(EXIT_LIMIT);
    fin.assert_ok(what);
    assert!(
        fin.stderr.contains(&format!(
            "turned off generic-receive-offload on {}",
            tb.capture_if
        )),
        "{what}: no notice of what was turned off:\n{}",
        fin.stderr
    );
    assert!(!fin.stderr.contains("warning"), "{what}: {}", fin.stderr);
    assert!(gro_on(&tb), "{what}: GRO not restored at exit");
}

#[test]
fn fix_offloads_turns_gro_off_and_restores_it_on_sigint() {
    skip_unless_netns!();
    fix_and_restore(libc::SIGINT, "--fix-offloads, SIGINT");
}

#[test]
fn fix_offloads_restores_gro_on_sigterm() {
    skip_unless_netns!();
    fix_and_restore(libc::SIGTERM, "--fix-offloads, SIGTERM");
}

/// Only what ringcap turned off is turned back on: GRO that was off stays off.
#[test]
fn fix_offloads_leaves_offloads_that_were_off_alone() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    set_gro(&tb, false);
    let dir = TempDir::new("offload-off");
    let run = start(&tb, &["--fix-offloads", "-w", &dir.file("out.pcap")]);
    let fin = run.stop();
    fin.assert_ok("--fix-offloads with GRO off");
    assert!(!fin.stderr.contains("turned off"), "{}", fin.stderr);
    assert!(!gro_on(&tb), "GRO turned on by a capture that found it off");
}

// ---------------------------------------------------------------------------
// Packets really merged by GRO

/// Writes `value` to `/sys/class/net/CAPTURE_IF/attr` inside the capture namespace.
fn set_capture_if_sysfs(tb: &Testbed, attr: &str, value: &str) {
    let path = format!("/sys/class/net/{}/{attr}", tb.capture_if);
    let st = tb
        .in_capture_ns("sh")
        .args(["-c", &format!("echo {value} > {path}")])
        .status()
        .expect("run sh");
    assert!(st.success(), "could not write {value} to {path}");
}

/// A testbed whose capture end merges TCP segments with GRO: GRO on, and the
/// NAPI instance keeps held packets for 2 ms across polls (veth's NAPI polls
/// one packet at a time otherwise, so nothing would be merged).
fn merging_testbed() -> Testbed {
    let tb = Testbed::new().expect("testbed");
    set_gro(&tb, true);
    set_capture_if_sysfs(&tb, "gro_flush_timeout", "2000000");
    set_capture_if_sysfs(&tb, "napi_defer_hard_irqs", "2");
    tb
}

/// Payload bytes per TCP segment (frames of 1054 bytes: never above the MTU).
const SEG: usize = 1000;
/// Segments per stream.
const SEGS: u32 = 30;
/// Initial sequence number of every stream.
const ISN: u32 = 1_000_000;

/// One TCP stream from the peer as GRO sees a sender's segments: ACK only,
/// consecutive sequence numbers, IPv4 DF with incrementing IDs, source port
/// `sport`. Each payload starts with the testkit tag of `first_tag + i`.
fn tcp_stream(ep: &Endpoints, sport: u16, first_tag: u32) -> Vec<Vec<u8>> {
    (0..SEGS)
        .map(|i| {
            let payload = frames::tagged_payload(first_tag + i, SEG);
            let mut tcp = Vec::with_capacity(20 + SEG);
            tcp.extend_from_slice(&sport.to_be_bytes());
            tcp.extend_from_slice(&9u16.to_be_bytes());
            tcp.extend_from_slice(&(ISN + i * SEG as u32).to_be_bytes());
            tcp.extend_from_slice(&1u32.to_be_bytes()); // ack
            tcp.extend_from_slice(&[5 << 4, 0x10]); // data offset 5, ACK
            tcp.extend_from_slice(&64240u16.to_be_bytes());
            tcp.extend_from_slice(&[0, 0, 0, 0]);
            tcp.extend_from_slice(&payload);
            let c = frames::l4_checksum(ep.src_ip.into(), ep.dst_ip.into(), 6, &tcp);
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&(i as u16 + 1).to_be_bytes());
            ip.extend_from_slice(&[0x40, 0, 64, 6, 0, 0]);
            ip.extend_from_slice(&ep.src_ip.octets());
            ip.extend_from_slice(&ep.dst_ip.octets());
            let c = frames::internet_checksum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            let mut f = Vec::with_capacity(14 + ip.len() + tcp.len());
            f.extend_from_slice(&ep.dst_mac);
            f.extend_from_slice(&ep.src_mac);
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            f.extend_from_slice(&ip);
            f.extend_from_slice(&tcp);
            f
        })
        .collect()
}

/// Checks that `got` carries exactly the streams of `sent` (whatever GRO
/// merged): every packet has the sent addresses, ports and ack, is whole
/// (`wire_len` = captured length = 14 + IPv4 total length), and per source
/// port the payloads, in sequence order, are the sent payloads byte for byte
/// with no gap or overlap.
fn check_streams(sent: &[Vec<u8>], got: &[CapturedPacket], what: &str) {
    let mut streams: std::collections::BTreeMap<u16, Vec<(u32, Vec<u8>)>> = Default::default();
    for (i, p) in got.iter().enumerate() {
        let d = &p.data;
        assert!(d.len() >= 54, "{what}: packet {i} too short: {}", d.len());
        let tot = u16::from_be_bytes([d[16], d[17]]) as usize;
        assert_eq!(
            (p.wire_len as usize, d.len()),
            (14 + tot, 14 + tot),
            "{what}: packet {i} is not whole"
        );
        assert_eq!(d[..14], sent[0][..14], "{what}: packet {i} Ethernet header");
        assert_eq!(d[26..34], sent[0][26..34], "{what}: packet {i} addresses");
        assert_eq!(d[14], 0x45, "{what}: packet {i} IP version/IHL");
        assert_eq!(d[36..38], sent[0][36..38], "{what}: packet {i} dst port");
        assert_eq!(d[42..46], sent[0][42..46], "{what}: packet {i} ack");
        assert_eq!(d[46] >> 4, 5, "{what}: packet {i} TCP data offset");
        let sport = u16::from_be_bytes([d[34], d[35]]);
        let seq = u32::from_be_bytes(d[38..42].try_into().unwrap());
        streams
            .entry(sport)
            .or_default()
            .push((seq, d[54..].to_vec()));
    }
    let mut want: std::collections::BTreeMap<u16, Vec<u8>> = Default::default();
    for f in sent {
        let sport = u16::from_be_bytes([f[34], f[35]]);
        want.entry(sport).or_default().extend_from_slice(&f[54..]);
    }
    assert_eq!(
        streams.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{what}: streams captured"
    );
    for (sport, mut segs) in streams {
        segs.sort_by_key(|(s, _)| *s);
        let mut next = ISN;
        let mut bytes = Vec::new();
        for (s, payload) in segs {
            assert_eq!(s, next, "{what}: stream {sport}: gap or overlap at {s}");
            next = s + payload.len() as u32;
            bytes.extend_from_slice(&payload);
        }
        assert!(
            bytes == want[&sport],
            "{what}: stream {sport}: payload bytes differ from what was sent ({} vs {} bytes)",
            bytes.len(),
            want[&sport].len()
        );
    }
}

/// Sends two streams (two bursts) at top speed.
fn send_streams(tb: &Testbed, first_tag: u32) -> Vec<Vec<u8>> {
    let ep = tb.endpoints();
    let mut sent = Vec::new();
    for (k, sport) in [41000u16, 41001].into_iter().enumerate() {
        let s = tcp_stream(&ep, sport, first_tag + k as u32 * SEGS);
        tb.send_from_peer(&s, 0).expect("send segments");
        std::thread::sleep(Duration::from_millis(100));
        sent.extend(s);
    }
    sent
}

/// GRO merging on the capture interface, without `--fix-offloads`: ringcap
/// records the merged packets whole, exactly as tcpdump sees them, and
/// counts each packet longer than the MTU allows in packets_merged_by_offload
/// (JSON and report).
#[test]
fn gro_merged_packets_are_counted_as_merged_by_offload() {
    skip_unless_netns!();
    let tb = merging_testbed();
    let dir = TempDir::new("offload-merged");
    let json = dir.file("stats.json");
    let td_out = dir.join("tcpdump.pcap");
    let td = start_tcpdump(&tb, &td_out, None, "tcp").expect("start tcpdump");
    let run = start(
        &tb,
        &["-w", &dir.file("out.pcap"), "--stats-json", &json, "tcp"],
    );
    let sent = send_streams(&tb, 0);
    let fin = run.stop();
    td.finish(Duration::from_millis(200)).expect("stop tcpdump");
    fin.assert_ok("capture with GRO merging");
    fin.assert_no_loss("capture with GRO merging");
    let got = read(dir.join("out.pcap"));
    let oracle = read(&td_out);
    let merged = got.iter().filter(|p| p.wire_len > 1518).count() as u64;
    assert!(
        got.len() < sent.len() && merged > 0,
        "the kernel merged nothing: {} packets captured for {} sent (is GRO on veth supported here?)",
        got.len(),
        sent.len()
    );
    check_streams(&sent, &got, "ringcap, GRO on");
    let pairs = |v: &[CapturedPacket]| -> Vec<(u32, Vec<u8>)> {
        v.iter().map(|p| (p.wire_len, p.data.clone())).collect()
    };
    assert!(
        pairs(&got) == pairs(&oracle),
        "ringcap's packets differ from tcpdump's: lengths {:?} vs {:?}",
        got.iter().map(|p| p.wire_len).collect::<Vec<_>>(),
        oracle.iter().map(|p| p.wire_len).collect::<Vec<_>>()
    );
    let f = final_record(&json_records(&json)).clone();
    assert_eq!(num(&f, "packets_merged_by_offload"), merged, "{f}");
    assert_eq!(num(&f, "packets_written"), got.len() as u64, "{f}");
    assert_eq!(
        fin.report_value("merged by offload"),
        Some(merged),
        "{}",
        fin.stderr
    );
}

/// The same merging testbed with `--fix-offloads`: every segment is captured
/// as sent, byte for byte, and nothing counts as merged; after the capture
/// GRO is on again and really merges again (tcpdump sees merged packets).
#[test]
fn fix_offloads_stops_real_merging_and_it_resumes_after() {
    skip_unless_netns!();
    let tb = merging_testbed();
    let dir = TempDir::new("offload-unmerged");
    let json = dir.file("stats.json");
    let run = start(
        &tb,
        &[
            "--fix-offloads",
            "-w",
            &dir.file("out.pcap"),
            "--stats-json",
            &json,
            "tcp",
        ],
    );
    let sent = send_streams(&tb, 0);
    let fin = run.stop();
    fin.assert_ok("--fix-offloads on a merging testbed");
    fin.assert_no_loss("--fix-offloads on a merging testbed");
    let got = read(dir.join("out.pcap"));
    let lens: Vec<u32> = got.iter().map(|p| p.wire_len).collect();
    assert_eq!(got.len(), sent.len(), "packet count; lengths {lens:?}");
    for (i, (p, f)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(p.wire_len as usize, f.len(), "segment {i} length");
        assert!(p.data == *f, "segment {i} differs from the sent frame");
    }
    let f = final_record(&json_records(&json)).clone();
    assert_eq!(num(&f, "packets_merged_by_offload"), 0, "{f}");
    assert_eq!(num(&f, "packets_written"), sent.len() as u64, "{f}");
    assert!(gro_on(&tb), "GRO not restored");
    // Restored for real: the kernel merges again.
    let td_out = dir.join("after.pcap");
    let td = start_tcpdump(&tb, &td_out, None, "tcp").expect("start tcpdump");
    let again = send_streams(&tb, 2 * SEGS);
    std::thread::sleep(SETTLE);
    td.finish(Duration::from_millis(200)).expect("stop tcpdump");
    let after = read(&td_out);
    check_streams(&again, &after, "tcpdump after the capture");
    assert!(
        after.len() < again.len(),
        "no merging after GRO was restored: {} packets for {} sent",
        after.len(),
        again.len()
    );
}
