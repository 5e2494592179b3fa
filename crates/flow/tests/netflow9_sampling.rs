//! NetFlow v9 with sampling on: the exporter (over UDP, as `--flows
//! netflow9://` runs it) sends an options template and record of the
//! sampling parameters with the data templates, and again with every
//! template refresh; without sampling it sends none. Wireshark's cflow
//! dissector (tshark) is the oracle: the datagrams are written into a pcap
//! and it must decode the options template (scope System, SAMPLING_INTERVAL,
//! SAMPLING_ALGORITHM) and the record's values.
//!
//! nfdump 1.7.1 (Debian 12) is not the oracle here: its nfcapd stores no
//! sampler from this options record, nor from the Cisco-style one
//! (FLOW_SAMPLER_ID/MODE/RANDOM_INTERVAL), checked by hand with crafted
//! datagrams; `nfdump -E` lists the exporter without a sampler either way.

use ringcap_flow::{
    Direction, EndReason, ExportOptions, Exporter, FlowKey, FlowRecord, SamplingReport, Target,
    NO_TUNNEL,
};
use ringcap_testkit::skip;
use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

fn record(i: u32) -> FlowRecord {
    let mut key = FlowKey {
        src: [0; 16],
        dst: [0; 16],
        sport: 1000 + i as u16,
        dport: 53,
        proto: 17,
        v6: false,
        vlan: 0,
        icmp: 0,
        tunnel: NO_TUNNEL,
    };
    key.src[..4].copy_from_slice(&[198, 18, 0, i as u8]);
    key.dst[..4].copy_from_slice(&[198, 19, 0, 1]);
    FlowRecord {
        key,
        start_ns: 1_790_000_000_000_000_000,
        end_ns: 1_790_000_001_000_000_000,
        fwd: Direction {
            packets: 3,
            octets: 300,
            tcp_flags: 0,
        },
        rev: Direction::ZERO,
        icmp: 0,
        reason: EndReason::ForcedEnd,
    }
}

/// Exports `n` flows over NetFlow v9 to a local socket; the datagrams.
fn export(sampling: Option<SamplingReport>, refresh: Duration, n: u32) -> Vec<Vec<u8>> {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let url = format!("netflow9://{}", rx.local_addr().unwrap());
    let opts = ExportOptions {
        sampling,
        template_refresh: refresh,
        // Small messages: several datagrams.
        max_message: 512,
        domain: 0x0a0b_0c0d,
        ..ExportOptions::default()
    };
    let ex = Exporter::start(&[Target::parse(&url).unwrap()], opts).unwrap();
    let tx = ex.sender();
    for i in 0..n {
        tx.send(record(i), true);
        if i % 16 == 15 {
            // Let the exporter take them in several passes (and refresh).
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    drop(tx);
    ex.finish();
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok(len) = rx.recv(&mut buf) {
        out.push(buf[..len].to_vec());
    }
    out
}

/// The datagrams as Ethernet/IPv4/UDP frames to port 2055 (checksums 0:
/// not checked by tshark by default).
fn frames(dgrams: &[Vec<u8>]) -> Vec<Vec<u8>> {
    dgrams
        .iter()
        .map(|d| {
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
            let ip_len = (20 + 8 + d.len()) as u16;
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&ip_len.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&[198, 18, 0, 1, 198, 19, 0, 2]);
            f.extend_from_slice(&40000u16.to_be_bytes());
            f.extend_from_slice(&2055u16.to_be_bytes());
            f.extend_from_slice(&((8 + d.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
            f.extend_from_slice(d);
            f
        })
        .collect()
}

/// tshark's reading of the datagrams: per frame, the options template
/// IDs, scope types, sampling interval and algorithm it decoded.
fn tshark(dgrams: &[Vec<u8>], name: &str) -> Vec<Vec<String>> {
    let dir = std::env::temp_dir().join(format!("ringcap-nf9-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("v9.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &frames(dgrams)).unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args([
            "-d",
            "udp.port==2055,cflow",
            "-T",
            "fields",
            "-E",
            "separator=|",
        ])
        .args(["-e", "cflow.version", "-e", "cflow.template_id"])
        .args([
            "-e",
            "cflow.scope_field_type",
            "-e",
            "cflow.sampling_interval",
        ])
        .args(["-e", "cflow.sampling_algorithm", "-e", "cflow.scope_system"])
        .output()
        .expect("tshark");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

fn tshark_here() -> bool {
    let ok = Command::new("tshark")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip("tshark is not installed (Debian: apt-get install tshark)");
    }
    ok
}

#[test]
fn sampling_goes_out_in_an_options_record_tshark_decodes() {
    if !tshark_here() {
        return;
    }
    for (name, s, interval, algorithm) in [
        ("count", SamplingReport::count(4), "4", "1"),
        ("random", SamplingReport::random(8), "8", "2"),
        ("flows", SamplingReport::flows(16), "16", "2"),
    ] {
        let dgrams = export(Some(s), Duration::from_secs(60), 40);
        assert!(dgrams.len() >= 3, "{name}: {} datagrams", dgrams.len());
        let rows = tshark(&dgrams, name);
        assert_eq!(rows.len(), dgrams.len(), "{name}: {rows:?}");
        // The first datagram: version 9, the data templates and the
        // options template 258, scope System holding the source ID, the
        // interval and the algorithm.
        let first = &rows[0];
        assert_eq!(first[0], "9", "{name}: {first:?}");
        let ids: Vec<&str> = first[1].split(',').collect();
        for id in ["256", "257", "258"] {
            assert!(ids.contains(&id), "{name}: template {id} in {first:?}");
        }
        assert_eq!(first[2], "1", "{name}: scope System: {first:?}");
        assert_eq!(first[3], interval, "{name}: {first:?}");
        assert_eq!(first[4], algorithm, "{name}: {first:?}");
        assert_eq!(first[5], "0a0b0c0d", "{name}: scope value: {first:?}");
        // Later datagrams (no refresh due) carry data only.
        for r in &rows[1..] {
            assert!(r[3].is_empty(), "{name}: sampling again in {r:?}");
        }
    }
}

#[test]
fn the_options_record_is_refreshed_with_the_templates() {
    if !tshark_here() {
        return;
    }
    // A refresh on every pass of the exporter thread.
    let dgrams = export(Some(SamplingReport::count(4)), Duration::ZERO, 64);
    let rows = tshark(&dgrams, "refresh");
    let with = rows.iter().filter(|r| r[3] == "4").count();
    assert!(with >= 2, "options record sent once only: {rows:?}");
    // Each time in a datagram with the data templates.
    for r in rows.iter().filter(|r| r[3] == "4") {
        assert!(r[1].split(',').any(|t| t == "256"), "{r:?}");
    }
}

#[test]
fn without_sampling_no_options_template() {
    if !tshark_here() {
        return;
    }
    let dgrams = export(None, Duration::from_secs(60), 20);
    let rows = tshark(&dgrams, "none");
    assert!(!rows.is_empty());
    let ids: Vec<&str> = rows[0][1].split(',').collect();
    assert!(ids.contains(&"256") && !ids.contains(&"258"), "{rows:?}");
    assert!(rows.iter().all(|r| r[3].is_empty()), "{rows:?}");
}
