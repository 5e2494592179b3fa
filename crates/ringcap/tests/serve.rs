//! The retrieval service (`ringcap serve`) with real clients: Debian's
//! stenographer client (`stenoread`, which runs curl with the client
//! certificate, then tcpdump) gets byte for byte the file that tcpdump -r
//! of the files writes with the equivalent filter; a client without a
//! certificate, or with one from another CA, is refused; bad queries and
//! too large answers get clear 4xx errors; and `ringcap query --sensor`
//! merges two servers' answers into what tcpdump -r of all files, merged
//! by time, gives. Servers listen on 127.0.0.1 only.

#[path = "../../index/tests/mixed/mod.rs"]
mod mixed;
mod serve_support;
mod storage_support;

use std::process::Command;

use mixed::Rng;
use serve_support::*;
use storage_support::*;

#[test]
fn a_client_gone_mid_stream_frees_its_query() {
    if skip_without(&["curl", "tcpdump"]) {
        return;
    }
    let d = TempDir::new("serve-gone");
    let dir = d.join("caps");
    std::fs::create_dir_all(&dir).unwrap();
    // ~20 MB: more than the server's, the kernel's and curl's buffers hold.
    let files = mixed::write_series(&dir, &mut Rng(5), 8, 4000, 1_764_000_000_000_000_000);
    index(&files);
    let certs = d.join("certs");
    keys(&certs, 1);
    let srv = Server::start(&[&dir], &certs, &["--max-queries", "1"]);
    let mut slow = slow_curl(&certs, srv.port, "after 20000d ago", "20k");
    assert!(
        within(10, || srv
            .log()
            .contains("\"after 20000d ago\" = '' Window")
            && srv.log().contains("streaming")),
        "the slow query did not start\n{}",
        srv.log()
    );
    // While it streams, the one query slot is taken: 503, try again.
    assert!(
        within(10, || curl(&certs, srv.port, "/query", "tcp", &[]).0
            == "503"),
        "no 503 while the slot is taken\n{}",
        srv.log()
    );
    let (code, body, _) = curl(&certs, srv.port, "/query", "tcp", &[]);
    assert!(code == "503" && String::from_utf8_lossy(&body).contains("try again"));
    // The client goes away mid-stream: its query ends, the slot is free.
    slow.kill().unwrap();
    slow.wait().unwrap();
    assert!(
        within(10, || curl(
            &certs,
            srv.port,
            "/query",
            "host 198.18.0.7",
            &[]
        )
        .0 == "200"),
        "the slot was not freed\n{}",
        srv.log()
    );
    assert!(
        within(5, || srv.log().contains("cut after")),
        "{}",
        srv.log()
    );
    println!("{}", srv.log());
}

/// A client that goes away while its query reads much and writes nothing
/// (a scan of an unindexed file that matches nothing) frees the query and
/// its slot at once: the query only noticed when it next wrote, so it ran
/// on, holding the one slot (503 for everyone), to the end of its scan or
/// its --max-time.
#[test]
fn a_client_gone_while_nothing_matches_frees_its_query() {
    if skip_without(&["curl"]) {
        return;
    }
    let d = TempDir::new("serve-gone-quiet");
    let dir = d.join("caps");
    std::fs::create_dir_all(&dir).unwrap();
    // ~90 MB of 76-byte UDP records, no index: scanned whole.
    {
        use std::io::Write;
        let mut frame = vec![2, 0x52, 0x43, 0, 0, 2, 2, 0x52, 0x43, 0, 0, 1, 8, 0];
        frame.extend_from_slice(&[0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0]);
        frame.extend_from_slice(&[
            198, 18, 0, 1, 198, 18, 0, 2, 0x13, 0x88, 0x17, 0x70, 0, 26, 0, 0,
        ]);
        frame.resize(60, 0x78);
        let mut chunk = Vec::new();
        for i in 0..10_000u32 {
            for v in [1_764_000_000 + i / 1000, i % 1000 * 1000, 60, 60] {
                chunk.extend_from_slice(&v.to_le_bytes());
            }
            chunk.extend_from_slice(&frame);
        }
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(dir.join("cap-0001.pcap")).unwrap());
        f.write_all(&ringcap_format::pcap::file_header(
            1,
            65535,
            ringcap_format::TsResolution::Micro,
        ))
        .unwrap();
        for _ in 0..120 {
            f.write_all(&chunk).unwrap();
        }
        f.flush().unwrap();
    }
    let certs = d.join("certs");
    keys(&certs, 1);
    let srv = Server::start(&[&dir], &certs, &["--max-queries", "1"]);
    // Many ports, none there: a slow scan that writes nothing. A byte limit
    // of its own skips the count before the stream.
    let query: Vec<String> = (1..=60).map(|p| format!("port {p}")).collect();
    let mut quiet = curl_query(
        &certs,
        srv.port,
        &query.join(" or "),
        &["-H", "Steno-Limit-Bytes: 1000000"],
    );
    assert!(
        within(20, || srv.log().contains("streaming")),
        "the quiet query did not start\n{}",
        srv.log()
    );
    quiet.kill().unwrap();
    quiet.wait().unwrap();
    assert!(
        within(3, || srv.log().contains("cut after")),
        "the query ran on after its client left\n{}",
        srv.log()
    );
    assert!(
        !srv.log().contains(": 200 0 packets"),
        "the query ran to its end\n{}",
        srv.log()
    );
    assert_eq!(
        curl(&certs, srv.port, "/query", "host 198.18.0.7", &[]).0,
        "200",
        "the slot was not freed\n{}",
        srv.log()
    );
}

/// A client with a valid certificate that asks for a large answer and then
/// reads nothing (a zero TCP window) holds its query only until the query's
/// time (--max-time) is up: the query is cut, its slot is free, and the
/// next query is answered whole.
#[test]
fn a_client_that_stops_reading_is_cut_at_max_time() {
    if skip_without(&["openssl", "curl", "tcpdump"]) {
        return;
    }
    let d = TempDir::new("serve-stall");
    let dir = d.join("caps");
    std::fs::create_dir_all(&dir).unwrap();
    // ~20 MB: more than the server's queue and both sockets' buffers hold.
    let files = mixed::write_series(&dir, &mut Rng(6), 8, 4000, 1_764_000_000_000_000_000);
    index(&files);
    let certs = d.join("certs");
    keys(&certs, 1);
    let srv = Server::start(&[&dir], &certs, &["--max-queries", "1", "--max-time", "2"]);
    let _stalled = Stalled::start(&certs, srv.port, "/query", "after 20000d ago");
    assert!(
        within(10, || srv.log().contains("streaming")),
        "the stalled query did not start\n{}",
        srv.log()
    );
    // The slot is taken while the stalled query waits; at --max-time it
    // is cut and the slot is free again.
    let t = std::time::Instant::now();
    let mut last = (String::new(), Vec::new(), false);
    let freed = within(8, || {
        last = curl(&certs, srv.port, "/query", "host 198.18.0.7", &[]);
        last.0 == "200"
    });
    assert!(
        freed,
        "the stalled client still holds the only query slot after {:?}: {} {}\n{}",
        t.elapsed(),
        last.0,
        String::from_utf8_lossy(&last.1),
        srv.log()
    );
    assert!(last.2, "the second answer is whole");
    let want = tcpdump(&files, "host 198.18.0.7", 0, u64::MAX);
    assert!(!want.is_empty());
    assert_eq!(records(&last.1), want);
    let log = srv.log();
    assert!(
        log.contains("\"after 20000d ago\"") && log.contains("cut after"),
        "{log}"
    );
    println!("slot free after {:?}\n{log}", t.elapsed());
}

/// A filter of 700 terms (libpcap needs ~40 s to compile it here) is
/// refused at once, before libpcap sees it and outside the async workers:
/// two such POSTs at the same time as a small query do not delay it. The
/// filter is compiled once per request, shared by the count (413 check)
/// and the stream.
#[test]
fn huge_filters_are_refused_before_libpcap() {
    if skip_without(&["curl", "tcpdump"]) {
        return;
    }
    let d = TempDir::new("serve-huge");
    let files = series(&d.join("caps"), 12, 4, 1_764_000_000_000_000_000);
    index(&files);
    let certs = d.join("certs");
    keys(&certs, 1);
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    // Smaller than the files: every query is counted before it streams.
    let srv = Server::start(
        &[&d.join("caps")],
        &certs,
        &["--max-bytes", &(total / 2).to_string()],
    );
    let huge: String = (0..700)
        .map(|i| format!("host 198.18.{}.{}", i / 250, i % 250))
        .collect::<Vec<_>>()
        .join(" or ");
    assert!(huge.len() < 16 << 10, "within the request limit");
    let steno_huge: String = (0..40)
        .map(|i| format!("ip proto {i}"))
        .collect::<Vec<_>>()
        .join(" or ");
    let t = std::time::Instant::now();
    let big: Vec<_> = [
        ("/tcpdump", huge.clone()),
        ("/tcpdump", huge),
        ("/query", steno_huge),
    ]
    .into_iter()
    .map(|(path, q)| {
        let (certs, port) = (certs.clone(), srv.port);
        std::thread::spawn(move || {
            let (code, body, _) = curl(&certs, port, path, &q, &[]);
            (
                code,
                String::from_utf8_lossy(&body).to_string(),
                t.elapsed(),
            )
        })
    })
    .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let small = std::time::Instant::now();
    let (code, body, ok) = curl(&certs, srv.port, "/query", "host 198.18.0.7 and udp", &[]);
    let small = small.elapsed();
    assert!(ok && code == "200", "{code}\n{}", srv.log());
    assert_eq!(
        records(&body),
        tcpdump(&files, "host 198.18.0.7 and udp", 0, u64::MAX)
    );
    for h in big {
        let (code, body, took) = h.join().unwrap();
        assert!(
            code == "400" && body.contains("at most 64"),
            "{code} {body}"
        );
        assert!(took.as_secs() < 5, "refused after {took:?}");
    }
    assert!(
        small < std::time::Duration::from_secs(2),
        "the small query took {small:?} beside the huge ones\n{}",
        srv.log()
    );
    // Counted, then streamed: one compile for both.
    let log = srv.log();
    assert!(log.contains(", 1 filter compile(s)"), "{log}");
    println!("small query: {small:?}\n{log}");
}

/// Connections that never start their TLS handshake cannot take every
/// slot: one address holds at most 8 handshakes (the rest of its
/// connections are closed at once, logged as a count, not a line each),
/// another address is served meanwhile, and the idle handshakes are
/// dropped after 3 s, after which the first address is served too.
#[test]
fn idle_handshakes_cannot_take_every_slot() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    if skip_without(&["curl", "tcpdump"]) {
        return;
    }
    let d = TempDir::new("serve-idle");
    let files = series(&d.join("caps"), 13, 3, 1_764_000_000_000_000_000);
    index(&files);
    let certs = d.join("certs");
    keys(&certs, 1);
    let srv = Server::start(&[&d.join("caps")], &certs, &[]);
    let q = "host 198.18.0.7 and udp";
    let want = tcpdump(&files, q, 0, u64::MAX);
    // As many idle connections as the server has slots, from 127.0.0.1.
    let t = Instant::now();
    let idle: Vec<std::net::TcpStream> = (0..64)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", srv.port)).unwrap())
        .collect();
    // Another address (all of 127/8 is this machine's) is served at once.
    let (code, body, ok) = curl(&certs, srv.port, "/query", q, &["--interface", "127.0.0.2"]);
    assert!(
        ok && code == "200",
        "another address refused while 127.0.0.1 idles: {code}\n{}",
        srv.log()
    );
    assert_eq!(records(&body), want);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // Every idle connection is closed by the server: the refused ones at
    // once, the ones in their handshake at its deadline (3 s).
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        let mut b = [0u8; 16];
        // A signal to this process (another test's child ending) may cut
        // the wait short: wait again.
        let read = loop {
            match s.read(&mut b) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        match read {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!(
                "an idle connection still open after {:?}: {other:?}",
                t.elapsed()
            ),
        }
    }
    let closed = t.elapsed();
    assert!(
        closed < Duration::from_secs(6),
        "idle handshakes held {closed:?}"
    );
    let (code, body, ok) = curl(&certs, srv.port, "/query", q, &[]);
    assert!(ok && code == "200", "{code}\n{}", srv.log());
    assert_eq!(records(&body), want);
    // 56 refusals and 8 handshakes timed out, in a few lines (at most one a
    // second, with a count), not a line each; the last is logged within a
    // second even with no connection after it.
    std::thread::sleep(Duration::from_millis(1200));
    let log = srv.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("refused")).collect();
    let n: u64 = lines
        .iter()
        .map(|l| {
            let l = l.trim_start_matches("ringcap serve: ");
            if l.starts_with("connection refused:") {
                1
            } else {
                l.split(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            }
        })
        .sum();
    assert!(n == 64 && lines.len() <= 4, "{n} refusals in {lines:?}");
    assert!(log.contains("TLS handshake timed out"), "{log}");
    println!("idle connections closed after {closed:?}\n{log}");
}

/// Idle handshakes from many addresses (8 each, the most one address may
/// have) cannot take every slot either: with all 64 taken, the oldest idle
/// handshake gives its slot to a newcomer, so a client with a certificate,
/// from yet another address, is served at once. Before, 8 addresses took
/// all 64 and it was refused.
#[test]
fn idle_handshakes_from_many_addresses_leave_room() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    if skip_without(&["curl", "tcpdump", "python3"]) {
        return;
    }
    let d = TempDir::new("serve-idle-many");
    let files = series(&d.join("caps"), 17, 2, 1_764_000_000_000_000_000);
    index(&files);
    let certs = d.join("certs");
    keys(&certs, 1);
    let srv = Server::start(&[&d.join("caps")], &certs, &[]);
    // 8 connections from each of 127.0.0.2-9, held open without a word.
    let holder = format!(
        "import socket, sys, time\nheld = []\nfor a in range(2, 10):\n    for _ in range(8):\n        \
         s = socket.socket(); s.bind(('127.0.0.%d' % a, 0)); s.connect(('127.0.0.1', {})); held.append(s)\n\
         print('open', flush=True)\ntime.sleep(6)\n",
        srv.port
    );
    let mut idle = Command::new("python3")
        .args(["-c", &holder])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(idle.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "open");
    let t = Instant::now();
    let q = "host 198.18.0.7 and udp";
    let (code, body, ok) = curl(
        &certs,
        srv.port,
        "/query",
        q,
        &["--interface", "127.0.0.10"],
    );
    let _ = idle.kill();
    let _ = idle.wait();
    assert!(
        ok && code == "200",
        "a client refused while 8 addresses idle: {code}\n{}",
        srv.log()
    );
    assert_eq!(records(&body), tcpdump(&files, q, 0, u64::MAX));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

/// A name in a client's filter is not looked up in DNS (the client would
/// choose a resolver's and a domain's traffic from the sensor, and hold a
/// query slot for the resolver's timeout): in a namespace whose resolver is
/// a witness on 127.0.0.1:53, tcpdump's libpcap asks it for a name (the
/// control: the witness sees lookups), `ringcap serve`'s does not, and
/// answers "unknown host" at once; a name of /etc/hosts still works.
#[test]
fn names_in_client_filters_are_not_looked_up_in_dns() {
    use std::time::{Duration, Instant};
    ringcap_testkit::skip_unless_netns!();
    if skip_without(&["curl", "tcpdump", "python3"]) {
        return;
    }
    let tb = ringcap_testkit::Testbed::new().unwrap();
    let ns = tb.capture_ns.as_str();
    let _conf = NetnsResolvConf::new(ns, "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n");
    let dns = DnsWitness::start(&tb);
    let id = std::process::id();
    let control = format!("ringcap-control-{id}.example");
    let o = tb
        .in_capture_ns("tcpdump")
        .args(["-d", &format!("host {control}")])
        .output()
        .unwrap();
    assert!(!o.status.success(), "the control name resolved");
    assert!(
        within(5, || dns.seen(&control)),
        "the witness saw no lookup from tcpdump: the test cannot see one from serve"
    );
    let d = TempDir::new("serve-dns");
    let files = series(&d.join("caps"), 14, 2, 1_764_000_000_000_000_000);
    index(&files);
    let certs = d.join("certs");
    keys(&certs, 1);
    let srv = Server::start_in(Some(&tb), &[&d.join("caps")], &certs, &[]);
    let probe = format!("ringcap-probe-{id}.example");
    for (path, q) in [
        ("/tcpdump", format!("host {probe}")),
        ("/tcpdump", format!("udp and {probe}")),
        ("/tcpdump", format!("net {probe}")),
    ] {
        let t = Instant::now();
        let (code, body, _) = curl_in(Some(&tb), &certs, srv.port, path, &q, &[]);
        let body = String::from_utf8_lossy(&body);
        assert!(code == "400" && body.contains(&probe), "{q}: {code} {body}");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{q}: {:?}",
            t.elapsed()
        );
    }
    let q = "host localhost or host 198.18.0.7";
    let (code, body, ok) = curl_in(Some(&tb), &certs, srv.port, "/tcpdump", q, &[]);
    assert!(ok && code == "200", "{code}\n{}", srv.log());
    assert_eq!(records(&body), tcpdump(&files, q, 0, u64::MAX));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!dns.seen(&probe), "serve looked {probe} up in DNS");
}

/// `-Z nobody`: serve binds and reads its keys as root, then runs (parses
/// clients' filters, reads the files) as nobody, every id of the process;
/// answers are unchanged; a store nobody cannot read stops it at start
/// with the reason instead of failing every query.
#[test]
fn serve_runs_as_the_user_given() {
    use std::os::unix::fs::PermissionsExt;
    if !ringcap_testkit::netns::is_root() {
        ringcap_testkit::skip("-Z needs root");
        return;
    }
    if skip_without(&["curl", "tcpdump"]) {
        return;
    }
    let d = TempDir::new("serve-user");
    let caps = d.join("caps");
    let files = series(&caps, 15, 2, 1_764_000_000_000_000_000);
    index(&files);
    let certs = d.join("certs");
    keys(&certs, 1);
    let srv = Server::start(&[&caps], &certs, &["-Z", "nobody"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", srv.pid())).unwrap();
    let ids = |field: &str| -> Vec<String> {
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect()
    };
    let nobody = String::from_utf8(
        Command::new("id")
            .args(["-u", "nobody"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    assert!(ids("Uid:").iter().all(|u| *u == nobody), "{status}");
    assert!(ids("Gid:").iter().all(|g| g != "0"), "{status}");
    assert_eq!(
        ids("Groups:").iter().filter(|g| *g == "0").count(),
        0,
        "{status}"
    );
    let q = "host 198.18.0.7 and udp";
    let (code, body, ok) = curl(&certs, srv.port, "/tcpdump", q, &[]);
    assert!(ok && code == "200", "{code}\n{}", srv.log());
    assert_eq!(records(&body), tcpdump(&files, q, 0, u64::MAX));
    drop(srv);
    std::fs::set_permissions(&caps, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = Command::new(bin())
        .arg("serve")
        .arg("-d")
        .arg(&caps)
        .arg("--certs")
        .arg(&certs)
        .args(["--listen", "127.0.0.1:0", "-Z", "nobody"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("not readable as uid") && !err.contains("listening"),
        "{err}"
    );
}

#[test]
fn stenoread_gets_what_tcpdump_gives() {
    if skip_without(&["stenoread", "curl", "jq", "tcpdump", "date"]) {
        return;
    }
    let d = TempDir::new("serve-steno");
    let t0 = 1_764_000_000_000_000_000u64;
    let files = series(&d.join("caps"), 7, 6, t0);
    // All but the last file indexed: that one is scanned.
    index(&files[..5]);
    let certs = d.join("certs");
    keys(&certs, 1);
    let srv = Server::start(&[&d.join("caps")], &certs, &[]);
    keys(&certs, srv.port);
    let span = 6 * 300 * 1_000_000u64;
    let (t1, t2) = (t0 + span / 4, t0 + 2 * span / 3);
    let cases: Vec<(String, &str, u64, u64)> = vec![
        ("host 198.18.0.7".into(), "host 198.18.0.7", 0, u64::MAX),
        (
            "net 198.18.1.9/24 and tcp".into(),
            "net 198.18.1.0/24 and tcp",
            0,
            u64::MAX,
        ),
        (
            "port 53 || port 443".into(),
            "port 53 or port 443",
            0,
            u64::MAX,
        ),
        (
            "ip proto 47".into(),
            "ip proto 47 or ip6 proto 47",
            0,
            u64::MAX,
        ),
        (
            format!(
                "udp and net 198.18.0.0 mask 255.255.254.0 and after {} and before {}",
                rfc3339(t1),
                rfc3339(t2)
            ),
            "udp and net 198.18.0.0/23",
            t1,
            t2,
        ),
        (
            "(icmp or host fd52:4300:0:1::3) and before 1m ago and after 20000d ago".into(),
            "icmp or host fd52:4300:0:1::3",
            0,
            u64::MAX,
        ),
        // Equal binding, left to right, as in stenographer's grammar.
        (
            "host 198.18.0.7 or port 80 and tcp".into(),
            "(host 198.18.0.7 or port 80) and tcp",
            0,
            u64::MAX,
        ),
    ];
    let out = d.join("out.pcap");
    for (steno, tcpdump_filter, after, before) in &cases {
        let _ = std::fs::remove_file(&out);
        let o = Command::new("stenoread")
            .env("STENOGRAPHER_CONFIG", certs.join("config"))
            .arg(steno)
            .arg("-w")
            .arg(&out)
            .output()
            .expect("run stenoread");
        assert!(
            o.status.success(),
            "stenoread '{steno}': {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            srv.log()
        );
        let got = std::fs::read(&out).unwrap();
        let want_recs = tcpdump(&files, tcpdump_filter, *after, *before);
        let want = as_stenoread_writes(&want_recs, &d.join("."));
        assert!(
            got == want,
            "'{steno}': {} bytes from stenoread, {} from tcpdump ({} packets)\n{}",
            got.len(),
            want.len(),
            want_recs.len(),
            srv.log()
        );
        assert!(
            !want_recs.is_empty() || steno.contains("fd52"),
            "'{steno}' matches something"
        );
        println!(
            "'{steno}': {} packets, {} bytes identical",
            want_recs.len(),
            got.len()
        );
    }
    // stenoread's own limit (a header): the first packets, a whole file.
    let o = Command::new("stenoread")
        .env("STENOGRAPHER_CONFIG", certs.join("config"))
        .args(["--limit-packets", "5", "tcp", "-w"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success());
    let want = tcpdump(&files, "tcp", 0, u64::MAX);
    let got = records(&std::fs::read(&out).unwrap());
    assert_eq!(got.len(), 5);
    assert!(got
        .iter()
        .zip(&want)
        .all(|(g, w)| g.2 == w.2 && g.0 / 1000 == w.0 / 1000));
    let log = srv.log();
    assert!(log.contains("200 5 packets"), "{log}");
}

#[test]
fn refusals_and_limits() {
    if skip_without(&["curl", "tcpdump"]) {
        return;
    }
    let d = TempDir::new("serve-refuse");
    let files = series(&d.join("caps"), 11, 4, 1_764_000_000_000_000_000);
    index(&files);
    let (certs, other) = (d.join("certs"), d.join("other"));
    keys(&certs, 1);
    keys(&other, 1);
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    let limit = total / 3;
    let srv = Server::start(
        &[&d.join("caps")],
        &certs,
        &["--max-bytes", &limit.to_string()],
    );
    let url = format!("https://127.0.0.1:{}/query", srv.port);
    // No client certificate: the handshake fails, nothing is answered.
    let o = Command::new("curl")
        .arg("--cacert")
        .arg(certs.join("ca_cert.pem"))
        .args(["--silent", "-o", "-", "-d", "tcp", &url])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && o.stdout.is_empty(),
        "no certificate: {o:?}"
    );
    // A certificate from another CA.
    let o = Command::new("curl")
        .arg("--cert")
        .arg(other.join("client_cert.pem"))
        .arg("--key")
        .arg(other.join("client_key.pem"))
        .arg("--cacert")
        .arg(certs.join("ca_cert.pem"))
        .args(["--silent", "-o", "-", "-d", "tcp", &url])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && o.stdout.is_empty(),
        "other CA: {o:?}"
    );
    // Both logged, the second within a second of the first (refusals are
    // logged at most once a second, with a count).
    assert!(
        within(3, || srv.log().matches("TLS refused").count() == 2),
        "{}",
        srv.log()
    );
    // The right certificate: a small answer, whole.
    let (code, body, ok) = curl(&certs, srv.port, "/query", "host 198.18.0.7 and udp", &[]);
    assert!(ok && code == "200", "{code}");
    assert_eq!(
        records(&body),
        tcpdump(&files, "host 198.18.0.7 and udp", 0, u64::MAX)
    );
    // Bad queries: 400 saying what is wrong.
    for (q, says) in [
        ("host 198.18.0", "bad IP address"),
        ("port 70000", "bad port"),
        ("hostile 1.2.3.4", "unknown word 'hostile'"),
        ("host 198.18.0.1 or after 1h ago", "must be and-ed"),
        ("", "empty query"),
    ] {
        let (code, body, _) = curl(&certs, srv.port, "/query", q, &[]);
        let body = String::from_utf8_lossy(&body);
        assert!(code == "400" && body.contains(says), "'{q}': {code} {body}");
    }
    let (code, body, _) = curl(&certs, srv.port, "/tcpdump", "tcp and and", &[]);
    assert_eq!(code, "400", "{}", String::from_utf8_lossy(&body));
    let (code, _, _) = curl(&certs, srv.port, "/nothing", "tcp", &[]);
    assert_eq!(code, "404");
    // A query larger than the limit: refused whole, before any packet.
    let big = "x".repeat(20 << 10);
    let (code, _, _) = curl(&certs, srv.port, "/query", &big, &[]);
    assert_eq!(code, "413");
    let (code, body, _) = curl(&certs, srv.port, "/tcpdump", "", &[]);
    let body = String::from_utf8_lossy(&body);
    assert!(
        code == "413" && body.contains("larger than"),
        "{code} {body}"
    );
    // The tcpdump endpoint with a window.
    let t = 1_764_000_000_000_000_000u64 + 300_000_000;
    let path = format!(
        "/tcpdump?after={}&before={}",
        t / 1_000_000_000,
        t / 1_000_000_000 + 1
    );
    let (code, body, ok) = curl(&certs, srv.port, &path, "vlan or udp", &[]);
    assert!(ok && code == "200", "{code}");
    let s = t / 1_000_000_000 * 1_000_000_000;
    assert_eq!(
        records(&body),
        tcpdump(&files, "vlan or udp", s, s + 1_000_000_000)
    );
    println!("{}", srv.log());
}

#[test]
fn two_sensors_merged_like_tcpdump_of_all_files() {
    if skip_without(&["mergecap", "tcpdump", "tshark"]) {
        return;
    }
    let d = TempDir::new("serve-merge");
    let t0 = 1_764_000_000_000_000_000u64;
    let a = sorted_series(&d.join("a"), 21, 4, t0);
    let b = sorted_series(&d.join("b"), 22, 5, t0 + 777);
    index(&a);
    index(&b[1..]);
    let certs = d.join("certs");
    keys(&certs, 1);
    let sa = Server::start(&[&d.join("a")], &certs, &[]);
    let sb = Server::start(&[&d.join("b")], &certs, &[]);
    let merged = d.join("merged.pcap");
    let o = Command::new("mergecap")
        .args(["-F", "nsecpcap", "-w"])
        .arg(&merged)
        .args(a.iter().chain(&b))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = d.join("out.pcapng");
    for (filter, after, before) in [
        ("host 198.18.0.7 or host 198.18.1.9", None, None),
        (
            "tcp port 443 or (udp and not port 53)",
            Some(t0 + 500_000_000),
            Some(t0 + 1_500_000_000),
        ),
        ("", None, None),
    ] {
        let mut c = Command::new(bin());
        c.args(["query", "--certs"]).arg(&certs);
        c.arg("--sensor")
            .arg(format!("alpha=https://127.0.0.1:{}", sa.port));
        c.arg("--sensor")
            .arg(format!("https://127.0.0.1:{}", sb.port));
        c.args(["--format", "pcapng", "-w"]).arg(&out);
        let ns = |t: u64| format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000);
        if let Some(t) = after {
            c.args(["--after", &ns(t)]);
        }
        if let Some(t) = before {
            c.args(["--before", &ns(t)]);
        }
        let o = c.arg(filter).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}\n{}\n{}", sa.log(), sb.log());
        let got = records(&std::fs::read(&out).unwrap());
        let want = tcpdump(
            std::slice::from_ref(&merged),
            filter,
            after.unwrap_or(0),
            before.unwrap_or(u64::MAX),
        );
        if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
            panic!(
                "'{filter}': {} merged, tcpdump {}; first difference at {i}: {:?} vs {:?}\n{err}",
                got.len(),
                want.len(),
                (got[i].0, got[i].1),
                (want[i].0, want[i].1)
            );
        }
        assert_eq!(got.len(), want.len(), "'{filter}'\n{err}");
        assert!(!want.is_empty());
        println!("'{filter}': {} packets; {err}", got.len());
    }
    // One interface per sensor, named after it.
    let o = Command::new("tshark")
        .arg("-r")
        .arg(&out)
        .args(["-T", "fields", "-e", "frame.interface_name"])
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&o.stdout);
    assert!(names.lines().any(|l| l == "alpha"), "{names}");
    let other = format!("127.0.0.1:{}", sb.port);
    assert!(names.lines().any(|l| l == other), "{names}");
}

/// `serve-keys --sensor NAME --out DIR` gives a sensor a certificate for its
/// own name from the one CA, without the CA's key: the client's directory
/// reaches it, and a sensor cannot answer for another's name.
#[test]
fn each_sensor_has_its_own_certificate() {
    if skip_without(&["tcpdump"]) {
        return;
    }
    let d = TempDir::new("serve-sensor-keys");
    let t0 = 1_764_000_000_000_000_000u64;
    let files = sorted_series(&d.join("caps"), 31, 2, t0);
    let certs = d.join("certs");
    keys(&certs, 1);
    let issue = |name: &str, out: &str| {
        Command::new(bin())
            .args(["serve-keys", "--certs"])
            .arg(&certs)
            .args(["--sensor", name, "--out"])
            .arg(d.join(out))
            .output()
            .unwrap()
    };
    for (name, out) in [("127.0.0.2", "s2"), ("127.0.0.3", "s3")] {
        let o = issue(name, out);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(!d.join(out).join("ca_key.pem").exists());
        let mode = std::fs::metadata(d.join(out).join("server_key.pem"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
    }
    // Made once.
    assert!(!issue("127.0.0.2", "s2").status.success());
    let ask = |port: u16| {
        let out = d.join("out.pcap");
        let _ = std::fs::remove_file(&out);
        let o = Command::new(bin())
            .args(["query", "--certs"])
            .arg(&certs)
            .args(["--sensor", &format!("https://127.0.0.2:{port}"), "-w"])
            .arg(&out)
            .arg("udp")
            .output()
            .unwrap();
        (o, out)
    };
    let own = Server::start_on("127.0.0.2", &[&d.join("caps")], &d.join("s2"));
    let (o, out) = ask(own.port);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}\n{}", own.log());
    let want = tcpdump(&files, "udp", 0, u64::MAX);
    assert!(!want.is_empty());
    assert_eq!(records(&std::fs::read(&out).unwrap()), want);
    // 127.0.0.3's certificate on 127.0.0.2: refused by the client.
    let other = Server::start_on("127.0.0.2", &[&d.join("caps")], &d.join("s3"));
    let (o, out) = ask(other.port);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("TLS") && err.contains("127.0.0.2"), "{err}");
    assert!(!out.exists());
}
