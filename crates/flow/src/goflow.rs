//! goflow2's protobuf flow message, for Kafka consumers built for goflow2
//! (`kafka://BROKER/TOPIC?format=protobuf`): the pipelines of goflow2 →
//! Kafka → ClickHouse, akvorado and the like read these without change.
//!
//! The message is goflow2's `flowpb.FlowMessage` (pb/flow.proto): the
//! fields below carry its field numbers and types; fields ringcap has no
//! value for (interfaces, AS numbers, MPLS, MACs...) are left out, which in
//! proto3 is the same as sending their zero. Each Kafka message is one flow
//! message preceded by its length as a varint, as goflow2 (v2) writes them
//! (protodelim). goflow2 sends one message per direction of a flow, as
//! NetFlow records are; a biflow becomes two messages, the reverse one
//! only when it saw packets.
//!
//! Values: `type` is IPFIX (the records are IPFIX's, split by direction);
//! times in ns; `sampling_rate` is N of one packet (or flow) in N, 1 when
//! every packet is counted; `sequence_num` counts the messages of this
//! exporter (wrapping), so a consumer can see gaps; `observation_domain_id`
//! is the exporter's domain.

use crate::record::FlowRecord;
use prost::Message;

/// goflow2's FlowType: IPFIX.
pub const FLOW_TYPE_IPFIX: i32 = 4;

/// goflow2's `FlowMessage`, the fields ringcap fills (numbers as in
/// goflow2's pb/flow.proto).
#[derive(Clone, PartialEq, Message)]
pub struct FlowMessage {
    /// FlowType (enum): 4 = IPFIX.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    /// When the message was made, ns since the epoch.
    #[prost(uint64, tag = "110")]
    pub time_received_ns: u64,
    /// Messages of this exporter before this one.
    #[prost(uint32, tag = "4")]
    pub sequence_num: u32,
    /// One in N; 1: not sampled.
    #[prost(uint64, tag = "3")]
    pub sampling_rate: u64,
    /// First packet, ns since the epoch.
    #[prost(uint64, tag = "111")]
    pub time_flow_start_ns: u64,
    /// Last packet, ns since the epoch.
    #[prost(uint64, tag = "112")]
    pub time_flow_end_ns: u64,
    /// IP octets.
    #[prost(uint64, tag = "9")]
    pub bytes: u64,
    /// Packets.
    #[prost(uint64, tag = "10")]
    pub packets: u64,
    /// Source address, 4 or 16 bytes.
    #[prost(bytes = "vec", tag = "6")]
    pub src_addr: Vec<u8>,
    /// Destination address, 4 or 16 bytes.
    #[prost(bytes = "vec", tag = "7")]
    pub dst_addr: Vec<u8>,
    /// EtherType of the layer 3 protocol: 0x0800 or 0x86dd.
    #[prost(uint32, tag = "30")]
    pub etype: u32,
    /// IP protocol.
    #[prost(uint32, tag = "20")]
    pub proto: u32,
    /// Source port.
    #[prost(uint32, tag = "21")]
    pub src_port: u32,
    /// Destination port.
    #[prost(uint32, tag = "22")]
    pub dst_port: u32,
    /// 802.1Q VLAN ID.
    #[prost(uint32, tag = "29")]
    pub vlan_id: u32,
    /// Union of the TCP flags seen (the low 8 bits, as goflow2 keeps them).
    #[prost(uint32, tag = "26")]
    pub tcp_flags: u32,
    /// ICMP type.
    #[prost(uint32, tag = "31")]
    pub icmp_type: u32,
    /// ICMP code.
    #[prost(uint32, tag = "32")]
    pub icmp_code: u32,
    /// The exporter's observation domain.
    #[prost(uint32, tag = "70")]
    pub observation_domain_id: u32,
}

/// Makes goflow2 messages out of flow records, into one reused buffer.
#[derive(Debug)]
pub struct Encoder {
    sequence: u32,
    sampling_rate: u64,
    domain: u32,
    buf: Vec<u8>,
}

impl Encoder {
    /// Messages of an exporter in `domain` whose sampling is one in
    /// `sampling_rate` (1: none).
    pub fn new(domain: u32, sampling_rate: u64) -> Encoder {
        Encoder {
            sequence: 0,
            sampling_rate: sampling_rate.max(1),
            domain,
            buf: Vec::with_capacity(256),
        }
    }

    /// Calls `each` with every message of `r` (length-delimited): the
    /// forward direction, then the reverse one when it saw packets.
    pub fn messages(&mut self, r: &FlowRecord, now_ns: u64, each: &mut impl FnMut(&[u8])) {
        self.one(&r.forward_half(), now_ns, each);
        if let Some(rev) = r.reverse_half() {
            self.one(&rev, now_ns, each);
        }
    }

    fn one(&mut self, r: &FlowRecord, now_ns: u64, each: &mut impl FnMut(&[u8])) {
        let m = message(r, now_ns, self.sequence, self.sampling_rate, self.domain);
        self.sequence = self.sequence.wrapping_add(1);
        self.buf.clear();
        // Cannot fail: a Vec grows.
        let _ = m.encode_length_delimited(&mut self.buf);
        each(&self.buf);
    }
}

/// The message of one direction (`r`'s forward counters).
pub fn message(
    r: &FlowRecord,
    now_ns: u64,
    seq: u32,
    sampling_rate: u64,
    domain: u32,
) -> FlowMessage {
    let k = &r.key;
    let (addr_len, etype) = if k.v6 { (16, 0x86dd) } else { (4, 0x0800) };
    let icmp = k.proto == 1 || k.proto == 58;
    FlowMessage {
        r#type: FLOW_TYPE_IPFIX,
        time_received_ns: now_ns,
        sequence_num: seq,
        sampling_rate,
        time_flow_start_ns: r.start_ns,
        time_flow_end_ns: r.end_ns,
        bytes: r.fwd.octets,
        packets: r.fwd.packets,
        src_addr: k.src[..addr_len].to_vec(),
        dst_addr: k.dst[..addr_len].to_vec(),
        etype,
        proto: u32::from(k.proto),
        src_port: u32::from(k.sport),
        dst_port: u32::from(k.dport),
        vlan_id: u32::from(k.vlan),
        tcp_flags: u32::from(r.fwd.tcp_flags & 0xff),
        icmp_type: if icmp { u32::from(r.icmp >> 8) } else { 0 },
        icmp_code: if icmp { u32::from(r.icmp & 0xff) } else { 0 },
        observation_domain_id: domain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{FlowKey, NO_TUNNEL};
    use crate::record::{Direction, EndReason};

    fn flow() -> FlowRecord {
        let mut key = FlowKey {
            src: [0; 16],
            dst: [0; 16],
            sport: 443,
            dport: 51_000,
            proto: 6,
            v6: false,
            vlan: 7,
            icmp: 0,
            tunnel: NO_TUNNEL,
        };
        key.src[..4].copy_from_slice(&[198, 18, 0, 1]);
        key.dst[..4].copy_from_slice(&[198, 19, 0, 2]);
        FlowRecord {
            key,
            start_ns: 1_000,
            end_ns: 2_000,
            fwd: Direction {
                packets: 3,
                octets: 300,
                tcp_flags: 0x1b,
            },
            rev: Direction {
                packets: 2,
                octets: 120,
                tcp_flags: 0x12,
            },
            icmp: 0,
            reason: EndReason::EndOfFlow,
        }
    }

    #[test]
    fn wire_bytes_of_a_known_message() {
        let mut out = Vec::new();
        let mut e = Encoder::new(9, 1);
        e.messages(&flow(), 5_000, &mut |m| out.push(m.to_vec()));
        assert_eq!(out.len(), 2, "both directions");
        // Hand-encoded from the protobuf wire format: (field << 3 | wire
        // type), varints; fields in tag order as prost writes them; zero
        // values (sequence 0, ICMP) left out.
        #[rustfmt::skip]
        let body: &[u8] = &[
            0x08, 4,                         // 1 type = IPFIX
            0x18, 1,                         // 3 sampling_rate
            0x32, 4, 198, 18, 0, 1,          // 6 src_addr
            0x3a, 4, 198, 19, 0, 2,          // 7 dst_addr
            0x48, 0xac, 0x02,                // 9 bytes = 300
            0x50, 3,                         // 10 packets
            0xa0, 0x01, 6,                   // 20 proto
            0xa8, 0x01, 0xbb, 0x03,          // 21 src_port = 443
            0xb0, 0x01, 0xb8, 0x8e, 0x03,    // 22 dst_port = 51000
            0xd0, 0x01, 0x1b,                // 26 tcp_flags
            0xe8, 0x01, 7,                   // 29 vlan_id
            0xf0, 0x01, 0x80, 0x10,          // 30 etype = 0x0800
            0xb0, 0x04, 9,                   // 70 observation_domain_id
            0xf0, 0x06, 0x88, 0x27,          // 110 time_received_ns = 5000
            0xf8, 0x06, 0xe8, 0x07,          // 111 start = 1000
            0x80, 0x07, 0xd0, 0x0f,          // 112 end = 2000
        ];
        let mut want = vec![body.len() as u8];
        want.extend_from_slice(body);
        assert_eq!(out[0], want);
        // The reverse direction: addresses and ports swapped, its own
        // counters, the next sequence number.
        let rev = FlowMessage::decode_length_delimited(&out[1][..]).unwrap();
        assert_eq!(rev.src_addr, vec![198, 19, 0, 2]);
        assert_eq!((rev.src_port, rev.dst_port), (51_000, 443));
        assert_eq!((rev.packets, rev.bytes, rev.tcp_flags), (2, 120, 0x12));
        assert_eq!(rev.sequence_num, 1);
    }

    #[test]
    fn icmp_and_ipv6() {
        let mut r = flow();
        r.key.v6 = true;
        r.key.proto = 58;
        r.key.src = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        r.icmp = 0x8000 | 3;
        r.rev = Direction::ZERO;
        let mut out = Vec::new();
        Encoder::new(1, 64).messages(&r, 0, &mut |m| out.push(m.to_vec()));
        assert_eq!(out.len(), 1, "no reverse message without packets");
        let m = FlowMessage::decode_length_delimited(&out[0][..]).unwrap();
        assert_eq!(m.src_addr.len(), 16);
        assert_eq!(m.etype, 0x86dd);
        assert_eq!((m.icmp_type, m.icmp_code), (128, 3));
        assert_eq!(m.sampling_rate, 64);
    }
}
