//! Helpers of `serve.rs`: a `ringcap serve` process, its keys, curl with
//! the client certificate, tcpdump as the oracle, and test capture files.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::mixed::{self, Rng};
use crate::storage_support::bin;
pub use ringcap_testkit::capture::records;
use ringcap_testkit::Testbed;

/// `tcpdump -r` of each file in turn (nanoseconds), in `[after, before)`.
pub fn tcpdump(files: &[PathBuf], filter: &str, after: u64, before: u64) -> Vec<mixed::Rec> {
    let mut all = ringcap_testkit::capture::tcpdump_read(files, filter).expect("tcpdump -r");
    all.retain(|r| r.0 >= after && r.0 < before);
    all
}

/// The lines `r` gives, gathered by a thread as they come.
fn lines_of(r: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            l.lock().unwrap().push(line);
        }
    });
    lines
}

/// A running `ringcap serve`, killed on drop.
pub struct Server {
    child: Child,
    pub port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn start(dirs: &[&Path], certs: &Path, extra: &[&str]) -> Server {
        Server::start_in(None, dirs, certs, extra)
    }

    /// Started in the testbed's capture namespace.
    pub fn start_in(tb: Option<&Testbed>, dirs: &[&Path], certs: &Path, extra: &[&str]) -> Server {
        Server::launch(tb, "127.0.0.1", dirs, certs, extra)
    }

    /// Listening on `ip` (a loopback address: 127.0.0.0/8).
    pub fn start_on(ip: &str, dirs: &[&Path], certs: &Path) -> Server {
        Server::launch(None, ip, dirs, certs, &[])
    }

    fn launch(
        tb: Option<&Testbed>,
        ip: &str,
        dirs: &[&Path],
        certs: &Path,
        extra: &[&str],
    ) -> Server {
        let mut c = in_ns(tb, &bin().to_string_lossy());
        c.arg("serve");
        for d in dirs {
            c.arg("-d").arg(d);
        }
        let mut child = c
            .arg("--certs")
            .arg(certs)
            .args(["--listen", &format!("{ip}:0")])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ringcap serve");
        let log = lines_of(child.stderr.take().unwrap());
        let t = Instant::now();
        let port = loop {
            let p = log.lock().unwrap().iter().find_map(|l| {
                l.strip_prefix(&format!("ringcap serve: listening on {ip}:"))
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

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keys made by `ringcap serve-keys`, and stenocurl's config naming `port`.
pub fn keys(dir: &Path, port: u16) {
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

pub fn rfc3339(ns: u64) -> String {
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
pub fn as_stenoread_writes(recs: &[mixed::Rec], tmp: &Path) -> Vec<u8> {
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

pub fn series(dir: &Path, seed: u64, files: usize, t0: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = Rng(seed);
    mixed::write_series(dir, &mut rng, files, 300, t0)
}

/// `curl` of `query` in the background, reading at most `rate` bytes/s.
pub fn slow_curl(certs: &Path, port: u16, query: &str, rate: &str) -> Child {
    curl_query(certs, port, query, &["--limit-rate", rate])
}

/// curl started on `POST /query` with the client certificate, its answer
/// thrown away, `extra` arguments before the query.
pub fn curl_query(certs: &Path, port: u16, query: &str, extra: &[&str]) -> Child {
    Command::new("curl")
        .arg("--cert")
        .arg(certs.join("client_cert.pem"))
        .arg("--key")
        .arg(certs.join("client_key.pem"))
        .arg("--cacert")
        .arg(certs.join("ca_cert.pem"))
        .args(["--silent", "-o", "/dev/null"])
        .args(extra)
        .args(["-d", query])
        .arg(format!("https://127.0.0.1:{port}/query"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// Polls `f` every 50 ms for up to `secs` seconds.
pub fn within(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// [`series`] with every file's packets in time order, and each file after
/// the one before: a sensor's answer is then in time order, and merging the
/// sensors' filtered answers is the same as filtering the merge of all files
/// (with packets that step back, the two differ for any merge).
pub fn sorted_series(dir: &Path, seed: u64, files: usize, t0: u64) -> Vec<PathBuf> {
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

pub fn index(files: &[PathBuf]) {
    let mut c = Command::new(bin());
    c.arg("index").args(files);
    assert!(c.status().unwrap().success());
}

/// curl's status code and body for a request with the client certificate.
pub fn curl(
    certs: &Path,
    port: u16,
    path: &str,
    data: &str,
    extra: &[&str],
) -> (String, Vec<u8>, bool) {
    curl_in(None, certs, port, path, data, extra)
}

/// `program`, in the testbed's capture namespace when there is one.
pub fn in_ns(tb: Option<&Testbed>, program: &str) -> Command {
    match tb {
        Some(tb) => tb.in_capture_ns(program),
        None => Command::new(program),
    }
}

/// [`curl`] in the testbed's capture namespace.
pub fn curl_in(
    tb: Option<&Testbed>,
    certs: &Path,
    port: u16,
    path: &str,
    data: &str,
    extra: &[&str],
) -> (String, Vec<u8>, bool) {
    let o = in_ns(tb, "curl")
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

/// A TLS client (openssl s_client, with the client certificate) that sends
/// `POST path` with `query` and then reads nothing: its stdout is a pipe
/// nobody reads, so once the pipe is full it stops reading the socket and
/// the server's writes meet a zero TCP window. Killed on drop.
pub struct Stalled(Child);

impl Stalled {
    pub fn start(certs: &Path, port: u16, path: &str, query: &str) -> Stalled {
        use std::io::Write;
        let mut child = Command::new("openssl")
            .args(["s_client", "-quiet", "-connect"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(certs.join("client_cert.pem"))
            .arg("-key")
            .arg(certs.join("client_key.pem"))
            .arg("-CAfile")
            .arg(certs.join("ca_cert.pem"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run openssl s_client");
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{query}",
            query.len()
        );
        // stdin stays open (held in the child handle): the client does not
        // hang up, it only stops reading.
        let stdin = child.stdin.as_mut().unwrap();
        stdin.write_all(req.as_bytes()).unwrap();
        stdin.flush().unwrap();
        Stalled(child)
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `/etc/netns/NS/resolv.conf`, which `ip netns exec NS` mounts over
/// /etc/resolv.conf; the directory is removed on drop.
pub struct NetnsResolvConf(PathBuf);

impl NetnsResolvConf {
    pub fn new(ns: &str, text: &str) -> NetnsResolvConf {
        let dir = Path::new("/etc/netns").join(ns);
        std::fs::create_dir_all(&dir).unwrap();
        let guard = NetnsResolvConf(dir);
        std::fs::write(guard.0.join("resolv.conf"), text).unwrap();
        guard
    }
}

impl Drop for NetnsResolvConf {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A DNS "server" on 127.0.0.1:53 in the testbed's capture namespace that answers nothing and
/// records the name of every query it gets (for at most 120 s); killed on
/// drop.
pub struct DnsWitness {
    child: Child,
    names: Arc<Mutex<Vec<String>>>,
}

impl DnsWitness {
    pub fn start(tb: &Testbed) -> DnsWitness {
        let script = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
print("ready", flush=True)
end = time.time() + 120
while time.time() < end:
    s.settimeout(max(0.1, end - time.time()))
    try:
        d, _ = s.recvfrom(4096)
    except socket.timeout:
        break
    i, labels = 12, []
    while i < len(d) and d[i] != 0 and len(labels) < 64:
        labels.append(d[i + 1:i + 1 + d[i]].decode("ascii", "replace"))
        i += 1 + d[i]
    print(".".join(labels), flush=True)
"#;
        let mut child = tb
            .in_capture_ns("python3")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python3");
        let names = lines_of(child.stdout.take().unwrap());
        let w = DnsWitness { child, names };
        assert!(
            within(10, || w.seen("ready")),
            "the DNS witness did not start"
        );
        w
    }

    /// True if a query for `name` (or the line `name`) was seen.
    pub fn seen(&self, name: &str) -> bool {
        self.names.lock().unwrap().iter().any(|l| l == name)
    }
}

impl Drop for DnsWitness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
