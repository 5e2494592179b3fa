//! The rewrite judged by an oracle that shares none of its code: tshark's
//! dissection (every field's position, every checksum verified) and PyPI's
//! yacryptopan (the mapping), run by `tests/oracle/privacy_oracle.py` over
//! every frame shape the capture tests send (VLAN, QinQ, GRE, VXLAN, IPv6
//! extension headers, fragments, ARP, SCTP, broken headers) and ICMP and
//! ICMPv6 errors quoting a datagram.

mod gen;

use ringcap_privacy::fields::FieldSet;
use ringcap_privacy::{Key, Privacy};
use ringcap_testkit::frames::{self, Endpoints, Shape};
use ringcap_testkit::netns::write_pcap;
use ringcap_testkit::oracle::PrivacyOracle;
use ringcap_testkit::{skip, TempDir};
use std::os::unix::fs::PermissionsExt;

/// Every shape three times over five flows, and ICMP errors; without
/// VXLAN when `vxlan` is false.
fn sample_frames(vxlan: bool) -> Vec<Vec<u8>> {
    let ep = Endpoints::new([0x02, 0x52, 0, 0, 0, 1], [0x02, 0x52, 0, 0, 0, 2])
        .with_ipv4([198, 18, 5, 2].into(), [198, 19, 200, 77].into());
    let mut out = Vec::new();
    for seq in 0..(Shape::ALL.len() as u32 * 3) {
        let shape = frames::mixed_shape(seq);
        if vxlan || shape != Shape::Vxlan {
            out.push(frames::build(shape, &ep, seq, seq % 5));
        }
    }
    for seq in 0..6u32 {
        out.push(frames::icmp4_port_unreachable(
            &ep,
            1000 + seq,
            5353,
            40000 + seq as u16,
            40,
        ));
        out.push(frames::icmp6_port_unreachable(
            &ep,
            2000 + seq,
            5353,
            40000 + seq as u16,
            40,
        ));
    }
    // Addresses outside the IP header: a redirect's gateway, neighbor
    // discovery targets and link-layer address options.
    for k in 0..3u8 {
        out.push(gen::redirect([198, 18, 0, 1], [198, 18, k, 254]));
        out.push(gen::nd(
            135,
            gen::v6(1),
            gen::v6(10 + k),
            [2, 0x52, 0, 0, 1, k],
        ));
        out.push(gen::nd(
            136,
            gen::v6(10 + k),
            gen::v6(10 + k),
            [2, 0x52, 0, 0, 1, k],
        ));
    }
    out
}

fn run_oracle(tag: &str, mask: &str, anonymize: &str, min_changed: usize) {
    let oracle = match PrivacyOracle::find() {
        Ok(o) => o,
        Err(reason) => return skip(reason),
    };
    let dir = TempDir::new(tag);
    let key = Key::generate().unwrap();
    let key_path = dir.join("key");
    std::fs::write(&key_path, key.to_file_text()).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();

    // tshark finds VXLAN by its UDP port: with the port masked it could not
    // check the inner frame.
    let frames = sample_frames(!mask.contains("udp.port"));
    let p = Privacy::new(
        FieldSet::parse(mask).unwrap(),
        (!anonymize.is_empty()).then(|| (key.clone(), FieldSet::parse(anonymize).unwrap())),
    )
    .unwrap();
    let mut t = p.transform();
    let rewritten: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            let mut f = f.clone();
            t.rewrite_ethernet(&mut f);
            f
        })
        .collect();
    let changed = frames
        .iter()
        .zip(&rewritten)
        .filter(|(a, b)| a != b)
        .count();
    assert!(
        changed >= min_changed,
        "only {changed} of {} frames changed",
        frames.len()
    );
    write_pcap(&dir.join("orig.pcap"), &frames).unwrap();
    write_pcap(&dir.join("new.pcap"), &rewritten).unwrap();
    let summary = oracle.judge(
        &dir.join("orig.pcap"),
        &dir.join("new.pcap"),
        &key_path,
        anonymize,
        mask,
    );
    println!("{tag}: {summary}");
    assert!(
        summary["addresses_checked"].as_u64().unwrap() > 100,
        "{summary}"
    );
    assert!(
        summary["checksums_good_before"].as_u64().unwrap() > 100,
        "{summary}"
    );
    if !mask.is_empty() {
        assert!(
            summary["masked_checked"].as_u64().unwrap() > 50,
            "{summary}"
        );
    }
}

#[test]
fn anonymized_addresses_everywhere_checksums_good() {
    run_oracle("privacy-anon", "", "ip.addr", 75);
}

#[test]
fn masks_and_anonymization_together() {
    run_oracle(
        "privacy-mask",
        // Not udp.port: tshark finds VXLAN by its port, so it could not
        // check the inner frame once the port is zero (udp.port is checked
        // on its own below).
        "ip.ttl,ip.id,ip.tos,ipv6.flow,tcp.port,tcp.seq,tcp.window,tcp.options,icmp.echo",
        "ip.addr",
        75,
    );
}

#[test]
fn masked_addresses() {
    run_oracle("privacy-zero", "ip.addr,eth.addr", "", 81);
}

#[test]
fn masked_udp_ports() {
    run_oracle("privacy-udp", "udp.port", "", 40);
}
