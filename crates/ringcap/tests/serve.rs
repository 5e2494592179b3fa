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
mod storage_support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mixed::Rng;
use storage_support::*;

fn records(bytes: &[u8]) -> Vec<mixed::Rec> {
    let mut rd = ringcap_format::Reader::new(bytes).expect("a capture stream");
    let mut v = Vec::new();
    while let Some(p) = rd.next_packet().expect("whole records") {
        v.push((p.ts_ns, p.wire_len, p.data.to_vec()));
    }
    v
}

/// `tcpdump -r` of each file in turn (nanoseconds), in `[after, before)`.
fn tcpdump(files: &[PathBuf], filter: &str, after: u64, before: u64) -> Vec<mixed::Rec> {
    let mut all = Vec::new();
    for f in files {
        let out = Command::new("tcpdump")
            .args(["--time-stamp-precision=nano", "-r"])
            .arg(f)
            .args(["-w", "-", filter])
            .stderr(Stdio::null())
            .output()
            .expect("run tcpdump");
        assert!(
            out.status.success(),
            "tcpdump -r {} '{filter}'",
            f.display()
        );
        all.extend(records(&out.stdout));
    }
    all.retain(|r| r.0 >= after && r.0 < before);
    all
}

/// A running `ringcap serve`, killed on drop.
struct Server {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(dirs: &[&Path], certs: &Path, extra: &[&str]) -> Server {
        let mut c = Command::new(bin());
        c.arg("serve");
        for d in dirs {
            c.arg("-d").arg(d);
        }
        let mut child = c
            .arg("--certs")
            .arg(certs)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ringcap serve");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (l, err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        let t = Instant::now();
        let port = loop {
            let p = log.lock().unwrap().iter().find_map(|l| {
                l.strip_prefix("ringcap serve: listening on 127.0.0.1:")
                    .and_then(|p| p.parse().ok())
            });
            if let Some(p) = p {
                break p;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("ringcap serve exited {st}: {:?}", log.lock().unwrap());
            }
            assert!(t.elapsed() < Duration::from_secs(20), "serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Server { child, port, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keys made by `ringcap serve-keys`, and stenocurl's config naming `port`.
fn keys(dir: &Path, port: u16) {
    if !dir.join("ca_key.pem").exists() {
        let o = Command::new(bin())
            .arg("serve-keys")
            .arg("--certs")
            .arg(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let cfg = format!(
        "{{\"Host\": \"127.0.0.1\", \"Port\": {port}, \"CertPath\": \"{}\"}}",
        dir.display()
    );
    std::fs::write(dir.join("config"), cfg).unwrap();
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

/// What stenoread's tcpdump writes for these records: they are written as a
/// nanosecond pcap (the link type and snap length ringcap serve declares),
/// and tcpdump -r of that -w writes the file (microseconds, as stenoread's).
fn as_stenoread_writes(recs: &[mixed::Rec], tmp: &Path) -> Vec<u8> {
    use ringcap_format::{pcap, TsResolution};
    let mut b = pcap::file_header(1, 262_144, TsResolution::Nano).to_vec();
    for (ts, wire, data) in recs {
        let mut h = [0u8; pcap::RECORD_HEADER_LEN];
        pcap::write_record_header(&mut h, *ts, data.len() as u32, *wire, TsResolution::Nano);
        b.extend_from_slice(&h);
        b.extend_from_slice(data);
    }
    let mid = tmp.join("want-ns.pcap");
    let want = tmp.join("want.pcap");
    std::fs::write(&mid, b).unwrap();
    let o = Command::new("tcpdump")
        .arg("-r")
        .arg(&mid)
        .arg("-w")
        .arg(&want)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(o.success());
    std::fs::read(want).unwrap()
}

fn series(dir: &Path, seed: u64, files: usize, t0: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = Rng(seed);
    mixed::write_series(dir, &mut rng, files, 300, t0)
}

/// [`series`] with every file's packets in time order, and each file after
/// the one before: a sensor's answer is then in time order, and merging the
/// sensors' filtered answers is the same as filtering the merge of all files
/// (with packets that step back, the two differ for any merge).
fn sorted_series(dir: &Path, seed: u64, files: usize, t0: u64) -> Vec<PathBuf> {
    let paths = series(dir, seed, files, t0);
    let kinds = [
        mixed::Kind::PcapNano,
        mixed::Kind::PcapMicro,
        mixed::Kind::Pcapng,
        mixed::Kind::PcapngLateIdb,
    ];
    let mut last = 0;
    for (i, p) in paths.iter().enumerate() {
        let mut recs = records(&std::fs::read(p).unwrap());
        recs.sort_by_key(|r| r.0);
        assert!(recs[0].0 >= last, "files of {} overlap", dir.display());
        last = recs.last().unwrap().0;
        mixed::write_file(p, kinds[i % kinds.len()], &recs);
    }
    paths
}

fn index(files: &[PathBuf]) {
    let mut c = Command::new(bin());
    c.arg("index").args(files);
    assert!(c.status().unwrap().success());
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

/// curl's status code and body for a request with the client certificate.
fn curl(
    certs: &Path,
    port: u16,
    path: &str,
    data: &str,
    extra: &[&str],
) -> (String, Vec<u8>, bool) {
    let o = Command::new("curl")
        .arg("--cert")
        .arg(certs.join("client_cert.pem"))
        .arg("--key")
        .arg(certs.join("client_key.pem"))
        .arg("--cacert")
        .arg(certs.join("ca_cert.pem"))
        .args([
            "--silent",
            "--show-error",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "-d",
            data,
        ])
        .args(extra)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let mut body = o.stdout;
    let code_at = body.iter().rposition(|&b| b == b'\n').unwrap_or(0);
    let code = String::from_utf8_lossy(&body[code_at + 1..]).to_string();
    body.truncate(code_at);
    (code, body, o.status.success())
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
    let log = srv.log();
    assert_eq!(log.matches("TLS refused").count(), 2, "{log}");
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
