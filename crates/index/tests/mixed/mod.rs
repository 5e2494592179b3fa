//! Mixed traffic for the index tests: many flows of IPv4, IPv6, VLAN and
//! QinQ, fragments, tunnels (GRE, VXLAN), ICMP errors, ARP, SCTP and a few
//! malformed or cut-short frames, written to pcap (µs, ns) and pcapng files
//! (one with a second interface announced after its first packets), and
//! random tcpdump filters over the same addresses, ports and VLANs.

#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ringcap_format::pcapng::{self, InterfaceDescription};
use ringcap_format::{pcap, TsResolution};
use ringcap_testkit::frames::{self, ArpOp, Endpoints};

/// A small xorshift generator: reproducible from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

pub const PORTS: [u16; 10] = [53, 80, 443, 22, 8080, 5000, 5001, 6081, 123, 179];
pub const VLANS: [u16; 5] = [10, 20, 100, 200, 4094];

pub fn v4(rng: &mut Rng, hosts: u64) -> Ipv4Addr {
    let h = rng.below(hosts);
    Ipv4Addr::new(198, 18, (h / 50) as u8, (h % 50 + 1) as u8)
}

pub fn v6(rng: &mut Rng, hosts: u64) -> Ipv6Addr {
    Ipv6Addr::new(
        0xfd52,
        0x4300,
        0,
        rng.below(2) as u16,
        0,
        0,
        0,
        rng.below(hosts) as u16 + 1,
    )
}

fn port(rng: &mut Rng) -> u16 {
    if rng.chance(60) {
        *rng.pick(&PORTS)
    } else {
        1024 + rng.below(60000) as u16
    }
}

/// One frame of the mix; `hosts` bounds how many addresses there are;
/// `clean` leaves out the malformed and cut-short frames.
pub fn frame(rng: &mut Rng, seq: u32, hosts: u64, max_payload: usize, clean: bool) -> Vec<u8> {
    let mac = |x: u8| [0x02, 0x52, 0x43, 0, 0, x];
    let ep = Endpoints::new(mac(1), mac(2))
        .with_ipv4(v4(rng, hosts), v4(rng, hosts))
        .with_ipv6(v6(rng, hosts), v6(rng, hosts));
    let (sp, dp) = (port(rng), port(rng));
    let len = rng.below(max_payload as u64 + 1) as usize;
    let len = len.max(8);
    let pick = if clean { rng.below(91) } else { rng.below(100) };
    match pick {
        0..=24 => frames::udp4(&ep, seq, sp, dp, len.min(1472)),
        25..=44 => frames::tcp4_with_options(&ep, seq, sp, dp, len.min(1420)),
        45..=49 => frames::icmp4_echo(&ep, seq, sp, len.min(1400)),
        50..=51 => frames::arp(&ep, seq, ArpOp::Request),
        52..=53 => frames::ipv4_fragment_first(&ep, seq, sp, dp, seq as u16),
        54..=55 => frames::ipv4_fragment_later(&ep, seq, seq as u16),
        56..=63 => frames::udp6(&ep, seq, sp, dp, len.min(1400)),
        64..=67 => frames::ipv6_ext_tcp(&ep, seq, sp, dp, *rng.pick(&[0u8, 2, 4]), len.min(1300)),
        68..=69 => frames::icmp6_echo(&ep, seq, sp, len.min(1400)),
        70..=71 => frames::icmp4_port_unreachable(&ep, seq, sp, dp, len.min(500)),
        72 => frames::icmp6_port_unreachable(&ep, seq, sp, dp, len.min(500)),
        73..=79 => frames::vlan_udp4(&ep, seq, *rng.pick(&VLANS), sp, dp, len.min(1400)),
        80..=82 => frames::qinq_udp4(
            &ep,
            seq,
            *rng.pick(&VLANS),
            *rng.pick(&VLANS),
            sp,
            dp,
            len.min(1400),
        ),
        83..=84 => frames::sctp4(&ep, seq, sp, dp, len.min(1400)),
        85..=87 => frames::gre_udp4(&ep, seq, rng.below(1000) as u32, sp, dp, len.min(1300)),
        88..=90 => frames::vxlan(&ep, seq, rng.below(1000) as u32, sp, len.min(1300)),
        91 => frames::truncated_ipv4(&ep, seq, sp, dp),
        92 => frames::tcp_header_cut(&ep, seq, sp, dp, 1 + rng.below(19) as usize),
        93 => frames::udp_header_cut(&ep, seq, sp, dp, 1 + rng.below(7) as usize),
        94 => frames::malformed_ihl(&ep, seq, sp, dp),
        95 => frames::malformed_tcp_offset(&ep, seq, sp, dp),
        96 => frames::runt(&ep, seq, sp, dp),
        97 => {
            // VLAN-tagged IPv6.
            let f = frames::udp6(&ep, seq, sp, dp, len.min(1400));
            frames::insert_vlan_tags(&f, &[(0x8100, *rng.pick(&VLANS))])
        }
        _ => {
            // Cut at a random length, as a snap length would.
            let mut f = frames::udp4(&ep, seq, sp, dp, len.min(1472));
            f.truncate(14 + rng.below(40) as usize);
            f
        }
    }
}

/// One packet of a file: timestamp (ns), wire length, bytes.
pub type Rec = (u64, u32, Vec<u8>);

/// How a file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    PcapNano,
    PcapMicro,
    Pcapng,
    /// pcapng with a second interface announced after a third of the packets.
    PcapngLateIdb,
}

pub fn write_file(path: &Path, kind: Kind, recs: &[Rec]) {
    let mut out = Vec::new();
    match kind {
        Kind::PcapNano | Kind::PcapMicro => {
            let res = if kind == Kind::PcapNano {
                TsResolution::Nano
            } else {
                TsResolution::Micro
            };
            out.extend_from_slice(&pcap::file_header(1, 262_144, res));
            for (ts, wire, d) in recs {
                let mut h = [0u8; 16];
                pcap::write_record_header(&mut h, *ts, d.len() as u32, *wire, res);
                out.extend_from_slice(&h);
                out.extend_from_slice(d);
            }
        }
        Kind::Pcapng | Kind::PcapngLateIdb => {
            out.extend_from_slice(&pcapng::section_header("Linux", "test", None));
            let idb = |name| {
                pcapng::interface_description(&InterfaceDescription {
                    linktype: 1,
                    snaplen: 262_144,
                    name,
                    filter: None,
                    description: None,
                })
            };
            out.extend_from_slice(&idb("a"));
            let late = recs.len() / 3;
            for (i, (ts, wire, d)) in recs.iter().enumerate() {
                if kind == Kind::PcapngLateIdb && i == late {
                    out.extend_from_slice(&idb("b"));
                }
                let iface = u32::from(kind == Kind::PcapngLateIdb && i > late && i % 2 == 0);
                let mut b = vec![0u8; pcapng::epb_len(d.len())];
                pcapng::write_epb_header(&mut b, iface, *ts, d.len() as u32, *wire);
                b[pcapng::EPB_DATA_OFFSET..pcapng::EPB_DATA_OFFSET + d.len()].copy_from_slice(d);
                pcapng::write_epb_trailer(&mut b, d.len() as u32);
                out.extend_from_slice(&b);
            }
        }
    }
    std::fs::write(path, out).unwrap();
}

/// Writes `files` capture files of `per_file` packets each into `dir`,
/// named in time order; timestamps start at `t0` ns and mostly rise (a few
/// step back a little, as packets of several rings do). Returns the paths.
pub fn write_series(
    dir: &Path,
    rng: &mut Rng,
    files: usize,
    per_file: usize,
    t0: u64,
) -> Vec<PathBuf> {
    write_series_of(dir, rng, files, per_file, t0, 120, false)
}

/// [`write_series`] with `hosts` addresses, and without malformed frames if `clean`.
pub fn write_series_of(
    dir: &Path,
    rng: &mut Rng,
    files: usize,
    per_file: usize,
    t0: u64,
    hosts: u64,
    clean: bool,
) -> Vec<PathBuf> {
    let kinds = [
        Kind::PcapNano,
        Kind::PcapMicro,
        Kind::Pcapng,
        Kind::PcapngLateIdb,
    ];
    let mut ts = t0;
    let mut seq = 0;
    let mut paths = Vec::new();
    for f in 0..files {
        let kind = kinds[f % kinds.len()];
        let mut recs = Vec::new();
        for _ in 0..per_file {
            ts += rng.below(2_000_000);
            let mut t = if rng.chance(5) {
                ts - rng.below(1_000_000).min(ts - t0)
            } else {
                ts
            };
            if kind == Kind::PcapMicro {
                t -= t % 1000;
            }
            let d = frame(rng, seq, hosts, 1400, clean);
            seq += 1;
            let wire = d.len() as u32
                + if rng.chance(10) {
                    rng.below(500) as u32
                } else {
                    0
                };
            recs.push((t, wire, d));
        }
        // The first packet of each file is its earliest one, so that name
        // order is time order.
        let first_min = recs.iter().map(|r| r.0).min().unwrap_or(0);
        recs[0].0 = first_min;
        let p = dir.join(format!(
            "cap-{f:03}.{}",
            if matches!(kind, Kind::Pcapng | Kind::PcapngLateIdb) {
                "pcapng"
            } else {
                "pcap"
            }
        ));
        write_file(&p, kind, &recs);
        paths.push(p);
        ts += 1_000_000;
    }
    paths
}

/// A random filter over the same addresses, ports, protocols and VLANs.
pub fn filter(rng: &mut Rng, depth: u32) -> String {
    if depth > 0 && rng.chance(55) {
        let a = filter(rng, depth - 1);
        let b = filter(rng, depth - 1);
        let op = *rng.pick(&["and", "or", "&&", "||"]);
        return match rng.below(4) {
            0 => format!("({a}) {op} ({b})"),
            1 => format!("not ({a}) {op} {b}"),
            _ => format!("{a} {op} {b}"),
        };
    }
    let dir = *rng.pick(&["", "", "src ", "dst ", "src or dst ", "src and dst "]);
    match rng.below(22) {
        0..=3 => format!("{dir}host {}", v4(rng, 120)),
        4 => format!("{dir}host {}", v6(rng, 120)),
        5 => format!("host {} or {}", v4(rng, 120), v4(rng, 120)),
        6 => format!("{dir}net 198.18.{}.0/24", rng.below(3)),
        7 => format!("net 198.19.0.0/16 or net fd52:4300:0:{}::/64", rng.below(2)),
        8..=10 => format!(
            "{}{dir}port {}",
            rng.pick(&["", "tcp ", "udp ", "sctp "]),
            port(rng)
        ),
        11 => format!("port {} or {}", port(rng), port(rng)),
        12 => {
            let a = port(rng);
            format!(
                "portrange {}-{}",
                a,
                a.saturating_add(rng.below(3000) as u16)
            )
        }
        13 => rng
            .pick(&["tcp", "udp", "icmp", "icmp6", "sctp", "arp", "ip", "ip6"])
            .to_string(),
        14 => rng
            .pick(&[
                "ip proto 47",
                "ip6 proto 0",
                "proto 132",
                "ip proto \\udp",
                "ip6 proto 6",
            ])
            .to_string(),
        15 => format!("vlan {} and {}", rng.pick(&VLANS), filter(rng, 0)),
        16 => format!("vlan and vlan {}", rng.pick(&VLANS)),
        17 => format!("not {}", filter(rng, 0)),
        18 => format!("! host {}", v4(rng, 120)),
        19 => format!("ether host 02:52:43:00:00:01 and port {}", port(rng)),
        20 => format!("less {}", 60 + rng.below(1000)),
        _ => format!("tcp[13] & 2 != 0 or udp port {}", port(rng)),
    }
}
