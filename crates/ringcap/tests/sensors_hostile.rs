//! `ringcap query --sensor` against sensors that are hostile or broken (a
//! fake sensor in Python, `fake_sensor.py`, with real TLS and the keys
//! `ringcap serve-keys` makes, on 127.0.0.1): an endless error answer, a
//! stalled or cut answer, a huge record, a flood of interface blocks, too
//! many interfaces, escape sequences in an error. Each must end the query
//! promptly with a message naming the sensor, within a memory bound (the
//! client runs with 1 GiB of address space: holding what such a sensor
//! sends would abort it), leave no file that looks like an answer, and
//! print nothing a terminal would obey. And a sensor whose answer has two
//! link types gets each packet under its own interface.

#[path = "../../index/tests/mixed/mod.rs"]
mod mixed;
mod serve_support;
mod storage_support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serve_support::keys;
use storage_support::*;

/// A fake sensor running one mode; killed when dropped.
struct Fake {
    child: Child,
    port: u16,
}

impl Fake {
    fn start(certs: &Path, mode: &str, arg: u64) -> Fake {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_sensor.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(certs)
            .args([mode, &arg.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the fake sensor's port");
        Fake { child, port }
    }

    fn url(&self, name: &str) -> String {
        format!("{name}=https://127.0.0.1:{}", self.port)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ringcap query --sensor` of `sensors`, with 1 GiB of address space;
/// its output, and how long it took.
fn query(certs: &Path, sensors: &[String], out: &Path, extra: &[&str]) -> (Output, Duration) {
    let mut c = Command::new("prlimit");
    c.arg(format!("--as={}", 1u64 << 30)).arg("--").arg(bin());
    c.args(["query", "--certs"]).arg(certs);
    for s in sensors {
        c.args(["--sensor", s]);
    }
    c.args(extra).arg("-w").arg(out).arg("ip");
    let t = Instant::now();
    let o = c.output().unwrap();
    (o, t.elapsed())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The query failed cleanly (exit status 1, not a signal or an abort),
/// saying `why` about sensor `name`, and left nothing in `dir` but `keep`.
fn failed_cleanly(o: &Output, name: &str, why: &str, dir: &Path, keep: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{:?}\n{err}", o.status);
    assert!(err.contains(&format!("sensor {name} ")), "{err}");
    assert!(err.contains(why), "wanted '{why}' in:\n{err}");
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{err}");
}

fn setup(name: &str) -> (TempDir, PathBuf, PathBuf) {
    let d = TempDir::new(name);
    let certs = d.join("certs");
    keys(&certs, 1);
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    (d, certs, out)
}

#[test]
fn a_good_sensor_is_answered_whole() {
    if skip_without(&["python3", "prlimit", "tcpdump"]) {
        return;
    }
    let (_d, certs, out) = setup("sensor-good");
    let good = Fake::start(&certs, "good", 5);
    let f = out.join("a.pcap");
    let (o, _) = query(&certs, &[good.url("g")], &f, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = Command::new("tcpdump").arg("-nr").arg(&f).output().unwrap();
    assert!(t.status.success());
    assert_eq!(String::from_utf8_lossy(&t.stdout).lines().count(), 5);
    assert!(stderr(&o).contains("sensor g (https://127.0.0.1:"));
}

/// A reader that closes the output early (`| head -c`) ends the query
/// quietly with exit status 0, as a local query: what it took was whole.
#[test]
fn a_reader_closing_the_output_is_not_a_failure() {
    if skip_without(&["python3", "head"]) {
        return;
    }
    let (d, certs, _out) = setup("sensor-closed");
    // ~1.5 MB of answer: far more than a pipe holds.
    let good = Fake::start(&certs, "good", 20_000);
    let mut q = Command::new(bin());
    q.args(["query", "--certs"])
        .arg(&certs)
        .args(["--sensor", &good.url("g"), "-w", "-", "ip"]);
    closed_after_100_bytes(q);
    // A local query says and does the same.
    let dir = d.join("files");
    std::fs::create_dir(&dir).unwrap();
    let mut rng = mixed::Rng(29);
    mixed::write_series_of(
        &dir,
        &mut rng,
        2,
        20_000,
        1_700_000_000_000_000_000,
        50,
        true,
    );
    let mut q = Command::new(bin());
    q.args(["query", "-d"])
        .arg(&dir)
        .args(["-w", "-", "ip or ip6"]);
    closed_after_100_bytes(q);
}

/// Runs `q` into `head -c 100`: it must end with exit status 0, saying the
/// output was closed.
fn closed_after_100_bytes(mut q: Command) {
    let mut q = q
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let head = Command::new("head")
        .args(["-c", "100"])
        .stdin(q.stdout.take().unwrap())
        .output()
        .unwrap();
    assert_eq!(head.stdout.len(), 100);
    let o = q.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("output closed"), "{err}");
}

#[test]
fn an_endless_error_answer_is_not_held() {
    if skip_without(&["python3", "prlimit"]) {
        return;
    }
    let (_d, certs, out) = setup("sensor-endless");
    let bad = Fake::start(&certs, "endless_error", 0);
    let (o, took) = query(&certs, &[bad.url("bad")], &out.join("a.pcap"), &[]);
    failed_cleanly(&o, "bad", "500 Internal Server Error: AAAA", &out, &[]);
    assert!(took < Duration::from_secs(20), "{took:?}");
    // At most the first 4 KiB of the reason are shown.
    assert!(stderr(&o).len() < 6000, "{}", stderr(&o).len());
}

#[test]
fn a_stalled_sensor_fails_the_query_in_time() {
    if skip_without(&["python3", "prlimit"]) {
        return;
    }
    let (_d, certs, out) = setup("sensor-stall");
    let good = Fake::start(&certs, "good", 3);
    let bad = Fake::start(&certs, "stall", 0);
    let sensors = [good.url("good"), bad.url("slow")];
    let (o, took) = query(
        &certs,
        &sensors,
        &out.join("a.pcap"),
        &["--sensor-idle", "2"],
    );
    failed_cleanly(&o, "slow", "sent nothing for 2 s", &out, &[]);
    assert!(took < Duration::from_secs(15), "{took:?}");
    // What each sensor had given, and how long the merge waited for it.
    let err = stderr(&o);
    assert!(
        err.contains("for its data") && err.contains("sensor slow ("),
        "{err}"
    );
    // The whole query's limit holds even for a sensor that keeps sending.
    let (o, took) = query(
        &certs,
        &sensors,
        &out.join("a.pcap"),
        &["--sensor-timeout", "3"],
    );
    failed_cleanly(&o, "slow", "time limit", &out, &[]);
    assert!(took < Duration::from_secs(15), "{took:?}");
}

#[test]
fn a_cut_answer_leaves_no_file_that_looks_whole() {
    if skip_without(&["python3", "prlimit"]) {
        return;
    }
    let (_d, certs, out) = setup("sensor-cut");
    let good = Fake::start(&certs, "good", 3);
    let bad = Fake::start(&certs, "cut", 0);
    let f = out.join("a.pcap");
    let (o, _) = query(&certs, &[good.url("good"), bad.url("cut")], &f, &[]);
    failed_cleanly(&o, "cut", "the answer was cut", &out, &[]);
    assert!(stderr(&o).contains("a.pcap not written"), "{}", stderr(&o));
    // A file already there stays as it was.
    std::fs::write(&f, b"before").unwrap();
    let (o, _) = query(&certs, &[good.url("good"), bad.url("cut")], &f, &[]);
    failed_cleanly(&o, "cut", "the answer was cut", &out, &["a.pcap"]);
    assert_eq!(std::fs::read(&f).unwrap(), b"before");
}

#[test]
fn huge_records_and_interface_floods_are_refused() {
    if skip_without(&["python3", "prlimit"]) {
        return;
    }
    let (_d, certs, out) = setup("sensor-big");
    let f = out.join("a.pcap");
    for (mode, arg, why) in [
        (
            "big_record",
            1_000_000,
            "a packet of 1000000 bytes (more than 262144)",
        ),
        (
            "big_record",
            200_000_000,
            "more than 8 MiB without a packet",
        ),
        ("interface_flood", 0, "more than 8 MiB without a packet"),
        ("many_interfaces", 300, "more than 256 interfaces"),
        ("small_interface_flood", 0, "more than 256 interfaces"),
        ("link_type", 0x10001, "link type 0x10001"),
    ] {
        let bad = Fake::start(&certs, mode, arg);
        let (o, took) = query(&certs, &[bad.url("big")], &f, &[]);
        failed_cleanly(&o, "big", why, &out, &[]);
        assert!(took < Duration::from_secs(20), "{mode}: {took:?}");
    }
}

#[test]
fn a_sensors_text_reaches_the_terminal_escaped() {
    if skip_without(&["python3", "prlimit"]) {
        return;
    }
    let (_d, certs, out) = setup("sensor-escapes");
    let bad = Fake::start(&certs, "escapes", 0);
    let (o, _) = query(&certs, &[bad.url("esc")], &out.join("a.pcap"), &[]);
    failed_cleanly(&o, "esc", "403 Forbidden: \\u{1b}[2J", &out, &[]);
    assert!(!o.stderr.contains(&0x1b), "{}", stderr(&o));
    assert!(!o.stderr.contains(&0x07), "{}", stderr(&o));
    // Nor Unicode's reordering and invisible characters.
    assert!(o.stderr.is_ascii(), "{}", stderr(&o));
    assert!(stderr(&o).contains("\\u{202e}"), "{}", stderr(&o));
}

#[test]
fn each_link_type_of_a_sensor_keeps_its_interface() {
    if skip_without(&["python3", "prlimit", "tshark"]) {
        return;
    }
    let (_d, certs, out) = setup("sensor-links");
    let two = Fake::start(&certs, "two_link_types", 0);
    let f = out.join("a.pcapng");
    let (o, _) = query(&certs, &[two.url("two")], &f, &["--format", "pcapng"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = Command::new("tshark")
        .arg("-r")
        .arg(&f)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.interface_id",
            "-e",
            "frame.protocols",
        ])
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&t.stdout).into_owned();
    let got: Vec<&str> = lines.lines().collect();
    assert_eq!(got.len(), 2, "{lines}");
    assert!(got[0].starts_with("0\teth:ethertype:ip"), "{lines}");
    assert!(got[1].starts_with("1\traw:ip"), "{lines}");
}

#[test]
fn partial_leaves_a_failed_sensor_out_and_says_so() {
    if skip_without(&["python3", "prlimit", "tcpdump"]) {
        return;
    }
    let (_d, certs, out) = setup("sensor-partial");
    let good = Fake::start(&certs, "good", 5);
    let cut = Fake::start(&certs, "cut", 0);
    let stall = Fake::start(&certs, "stall", 0);
    let f = out.join("a.pcap");
    let sensors = [good.url("good"), cut.url("cut"), stall.url("slow")];
    let (o, _) = query(&certs, &sensors, &f, &["--partial", "--sensor-idle", "2"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    // The good sensor's 5 packets and the 3 the cut one sent before its cut.
    let t = Command::new("tcpdump").arg("-nr").arg(&f).output().unwrap();
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    assert_eq!(
        String::from_utf8_lossy(&t.stdout).lines().count(),
        8,
        "{err}"
    );
    assert!(err.contains("sensor good (https://127.0.0.1:") && err.contains("): 5 packets"));
    assert!(err.contains("sensor cut (https://127.0.0.1:"), "{err}");
    assert!(err.contains("the answer was cut"), "{err}");
    assert!(err.contains("left out after 3 packets"), "{err}");
    assert!(
        err.contains("sent nothing for 2 s; left out after 0 packets"),
        "{err}"
    );
    // A sensor whose answer the output cannot hold (another link type in
    // pcap) is left out too, named.
    let other = Fake::start(&certs, "link_type", 101);
    let sensors = [good.url("good"), other.url("raw")];
    let (o, _) = query(&certs, &sensors, &f, &["--partial"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("sensor raw (https://127.0.0.1:"), "{err}");
    assert!(err.contains("use --format pcapng"), "{err}");
    // Every sensor failing is still a failure.
    let (o, _) = query(
        &certs,
        &[cut.url("cut"), stall.url("slow")],
        &f,
        &["--partial", "--sensor-idle", "2"],
    );
    failed_cleanly(&o, "cut", "every sensor failed", &out, &["a.pcap"]);
}

#[test]
fn a_signal_takes_the_hidden_file_with_it() {
    if skip_without(&["python3", "prlimit"]) {
        return;
    }
    let (_d, certs, out) = setup("sensor-signal");
    let bad = Fake::start(&certs, "stall", 0);
    for (sig, code) in [("TERM", 143), ("INT", 130), ("HUP", 129)] {
        let mut child = Command::new(bin())
            .args(["query", "--certs"])
            .arg(&certs)
            .args(["--sensor", &bad.url("slow"), "-w"])
            .arg(out.join("a.pcap"))
            .arg("ip")
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The hidden file is there while the query waits.
        let t = Instant::now();
        while std::fs::read_dir(&out).unwrap().count() == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "no hidden file");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        let k = Command::new("kill")
            .args([&format!("-{sig}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(k.success());
        let st = child.wait().unwrap();
        assert_eq!(st.code(), Some(code), "SIG{sig}: {st:?}");
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
        assert!(left.is_empty(), "SIG{sig}: left behind {left:?}");
    }
}
