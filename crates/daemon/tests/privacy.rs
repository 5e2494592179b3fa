//! Grants that hide and anonymize: an unprivileged client of ringcapd gets
//! packets whose addresses are Crypto-PAn images under the policy's key and
//! whose hidden fields are zero, checksums kept right. Judged against
//! tcpdump's originals (root, the framework filter) by the oracle that
//! shares no code with ringcap (tshark's dissection, PyPI's yacryptopan).
//! A key file others can read is refused at start, by --check and on
//! reload (the old policy stays).

mod common;

use common::*;
use ringcap_testkit::oracle::PrivacyOracle;
use ringcap_testkit::{frames, skip, TempDir, Testbed};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const FRAMEWORK: &str = "not arp";
const HIDE: &str = "ip.ttl,tcp.port,icmp.echo";

fn make_key(dir: &TempDir) -> String {
    let key = dir.join("anon.key");
    let ok = Command::new(ringcap_bin())
        .arg("anonymize-key")
        .arg(&key)
        .status()
        .expect("ringcap anonymize-key");
    assert!(ok.success());
    key.to_string_lossy().into_owned()
}

fn grants(key: &str, capture_if: &str) -> String {
    let hide: Vec<String> = HIDE.split(',').map(|f| format!("\"{f}\"")).collect();
    format!(
        "anonymization_key = \"{key}\"\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{capture_if}\"]\n\
         capture_filter = \"{FRAMEWORK}\"\nhide = [{}]\nanonymize = true\n",
        hide.join(", ")
    )
}

#[test]
fn a_client_gets_anonymized_addresses_and_hidden_fields() {
    if !can_run() {
        return;
    }
    let oracle = match PrivacyOracle::find() {
        Ok(o) => o,
        Err(reason) => return skip(reason),
    };
    let tb = Testbed::new().expect("testbed");
    let keys = TempDir::new("privacy-key");
    let key = make_key(&keys);
    let d = Daemon::start(&tb, &grants(&key, &tb.capture_if));
    let out = open_dir("privacy-out");
    let td = TempDir::new("privacy-tcpdump");

    let client = start_client(&tb, &d, NOBODY, &out, "c", &[]);
    assert!(
        client.ready.contains("grant 1"),
        "effective settings: {}",
        client.ready
    );
    let orig = td.join("orig.pcap");
    let tcpdump = start_tcpdump(&tb, &orig, 262_144, FRAMEWORK);
    let ep = tb.endpoints();
    let mut sent = frames::mixed_sequence(&ep, 23 * 6);
    for seq in 0..6u32 {
        sent.push(frames::icmp4_port_unreachable(
            &ep,
            7000 + seq,
            53,
            33434,
            40,
        ));
        sent.push(frames::icmp6_port_unreachable(
            &ep,
            8000 + seq,
            53,
            33434,
            40,
        ));
    }
    tb.send_from_peer(&sent, 5000).expect("send");
    let fin = client.stop();
    std::thread::sleep(SETTLE);
    let want = tcpdump.stop();
    fin.assert_ok("privacy client");
    let got = fin.packets();
    assert_eq!(
        got.len(),
        want.len(),
        "client {} packets, tcpdump {}",
        got.len(),
        want.len()
    );
    assert!(want.len() > 100, "{} packets", want.len());

    let summary = oracle.judge(&orig, &fin.out, key.as_ref(), "ip.addr", HIDE);
    println!("ringcapd client: {summary}");
    assert!(
        summary["addresses_checked"].as_u64().unwrap() >= 200,
        "{summary}"
    );
    assert!(
        summary["masked_checked"].as_u64().unwrap() >= 100,
        "{summary}"
    );
    assert!(
        summary["checksums_good_after"].as_u64().unwrap() >= 100,
        "{summary}"
    );
    let log = d.stop();
    let key_text = std::fs::read_to_string(&key).unwrap();
    assert!(
        !log.contains(key_text.trim()),
        "the key is in the daemon's log"
    );
}

#[test]
fn a_key_file_others_can_read_is_refused() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let keys = TempDir::new("privacy-badkey");
    let key = make_key(&keys);
    let mut d = Daemon::start(&tb, &grants(&key, &tb.capture_if));
    // --check names the problem and exits 2.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let check = Command::new(ringcapd_bin())
        .args(["--check", "--config"])
        .arg(&d.config)
        .output()
        .expect("ringcapd --check");
    let err = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(2), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    // A reload keeps the old policy (and key).
    let text = std::fs::read_to_string(&d.config).unwrap();
    assert!(!d.reload_raw(&text), "reloaded with a world-readable key");
    d.assert_running("after the refused reload");
    d.stop();
}
