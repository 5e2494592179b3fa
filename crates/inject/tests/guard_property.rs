//! The guard's rule, for every frame: random sessions of frames of every
//! shape (Ethernet, VLAN, ARP, IPv4 with and without options, fragments,
//! IPv6 with extension headers and fragment headers, IP-in-IP, GRE, VXLAN,
//! TCP, UDP, ICMP of all types, trailing bytes, cut short, bytes flipped,
//! random bytes) through guards of random grants (filters from a list,
//! random settable sets). Every frame it lets out
//!
//! * parses whole with an independent parser (etherparse): Ethernet II,
//!   then ARP, or IPv4 without options or fragmentation, or IPv6 without
//!   extension headers, then UDP, TCP or ICMP echo, and nothing after but
//!   zero padding to 60 bytes;
//! * matches the grant's filter as libpcap's own interpreter judges it;
//! * has the interface's identity, every IP field not settable at its
//!   fixed value, every transport field not settable at the value of the
//!   session's first frame of that protocol to leave, a zero payload unless
//!   settable, and right checksums.
//!
//! Every frame it refuses comes with a known rule and a reason; a frame of
//! a shape it does not understand is always refused; a refusal by the
//! filter is one libpcap agrees with; and a clean frame (a shape it does
//! understand) is refused by nothing but the filter, a tunnel port or a
//! TCP header length other than the session's.

mod support;

use etherparse::{NetHeaders, PacketHeaders, TransportHeader};
use proptest::prelude::*;
use ringcap_policy::SettableField as F;
use ringcap_testkit::frames::{internet_checksum, l4_checksum};
use std::collections::HashMap;
use std::net::IpAddr;
use support::*;

const FILTERS: &[&str] = &[
    "",
    "udp",
    "ip",
    "ip6",
    "tcp",
    "icmp",
    "icmp6",
    "arp",
    "udp dst portrange 33434-33534",
    "ip or ip6",
    "not tcp",
    "udp or icmp",
    "ip proto 4",
    "ip proto 47",
    "ip6 proto 44",
    "ether proto 0x88b5",
    "udp port 4789",
    "tcp[13] & 2 != 0",
    "ip[6:2] & 0x3fff != 0",
    "ip6 and udp",
    "not udp port 53",
];

const RULES: &[&str] = &[
    "size",
    "vlan",
    "ethertype",
    "arp",
    "malformed",
    "ip-options",
    "fragment",
    "ipv6-ext",
    "tunnel",
    "protocol",
    "icmp",
    "fixed",
    "trailing",
    "source",
    "filter",
];

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
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn bytes_below(&mut self, max: u64) -> Vec<u8> {
        let n = self.below(max) as usize;
        self.bytes(n)
    }
    fn port(&mut self) -> u16 {
        match self.below(5) {
            0 => 33434 + self.below(101) as u16,
            1 => [53, 4789, 6081, 8472, 80][self.below(5) as usize],
            _ => self.next() as u16,
        }
    }
}

/// What the generator meant a frame to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A shape the guard understands (it may still be refused by the
    /// filter, a tunnel port, or another TCP header length).
    Clean,
    /// A shape the guard must refuse.
    Foreign,
    /// Anything (mutated, cut, random): no expectation but the rule.
    Any,
}

fn transport4or6(r: &mut Rng, v6: bool, tcp_options: &[u8]) -> (u8, Vec<u8>) {
    let payload = r.bytes_below(40);
    match r.below(3) {
        0 => (17, udp(r.port(), r.port(), &payload)),
        1 => {
            let t = tcp(
                r.port(),
                r.port(),
                r.next() as u32,
                r.next() as u32,
                r.next() as u16,
                r.next() as u16,
                tcp_options,
                &payload,
            );
            (6, t)
        }
        _ => {
            let ty = match (v6, r.below(2)) {
                (false, 0) => 8,
                (false, _) => 0,
                (true, 0) => 128,
                (true, _) => 129,
            };
            (
                if v6 { 58 } else { 1 },
                icmp(ty, 0, r.next() as u16, r.next() as u16, &payload),
            )
        }
    }
}

fn clean(r: &mut Rng, tcp_options: &[u8]) -> Vec<u8> {
    match r.below(5) {
        0 => eth(0x0806, &arp(1 + r.below(2) as u16)),
        1 | 2 => {
            let (proto, seg) = transport4or6(r, false, tcp_options);
            let flags = if r.below(2) == 0 { 0x4000 } else { 0 };
            let dst = [198, 18, 0, r.below(3) as u8];
            let ip = ipv4(
                [198, 19, 1, 1],
                dst,
                proto,
                r.next() as u8,
                r.next() as u8,
                r.next() as u16,
                flags,
                &[],
                &seg,
            );
            eth(0x0800, &ip)
        }
        _ => {
            let (next, seg) = transport4or6(r, true, tcp_options);
            eth(
                0x86dd,
                &ipv6(V6, PEER_V6, next, r.next() as u8, r.next() as u32, &seg),
            )
        }
    }
}

fn foreign(r: &mut Rng, tcp_options: &[u8]) -> Vec<u8> {
    let inner = |r: &mut Rng| {
        let (proto, seg) = transport4or6(r, false, tcp_options);
        ipv4([198, 19, 66, 66], PEER_V4, proto, 64, 0, 1, 0, &[], &seg)
    };
    let u = udp(r.port(), r.port(), &r.bytes(16));
    match r.below(13) {
        0 => {
            let ff = if r.below(2) == 0 {
                0x2000
            } else {
                1 + r.below(100) as u16
            };
            eth(0x0800, &ipv4(V4, PEER_V4, 17, 64, 0, 1, ff, &[], &u))
        }
        1 => {
            let more = r.below(2) == 0;
            let off = if more { 0 } else { r.below(3) as u16 };
            eth(
                0x86dd,
                &ip6(44, &[frag6(17, off, more, r.next() as u32), u].concat()),
            )
        }
        2 => {
            let kind = [0u8, 43, 60][r.below(3) as usize];
            eth(0x86dd, &ip6(kind, &[ext6(17, &[1, 0]), u].concat()))
        }
        3 => eth(0x0800, &ip4(4, &inner(r))),
        4 => eth(0x0800, &ip4(41, &ip6(17, &u))),
        5 => eth(0x0800, &ip4(47, &gre(0x0800, &inner(r)))),
        6 => {
            // (May leave if the session's fixed port is not a tunnel's: it
            // is then plain UDP to that port; see `check_left`.)
            let f = eth(0x0800, &inner(r));
            eth(
                0x0800,
                &ip4(
                    17,
                    &udp(r.port(), 4789, &vxlan(r.next() as u32 & 0xffffff, &f)),
                ),
            )
        }
        7 => {
            let tpid = [0x8100, 0x88a8, 0x9100][r.below(3) as usize];
            vlan(tpid, r.next() as u16, 0x0800, &inner(r))
        }
        8 => eth(
            [0x88b5, 0x8847, 0x88cc, 0x0842, 0x86dd + 1][r.below(5) as usize],
            &r.bytes(46),
        ),
        9 => eth(
            0x0800,
            &ipv4(V4, PEER_V4, 17, 64, 0, 1, 0, &[0x94, 4, 0, 0], &u),
        ),
        10 => {
            let ty = [3u8, 5, 11, 12, 13, 17][r.below(6) as usize];
            eth(0x0800, &ip4(1, &icmp(ty, 0, 0, 0, &inner(r))))
        }
        11 => {
            let ty = [1u8, 2, 3, 4, 133, 134, 135, 136][r.below(8) as usize];
            eth(0x86dd, &ip6(58, &icmp(ty, 0, 0, 0, &r.bytes(24))))
        }
        _ => {
            // A clean frame with non-zero bytes after it.
            let mut f = clean(r, tcp_options);
            let mut tail = r.bytes_below(20);
            tail.push(1);
            f.extend_from_slice(&tail);
            f
        }
    }
}

fn mangled(r: &mut Rng, tcp_options: &[u8]) -> Vec<u8> {
    let mut f = if r.below(2) == 0 {
        clean(r, tcp_options)
    } else {
        foreign(r, tcp_options)
    };
    match r.below(4) {
        0 => {
            let n = r.below(f.len() as u64 + 1) as usize;
            f.truncate(n);
        }
        1 => {
            for _ in 0..1 + r.below(4) {
                let i = r.below(f.len().min(80) as u64) as usize;
                f[i] ^= 1 << r.below(8);
            }
        }
        2 => {
            let i = 14 + r.below(f.len().saturating_sub(14).max(1) as u64) as usize;
            if i < f.len() {
                f[i] = r.next() as u8;
            }
        }
        _ => f = r.bytes_below(120),
    }
    f
}

/// The session's values, as the first frame of each protocol to leave set
/// them (raw header bytes), and the checks of one frame that left.
#[derive(Default)]
struct Session {
    first: HashMap<&'static str, Vec<u8>>,
    df: Option<bool>,
}

fn may(settable: &[F], f: F) -> bool {
    settable.contains(&f)
}

/// Compares `now` with the session's first header of `proto`, except the
/// byte ranges that are settable or always rewritten.
fn same(s: &mut Session, proto: &'static str, now: &[u8], free: &[(usize, usize)]) {
    let first = s.first.entry(proto).or_insert_with(|| now.to_vec());
    assert_eq!(first.len(), now.len(), "{proto}: header length changed");
    for i in 0..now.len() {
        if free.iter().any(|&(a, b)| (a..b).contains(&i)) {
            continue;
        }
        assert_eq!(
            first[i], now[i],
            "{proto}: byte {i} differs from the session's first"
        );
    }
}

fn check_left(grant: &ringcap_policy::InjectGrant, s: &mut Session, f: &[u8]) {
    let st = &grant.settable;
    assert!(
        grant.program.run(f, f.len() as u32) > 0,
        "left but libpcap's filter {:?} refuses it: {f:02x?}",
        grant.filter
    );
    let h = PacketHeaders::from_ethernet_slice(f)
        .unwrap_or_else(|e| panic!("left but does not parse: {e:?}: {f:02x?}"));
    assert!(h.link_exts.is_empty(), "left with a VLAN tag");
    assert_eq!(f[6..12], MAC, "Ethernet source");
    let (l3_end, l4) = match h.net.as_ref().expect("a network layer") {
        NetHeaders::Arp(_) => {
            assert_eq!(f[12..14], [8, 6]);
            assert_eq!(f[22..28], MAC, "ARP sender MAC");
            assert_eq!(f[28..32], V4, "ARP sender address");
            (42, None)
        }
        NetHeaders::Ipv4(ip, ext) => {
            assert!(
                ip.options.is_empty() && ext.is_empty(),
                "IPv4 options or AH"
            );
            assert!(
                !ip.more_fragments && ip.fragment_offset.value() == 0,
                "fragment"
            );
            assert_eq!(f[14] & 0x0f, 5);
            assert_eq!(ip.source, V4, "IPv4 source");
            assert_eq!(internet_checksum(&f[14..34]), 0, "IPv4 checksum");
            assert_eq!(f[20] & 0x80, 0, "reserved flag");
            assert_eq!(
                *s.df.get_or_insert(ip.dont_fragment),
                ip.dont_fragment,
                "DF"
            );
            if !may(st, F::IpTtl) {
                assert_eq!(ip.time_to_live, 64);
            }
            if !may(st, F::IpTos) {
                assert_eq!(f[15], 0, "TOS");
            }
            let end = 14 + usize::from(ip.total_len);
            (
                end,
                Some((
                    IpAddr::from(ip.source),
                    IpAddr::from(ip.destination),
                    ip.protocol.0,
                    34,
                )),
            )
        }
        NetHeaders::Ipv6(ip, ext) => {
            assert!(ext.is_empty(), "IPv6 extension headers");
            assert_eq!(ip.source, V6, "IPv6 source");
            if !may(st, F::Ipv6Hlim) {
                assert_eq!(ip.hop_limit, 64);
            }
            if !may(st, F::IpTos) {
                assert_eq!(ip.traffic_class, 0);
            }
            if !may(st, F::Ipv6Flow) {
                assert_eq!(ip.flow_label.value(), 0);
            }
            let end = 54 + usize::from(ip.payload_length);
            (
                end,
                Some((
                    IpAddr::from(ip.source),
                    IpAddr::from(ip.destination),
                    ip.next_header.0,
                    54,
                )),
            )
        }
    };
    // Nothing after the packet but zero padding to 60 bytes.
    assert!(l3_end <= f.len());
    if l3_end < f.len() {
        assert!(
            f.len() <= 60 && f[l3_end..].iter().all(|&b| b == 0),
            "trailing bytes"
        );
    }
    let Some((src, dst, proto, at)) = l4 else {
        return;
    };
    let seg = &f[at..l3_end];
    let free = |fields: &[(F, usize, usize)]| -> Vec<(usize, usize)> {
        fields
            .iter()
            .filter(|(field, _, _)| may(st, *field))
            .map(|&(_, a, b)| (a, b))
            .collect()
    };
    let (hl, csum_at) = match h.transport.as_ref().expect("a transport header") {
        TransportHeader::Udp(u) => {
            assert_eq!(proto, 17);
            assert_eq!(usize::from(u.length), seg.len(), "UDP length");
            assert!(
                !ringcap_inject::TUNNEL_PORTS.contains(&u.destination_port),
                "left to a tunnel port"
            );
            let mut fr = free(&[(F::UdpSport, 0, 2), (F::UdpDport, 2, 4)]);
            fr.push((4, 8));
            same(s, "udp", &seg[..8], &fr);
            (8, 6)
        }
        TransportHeader::Tcp(t) => {
            assert_eq!(proto, 6);
            let hl = t.header_len();
            let mut fr = free(&[
                (F::TcpSport, 0, 2),
                (F::TcpDport, 2, 4),
                (F::TcpSeq, 4, 8),
                (F::TcpFlags, 13, 14),
            ]);
            fr.push((16, 18));
            let mut head = seg[..hl].to_vec();
            if may(st, F::TcpFlags) {
                head[12] &= 0xfe; // the NS flag
            }
            same(s, "tcp", &head, &fr);
            (hl, 16)
        }
        TransportHeader::Icmpv4(_) | TransportHeader::Icmpv6(_) => {
            let (name, echo) = if proto == 1 {
                ("icmp", [0, 8])
            } else {
                assert_eq!(proto, 58);
                ("icmp6", [128, 129])
            };
            assert!(echo.contains(&seg[0]) && seg[1] == 0, "ICMP echo only");
            let mut fr = free(&[(F::IcmpId, 4, 6), (F::IcmpSeq, 6, 8)]);
            fr.push((2, 4));
            same(s, name, &seg[..8], &fr);
            (8, 2)
        }
        other => panic!("left with {other:?}"),
    };
    if !may(st, F::Payload) {
        assert!(seg[hl..].iter().all(|&b| b == 0), "payload not zeroed");
    }
    let mut z = seg.to_vec();
    let got = u16::from_be_bytes([z[csum_at], z[csum_at + 1]]);
    z[csum_at..csum_at + 2].copy_from_slice(&[0, 0]);
    let want = if proto == 1 {
        internet_checksum(&z)
    } else {
        match l4_checksum(src, dst, proto, &z) {
            0 if proto == 17 => 0xffff,
            c => c,
        }
    };
    assert_eq!(got, want, "transport checksum");
}

fn session(seed: u64, filter: usize, settable_bits: u16) {
    let settable: Vec<&str> = F::ALL
        .iter()
        .enumerate()
        .filter(|(i, _)| settable_bits & (1 << i) != 0)
        .map(|(_, f)| f.name())
        .collect();
    let text = format!(
        "filter = {:?}\nsettable = {:?}\nmax_packets_per_second = 10\n",
        FILTERS[filter], settable
    );
    let grant = grant(&text);
    let mut g = ringcap_inject::Guard::new(&grant, identity()).unwrap();
    let mut r = Rng(seed | 1);
    let mut s = Session::default();
    // One TCP header length per session, so that clean TCP frames agree
    // with the first (another length is refused, rule "fixed").
    let tcp_options: Vec<u8> =
        [vec![], vec![1, 1, 1, 0], vec![2, 4, 5, 0xb4, 1, 1, 4, 2]][r.below(3) as usize].clone();
    for _ in 0..24 {
        let mut kind = match r.below(3) {
            0 => Kind::Clean,
            1 => Kind::Foreign,
            _ => Kind::Any,
        };
        let sent = match kind {
            Kind::Clean => clean(&mut r, &tcp_options),
            Kind::Foreign => {
                let f = foreign(&mut r, &tcp_options);
                // VXLAN (UDP to 4789) is judged by what leaves.
                if f.len() > 37 && f[23] == 17 && f[36..38] == [0x12, 0xb5] {
                    kind = Kind::Any;
                }
                f
            }
            Kind::Any => mangled(&mut r, &tcp_options),
        };
        let mut f = sent.clone();
        match g.check(&mut f) {
            Ok(rewritten) => {
                assert_ne!(kind, Kind::Foreign, "a foreign shape left: {sent:02x?}");
                // The report names no field the client may set, and
                // nothing for a frame that left as it was sent.
                let names = rewritten.names();
                for field in &grant.settable {
                    assert!(!names.contains(&field.name().to_string()), "{names:?}");
                }
                assert!(sent != f || names.is_empty(), "{names:?}");
                check_left(&grant, &mut s, &f);
            }
            Err(e) => {
                assert!(RULES.contains(&e.rule), "unknown rule {}", e.rule);
                assert!(!e.reason.is_empty());
                if e.rule == "filter" {
                    assert_eq!(
                        grant.program.run(&f, f.len() as u32),
                        0,
                        "refused by the filter, which libpcap accepts: {f:02x?}"
                    );
                }
                if kind == Kind::Clean {
                    // A tunnel port, or a TCP header length other than the
                    // session's first (which a mangled frame may have set).
                    assert!(
                        ["filter", "tunnel", "fixed"].contains(&e.rule),
                        "a clean frame refused by {}: {}: {sent:02x?}",
                        e.rule,
                        e.reason
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn what_leaves_is_what_the_grant_allows(
        seed in any::<u64>(),
        filter in 0..FILTERS.len(),
        settable in any::<u16>(),
    ) {
        session(seed, filter, settable);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..20),
        filter in 0..FILTERS.len(),
        settable in any::<u16>(),
    ) {
        let settable: Vec<&str> = F::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| settable & (1 << i) != 0)
            .map(|(_, f)| f.name())
            .collect();
        let grant = grant(&format!(
            "filter = {:?}\nsettable = {:?}\nmax_packets_per_second = 10\n",
            FILTERS[filter], settable
        ));
        let mut g = ringcap_inject::Guard::new(&grant, identity()).unwrap();
        let mut s = Session::default();
        for mut f in frames {
            if g.check(&mut f).is_ok() {
                check_left(&grant, &mut s, &f);
            }
        }
    }
}
