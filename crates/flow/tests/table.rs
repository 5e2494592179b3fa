//! The flow table's rules, each on packets built by the testkit and read by
//! the flow stage's own parser: timeouts, FIN/RST, biflows, a full table,
//! and agreement with a plain model (a HashMap summing per 5-tuple) on
//! random traffic.

use ringcap_flow::{parse, EndReason, FlowRecord, FlowTable, PacketInfo, TableConfig};
use ringcap_testkit::frames::{self, Endpoints};
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

const S: u64 = 1_000_000_000;

fn ep() -> Endpoints {
    Endpoints::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .with_ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2))
        .with_ipv6(
            "2001:db8::1".parse::<Ipv6Addr>().unwrap(),
            "2001:db8::2".parse::<Ipv6Addr>().unwrap(),
        )
}

fn back(ep: &Endpoints) -> Endpoints {
    Endpoints::new(ep.dst_mac, ep.src_mac)
        .with_ipv4(ep.dst_ip, ep.src_ip)
        .with_ipv6(ep.dst_ip6, ep.src_ip6)
}

fn info(frame: &[u8]) -> PacketInfo {
    parse(1, frame, None, frame.len() as u32).expect("an IP frame")
}

fn table(active: u64, idle: u64, max: u32) -> FlowTable {
    FlowTable::new(
        TableConfig {
            active_ns: active,
            idle_ns: idle,
            max_flows: max,
        },
        7,
    )
}

/// A TCP segment with `flags` (the testkit's SYN segment, flags rewritten).
fn tcp(ep: &Endpoints, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut f = frames::tcp4_with_options(ep, 1, sport, dport, 10);
    // Ethernet 14 + IPv4 20: TCP flags at byte 13 of the TCP header.
    f[14 + 20 + 13] = flags;
    f
}

/// Flows that time out while the exporter's queue has no room stay in the
/// table, timed out, and go when a later call finds room: none is lost.
#[test]
fn flows_wait_in_the_table_while_the_queue_is_full() {
    let e = ep();
    let mut t = table(3600 * S, 10 * S, 16);
    let mut out = Vec::new();
    for port in 0..5u16 {
        let p = info(&frames::udp4(&e, 1, 1000 + port, 53, 40));
        t.add(&p, 100 * S, &mut |r| out.push(r));
    }
    // Room for two records.
    let mut room = 2;
    t.expire_with_room(
        200 * S,
        &mut || {
            room -= 1;
            room >= 0
        },
        &mut |r| out.push(r),
    );
    assert_eq!((out.len(), t.len()), (2, 3));
    // No room at all: nothing moves, even later.
    t.expire_with_room(300 * S, &mut || false, &mut |r| out.push(r));
    assert_eq!((out.len(), t.len()), (2, 3));
    // Room again: the rest go, still as idle timeouts.
    t.expire(300 * S, &mut |r| out.push(r));
    assert_eq!((out.len(), t.len()), (5, 0));
    assert!(out.iter().all(|r| r.reason == EndReason::IdleTimeout));
    let mut ports: Vec<u16> = out.iter().map(|r| r.key.sport.max(r.key.dport)).collect();
    ports.sort_unstable();
    assert_eq!(ports, vec![1000, 1001, 1002, 1003, 1004]);
}

#[test]
fn idle_timeout_ends_a_flow_and_the_next_packet_starts_one() {
    let e = ep();
    let mut t = table(3600 * S, 10 * S, 16);
    let mut out = Vec::new();
    let p = info(&frames::udp4(&e, 1, 1000, 53, 40));
    t.add(&p, 100 * S, &mut |r| out.push(r));
    t.add(&p, 105 * S, &mut |r| out.push(r));
    t.expire(114 * S, &mut |r| out.push(r));
    assert!(out.is_empty(), "9 s idle is not 10");
    t.expire(115 * S, &mut |r| out.push(r));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].reason, EndReason::IdleTimeout);
    assert_eq!(out[0].fwd.packets, 2);
    assert_eq!((out[0].start_ns, out[0].end_ns), (100 * S, 105 * S));
    assert!(t.is_empty());
    t.add(&p, 200 * S, &mut |r| out.push(r));
    assert_eq!(t.len(), 1);
}

#[test]
fn active_timeout_cuts_a_long_flow() {
    let e = ep();
    let mut t = table(60 * S, 10 * S, 16);
    let mut out = Vec::new();
    let p = info(&frames::udp4(&e, 1, 1000, 53, 40));
    // One packet every 5 s for 150 s: never idle, cut at 60 s of age.
    for i in 0..30 {
        t.add(&p, 1000 * S + i * 5 * S, &mut |r| out.push(r));
    }
    t.flush(&mut |r| out.push(r));
    let reasons: Vec<_> = out.iter().map(|r| r.reason).collect();
    assert_eq!(
        reasons,
        [
            EndReason::ActiveTimeout,
            EndReason::ActiveTimeout,
            EndReason::ForcedEnd
        ]
    );
    // 0..55 s (12 packets), 60..115 s (12), 120..145 s (6).
    let counts: Vec<_> = out.iter().map(|r| r.fwd.packets).collect();
    assert_eq!(counts, [12, 12, 6]);
    assert_eq!(
        out.iter().map(|r| r.fwd.octets).sum::<u64>(),
        30 * u64::from(p.octets)
    );
}

#[test]
fn rst_ends_at_once_and_fin_needs_both_directions() {
    let e = ep();
    let b = back(&e);
    let mut t = table(3600 * S, 60 * S, 16);
    let mut out = Vec::new();
    let syn = info(&tcp(&e, 40000, 80, 0x02));
    let synack = info(&tcp(&b, 80, 40000, 0x12));
    let fin = info(&tcp(&e, 40000, 80, 0x11));
    let finback = info(&tcp(&b, 80, 40000, 0x11));
    t.add(&syn, S, &mut |r| out.push(r));
    t.add(&synack, 2 * S, &mut |r| out.push(r));
    t.add(&fin, 3 * S, &mut |r| out.push(r));
    assert!(out.is_empty(), "one FIN leaves the flow open");
    t.add(&finback, 4 * S, &mut |r| out.push(r));
    assert_eq!(out.len(), 1);
    let r = out[0];
    assert_eq!(r.reason, EndReason::EndOfFlow);
    assert_eq!((r.fwd.packets, r.rev.packets), (2, 2));
    assert_eq!((r.fwd.tcp_flags, r.rev.tcp_flags), (0x13, 0x13));
    assert_eq!((r.key.sport, r.key.dport), (40000, 80));
    assert!(t.is_empty());
    // RST from either side ends a flow with its first packet.
    let rst = info(&tcp(&b, 80, 40001, 0x04));
    t.add(&info(&tcp(&e, 40001, 80, 0x02)), 5 * S, &mut |r| {
        out.push(r)
    });
    t.add(&rst, 6 * S, &mut |r| out.push(r));
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].reason, EndReason::EndOfFlow);
    assert_eq!((out[1].fwd.packets, out[1].rev.packets), (1, 1));
    assert_eq!(out[1].rev.tcp_flags, 0x04);
}

#[test]
fn both_directions_make_one_biflow() {
    let e = ep();
    let b = back(&e);
    let mut t = table(3600 * S, 60 * S, 16);
    let mut out = Vec::new();
    let q = info(&frames::udp6(&e, 1, 5353, 53, 30));
    let a = info(&frames::udp6(&b, 2, 53, 5353, 300));
    for i in 0..3 {
        t.add(&q, S + i, &mut |r| out.push(r));
    }
    t.add(&a, 2 * S, &mut |r| out.push(r));
    assert_eq!(t.len(), 1);
    t.flush(&mut |r| out.push(r));
    let r = out[0];
    assert!(r.key.v6);
    assert_eq!(
        (r.key.sport, r.key.dport),
        (5353, 53),
        "forward is the first packet's way"
    );
    assert_eq!((r.fwd.packets, r.rev.packets), (3, 1));
    assert_eq!(r.fwd.octets, 3 * (40 + 8 + 30));
    assert_eq!(r.rev.octets, 40 + 8 + 300);
    // Another port is another flow.
    let other = info(&frames::udp6(&e, 3, 5354, 53, 30));
    t.add(&q, 3 * S, &mut |r| out.push(r));
    t.add(&other, 3 * S, &mut |r| out.push(r));
    assert_eq!(t.len(), 2);
}

#[test]
fn a_full_table_exports_the_oldest_early_and_counts_it() {
    let e = ep();
    let mut t = table(3600 * S, 600 * S, 4);
    let mut out: Vec<FlowRecord> = Vec::new();
    for port in 0..4u16 {
        t.add(
            &info(&frames::udp4(&e, 1, 1000 + port, 53, 10)),
            S + u64::from(port),
            &mut |r| out.push(r),
        );
    }
    // Flow 1000 is touched again: 1001 is now the one idle longest.
    t.add(
        &info(&frames::udp4(&e, 1, 1000, 53, 10)),
        10 * S,
        &mut |r| out.push(r),
    );
    assert!(out.is_empty());
    t.add(
        &info(&frames::udp4(&e, 1, 2000, 53, 10)),
        11 * S,
        &mut |r| out.push(r),
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].reason, EndReason::LackOfResources);
    assert_eq!(out[0].key.sport, 1001);
    assert_eq!(t.counts().evicted, 1);
    assert_eq!(t.len(), 4);
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn random_traffic_sums_like_a_plain_map_whatever_the_table_does() {
    // Many flows through a small table (evictions, timeouts, deletions with
    // backward shifts): per 5-tuple and direction, packets and octets of
    // the records equal a HashMap's sums.
    let e = ep();
    let b = back(&e);
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut t = table(40 * S, 5 * S, 64);
    let mut out = Vec::new();
    let mut want: HashMap<(u16, u16), (u64, u64)> = HashMap::new();
    let mut ts = 1000 * S;
    for i in 0..20_000u32 {
        ts += rng.next() % (S / 20);
        let port = 1000 + (rng.next() % 300) as u16;
        let len = (rng.next() % 200) as usize;
        let f = if rng.next().is_multiple_of(3) {
            frames::udp4(&b, i, 53, port, len)
        } else {
            frames::udp4(&e, i, port, 53, len)
        };
        let p = info(&f);
        let w = want.entry((p.key.sport, p.key.dport)).or_default();
        w.0 += 1;
        w.1 += u64::from(p.octets);
        t.add(&p, ts, &mut |r| out.push(r));
    }
    t.flush(&mut |r| out.push(r));
    assert!(t.counts().evicted > 0, "the test must fill the table");
    // A conversation is split into several records only for a reason: the
    // next packet came after the idle timeout, or after the active one, or
    // the table was full. (A flow lost to a probe run broken by a deletion
    // would be split with none.)
    let mut recs: HashMap<(u16, u16), Vec<&FlowRecord>> = HashMap::new();
    for r in &out {
        let k = (r.key.sport.min(r.key.dport), r.key.sport.max(r.key.dport));
        recs.entry(k).or_default().push(r);
    }
    for (k, mut v) in recs {
        v.sort_by_key(|r| r.start_ns);
        for w in v.windows(2) {
            let (a, b) = (w[0], w[1]);
            let ok = match a.reason {
                EndReason::IdleTimeout => b.start_ns - a.end_ns >= 5 * S,
                EndReason::ActiveTimeout => b.start_ns - a.start_ns >= 40 * S,
                EndReason::LackOfResources => true,
                _ => false,
            };
            assert!(ok, "{k:?}: split without a reason: {a:?} then {b:?}");
        }
    }
    let mut got: HashMap<(u16, u16), (u64, u64)> = HashMap::new();
    for r in &out {
        for h in [Some(r.forward_half()), r.reverse_half()]
            .into_iter()
            .flatten()
        {
            let g = got.entry((h.key.sport, h.key.dport)).or_default();
            g.0 += h.fwd.packets;
            g.1 += h.fwd.octets;
        }
    }
    assert_eq!(got, want);
}

#[test]
fn vlan_ipv6_icmp_and_not_ip_are_read() {
    let e = ep();
    let v = info(&frames::vlan_udp4(&e, 1, 42, 1000, 53, 20));
    assert_eq!(v.key.vlan, 42);
    // The kernel's stripped tag names the VLAN on live captures.
    let plain = frames::udp4(&e, 1, 1000, 53, 20);
    let tagged = parse(1, &plain, Some([0x81, 0, 0x20, 0x07]), 0).unwrap();
    assert_eq!(tagged.key.vlan, 7);
    let i = info(&frames::icmp4_echo(&e, 1, 9, 16));
    assert_eq!(
        (i.key.proto, i.icmp, i.key.sport, i.key.dport),
        (1, 0x0800, 0, 0)
    );
    let i6 = info(&frames::icmp6_echo(&e, 1, 9, 16));
    assert_eq!((i6.key.proto, i6.icmp >> 8), (58, 128));
    let ext = info(&frames::ipv6_ext_tcp(&e, 1, 443, 5000, 0, 10));
    assert_eq!(
        (ext.key.proto, ext.key.sport, ext.key.dport),
        (6, 443, 5000)
    );
    assert!(parse(1, &frames::arp(&e, 1, frames::ArpOp::Request), None, 60).is_none());
    // Octets are the IP length, not the captured length.
    let full = frames::udp4(&e, 1, 1000, 53, 1000);
    let cut = parse(1, &full[..64], None, full.len() as u32).unwrap();
    assert_eq!(cut.octets, info(&full).octets);
    assert_eq!((cut.key.sport, cut.key.dport), (1000, 53));
}

#[test]
fn memory_per_flow_is_bounded_and_taken_up_front() {
    // Entries and index for `max_flows`, whatever the traffic: ~200 bytes
    // a flow (196 before the earliest packet's time was kept apart from the
    // first packet's, which orders the active-timeout list).
    let t = table(S, S, 100_000);
    let per = t.memory_bytes() / 100_000;
    println!("flow table: {per} bytes per flow");
    assert!((100..=208).contains(&per), "{per} bytes per flow");
}

#[test]
fn a_flushed_table_starts_again_whole() {
    // The flush clears the index in one sweep rather than flow by flow: the
    // table must be as new afterwards (every slot usable, no flow found
    // twice, the full table evicting again).
    let e = ep();
    let mut t = table(3600 * S, 3600 * S, 8);
    let mut out = Vec::new();
    for round in 0..3u64 {
        for port in 0..10u16 {
            let p = info(&frames::udp4(&e, 1, 1000 + port, 53, 40));
            t.add(&p, (round * 100 + u64::from(port)) * S, &mut |r| {
                out.push(r)
            });
        }
        // 10 flows into 8 places: the 2 oldest went early.
        assert_eq!(out.len(), 2, "round {round}");
        assert_eq!(t.len(), 8);
        t.flush(&mut |r| out.push(r));
        assert!(t.is_empty());
        let mut ports: Vec<u16> = out.iter().map(|r| r.key.sport).collect();
        ports.sort();
        assert_eq!(ports, (1000..1010).collect::<Vec<_>>(), "round {round}");
        assert!(out[2..].iter().all(|r| r.reason == EndReason::ForcedEnd));
        out.clear();
        assert_eq!(t.next_deadline_ns(), None);
    }
    // After a flush, packets find their flows again (one flow, 2 packets).
    let p = info(&frames::udp4(&e, 1, 1000, 53, 40));
    t.add(&p, 1000 * S, &mut |r| out.push(r));
    t.add(&p, 1001 * S, &mut |r| out.push(r));
    assert_eq!(t.len(), 1);
    t.flush(&mut |r| out.push(r));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].fwd.packets, 2);
}

/// ICMP: a flow per type and code, as softflowd exports them and nfdump
/// shows them. Echo requests one way, their replies and a port unreachable
/// the other are three flows (the replies and the unreachable were counted
/// as the requests' reverse, under the request's type).
#[test]
fn icmp_types_and_codes_are_flows_of_their_own() {
    let e = ep();
    let mut t = table(3600 * S, 60 * S, 16);
    let mut out = Vec::new();
    let req = frames::icmp4_echo(&e, 1, 7, 20);
    let mut reply = frames::icmp4_echo(&back(&e), 1, 7, 20);
    // Ethernet 14 + IPv4 20: the ICMP type; 0 is an echo reply.
    reply[14 + 20] = 0;
    let unreach = frames::icmp4_port_unreachable(&back(&e), 2, 53, 1000, 10);
    for (i, f) in [&req, &reply, &req, &reply, &unreach].iter().enumerate() {
        t.add(&info(f), 100 * S + i as u64 * S, &mut |r| out.push(r));
    }
    t.flush(&mut |r| out.push(r));
    let mut got: Vec<(u16, u64, u64)> = out
        .iter()
        .map(|r| (r.icmp, r.fwd.packets, r.rev.packets))
        .collect();
    got.sort_unstable();
    assert_eq!(got, vec![(0x0000, 2, 0), (0x0303, 1, 0), (0x0800, 2, 0)]);
    assert!(out.iter().all(|r| r.key.icmp == r.icmp && r.key.dport == 0));
}

/// Packets out of time order: the record starts at the earliest packet it
/// counts (it started at the first one read, after one of its own).
#[test]
fn a_flow_starts_at_its_earliest_packet() {
    let e = ep();
    let mut t = table(3600 * S, 60 * S, 16);
    let mut out = Vec::new();
    let p = info(&frames::udp4(&e, 1, 1000, 53, 40));
    for ts in [100 * S + S / 2, 100 * S, 101 * S] {
        t.add(&p, ts, &mut |r| out.push(r));
    }
    t.flush(&mut |r| out.push(r));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].start_ns, out[0].end_ns), (100 * S, 101 * S));
    assert_eq!(out[0].fwd.packets, 3);
}
