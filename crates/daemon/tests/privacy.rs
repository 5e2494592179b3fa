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

/// What a client's filter selects by must be what it is given: with
/// addresses hidden (zeroed), `host REAL` delivered exactly the real host's
/// packets (the filter ran before the masks), so which packets came
/// depended on the hidden addresses. Now the client's program runs on the
/// packets as delivered: `host REAL` gets nothing, `host 0.0.0.0` every
/// IPv4 packet, a filter on fields not hidden (`udp`) what it always got.
/// Four clients at once (the hub's user-space path) and one alone on the
/// interface (its framework in the kernel).
#[test]
fn a_client_filters_what_it_is_given_not_what_is_hidden() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let grants = format!(
        "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\nhide = [\"ip.addr\"]\n",
        tb.capture_if
    );
    let d = Daemon::start(&tb, &grants);
    let out = open_dir("privacy-filters");
    let ep = tb.endpoints();
    let (real4, real6) = (ep.src_ip.to_string(), ep.src_ip6.to_string());
    let mut sent = Vec::new();
    for seq in 0..60u32 {
        sent.push(frames::udp4(&ep, seq, 5000, 6000, 40));
        sent.push(frames::udp6(&ep, 100 + seq, 5000, 6000, 40));
    }
    let cases: [(&str, String, usize); 4] = [
        ("real4", format!("host {real4}"), 0),
        ("real6", format!("ip6 host {real6}"), 0),
        ("zero4", "host 0.0.0.0".into(), 60),
        ("udp", "udp".into(), 120),
    ];
    let clients: Vec<_> = cases
        .iter()
        .map(|(name, filter, _)| start_client(&tb, &d, NOBODY, &out, name, &[filter.as_str()]))
        .collect();
    tb.send_from_peer(&sent, 5000).expect("send");
    for ((name, filter, want), c) in cases.iter().zip(clients) {
        let fin = c.stop();
        fin.assert_ok(name);
        assert_eq!(fin.packets().len(), *want, "{name}: '{filter}'");
    }
    // Alone on the interface: the kernel runs the framework only.
    let alone = start_client(&tb, &d, NOBODY, &out, "alone", &[&format!("host {real4}")]);
    tb.send_from_peer(&sent, 5000).expect("send");
    let fin = alone.stop();
    fin.assert_ok("alone");
    assert_eq!(fin.packets().len(), 0, "alone: 'host {real4}'");
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}

/// The bytes past a grant's snap cap are hidden too: a client's filter
/// that reads them (`udp[60] = 0x54`, true of every packet sent: payload
/// byte i is i + 0x20) selected packets by payload the client never gets.
/// Now it judges the record it is given, which ends at the cap: nothing
/// passes, while `udp` (within the cap) passes everything.
#[test]
fn a_filter_cannot_read_past_the_snap_cap() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let grants = format!(
        "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\nmax_snaplen = 64\n",
        tb.capture_if
    );
    let d = Daemon::start(&tb, &grants);
    let out = open_dir("privacy-snapcap");
    let ep = tb.endpoints();
    let sent: Vec<Vec<u8>> = (0..50u32)
        .map(|seq| frames::udp4(&ep, seq, 5000, 6000, 200))
        .collect();
    let past = start_client(&tb, &d, NOBODY, &out, "past", &["udp[60] = 0x54"]);
    let within = start_client(&tb, &d, NOBODY, &out, "within", &["udp"]);
    tb.send_from_peer(&sent, 5000).expect("send");
    for (name, c, want) in [("past", past, 0), ("within", within, 50)] {
        let fin = c.stop();
        fin.assert_ok(name);
        let got = fin.packets();
        assert_eq!(got.len(), want, "{name}");
        assert!(
            got.iter().all(|p| p.data.len() <= 64),
            "{name}: past the cap"
        );
    }
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}
