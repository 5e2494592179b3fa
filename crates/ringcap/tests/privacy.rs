//! `ringcap capture --anonymize KEYFILE --mask FIELDS` on real packets over
//! veth: tcpdump (root) keeps the originals of the same packets, and an
//! oracle that shares no code with ringcap (tshark's dissection with every
//! checksum verified, PyPI's yacryptopan for the mapping) checks that every
//! address was rewritten, masked fields read zero, nothing else changed
//! but checksums, and every checksum good before is good after. The same
//! options offline (`-r`) give the same bytes.

mod common;

use common::*;
use ringcap_testkit::capture::start_tcpdump;
use ringcap_testkit::frames;
use ringcap_testkit::netns::have_program;
use ringcap_testkit::oracle::PrivacyOracle;
use ringcap_testkit::{skip, skip_unless_netns, Testbed};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

const MASK: &str = "ip.ttl,ip.id,tcp.seq,icmp.echo";

#[test]
fn live_capture_is_anonymized_and_masked_and_offline_agrees() {
    skip_unless_netns!();
    if !have_program("tcpdump") {
        return skip("tcpdump is needed (scripts/setup installs it)");
    }
    let oracle = match PrivacyOracle::find() {
        Ok(o) => o,
        Err(reason) => return skip(reason),
    };
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("privacy-live");
    let key = dir.file("key");
    let made = Command::new(bin())
        .args(["anonymize-key", &key])
        .status()
        .unwrap();
    assert!(made.success());
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "anonymize-key made {mode:o}");

    let ep = tb.endpoints();
    let mut sent = frames::mixed_sequence(&ep, 23 * 4);
    for seq in 0..8u32 {
        sent.push(frames::icmp4_port_unreachable(
            &ep,
            5000 + seq,
            53,
            33434 + seq as u16,
            48,
        ));
        sent.push(frames::icmp6_port_unreachable(
            &ep,
            6000 + seq,
            53,
            33434 + seq as u16,
            48,
        ));
    }
    let orig = dir.join("orig.pcap");
    let live = dir.file("live.pcap");
    let td = start_tcpdump(&tb, &orig, None, "").expect("tcpdump");
    let run = start(
        &tb,
        &[
            "-w",
            &live,
            "--anonymize",
            &key,
            "--mask",
            MASK,
            "--tstamp-precision",
            "micro",
        ],
    );
    tb.send_from_peer(&sent, 2000).expect("send");
    let fin = run.stop();
    fin.assert_ok("anonymized capture");
    fin.assert_no_loss("anonymized capture");
    td.finish(Duration::from_secs(2)).expect("tcpdump");
    assert!(
        !fin.stderr
            .contains(&std::fs::read_to_string(&key).unwrap()[..16]),
        "the key appears in ringcap's output"
    );

    let a = read(&orig);
    let b = read(&live);
    assert_eq!(
        a.len(),
        sent.len(),
        "tcpdump captured {} of {}",
        a.len(),
        sent.len()
    );
    assert_eq!(
        b.len(),
        sent.len(),
        "ringcap captured {} of {}",
        b.len(),
        sent.len()
    );

    let summary = oracle.judge(&orig, live.as_ref(), key.as_ref(), "ip.addr", MASK);
    println!("live: {summary}");
    assert!(
        summary["addresses_checked"].as_u64().unwrap() >= 200,
        "{summary}"
    );
    assert!(
        summary["checksums_good_after"].as_u64().unwrap() >= 150,
        "{summary}"
    );

    // Offline, from tcpdump's originals: the same bytes.
    let offline = dir.file("offline.pcap");
    let f = ringcap(&[
        "capture",
        "-r",
        orig.to_str().unwrap(),
        "-w",
        &offline,
        "--anonymize",
        &key,
        "--mask",
        MASK,
    ]);
    f.assert_ok("offline anonymization");
    let c = read(&offline);
    assert_eq!(c.len(), b.len());
    for (i, (x, y)) in b.iter().zip(&c).enumerate() {
        assert_eq!(x.data, y.data, "packet {i}: live and offline differ");
    }
}

#[test]
fn bad_key_files_and_fields_are_refused_before_capturing() {
    let dir = TempDir::new("privacy-bad");
    let input = dir.join("in.pcap");
    ringcap_testkit::netns::write_pcap(
        &input,
        &[frames::udp4(
            &frames::Endpoints::new([2; 6], [4; 6]),
            1,
            1,
            2,
            20,
        )],
    )
    .unwrap();
    let input = input.to_str().unwrap();
    let out = dir.file("out.pcap");
    let open_key = dir.file("open.key");
    std::fs::write(&open_key, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let short_key = dir.file("short.key");
    std::fs::write(&short_key, "ab".repeat(10)).unwrap();
    std::fs::set_permissions(&short_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let good_key = dir.file("good.key");
    std::fs::write(&good_key, "cd".repeat(32)).unwrap();
    std::fs::set_permissions(&good_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&["--anonymize", &open_key], "chmod 600"),
        (&["--anonymize", &short_key], "64 hexadecimal digits"),
        (
            &["--anonymize", "/nonexistent/key"],
            "cannot open the key file",
        ),
        (&["--mask", "ip.addr,ip.src"], "known fields: eth.addr"),
        (
            &["--anonymize", &good_key, "--anonymize-fields", "tcp.port"],
            "only ip.addr and eth.addr",
        ),
        (&["--anonymize-fields", "ip.addr"], "--anonymize"),
    ];
    for (args, want) in cases {
        let mut all = vec!["capture", "-r", input, "-w", &out];
        all.extend_from_slice(args);
        let f = ringcap(&all);
        assert_eq!(f.code(), Some(2), "{args:?}: {}", f.stderr);
        assert!(f.stderr.contains(want), "{args:?}: {}", f.stderr);
        for k in ["ab", "cd"] {
            assert!(
                !f.stderr.contains(&k.repeat(8)),
                "{args:?} leaked the key: {}",
                f.stderr
            );
        }
        assert!(
            !std::path::Path::new(&out).exists(),
            "{args:?} wrote a file"
        );
    }
}
