//! Unit tests of the frame builders, shapes and flow keys (across the
//! parts, so apart from each of them).

use super::flow_key::be16;
use super::*;

fn ep() -> Endpoints {
    Endpoints::new([2, 0x52, 0x43, 0, 0, 2], [2, 0x52, 0x43, 0, 0, 1])
}

#[test]
fn seq_round_trip_every_shape() {
    for (i, shape) in Shape::ALL.iter().enumerate() {
        for seq in [0u32, 1, 0xdead_beef, u32::MAX, i as u32 * 7919] {
            let f = build(*shape, &ep(), seq, 3);
            assert_eq!(seq_of(&f), Some(seq), "{shape:?} seq {seq}");
            assert!(f.len() >= MIN_FRAME_LEN, "{shape:?} len {}", f.len());
        }
    }
    assert_eq!(seq_of(&[0u8; 60]), None);
    assert_eq!(seq_of(&SEQ_MARKER), None);
}

#[test]
fn udp4_lengths_and_checksums() {
    for len in [0usize, 1, 7, 8, 9, 18, 100, MAX_UDP4_PAYLOAD] {
        let f = udp4(&ep(), 42, 1234, 5678, len);
        let ip = &f[14..];
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        assert_eq!(total, 20 + 8 + len);
        assert_eq!(internet_checksum(&ip[..20]), 0, "ip checksum");
        let udp = &ip[20..total];
        assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), 8 + len);
        let c = l4_checksum(ep().src_ip.into(), ep().dst_ip.into(), proto::UDP, udp);
        assert_eq!(c, 0, "udp checksum verifies to 0");
        let expect = if len < TAG_LEN {
            MIN_FRAME_LEN.max(14 + total + TAG_LEN)
        } else {
            MIN_FRAME_LEN.max(14 + total)
        };
        assert_eq!(f.len(), expect, "len {len}");
        assert_eq!(seq_of(&f), Some(42));
    }
    assert_eq!(udp4(&ep(), 0, 1, 2, MAX_UDP4_PAYLOAD).len(), 1514);
}

#[test]
fn ipv4_header_checksums_valid_where_expected() {
    for shape in Shape::ALL {
        let f = build(shape, &ep(), 77, 1);
        let mut off = 12;
        while matches!(be16(&f, off), Some(ethertype::VLAN | ethertype::QINQ)) {
            off += 4;
        }
        if be16(&f, off) != Some(ethertype::IPV4) || shape == Shape::MalformedIhl {
            continue;
        }
        let ip = &f[off + 2..];
        let ihl = usize::from(ip[0] & 0xf) * 4;
        assert_eq!(internet_checksum(&ip[..ihl]), 0, "{shape:?}");
    }
}

#[test]
fn tcp_checksums_and_options() {
    let f = tcp4_with_options(&ep(), 9, 1, 2, 30);
    let ip = &f[14..];
    assert_eq!(ip[20 + 12] >> 4, 10);
    assert_eq!(&ip[40..60], &TCP_SYN_OPTIONS);
    let seg = &ip[20..20 + 40 + 30];
    assert_eq!(
        l4_checksum(ep().src_ip.into(), ep().dst_ip.into(), proto::TCP, seg),
        0
    );
    assert_eq!(f.len(), 14 + 20 + 40 + 30);
}

#[test]
fn icmp6_and_udp6_checksums() {
    let e = ep();
    let f = icmp6_echo(&e, 5, 1, 20);
    assert_eq!(
        l4_checksum(e.src_ip6.into(), e.dst_ip6.into(), proto::ICMPV6, &f[54..]),
        0
    );
    let f = udp6(&e, 5, 1, 2, 20);
    assert_eq!(
        l4_checksum(e.src_ip6.into(), e.dst_ip6.into(), proto::UDP, &f[54..]),
        0
    );
    assert_eq!(f.len(), 14 + 40 + 8 + 20);
}

#[test]
fn sctp_crc32c_known_answer() {
    // RFC 3720 B.4: 32 bytes of zeros.
    assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
}

#[test]
fn vlan_and_qinq_layout() {
    let f = vlan_udp4(&ep(), 1, 123, 1, 2, 10);
    assert_eq!(be16(&f, 12), Some(0x8100));
    assert_eq!(be16(&f, 14), Some(123));
    assert_eq!(be16(&f, 16), Some(0x0800));
    let f = qinq_udp4(&ep(), 1, 300, 123, 1, 2, 10);
    assert_eq!(be16(&f, 12), Some(0x88a8));
    assert_eq!(be16(&f, 14), Some(300));
    assert_eq!(be16(&f, 16), Some(0x8100));
    assert_eq!(be16(&f, 18), Some(123));
    let k = flow_key(&f).unwrap();
    assert_eq!(k.vlans, vec![300, 123]);
    assert_eq!((k.src_port, k.dst_port), (1, 2));
}

#[test]
fn broken_shapes_are_broken() {
    let f = truncated_ipv4(&ep(), 1, 1, 2);
    assert_eq!(be16(&f, 16), Some(1000));
    assert!(f.len() < 14 + 1000);
    let f = truncated_tcp(&ep(), 1, 1, 2);
    assert_eq!(be16(&f, 16), Some(32));
    let f = tcp_header_cut(&ep(), 7, 1, 2, 10);
    assert_eq!(be16(&f, 16), Some(30));
    assert_eq!(f.len(), 60);
    assert_eq!(seq_of(&f), Some(7));
    let f = udp_header_cut(&ep(), 8, 1, 2, 4);
    assert_eq!(be16(&f, 16), Some(24));
    assert_eq!(f[14 + 9], proto::UDP);
    assert_eq!(seq_of(&f), Some(8));
    let f = malformed_ihl(&ep(), 1, 1, 2);
    assert_eq!(f[14] & 0xf, 3);
    let f = malformed_tcp_offset(&ep(), 1, 1, 2);
    assert_eq!(f[14 + 20 + 12] >> 4, 2);
    let f = runt(&ep(), 1, 1, 2);
    assert_eq!(f.len(), 60);
    assert_eq!(be16(&f, 16), Some(28));
}

#[test]
fn fragments() {
    let f = ipv4_fragment_first(&ep(), 3, 1, 2, 77);
    assert_eq!(be16(&f, 20), Some(0x2000));
    assert_eq!(be16(&f, 16), Some(20 + 8 + FRAG_FIRST_DATA as u16));
    let f = ipv4_fragment_later(&ep(), 3, 77);
    assert_eq!(be16(&f, 20), Some(FRAG_LATER_OFFSET));
    assert_eq!(be16(&f, 18), Some(77));
    let k = flow_key(&f).unwrap();
    assert_eq!((k.proto, k.src_port), (u16::from(proto::UDP), 0));
}

#[test]
fn ipv6_ext_headers_are_walked() {
    for rt in [0u8, 4] {
        let f = ipv6_ext_tcp(&ep(), 11, 1111, 2222, rt, 30);
        let k = flow_key(&f).unwrap();
        assert_eq!(k.proto, u16::from(proto::TCP));
        assert_eq!((k.src_port, k.dst_port), (1111, 2222));
        assert_eq!(seq_of(&f), Some(11));
        let e = ep();
        let tcp = &f[f.len() - 20 - 30..];
        assert_eq!(
            l4_checksum(e.src_ip6.into(), e.dst_ip6.into(), proto::TCP, tcp),
            0
        );
    }
}

#[test]
fn tunnels_have_inner_keys() {
    let f = gre_udp4(&ep(), 1, 0xabcd, 1, 2, 10);
    let k = flow_key(&f).unwrap();
    assert_eq!(k.tunnel_id, 0xabcd);
    let inner = k.inner.unwrap();
    assert_eq!((inner.src_port, inner.dst_port), (1, 2));
    let f = vxlan(&ep(), 1, 0x1234, 40000, 10);
    let k = flow_key(&f).unwrap();
    assert_eq!(k.tunnel_id, 0x1234);
    assert_eq!(k.inner.unwrap().dst_port, 6000);
}

#[test]
fn mixed_sequence_flows() {
    let frames = mixed_sequence(&ep(), 500);
    assert_eq!(frames.len(), 500);
    let mut keys = std::collections::HashMap::new();
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(seq_of(f), Some(i as u32));
        assert!(f.len() <= 1514 + 8, "fits MTU: {} {}", i, f.len());
        // Frames of one (shape, flow) have one flow key.
        let seq = i as u32;
        let k = flow_key(f).unwrap();
        let prev = keys.insert((mixed_shape(seq), mixed_flow(seq)), k.clone());
        if let Some(p) = prev {
            assert_eq!(p, k, "seq {seq}");
        }
    }
    // Several flows per shape.
    let udp_keys: std::collections::HashSet<_> = keys
        .iter()
        .filter(|((s, _), _)| *s == Shape::Udp4)
        .map(|(_, k)| k.clone())
        .collect();
    assert_eq!(udp_keys.len(), MIXED_FLOWS as usize);
}
