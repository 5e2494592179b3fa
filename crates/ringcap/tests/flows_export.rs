//! `ringcap capture --flows` beyond UDP: IPFIX over TCP read by a collector
//! written from RFC 7011 in Python (`oracles/ipfix_tcp_collector.py`, no
//! code shared with ringcap): templates once per connection and before any
//! data, sequence numbers per connection, the sampling and statistics
//! options records, a collector that comes late; the flows' packets and
//! bytes equal the file's own sums. Community IDs checked by PyPI's
//! `communityid`. The flow counters in `--stats-json`.

mod common;
mod flowkit;

use common::TempDir;
use flowkit::*;
use ringcap_testkit::capture::ChildGuard;
use ringcap_testkit::skip;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn oracle(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/oracles")
        .join(name)
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Python collector on `port`, taking `connections` connections.
struct TcpCollector {
    child: ChildGuard,
    out: PathBuf,
}

impl TcpCollector {
    fn start(port: u16, connections: u32, out: PathBuf) -> TcpCollector {
        let mut cmd = Command::new("python3");
        cmd.arg(oracle("ipfix_tcp_collector.py"))
            .arg(port.to_string())
            .arg(connections.to_string())
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut raw = cmd.spawn().expect("start the collector");
        let stdout = raw.stdout.take().expect("stdout");
        let child = ChildGuard::new(raw);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "collector did not start");
        TcpCollector { child, out }
    }

    /// Waits for the collector to have seen its connections end.
    fn finish(mut self) -> Vec<Value> {
        let st = self
            .child
            .wait_timeout(Duration::from_secs(30))
            .unwrap()
            .expect("collector ends when its connections do");
        assert!(st.success(), "collector: {st:?}");
        serde_json::from_str(&std::fs::read_to_string(&self.out).unwrap()).unwrap()
    }
}

/// Per 5-tuple and direction, from the collector's biflow records.
fn sums_of(records: &[&Value]) -> Sums {
    let mut sums = Sums::new();
    for r in records {
        let t = r["template"].as_u64().unwrap();
        if t != 256 && t != 257 {
            continue;
        }
        let (s, d) = if t == 256 { ("8", "12") } else { ("27", "28") };
        let sa: IpAddr = r[s].as_str().unwrap().parse().unwrap();
        let da: IpAddr = r[d].as_str().unwrap().parse().unwrap();
        let (sp, dp) = (
            r["7"].as_u64().unwrap() as u16,
            r["11"].as_u64().unwrap() as u16,
        );
        let proto = r["4"].as_u64().unwrap() as u8;
        let n = |k: &str| r[k].as_u64().unwrap();
        if n("2") > 0 {
            let e = sums.entry((sa, da, sp, dp, proto)).or_default();
            e.0 += n("2");
            e.1 += n("1");
        }
        if n("r2") > 0 {
            let e = sums.entry((da, sa, dp, sp, proto)).or_default();
            e.0 += n("r2");
            e.1 += n("r1");
        }
    }
    sums
}

fn template_ids(conn: &Value) -> Vec<u64> {
    conn["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect()
}

#[test]
fn ipfix_over_tcp_counts_what_the_file_holds_with_templates_once() {
    let dir = TempDir::new("flows-tcp");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let want = file_sums(&pcap);
    let port = free_tcp_port();
    let c = TcpCollector::start(port, 1, dir.join("got.json"));
    let stats = dir.join("stats.json");
    let run = common::ringcap(&[
        "capture",
        "-r",
        pcap.to_str().unwrap(),
        "--flows",
        &format!("ipfix+tcp://127.0.0.1:{port}"),
        "--flows-domain",
        "4242",
        "--stats-json",
        stats.to_str().unwrap(),
    ]);
    run.assert_ok("ipfix+tcp");
    let conns = c.finish();
    assert_eq!(conns.len(), 1);
    let conn = &conns[0];
    assert_eq!(conn["errors"], serde_json::json!([]), "RFC violations");
    // Templates once: both data templates and the statistics options
    // template, no sampling template (no sampling), all in the first
    // message.
    let mut ids = template_ids(conn);
    ids.sort();
    assert_eq!(ids, vec![256, 257, 259]);
    let records: Vec<&Value> = conn["records"].as_array().unwrap().iter().collect();
    let got = sums_of(&records);
    assert!(
        got == want,
        "ipfix+tcp differs from the file:\n{}",
        diff(&want, &got)
    );
    // The statistics record at the end counts every flow record.
    let flows = records
        .iter()
        .filter(|r| r["template"] == 256 || r["template"] == 257)
        .count() as u64;
    let st: Vec<&&Value> = records.iter().filter(|r| r["template"] == 259).collect();
    let last = st.last().expect("a statistics record");
    assert_eq!(
        last["42"].as_u64(),
        Some(flows),
        "exportedFlowRecordTotalCount"
    );
    assert_eq!(last["163"].as_u64(), Some(flows), "observedFlowTotalCount");
    assert_eq!(last["149"].as_u64(), Some(4242), "observation domain");
    assert!(
        conn["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["domain"] == 4242),
        "every message's observation domain"
    );
    // --stats-json: the final record has the flow counters.
    let text = std::fs::read_to_string(&stats).unwrap();
    let fin: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(fin["flows"]["exported"].as_u64(), Some(flows), "{text}");
    assert_eq!(fin["flows"]["created"].as_u64(), Some(flows), "{text}");
    assert_eq!(fin["flows"]["active"].as_u64(), Some(0), "{text}");
    assert_eq!(fin["flows"]["export_errors"].as_u64(), Some(0), "{text}");
}

#[test]
fn sampling_is_reported_in_an_options_record() {
    let dir = TempDir::new("flows-tcp-sampling");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    for (args, alg, space) in [
        (&["--sample", "1:4", "--sample-mode", "count"][..], 1, 3),
        (&["--sample-flows", "1:8"][..], 6, 7),
    ] {
        let port = free_tcp_port();
        let c = TcpCollector::start(port, 1, dir.join("got.json"));
        let url = format!("ipfix+tcp://127.0.0.1:{port}");
        let mut a = vec!["capture", "-r", pcap.to_str().unwrap(), "--flows", &url];
        a.extend_from_slice(args);
        common::ringcap(&a).assert_ok("sampled");
        let conns = c.finish();
        let conn = &conns[0];
        assert_eq!(conn["errors"], serde_json::json!([]), "RFC violations");
        let t = conn["templates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == 258)
            .expect("sampling options template");
        assert_eq!(t["options"], true);
        assert_eq!(t["scope"], 1);
        let r = conn["records"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["template"] == 258)
            .expect("sampling record");
        assert_eq!(r["304"].as_u64(), Some(alg), "selectorAlgorithm {r}");
        assert_eq!(r["305"].as_u64(), Some(1), "samplingPacketInterval {r}");
        assert_eq!(r["306"].as_u64(), Some(space), "samplingPacketSpace {r}");
        let p = r["311"].as_f64().unwrap();
        assert!((p - 1.0 / (space + 1) as f64).abs() < 1e-12, "{r}");
    }
}

/// The collector is not there when the capture starts: the failed
/// connections are counted, the exporter keeps trying (the capture is not
/// held), and when the collector comes every flow arrives, templates first.
#[test]
fn a_tcp_collector_that_comes_late_gets_every_flow() {
    let dir = TempDir::new("flows-tcp-late");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let want = file_sums(&pcap);
    let port = free_tcp_port();
    let stats = dir.join("stats.json");
    let url = format!("ipfix+tcp://127.0.0.1:{port}");
    let mut cmd = Command::new(common::bin());
    cmd.args(["capture", "-r", pcap.to_str().unwrap(), "--flows", &url])
        .arg("--stats-json")
        .arg(&stats)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = ChildGuard::spawn(&mut cmd).expect("ringcap");
    std::thread::sleep(Duration::from_millis(1500));
    let c = TcpCollector::start(port, 1, dir.join("got.json"));
    let out = child
        .wait_output(Duration::from_secs(30))
        .expect("ringcap ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let conns = c.finish();
    let conn = &conns[0];
    assert_eq!(conn["errors"], serde_json::json!([]), "RFC violations");
    let records: Vec<&Value> = conn["records"].as_array().unwrap().iter().collect();
    let got = sums_of(&records);
    assert!(got == want, "late collector:\n{}", diff(&want, &got));
    let text = std::fs::read_to_string(&stats).unwrap();
    let fin: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert!(
        fin["flows"]["connect_failures"].as_u64().unwrap() >= 1,
        "{text}"
    );
    assert_eq!(fin["flows"]["export_dropped"].as_u64(), Some(0), "{text}");
}

#[test]
fn community_ids_match_the_reference_implementation() {
    let python = match ringcap_testkit::oracle::oracle_python("communityid") {
        Ok(p) => p,
        Err(why) => {
            skip(why);
            return;
        }
    };
    let dir = TempDir::new("flows-cid");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let out = dir.join("flows.json");
    common::ringcap(&[
        "capture",
        "-r",
        pcap.to_str().unwrap(),
        "--flows",
        &format!("json:{}", out.display()),
    ])
    .assert_ok("json");
    let check = Command::new(python)
        .arg(oracle("community_id_check.py"))
        .stdin(std::fs::File::open(&out).unwrap())
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{summary}");
    let v: Value = serde_json::from_str(summary.trim()).unwrap();
    let lines = std::fs::read_to_string(&out).unwrap().lines().count() as u64;
    assert_eq!(v["checked"].as_u64(), Some(lines));
    assert!(lines >= 240, "{lines}");
}

/// Nothing listens at the collector's address: the capture is not held,
/// the summary says the export is incomplete, and the exit status is 1 (it
/// was 0 with "0 lost", every record gone).
#[test]
fn an_export_nobody_receives_fails_the_capture() {
    let dir = TempDir::new("flows-nobody");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    for scheme in ["ipfix", "netflow9"] {
        let url = format!("{scheme}://127.0.0.1:{}", free_udp_port());
        let mut cmd = Command::new(common::bin());
        cmd.args(["capture", "-r", pcap.to_str().unwrap(), "--flows", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let out = ChildGuard::spawn(&mut cmd)
            .expect("ringcap")
            .wait_output(Duration::from_secs(30))
            .expect("ringcap ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{scheme}: {stderr}");
        assert!(
            stderr.contains("error: flow export incomplete") && stderr.contains("sends failed"),
            "{scheme}: {stderr}"
        );
    }
}
