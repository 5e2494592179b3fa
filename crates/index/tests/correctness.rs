//! Queries through the index give exactly what a scan gives, and what
//! `tcpdump -r` of every file with the same filter gives (restricted to the
//! window), on mixed traffic over many files; and the index narrows.

mod mixed;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use mixed::Rng;
use ringcap_index::{build_index, plan, run, OutFormat, Output, Query, Window};
use ringcap_testkit::TempDir;

/// A writer into a shared buffer (Output owns its writer).
#[derive(Clone, Default)]
struct Buf(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn try_query(
    files: &[PathBuf],
    filter: &str,
    w: Window,
    use_index: bool,
) -> Result<(Vec<u8>, ringcap_index::QueryStats), ringcap_index::QueryError> {
    let buf = Buf::default();
    let mut out = Output::new(Box::new(buf.clone()), OutFormat::Pcap);
    // Queries take turns reading with 0, 1 and 2 reading threads: the
    // answer must not depend on who read the runs.
    static TURN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let q = Query {
        filter,
        plan: plan(filter),
        window: w,
        use_index,
        stop: None,
        readers: TURN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3,
    };
    let st = run(&q, files, &mut out, &mut |_| {})?;
    let v = buf.0.borrow().clone();
    Ok((v, st))
}

fn query(
    files: &[PathBuf],
    filter: &str,
    w: Window,
    use_index: bool,
) -> (Vec<u8>, ringcap_index::QueryStats) {
    try_query(files, filter, w, use_index).unwrap_or_else(|e| panic!("{filter}: {e}"))
}

use ringcap_testkit::capture::records;

/// `tcpdump -r` of each file in turn, the records concatenated; `None`
/// when tcpdump cannot run or fails.
fn tcpdump(files: &[PathBuf], filter: &str) -> Option<Vec<mixed::Rec>> {
    ringcap_testkit::capture::tcpdump_read(files, filter).ok()
}

/// The window from the earlier of two times to the later.
fn between(a: u64, b: u64) -> Window {
    Window {
        after: Some(a.min(b)),
        before: Some(a.max(b)),
    }
}

fn have_tcpdump() -> bool {
    Command::new("tcpdump")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn random_queries_match_scan_and_tcpdump() {
    let dir = TempDir::new("index-correct");
    let mut rng = Rng(0x5eed_1dec_0de5_0001);
    let t0 = 1_764_000_000_000_000_000u64;
    let files = mixed::write_series(dir.path(), &mut rng, 12, 400, t0);
    // All but the last two files get an index (those two are scanned).
    for f in &files[..files.len() - 2] {
        build_index(f).unwrap();
    }
    let t_end = t0 + 12 * 400 * 1_000_000 + 12 * 1_000_000;
    let oracle = have_tcpdump();
    if !oracle {
        ringcap_testkit::skip("tcpdump is not installed: compared with the scan only");
    }
    let (mut narrowed, mut nonempty, mut compared, mut refused) = (0, 0, 0, 0);
    for i in 0..300 {
        let filter = mixed::filter(&mut rng, 2);
        let mut t = || t0 + rng.below(t_end - t0);
        let w = match i % 4 {
            0 => Window::default(),
            1 => Window {
                after: Some(t()),
                before: None,
            },
            2 => Window {
                after: None,
                before: Some(t()),
            },
            _ => between(t(), t()),
        };
        let scan = match try_query(&files, &filter, w, false) {
            Ok((s, _)) => s,
            Err(e) => {
                // libpcap refuses it ("expression rejects all packets"):
                // so must tcpdump, and the indexed query.
                assert!(try_query(&files, &filter, w, true).is_err(), "{filter}");
                assert!(
                    !oracle || tcpdump(&files, &filter).is_none(),
                    "{filter}: {e}"
                );
                refused += 1;
                continue;
            }
        };
        let (idx, st) = query(&files, &filter, w, true);
        assert!(
            scan == idx,
            "query {i} '{filter}' {w:?}: the index gave {} packets, the scan {}",
            records(&idx).len(),
            records(&scan).len()
        );
        if st.groups_read < st.groups {
            narrowed += 1;
        }
        let got = records(&idx);
        if !got.is_empty() {
            nonempty += 1;
        }
        if oracle {
            let Some(td) = tcpdump(&files, &filter) else {
                // libpcap refuses the filter: so must the query (it did not).
                panic!("tcpdump refused '{filter}' but the query ran");
            };
            let want: Vec<_> = td.into_iter().filter(|r| w.contains(r.0)).collect();
            if got != want {
                let k = got
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(got.len().min(want.len()));
                panic!(
                    "query {i} '{filter}' {w:?}: {} packets, tcpdump {}; first difference at {k}: {:?} vs {:?}",
                    got.len(),
                    want.len(),
                    got.get(k).map(|r| (r.0, r.1, r.2.len())),
                    want.get(k).map(|r| (r.0, r.1, r.2.len()))
                );
            }
            compared += 1;
        }
    }
    println!(
        "300 queries: {nonempty} with packets, {narrowed} narrowed by the index, \
         {compared} compared with tcpdump, {refused} refused by libpcap"
    );
    assert!(narrowed > 100, "the index narrowed only {narrowed} queries");
    assert!(nonempty > 100, "only {nonempty} queries found packets");
}

#[test]
fn selective_queries_read_little() {
    let dir = TempDir::new("index-narrow");
    let mut rng = Rng(42);
    let t0 = 1_764_000_000_000_000_000u64;
    // Many hosts, no malformed frames (each makes its group a candidate of
    // every lookup).
    let files = mixed::write_series_of(dir.path(), &mut rng, 4, 3000, t0, 2000, true);
    for f in &files {
        build_index(f).unwrap();
    }
    for filter in [
        "host 198.18.1.7",
        "host 198.18.1.7 and port 53",
        "vlan 4094 and host 198.18.0.9",
        "host fd52:4300::1:0:0:0:5",
    ] {
        let (a, st) = query(&files, filter, Window::default(), true);
        let (b, _) = query(&files, filter, Window::default(), false);
        assert_eq!(a, b, "{filter}");
        println!(
            "{filter}: read {} of {} groups, {} of {} bytes, {} packets",
            st.groups_read, st.groups, st.bytes_read, st.file_bytes, st.matched
        );
        assert!(
            st.groups_read * 3 < st.groups,
            "{filter}: read {} of {} groups",
            st.groups_read,
            st.groups
        );
    }
    // A window inside one file reads only that file's groups in it.
    let w = Window {
        after: Some(t0 + 3_000_000_000),
        before: Some(t0 + 3_100_000_000),
    };
    let (_, st) = query(&files, "", w, true);
    assert!(st.groups_read <= 8 && st.skipped >= 2, "{st:?}");
}

/// Files of many pages of groups (a page is 256 groups of up to 32
/// packets): random filters and windows give what the scan gives, so runs
/// of candidates that cross a page, and pages skipped for holding no
/// candidate or lying outside the window, lose nothing and add nothing.
#[test]
fn queries_over_many_pages_match_scan() {
    let dir = TempDir::new("index-pages");
    let mut rng = Rng(0x5eed_1dec_0de5_0002);
    let t0 = 1_764_000_000_000_000_000u64;
    let files = mixed::write_series(dir.path(), &mut rng, 2, 30_000, t0);
    for f in &files {
        build_index(f).unwrap();
        let idx = ringcap_index::load_index(f).unwrap();
        assert!(idx.pages() >= 3, "{} pages", idx.pages());
    }
    let t_end = t0 + 2 * 30_000 * 1_000_000 + 2 * 1_000_000;
    let (mut narrowed, mut skipped_pages) = (0, 0);
    for i in 0..80 {
        let filter = mixed::filter(&mut rng, 2);
        let mut t = || t0 + rng.below(t_end - t0);
        let w = match i % 3 {
            0 => Window::default(),
            _ => between(t(), t()),
        };
        let Ok((scan, _)) = try_query(&files, &filter, w, false) else {
            continue;
        };
        let (idx, st) = query(&files, &filter, w, true);
        assert!(
            scan == idx,
            "query {i} '{filter}' {w:?}: index and scan differ"
        );
        if st.groups_read < st.groups {
            narrowed += 1;
        }
        if st.groups_read * 2 < st.groups {
            skipped_pages += 1;
        }
    }
    assert!(
        narrowed > 20 && skipped_pages > 10,
        "{narrowed} narrowed, {skipped_pages} read under half"
    );
}

/// More files than a query prepares at once (32: their reads are hinted
/// together), some without an index: the same packets as the scan.
#[test]
fn queries_over_many_batches_of_files_match_scan() {
    let dir = TempDir::new("index-batches");
    let mut rng = Rng(0x5eed_1dec_0de5_0003);
    let t0 = 1_764_000_000_000_000_000u64;
    let files = mixed::write_series(dir.path(), &mut rng, 70, 60, t0);
    for f in files.iter().filter(|_| rng.chance(80)) {
        build_index(f).unwrap();
    }
    for _ in 0..30 {
        let filter = mixed::filter(&mut rng, 2);
        let Ok((scan, _)) = try_query(&files, &filter, Window::default(), false) else {
            continue;
        };
        let (idx, st) = query(&files, &filter, Window::default(), true);
        assert!(scan == idx, "'{filter}': index and scan differ");
        assert_eq!(st.files, 70);
    }
}

/// A filter of many wide terms (256 copies of `net 0.0.0.0/0`, as a
/// hostile client of ringcapd or `ringcap serve` may send) costs each
/// index a bounded number of key blocks (the query's block budget, 1024 a
/// file), not 256 walks of the whole key table; narrow terms a few blocks.
/// The answers are the scan's either way.
#[test]
fn wide_terms_cost_a_bounded_lookup() {
    let dir = TempDir::new("index-wide");
    let mut rng = Rng(0x5eed_1dec_0de5_0004);
    let t0 = 1_764_000_000_000_000_000u64;
    let files = mixed::write_series_of(dir.path(), &mut rng, 2, 20_000, t0, 20_000, true);
    let mut v4_blocks = 0;
    for f in &files {
        build_index(f).unwrap();
        let idx = ringcap_index::load_index(f).unwrap();
        v4_blocks += idx.blocks_in(ringcap_index::keys::Kind::V4, 0, u32::MAX as u128);
    }
    assert!(v4_blocks >= 20, "{v4_blocks} blocks of addresses");
    let wide = vec!["net 0.0.0.0/0"; 256].join(" or ");
    let (a, st) = query(&files, &wide, Window::default(), true);
    let (b, _) = query(&files, &wide, Window::default(), false);
    assert!(a == b, "wide: index and scan differ");
    println!(
        "wide: {} key blocks looked up ({v4_blocks} of addresses in all)",
        st.key_blocks
    );
    assert!(
        st.key_blocks <= 1024 * files.len() as u64 && st.key_blocks < 256 * v4_blocks as u64 / 4,
        "{} key blocks",
        st.key_blocks
    );
    let (a, st) = query(&files, "host 198.18.1.7", Window::default(), true);
    let (b, _) = query(&files, "host 198.18.1.7", Window::default(), false);
    assert!(a == b);
    assert!(st.key_blocks <= 4 * files.len() as u64, "{st:?}");
}

/// The plan's rule for one packet ([`packet_may_match`], what ringcapd
/// holds each packet of a retrieval to, so that the answer about a packet
/// does not depend on the others of its group) never drops a packet
/// libpcap's filter accepts, over random filters and mixed traffic; and it
/// does drop packets (it is not true of everything).
#[test]
fn one_packets_keys_never_drop_what_the_filter_accepts() {
    use ringcap_index::{packet_may_match, run_with, QueryError, Taker};
    use ringcap_stages::filter::{dlt_of_linktype, Target};
    use ringcap_stages::{compile, CheckedProgram};

    struct Check {
        plan: ringcap_index::Expr,
        prog: Option<CheckedProgram>,
        filter: String,
        keys: Vec<ringcap_index::keys::Key>,
        accepted: u64,
        dropped: u64,
    }
    impl Taker for Check {
        fn packet(&mut self, lt: u32, _: u64, wire: u32, data: &[u8]) -> Result<bool, QueryError> {
            let prog = self.prog.get_or_insert_with(|| {
                let p = compile(
                    &self.filter,
                    dlt_of_linktype(lt as i32),
                    262_144,
                    Target::Offline,
                )
                .expect("compiles");
                CheckedProgram::new(p).expect("valid")
            });
            let accept = prog.run(data, wire) != 0;
            let may = packet_may_match(&self.plan, lt, data, &mut self.keys);
            assert!(
                may || !accept,
                "'{}': libpcap accepts a packet its keys say cannot match: {data:02x?}",
                self.filter
            );
            self.accepted += accept as u64;
            self.dropped += !may as u64;
            Ok(accept)
        }
    }
    let dir = TempDir::new("index-packet-plan");
    let mut rng = Rng(0x5eed_1dec_0de5_0077);
    let files = mixed::write_series(dir.path(), &mut rng, 4, 400, 1_764_000_000_000_000_000);
    let (mut accepted, mut dropped, mut ran) = (0, 0, 0);
    for _ in 0..300 {
        let filter = mixed::filter(&mut rng, 2);
        let dlt = dlt_of_linktype(1);
        if compile(&filter, dlt, 262_144, Target::Offline).is_err() {
            continue;
        }
        let q = Query {
            filter: &filter,
            plan: plan(&filter),
            window: Window::default(),
            use_index: false,
            stop: None,
            readers: 0,
        };
        let mut c = Check {
            plan: q.plan.clone(),
            prog: None,
            filter: filter.clone(),
            keys: Vec::new(),
            accepted: 0,
            dropped: 0,
        };
        run_with(&q, &files, &mut c, &mut |_| {}).unwrap();
        accepted += c.accepted;
        dropped += c.dropped;
        ran += 1;
    }
    println!("{ran} filters: {accepted} packets accepted, {dropped} dropped by their own keys");
    assert!(
        ran > 200 && accepted > 1000 && dropped > 10_000,
        "{ran} {accepted} {dropped}"
    );
}

/// The filter text of a key with packet positions (hosts and ports).
fn key_filter(k: &ringcap_index::keys::Key) -> Option<String> {
    use ringcap_index::keys::Kind;
    Some(match k.kind {
        Kind::V4 => format!("host {}", std::net::Ipv4Addr::from(k.value as u32)),
        Kind::V6 => format!("host {}", std::net::Ipv6Addr::from(k.value)),
        Kind::Port => format!("port {}", k.value),
        _ => return None,
    })
}

/// Keys in many groups but in few packets of each get their packets'
/// positions (index format 6), and a query on them reads those packets
/// instead of whole groups: alone, with other terms (narrowing or not),
/// `or` of two such keys, windows cutting the files, beside packets the
/// index cannot describe, pcapng files whose interface comes late (no
/// positions: groups), and packets longer than what is first read for one
/// (9,000 bytes). Always the packets the scan and `tcpdump -r` give.
#[test]
fn queries_through_packet_positions_match_scan_and_tcpdump() {
    use ringcap_testkit::frames::{self, Endpoints};
    let dir = TempDir::new("index-positions");
    let mut rng = Rng(0x5eed_0027_0006);
    let t0 = 1_764_000_000_000_000_000u64;
    let mut files = mixed::write_series_of(dir.path(), &mut rng, 4, 30_000, t0, 800, false);
    // A file where one host sends jumbo frames in 1 packet of 300.
    let t1 = t0 + 4 * 30_000 * 2_000_000;
    let jumbo = Endpoints::new([2, 0x52, 0x43, 0, 0, 1], [2, 0x52, 0x43, 0, 0, 2]).with_ipv4(
        "198.18.250.1".parse().unwrap(),
        "198.18.250.2".parse().unwrap(),
    );
    let recs: Vec<mixed::Rec> = (0..30_000u32)
        .map(|i| {
            let d = match i % 300 {
                37 => frames::udp4(
                    &jumbo,
                    i,
                    40_000 + (i / 300) as u16,
                    50_000 + (i / 300) as u16,
                    9000,
                ),
                _ => mixed::frame(&mut rng, i, 5000, 1400, true),
            };
            (t1 + i as u64 * 1000, d.len() as u32, d)
        })
        .collect();
    let p = dir.path().join("cap-900.pcap");
    mixed::write_file(&p, mixed::Kind::PcapNano, &recs);
    files.push(p);
    let mut keyed = Vec::new();
    for f in &files {
        build_index(f).unwrap();
        let idx = ringcap_index::load_index(f).unwrap();
        idx.verify().unwrap();
        keyed.extend(idx.keys_with_positions());
    }
    keyed.sort();
    keyed.dedup();
    let keyed: Vec<String> = keyed.iter().filter_map(key_filter).collect();
    assert!(
        keyed.len() >= 3 && keyed.contains(&"host 198.18.250.1".to_string()),
        "keys with positions: {keyed:?}"
    );
    let oracle = have_tcpdump();
    let t_end = t1 + 30_000 * 1000;
    let (mut by_position, mut queries) = (0, 0);
    for (i, k) in keyed.iter().enumerate().take(12) {
        let k2 = &keyed[(i + 1) % keyed.len()];
        let r = mixed::filter(&mut rng, 1);
        for filter in [
            k.clone(),
            format!("{k} and tcp"),
            format!("{k} or {k2}"),
            format!("{k} and ({r})"),
            format!("{k} and not {k2}"),
            format!("({k}) or ({r})"),
        ] {
            let cut = between(t0 + rng.below(t_end - t0), t0 + rng.below(t_end - t0));
            for w in [Window::default(), cut] {
                let Ok((scan, _)) = try_query(&files, &filter, w, false) else {
                    continue;
                };
                let (idx, st) = query(&files, &filter, w, true);
                assert!(scan == idx, "'{filter}' {w:?}: index and scan differ");
                queries += 1;
                if st.by_position > 0 {
                    by_position += 1;
                    assert!(st.read < st.groups * 32, "'{filter}': read {}", st.read);
                }
                if oracle && w == Window::default() {
                    let want = tcpdump(&files, &filter).expect("tcpdump runs");
                    assert!(records(&idx) == want, "'{filter}': not what tcpdump gives");
                }
            }
        }
    }
    println!("{queries} queries, {by_position} through packet positions");
    assert!(
        by_position * 3 > queries,
        "{by_position} of {queries} by position"
    );
    // The jumbo host alone: every one of its packets, all read by position.
    let (got, st) = query(&files, "host 198.18.250.1", Window::default(), true);
    assert_eq!(records(&got).len(), 100);
    assert_eq!(st.by_position, 100, "{st:?}");
}
