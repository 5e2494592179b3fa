//! IPFIX and NetFlow v9 messages read back by a decoder written here from
//! RFC 7011 / RFC 3954 (not the encoder's tables): templates come first,
//! every record decodes to the flow it was made from, messages stay within
//! the size asked for, sequence numbers count as the RFCs say, and the
//! bytes of a known record are exactly the expected ones.

use ringcap_flow::{Dialect, Direction, EndReason, FlowKey, FlowRecord, MessageBuilder};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Ie {
    id: u16,
    pen: u32,
}

#[derive(Debug, Default)]
struct Decoded {
    /// (version, length field, export time or uptime, sequence, domain).
    headers: Vec<(u16, usize, u32, u32, u32)>,
    /// Message sizes.
    sizes: Vec<usize>,
    /// Template ID -> fields (ie, length), in the order first seen.
    templates: HashMap<u16, Vec<(Ie, u16)>>,
    /// Which message each template was seen in.
    template_msgs: Vec<usize>,
    /// Data records: template ID and (ie -> bytes).
    records: Vec<(u16, HashMap<Ie, Vec<u8>>)>,
    /// Records per message (data only).
    per_msg: Vec<u32>,
    /// v9: count field vs records found (templates included).
    v9_counts: Vec<(u16, u32)>,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn decode(msgs: &[Vec<u8>], v9: bool) -> Decoded {
    let mut d = Decoded::default();
    for (mi, m) in msgs.iter().enumerate() {
        d.sizes.push(m.len());
        let (hlen, tset) = if v9 { (20, 0) } else { (16, 2) };
        let version = be16(m);
        let (len, time, seq, dom) = if v9 {
            (m.len(), be32(&m[4..]), be32(&m[12..]), be32(&m[16..]))
        } else {
            (
                usize::from(be16(&m[2..])),
                be32(&m[4..]),
                be32(&m[8..]),
                be32(&m[12..]),
            )
        };
        assert_eq!(len, m.len(), "length field");
        d.headers.push((version, len, time, seq, dom));
        let mut off = hlen;
        let mut data = 0;
        let mut all = 0;
        while off < m.len() {
            let set_id = be16(&m[off..]);
            let set_len = usize::from(be16(&m[off + 2..]));
            assert!(
                set_len >= 4 && off + set_len <= m.len(),
                "set length {set_len} at {off}"
            );
            let body = &m[off + 4..off + set_len];
            // IPFIX options templates (set 3) carry a scope field count.
            let options = !v9 && set_id == 3;
            if set_id == tset || options {
                let mut p = 0;
                while p + 4 <= body.len() {
                    let id = be16(&body[p..]);
                    let n = be16(&body[p + 2..]);
                    p += if options { 6 } else { 4 };
                    let mut fields = Vec::new();
                    for _ in 0..n {
                        let raw = be16(&body[p..]);
                        let flen = be16(&body[p + 2..]);
                        p += 4;
                        let pen = if !v9 && raw & 0x8000 != 0 {
                            let e = be32(&body[p..]);
                            p += 4;
                            e
                        } else {
                            0
                        };
                        fields.push((
                            Ie {
                                id: raw & 0x7fff,
                                pen,
                            },
                            flen,
                        ));
                    }
                    d.templates.insert(id, fields);
                    d.template_msgs.push(mi);
                    all += 1;
                }
            } else if set_id >= 256 {
                let t = d.templates.get(&set_id).expect("data before its template");
                let rlen: usize = t.iter().map(|f| usize::from(f.1)).sum();
                let mut p = 0;
                while p + rlen <= body.len() {
                    let mut r = HashMap::new();
                    for (ie, flen) in t {
                        r.insert(*ie, body[p..p + usize::from(*flen)].to_vec());
                        p += usize::from(*flen);
                    }
                    d.records.push((set_id, r));
                    data += 1;
                    all += 1;
                }
                assert!(body.len() - p < 4, "padding only");
            } else {
                panic!("unexpected set {set_id}");
            }
            off += set_len;
        }
        d.per_msg.push(data);
        if v9 {
            d.v9_counts.push((be16(&m[2..]), all));
        }
    }
    d
}

fn num(b: &[u8]) -> u64 {
    b.iter().fold(0, |a, &x| a << 8 | u64::from(x))
}

fn flow(i: u32, v6: bool) -> FlowRecord {
    let mut key = FlowKey {
        sport: 1000 + i as u16,
        dport: 443,
        proto: if i.is_multiple_of(3) { 17 } else { 6 },
        v6,
        vlan: (i % 5) as u16,
        ..Default::default()
    };
    key.src[..4].copy_from_slice(&[198, 18, (i >> 8) as u8, i as u8]);
    key.dst[..4].copy_from_slice(&[198, 19, 0, 1]);
    if v6 {
        key.src[4..].copy_from_slice(&[7; 12]);
        key.dst[15] = 9;
    }
    FlowRecord {
        key,
        start_ns: 1_700_000_000_123_456_789 + u64::from(i),
        end_ns: 1_700_000_005_987_654_321 + u64::from(i),
        fwd: Direction {
            packets: 10 + u64::from(i),
            octets: 5_000_000_000 + u64::from(i),
            tcp_flags: 0x1b,
        },
        rev: Direction {
            packets: u64::from(i % 4),
            octets: 40 * u64::from(i % 4),
            tcp_flags: 0x12,
        },
        icmp: 0,
        reason: EndReason::IdleTimeout,
    }
}

fn build(d: Dialect, flows: &[FlowRecord], max: usize) -> Vec<Vec<u8>> {
    let mut b = MessageBuilder::new(d, 42, max);
    let mut msgs = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        if i == flows.len() / 2 {
            b.refresh_templates();
        }
        b.add(f, 1_800_000_000, 5000, &mut |m| msgs.push(m.to_vec()));
    }
    b.flush(1_800_000_000, &mut |m| msgs.push(m.to_vec()));
    msgs
}

const STD: u32 = 0;
const REV: u32 = 29305;

fn get(r: &HashMap<Ie, Vec<u8>>, id: u16, pen: u32) -> u64 {
    num(r
        .get(&Ie { id, pen })
        .unwrap_or_else(|| panic!("IE {id}/{pen} missing")))
}

#[test]
fn ipfix_records_decode_to_the_flows() {
    let flows: Vec<FlowRecord> = (0..300).map(|i| flow(i, i % 2 == 1)).collect();
    let msgs = build(Dialect::Ipfix, &flows, 1400);
    let d = decode(&msgs, false);
    assert!(d.sizes.iter().all(|&s| s <= 1400), "{:?}", d.sizes);
    assert!(
        d.sizes.len() > 10 && d.sizes.len() < flows.len() / 5,
        "records are batched, not one per message: {} messages",
        d.sizes.len()
    );
    // Templates in the first message, and again after the refresh.
    // Two data templates and the statistics options template, each time.
    assert_eq!(d.template_msgs.iter().filter(|&&m| m == 0).count(), 3);
    assert_eq!(d.template_msgs.len(), 6);
    // Header: version 10, domain, export time; sequence = data records before.
    let mut before = 0u32;
    for (h, n) in d.headers.iter().zip(&d.per_msg) {
        assert_eq!((h.0, h.2, h.4), (10, 1_800_000_000, 42));
        assert_eq!(h.3, before);
        before += n;
    }
    assert_eq!(d.records.len(), flows.len());
    for ((tid, r), f) in d.records.iter().zip(&flows) {
        assert_eq!(*tid, if f.key.v6 { 257 } else { 256 });
        assert_eq!(get(r, 152, STD), f.start_ns / 1_000_000);
        assert_eq!(get(r, 153, STD), f.end_ns / 1_000_000);
        assert_eq!(get(r, 2, STD), f.fwd.packets);
        assert_eq!(get(r, 1, STD), f.fwd.octets);
        assert_eq!(get(r, 2, REV), f.rev.packets);
        assert_eq!(get(r, 1, REV), f.rev.octets);
        assert_eq!(get(r, 6, STD), u64::from(f.fwd.tcp_flags));
        assert_eq!(get(r, 6, REV), u64::from(f.rev.tcp_flags));
        assert_eq!(get(r, 7, STD), u64::from(f.key.sport));
        assert_eq!(get(r, 11, STD), u64::from(f.key.dport));
        assert_eq!(get(r, 4, STD), u64::from(f.key.proto));
        assert_eq!(get(r, 58, STD), u64::from(f.key.vlan));
        assert_eq!(get(r, 136, STD), 1);
        if f.key.v6 {
            assert_eq!(r[&Ie { id: 27, pen: STD }], f.key.src);
            assert_eq!(r[&Ie { id: 28, pen: STD }], f.key.dst);
        } else {
            assert_eq!(r[&Ie { id: 8, pen: STD }], f.key.src[..4]);
            assert_eq!(r[&Ie { id: 12, pen: STD }], f.key.dst[..4]);
        }
    }
}

#[test]
fn one_ipfix_message_byte_for_byte() {
    let f = flow(1, false);
    let mut b = MessageBuilder::new(Dialect::Ipfix, 7, 1400);
    let mut msgs = Vec::new();
    b.add(&f, 0x6000_0000, 0, &mut |m| msgs.push(m.to_vec()));
    b.flush(0x6000_0000, &mut |m| msgs.push(m.to_vec()));
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0];
    // Header (16) + template set (4 + two templates) + options template
    // set (4 + the statistics template: 7 fields, 1 of them scope) + data
    // set (4 + 70).
    let t4 = 4 + 16 * 4 + 3 * 4; // 16 fields, 3 of them reverse (PEN)
    let t6 = t4;
    let stats = 6 + 7 * 4;
    let want_len = 16 + 4 + t4 + t6 + 4 + stats + 4 + 70;
    assert_eq!(m.len(), want_len);
    assert_eq!(
        &m[..16],
        &[
            0,
            10,
            (want_len >> 8) as u8,
            want_len as u8,
            0x60,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            7
        ]
    );
    let data = &m[m.len() - 74..];
    let mut want = vec![1, 0, 0, 74];
    want.extend_from_slice(&(f.start_ns / 1_000_000).to_be_bytes());
    want.extend_from_slice(&(f.end_ns / 1_000_000).to_be_bytes());
    want.extend_from_slice(&11u64.to_be_bytes());
    want.extend_from_slice(&5_000_000_001u64.to_be_bytes());
    want.extend_from_slice(&1u64.to_be_bytes());
    want.extend_from_slice(&40u64.to_be_bytes());
    want.extend_from_slice(&[198, 18, 0, 1, 198, 19, 0, 1]);
    want.extend_from_slice(&[0x03, 0xe9, 0x01, 0xbb, 6]);
    // Reverse tcpControlBits (0x12) before the forward ones (0x1b): nfdump
    // keeps the last it meets.
    want.extend_from_slice(&[0, 0x12, 0, 0x1b, 0, 1, 0, 0, 1]);
    assert_eq!(data, &want[..]);
    // The template's reverse packet count: enterprise bit, IE 2, length 8, PEN.
    let rev_pkts = [0x80, 2, 0, 8, 0, 0, 0x72, 0x79];
    assert!(m.windows(8).any(|w| w == rev_pkts));
}

#[test]
fn netflow_v9_splits_biflows_and_counts_packets() {
    let flows: Vec<FlowRecord> = (0..100).map(|i| flow(i, i.is_multiple_of(4))).collect();
    let msgs = build(Dialect::NetflowV9, &flows, 1400);
    let d = decode(&msgs, true);
    for (i, h) in d.headers.iter().enumerate() {
        assert_eq!((h.0, h.2, h.3, h.4), (9, 5000, i as u32, 42));
    }
    for (count, found) in &d.v9_counts {
        assert_eq!(u32::from(*count), *found, "v9 count includes templates");
    }
    let halves: usize = flows
        .iter()
        .map(|f| 1 + usize::from(f.rev.packets > 0))
        .sum();
    assert_eq!(d.records.len(), halves);
    let mut it = d.records.iter();
    for f in &flows {
        let (_, r) = it.next().unwrap();
        assert_eq!(get(r, 2, STD), f.fwd.packets);
        assert_eq!(get(r, 7, STD), u64::from(f.key.sport));
        if f.rev.packets > 0 {
            let (_, r) = it.next().unwrap();
            assert_eq!(get(r, 2, STD), f.rev.packets);
            assert_eq!(get(r, 1, STD), f.rev.octets);
            assert_eq!(
                (get(r, 7, STD), get(r, 11, STD)),
                (u64::from(f.key.dport), u64::from(f.key.sport))
            );
            assert_eq!(get(r, 6, STD), u64::from(f.rev.tcp_flags));
        }
    }
}
