//! Tests of [`header_len`](super::header_len) on frames built layer by
//! layer (the builders are here), checking every cut of each frame, and
//! over random and mutated bytes. The literal frames cut short are in
//! [`cut`], apart for size.

use super::*;

mod cut;

const NO_MAX: usize = usize::MAX;

fn hl(f: &[u8]) -> usize {
    header_len(f, NO_MAX)
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn vlan(vid: u16, et: u16, payload: &[u8]) -> Vec<u8> {
    cat(&[&vid.to_be_bytes(), &et.to_be_bytes(), payload])
}

fn ipv4_full(proto: u8, frag: u16, options: &[u8], payload: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let hl = 20 + options.len();
    let tl = (hl + payload.len()) as u16;
    let mut h = vec![0x40 | (hl / 4) as u8, 0];
    h.extend_from_slice(&tl.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    h.extend_from_slice(options);
    h.extend_from_slice(payload);
    h
}

fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
    ipv4_full(proto, 0x4000, &[], payload)
}

fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(payload);
    h
}

/// TCP header with `opt_words` 32-bit words of options (NOPs) + payload.
fn tcp(opt_words: usize, payload: &[u8]) -> Vec<u8> {
    let doff = 5 + opt_words as u8;
    let mut h = vec![0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0];
    h.extend_from_slice(&[doff << 4, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    h.resize(h.len() + opt_words * 4, 1);
    h.extend_from_slice(payload);
    h
}

fn udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0xc3, 0x50];
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(payload);
    h
}

/// Extension header (hop-by-hop / routing / destination options) of
/// `(len + 1) * 8` bytes.
fn ext(next: u8, len: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![next, len];
    h.resize(h.len() + usize::from(len) * 8 + 6, 0);
    h.extend_from_slice(payload);
    h
}

fn frag6(next: u8, offset: u16, more: bool, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![next, 0];
    h.extend_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 42]);
    h.extend_from_slice(payload);
    h
}

fn ah(next: u8, payload_len: u8, payload: &[u8]) -> Vec<u8> {
    let len = (usize::from(payload_len) + 2) * 4;
    let mut h = vec![next, payload_len, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1];
    h.resize(len, 0xa5);
    h.extend_from_slice(payload);
    h
}

const DATA: &[u8] = b"0123456789abcdef";

/// Checks the full frame gives the last of `bounds` (where each header
/// ends), every truncation within the headers keeps everything up to the
/// cut (a header cut short is still header), and every truncation after
/// them keeps the headers.
fn check_boundaries(frame: &[u8], bounds: &[usize]) {
    assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
    let last = *bounds.last().unwrap();
    assert_eq!(hl(frame), last, "full frame");
    for cut in 0..=frame.len() {
        let expect = cut.min(last);
        assert_eq!(hl(&frame[..cut]), expect, "cut at {cut} of {bounds:?}");
    }
}

#[test]
fn ipv4_tcp_with_options() {
    let f = eth(0x0800, &ipv4(6, &tcp(5, DATA)));
    check_boundaries(&f, &[0, 14, 34, 74]);
}

#[test]
fn ipv4_with_options_udp() {
    let opts = [0x94, 0x04, 0, 0, 1, 1, 1, 0]; // router alert, NOP, EOL
    let f = eth(0x0800, &ipv4_full(17, 0, &opts, &udp(53, DATA)));
    check_boundaries(&f, &[0, 14, 42, 50]);
    let max_opts = [1u8; 40];
    let f = eth(0x0800, &ipv4_full(6, 0, &max_opts, &tcp(10, DATA)));
    check_boundaries(&f, &[0, 14, 74, 134]);
}

#[test]
fn vlan_and_qinq() {
    let inner = ipv4(6, &tcp(0, DATA));
    let f = eth(0x8100, &vlan(100, 0x0800, &inner));
    check_boundaries(&f, &[0, 14, 18, 38, 58]);
    let f = eth(0x88a8, &vlan(10, 0x8100, &vlan(20, 0x0800, &inner)));
    check_boundaries(&f, &[0, 14, 18, 22, 42, 62]);
    let f = eth(
        0x9100,
        &vlan(10, 0x8100, &vlan(20, 0x86dd, &ipv6(17, &udp(9, DATA)))),
    );
    check_boundaries(&f, &[0, 14, 18, 22, 62, 70]);
}

#[test]
fn arp() {
    let arp = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0,
        0, 0, 0, 10, 0, 0, 2,
    ];
    let mut f = eth(0x0806, &arp);
    f.resize(60, 0); // Ethernet padding
    check_boundaries(&f, &[0, 14, 42]);
    // Non-Ethernet/IPv4 ARP: 8 + 2*8 + 2*16
    let mut big = vec![0x00, 0x20, 0x86, 0xdd, 8, 16, 0, 1];
    big.resize(8 + 16 + 32, 0x77);
    let f = eth(0x0806, &big);
    assert_eq!(hl(&f), 14 + 56);
}

#[test]
fn ipv6_extension_chain() {
    // hop-by-hop(8) -> routing(24) -> fragment(8, first) -> dest opts(16)
    // -> AH(24) -> TCP(32)
    let l4 = tcp(3, DATA);
    let chain = ext(
        43,
        0,
        &ext(44, 2, &frag6(60, 0, true, &ext(51, 1, &ah(6, 4, &l4)))),
    );
    let f = eth(0x86dd, &ipv6(0, &chain));
    check_boundaries(&f, &[0, 14, 54, 62, 86, 94, 110, 134, 166]);
}

#[test]
fn non_first_fragments() {
    // IPv4 offset 185, proto TCP: stop after IP even if bytes look like TCP.
    let f = eth(0x0800, &ipv4_full(6, 0x00b9, &[], &tcp(0, DATA)));
    check_boundaries(&f, &[0, 14, 34]);
    // First fragment (MF, offset 0): continue.
    let f = eth(0x0800, &ipv4_full(6, 0x2000, &[], &tcp(0, DATA)));
    assert_eq!(hl(&f), 54);
    // IPv6 non-first fragment.
    let f = eth(0x86dd, &ipv6(44, &frag6(6, 185, true, &tcp(0, DATA))));
    check_boundaries(&f, &[0, 14, 54, 62]);
    // IPv6 first fragment.
    let f = eth(0x86dd, &ipv6(44, &frag6(17, 0, true, &udp(9, DATA))));
    check_boundaries(&f, &[0, 14, 54, 62, 70]);
}

/// The walker says where a later fragment's bytes start, and only for
/// later fragments (the exclude rule excludes them).
#[test]
fn later_fragments_are_reported() {
    struct Later(Vec<usize>);
    impl Visitor for Later {
        fn later_fragment(&mut self, off: usize) {
            self.0.push(off);
        }
    }
    let later = |f: &[u8]| {
        let mut v = Later(Vec::new());
        visit_headers(f, &mut v);
        v.0
    };
    assert_eq!(
        later(&eth(0x0800, &ipv4_full(6, 0x00b9, &[], &tcp(0, DATA)))),
        [34]
    );
    assert_eq!(
        later(&eth(0x0800, &ipv4_full(6, 0x2000, &[], &tcp(0, DATA)))),
        [0; 0]
    );
    assert_eq!(
        later(&eth(0x86dd, &ipv6(44, &frag6(6, 185, true, &tcp(0, DATA))))),
        [62]
    );
    assert_eq!(
        later(&eth(0x86dd, &ipv6(44, &frag6(17, 0, true, &udp(9, DATA))))),
        [0; 0]
    );
}

#[test]
fn udp_plain() {
    let f = eth(0x0800, &ipv4(17, &udp(53, DATA)));
    check_boundaries(&f, &[0, 14, 34, 42]);
}

#[test]
fn icmp_echo_and_errors() {
    let echo = [8u8, 0, 0, 0, 0, 1, 0, 1];
    let f = eth(0x0800, &ipv4(1, &cat(&[&echo, DATA])));
    check_boundaries(&f, &[0, 14, 34, 42]);
    // Time exceeded quoting IPv4 + UDP header + payload.
    let quoted = ipv4(17, &udp(33434, DATA));
    let err = cat(&[&[11, 0, 0, 0, 0, 0, 0, 0], &quoted]);
    let f = eth(0x0800, &ipv4(1, &err));
    check_boundaries(&f, &[0, 14, 34, 42, 62, 70]);
    // Quoted IPv4 with options.
    let quoted = ipv4_full(6, 0, &[1, 1, 1, 0], &tcp(0, &[]));
    let err = cat(&[&[3, 3, 0, 0, 0, 0, 0, 0], &quoted]);
    let f = eth(0x0800, &ipv4(1, &err));
    check_boundaries(&f, &[0, 14, 34, 42, 66, 74]);
    // Quote that is not IPv4: ICMP header only.
    let err = cat(&[&[3, 3, 0, 0, 0, 0, 0, 0], &[0u8; 28]]);
    let f = eth(0x0800, &ipv4(1, &err));
    assert_eq!(hl(&f), 42);
}

#[test]
fn icmpv6_echo_and_errors() {
    let echo = [128u8, 0, 0, 0, 0, 1, 0, 1];
    let f = eth(0x86dd, &ipv6(58, &cat(&[&echo, DATA])));
    check_boundaries(&f, &[0, 14, 54, 62]);
    // Neighbor solicitation: 8 bytes header, target is payload.
    let ns = cat(&[&[135u8, 0, 0, 0, 0, 0, 0, 0], &[0xfe; 16]]);
    let f = eth(0x86dd, &ipv6(58, &ns));
    assert_eq!(hl(&f), 62);
    // Packet too big quoting IPv6 + TCP.
    let quoted = ipv6(6, &tcp(0, DATA));
    let err = cat(&[&[2, 0, 0, 0, 0, 0, 0x05, 0x00], &quoted]);
    let f = eth(0x86dd, &ipv6(58, &err));
    check_boundaries(&f, &[0, 14, 54, 62, 102, 110]);
}

#[test]
fn sctp() {
    let s = cat(&[&[0x0b, 0x59, 0x0b, 0x59, 0, 0, 0, 1, 0, 0, 0, 0], DATA]);
    let f = eth(0x0800, &ipv4(132, &s));
    check_boundaries(&f, &[0, 14, 34, 46]);
    let f = eth(0x86dd, &ipv6(132, &s));
    check_boundaries(&f, &[0, 14, 54, 66]);
}

#[test]
fn gre() {
    // Key + sequence carrying IPv4/TCP.
    let inner = ipv4(6, &tcp(2, DATA));
    let g = cat(&[&[0x30, 0x00, 0x08, 0x00, 0, 0, 0, 7, 0, 0, 0, 1], &inner]);
    let f = eth(0x0800, &ipv4(47, &g));
    check_boundaries(&f, &[0, 14, 34, 46, 66, 94]);
    // Checksum + key carrying an Ethernet frame (0x6558) with IPv6/UDP.
    let inner = eth(0x86dd, &ipv6(17, &udp(9, DATA)));
    let g = cat(&[&[0xa0, 0x00, 0x65, 0x58, 0, 0, 0, 0, 0, 0, 0, 9], &inner]);
    let f = eth(0x86dd, &ipv6(47, &g));
    check_boundaries(&f, &[0, 14, 54, 66, 80, 120, 128]);
    // Plain GRE carrying IPv6.
    let g = cat(&[&[0, 0, 0x86, 0xdd], &ipv6(59, &[])]);
    let f = eth(0x0800, &ipv4(47, &g));
    check_boundaries(&f, &[0, 14, 34, 38, 78]);
    // PPTP: stops after the GRE header (PPP not decoded).
    let g = cat(&[
        &[0x30, 0x81, 0x88, 0x0b, 0, 4, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0],
        DATA,
    ]);
    let f = eth(0x0800, &ipv4(47, &g));
    assert_eq!(hl(&f), 50);
    // Routing bit: not understood, stop after IP.
    let g = cat(&[
        &[0x40, 0x00, 0x08, 0x00, 0, 0, 0, 0],
        &ipv4(6, &tcp(0, &[])),
    ]);
    let f = eth(0x0800, &ipv4(47, &g));
    assert_eq!(hl(&f), 34);
}

#[test]
fn vxlan() {
    let inner = eth(0x0800, &ipv4(6, &tcp(0, DATA)));
    let vx = cat(&[&[0x08, 0, 0, 0, 0, 0, 42, 0], &inner]);
    let f = eth(0x0800, &ipv4(17, &udp(4789, &vx)));
    check_boundaries(&f, &[0, 14, 34, 42, 50, 64, 84, 104]);
    // I flag clear: not VXLAN, stop after UDP.
    let vx = cat(&[&[0x00, 0, 0, 0, 0, 0, 42, 0], &inner]);
    let f = eth(0x0800, &ipv4(17, &udp(4789, &vx)));
    assert_eq!(hl(&f), 42);
    // Over IPv6.
    let vx = cat(&[&[0x08, 0, 0, 0, 0, 0, 42, 0], &inner]);
    let f = eth(0x86dd, &ipv6(17, &udp(4789, &vx)));
    assert_eq!(hl(&f), 14 + 40 + 8 + 8 + 14 + 20 + 20);
}

#[test]
fn ip_in_ip_esp_mpls() {
    let f = eth(0x0800, &ipv4(4, &ipv4(17, &udp(1, DATA))));
    check_boundaries(&f, &[0, 14, 34, 54, 62]);
    let f = eth(0x0800, &ipv4(41, &ipv6(6, &tcp(0, DATA))));
    check_boundaries(&f, &[0, 14, 34, 74, 94]);
    let f = eth(0x86dd, &ipv6(4, &ipv4(6, &tcp(0, DATA))));
    check_boundaries(&f, &[0, 14, 54, 74, 94]);
    let esp = cat(&[&[0, 0, 1, 0, 0, 0, 0, 5], DATA]);
    let f = eth(0x0800, &ipv4(50, &esp));
    check_boundaries(&f, &[0, 14, 34, 42]);
    // AH after IPv4, then TCP.
    let f = eth(0x0800, &ipv4(51, &ah(6, 4, &tcp(0, DATA))));
    check_boundaries(&f, &[0, 14, 34, 58, 78]);
    // Two MPLS labels, then IPv4/UDP.
    let labels = [0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40];
    let f = eth(0x8847, &cat(&[&labels, &ipv4(17, &udp(1, DATA))]));
    check_boundaries(&f, &[0, 14, 18, 22, 42, 50]);
    // MPLS then something not IP.
    let labels = [0x00, 0x01, 0x01, 0x40, 0x00, 0x00, 0x00, 0x00];
    let f = eth(0x8847, &labels);
    assert_eq!(hl(&f), 18);
}

#[test]
fn unknown_protocols_stop() {
    let f = eth(0x88cc, DATA); // LLDP
    assert_eq!(hl(&f), 14);
    let f = eth(0x0040, DATA); // 802.3 length
    assert_eq!(hl(&f), 14);
    let f = eth(0x0800, &ipv4(2, DATA)); // IGMP
    assert_eq!(hl(&f), 34);
    let f = eth(0x86dd, &ipv6(59, DATA)); // no next header
    assert_eq!(hl(&f), 54);
    let f = eth(0x86dd, &ipv6(0, &ext(59, 0, DATA)));
    assert_eq!(hl(&f), 62);
    // Fragment header after IPv4 is meaningless: stop after IP.
    let f = eth(0x0800, &ipv4(44, &frag6(6, 0, false, &tcp(0, DATA))));
    assert_eq!(hl(&f), 34);
    assert_eq!(hl(&[]), 0);
}

#[test]
fn malformed() {
    // IHL 3.
    let mut ip = ipv4(6, &tcp(0, DATA));
    ip[0] = 0x43;
    assert_eq!(hl(&eth(0x0800, &ip)), 14);
    // Wrong IP version under the IPv4 EtherType.
    let ip6 = ipv6(6, &tcp(0, DATA));
    assert_eq!(hl(&eth(0x0800, &ip6)), 14);
    assert_eq!(hl(&eth(0x86dd, &ipv4(6, &tcp(0, DATA)))), 14);
    // IHL claims more than captured: cut short, kept.
    let mut ip = ipv4(6, &[]);
    ip[0] = 0x4f;
    assert_eq!(hl(&eth(0x0800, &ip)), 34);
    // TCP data offset 2.
    let mut t = tcp(0, DATA);
    t[12] = 0x20;
    assert_eq!(hl(&eth(0x0800, &ipv4(6, &t))), 34);
    // TCP data offset claims 60 bytes with 36 present: cut short, kept.
    let mut t = tcp(0, DATA);
    t[12] = 0xf0;
    assert_eq!(hl(&eth(0x0800, &ipv4(6, &t))), 70);
    // Extension header claiming more than captured: cut short, kept.
    let f = eth(0x86dd, &ipv6(0, &ext(6, 200, &[])[..16]));
    assert_eq!(hl(&f), 70);
    // AH with length 0.
    let mut a = ah(6, 4, &tcp(0, DATA));
    a[1] = 0;
    assert_eq!(hl(&eth(0x86dd, &ipv6(51, &a))), 54);
    // IPv4 total length shorter than the TCP header: padding is not TCP.
    let mut ip = ipv4(6, &[]);
    let mut f = eth(0x0800, &ip);
    f.extend_from_slice(&tcp(0, &[])[..20]);
    assert_eq!(hl(&f), 34);
    // Total length 0 (TSO capture): not confined.
    ip.extend_from_slice(&tcp(0, DATA));
    ip[2] = 0;
    ip[3] = 0;
    assert_eq!(hl(&eth(0x0800, &ip)), 54);
    // Total length 10 (< IHL*4): not confined either.
    ip[3] = 10;
    assert_eq!(hl(&eth(0x0800, &ip)), 54);
}

#[test]
fn max_caps() {
    let f = eth(0x0800, &ipv4(6, &tcp(5, DATA)));
    assert_eq!(header_len(&f, 0), 0);
    assert_eq!(header_len(&f, 10), 10);
    assert_eq!(header_len(&f, 14), 14);
    assert_eq!(header_len(&f, 40), 40);
    assert_eq!(header_len(&f, 74), 74);
    assert_eq!(header_len(&f, 75), 74);
    assert_eq!(header_len(&f[..50], 60), 50);
    assert_eq!(header_len(&f[..10], 5), 5);
}

/// xorshift64* — deterministic, no dependency.
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
}

fn assert_bounded(f: &[u8], rng: &mut Rng) {
    let max = match rng.below(4) {
        0 => usize::MAX,
        1 => rng.below(128),
        _ => rng.below(f.len() + 2),
    };
    let n = header_len(f, max);
    assert!(n <= max.min(f.len()), "{n} > min({max}, {})", f.len());
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let types: [u16; 9] = [
        0x0800, 0x86dd, 0x8100, 0x88a8, 0x0806, 0x8847, 0x9100, 0x6558, 0x1234,
    ];
    let mut buf = vec![0u8; 256];
    for i in 0..200_000 {
        let len = rng.below(buf.len() + 1);
        for b in buf.iter_mut() {
            *b = rng.next() as u8;
        }
        // Bias towards interesting structure so the walk goes deep.
        if i % 2 == 0 {
            let t = types[rng.below(types.len())];
            buf[12..14].copy_from_slice(&t.to_be_bytes());
            buf[14] = if rng.below(2) == 0 { 0x45 } else { 0x60 };
            buf[23] = [6u8, 17, 1, 47, 4, 41, 50, 51, 132][rng.below(9)];
            buf[20] = 6 + rng.below(60) as u8;
        }
        assert_bounded(&buf[..len], &mut rng);
    }
}

#[test]
fn mutated_frames_never_panic() {
    let inner = eth(0x0800, &ipv4(6, &tcp(0, DATA)));
    let vx = cat(&[&[0x08, 0, 0, 0, 0, 0, 42, 0], &inner]);
    let chain = ext(
        43,
        0,
        &ext(
            44,
            2,
            &frag6(60, 0, true, &ext(51, 1, &ah(6, 4, &tcp(3, DATA)))),
        ),
    );
    let seeds = [
        eth(0x0800, &ipv4(6, &tcp(5, DATA))),
        eth(0x0800, &ipv4(17, &udp(4789, &vx))),
        eth(0x86dd, &ipv6(0, &chain)),
        eth(
            0x0800,
            &ipv4(
                47,
                &cat(&[
                    &[0xb0, 0, 0x65, 0x58, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2],
                    &inner,
                ]),
            ),
        ),
        eth(
            0x0800,
            &ipv4(
                1,
                &cat(&[&[11, 0, 0, 0, 0, 0, 0, 0], &ipv4(17, &udp(1, DATA))]),
            ),
        ),
        eth(
            0x8100,
            &vlan(
                1,
                0x8847,
                &cat(&[&[0, 1, 1, 64], &ipv6(58, &[1, 0, 0, 0, 0, 0, 0, 0])]),
            ),
        ),
    ];
    let mut rng = Rng(42);
    for _ in 0..100_000 {
        let mut f = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(f.len());
            f[i] ^= 1 << rng.below(8);
        }
        if rng.below(3) == 0 {
            let i = rng.below(f.len());
            f[i] = rng.next() as u8;
        }
        let cut = rng.below(f.len() + 1);
        assert_bounded(&f[..cut], &mut rng);
        assert_bounded(&f, &mut rng);
    }
}
