//! A client's output is exactly what tcpdump, run as root with the combined
//! filter `(framework) and (client)` and the capped snap length, captures on
//! the same traffic — byte for byte, timestamps and file header included —
//! and its counters add up.

mod common;

use common::*;
use ringcap_testkit::{frames, TempDir, Testbed};

/// The grant's framework filter: leaves out flow 1 of every shape.
const FRAMEWORK: &str = "not port 20001";
/// The grant's snap cap, in bytes.
const CAP: u32 = 128;

#[test]
fn output_is_what_tcpdump_captures_with_the_combined_filter_and_capped_snaplen() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(
        &tb,
        &format!("capture_filter = \"{FRAMEWORK}\"\nmax_snaplen = {CAP}\n"),
    );
    let out = open_dir("oracle-out");
    let td = TempDir::new("oracle-tcpdump");

    // A: bytes, asked above the cap. B: headers under the byte cap, which
    // tcpdump cannot do: its oracle is a whole-packet tcpdump (prefixes).
    let filter_a = "udp or icmp or arp";
    let filter_b = "ip or ip6";
    let a = start_client(&tb, &d, NOBODY, &out, "a", &["-s", "1000", filter_a]);
    let b = start_client(&tb, &d, NOBODY, &out, "b", &["-s", "headers", filter_b]);
    // C: A's request over a compressed stream: the same file.
    let c = start_client(
        &tb,
        &d,
        NOBODY,
        &out,
        "c",
        &["-s", "1000", "--compress", filter_a],
    );
    // D: the compressed stream kept as it is, in a compressed file with
    // nanosecond timestamps (no decoding in the client).
    let d_client = start_client(
        &tb,
        &d,
        NOBODY,
        &out,
        "d",
        &[
            "-s",
            "1000",
            "--compress",
            "--format",
            "compressed",
            "--tstamp-precision",
            "nano",
            filter_a,
        ],
    );
    assert!(
        a.ready
            .contains(&format!("snaplen {CAP} bytes, the grant's cap"))
            && a.ready.contains("grant 1,"),
        "client A's effective settings: {}",
        a.ready
    );
    assert!(
        c.ready.contains("compressed stream"),
        "client C: {}",
        c.ready
    );
    assert!(
        b.ready.contains(&format!(
            "snaplen headers (at most {CAP} bytes), the grant's cap"
        )),
        "client B's effective settings: {}",
        b.ready
    );
    let td_a = start_tcpdump(
        &tb,
        &td.join("a.pcap"),
        CAP,
        &format!("({FRAMEWORK}) and ({filter_a})"),
    );
    let td_b = start_tcpdump(
        &tb,
        &td.join("b.pcap"),
        262_144,
        &format!("({FRAMEWORK}) and ({filter_b})"),
    );

    let sent = frames::mixed_sequence(&tb.endpoints(), 23 * 4 * 50);
    tb.send_from_peer(&sent, 20_000).expect("send");
    // A is interrupted at once: what the daemon had taken from the kernel
    // when it was told to close must still reach A's file.
    let fa = a.interrupt();
    let fb = b.stop();
    let fc = c.interrupt();
    let fd = d_client.interrupt();
    std::thread::sleep(SETTLE);
    let want_a = td_a.stop();
    let want_b = td_b.stop();
    fa.assert_ok("client A");
    fb.assert_ok("client B");
    fc.assert_ok("client C");
    fd.assert_ok("client D");

    // The oracle saw what the framework allows: a sanity check of the test.
    let oracle = Oracle::new(FRAMEWORK, filter_a);
    assert_packets(
        &want_a,
        &oracle.expect(&sent, CAP as usize),
        "tcpdump (the oracle) against the frames sent",
    );
    assert!(want_a.len() > 1000, "{} packets", want_a.len());

    // A: the files are the same bytes.
    let got_a = std::fs::read(&fa.out).expect("A's file");
    let td_a_bytes = std::fs::read(td.join("a.pcap")).expect("tcpdump's file");
    if got_a != td_a_bytes {
        assert_packets(
            &fa.packets(),
            &want_a
                .iter()
                .map(|p| (p.wire_len, p.data.clone()))
                .collect::<Vec<_>>(),
            "client A against tcpdump",
        );
        let got = fa.packets();
        for (i, (g, w)) in got.iter().zip(&want_a).enumerate() {
            assert_eq!(g.ts_ns, w.ts_ns, "client A: packet {i}'s timestamp");
        }
        panic!(
            "client A's file differs from tcpdump's in its header: {:02x?} vs {:02x?}",
            &got_a[..24.min(got_a.len())],
            &td_a_bytes[..24.min(td_a_bytes.len())]
        );
    }
    // C: the compressed stream decodes to the same file; the ring carried
    // a fraction of the bytes.
    let got_c = std::fs::read(&fc.out).expect("C's file");
    if got_c != td_a_bytes {
        assert_packets(
            &fc.packets(),
            &want_a
                .iter()
                .map(|p| (p.wire_len, p.data.clone()))
                .collect::<Vec<_>>(),
            "client C (compressed) against tcpdump",
        );
        panic!("client C's file differs from tcpdump's beyond its packets");
    }
    let cc = fc.final_counters("client C");
    assert_eq!(num(&cc, "packets_written"), want_a.len() as u64, "{cc}");
    // D: the daemon's blocks as they came, a compressed file that ringcap
    // turns into tcpdump's file.
    let got_d = std::fs::read(&fd.out).expect("D's file");
    assert!(
        got_d.starts_with(b"\x89RCZ"),
        "client D's file is not compressed"
    );
    assert!(
        got_d.len() * 2 < td_a_bytes.len(),
        "client D's file: {} bytes, tcpdump's {}",
        got_d.len(),
        td_a_bytes.len()
    );
    let d_pcap = out.join("d-back.pcap");
    let (st, log) = run_limited(
        std::process::Command::new(ringcap_bin())
            .arg("capture")
            .arg("-r")
            .arg(&fd.out)
            .arg("-w")
            .arg(&d_pcap)
            .args(["--tstamp-precision", "nano", "-s", &CAP.to_string()]),
        std::time::Duration::from_secs(60),
    );
    assert!(st.success(), "ringcap -r D's file: {log}");
    if std::fs::read(&d_pcap).expect("D's file as pcap") != td_a_bytes {
        assert_packets(
            &read(&d_pcap),
            &want_a
                .iter()
                .map(|p| (p.wire_len, p.data.clone()))
                .collect::<Vec<_>>(),
            "client D (compressed file) against tcpdump",
        );
        for (i, (g, w)) in read(&d_pcap).iter().zip(&want_a).enumerate() {
            assert_eq!(g.ts_ns, w.ts_ns, "client D: packet {i}'s timestamp");
        }
        let back = std::fs::read(&d_pcap).expect("D's file as pcap");
        panic!(
            "client D's file, as pcap, differs from tcpdump's in its header: {:02x?} vs {:02x?}",
            &back[..24.min(back.len())],
            &td_a_bytes[..24.min(td_a_bytes.len())]
        );
    }
    let cd = fd.final_counters("client D");
    assert_eq!(num(&cd, "packets_written"), want_a.len() as u64, "{cd}");

    let ca = fa.final_counters("client A");
    assert_eq!(num(&ca, "packets_delivered"), want_a.len() as u64, "{ca}");
    assert_eq!(num(&ca, "packets_written"), want_a.len() as u64, "{ca}");
    let wire: u64 = want_a.iter().map(|p| u64::from(p.wire_len)).sum();
    assert_eq!(num(&ca, "bytes_on_wire"), wire, "{ca}");

    // B: the same packets and timestamps; each the headers only: a prefix
    // of the whole packet, at most the cap, and for plain UDP over IPv4
    // (42 bytes of headers, 46 with a VLAN tag) exactly the headers.
    let got_b = fb.packets();
    assert_eq!(
        got_b.len(),
        want_b.len(),
        "client B: {} packets, tcpdump {}",
        got_b.len(),
        want_b.len()
    );
    for (i, (g, w)) in got_b.iter().zip(&want_b).enumerate() {
        let seq = frames::seq_of(&w.data);
        assert_eq!(
            (g.ts_ns, g.wire_len),
            (w.ts_ns, w.wire_len),
            "client B packet {i} (seq {seq:?})"
        );
        assert!(
            g.data.len() <= CAP as usize && w.data.starts_with(&g.data) && g.data.len() >= 14,
            "client B packet {i} (seq {seq:?}): {} bytes, not a prefix of at most {CAP} bytes of the packet",
            g.data.len()
        );
        match seq.map(frames::mixed_shape) {
            Some(frames::Shape::Udp4) => assert_eq!(g.data.len(), 42, "packet {i}: UDP headers"),
            Some(frames::Shape::VlanUdp4) => {
                assert_eq!(g.data.len(), 46, "packet {i}: VLAN + UDP headers")
            }
            Some(frames::Shape::Udp4Max) => assert_eq!(g.data.len(), 42, "packet {i}"),
            _ => {}
        }
    }
    let cb = fb.final_counters("client B");
    assert_eq!(num(&cb, "packets_written"), want_b.len() as u64, "{cb}");
    d.stop();
}

/// A client interrupted while packets flow: every packet the daemon
/// delivered to it before the end is in its file (the first ones the
/// filters keep, in order), and its final counters add up exactly.
#[test]
fn a_client_interrupted_mid_traffic_writes_and_counts_every_delivered_packet() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(
        &tb,
        &format!("capture_filter = \"{FRAMEWORK}\"\nmax_snaplen = {CAP}\n"),
    );
    let out = open_dir("interrupted");
    let filter = "udp or icmp or arp";
    let c = start_client(&tb, &d, NOBODY, &out, "c", &["-s", "1000", filter]);
    // Long enough (about half a second at the generator's top rate here,
    // sent three times over) that the stop, and the daemon's drain of what
    // the kernel already took (two ring-block timeouts), land while packets
    // still flow, also when the machine is fast or the stats slow to come
    // (once, a single round ended before the stop: every packet delivered).
    const ROUNDS: usize = 3;
    let sent = untagged_frames(&tb, 0..23 * 8000);
    let f = std::thread::scope(|s| {
        // As fast as the generator goes: the daemon is busy when told to stop.
        let sender = s.spawn(|| (0..ROUNDS).try_for_each(|_| tb.send_from_peer(&sent, 0)));
        // Stopped once the daemon has taken packets for it (a fixed delay
        // could end before the generator starts on a loaded machine), while
        // the rest still flow.
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_secs(10)
            && stats_json(&tb, &d, None).iter().all(|s| {
                s["counters"]["packets_filter_accepted"]
                    .as_u64()
                    .unwrap_or(0)
                    == 0
            })
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let f = c.interrupt();
        sender.join().expect("sender thread").expect("send");
        f
    });
    f.assert_ok("client C");
    let got = f.packets();
    // The filters decide on each packet alone: the rounds' packets are the
    // first round's, again.
    let once = Oracle::new(FRAMEWORK, filter).expect(&sent, CAP as usize);
    let want: Vec<_> = (0..ROUNDS).flat_map(|_| once.iter().cloned()).collect();
    assert!(
        !got.is_empty() && got.len() < want.len(),
        "client C, stopped mid-traffic, has {} of {} packets",
        got.len(),
        want.len()
    );
    assert_packets(&got, &want[..got.len()], "client C");
    // What the daemon counts as delivered is what the client wrote...
    let cc = final_record(&f.json);
    assert_eq!(num(&cc, "packets_delivered"), got.len() as u64, "{cc}");
    assert_eq!(num(&cc, "packets_written"), got.len() as u64, "{cc}");
    // ... and every packet the filters accepted is accounted for.
    check_identities(&cc, "client C");
    d.stop();
}

/// SIGUSR1 to a client of ringcapd prints the session's counters, freshly
/// asked of the daemon, and SIGUSR2 does no harm: the client goes on, and
/// its file is still exactly the oracle's (both signals used to kill it).
#[test]
fn a_client_prints_its_counters_on_sigusr1_and_goes_on() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(
        &tb,
        &format!("capture_filter = \"{FRAMEWORK}\"\nmax_snaplen = {CAP}\n"),
    );
    let out = open_dir("usr1");
    let filter = "udp or icmp or arp";
    let mut c = start_client(&tb, &d, NOBODY, &out, "c", &["-s", "1000", filter]);
    let sent = untagged_frames(&tb, 0..400);
    let said = |c: &Client, n: usize| {
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(5) {
            if c.log.text().matches("counters now (SIGUSR1)").count() >= n {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    };
    tb.send_from_peer(&sent[..200], 0).expect("send");
    std::thread::sleep(SETTLE);
    c.child.signal(libc::SIGUSR1).expect("SIGUSR1");
    assert!(said(&c, 1), "no counters after SIGUSR1:\n{}", c.log.text());
    c.child.signal(libc::SIGUSR2).expect("SIGUSR2");
    tb.send_from_peer(&sent[200..], 0).expect("send");
    std::thread::sleep(SETTLE);
    c.child.signal(libc::SIGUSR1).expect("SIGUSR1");
    assert!(said(&c, 2), "no second counters:\n{}", c.log.text());
    assert!(
        c.child.try_wait().expect("try_wait").is_none(),
        "{}",
        c.log.text()
    );
    let f = c.stop();
    f.assert_ok("client after SIGUSR1 and SIGUSR2");
    let want = Oracle::new(FRAMEWORK, filter).expect(&sent, CAP as usize);
    let got = f.packets();
    assert_eq!(got.len(), want.len(), "packets of the client");
    assert_packets(&got, &want, "client after SIGUSR1 and SIGUSR2");
    d.stop();
}
