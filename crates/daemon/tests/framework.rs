//! Issue 24, item 1, against a real ringcapd: no client filter widens the
//! framework filter, and `exclude` holds at every layer. The grant says
//! `capture_filter = "not port 22"` and `exclude = "port 22"`; clients run
//! as `nobody` with filters aimed at the gaps the hostile review found
//! (`vlan and port 22`, plain `vlan`, `mpls and port 22`, tunnels), while
//! the peer sends port-22 traffic tagged, double-tagged, under MPLS and in
//! GRE, next to port-53 traffic of the same shapes. No client receives a
//! port-22 packet; each receives the port-53 packets its filter asks for.
//!
//! Before the fix, `vlan and port 22` received the tagged port-22 frames
//! (the framework ran with the client's program on the re-tagged frame) and
//! every client received the MPLS and GRE ones (`not port 22` does not look
//! inside them, and there was no `exclude`).

mod common;

use common::*;
use ringcap_testkit::{frames, Testbed};
use std::collections::BTreeSet;

/// MPLS (one label, bottom of stack) carrying the IPv4 packet of `frame`.
fn mpls(frame: &[u8]) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&[0x88, 0x47, 0x00, 0x01, 0x01, 0x40]);
    f.extend_from_slice(&frame[14..]);
    f
}

#[test]
fn no_client_filter_widens_the_framework_and_exclude_holds_at_every_layer() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let grant = format!(
        "\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\ncapture_filter = \"not port 22\"\nexclude = \"port 22\"\n",
        tb.capture_if
    );
    let d = Daemon::start(&tb, &grant);
    let out = open_dir("framework-holds");
    let ep = tb.endpoints();

    // (seq, frame, port 22 somewhere in it, shape)
    let mut sent: Vec<(u32, Vec<u8>, bool, &str)> = Vec::new();
    for i in 0..20u32 {
        let s = i * 10;
        sent.push((
            s,
            frames::vlan_udp4(&ep, s, 100, 40000, 22, 64),
            true,
            "vlan",
        ));
        sent.push((
            s + 1,
            frames::vlan_udp4(&ep, s + 1, 100, 40000, 53, 64),
            false,
            "vlan",
        ));
        sent.push((
            s + 2,
            mpls(&frames::udp4(&ep, s + 2, 40000, 22, 64)),
            true,
            "mpls",
        ));
        sent.push((
            s + 3,
            mpls(&frames::udp4(&ep, s + 3, 40000, 53, 64)),
            false,
            "mpls",
        ));
        sent.push((
            s + 4,
            frames::gre_udp4(&ep, s + 4, 7, 40000, 22, 64),
            true,
            "gre",
        ));
        sent.push((
            s + 5,
            frames::gre_udp4(&ep, s + 5, 7, 40000, 53, 64),
            false,
            "gre",
        ));
        sent.push((
            s + 6,
            frames::qinq_udp4(&ep, s + 6, 200, 100, 40000, 22, 64),
            true,
            "qinq",
        ));
        sent.push((
            s + 7,
            frames::udp4(&ep, s + 7, 40000, 22, 64),
            true,
            "plain",
        ));
        sent.push((
            s + 8,
            frames::udp4(&ep, s + 8, 40000, 53, 64),
            false,
            "plain",
        ));
    }

    // (client filter, shapes of port-53 traffic it must receive)
    let clients: &[(&str, &[&str])] = &[
        ("vlan and port 22", &[]),
        ("vlan", &["vlan"]),
        ("mpls and port 22", &[]),
        ("mpls", &["mpls"]),
        ("ip proto 47", &["gre"]),
        ("", &["vlan", "mpls", "gre", "plain"]),
    ];
    let running: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, (f, _))| {
            let mut args = vec!["-s", "256"];
            if !f.is_empty() {
                args.push(f);
            }
            start_client(&tb, &d, NOBODY, &out, &format!("c{i}"), &args)
        })
        .collect();
    let wire: Vec<Vec<u8>> = sent.iter().map(|(_, f, _, _)| f.clone()).collect();
    tb.send_from_peer(&wire, 5_000).expect("send");
    for ((filter, wants), c) in clients.iter().zip(running) {
        let f = c.stop();
        f.assert_ok(filter);
        let got: BTreeSet<u32> = seqs(&f.packets()).into_iter().flatten().collect();
        for (seq, _, port22, shape) in &sent {
            if *port22 {
                assert!(
                    !got.contains(seq),
                    "client {filter:?} received port-22 frame {seq} ({shape})"
                );
            } else if wants.contains(shape) {
                assert!(
                    got.contains(seq),
                    "client {filter:?} did not receive port-53 frame {seq} ({shape}); got {got:?}"
                );
            }
        }
    }
    assert_no_panic(&d.stop(), "ringcapd");
}

/// `exclude` holds for a whole datagram, its later fragments too: they
/// carry no ports to judge (those are in the first fragment, which may come
/// later or never), so under an `exclude` rule they are never delivered.
/// (Hostile review qa-d26 #5: with `exclude = "udp port 5353"` the first
/// fragment was dropped and the rest, with the datagram's payload, came
/// through, IPv4 and IPv6.) Unfragmented traffic and first fragments of
/// datagrams the rule does not name still arrive.
#[test]
fn exclude_holds_for_the_later_fragments_of_a_datagram() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let grant = format!(
        "\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\nexclude = \"udp port 5353\"\n",
        tb.capture_if
    );
    let d = Daemon::start(&tb, &grant);
    let out = open_dir("framework-fragments");
    let ep = tb.endpoints();
    // (seq, frame, delivered)
    let mut sent: Vec<(u32, Vec<u8>, bool)> = Vec::new();
    for i in 0..10u32 {
        let s = i * 10;
        let id = 100 + i as u16;
        sent.push((
            s,
            frames::ipv4_fragment_first(&ep, s, 40000, 5353, id),
            false,
        ));
        sent.push((s + 1, frames::ipv4_fragment_later(&ep, s + 1, id), false));
        sent.push((
            s + 2,
            frames::ipv6_fragment_later(&ep, s + 2, u32::from(id)),
            false,
        ));
        sent.push((s + 3, frames::udp4(&ep, s + 3, 40000, 53, 64), true));
        sent.push((s + 4, frames::udp6(&ep, s + 4, 40000, 53, 64), true));
        sent.push((
            s + 5,
            frames::ipv4_fragment_first(&ep, s + 5, 40000, 53, id + 50),
            true,
        ));
    }
    let c = start_client(&tb, &d, NOBODY, &out, "all", &["-s", "256"]);
    let wire: Vec<Vec<u8>> = sent.iter().map(|(_, f, _)| f.clone()).collect();
    tb.send_from_peer(&wire, 5_000).expect("send");
    let f = c.stop();
    f.assert_ok("all");
    let got: BTreeSet<u32> = seqs(&f.packets()).into_iter().flatten().collect();
    for (seq, _, delivered) in &sent {
        assert_eq!(
            got.contains(seq),
            *delivered,
            "frame {seq} (kind {}): got {got:?}",
            seq % 10
        );
    }
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}
