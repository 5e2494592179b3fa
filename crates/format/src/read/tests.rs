//! Tests of the reader: round trips with the writers, hand-built files in both
//! byte orders, garbage and truncation.

use super::*;
use crate::pcap::{file_header, write_record_header};
use crate::pcapng::{
    epb_len, interface_description, interface_statistics, section_header, write_epb_header,
    write_epb_trailer, InterfaceDescription, InterfaceStatistics, BT_EPB, BT_IDB, BT_PB, BT_SPB,
};
use crate::TsResolution;

/// A small deterministic random generator (xorshift64*).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A packet as owned data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owned {
    pub(crate) interface: usize,
    pub(crate) ts_ns: u64,
    pub(crate) wire_len: u32,
    pub(crate) data: Vec<u8>,
}

/// What [`read_all`] returns: the packets, how reading ended, the final offset.
pub(crate) type ReadAll = (Vec<Owned>, Result<(), FormatError>, u64);

/// Reads everything: the packets, then how reading ended, and the reader's
/// final offset.
pub(crate) fn read_all(bytes: &[u8]) -> Result<ReadAll, FormatError> {
    let mut r = Reader::new(bytes)?;
    let (out, end) = read_rest(&mut r, bytes.len());
    Ok((out, end, r.offset()))
}

/// Reads the packets `r` has left (at most `max`: more is a failure) and
/// how reading ended.
pub(crate) fn read_rest<R: Read>(
    r: &mut Reader<R>,
    max: usize,
) -> (Vec<Owned>, Result<(), FormatError>) {
    let mut out = Vec::new();
    let end = loop {
        match r.next_packet() {
            Ok(Some(p)) => out.push(Owned {
                interface: p.interface,
                ts_ns: p.ts_ns,
                wire_len: p.wire_len,
                data: p.data.to_vec(),
            }),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
        assert!(out.len() <= max, "more packets than bytes");
    };
    (out, end)
}

fn packet_data(i: usize) -> Vec<u8> {
    (0..(i * 7) % 70).map(|j| (i * 31 + j) as u8).collect()
}

/// A pcap file written with the crate's writer (host order); also returns the
/// offsets where records start and the packets.
pub(crate) fn pcap_file(res: TsResolution, n: usize) -> (Vec<u8>, Vec<usize>, Vec<Owned>) {
    let mut f = file_header(1, 65535, res).to_vec();
    let mut starts = Vec::new();
    let mut pkts = Vec::new();
    for i in 0..n {
        let data = packet_data(i);
        let ts = 1_700_000_000_000_000_000 + i as u64 * 1_234_567_891;
        starts.push(f.len());
        let mut h = [0u8; 16];
        write_record_header(&mut h, ts, data.len() as u32, data.len() as u32 + 4, res);
        f.extend_from_slice(&h);
        f.extend_from_slice(&data);
        let ts_ns = match res {
            TsResolution::Micro => ts / 1000 * 1000,
            TsResolution::Nano => ts,
        };
        pkts.push(Owned {
            interface: 0,
            ts_ns,
            wire_len: data.len() as u32 + 4,
            data,
        });
    }
    (f, starts, pkts)
}

/// A pcapng file written with the crate's writers: SHB, two IDBs, packets
/// alternating between them, an ISB at the end. Returns the offsets where
/// blocks after the SHB start, the offset of the first packet and the packets.
pub(crate) fn pcapng_file(n: usize) -> (Vec<u8>, Vec<usize>, Vec<Owned>) {
    let mut f = section_header("Linux", "ringcap test", Some("ringcap -i eth0 -i lo"));
    let mut starts = vec![f.len()];
    f.extend(interface_description(&InterfaceDescription {
        linktype: 1,
        snaplen: 262144,
        name: "eth0",
        filter: Some("tcp port 80"),
        description: Some("uplink"),
    }));
    starts.push(f.len());
    f.extend(interface_description(&InterfaceDescription {
        linktype: 1,
        snaplen: 128,
        name: "lo",
        filter: None,
        description: None,
    }));
    let mut pkts = Vec::new();
    for i in 0..n {
        starts.push(f.len());
        let data = packet_data(i);
        let ts = 1_700_000_000_123_456_789 + i as u64 * 1_000_000_007;
        let iface = (i % 2) as u32;
        let at = f.len();
        f.resize(at + epb_len(data.len()), 0xEE);
        write_epb_header(&mut f[at..], iface, ts, data.len() as u32, 1000 + i as u32);
        f[at + 28..at + 28 + data.len()].copy_from_slice(&data);
        write_epb_trailer(&mut f[at..], data.len() as u32);
        pkts.push(Owned {
            interface: iface as usize,
            ts_ns: ts,
            wire_len: 1000 + i as u32,
            data,
        });
    }
    starts.push(f.len());
    f.extend(interface_statistics(&InterfaceStatistics {
        interface_id: 0,
        ts_ns: 1_800_000_000_000_000_000,
        ifrecv: Some(n as u64),
        ifdrop: Some(0),
        comment: Some("done".into()),
        ..Default::default()
    }));
    (f, starts, pkts)
}

// ----- hand-built files in a chosen byte order -----

fn put16(v: &mut Vec<u8>, order: ByteOrder, x: u16) {
    match order {
        ByteOrder::Little => v.extend_from_slice(&x.to_le_bytes()),
        ByteOrder::Big => v.extend_from_slice(&x.to_be_bytes()),
    }
}

fn put32(v: &mut Vec<u8>, order: ByteOrder, x: u32) {
    match order {
        ByteOrder::Little => v.extend_from_slice(&x.to_le_bytes()),
        ByteOrder::Big => v.extend_from_slice(&x.to_be_bytes()),
    }
}

fn put64(v: &mut Vec<u8>, order: ByteOrder, x: u64) {
    match order {
        ByteOrder::Little => v.extend_from_slice(&x.to_le_bytes()),
        ByteOrder::Big => v.extend_from_slice(&x.to_be_bytes()),
    }
}

fn option(v: &mut Vec<u8>, order: ByteOrder, code: u16, value: &[u8]) {
    put16(v, order, code);
    put16(v, order, value.len() as u16);
    v.extend_from_slice(value);
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
}

/// A whole block around `body` (body padded to 4).
fn block(order: ByteOrder, block_type: u32, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    let len = body.len() as u32 + 12;
    let mut b = Vec::new();
    put32(&mut b, order, block_type);
    put32(&mut b, order, len);
    b.extend_from_slice(&body);
    put32(&mut b, order, len);
    b
}

fn shb(order: ByteOrder) -> Vec<u8> {
    let mut body = Vec::new();
    put32(&mut body, order, 0x1A2B_3C4D);
    put16(&mut body, order, 1);
    put16(&mut body, order, 0);
    put64(&mut body, order, u64::MAX);
    option(&mut body, order, 4, b"hand");
    option(&mut body, order, 0, b"");
    block(order, BT_SHB, &body)
}

fn idb(order: ByteOrder, linktype: u16, snaplen: u32, opts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    put16(&mut body, order, linktype);
    put16(&mut body, order, 0);
    put32(&mut body, order, snaplen);
    for (code, value) in opts {
        option(&mut body, order, *code, value);
    }
    if !opts.is_empty() {
        option(&mut body, order, 0, b"");
    }
    block(order, BT_IDB, &body)
}

fn epb(order: ByteOrder, iface: u32, ticks: u64, wire_len: u32, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    put32(&mut body, order, iface);
    put32(&mut body, order, (ticks >> 32) as u32);
    put32(&mut body, order, ticks as u32);
    put32(&mut body, order, data.len() as u32);
    put32(&mut body, order, wire_len);
    body.extend_from_slice(data);
    while body.len() % 4 != 0 {
        body.push(0);
    }
    // An option after the data, which readers must skip.
    option(&mut body, order, 1, b"packet comment");
    option(&mut body, order, 0, b"");
    block(order, BT_EPB, &body)
}

fn pcap_by_hand(
    order: ByteOrder,
    nano: bool,
    snaplen: u32,
    recs: &[(u32, u32, u32, &[u8])],
) -> Vec<u8> {
    let mut f = Vec::new();
    put32(&mut f, order, if nano { MAGIC_NANO } else { MAGIC_MICRO });
    put16(&mut f, order, 2);
    put16(&mut f, order, 4);
    put32(&mut f, order, 0);
    put32(&mut f, order, 0);
    put32(&mut f, order, snaplen);
    // Link type 1 with FCS bits set (FCS length 2 present: 0x1000_0000 | 1<<28).
    put32(&mut f, order, 0x3000_0001);
    for &(secs, frac, wire, data) in recs {
        put32(&mut f, order, secs);
        put32(&mut f, order, frac);
        put32(&mut f, order, data.len() as u32);
        put32(&mut f, order, wire);
        f.extend_from_slice(data);
    }
    f
}

#[test]
fn pcap_round_trip_micro_and_nano() {
    for res in [TsResolution::Micro, TsResolution::Nano] {
        let (f, _, want) = pcap_file(res, 20);
        let r = Reader::new(&f[..]).unwrap();
        assert_eq!(
            r.format(),
            FileFormat::Pcap {
                resolution: res,
                byte_order: ByteOrder::host()
            }
        );
        assert_eq!(r.interfaces().len(), 1);
        assert_eq!(r.interfaces()[0].linktype, 1);
        assert_eq!(r.interfaces()[0].snaplen, 65535);
        assert_eq!(r.offset(), 24);
        let (got, end, off) = read_all(&f).unwrap();
        end.unwrap();
        assert_eq!(off, f.len() as u64);
        assert_eq!(got, want);
    }
}

#[test]
fn pcap_both_byte_orders_by_hand() {
    let d1: &[u8] = &[1, 2, 3];
    let d2: &[u8] = &[];
    for order in [ByteOrder::Little, ByteOrder::Big] {
        for nano in [false, true] {
            let f = pcap_by_hand(
                order,
                nano,
                262144,
                &[(10, 999_999, 60, d1), (4_000_000_000, 5, 0, d2)],
            );
            let r = Reader::new(&f[..]).unwrap();
            let resolution = if nano {
                TsResolution::Nano
            } else {
                TsResolution::Micro
            };
            assert_eq!(
                r.format(),
                FileFormat::Pcap {
                    resolution,
                    byte_order: order
                }
            );
            assert_eq!(r.interfaces()[0].linktype, 1, "FCS bits are removed");
            let (got, end, _) = read_all(&f).unwrap();
            end.unwrap();
            let unit = if nano { 1 } else { 1000 };
            assert_eq!(got.len(), 2);
            assert_eq!(got[0].ts_ns, 10_000_000_000 + 999_999 * unit);
            assert_eq!(got[0].data, d1);
            assert_eq!(got[0].wire_len, 60);
            assert_eq!(got[1].ts_ns, 4_000_000_000_000_000_000 + 5 * unit);
            assert_eq!(got[1].data, d2);
        }
    }
}

#[test]
fn pcapng_round_trip() {
    let (f, _, want) = pcapng_file(25);
    let r = Reader::new(&f[..]).unwrap();
    assert_eq!(r.format(), FileFormat::Pcapng);
    let (got, end, off) = read_all(&f).unwrap();
    end.unwrap();
    assert_eq!(off, f.len() as u64);
    assert_eq!(got, want);

    let mut r = Reader::new(&f[..]).unwrap();
    while r.next_packet().unwrap().is_some() {}
    let ifs = r.interfaces();
    assert_eq!(ifs.len(), 2);
    assert_eq!(ifs[0].name.as_deref(), Some("eth0"));
    assert_eq!(ifs[0].description.as_deref(), Some("uplink"));
    assert_eq!(ifs[0].filter.as_deref(), Some("tcp port 80"));
    assert_eq!(ifs[0].ts_unit, TsUnit::Pow10(9));
    assert_eq!(ifs[0].snaplen, 262144);
    assert_eq!(ifs[1].name.as_deref(), Some("lo"));
    assert_eq!(ifs[1].filter, None);
    assert_eq!(ifs[1].snaplen, 128);
    assert_eq!(r.sections(), 1);
}

#[test]
fn pcapng_multi_section_both_orders_and_resolutions() {
    let le = ByteOrder::Little;
    let be = ByteOrder::Big;
    let mut f = Vec::new();
    // Section 1, little-endian: default resolution (µs), then if_tsresol 6.
    f.extend(shb(le));
    f.extend(idb(le, 1, 0, &[]));
    f.extend(idb(le, 101, 65535, &[(2, b"wlan0".to_vec()), (9, vec![6])]));
    f.extend(epb(le, 1, 1_700_000_000_000_001, 99, b"abc"));
    f.extend(epb(le, 0, 5, 1, b"x"));
    // Name resolution, custom and unknown blocks are skipped.
    f.extend(block(le, 4, &[1, 0, 4, 0, 1, 2, 3, 4, 0, 0, 0, 0]));
    f.extend(block(le, 0x0000_0BAD, &[0, 0, 0, 1, 9, 9, 9, 9]));
    f.extend(block(le, 0x1234_5678, &[]));
    // Section 2, big-endian: ns, 2^-10 with an offset, and µs explicitly.
    f.extend(shb(be));
    f.extend(idb(be, 1, 262144, &[(9, vec![9]), (2, b"eth1".to_vec())]));
    let mut off = Vec::new();
    put64(&mut off, be, 100);
    f.extend(idb(be, 1, 262144, &[(9, vec![0x80 | 10]), (14, off)]));
    f.extend(epb(be, 0, 1_700_000_000_123_456_789, 60, b"hello"));
    f.extend(epb(be, 1, 1024 * 3 + 512, 61, b"world!"));
    // Obsolete packet block on interface 1 (u16 id, u16 drops).
    let mut pb = Vec::new();
    put16(&mut pb, be, 1);
    put16(&mut pb, be, 0);
    put32(&mut pb, be, 0);
    put32(&mut pb, be, 2048);
    put32(&mut pb, be, 2);
    put32(&mut pb, be, 70);
    pb.extend_from_slice(b"pb");
    f.extend(block(be, BT_PB, &pb));
    // Simple packet block: interface 0, original length 5, data 5 bytes.
    let mut spb = Vec::new();
    put32(&mut spb, be, 5);
    spb.extend_from_slice(b"spb!!");
    f.extend(block(be, BT_SPB, &spb));
    // Statistics block, skipped.
    f.extend(block(be, 5, &[0; 12]));
    // Section 3, little-endian again, interface id 0 refers to its own IDB.
    f.extend(shb(le));
    f.extend(idb(le, 228, 1500, &[(9, vec![3])]));
    f.extend(epb(le, 0, 1_700_000_000_001, 1500, b"ip"));

    let (got, end, _) = read_all(&f).unwrap();
    end.unwrap();
    let summary: Vec<(usize, u64, u32, &[u8])> = got
        .iter()
        .map(|p| (p.interface, p.ts_ns, p.wire_len, &p.data[..]))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, 1_700_000_000_000_001_000, 99, &b"abc"[..]),
            (0, 5_000, 1, b"x"),
            (2, 1_700_000_000_123_456_789, 60, b"hello"),
            (3, 100_000_000_000 + 3_500_000_000, 61, b"world!"),
            (3, 100_000_000_000 + 2_000_000_000, 70, b"pb"),
            (2, 0, 5, b"spb!!"),
            (4, 1_700_000_000_001_000_000, 1500, b"ip"),
        ]
    );
    let mut r = Reader::new(&f[..]).unwrap();
    while r.next_packet().unwrap().is_some() {}
    assert_eq!(r.sections(), 3);
    let ifs = r.interfaces();
    assert_eq!(ifs.len(), 5);
    assert_eq!(ifs[1].name.as_deref(), Some("wlan0"));
    assert_eq!(ifs[1].linktype, 101);
    assert_eq!(ifs[2].name.as_deref(), Some("eth1"));
    assert_eq!(ifs[3].ts_unit, TsUnit::Pow2(10));
    assert_eq!(ifs[3].ts_offset_s, 100);
    assert_eq!(
        ifs.iter().map(|i| i.section).collect::<Vec<_>>(),
        vec![0, 0, 1, 1, 2]
    );
}

#[test]
fn ts_units() {
    assert_eq!(TsUnit::Pow10(6).to_ns(1_500_000), 1_500_000_000);
    assert_eq!(TsUnit::Pow10(9).to_ns(7), 7);
    assert_eq!(TsUnit::Pow10(0).to_ns(2), 2_000_000_000);
    assert_eq!(TsUnit::Pow10(12).to_ns(5_000), 5);
    assert_eq!(TsUnit::Pow10(127).to_ns(u64::MAX), 0);
    assert_eq!(TsUnit::Pow10(0).to_ns(u64::MAX), u64::MAX);
    assert_eq!(TsUnit::Pow2(0).to_ns(3), 3_000_000_000);
    assert_eq!(TsUnit::Pow2(1).to_ns(3), 1_500_000_000);
    assert_eq!(TsUnit::Pow2(30).to_ns(1 << 30), 1_000_000_000);
    assert_eq!(TsUnit::Pow2(127).to_ns(u64::MAX), 0);
    assert_eq!(TsUnit::from_tsresol(6), TsUnit::Pow10(6));
    assert_eq!(TsUnit::from_tsresol(0x8a), TsUnit::Pow2(10));
    let mut i = Interface {
        linktype: 1,
        snaplen: 0,
        name: None,
        description: None,
        filter: None,
        ts_unit: TsUnit::Pow10(9),
        ts_offset_s: -10,
        section: 0,
    };
    assert_eq!(i.ts_to_ns(5), 0, "negative times clamp to 0");
    i.ts_offset_s = i64::MAX;
    assert_eq!(i.ts_to_ns(5), u64::MAX);
}

fn err_of(bytes: &[u8]) -> FormatError {
    match Reader::new(bytes) {
        Err(e) => e,
        Ok(mut r) => loop {
            match r.next_packet() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("no error"),
                Err(e) => break e,
            }
        },
    }
}

#[test]
fn not_a_capture_file() {
    let e = err_of(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    assert_eq!(e.offset, 0);
    assert_eq!(
        e.to_string(),
        "byte 0: not a pcap or pcapng file (starts with 7f 45 4c 46)"
    );
    assert_eq!(
        err_of(&[]).to_string(),
        "byte 0: not a pcap or pcapng file (it is empty)"
    );
    assert_eq!(
        err_of(&[0xd4, 0xc3]).to_string(),
        "byte 0: not a pcap or pcapng file (starts with d4 c3)"
    );
    let (f, _, _) = pcap_file(TsResolution::Micro, 1);
    assert_eq!(
        err_of(&f[..10]).to_string(),
        "byte 0: file ends in the middle of a file header (truncated: 10 of 24 bytes)"
    );
    let mut v = f.clone();
    v[4] = 3;
    v[5] = 0;
    assert!(matches!(
        err_of(&v).kind,
        FormatErrorKind::UnsupportedVersion { major: 3, .. }
    ));
    let mut s = shb(ByteOrder::Little);
    s[12] = 2;
    assert!(err_of(&s)
        .to_string()
        .contains("unsupported file format version 2.0"));
    let mut s = shb(ByteOrder::Little);
    s[8] = 0;
    assert_eq!(
        err_of(&s).kind.to_string(),
        "section header block has an invalid byte-order magic 00 3c 2b 1a"
    );
}

#[test]
fn pcap_garbage_offsets() {
    let (mut f, starts, _) = pcap_file(TsResolution::Nano, 5);
    // Record 3 claims 9999999 bytes.
    let at = starts[3] + 8;
    f[at..at + 4].copy_from_slice(&9_999_999u32.to_ne_bytes());
    let e = err_of(&f);
    assert_eq!(e.offset, starts[3] as u64);
    assert_eq!(
        e.to_string(),
        format!(
            "byte {}: record claims 9999999 bytes of packet data, more than the limit of 262144 bytes (snapshot length 65535)",
            starts[3]
        )
    );
    // With a large snapshot length the limit is the snapshot length.
    let d: &[u8] = &[0; 4];
    let mut f = pcap_by_hand(ByteOrder::Big, false, 1_000_000, &[(1, 1, 4, d)]);
    f[24 + 8..24 + 12].copy_from_slice(&1_000_001u32.to_be_bytes());
    assert_eq!(
        err_of(&f).to_string(),
        "byte 24: record claims 1000001 bytes of packet data, more than the snapshot length 1000000 allows"
    );
    // Packets read before the bad record are all returned.
    let (mut f, starts, want) = pcap_file(TsResolution::Micro, 5);
    f.truncate(starts[4] + 10);
    let (got, end, off) = read_all(&f).unwrap();
    assert_eq!(got, want[..4]);
    let e = end.unwrap_err();
    assert_eq!(off, starts[4] as u64);
    assert_eq!(
        e.to_string(),
        format!(
            "byte {}: file ends in the middle of a record header (truncated: 10 of 16 bytes)",
            starts[4]
        )
    );
}

#[test]
fn pcapng_garbage_offsets() {
    let (f, starts, _) = pcapng_file(6);
    let epb3 = starts[2 + 3];
    // Bad block lengths.
    for bad in [0u32, 8, 38, u32::MAX] {
        let mut g = f.clone();
        g[epb3 + 4..epb3 + 8].copy_from_slice(&bad.to_ne_bytes());
        let e = err_of(&g);
        assert_eq!(e.offset, epb3 as u64, "length {bad}");
        assert!(matches!(e.kind, FormatErrorKind::BadBlockLength { len } if len == bad));
    }
    // A length that fits but does not match the trailing copy.
    let mut g = f.clone();
    let len = u32::from_ne_bytes(g[epb3 + 4..epb3 + 8].try_into().unwrap());
    g[epb3 + 4..epb3 + 8].copy_from_slice(&(len + 4).to_ne_bytes());
    let e = err_of(&g);
    assert_eq!(e.offset, epb3 as u64);
    assert_eq!(
        e.kind.to_string(),
        format!(
            "block length {} at the start of the block does not match the length {} at its end",
            len + 4,
            u32::from_ne_bytes(
                g[epb3 + len as usize..epb3 + len as usize + 4]
                    .try_into()
                    .unwrap()
            )
        )
    );
    // Unknown interface.
    let mut g = f.clone();
    g[epb3 + 8..epb3 + 12].copy_from_slice(&7u32.to_ne_bytes());
    assert_eq!(
        err_of(&g).to_string(),
        format!("byte {epb3}: packet refers to interface 7, but the section describes only 2 interfaces")
    );
    // Caplen beyond the block.
    let mut g = f.clone();
    g[epb3 + 20..epb3 + 24].copy_from_slice(&200u32.to_ne_bytes());
    let e = err_of(&g);
    assert_eq!(e.offset, epb3 as u64);
    assert!(e.to_string().contains("room for only"), "{e}");
    // Caplen beyond the limit.
    let mut g = f.clone();
    g[epb3 + 20..epb3 + 24].copy_from_slice(&9_999_999u32.to_ne_bytes());
    assert!(matches!(
        err_of(&g).kind,
        FormatErrorKind::CaplenTooLarge {
            caplen: 9_999_999,
            ..
        }
    ));
    // Truncated block.
    let e = err_of(&f[..epb3 + 10]);
    assert_eq!(
        e.to_string(),
        format!("byte {epb3}: file ends in the middle of a block (truncated: 10 of {len} bytes)")
    );
    let e = err_of(&f[..epb3 + 5]);
    assert_eq!(
        e.to_string(),
        format!("byte {epb3}: file ends in the middle of a block header (truncated: 5 of 8 bytes)")
    );
}

#[test]
fn errors_repeat_and_offsets_stay() {
    let (f, starts, _) = pcap_file(TsResolution::Nano, 3);
    let cut = &f[..starts[2] + 20];
    let mut r = Reader::new(cut).unwrap();
    assert!(r.next_packet().unwrap().is_some());
    assert!(r.next_packet().unwrap().is_some());
    for _ in 0..3 {
        let e = r.next_packet().unwrap_err();
        assert_eq!(e.offset, starts[2] as u64);
        assert_eq!(r.offset(), starts[2] as u64);
        assert!(e.is_truncation());
    }
}

/// Every prefix of a small file reads as its complete records, then a clean
/// end (when the prefix ends on a record boundary) or an error at the offset of
/// the first incomplete record.
#[test]
fn truncated_at_every_byte() {
    let files = [
        pcap_file(TsResolution::Micro, 6),
        pcap_file(TsResolution::Nano, 6),
        pcapng_file(6),
    ];
    for (f, starts, want) in files {
        let is_ng = f[0] == 0x0a;
        let header_end = if is_ng { starts[0] } else { 24 };
        for cut in 0..=f.len() {
            let prefix = &f[..cut];
            match read_all(prefix) {
                Err(e) => {
                    assert!(cut < header_end, "cut {cut}: {e}");
                    assert_eq!(e.offset, 0);
                }
                Ok((got, end, off)) => {
                    assert!(cut >= header_end);
                    let last_boundary = starts
                        .iter()
                        .chain([&header_end, &f.len()])
                        .copied()
                        .filter(|&s| s <= cut)
                        .max()
                        .unwrap_or(header_end);
                    // Packets among the complete records.
                    let n_packets = want
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| {
                            let rec = if is_ng { i + 2 } else { *i };
                            starts.get(rec + 1).copied().unwrap_or(f.len()) <= cut
                        })
                        .count();
                    assert_eq!(got, want[..n_packets], "cut {cut}");
                    if cut == last_boundary {
                        assert!(end.is_ok(), "cut {cut}: {:?}", end);
                        assert_eq!(off, cut as u64);
                    } else {
                        let e = end.unwrap_err();
                        assert!(e.is_truncation(), "cut {cut}: {e}");
                        assert_eq!(e.offset, last_boundary as u64, "cut {cut}");
                        assert_eq!(off, last_boundary as u64);
                    }
                }
            }
        }
    }
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    // Pure noise, and noise behind valid headers.
    let (pcap, _, _) = pcap_file(TsResolution::Nano, 0);
    let (ng, starts, _) = pcapng_file(0);
    let ng_head = &ng[..starts[2]];
    for round in 0..3000 {
        let n = rng.below(300) as usize;
        let mut noise: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        let mut f = match round % 3 {
            0 => Vec::new(),
            1 => pcap.clone(),
            _ => ng_head.to_vec(),
        };
        if round % 7 == 0 && n > 8 {
            // Make small length fields more likely.
            noise[4..8].copy_from_slice(&(rng.below(64) as u32 * 4).to_ne_bytes());
        }
        f.extend_from_slice(&noise);
        if let Ok((_, end, off)) = read_all(&f) {
            assert!(off <= f.len() as u64);
            if let Err(e) = end {
                assert_eq!(e.offset, off);
            }
        }
    }
}

#[test]
fn mutated_files_never_panic() {
    let mut rng = Rng(42);
    let files = [pcap_file(TsResolution::Micro, 8).0, pcapng_file(8).0];
    for round in 0..4000 {
        let mut f = files[round % 2].clone();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(f.len() as u64) as usize;
            f[i] = match rng.below(3) {
                0 => rng.next() as u8,
                1 => 0,
                _ => f[i] ^ 0x80,
            };
        }
        let _ = read_all(&f);
    }
}

/// A reader that hands out at most `chunk` bytes per read call.
struct Dribble<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl Read for Dribble<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.chunk.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

#[test]
fn small_reads_and_big_records() {
    // Records larger than the initial buffer, delivered in odd-sized pieces.
    let big = vec![0x5a; 3 << 20];
    let f = pcap_by_hand(
        ByteOrder::host(),
        true,
        4 << 20,
        &[
            (1, 2, 3, &[1, 2, 3]),
            (4, 5, big.len() as u32, &big),
            (6, 7, 1, &[9]),
        ],
    );
    for chunk in [1, 7, 4096, 1 << 20, usize::MAX] {
        let mut r = Reader::new(Dribble { data: &f, chunk }).unwrap();
        let mut sizes = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            sizes.push((p.ts_ns, p.data.len()));
            if chunk == 1 {
                // Reading 3 MiB one byte at a time is slow; stop after the big one.
                if p.data.len() == big.len() {
                    assert!(p.data.iter().all(|&b| b == 0x5a));
                    break;
                }
            }
        }
        if chunk != 1 {
            assert_eq!(
                sizes,
                vec![
                    (1_000_000_002, 3),
                    (4_000_000_005, 3 << 20),
                    (6_000_000_007, 1)
                ]
            );
        }
    }
    // Many small packets across several buffer refills.
    let (f, _, want) = pcapng_file(40_000);
    assert!(f.len() > 2 * BUF_SIZE);
    let (got, end, _) = read_all(&f).unwrap();
    end.unwrap();
    assert_eq!(got, want);
    let mut r = Reader::new(Dribble {
        data: &f,
        chunk: 1000,
    })
    .unwrap();
    let mut n = 0;
    while let Some(p) = r.next_packet().unwrap() {
        assert_eq!(p.data, &want[n].data[..]);
        n += 1;
    }
    assert_eq!(n, want.len());
}

#[test]
fn io_errors_are_wrapped() {
    struct Failing;
    impl Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::other("disk on fire"))
        }
    }
    let e = Reader::new(Failing).unwrap_err();
    assert_eq!(e.to_string(), "byte 0: read error: disk on fire");
    assert!(std::error::Error::source(&e).is_some());
}

#[test]
fn next_packet_ahead_shows_the_kth_next_packet() {
    let n = 50;
    for k in [1, 4] {
        let (f, _, want) = pcap_file(TsResolution::Nano, n);
        let mut r = Reader::new(&f[..]).unwrap();
        let mut i = 0;
        while let Some((p, ahead)) = r.next_packet_ahead(k).unwrap() {
            assert_eq!(p.data, &want[i].data[..], "packet {i}");
            assert_eq!(p.ts_ns, want[i].ts_ns);
            // The whole file is in the buffer: every later packet is shown.
            let expect: &[u8] = want.get(i + k).map_or(&[], |w| &w.data[..]);
            assert_eq!(ahead, expect, "k {k}, packet {i}");
            i += 1;
        }
        assert_eq!(i, n);
    }
    // A file larger than the buffer (refills move the records), with plain
    // reads mixed in: a shown packet is always the right one, and only the
    // few near a refill or after a plain read are missing.
    let n = 80_000;
    let (f, _, want) = pcap_file(TsResolution::Micro, n);
    assert!(f.len() > 2 * BUF_SIZE);
    let mut r = Reader::new(&f[..]).unwrap();
    let (mut i, mut shown) = (0, 0);
    loop {
        if i % 1000 == 999 {
            let p = r.next_packet().unwrap().unwrap();
            assert_eq!(p.data, &want[i].data[..]);
            i += 1;
            continue;
        }
        let Some((p, ahead)) = r.next_packet_ahead(3).unwrap() else {
            break;
        };
        assert_eq!(p.data, &want[i].data[..], "packet {i}");
        if !ahead.is_empty() {
            assert_eq!(ahead, &want[i + 3].data[..], "ahead of packet {i}");
            shown += 1;
        }
        i += 1;
    }
    assert_eq!(i, n);
    // Every tenth packet is empty (shown or not, it looks the same).
    assert!(shown > n * 89 / 100, "{shown} of {n} shown");
    // pcapng: packets as from next_packet, no look-ahead.
    let (f, _, want) = pcapng_file(12);
    let mut r = Reader::new(&f[..]).unwrap();
    let mut got = Vec::new();
    while let Some((p, ahead)) = r.next_packet_ahead(2).unwrap() {
        assert!(ahead.is_empty());
        got.push(p.data.to_vec());
    }
    assert_eq!(got, want.iter().map(|w| w.data.clone()).collect::<Vec<_>>());
}

#[test]
fn interfaces_beyond_the_limit_are_refused() {
    // pcapng_file declares two interfaces: a limit of two reads it all,
    // a limit of one stops at the second interface block.
    let (f, _, pkts) = pcapng_file(4);
    let mut rd = Reader::new(io::Cursor::new(f.clone())).unwrap();
    rd.limit_interfaces(2);
    let mut n = 0;
    while rd.next_packet().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, pkts.len());
    let mut rd = Reader::new(io::Cursor::new(f)).unwrap();
    rd.limit_interfaces(1);
    let e = rd.next_packet().unwrap_err();
    assert!(e.to_string().contains("more than 1 interfaces"), "{e}");
    assert_eq!(rd.interfaces().len(), 1);
}

/// A compressed file whose block fails in the middle (found by the `read`
/// fuzz target: its header names another link type than the encoder coded
/// for, so a record of the block does not decode) keeps giving the same
/// error at the same offset, as pcap and pcapng do; the reader once went
/// on after the bad block and then reported a clean end.
#[test]
fn compressed_errors_repeat_and_offsets_stay() {
    let frame = |i: u8| {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 28, 0, i, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, i]);
        f.extend_from_slice(&[0x9c, 0x40, 0, 53, 0, 8, 0, 0]);
        f
    };
    let header = |linktype| {
        ringcap_compress::FileHeader {
            version: ringcap_compress::VERSION,
            resolution: ringcap_compress::Resolution::Micro,
            linktype,
            snaplen: 262_144,
        }
        .to_bytes()
    };
    let mut body = Vec::new();
    let mut enc = ringcap_compress::Encoder::new(1);
    for i in 0..6 {
        enc.push(1_764_165_600_000_000 + i as u64, 42, &frame(i));
    }
    enc.finish_block(&mut body);
    for i in 6..9 {
        enc.push(1_764_165_600_000_000 + i as u64, 42, &frame(i));
    }
    enc.finish_block(&mut body);
    let mut f = header(1).to_vec();
    f.extend_from_slice(&body);
    let (packets, end, _) = read_all(&f).unwrap();
    assert_eq!(packets.len(), 9);
    end.unwrap();
    // The same blocks under the link type of the fuzzer's input.
    f[..ringcap_compress::FILE_HEADER_LEN].copy_from_slice(&header(0x0080_0001));
    let mut r = Reader::new(&f[..]).unwrap();
    let e = loop {
        match r.next_packet() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("a clean end of a file whose block does not decode"),
            Err(e) => break e,
        }
    };
    let at = r.offset();
    assert_eq!(at, ringcap_compress::FILE_HEADER_LEN as u64);
    for _ in 0..3 {
        let again = r.next_packet().unwrap_err();
        assert_eq!(again.offset, e.offset);
        assert_eq!(again.to_string(), e.to_string());
        assert_eq!(r.offset(), at);
    }
}

/// A record longer than the file's snapshot length is cut to it, as libpcap
/// reads it (`tcpdump -r -w` writes 100 captured bytes of a 166-byte record
/// in a file of snapshot length 100, and a filter on byte 150 matches
/// nothing); the next record is read whole. Snapshot length 0: no cut.
#[test]
fn pcap_record_longer_than_the_snaplen_is_cut_to_it() {
    let long: Vec<u8> = (0..166u32).map(|i| i as u8).collect();
    let short = [9u8; 40];
    let recs: [(u32, u32, u32, &[u8]); 2] = [(1, 0, 200, &long), (2, 0, 40, &short)];
    let f = pcap_by_hand(ByteOrder::host(), false, 100, &recs);
    let (got, end, off) = read_all(&f).unwrap();
    end.unwrap();
    assert_eq!(off, f.len() as u64);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].data, long[..100]);
    assert_eq!(got[0].wire_len, 200);
    assert_eq!(got[1].data, short);
    let f = pcap_by_hand(ByteOrder::host(), false, 0, &recs);
    let (got, _, _) = read_all(&f).unwrap();
    assert_eq!(got[0].data, long);
}
