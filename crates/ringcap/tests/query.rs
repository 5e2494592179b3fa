//! `ringcap index` and `ringcap query` from the command line: the output is
//! what `tcpdump -r` of each file in time order writes with the same filter
//! (restricted to the window), indexed files or not; hidden partial files
//! are skipped, a damaged or unknown index is refused and the file scanned;
//! and a live capture with rotation and retention indexes every file it
//! publishes and deletes the index with its file.

#[path = "../../index/tests/mixed/mod.rs"]
mod mixed;
mod storage_support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use mixed::Rng;
use ringcap_testkit::{skip_unless_netns, Testbed};
use storage_support::*;

use ringcap_testkit::capture::records;

/// `tcpdump -r` of each file in turn, records concatenated, in `[after, before)`.
fn tcpdump(files: &[PathBuf], filter: &str, after: u64, before: u64) -> Vec<mixed::Rec> {
    let mut all = ringcap_testkit::capture::tcpdump_read(files, filter).expect("tcpdump -r");
    all.retain(|r| r.0 >= after && r.0 < before);
    all
}

fn ringcap(args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ringcap")
}

fn rfc3339(ns: u64) -> String {
    // Through `date`, an implementation that is not ringcap's.
    let out = Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("@{}", ns / 1_000_000_000),
            "+%Y-%m-%dT%H:%M:%S",
        ])
        .output()
        .expect("date");
    format!(
        "{}.{:09}Z",
        String::from_utf8_lossy(&out.stdout).trim(),
        ns % 1_000_000_000
    )
}

#[test]
fn cli_query_matches_tcpdump() {
    if skip_without(&["tcpdump", "date"]) {
        return;
    }
    let d = TempDir::new("query-cli");
    let dir = d.join("caps");
    std::fs::create_dir(&dir).unwrap();
    let mut rng = Rng(99);
    let t0 = 1_764_000_000_000_000_000u64;
    let files = mixed::write_series(&dir, &mut rng, 8, 300, t0);
    // What the directory also holds: a partial file being written, a note.
    std::fs::write(
        dir.join(".cap-999.pcap.ringcap-partial"),
        b"partial garbage",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), b"not a capture").unwrap();
    let mut a = vec!["index"];
    let names: Vec<String> = files[..6].iter().map(|f| f.display().to_string()).collect();
    a.extend(names.iter().map(String::as_str));
    let o = ringcap(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout);
    assert_eq!(said.matches("indexed").count(), 6, "{said}");
    // The index of file 5 claims a version from the future.
    let idx5 = ringcap_index::index_path(&files[5]);
    let mut raw = std::fs::read(&idx5).unwrap();
    raw[8] = 99;
    std::fs::write(&idx5, raw).unwrap();
    // A block of file 4's index is damaged past its head: a query that
    // reads it finds the checksum wrong and scans the file (it failed the
    // whole query).
    let idx4 = ringcap_index::index_path(&files[4]);
    let mut raw = std::fs::read(&idx4).unwrap();
    let at = raw.len() - 5;
    raw[at] ^= 0xff;
    std::fs::write(&idx4, raw).unwrap();
    assert!(
        ringcap_index::load_index(&files[4]).is_ok(),
        "the head is intact"
    );
    assert!(ringcap_index::load_checked_index(&files[4]).is_err());
    let span = 8 * 300 * 1_000_000u64;
    let dir_s = dir.display().to_string();
    let out = d.join("out.pcap").display().to_string();
    let cases: Vec<(String, u64, u64)> = vec![
        ("host 198.18.0.7 or host 198.18.1.9".into(), 0, u64::MAX),
        ("vlan 100 and udp".into(), t0 + span / 5, t0 + span / 2),
        (
            "tcp port 443 or (udp and not port 53)".into(),
            t0 + span / 3,
            u64::MAX,
        ),
        ("net 198.19.0.0/16".into(), 0, t0 + 2 * span / 3),
        ("ip6 and port 80".into(), t0 + span / 7, t0 + 6 * span / 7),
        ("".into(), t0 + span / 2, t0 + span / 2 + 50_000_000),
    ];
    let mut damage_seen = false;
    for (i, (filter, after, before)) in cases.iter().enumerate() {
        let mut a: Vec<String> = vec!["query".into(), "-d".into(), dir_s.clone(), "-v".into()];
        if *after > 0 {
            // Both forms of time: RFC 3339 and seconds with a fraction.
            a.extend(["--after".into(), rfc3339(*after)]);
        }
        if *before < u64::MAX {
            a.extend([
                "--before".into(),
                format!("{}.{:09}", before / 1_000_000_000, before % 1_000_000_000),
            ]);
        }
        let pcapng = i % 2 == 1;
        if pcapng {
            a.extend(["--format".into(), "pcapng".into(), "-w".into(), "-".into()]);
        } else {
            a.extend(["-w".into(), out.clone()]);
        }
        a.push(filter.clone());
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = ringcap(&refs);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{a:?}: {err}");
        let got = if pcapng {
            assert_eq!(
                &o.stdout[..4],
                &[0x0a, 0x0d, 0x0d, 0x0a],
                "pcapng on stdout"
            );
            records(&o.stdout)
        } else {
            records(&std::fs::read(&out).unwrap())
        };
        let want = tcpdump(&files, filter, *after, *before);
        assert!(
            got == want,
            "'{filter}': {} packets, tcpdump {}\n{err}",
            got.len(),
            want.len()
        );
        // Unindexed and refused indexes are scanned, and said so; the
        // partial file and the note are not queried.
        for f in &files[6..] {
            assert!(
                err.contains(&format!("{}: no index; scanning it", f.display())),
                "{err}"
            );
        }
        assert!(err.contains("version 99"), "{err}");
        // (A query reads the blocks of its keys only.)
        damage_seen |= err.contains(&format!(
            "{}: index not usable: {}: damaged index file",
            files[4].display(),
            idx4.display()
        ));
        assert!(
            err.contains("notes.txt: not a capture file, skipped"),
            "{err}"
        );
        assert!(!err.contains("partial"), "{err}");
        println!(
            "'{filter}': {} packets; {}",
            got.len(),
            err.lines().last().unwrap_or("")
        );
    }
    if !damage_seen {
        // The block damaged is the index's last: the VLAN keys.
        let o = ringcap(&["query", "-d", &dir_s, "-w", &out, "vlan 100"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert_eq!(
            records(&std::fs::read(&out).unwrap()),
            tcpdump(&files, "vlan 100", 0, u64::MAX)
        );
        damage_seen = err.contains(&format!(
            "{}: index not usable: {}: damaged index file",
            files[4].display(),
            idx4.display()
        ));
    }
    assert!(damage_seen, "no query read file 4's damaged block");
    // Explicit files and --filter; an index rebuilt by `ringcap index --force`.
    let o = ringcap(&["index", "--force", &files[5].display().to_string()]);
    assert!(o.status.success());
    let f5 = files[5].display().to_string();
    let o = ringcap(&["query", &f5, "--filter", "udp", "-w", &out]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        records(&std::fs::read(&out).unwrap()),
        tcpdump(&files[5..6], "udp", 0, u64::MAX)
    );
    // `ringcap index` checks every block before it calls an index up to
    // date: file 4's is rebuilt.
    let f4 = files[4].display().to_string();
    let o = ringcap(&["index", &f4]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && said.contains("indexed"), "{said}");
    assert!(ringcap_index::load_checked_index(&files[4]).is_ok());
    // `ringcap repair` rebuilds a missing index (and leaves a good one).
    std::fs::remove_file(ringcap_index::index_path(&files[0])).unwrap();
    let f0 = files[0].display().to_string();
    let o = ringcap(&["repair", &f0, &f5]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{said}");
    assert!(said.contains("index rebuilt (missing)"), "{said}");
    assert_eq!(said.matches("index rebuilt").count(), 1, "{said}");
    assert!(ringcap_index::load_index(&files[0]).is_ok());
    // Bad input: a clear message and exit status 2.
    for bad in [
        vec!["query", "-d", &dir_s, "--after", "yesterday", "udp"],
        vec!["query", "-d", &dir_s, "-w", &out, "port 99999999"],
    ] {
        let o = ringcap(&bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        assert!(!o.stderr.is_empty());
    }
}

/// Live: rotation every 40 packets, 3 files kept. Every published file gets
/// its index, the deleted ones lose theirs, and a query over the directory
/// gives what tcpdump reads from the files.
#[test]
fn live_capture_indexes_what_it_publishes() {
    skip_unless_netns!();
    if skip_without(&["tcpdump"]) {
        return;
    }
    for no_index in [false, true] {
        let tb = Testbed::new().expect("testbed");
        let d = TempDir::new("query-live");
        let out = d.join("out");
        let mut dir_arg = out.clone().into_os_string();
        dir_arg.push("/");
        let mut extra = args!["--rotate-packets", "40", "-W", "3", "-w", dir_arg, "udp"];
        if no_index {
            extra.push("--no-index".into());
        }
        let live = Live::start(&tb, &extra);
        let frames = testbed_frames(&tb, 0, 200, 300);
        send(&tb, &frames, 400);
        std::thread::sleep(Duration::from_millis(500));
        let (st, err) = live.stop();
        assert!(st.success(), "ringcap: {st}\n{err}");
        let files = outputs(&out, ".pcapng", &[]);
        assert_eq!(files.len(), 3, "{files:?}\n{err}");
        let indexes: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".ringcap-index"))
            .collect();
        if no_index {
            assert!(indexes.is_empty(), "--no-index: {indexes:?}");
            continue;
        }
        assert_eq!(
            indexes.len(),
            3,
            "one index per kept file: {indexes:?}\n{err}"
        );
        assert!(
            !err.contains("read back"),
            "every file indexed from its tap: {err}"
        );
        let mut lag = Duration::ZERO;
        for f in &files {
            let idx =
                ringcap_index::load_index(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            assert_eq!(idx.summary.packets, 40, "{}", f.display());
            // Taken from the bytes as they were written (ring blocks
            // written in place), the index is the one a reader of the
            // published file builds.
            let again = d.join("again");
            std::fs::create_dir_all(&again).unwrap();
            let copy = again.join(f.file_name().unwrap());
            std::fs::copy(f, &copy).unwrap();
            ringcap_index::build_index(&copy).unwrap();
            assert!(
                std::fs::read(ringcap_index::index_path(f)).unwrap()
                    == std::fs::read(ringcap_index::index_path(&copy)).unwrap(),
                "{}: the index taken while writing differs from the file's",
                f.display()
            );
            // From the file's last write to its index's publication (the
            // index's change time: its modification time is the file's, by
            // design): how long after the file the index came.
            use std::os::unix::fs::MetadataExt;
            let meta = |p: &std::path::Path| std::fs::metadata(p).unwrap();
            let ns = |s: i64, n: i64| Duration::new(s as u64, n as u32);
            let (file, index) = (meta(f), meta(&ringcap_index::index_path(f)));
            assert_eq!(index.modified().unwrap(), file.modified().unwrap());
            let after = ns(index.ctime(), index.ctime_nsec())
                .saturating_sub(ns(file.mtime(), file.mtime_nsec()));
            lag = lag.max(after);
        }
        println!("index published at most {lag:?} after its file");
        assert!(lag < Duration::from_secs(2), "index {lag:?} after its file");
        let dir_s = out.display().to_string();
        let q = d.join("q.pcap").display().to_string();
        let filter = format!("udp port 7000 and host {}", tb.sink_ip());
        let o = ringcap(&["query", "-d", &dir_s, "-w", &q, "-v", &filter]);
        let qerr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{qerr}");
        assert!(!qerr.contains("scanning"), "every file indexed: {qerr}");
        let got = records(&std::fs::read(&q).unwrap());
        let mut sorted = files.clone();
        sorted.sort();
        assert_eq!(got.len(), 120, "{qerr}");
        assert!(got == tcpdump(&sorted, &filter, 0, u64::MAX));
        println!("{}", qerr.trim());
    }
}

/// `-w FILE` is written whole or not at all: a query that fails (a filter
/// libpcap refuses, a file it cannot read) leaves FILE as it was, and FILE
/// may be one of the query's own inputs (it is read whole before it is
/// replaced). Both emptied FILE before.
#[test]
fn a_failed_query_leaves_its_output_file_alone() {
    if skip_without(&["tcpdump"]) {
        return;
    }
    let d = TempDir::new("query-out");
    std::fs::create_dir_all(d.join("caps")).unwrap();
    let files = mixed::write_series(
        &d.join("caps"),
        &mut Rng(41),
        2,
        300,
        1_764_000_000_000_000_000,
    );
    let before = b"an earlier answer".to_vec();
    let out = d.join("out.pcap");
    let o = |s: &std::path::Path| s.to_str().unwrap().to_string();
    for (args, why) in [
        (
            vec![
                "query",
                "-d",
                &o(&d.join("caps")),
                "-w",
                &o(&out),
                "udp port",
            ],
            "bad filter",
        ),
        (
            vec![
                "query",
                "-w",
                &o(&out),
                "--filter",
                "udp",
                &o(&d.join("nonexistent.pcap")),
            ],
            "no file",
        ),
    ] {
        std::fs::write(&out, &before).unwrap();
        let r = ringcap(&args);
        assert!(
            !r.status.success(),
            "{why}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert_eq!(
            std::fs::read(&out).unwrap(),
            before,
            "{why}: -w FILE was changed"
        );
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(
            left.is_empty(),
            "{why}: a hidden file left behind: {left:?}"
        );
    }
    // The input as the output: what tcpdump -r gives of the old contents.
    let input = d.join("in.pcap");
    std::fs::copy(&files[0], &input).unwrap();
    let want = tcpdump(std::slice::from_ref(&input), "udp", 0, u64::MAX);
    assert!(!want.is_empty());
    let r = ringcap(&["query", "--filter", "udp", "-w", &o(&input), &o(&input)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(records(&std::fs::read(&input).unwrap()), want);
}

/// Mistakes a tcpdump user makes get a usage error that says what to do:
/// a filter given where files go, and a window that holds no time (it
/// answered nothing, with success).
#[test]
fn query_mistakes_are_usage_errors() {
    let d = TempDir::new("query-mistakes");
    std::fs::create_dir_all(d.join("caps")).unwrap();
    let files = mixed::write_series(
        &d.join("caps"),
        &mut Rng(43),
        1,
        50,
        1_764_000_000_000_000_000,
    );
    let f = files[0].to_str().unwrap();
    let r = ringcap(&["query", "-w", "-", f, "udp"]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("udp: no such file") && err.contains("--filter"),
        "{err}"
    );
    let caps = d.join("caps");
    let r = ringcap(&[
        "query",
        "-d",
        caps.to_str().unwrap(),
        "--after",
        "1800000000",
        "--before",
        "1700000000",
        "-w",
        "-",
        "udp",
    ]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("the time window is empty"));
    // A named file that is not a capture: bad input for query and index alike.
    let junk = d.join("notes.pcap");
    std::fs::write(&junk, b"not a capture at all\n").unwrap();
    let junk = junk.to_str().unwrap();
    for cmd in [
        vec!["query", "--filter", "udp", "-w", "-", junk],
        vec!["index", junk],
    ] {
        let r = ringcap(&cmd);
        assert_eq!(r.status.code(), Some(2), "{cmd:?}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("not a pcap or pcapng file"), "{cmd:?}: {err}");
    }
}

/// `--format pcapng` keeps the interfaces of the files queried: a capture
/// of two named interfaces gives two interface blocks with their names,
/// each packet in its own (they were merged into one unnamed block per
/// link type).
#[test]
fn pcapng_answers_keep_the_interfaces() {
    use ringcap_format::pcapng::{self, InterfaceDescription};
    let d = TempDir::new("query-ifaces");
    let mut file = pcapng::section_header("Linux", "test", None);
    for name in ["eth0", "eth1"] {
        file.extend(pcapng::interface_description(&InterfaceDescription {
            linktype: 1,
            snaplen: 262_144,
            name,
            filter: None,
            description: None,
        }));
    }
    let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    frame.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
    frame.extend_from_slice(&[
        198, 18, 0, 1, 198, 18, 0, 2, 0x13, 0x88, 0x17, 0x70, 0, 8, 0, 0,
    ]);
    for i in 0..20u32 {
        let mut b = vec![0u8; pcapng::epb_len(frame.len())];
        let n = frame.len() as u32;
        pcapng::write_epb_header(
            &mut b,
            i % 2,
            1_764_000_000_000_000_000 + u64::from(i),
            n,
            n,
        );
        b[pcapng::EPB_DATA_OFFSET..pcapng::EPB_DATA_OFFSET + frame.len()].copy_from_slice(&frame);
        pcapng::write_epb_trailer(&mut b, n);
        file.extend(b);
    }
    let input = d.join("two.pcapng");
    std::fs::write(&input, &file).unwrap();
    let out = d.join("out.pcapng");
    let (i, o) = (input.to_str().unwrap(), out.to_str().unwrap());
    let r = ringcap(&["query", "--format", "pcapng", "--filter", "udp", "-w", o, i]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let bytes = std::fs::read(&out).unwrap();
    let mut rd = ringcap_format::Reader::new(&bytes[..]).unwrap();
    let mut got = Vec::new();
    while let Some(p) = rd.next_packet().unwrap() {
        got.push(p.interface);
    }
    let names: Vec<_> = rd.interfaces().iter().map(|f| f.name.clone()).collect();
    assert_eq!(names, [Some("eth0".to_string()), Some("eth1".to_string())]);
    let want: Vec<usize> = (0..20).map(|i| i % 2).collect();
    assert_eq!(got, want, "each packet in its interface");
}

/// A file that ends in a torn record (a copy in progress, another writer's
/// crash) is read up to it, said, and the query goes on to the other files
/// (it stopped the whole query, and with -w FILE wrote nothing); the exit
/// status is 1, as `tcpdump -r` of that file exits 1 after its packets.
#[test]
fn a_torn_file_is_read_up_to_its_damage_and_the_query_goes_on() {
    if skip_without(&["tcpdump"]) {
        return;
    }
    let d = TempDir::new("query-torn");
    let dir = d.join("caps");
    std::fs::create_dir(&dir).unwrap();
    let mut rng = Rng(7);
    let files = mixed::write_series(&dir, &mut rng, 3, 200, 1_764_000_000_000_000_000);
    let torn = &files[1];
    let len = std::fs::metadata(torn).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(torn)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    // And a copy that has not got past its first record's header (one
    // cut within its file header is not a capture file to the directory's
    // listing, skipped and said).
    let cut = dir.join("cap-100.pcap");
    std::fs::write(&cut, &std::fs::read(&files[0]).unwrap()[..24 + 8]).unwrap();
    let out = d.join("out.pcap").display().to_string();
    let dir_s = dir.display().to_string();
    let o = ringcap(&["query", "-d", &dir_s, "-w", &out, "udp or tcp"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("{}: ", cut.display())), "{err}");
    assert!(err.contains("2 damaged files read in part"), "{err}");
    assert!(
        err.contains(&format!("{}: ", torn.display())) && err.contains("ringcap repair"),
        "{err}"
    );
    // `ringcap index` of the torn file refuses it and says what to do.
    let o = ringcap(&["index", &torn.display().to_string()]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("ringcap repair"), "{said}");
    // tcpdump reads each file up to the tear (and exits 1 for that file),
    // as the query does.
    let mut want = Vec::new();
    for f in files.iter().chain([&cut]) {
        let o = Command::new("tcpdump")
            .args(["-n", "--nano", "-r"])
            .arg(f)
            .args(["-w", "-", "udp or tcp"])
            .output()
            .expect("tcpdump");
        let code = if f == torn || *f == cut { 1 } else { 0 };
        assert_eq!(o.status.code(), Some(code), "tcpdump -r {}", f.display());
        want.extend(records(&o.stdout));
    }
    let got = records(&std::fs::read(&out).unwrap());
    assert!(got == want, "{} packets, tcpdump {}", got.len(), want.len());
    assert!(!want.is_empty());
}
