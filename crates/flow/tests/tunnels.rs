//! Tunnels: GRE, VXLAN and IP-in-IP packets are keyed by their inner
//! 5-tuple plus the tunnel (kind, key or VNI, outer addresses). The inner
//! addresses and ports are checked against the testkit's own frame parser
//! (`frames::flow_key`, written apart from this crate), and in the table
//! both directions of an inner conversation make one biflow while the same
//! inner 5-tuple in another tunnel is another flow.

use ringcap_flow::{parse, FlowTable, PacketInfo, TableConfig};
use ringcap_testkit::frames::{self, Endpoints};
use std::net::{IpAddr, Ipv4Addr};

fn ep() -> Endpoints {
    Endpoints::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .with_ipv4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 5, 2))
}

fn info(frame: &[u8]) -> PacketInfo {
    parse(1, frame, None, frame.len() as u32).expect("an IP frame")
}

/// The frame seen from the other end: outer and inner addresses and inner
/// ports swapped (`inner_ip`: offset of the inner IPv4 header).
fn reversed(frame: &[u8], inner_ip: usize) -> Vec<u8> {
    let mut f = frame.to_vec();
    let swap = |f: &mut Vec<u8>, a: usize, b: usize, n: usize| {
        let x: Vec<u8> = f[a..a + n].to_vec();
        f.copy_within(b..b + n, a);
        f[b..b + n].copy_from_slice(&x);
    };
    swap(&mut f, 14 + 12, 14 + 16, 4);
    swap(&mut f, inner_ip + 12, inner_ip + 16, 4);
    let l4 = inner_ip + 4 * usize::from(f[inner_ip] & 0x0f);
    swap(&mut f, l4, l4 + 2, 2);
    f
}

#[test]
fn gre_and_vxlan_key_on_the_inner_five_tuple() {
    let e = ep();
    for (frame, kind, id) in [
        (
            frames::gre_udp4(&e, 1, 0xabcd, 1111, 2222, 40),
            47u8,
            0xabcdu32,
        ),
        (frames::vxlan(&e, 2, 0x12_3456, 40000, 40), 17, 0x12_3456),
    ] {
        let p = info(&frame);
        let tk = frames::flow_key(&frame).unwrap();
        let inner = tk.inner.as_ref().expect("testkit sees the inner packet");
        assert_eq!(p.key.src_addr(), inner.src.unwrap());
        assert_eq!(p.key.dst_addr(), inner.dst.unwrap());
        assert_eq!(p.key.sport, inner.src_port);
        assert_eq!(p.key.dport, inner.dst_port);
        assert_eq!(u16::from(p.key.proto), inner.proto);
        assert_eq!(p.key.tunnel.kind, kind);
        assert_eq!(p.key.tunnel.id, id);
        assert_eq!(tk.tunnel_id, id);
        assert_eq!(p.key.tunnel.src_addr(), IpAddr::from(e.src_ip));
        assert_eq!(p.key.tunnel.dst_addr(), IpAddr::from(e.dst_ip));
        // Octets: the outer packet's.
        assert_eq!(
            p.octets,
            u32::from(u16::from_be_bytes([frame[16], frame[17]]))
        );
    }
}

#[test]
fn ip_in_ip_keys_on_the_inner_packet() {
    let e = ep();
    let inner_ep = Endpoints::new([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 1, 2])
        .with_ipv4(Ipv4Addr::new(198, 19, 9, 1), Ipv4Addr::new(198, 19, 9, 2));
    let inner = frames::udp4(&inner_ep, 3, 5353, 53, 30);
    let inner_len = usize::from(u16::from_be_bytes([inner[16], inner[17]]));
    // The testkit's UDP frame with its IP packet replaced by an outer IPv4
    // header (protocol 4) and the inner IP packet.
    let mut f = frames::udp4(&e, 3, 1, 2, 0)[..14 + 20].to_vec();
    let total = (20 + inner_len) as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f[14 + 9] = 4;
    f.extend_from_slice(&inner[14..14 + inner_len]);
    let p = info(&f);
    assert_eq!(p.key.tunnel.kind, 4);
    assert_eq!(p.key.src_addr(), IpAddr::from(inner_ep.src_ip));
    assert_eq!(p.key.dst_addr(), IpAddr::from(inner_ep.dst_ip));
    assert_eq!((p.key.sport, p.key.dport, p.key.proto), (5353, 53, 17));
    assert_eq!(p.key.tunnel.src_addr(), IpAddr::from(e.src_ip));
    assert_eq!(p.octets, u32::from(total));
}

#[test]
fn udp_to_4789_without_a_vxlan_header_is_an_outer_flow() {
    let e = ep();
    let p = info(&frames::udp4(&e, 4, 1234, 4789, 64));
    assert_eq!(p.key.tunnel.kind, 0);
    assert_eq!(p.key.src_addr(), IpAddr::from(e.src_ip));
    assert_eq!(p.key.dport, 4789);
}

#[test]
fn tunnel_flows_are_biflows_apart_per_tunnel() {
    let e = ep();
    let mut t = FlowTable::new(
        TableConfig {
            active_ns: u64::MAX / 4,
            idle_ns: u64::MAX / 4,
            max_flows: 64,
        },
        3,
    );
    let g1 = frames::gre_udp4(&e, 1, 1, 1111, 2222, 40);
    let g2 = frames::gre_udp4(&e, 2, 2, 1111, 2222, 40);
    // GRE with a key: outer IPv4 (20) + GRE (8).
    let g1_back = reversed(&g1, 14 + 20 + 8);
    let back = info(&g1_back);
    assert_eq!(back.key, info(&g1).key.reversed());
    let v7 = frames::vxlan(&e, 3, 7, 40000, 40);
    let v8 = frames::vxlan(&e, 4, 8, 40000, 40);
    let mut out = Vec::new();
    for (i, f) in [&g1, &g1_back, &g1, &g2, &v7, &v8, &v7].iter().enumerate() {
        t.add(&info(f), 1_000 + i as u64, &mut |r| out.push(r));
    }
    t.flush(&mut |r| out.push(r));
    assert_eq!(out.len(), 4, "{out:#?}");
    let gre1 = out
        .iter()
        .find(|r| r.key.tunnel.kind == 47 && r.key.tunnel.id == 1)
        .unwrap();
    assert_eq!((gre1.fwd.packets, gre1.rev.packets), (2, 1));
    let vx7 = out
        .iter()
        .find(|r| r.key.tunnel.kind == 17 && r.key.tunnel.id == 7)
        .unwrap();
    assert_eq!((vx7.fwd.packets, vx7.rev.packets), (2, 0));
    // JSON says which tunnel.
    let mut line = String::new();
    ringcap_flow::json::write(&mut line, gre1, false);
    assert!(
        line.contains("\"tunnel\":\"gre\",\"tunnel_id\":1,\"outer_src\":\"198.18.0.1\""),
        "{line}"
    );
}
