//! Compares `header_len` against etherparse, used as an independent oracle.
//!
//! Well-formed frames are generated with etherparse's `PacketBuilder` from a
//! deterministic pseudo-random stream (Ethernet, optional single or double
//! VLAN, IPv4 with options and optional AH or IPv6 with optional extension
//! headers, TCP with options / UDP / ICMP echo / ICMPv6 echo, random
//! payload). For each frame the expected header length is where etherparse
//! says the transport payload starts. A truncation of the same frame keeps
//! everything up to the cut if it falls inside the headers (a header cut
//! short is still header) and the headers otherwise; `LaxSlicedPacket`, which
//! stops at the first incomplete header, agrees wherever the cut is not
//! inside a header.

use etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, EtherType, IpAuthHeader, IpFragOffset, IpHeaders,
    IpNumber, Ipv4Extensions, Ipv4Header, Ipv4Options, Ipv6Extensions, Ipv6FragmentHeader,
    Ipv6Header, Ipv6RawExtHeader, Ipv6RoutingExtensions, LaxNetSlice, LaxSlicedPacket, LinkSlice,
    NetSlice, PacketBuilder, SlicedPacket, TransportSlice, VlanId,
};
use ringcap_wire::header_len;

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        for b in &mut a {
            *b = self.next() as u8;
        }
        a
    }
    fn port(&mut self) -> u16 {
        loop {
            let p = self.next() as u16;
            if p != 4789 {
                return p;
            }
        }
    }
}

fn raw_ext(rng: &mut Rng) -> Ipv6RawExtHeader {
    let len = 6 + 8 * rng.below(4);
    let mut data = vec![0u8; len];
    data[0] = 1; // PadN
    data[1] = (len - 2) as u8;
    Ipv6RawExtHeader::new_raw(IpNumber::UDP, &data).unwrap()
}

fn auth(rng: &mut Rng) -> IpAuthHeader {
    let icv = vec![0x5a; 4 * rng.below(5)];
    IpAuthHeader::new(IpNumber::UDP, 0x100, 1, &icv).unwrap()
}

fn ip_headers(rng: &mut Rng, v6: bool) -> IpHeaders {
    if !v6 {
        let mut h = Ipv4Header::new(0, 64, IpNumber::UDP, rng.bytes(), rng.bytes()).unwrap();
        let opt_len = 4 * rng.below(11);
        h.options = Ipv4Options::try_from(&vec![1u8; opt_len][..]).unwrap();
        let exts = Ipv4Extensions {
            auth: (rng.below(4) == 0).then(|| auth(rng)),
        };
        IpHeaders::Ipv4(h, exts)
    } else {
        let h = Ipv6Header {
            traffic_class: 0,
            flow_label: Default::default(),
            payload_length: 0,
            next_header: IpNumber::UDP,
            hop_limit: 64,
            source: rng.bytes(),
            destination: rng.bytes(),
        };
        let mut exts = Ipv6Extensions::default();
        if rng.below(2) == 0 {
            exts.hop_by_hop_options = (rng.below(2) == 0).then(|| raw_ext(rng));
            exts.destination_options = (rng.below(2) == 0).then(|| raw_ext(rng));
            exts.routing = (rng.below(2) == 0).then(|| Ipv6RoutingExtensions {
                routing: raw_ext(rng),
                final_destination_options: (rng.below(2) == 0).then(|| raw_ext(rng)),
            });
            // Offset 0 and no more fragments: an atomic fragment, which both
            // parsers look through.
            exts.fragment = (rng.below(2) == 0)
                .then(|| Ipv6FragmentHeader::new(IpNumber::UDP, IpFragOffset::ZERO, false, 7));
            exts.auth = (rng.below(2) == 0).then(|| auth(rng));
        }
        IpHeaders::Ipv6(h, exts)
    }
}

fn build(rng: &mut Rng) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(rng.bytes(), rng.bytes());
    let mut payload = vec![0u8; rng.below(80)];
    for b in &mut payload {
        *b = rng.next() as u8;
    }
    let mut out = Vec::new();
    if rng.below(16) == 0 {
        let arp = ArpPacket::new(
            ArpHardwareId::ETHERNET,
            EtherType::IPV4,
            ArpOperation::REQUEST,
            &rng.bytes::<6>(),
            &rng.bytes::<4>(),
            &[0; 6],
            &rng.bytes::<4>(),
        )
        .unwrap();
        eth.arp(arp).write(&mut out).unwrap();
        return out;
    }
    let v6 = rng.below(2) == 0;
    let ip = ip_headers(rng, v6);
    let vid = |rng: &mut Rng| VlanId::try_new(rng.below(4095) as u16).unwrap();
    let step = match rng.below(3) {
        0 => eth.ip(ip),
        1 => eth.single_vlan(vid(rng)).ip(ip),
        _ => eth.double_vlan(vid(rng), vid(rng)).ip(ip),
    };
    match rng.below(4) {
        0 | 1 => {
            let opts = vec![1u8; 4 * rng.below(11)];
            step.tcp(rng.port(), rng.port(), rng.next() as u32, 1000)
                .options_raw(&opts)
                .unwrap()
                .write(&mut out, &payload)
                .unwrap()
        }
        2 => step
            .udp(rng.port(), rng.port())
            .write(&mut out, &payload)
            .unwrap(),
        _ if v6 => step
            .icmpv6_echo_request(1, 2)
            .write(&mut out, &payload)
            .unwrap(),
        _ => step
            .icmpv4_echo_request(1, 2)
            .write(&mut out, &payload)
            .unwrap(),
    }
    out
}

fn offset(frame: &[u8], s: &[u8]) -> usize {
    s.as_ptr() as usize - frame.as_ptr() as usize
}

fn transport_payload<'a>(t: &TransportSlice<'a>) -> &'a [u8] {
    match t {
        TransportSlice::Tcp(t) => t.payload(),
        TransportSlice::Udp(u) => u.payload(),
        TransportSlice::Icmpv4(i) => i.payload(),
        TransportSlice::Icmpv6(i) => i.payload(),
        TransportSlice::Igmp(i) => i.payload(),
    }
}

/// Header length according to etherparse's strict parser.
fn strict_oracle(frame: &[u8]) -> usize {
    let p = SlicedPacket::from_ethernet(frame).expect("etherparse parses the frame");
    if let Some(t) = &p.transport {
        return offset(frame, transport_payload(t));
    }
    match &p.net {
        Some(NetSlice::Arp(a)) => offset(frame, a.slice()) + a.slice().len(),
        Some(n) => offset(frame, n.ip_payload_ref().unwrap().payload),
        None => panic!("no net layer"),
    }
}

/// Header length according to etherparse's lax parser (for truncations).
fn lax_oracle(frame: &[u8]) -> usize {
    let Ok(p) = LaxSlicedPacket::from_ethernet(frame) else {
        return 0;
    };
    if let Some(t) = &p.transport {
        return offset(frame, transport_payload(t));
    }
    match &p.net {
        Some(LaxNetSlice::Arp(a)) => return offset(frame, a.slice()) + a.slice().len(),
        Some(LaxNetSlice::Ipv4(s)) => return offset(frame, s.payload().payload),
        Some(LaxNetSlice::Ipv6(s)) => return offset(frame, s.payload().payload),
        None => {}
    }
    if let Some(ext) = p.link_exts.last() {
        if let Some(pl) = ext.payload() {
            return offset(frame, pl.payload);
        }
    }
    match &p.link {
        Some(LinkSlice::Ethernet2(e)) => offset(frame, e.payload_slice()),
        _ => 0,
    }
}

#[test]
fn matches_etherparse_on_well_formed_frames() {
    let mut rng = Rng(0x0ddb_1a5e_5bad_5eed);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..5000 {
        let frame = build(&mut rng);
        let expect = strict_oracle(&frame);
        seen.insert(expect);
        assert_eq!(
            header_len(&frame, usize::MAX),
            expect,
            "frame #{i}: {frame:02x?}"
        );
        // `max` caps.
        let max = rng.below(frame.len() + 1);
        assert_eq!(header_len(&frame, max), expect.min(max));
    }
    // The generator covers many header combinations (ARP = 42 .. IPv6 with
    // every extension header and a TCP header full of options).
    assert!(seen.len() > 40, "only {} distinct lengths", seen.len());
    assert!(seen.contains(&42));
    assert!(*seen.last().unwrap() > 14 + 8 + 40 + 100 + 60);
}

#[test]
fn matches_etherparse_on_truncated_frames() {
    let mut rng = Rng(0xfeed_f00d_dead_beef);
    let mut inside = 0;
    for i in 0..2000 {
        let frame = build(&mut rng);
        let headers = strict_oracle(&frame);
        for cut in 0..=frame.len() {
            let f = &frame[..cut];
            let got = header_len(f, usize::MAX);
            assert_eq!(
                got,
                cut.min(headers),
                "frame #{i} cut at {cut}: {frame:02x?}"
            );
            // etherparse's lax parser stops at the end of the last complete
            // header: the same, unless the cut is inside a header.
            let lax = lax_oracle(f);
            if lax != got {
                assert!(
                    lax < got && got == cut,
                    "frame #{i} cut at {cut}: lax {lax}"
                );
                inside += 1;
            }
        }
    }
    assert!(inside > 10_000, "only {inside} cuts inside a header");
}

#[test]
fn hand_built_frame_matches() {
    // Ethernet + IPv4 (IHL 6) + TCP (doff 8) + 3 bytes payload.
    let frame: [u8; 80] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0x08, 0x00, //
        0x46, 0x00, 0x00, 0x3b, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 10, 0, 0, 1, 10, 0,
        0, 2, 0x01, 0x01, 0x01, 0x00, //
        0x04, 0xd2, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x80, 0x10, 0x01, 0x00, 0, 0, 0, 0, //
        0x01, 0x01, 0x08, 0x0a, 0, 0, 0, 1, 0, 0, 0, 2, //
        b'a', b'b', b'c', 0, 0, 0, 0, 0, 0, 0,
    ];
    // total length 0x3b = 59 = 24 + 32 + 3, then 7 bytes of Ethernet padding;
    // header_len 14 + 24 + 32 = 70.
    assert_eq!(strict_oracle(&frame), 70);
    assert_eq!(header_len(&frame, usize::MAX), 70);
}
