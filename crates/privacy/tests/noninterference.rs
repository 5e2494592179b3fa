//! "Hidden means hidden": two frames that differ only in the values of
//! hidden fields (and in checksums computed over them: right, partial as
//! with checksum offload, or the same arbitrary value) come out of the
//! rewrite byte for byte the same. Over random structure (VLAN/QinQ, MPLS,
//! GRE, VXLAN, IP-in-IP, IPv6 extension chains, fragments, ICMP and ICMPv6
//! errors, redirects, neighbor discovery with options, MLD, ARP, IPv4
//! options, truncation) from `gen`, and over every test kit frame shape.
//! Also: arbitrary bytes never make the rewrite panic.

mod gen;

use gen::{Cs, Gen, Rng};
use proptest::prelude::*;
use ringcap_privacy::fields::FieldSet;
use ringcap_privacy::{Key, Privacy};
use ringcap_testkit::frames::{self, Endpoints, Shape};
use ringcap_wire::headers::{visit_headers, Visitor};

const MASKS: &[&str] = &[
    "ip.addr",
    "eth.addr",
    "ip.addr,eth.addr",
    "payload",
    "ip.addr,payload",
    "tcp.port,udp.port",
    "ip.ttl,ip.id,ip.tos,ipv6.flow",
    "tcp.seq,tcp.window,tcp.options,icmp.echo",
    "ip.addr,eth.addr,ip.tos,ip.id,ip.ttl,ipv6.flow,tcp.port,udp.port,tcp.seq,tcp.window,tcp.options,icmp.echo,payload",
];

fn rewrite(mask: &str, frame: &[u8]) -> Vec<u8> {
    let p = Privacy::new(FieldSet::parse(mask).unwrap(), None).unwrap();
    let mut f = frame.to_vec();
    p.transform().rewrite_ethernet(&mut f);
    f
}

fn check_pair(mask: &str, structure: u64, h1: u64, h2: u64, cs: Cs) -> Result<(), TestCaseError> {
    let set = FieldSet::parse(mask).unwrap();
    let a = Gen::new(structure, h1, set, cs).frame();
    let b = Gen::new(structure, h2, set, cs).frame();
    prop_assert_eq!(a.len(), b.len());
    let (ra, rb) = (rewrite(mask, &a), rewrite(mask, &b));
    prop_assert!(
        ra == rb,
        "mask {} cs {:?}\n in a {:02x?}\n in b {:02x?}\nout a {:02x?}\nout b {:02x?}\ndiffer at {:?}",
        mask,
        cs,
        a,
        b,
        ra,
        rb,
        ra.iter().zip(&rb).enumerate().filter(|(_, (x, y))| x != y).map(|(i, _)| i).collect::<Vec<_>>()
    );
    Ok(())
}

fn cs_mode(k: u8, v: u16) -> Cs {
    match k % 3 {
        0 => Cs::Correct,
        1 => Cs::Partial,
        _ => Cs::Fixed(v),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn hidden_values_do_not_reach_the_output(
        m in 0..MASKS.len(),
        structure in any::<u64>(),
        h1 in any::<u64>(),
        h2 in any::<u64>(),
        k in any::<u8>(),
        v in any::<u16>(),
    ) {
        check_pair(MASKS[m], structure, h1, h2, cs_mode(k, v))?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        m in 0..MASKS.len(),
    ) {
        let mut f = bytes.clone();
        let p = Privacy::new(FieldSet::parse(MASKS[m]).unwrap(), None).unwrap();
        p.transform().rewrite_ethernet(&mut f);
        prop_assert_eq!(f.len(), bytes.len());
        let anon = Privacy::new(
            FieldSet::EMPTY,
            Some((Key::from_bytes([3; 32]), FieldSet::parse("ip.addr,eth.addr").unwrap())),
        )
        .unwrap();
        let mut g = bytes.clone();
        anon.transform().rewrite_ethernet(&mut g);
        prop_assert_eq!(g.len(), bytes.len());
    }

    /// Random structure, then random corruption: still no panic.
    #[test]
    fn mutated_frames_never_panic(structure in any::<u64>(), flips in any::<u64>()) {
        let mut f = Gen::new(structure, 1, FieldSet::EMPTY, Cs::Correct).frame();
        let mut r = Rng(flips | 1);
        for _ in 0..(r.next() % 6) {
            if !f.is_empty() {
                let i = (r.next() % f.len() as u64) as usize;
                f[i] = r.next() as u8;
            }
        }
        for mask in MASKS {
            rewrite(mask, &f);
        }
    }
}

/// The first IP header and the transport header after it.
#[derive(Default)]
struct First {
    ip: Option<(usize, bool)>,
    l4: Option<(usize, u8)>,
}

impl Visitor for First {
    fn ip(&mut self, off: usize, v6: bool) {
        if self.ip.is_none() {
            self.ip = Some((off, v6));
        }
    }
    fn transport(&mut self, off: usize, proto: u8, _end: usize) {
        if self.l4.is_none() {
            self.l4 = Some((off, proto));
        }
    }
}

/// Turns the outer TCP or UDP checksum into a partial one (the folded
/// pseudo-header sum, as the kernel leaves it for checksum offload).
fn make_partial(f: &mut [u8]) {
    let mut v = First::default();
    visit_headers(f, &mut v);
    let (Some((ip, v6)), Some((l4, proto))) = (v.ip, v.l4) else {
        return;
    };
    let field = match proto {
        6 => l4 + 16,
        17 => l4 + 6,
        _ => return,
    };
    if field + 2 > f.len() {
        return;
    }
    let (addrs, len) = if v6 {
        (
            ip + 8..ip + 40,
            usize::from(u16::from_be_bytes([f[ip + 4], f[ip + 5]])),
        )
    } else {
        let hl = usize::from(f[ip] & 0xf) * 4;
        let tl = usize::from(u16::from_be_bytes([f[ip + 2], f[ip + 3]]));
        (ip + 12..ip + 20, tl.saturating_sub(hl))
    };
    let mut acc = u64::from(proto) + len as u64;
    for c in f[addrs].chunks(2) {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    f[field..field + 2].copy_from_slice(&(acc as u16).to_be_bytes());
}

fn endpoints(r: &mut Rng) -> Endpoints {
    let mut b = [0u8; 48];
    b.iter_mut().for_each(|x| *x = r.next() as u8);
    let m = |o: usize| [b[o], b[o + 1], b[o + 2], b[o + 3], b[o + 4], b[o + 5]];
    let v6 = |o: usize| <[u8; 16]>::try_from(&b[o..o + 16]).unwrap();
    Endpoints::new(m(0), m(6))
        .with_ipv4(
            [b[12], b[13], b[14], b[15]].into(),
            [b[16], b[17], b[18], b[19]].into(),
        )
        .with_ipv6(v6(20).into(), v6(32).into())
}

/// Every test kit shape, between two random sets of endpoints (every
/// address hidden), with right, partial and the same wrong checksums, whole
/// and cut at every length.
#[test]
fn every_test_kit_shape_hides_its_addresses() {
    let mut r = Rng(0x5eed_1234_abcd_0001);
    for round in 0..4u32 {
        let (ea, eb) = (endpoints(&mut r), endpoints(&mut r));
        for (i, shape) in Shape::ALL.iter().enumerate() {
            let seq = round * 100 + i as u32;
            let (mut a, mut b) = (
                frames::build(*shape, &ea, seq, 1),
                frames::build(*shape, &eb, seq, 1),
            );
            assert_eq!(a.len(), b.len(), "{shape:?}");
            match round {
                1 => {
                    make_partial(&mut a);
                    make_partial(&mut b);
                }
                2 => {
                    // One arbitrary value in every checksum-sized slot would
                    // change structure; set the outer transport's only.
                    make_partial(&mut a);
                    make_partial(&mut b);
                    let mut v = First::default();
                    visit_headers(&a, &mut v);
                    if let Some((l4, p)) = v.l4 {
                        let f = if p == 6 { l4 + 16 } else { l4 + 6 };
                        if matches!(p, 6 | 17) && f + 2 <= a.len() {
                            a[f..f + 2].copy_from_slice(&[0x12, 0x34]);
                            b[f..f + 2].copy_from_slice(&[0x12, 0x34]);
                        }
                    }
                }
                _ => {}
            }
            for mask in ["ip.addr,eth.addr", "ip.addr,eth.addr,payload"] {
                for cut in (0..=a.len()).rev() {
                    let (ra, rb) = (rewrite(mask, &a[..cut]), rewrite(mask, &b[..cut]));
                    assert_eq!(ra, rb, "{shape:?} round {round} cut {cut} mask {mask}");
                }
            }
        }
    }
}
