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
    delivered_as_marked(&tb, d, &out, &sent);
}

/// A client of everything (as nobody, 256 bytes) while the peer sends
/// `sent`, (seq, frame, delivered): it gets exactly the frames marked
/// delivered (by their tags); then the daemon stops without a panic.
fn delivered_as_marked(
    tb: &Testbed,
    d: Daemon,
    out: &ringcap_testkit::TempDir,
    sent: &[(u32, Vec<u8>, bool)],
) {
    let c = start_client(tb, &d, NOBODY, out, "all", &["-s", "256"]);
    let wire: Vec<Vec<u8>> = sent.iter().map(|(_, f, _)| f.clone()).collect();
    tb.send_from_peer(&wire, 5_000).expect("send");
    let f = c.stop();
    f.assert_ok("all");
    let got: BTreeSet<u32> = seqs(&f.packets()).into_iter().flatten().collect();
    for (seq, _, delivered) in sent {
        assert_eq!(
            got.contains(seq),
            *delivered,
            "frame {seq} (shape {}): got {got:?}",
            seq % 10
        );
    }
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}

/// An IPv4 header (no options) before `body`, from the peer to the
/// capture end, checksum set.
fn ip4(ep: &frames::Endpoints, proto: u8, body: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&((20 + body.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 1, 0, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&ep.src_ip.octets());
    h.extend_from_slice(&ep.dst_ip.octets());
    let c = frames::internet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(body);
    h
}

/// An IPv6 header before `body` (next header `next`).
fn ip6(ep: &frames::Endpoints, next: u8, body: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(body.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&ep.src_ip6.octets());
    h.extend_from_slice(&ep.dst_ip6.octets());
    h.extend_from_slice(body);
    h
}

/// UDP 40000 -> `dport` carrying the tag of `seq` (checksum 0).
fn udp(seq: u32, dport: u16) -> Vec<u8> {
    let payload = frames::tagged_payload(seq, 32);
    let mut u = 40000u16.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(&payload);
    u
}

/// An authentication header (next header `next`, 96-bit ICV) before `body`.
fn ah(next: u8, body: &[u8]) -> Vec<u8> {
    let mut a = vec![next, 4, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 1];
    a.extend_from_slice(&[0xa5; 12]);
    a.extend_from_slice(body);
    a
}

/// An ICMP (`v6`: ICMPv6) error of type `t` quoting `quoted`.
fn icmp_error(t: u8, quoted: &[u8]) -> Vec<u8> {
    let mut m = vec![t, 0, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(quoted);
    m
}

fn eth(ep: &frames::Endpoints, ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = ep.dst_mac.to_vec();
    f.extend_from_slice(&ep.src_mac);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    frames::pad_to_min(f)
}

/// `exclude` judges what lies behind an authentication header, and the
/// datagram an ICMP error quotes as a packet of its own: its extension
/// headers, fragment header and tunnels (hostile re-review qa-d26b #3:
/// IPv4 + AH + UDP 5353, an ICMPv6 time-exceeded quoting the first fragment
/// of a UDP 5353 datagram, ICMP errors quoting AH or IP-in-IP packets of
/// one, all came through `exclude = "udp port 5353"`). The same shapes on
/// port 53 still arrive.
#[test]
fn exclude_holds_behind_ah_and_in_what_icmp_errors_quote() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let grant = format!(
        "\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\nexclude = \"udp port 5353\"\n",
        tb.capture_if
    );
    let d = Daemon::start(&tb, &grant);
    let out = open_dir("framework-quotes");
    let ep = tb.endpoints();
    // (seq, frame, delivered): each shape for port 5353 (excluded) and 53.
    let mut sent: Vec<(u32, Vec<u8>, bool)> = Vec::new();
    for i in 0..5u32 {
        for (k, port) in [(0u32, 5353u16), (1, 53)] {
            let s = i * 100 + k * 10;
            let keep = port == 53;
            // IPv4 + AH + UDP.
            sent.push((
                s,
                eth(&ep, 0x0800, &ip4(&ep, 51, &ah(17, &udp(s, port)))),
                keep,
            ));
            // ICMPv6 time exceeded quoting IPv6 + first fragment + UDP.
            let mut frag = vec![17, 0, 0, 1, 0, 0, 0, 7];
            frag.extend_from_slice(&udp(s + 1, port));
            let quote = ip6(&ep, 44, &frag);
            sent.push((
                s + 1,
                eth(&ep, 0x86dd, &ip6(&ep, 58, &icmp_error(3, &quote))),
                keep,
            ));
            // ICMPv4 unreachable quoting IPv4 + AH + UDP.
            let quote = ip4(&ep, 51, &ah(17, &udp(s + 2, port)));
            sent.push((
                s + 2,
                eth(&ep, 0x0800, &ip4(&ep, 1, &icmp_error(3, &quote))),
                keep,
            ));
            // ICMPv4 unreachable quoting IP-in-IP with UDP inside.
            let quote = ip4(&ep, 4, &ip4(&ep, 17, &udp(s + 3, port)));
            sent.push((
                s + 3,
                eth(&ep, 0x0800, &ip4(&ep, 1, &icmp_error(3, &quote))),
                keep,
            ));
            // ICMPv6 unreachable quoting IPv6 + destination options + UDP.
            let mut opts = vec![17, 0, 1, 4, 0, 0, 0, 0];
            opts.extend_from_slice(&udp(s + 4, port));
            let quote = ip6(&ep, 60, &opts);
            sent.push((
                s + 4,
                eth(&ep, 0x86dd, &ip6(&ep, 58, &icmp_error(1, &quote))),
                keep,
            ));
        }
    }
    delivered_as_marked(&tb, d, &out, &sent);
}
