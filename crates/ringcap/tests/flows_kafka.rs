//! `ringcap capture --flows kafka://`: a real Apache Kafka 4 broker (KRaft,
//! one node on 127.0.0.1, started here from Maven Central's jars and
//! stopped after) receives one JSON message per flow, read back with
//! Debian's kcat: as many messages as flows, and per 5-tuple the packets
//! and bytes the capture file holds. A broker that is not there costs
//! counted losses, never the capture.

mod common;
mod flowkit;

use common::TempDir;
use flowkit::kafka::Broker;
use flowkit::*;
use ringcap_testkit::skip;
use serde_json::Value;
use std::time::{Duration, Instant};

fn sums_of_lines(lines: &[String]) -> Sums {
    let mut sums = Sums::new();
    for line in lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert!(
            v["community_id"]
                .as_str()
                .is_some_and(|c| c.starts_with("1:")),
            "{line}"
        );
        let key = (
            v["src"].as_str().unwrap().parse().unwrap(),
            v["dst"].as_str().unwrap().parse().unwrap(),
            v["sport"].as_u64().unwrap() as u16,
            v["dport"].as_u64().unwrap() as u16,
            v["proto"].as_u64().unwrap() as u8,
        );
        for (k, p, o) in [
            (key, "packets", "octets"),
            (
                (key.1, key.0, key.3, key.2, key.4),
                "rev_packets",
                "rev_octets",
            ),
        ] {
            let n = v[p].as_u64().unwrap();
            if n > 0 {
                let e = sums.entry(k).or_default();
                e.0 += n;
                e.1 += v[o].as_u64().unwrap();
            }
        }
    }
    sums
}

#[test]
fn kafka_gets_one_message_per_flow() {
    if !cfg!(feature = "kafka") {
        skip("ringcap is built without the kafka feature");
        return;
    }
    let broker = match Broker::start() {
        Ok(b) => b,
        Err(why) => {
            skip(why);
            return;
        }
    };
    let dir = TempDir::new("flows-kafka");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let want = file_sums(&pcap);
    let json = dir.join("flows.json");
    let stats = dir.join("stats.json");
    let run = common::ringcap(&[
        "capture",
        "-r",
        pcap.to_str().unwrap(),
        "--flows",
        &format!("kafka://{}/ringcap-flows", broker.addr()),
        "--flows",
        &format!("json:{}", json.display()),
        "--stats-json",
        stats.to_str().unwrap(),
    ]);
    run.assert_ok("kafka");
    let flows = std::fs::read_to_string(&json).unwrap().lines().count();
    let got = broker.consume("ringcap-flows");
    assert_eq!(got.len(), flows, "one message per flow\n{}", broker.log());
    let sums = sums_of_lines(&got);
    assert!(
        sums == want,
        "kafka differs from the file:\n{}",
        diff(&want, &sums)
    );
    let text = std::fs::read_to_string(&stats).unwrap();
    let fin: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(fin["flows"]["export_dropped"].as_u64(), Some(0), "{text}");
    assert_eq!(fin["flows"]["export_errors"].as_u64(), Some(0), "{text}");
}

/// Nothing listens where the broker should be: the file is read at full
/// speed (a JSON target alongside gets every flow), the end waits a bounded
/// time for the broker, every Kafka record is counted as lost, and the
/// exit status says the export was incomplete.
#[test]
fn a_broker_that_is_down_costs_counted_losses_not_the_capture() {
    if !cfg!(feature = "kafka") {
        skip("ringcap is built without the kafka feature");
        return;
    }
    let dir = TempDir::new("flows-kafka-down");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let json = dir.join("flows.json");
    let stats = dir.join("stats.json");
    let t = Instant::now();
    let run = common::ringcap(&[
        "capture",
        "-r",
        pcap.to_str().unwrap(),
        "--flows",
        &format!("kafka://127.0.0.1:{port}/t"),
        "--flows",
        &format!("json:{}", json.display()),
        "--stats-json",
        stats.to_str().unwrap(),
    ]);
    // Not held, but incomplete: said, exit 1.
    common::assert_no_panic(&run.stderr, "broker down");
    assert_eq!(run.code(), Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("error: flow export incomplete"),
        "{}",
        run.stderr
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let flows = std::fs::read_to_string(&json).unwrap().lines().count() as u64;
    assert!(flows >= 240, "{flows}");
    let text = std::fs::read_to_string(&stats).unwrap();
    let fin: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(fin["flows"]["exported"].as_u64(), Some(flows), "{text}");
    assert_eq!(
        fin["flows"]["export_dropped"].as_u64(),
        Some(flows),
        "{text}"
    );
}
