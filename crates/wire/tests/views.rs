//! Every view over arbitrary bytes: a checked constructor either refuses
//! or gives a view none of whose accessors or setters panics (reads and
//! writes stay inside the buffer), and a setter writes exactly its field.

use proptest::prelude::*;
use ringcap_wire::arp::{Addr, ArpPacket};
use ringcap_wire::checksum::{pseudo_header, sum};
use ringcap_wire::ethernet::EthernetFrame;
use ringcap_wire::icmp::Icmpv4Packet;
use ringcap_wire::icmpv6::Icmpv6Packet;
use ringcap_wire::ipv4::{self, Ipv4Packet};
use ringcap_wire::ipv6::{self, Ipv6Packet};
use ringcap_wire::tcp::{self, TcpPacket};
use ringcap_wire::udp::UdpPacket;

/// Bytes that often look like the header in question (a plausible first
/// byte), of every length from 0.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    (prop::collection::vec(any::<u8>(), 0..120), any::<u8>()).prop_map(|(mut v, first)| {
        if let Some(b) = v.first_mut() {
            // Half the time an IPv4/IPv6 version nibble with a small IHL.
            if first & 1 == 0 {
                *b = [0x45, 0x46, 0x4f, 0x60][usize::from(first >> 1) % 4];
            }
        }
        if first & 2 == 0 && v.len() > 12 {
            v[12] = (v[12] & 0x0f) | 0x50; // a TCP data offset of 5
        }
        v
    })
}

/// Only `field` differs between `before` and `after`.
fn only(before: &[u8], after: &[u8], field: std::ops::Range<usize>) {
    for (i, (a, b)) in before.iter().zip(after).enumerate() {
        if !field.contains(&i) {
            assert_eq!(a, b, "byte {i} outside {field:?} changed");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn ethernet(mut b in bytes(), m in any::<[u8; 6]>(), t in any::<u16>()) {
        if let Ok(mut v) = EthernetFrame::new_checked(&mut b[..]) {
            let _ = (v.destination(), v.source(), v.ethertype(), v.header_len());
            let _ = v.payload_mut().len();
            v.set_destination(m);
            v.set_source(m);
            v.set_ethertype(t);
            prop_assert_eq!(v.source(), m);
            prop_assert_eq!(v.ethertype(), t);
        }
        if let Ok(v) = EthernetFrame::new_checked(&b[..]) {
            let _ = (v.as_bytes(), v.payload());
        }
    }

    #[test]
    fn arp(mut b in bytes(), x in any::<u8>()) {
        if let Ok(mut v) = ArpPacket::new_checked(&mut b[..]) {
            let _ = (v.hardware_type(), v.protocol_type(), v.operation(), v.packet_len());
            for a in [Addr::SenderHardware, Addr::SenderProtocol, Addr::TargetHardware, Addr::TargetProtocol] {
                v.addr_mut(a).fill(x);
            }
        }
        if let Ok(v) = ArpPacket::new_checked(&b[..]) {
            let _ = (v.sender_hardware_addr(), v.sender_protocol_addr(),
                     v.target_hardware_addr(), v.target_protocol_addr(), v.trailer());
        }
    }

    #[test]
    fn ipv4(mut b in bytes(), a in any::<[u8; 4]>(), w in any::<u16>(), x in any::<u8>()) {
        let before = b.clone();
        if let Ok(mut v) = Ipv4Packet::new_checked(&mut b[..]) {
            let _ = (v.version(), v.ihl(), v.dscp(), v.ecn(), v.total_len(), v.ident(),
                     v.dont_frag(), v.more_frags(), v.frag_offset(), v.is_fragment(), v.ttl(),
                     v.protocol(), v.checksum(), v.verify_checksum(), v.src_addr(), v.dst_addr());
            v.set_src_addr(a);
            prop_assert_eq!(v.src_addr(), a);
            only(&before, v.into_inner(), ipv4::field::SRC_ADDR);
        }
        if let Ok(mut v) = Ipv4Packet::new_checked(&mut b[..]) {
            v.set_dst_addr(a);
            v.set_ttl(x);
            v.set_dscp_ecn(x);
            v.set_ident(w);
            v.set_flags_and_offset(w);
            v.set_total_len(w);
            v.set_protocol(x);
            v.options_mut().fill(1);
            v.payload_mut().fill(2);
            v.fill_checksum();
            prop_assert!(v.verify_checksum());
            let _ = (v.options_mut().len(), v.payload_mut().len(), v.header_len());
        }
        if let Ok(v) = Ipv4Packet::new_checked(&b[..]) {
            let _ = (v.as_bytes(), v.options(), v.payload());
        }
    }

    #[test]
    fn ipv6(mut b in bytes(), a in any::<[u8; 16]>(), x in any::<u8>(), f in any::<u32>()) {
        let before = b.clone();
        if let Ok(mut v) = Ipv6Packet::new_checked(&mut b[..]) {
            let _ = (v.version(), v.traffic_class(), v.flow_label(), v.payload_len(),
                     v.next_header(), v.hop_limit(), v.src_addr(), v.dst_addr());
            v.set_flow_label(f);
            prop_assert_eq!(v.flow_label(), f & 0xfffff);
            v.set_traffic_class(x);
            prop_assert_eq!(v.traffic_class(), x);
            prop_assert_eq!(v.version(), 6);
            only(&before, v.into_inner(), ipv6::field::VER_TC_FLOW);
        }
        if let Ok(mut v) = Ipv6Packet::new_checked(&mut b[..]) {
            v.set_src_addr(a);
            v.set_dst_addr(a);
            v.set_hop_limit(x);
            v.set_next_header(x);
            v.set_payload_len(f as u16);
            v.payload_mut().fill(3);
            prop_assert_eq!(v.src_addr(), a);
        }
        if let Ok(v) = Ipv6Packet::new_checked(&b[..]) {
            let _ = (v.as_bytes(), v.payload());
        }
    }

    #[test]
    fn tcp(mut b in bytes(), w in any::<u16>(), d in any::<u32>()) {
        let before = b.clone();
        if let Ok(mut v) = TcpPacket::new_checked(&mut b[..]) {
            let _ = (v.src_port(), v.dst_port(), v.seq_number(), v.ack_number(), v.data_offset(),
                     v.flags(), v.fin(), v.syn(), v.rst(), v.psh(), v.ack(), v.urg(), v.ece(),
                     v.cwr(), v.window(), v.checksum(), v.urgent_pointer(), v.offset_and_flags());
            v.set_seq_number(d);
            prop_assert_eq!(v.seq_number(), d);
            only(&before, v.into_inner(), tcp::field::SEQ_NUM);
        }
        if let Ok(mut v) = TcpPacket::new_checked(&mut b[..]) {
            v.set_src_port(w);
            v.set_dst_port(w);
            v.set_ack_number(d);
            v.set_window(w);
            v.set_urgent_pointer(w);
            // The data offset stays: the view's length depends on it.
            let hl = v.header_len();
            v.set_reserved_and_flags(w);
            prop_assert_eq!(v.header_len(), hl);
            prop_assert_eq!(v.offset_and_flags() & 0x0fff, w & 0x0fff);
            v.options_mut().fill(1);
            v.payload_mut().fill(2);
            // Every accessor still inside the buffer after the setters.
            let _ = (v.options_mut().len(), v.payload_mut().len(), v.data_offset(), v.flags());
            let p = pseudo_header(&[1, 2, 3, 4], &[5, 6, 7, 8], 6, d);
            v.fill_checksum(p);
            prop_assert_eq!(ringcap_wire::checksum::add(p, sum(v.into_inner())), 0xffff);
        }
        if let Ok(v) = TcpPacket::new_checked(&b[..]) {
            let _ = (v.options(), v.payload());
        }
    }

    #[test]
    fn udp_icmp(mut b in bytes(), w in any::<u16>(), x in any::<u8>()) {
        if let Ok(mut v) = UdpPacket::new_checked(&mut b[..]) {
            let _ = (v.src_port(), v.dst_port(), v.len(), v.is_empty(), v.checksum());
            v.set_src_port(w);
            v.set_dst_port(w);
            v.set_len(w);
            v.payload_mut().fill(x);
            v.fill_checksum(w);
            prop_assert_ne!(v.checksum(), 0);
        }
        if let Ok(v) = UdpPacket::new_checked(&b[..]) {
            let _ = v.payload();
        }
        if let Ok(mut v) = Icmpv4Packet::new_checked(&mut b[..]) {
            let _ = (v.msg_type(), v.code(), v.checksum(), v.rest_of_header(), v.echo_ident(),
                     v.echo_seq_no(), v.is_error());
            v.set_msg_type(x);
            v.set_code(x);
            v.set_echo_ident(w);
            v.set_echo_seq_no(w);
            v.payload_mut().fill(x);
            v.fill_checksum();
            prop_assert_eq!(sum(v.into_inner()), 0xffff);
        }
        if let Ok(v) = Icmpv4Packet::new_checked(&b[..]) {
            let _ = v.payload();
        }
        if let Ok(mut v) = Icmpv6Packet::new_checked(&mut b[..]) {
            let _ = (v.msg_type(), v.code(), v.checksum(), v.rest_of_header(), v.echo_ident(),
                     v.echo_seq_no(), v.is_error());
            v.set_msg_type(x);
            v.set_echo_ident(w);
            v.set_echo_seq_no(w);
            v.fill_checksum(w);
        }
        if let Ok(v) = Icmpv6Packet::new_checked(&b[..]) {
            let _ = v.payload();
        }
    }
}
