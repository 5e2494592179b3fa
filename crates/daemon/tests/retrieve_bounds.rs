//! Issue 27, retrieval under policy: what a hostile review of ringcapd's
//! retrieval found, against a real ringcapd and the unprivileged `nobody`.
//! The store's files are written here by root, so the answers are known
//! byte for byte.
//!
//! - A pcapng file in an interface's store that also holds another
//!   interface's packets (a capture of several interfaces into one file):
//!   only the store's interface is served, never the other's.
//! - A retrieval that reads and keeps nothing (a window between two
//!   packets, over a file without an index) still meets the grant's
//!   `max_time`: it was checked only when a packet was taken.
//! - A client that sends filter text naming hidden packets (`port 4444`,
//!   which the grant's `capture_filter` hides) with a program that accepts
//!   everything got the visible packets that share an index group with the
//!   hidden ones, and so learnt when the hidden host talked: each packet is
//!   now held to the text's plan by its own keys. The hostile client speaks
//!   the protocol raw, as `nobody` (this test binary run again in a role).
//!
//! Each was seen to fail with the daemon's check taken out (the taker's
//! `admits`, its `tick`, its `packet_may_match`).

mod common;

use common::*;
use ringcap_format::pcap;
use ringcap_format::pcapng::{self, InterfaceDescription, EPB_DATA_OFFSET};
use ringcap_format::TsResolution;
use ringcap_proto::{
    decode_response, encode_request, transport, FilterProgram, Request, Response, SnapRequest,
    MAX_DATAGRAM,
};
use ringcap_testkit::capture::records;
use ringcap_testkit::{frames, TempDir, Testbed};
use std::io::Read;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn grants(iface: &str, store: &Path, max_time: &str) -> String {
    format!(
        "[[store]]\ninterface = \"{iface}\"\ndir = \"{}\"\n\n[[grant]]\nusers = [\"nobody\"]\n\
         interfaces = [\"{iface}\"]\n\n[grant.retrieve]\nmax_window = \"1h\"\nmax_time = \"{max_time}\"\n\
         max_bytes = \"64M\"\n",
        store.display()
    )
}

fn store_dir() -> TempDir {
    let dir = TempDir::new("retrieve-bounds");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn epb(interface: u32, ts: u64, frame: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; pcapng::epb_len(frame.len())];
    pcapng::write_epb_header(
        &mut b,
        interface,
        ts,
        frame.len() as u32,
        frame.len() as u32,
    );
    b[EPB_DATA_OFFSET..EPB_DATA_OFFSET + frame.len()].copy_from_slice(frame);
    pcapng::write_epb_trailer(&mut b, frame.len() as u32);
    b
}

#[test]
fn only_the_stores_interface_is_served() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let iface = tb.capture_if.clone();
    let st = store_dir();
    // One section, three interfaces: the store's, another named one, and
    // an unnamed one after them; packets of all three interleaved.
    let idb = |name| InterfaceDescription {
        linktype: 1,
        snaplen: 262_144,
        name,
        filter: None,
        description: None,
    };
    let mut file = pcapng::section_header("Linux", "test", None);
    for name in [iface.as_str(), "other0", ""] {
        file.extend_from_slice(&pcapng::interface_description(&idb(name)));
    }
    let ep = tb.endpoints();
    let t0 = now_ns();
    let mut want = Vec::new();
    for seq in 0..300u32 {
        let on = seq % 3;
        let frame = frames::udp4(&ep, seq, 5000 + on as u16, 6000, 100);
        let ts = t0 + seq as u64 * 1000;
        file.extend_from_slice(&epb(on, ts, &frame));
        if on == 0 {
            want.push((ts, frame.len() as u32, frame));
        }
    }
    std::fs::write(st.join("cap-0001.pcapng"), &file).unwrap();
    let d = Daemon::start(&tb, &grants(&iface, st.path(), "60s"));
    let after = secs(t0);
    let (ok, err, got) = retrieve_as_nobody(&tb, &d, &iface, &["--after", &after], "");
    assert!(ok, "query: {err}");
    let got = records(&got);
    assert_eq!(got.len(), want.len(), "packets of other interfaces served");
    assert!(
        got == want,
        "not the store interface's packets, byte for byte"
    );
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}

/// A stored file that ends in a torn record is read up to it, and the
/// answer goes on to the next file; the client is told the answer was cut
/// by damage (not which store paths).
#[test]
fn a_torn_stored_file_is_read_up_to_its_damage() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let iface = tb.capture_if.clone();
    let st = store_dir();
    let idb = InterfaceDescription {
        linktype: 1,
        snaplen: 262_144,
        name: &iface,
        filter: None,
        description: None,
    };
    let ep = tb.endpoints();
    let t0 = now_ns();
    let mut want = Vec::new();
    for (n, torn) in [(1, true), (2, false)] {
        let mut file = pcapng::section_header("Linux", "test", None);
        file.extend_from_slice(&pcapng::interface_description(&idb));
        for seq in 0..50u32 {
            let frame = frames::udp4(&ep, seq, 5000, 6000, 100);
            let ts = t0 + (n * 1000 + seq as u64) * 1000;
            file.extend_from_slice(&epb(0, ts, &frame));
            if !(torn && seq == 49) {
                want.push((ts, frame.len() as u32, frame));
            }
        }
        if torn {
            file.truncate(file.len() - 9);
        }
        std::fs::write(st.join(format!("cap-000{n}.pcapng")), &file).unwrap();
    }
    let d = Daemon::start(&tb, &grants(&iface, st.path(), "60s"));
    let after = secs(t0);
    let (_, err, got) = retrieve_as_nobody(&tb, &d, &iface, &["--after", &after], "");
    assert!(err.contains("1 stored file(s) end in damage"), "{err}");
    assert!(!err.contains(&st.path().display().to_string()), "{err}");
    let got = records(&got);
    assert!(
        got == want,
        "{} packets, want {}: {err}",
        got.len(),
        want.len()
    );
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}

#[test]
fn a_retrieval_that_keeps_nothing_meets_max_time() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let iface = tb.capture_if.clone();
    let st = store_dir();
    // ~450 MB of 60-byte packets without an index: scanned whole (~0.5 s
    // from the page cache), well past a max_time of 0.1 s.
    let path = st.join("cap-0001.pcap");
    let t0 = now_ns();
    let n = 6_000_000u64;
    {
        let mut w =
            std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
        w.write_all(&pcap::file_header(1, 262_144, TsResolution::Nano))
            .unwrap();
        let frame = frames::udp4(&tb.endpoints(), 1, 5000, 6000, 18);
        let mut h = [0u8; pcap::RECORD_HEADER_LEN];
        for i in 0..n {
            pcap::write_record_header(
                &mut h,
                t0 + i * 2,
                frame.len() as u32,
                frame.len() as u32,
                TsResolution::Nano,
            );
            w.write_all(&h).unwrap();
            w.write_all(&frame).unwrap();
        }
        w.flush().unwrap();
    }
    // Warm: the scan is then CPU-bound and repeatable.
    std::fs::read(&path).unwrap();
    let d = Daemon::start(&tb, &grants(&iface, st.path(), "0.1s"));
    // A window between two packets of the middle of the file.
    let mid = t0 + n;
    let (after, before) = (secs(mid + 1), secs(mid + 2));
    let started = Instant::now();
    let (ok, err, got) = retrieve_as_nobody(
        &tb,
        &d,
        &iface,
        &["--after", &after, "--before", &before],
        "",
    );
    let took = started.elapsed();
    println!("took {took:?}: {}", err.trim());
    assert!(
        !ok && err.contains("max_time"),
        "not cut by max_time: {err}"
    );
    assert!(got.is_empty() || records(&got).is_empty());
    assert!(took < Duration::from_secs(5), "{took:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !d.log.text().contains("retrieve-end") {
        assert!(Instant::now() < deadline, "{}", d.log.text());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        d.log.text().contains("max_time"),
        "the audit log says why: {}",
        d.log.text()
    );
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}

/// A store whose parent others may write (and so rename the store, or put
/// another directory in its place during a retrieval) is refused; under a
/// sticky parent (as /tmp) it is served.
#[test]
fn a_store_under_a_parent_others_may_write_is_refused() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let iface = tb.capture_if.clone();
    let parent = TempDir::new("retrieve-parent");
    let store = parent.join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t0 = now_ns();
    let frame = frames::udp4(&tb.endpoints(), 1, 5000, 6000, 18);
    let mut file = pcap::file_header(1, 262_144, TsResolution::Nano).to_vec();
    let mut h = [0u8; pcap::RECORD_HEADER_LEN];
    let n = frame.len() as u32;
    pcap::write_record_header(&mut h, t0, n, n, TsResolution::Nano);
    file.extend_from_slice(&h);
    file.extend_from_slice(&frame);
    std::fs::write(store.join("cap-0001.pcap"), &file).unwrap();
    let d = Daemon::start(&tb, &grants(&iface, &store, "60s"));
    let after = secs(t0);
    for (mode, served) in [(0o777, false), (0o1777, true), (0o755, true)] {
        std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        let (ok, err, got) = retrieve_as_nobody(&tb, &d, &iface, &["--after", &after], "");
        if served {
            assert!(ok, "mode {mode:o}: {err}");
            assert_eq!(records(&got).len(), 1, "mode {mode:o}");
        } else {
            assert!(!ok && err.contains("parent"), "mode {mode:o}: {err}");
            assert!(got.is_empty() || records(&got).is_empty());
        }
    }
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}

/// The role this test binary plays as `nobody` for
/// [`text_naming_hidden_packets_learns_nothing`]: a raw `Retrieve` with the
/// text in `RINGCAP_RETRIEVE_ROLE` and a program accepting everything; the
/// answer's bytes go to the file `RINGCAP_OUT`.
#[test]
fn role() {
    let Ok(text) = std::env::var("RINGCAP_RETRIEVE_ROLE") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("role without {k}"));
    let fd = transport::connect(Path::new(&var("RINGCAP_SOCKET"))).expect("connect");
    let req = Request::Retrieve {
        interface: var("RINGCAP_IFACE"),
        filter: text,
        program: Some(FilterProgram::encode(&[(0x06, 0, 0, 262_144)], false)),
        snaplen: SnapRequest::Bytes(262_144),
        after_ns: Some(var("RINGCAP_AFTER").parse().unwrap()),
        before_ns: None,
        max_bytes: None,
    };
    transport::send(&fd, &encode_request(&req), &[]).expect("send");
    let mut buf = Box::new([0u8; MAX_DATAGRAM]);
    let (len, fds) = transport::recv(&fd, &mut buf)
        .expect("recv")
        .expect("an answer");
    let r = decode_response(&buf[..len]).expect("decodes");
    assert!(matches!(r, Response::Retrieving { .. }), "{r:?}");
    let mut pipe = std::fs::File::from(fds.into_iter().next().expect("the answer's pipe"));
    let mut answer = Vec::new();
    pipe.read_to_end(&mut answer).expect("read the answer");
    std::fs::write(var("RINGCAP_OUT"), &answer).expect("write the answer");
}

#[test]
fn text_naming_hidden_packets_learns_nothing() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let iface = tb.capture_if.clone();
    let st = store_dir();
    let ep = tb.endpoints();
    // 20 index groups of 32 packets; groups 3 and 11 each hold one packet
    // of the hidden port 4444 among visible ones.
    let t0 = now_ns();
    let path = st.join("cap-0001.pcap");
    let mut file = pcap::file_header(1, 262_144, TsResolution::Nano).to_vec();
    let (mut visible, mut on_5003) = (0, 0);
    for seq in 0..640u32 {
        let hidden = seq == 3 * 32 + 7 || seq == 11 * 32 + 20;
        let sport = if hidden {
            4444
        } else {
            5000 + (seq % 50) as u16
        };
        let frame = frames::udp4(&ep, seq, sport, 6000, 40);
        let mut h = [0u8; pcap::RECORD_HEADER_LEN];
        let n = frame.len() as u32;
        pcap::write_record_header(&mut h, t0 + seq as u64 * 1000, n, n, TsResolution::Nano);
        file.extend_from_slice(&h);
        file.extend_from_slice(&frame);
        visible += !hidden as usize;
        on_5003 += (sport == 5003) as usize;
    }
    std::fs::write(&path, &file).unwrap();
    ringcap_index::build_index(&path).expect("index");
    let policy = format!(
        "[[store]]\ninterface = \"{iface}\"\ndir = \"{}\"\n\n[[grant]]\nusers = [\"nobody\"]\n\
         interfaces = [\"{iface}\"]\ncapture_filter = \"not port 4444\"\n\n[grant.retrieve]\n\
         max_window = \"1h\"\nmax_bytes = \"64M\"\nindex = true\n",
        st.path().display()
    );
    let d = Daemon::start(&tb, &policy);
    let out = open_dir("retrieve-hostile");
    let ask = |text: &str| -> usize {
        let file: PathBuf = out.join("answer.pcap");
        let _ = std::fs::remove_file(&file);
        let exe = std::env::current_exe().expect("the test executable");
        let mut cmd = as_user(&tb, NOBODY, &exe);
        cmd.args(["--exact", "role", "--nocapture", "--test-threads=1"])
            .env("RINGCAP_RETRIEVE_ROLE", text)
            .env("RINGCAP_SOCKET", &d.socket)
            .env("RINGCAP_IFACE", &iface)
            .env("RINGCAP_AFTER", (t0 - 1_000_000_000).to_string())
            .env("RINGCAP_OUT", &file);
        let (status, _, err) = run_limited_out(&mut cmd, Duration::from_secs(60));
        assert!(status.success(), "the role failed: {err}");
        records(&std::fs::read(&file).expect("the answer")).len()
    };
    // Control: everything visible comes back.
    assert_eq!(ask(""), visible);
    // Text naming the hidden packets, with a program accepting all: before
    // the fix the 62 visible packets of groups 3 and 11 came back.
    for text in ["port 4444", "udp port 4444", "port 4444 or port 4444"] {
        assert_eq!(ask(text), 0, "'{text}': packets chosen by hidden ones");
    }
    // What the text names among visible packets still comes back.
    assert_eq!(ask("port 5003"), on_5003, "port 5003");
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}
