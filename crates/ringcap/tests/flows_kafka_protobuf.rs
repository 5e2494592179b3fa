//! `ringcap capture --flows 'kafka://BROKER/TOPIC?format=protobuf'`:
//! goflow2's protobuf flow messages into a real Kafka 4 broker (started
//! here, stopped after), read back with kcat and decoded by `protoc
//! --decode` (Debian's protobuf-compiler) from a schema written here with
//! goflow2's field names and numbers. Each Kafka message is one
//! length-delimited FlowMessage, as goflow2 writes them; per direction the
//! packets and bytes equal what the capture file holds, and protoc finds
//! no field the schema does not name.

mod common;
mod flowkit;

use common::TempDir;
use flowkit::kafka::Broker;
use flowkit::*;
use ringcap_testkit::skip;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::process::{Command, Stdio};

/// The fields of goflow2's `flowpb.FlowMessage` (pb/flow.proto of
/// github.com/netsampler/goflow2) that ringcap fills: goflow2's names,
/// types and numbers.
const SCHEMA: &str = r#"syntax = "proto3";
package flowpb;
message FlowMessage {
  enum FlowType {
    FLOWUNKNOWN = 0;
    SFLOW_5 = 1;
    NETFLOW_V5 = 2;
    NETFLOW_V9 = 3;
    IPFIX = 4;
  }
  FlowType type = 1;
  uint64 time_received_ns = 110;
  uint32 sequence_num = 4;
  uint64 sampling_rate = 3;
  uint64 time_flow_start_ns = 111;
  uint64 time_flow_end_ns = 112;
  uint64 bytes = 9;
  uint64 packets = 10;
  bytes src_addr = 6;
  bytes dst_addr = 7;
  uint32 etype = 30;
  uint32 proto = 20;
  uint32 src_port = 21;
  uint32 dst_port = 22;
  uint32 vlan_id = 29;
  uint32 tcp_flags = 26;
  uint32 icmp_type = 31;
  uint32 icmp_code = 32;
  uint32 observation_domain_id = 70;
}
"#;

/// A varint at the start of `b`: (value, its length).
fn varint(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    for (i, &x) in b.iter().enumerate().take(10) {
        v |= u64::from(x & 0x7f) << (7 * i);
        if x & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    panic!("bad varint {b:02x?}");
}

/// protoc's text escaping of a bytes field undone (octal escapes, `\\`,
/// `\"`, `\'`, `\n`, `\r`, `\t`, printable bytes as themselves).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let c = b[i + 1];
        if c.is_ascii_digit() {
            let mut v = 0u32;
            let mut j = i + 1;
            while j < b.len() && j < i + 4 && b[j].is_ascii_digit() {
                v = v * 8 + u32::from(b[j] - b'0');
                j += 1;
            }
            out.push(v as u8);
            i = j;
        } else {
            out.push(match c {
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                other => other,
            });
            i += 2;
        }
    }
    out
}

/// The text between the one opening and the one closing quote.
fn quoted(v: &str) -> &str {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("not a quoted string: {v}"))
}

fn addr(b: &[u8]) -> IpAddr {
    match b.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(b).unwrap()),
        16 => IpAddr::from(<[u8; 16]>::try_from(b).unwrap()),
        n => panic!("an address of {n} bytes"),
    }
}

/// One message decoded by protoc: field name -> text value.
fn protoc_decode(dir: &std::path::Path, msg: &[u8]) -> BTreeMap<String, String> {
    let mut child = Command::new("protoc")
        .arg(format!("--proto_path={}", dir.display()))
        .arg("--decode=flowpb.FlowMessage")
        .arg(dir.join("flow.proto"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("protoc");
    child.stdin.take().unwrap().write_all(msg).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "protoc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (k, v) = line.split_once(": ").unwrap_or_else(|| panic!("{line}"));
        m.insert(k.to_string(), v.to_string());
    }
    m
}

#[test]
fn kafka_gets_goflow2_protobuf_messages_protoc_decodes() {
    if !cfg!(feature = "kafka") {
        skip("ringcap is built without the kafka feature");
        return;
    }
    if !have("protoc") {
        skip("protoc is not installed (Debian: apt-get install protobuf-compiler)");
        return;
    }
    let broker = match Broker::start() {
        Ok(b) => b,
        Err(why) => {
            skip(why);
            return;
        }
    };
    let dir = TempDir::new("flows-kafka-pb");
    std::fs::write(dir.join("flow.proto"), SCHEMA).unwrap();
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let want = file_sums(&pcap);
    let url = format!("kafka://{}/goflow?format=protobuf", broker.addr());
    let run = common::ringcap(&["capture", "-r", pcap.to_str().unwrap(), "--flows", &url]);
    run.assert_ok("kafka protobuf");
    let msgs = broker.consume_raw("goflow");
    assert!(
        msgs.len() >= want.len(),
        "{} messages\n{}",
        msgs.len(),
        broker.log()
    );
    let names = [
        "type",
        "time_received_ns",
        "sequence_num",
        "sampling_rate",
        "time_flow_start_ns",
        "time_flow_end_ns",
        "bytes",
        "packets",
        "src_addr",
        "dst_addr",
        "etype",
        "proto",
        "src_port",
        "dst_port",
        "vlan_id",
        "tcp_flags",
        "icmp_type",
        "icmp_code",
        "observation_domain_id",
    ];
    let mut sums = Sums::new();
    let mut seqs = Vec::new();
    for m in &msgs {
        // Length-delimited: a varint, then exactly that many bytes.
        let (len, n) = varint(m);
        assert_eq!(len as usize, m.len() - n, "length prefix of {m:02x?}");
        let f = protoc_decode(dir.path(), &m[n..]);
        for k in f.keys() {
            assert!(
                names.contains(&k.as_str()),
                "field {k} unknown to goflow2's schema: {f:?}"
            );
        }
        assert_eq!(f["type"], "IPFIX", "{f:?}");
        assert_eq!(f["sampling_rate"], "1", "{f:?}");
        let num = |k: &str| -> u64 { f.get(k).map_or(0, |v| v.parse().unwrap()) };
        let src = addr(&unescape(quoted(&f["src_addr"])));
        let dst = addr(&unescape(quoted(&f["dst_addr"])));
        let etype = if src.is_ipv4() { 0x0800 } else { 0x86dd };
        assert_eq!(num("etype"), etype, "{f:?}");
        assert!(
            num("time_flow_start_ns") <= num("time_flow_end_ns"),
            "{f:?}"
        );
        assert!(num("time_received_ns") > 1_700_000_000_000_000_000, "{f:?}");
        seqs.push(num("sequence_num"));
        let key = (
            src,
            dst,
            num("src_port") as u16,
            num("dst_port") as u16,
            num("proto") as u8,
        );
        let e = sums.entry(key).or_default();
        e.0 += num("packets");
        e.1 += num("bytes");
    }
    assert!(
        sums == want,
        "kafka (protobuf) differs from the file:\n{}",
        diff(&want, &sums)
    );
    // One sequence number per message, none skipped.
    seqs.sort_unstable();
    let expect: Vec<u64> = (0..msgs.len() as u64).collect();
    assert_eq!(seqs, expect);
}
