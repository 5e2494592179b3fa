//! The framework filter and the `exclude` rule hold whatever the client's
//! filter says (issue 24, item 1): random client filters × random frame
//! shapes (VLAN, QinQ, MPLS, GRE, VXLAN, IP-in-IP, IPv6 with extension
//! headers, ICMP errors quoting a datagram), through a subscriber exactly as
//! the hub runs it. Every delivered frame must be accepted by the framework
//! on the frame as the kernel delivered it, carry port 22 at no layer (the
//! frames' own construction says where port 22 is, independently of the
//! header walker), and match the client's program on the view it asked for;
//! and every frame that meets all three must be delivered.
//!
//! Before the fix, a client filter mentioning `vlan` moved the combined
//! program — framework included — onto the re-tagged frame, where the
//! offline `not port 22` passes tagged port-22 traffic: this test fails
//! there.

use super::group::{Group, GroupWork, Subscriber};
use crate::source::Packet;
use crate::stages::Stages;
use ringcap_format::record::{write_ring_record, Record, HEADER_LEN};
use ringcap_sink::PacketSink;
use ringcap_stages::filter::{mentions_vlan, Target};
use ringcap_stages::{compile, Exclude, Sampling, SessionFilter, Snap, UserSampler};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

type Kept = Arc<Mutex<Vec<Vec<u8>>>>;

/// Keeps each record's packet bytes.
struct Keeper(Kept);

impl PacketSink for Keeper {
    fn push(&mut self, rec: Record<'_>) -> Option<&mut [u8]> {
        let mut r = vec![0; HEADER_LEN + rec.caplen];
        write_ring_record(&mut r, &rec);
        self.0.lock().unwrap().push(r[HEADER_LEN..].to_vec());
        None
    }
    fn push_records(&mut self, _records: &[u8], _packets: u32) -> bool {
        false
    }
    fn flush(&mut self) {}
    fn oldest(&self) -> Option<Instant> {
        None
    }
    fn close(&mut self) {}
    fn dropped(&self) -> u64 {
        0
    }
    fn set_interface_id(&mut self, _id: u32) {}
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A frame under construction: its bytes and whether port 22 is in any of
/// its transport headers.
struct Built {
    bytes: Vec<u8>,
    port22: bool,
}

fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
    let len = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&[0, 1, 0, 0, 64, proto, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
    h.extend_from_slice(payload);
    h
}

fn ipv6(next: u8, payload: &[u8], hop_by_hop: bool) -> Vec<u8> {
    let mut body = Vec::new();
    let first = if hop_by_hop {
        body.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
        0
    } else {
        next
    };
    body.extend_from_slice(payload);
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(body.len() as u16).to_be_bytes());
    h.extend_from_slice(&[first, 64]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    h.extend_from_slice(&[0; 11]);
    h.push(1);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    h.extend_from_slice(&[0; 11]);
    h.push(2);
    h.extend_from_slice(&body);
    h
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = sport.to_be_bytes().to_vec();
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(payload);
    h
}

fn tcp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = sport.to_be_bytes().to_vec();
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    h.extend_from_slice(payload);
    h
}

fn port(rng: &mut Rng) -> u16 {
    [22, 53, 80, 443, 2222, 1022][rng.below(6) as usize]
}

/// An IP packet (IPv4 or IPv6 by the caller's choice of wrapper) carrying
/// a transport header, possibly nested in a tunnel: returns (IP protocol /
/// EtherType of the outer IP, bytes).
fn ip_packet(rng: &mut Rng, seq: u32, depth: u32, port22: &mut bool) -> (u16, Vec<u8>) {
    let payload = seq.to_be_bytes();
    let tunnel = if depth < 2 { rng.below(8) } else { 0 };
    let (proto, inner): (u8, Vec<u8>) = match tunnel {
        // IP-in-IP.
        5 => {
            let (et, p) = ip_packet(rng, seq, depth + 1, port22);
            (if et == 0x0800 { 4 } else { 41 }, p)
        }
        // GRE carrying IP or Ethernet.
        6 => {
            let (et, p) = if rng.below(2) == 0 {
                ip_packet(rng, seq, depth + 1, port22)
            } else {
                let (et, p) = ip_packet(rng, seq, depth + 1, port22);
                (0x6558, eth(et, &p))
            };
            let mut g = vec![0, 0];
            g.extend_from_slice(&et.to_be_bytes());
            g.extend_from_slice(&p);
            (47, g)
        }
        // VXLAN (UDP to 4789) carrying Ethernet.
        7 => {
            let (et, p) = ip_packet(rng, seq, depth + 1, port22);
            let mut v = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
            v.extend_from_slice(&eth(et, &p));
            (17, udp(40000, 4789, &v))
        }
        // An ICMP error quoting a datagram.
        4 => {
            let (sp, dp) = (port(rng), port(rng));
            *port22 |= sp == 22 || dp == 22;
            let quoted = ipv4(17, &udp(sp, dp, &payload));
            let mut m = vec![3, 3, 0, 0, 0, 0, 0, 0];
            m.extend_from_slice(&quoted);
            (1, m)
        }
        n => {
            let (sp, dp) = (port(rng), port(rng));
            *port22 |= sp == 22 || dp == 22;
            if n % 2 == 0 {
                (6, tcp(sp, dp, &payload))
            } else {
                (17, udp(sp, dp, &payload))
            }
        }
    };
    if rng.below(3) == 0 && proto != 1 {
        (0x86dd, ipv6(proto, &inner, rng.below(2) == 0))
    } else {
        (0x0800, ipv4(proto, &inner))
    }
}

fn frame(rng: &mut Rng, seq: u32) -> Built {
    let mut port22 = false;
    let (et, ip) = ip_packet(rng, seq, 0, &mut port22);
    let bytes = match rng.below(5) {
        // VLAN.
        0 => {
            let mut p = vec![0, 100];
            p.extend_from_slice(&et.to_be_bytes());
            p.extend_from_slice(&ip);
            eth(0x8100, &p)
        }
        // QinQ.
        1 => {
            let mut p = vec![0, 200, 0x81, 0x00, 0, 100];
            p.extend_from_slice(&et.to_be_bytes());
            p.extend_from_slice(&ip);
            eth(0x88a8, &p)
        }
        // MPLS (IPv4 or IPv6 under one label).
        2 => {
            let mut p = vec![0, 1, 0x01, 64];
            p.extend_from_slice(&ip);
            eth(0x8847, &p)
        }
        _ => eth(et, &ip),
    };
    Built { bytes, port22 }
}

/// The frame as the kernel hands it over: the outer tag taken out.
fn kernel_view(f: &[u8]) -> (Vec<u8>, Option<[u8; 4]>) {
    let et = u16::from_be_bytes([f[12], f[13]]);
    if et == 0x8100 || et == 0x88a8 {
        let mut k = f[..12].to_vec();
        k.extend_from_slice(&f[16..]);
        (k, Some(f[12..16].try_into().unwrap()))
    } else {
        (f.to_vec(), None)
    }
}

const CLIENTS: &[&str] = &[
    "",
    "vlan",
    "vlan and port 22",
    "vlan and (port 22 or port 53)",
    "vlan 100 and tcp port 22",
    "vlan and vlan",
    "mpls and port 22",
    "port 22",
    "not port 53",
    "udp",
    "tcp",
    "ip6",
    "ip proto 4 or ip proto 47",
    "udp port 4789",
    "icmp",
    "vlan or mpls",
];

fn program(expr: &str, linktype: i32) -> ringcap_stages::Program {
    compile(expr, linktype, 262_144, Target::Offline).expect("compiles")
}

#[test]
fn framework_and_exclude_hold_for_every_client_filter_and_frame_shape() {
    let framework_text = "not port 22";
    let framework = program(framework_text, 1);
    let exclude = Exclude::new(program("port 22", 1), program("port 22", 101)).expect("valid");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut delivered_total = 0;
    let mut checked_port22 = 0;
    for round in 0..64 {
        let client_text = CLIENTS[round % CLIENTS.len()];
        let client_tagged = mentions_vlan(client_text);
        let client = program(client_text, 1);
        let filter = SessionFilter::new(
            framework.clone(),
            false,
            client.clone(),
            client_tagged,
            (round % 2 == 0).then(|| exclude.clone()),
            false,
        )
        .expect("filter");
        let kept = Kept::default();
        let stages = Stages::new(
            UserSampler::offline(Sampling::All, 1),
            Snap::Bytes(262_144),
            65_535,
            Vec::new(),
            vec![1],
        );
        let mut sub = Subscriber::new(filter, stages, Box::new(Keeper(kept.clone())));
        let frames: Vec<Built> = (0..256).map(|i| frame(&mut rng, i)).collect();
        let views: Vec<(Vec<u8>, Option<[u8; 4]>)> =
            frames.iter().map(|f| kernel_view(&f.bytes)).collect();
        let packets: Vec<Packet> = views
            .iter()
            .map(|(k, tag)| Packet {
                ts_ns: 1,
                wire_len: k.len() as u32,
                data: k,
                vlan: *tag,
                interface: 0,
                ahead: &[],
            })
            .collect();
        let mut work = GroupWork::new();
        for chunk in packets.chunks(64) {
            work.next_group();
            sub.take(&Group::new(chunk), &mut work);
        }
        let got: HashSet<Vec<u8>> = kept.lock().unwrap().iter().cloned().collect();
        let with_exclude = round % 2 == 0;
        for (f, (k, _)) in frames.iter().zip(&views) {
            let fw = framework.run(k, k.len() as u32) != 0;
            let view: &[u8] = if client_tagged { &f.bytes } else { k };
            let cl = client.run(view, view.len() as u32) != 0;
            let want = fw && cl && !(with_exclude && f.port22);
            let was = got.contains(&f.bytes);
            assert_eq!(
                was, want,
                "client {client_text:?}, exclude {with_exclude}: frame {:02x?} (port 22 at some layer: {}, framework on the kernel's view: {fw}, client: {cl})",
                f.bytes, f.port22
            );
            if was {
                assert!(fw, "the framework was widened");
                delivered_total += 1;
            }
            checked_port22 += usize::from(f.port22);
        }
    }
    assert!(delivered_total > 1000, "only {delivered_total} delivered");
    assert!(
        checked_port22 > 1000,
        "only {checked_port22} port-22 frames"
    );
}
