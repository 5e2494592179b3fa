//! `ringcap capture --flows` into pmacct's nfacctd, the second real
//! collector after nfcapd (crates/ringcap/tests/flows.rs): the same capture
//! file of many flows (TCP and UDP in both directions, VLAN, IPv6, ICMP) is
//! read with `--flows ipfix://` and `--flows netflow9://` into an nfacctd
//! the test starts on 127.0.0.1, whose print plugin writes per VLAN and
//! 5-tuple the packets and bytes it counted; those equal what the test sums
//! from the file itself (the testkit's reader and flow keys, IP lengths
//! from the bytes), and the VLAN is the frames' own.
//!
//! What nfacctd 1.7.7 does with ringcap's records, found by running it:
//! - NetFlow v9: ringcap sends each biflow as two records, one per
//!   direction, and nfacctd counts both: every direction of the file.
//! - IPFIX: ringcap sends RFC 5103 biflows, the reverse counters as
//!   packetDeltaCount/octetDeltaCount with PEN 29305. nfacctd does not read
//!   reverse elements (it skips enterprise fields it does not know), so it
//!   counts each biflow's forward direction only: the direction of the
//!   conversation's first frame. The test asserts exactly that, and that no
//!   reverse direction shows up at all.

mod common;
mod flowkit;

use common::TempDir;
use flowkit::pmacct::Nfacctd;
use flowkit::*;
use ringcap_testkit::skip;

#[test]
fn ipfix_and_netflow9_into_nfacctd_count_what_the_file_holds() {
    if !have("nfacctd") {
        skip("nfacctd is not installed (Debian: apt-get install pmacct)");
        return;
    }
    let dir = TempDir::new("flows-nfacctd");
    let pcap = dir.join("mixed.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &traffic()).unwrap();
    let all = file_sums(&pcap);
    let (file_vlans, initiators) = file_vlans_and_initiators(&pcap);
    assert!(all.len() > 300, "many flows: {}", all.len());
    assert!(
        file_vlans.values().any(|v| *v != 0),
        "the file has VLAN-tagged flows"
    );
    // A biflow's forward direction: the first frame's. ICMP is a flow per
    // type and code: an echo's requests and its replies are two flows, each
    // forward.
    let forward: Sums = all
        .iter()
        .filter(|(k, _)| initiators.contains(k) || k.4 == 1 || k.4 == 58)
        .map(|(k, v)| (*k, *v))
        .collect();
    assert!(
        forward.len() < all.len() && forward.len() > all.len() / 2,
        "replies in the file: {} of {}",
        forward.len(),
        all.len()
    );
    for (scheme, want) in [("ipfix", &forward), ("netflow9", &all)] {
        let c = Nfacctd::start(&dir.join(scheme));
        let url = format!("{scheme}://127.0.0.1:{}", c.port);
        let run = common::ringcap(&["capture", "-r", pcap.to_str().unwrap(), "--flows", &url]);
        run.assert_ok(scheme);
        assert!(run.stderr.contains("0 export errors"), "{}", run.stderr);
        let (got, vlans) = c.read();
        assert!(
            &got == want,
            "{scheme}: nfacctd's flows differ from the file:\n{}",
            diff(want, &got)
        );
        for (k, v) in &vlans {
            assert_eq!(Some(v), file_vlans.get(k), "{scheme}: VLAN of {k:?}");
        }
    }
}
