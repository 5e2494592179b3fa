//! The classic-to-eBPF translation (src/cbpf.rs) against libpcap itself:
//! for random tcpdump filters from a grammar (hosts, nets, ports,
//! protocols, VLAN, IPv6, lengths, byte tests, and/or/not) and random
//! programs of classic BPF's ALU, scratch memory and load instructions,
//! each run on random and crafted frames (truncated, VLAN-tagged, IPv6,
//! fragments, IP options), the translated program run by the kernel
//! (BPF_PROG_TEST_RUN, XDP) must return exactly what libpcap's interpreter
//! (`bpf_filter`, as `tcpdump -r` runs it) returns: the same verdict and the
//! same snap length. Needs root (CAP_BPF): skips otherwise, fails when
//! RINGCAP_REQUIRE_PRIVILEGED_TESTS=1.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ringcap_hook::cbpf::{translate, Classic, Finish};
use ringcap_hook::raw::XdpProgram;
use ringcap_stages::bpf::{Instruction, Program};
use ringcap_stages::filter::{compile, Target};

/// True if the kernel lets this process load and run XDP programs.
fn can_load() -> Result<(), String> {
    let prog = translate(
        &[Classic {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 1,
        }],
        Finish::Value,
    )
    .map_err(|e| e.to_string())?;
    let p = XdpProgram::load("ringcap_probe", &prog)
        .map_err(|(e, _)| format!("cannot load an XDP program ({e}): needs root/CAP_BPF"))?;
    p.test_run(&[0u8; 14])
        .map(|_| ())
        .map_err(|e| format!("BPF_PROG_TEST_RUN refused ({e})"))
}

macro_rules! skip_unless_bpf {
    () => {
        if let Err(reason) = can_load() {
            ringcap_testkit::skip(reason);
            return;
        }
    };
}

fn classic(p: &Program) -> Vec<Classic> {
    p.instructions
        .iter()
        .map(|i| Classic {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// Loads the translation of `p` and checks it against libpcap on `frames`.
fn check(p: &Program, frames: &[Vec<u8>], what: &str) -> Result<(), TestCaseError> {
    let insns = translate(&classic(p), Finish::Value)
        .map_err(|e| TestCaseError::fail(format!("{what}: not translated: {e}")))?;
    let prog = XdpProgram::load("ringcap_test", &insns).map_err(|(e, log)| {
        TestCaseError::fail(format!("{what}: the verifier refused ({e}):\n{log}"))
    })?;
    for f in frames {
        let want = p.run(f, f.len() as u32);
        let got = prog
            .test_run(f)
            .map_err(|e| TestCaseError::fail(format!("test run: {e}")))?;
        prop_assert_eq!(got, want, "{}: frame {:02x?}", what, f);
    }
    Ok(())
}

// ---- Filters ----

fn atom() -> impl Strategy<Value = String> {
    let host = prop_oneof![Just("198.18.0.1"), Just("198.18.0.2"), Just("198.19.7.9")];
    let port = prop_oneof![Just(53u16), Just(80), Just(443), Just(1234), 1u16..2000];
    let dir = prop_oneof![Just(""), Just("src "), Just("dst ")];
    prop_oneof![
        (dir.clone(), host.clone()).prop_map(|(d, h)| format!("{d}host {h}")),
        (dir.clone(), port.clone()).prop_map(|(d, p)| format!("{d}port {p}")),
        (prop_oneof![Just("tcp "), Just("udp ")], port.clone())
            .prop_map(|(t, p)| format!("{t}port {p}")),
        (port.clone(), 0u16..100)
            .prop_map(|(a, n)| format!("portrange {a}-{}", a.saturating_add(n))),
        prop_oneof![
            Just("net 198.18.0.0/15"),
            Just("net 198.18.0.0/24"),
            Just("src net 198.19.0.0/16")
        ]
        .prop_map(String::from),
        prop_oneof![
            Just("tcp"),
            Just("udp"),
            Just("icmp"),
            Just("ip"),
            Just("ip6"),
            Just("arp"),
            Just("icmp6"),
            Just("ip proto 47"),
            Just("ip6 proto 17"),
            Just("ip6 host 2001:db8::1"),
            Just("ip6 net 2001:db8::/32"),
            Just("ether host 02:00:00:00:00:01"),
            Just("ether broadcast"),
            Just("ether proto 0x88cc"),
            Just("vlan"),
            Just("ip[6:2] & 0x1fff != 0"),
            Just("ip[6] & 0x20 != 0"),
            Just("tcp[tcpflags] & tcp-syn != 0"),
            Just("icmp[icmptype] = icmp-echo"),
            Just("ip[2:2] / 4 > 10"),
            Just("ip[0] & 0xf > 5"),
            Just("ip[8] * 3 - 1 > 100"),
            Just("udp[0:2] % 7 = 3"),
            Just("tcp[12] >> 4 > 5"),
        ]
        .prop_map(String::from),
        (1u16..4095).prop_map(|v| format!("vlan {v}")),
        (
            prop_oneof![
                Just("len > "),
                Just("len < "),
                Just("less "),
                Just("greater ")
            ],
            14u32..1600
        )
            .prop_map(|(o, n)| format!("{o}{n}")),
        (
            prop_oneof![
                Just("ip"),
                Just("ether"),
                Just("udp"),
                Just("tcp"),
                Just("ip6")
            ],
            0u32..80,
            prop_oneof![Just(1u32), Just(2), Just(4)],
            any::<u32>()
        )
            .prop_map(|(p, o, s, v)| {
                let v = if s == 4 { v } else { v & ((1 << (8 * s)) - 1) };
                format!("{p}[{o}:{s}] = {v}")
            }),
        (0u32..40, 0u32..256).prop_map(|(o, m)| format!("ether[{o}] & {m} != 0")),
    ]
}

fn expr() -> impl Strategy<Value = String> {
    atom().prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) and ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) or ({b})")),
            inner.clone().prop_map(|a| format!("not ({a})")),
            inner.prop_map(|a| format!("vlan and ({a})")),
        ]
    })
}

// ---- Frames ----

fn ipv4(rng: &[u8], proto: u8, frag: u16, ihl: u8, payload: &[u8]) -> Vec<u8> {
    let hosts = [
        [198, 18, 0, 1],
        [198, 18, 0, 2],
        [198, 19, 7, 9],
        [10, 0, 0, 1],
    ];
    let ihl = ihl.clamp(5, 15);
    let mut h = vec![0u8; usize::from(ihl) * 4];
    h[0] = 0x40 | ihl;
    let total = (h.len() + payload.len()) as u16;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[6..8].copy_from_slice(&frag.to_be_bytes());
    h[8] = rng[0];
    h[9] = proto;
    h[12..16].copy_from_slice(&hosts[usize::from(rng[1]) % 4]);
    h[16..20].copy_from_slice(&hosts[usize::from(rng[2]) % 4]);
    h.extend_from_slice(payload);
    h
}

fn ipv6(rng: &[u8], next: u8, frag: bool, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = 0x60;
    let mut body = Vec::new();
    let mut nh = next;
    if frag {
        body.extend_from_slice(&[next, 0, 0, 1, 0, 0, 0, 7]);
        nh = 44;
    }
    body.extend_from_slice(payload);
    h[4..6].copy_from_slice(&(body.len() as u16).to_be_bytes());
    h[6] = nh;
    h[7] = 64;
    h[8] = 0x20;
    h[9] = 0x01;
    h[10] = 0x0d;
    h[11] = 0xb8;
    h[23] = rng[0] & 3;
    h[24] = 0x20;
    h[25] = 0x01;
    h[26] = if rng[1] & 1 == 0 { 0x0d } else { 0x0e };
    h[27] = 0xb8;
    h[39] = rng[1] & 3;
    h.extend_from_slice(&body);
    h
}

fn l4(rng: &[u8], proto: u8) -> Vec<u8> {
    let ports = [53u16, 80, 443, 1234, u16::from_be_bytes([rng[0], rng[1]])];
    let sp = ports[usize::from(rng[2]) % 5];
    let dp = ports[usize::from(rng[3]) % 5];
    let mut b = match proto {
        6 => {
            let mut t = vec![0u8; 20];
            t[12] = (5 + (rng[4] % 3)) << 4;
            t[13] = rng[5];
            t.resize(usize::from(t[12] >> 4) * 4, 0);
            t
        }
        17 => vec![0u8; 8],
        _ => vec![rng[4] % 10, 0, 0, 0],
    };
    if proto == 6 || proto == 17 {
        b[0..2].copy_from_slice(&sp.to_be_bytes());
        b[2..4].copy_from_slice(&dp.to_be_bytes());
    }
    b.extend_from_slice(&rng[6..6 + usize::from(rng[6] % 32)]);
    b
}

/// A frame from random bytes `r` (at least 64): Ethernet, 0-2 VLAN tags,
/// IPv4 (options, fragments) / IPv6 (fragment header) / ARP / other, TCP /
/// UDP / ICMP, then cut to a random length of at least 14 bytes.
fn frame(r: &[u8]) -> Vec<u8> {
    let macs = [[2u8, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [0xff; 6]];
    let mut f = Vec::new();
    f.extend_from_slice(&macs[usize::from(r[0]) % 3]);
    f.extend_from_slice(&macs[usize::from(r[1]) % 2]);
    for _ in 0..(r[2] % 4).saturating_sub(1) {
        f.extend_from_slice(&[0x81, 0x00, r[3] & 0x0f, r[4]]);
    }
    let proto = [6u8, 17, 1, 47, 58][usize::from(r[5]) % 5];
    match r[6] % 5 {
        0 | 1 => {
            f.extend_from_slice(&[0x08, 0x00]);
            let frag = match r[7] % 4 {
                0 => 0x2000,
                1 => u16::from(r[8]) & 0x1fff,
                2 => 0x4000,
                _ => 0,
            };
            let ihl = if r[9].is_multiple_of(4) {
                5 + r[10] % 11
            } else {
                5
            };
            f.extend_from_slice(&ipv4(&r[11..], proto, frag, ihl, &l4(&r[20..], proto)));
        }
        2 => {
            f.extend_from_slice(&[0x86, 0xdd]);
            f.extend_from_slice(&ipv6(
                &r[11..],
                proto,
                r[7].is_multiple_of(3),
                &l4(&r[20..], proto),
            ));
        }
        3 => {
            f.extend_from_slice(&[0x08, 0x06]);
            f.extend_from_slice(&r[11..39]);
        }
        _ => {
            f.extend_from_slice(&[r[11], r[12]]);
            f.extend_from_slice(&r[13..]);
        }
    }
    if r[15].is_multiple_of(3) {
        let cut = 14 + usize::from(u16::from_be_bytes([r[16], r[17]])) % f.len().max(15);
        f.truncate(cut.max(14));
    }
    f.resize(f.len().max(14), 0);
    f
}

fn frames() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 96), 48)
        .prop_map(|rs| rs.iter().map(|r| frame(r)).collect())
}

#[test]
fn tcpdump_filters_give_libpcaps_verdicts_and_snap_lengths() {
    skip_unless_bpf!();
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    });
    let snap = prop_oneof![Just(64u32), Just(96), Just(65535)];
    let translated = std::cell::Cell::new(0);
    runner
        .run(&(expr(), snap, frames()), |(e, snap, frames)| {
            let Ok(p) = compile(&e, 1, snap, Target::Offline) else {
                return Ok(()); // an expression libpcap refuses (e.g. a bad portrange)
            };
            translated.set(translated.get() + 1);
            check(&p, &frames, &e)
        })
        .unwrap();
    let n = translated.get();
    assert!(n > 200, "only {n} filters compiled");
}

/// Random straight-line classic BPF: loads (absolute, indirect, header
/// length, lengths), every ALU operation with a constant or X, scratch
/// memory, tax/txa, conditional skips, then `ret a`.
fn op() -> impl Strategy<Value = (u16, u32)> {
    let alu_k = prop_oneof![
        (Just(0x04u16), any::<u32>()),
        (Just(0x14), any::<u32>()),
        (Just(0x24), any::<u32>()),
        (Just(0x34), 1u32..u32::MAX),
        (Just(0x94), 1u32..u32::MAX),
        (Just(0x44), any::<u32>()),
        (Just(0x54), any::<u32>()),
        (Just(0xa4), any::<u32>()),
        (Just(0x64), 0u32..32),
        (Just(0x74), 0u32..32),
        (Just(0x84), Just(0)),
    ];
    let alu_x = prop_oneof![
        Just(0x0cu16),
        Just(0x1c),
        Just(0x2c),
        Just(0x3c),
        Just(0x9c),
        Just(0x4c),
        Just(0x5c),
        Just(0xac),
        Just(0x6c),
        Just(0x7c)
    ]
    .prop_map(|c| (c, 0));
    let load = prop_oneof![
        (prop_oneof![Just(0x20u16), Just(0x28), Just(0x30)], 0u32..80),
        (prop_oneof![Just(0x40u16), Just(0x48), Just(0x50)], 0u32..80),
        (Just(0xb1u16), 0u32..80),
        (Just(0x80u16), Just(0)),
        (Just(0x81u16), Just(0)),
        (Just(0x00u16), any::<u32>()),
        (Just(0x01u16), prop_oneof![0u32..70, any::<u32>()]),
        (
            prop_oneof![Just(0x02u16), Just(0x03), Just(0x60), Just(0x61)],
            0u32..16
        ),
        (prop_oneof![Just(0x07u16), Just(0x87)], Just(0)),
        (
            prop_oneof![Just(0x15u16), Just(0x25), Just(0x35), Just(0x45)],
            any::<u32>()
        ),
        (
            prop_oneof![Just(0x1du16), Just(0x2d), Just(0x3d), Just(0x4d)],
            Just(0)
        ),
    ];
    prop_oneof![alu_k, alu_x, load]
}

#[test]
fn classic_instructions_give_libpcaps_results() {
    skip_unless_bpf!();
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        prop::collection::vec(op(), 1..24),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 14..120), 16),
    );
    runner
        .run(&strategy, |(ops, frames)| {
            let mut insns: Vec<Instruction> = Vec::new();
            for (code, k) in ops {
                // A conditional jump skips the next instruction when true.
                let jt = u8::from(code & 0x07 == 0x05);
                insns.push(Instruction { code, jt, jf: 0, k });
            }
            // A skip just before the return would land past it.
            if let Some(last) = insns.last_mut() {
                last.jt = 0;
            }
            insns.push(Instruction {
                code: 0x16,
                jt: 0,
                jf: 0,
                k: 0,
            });
            // Scratch memory is read only after a store on every path
            // (libpcap's interpreter leaves it uninitialised; the kernel
            // refuses such programs): a store right after a conditional
            // skip does not count.
            let mut written = [false; 16];
            for (n, i) in insns.iter().enumerate() {
                let skippable = n > 0 && insns[n - 1].code & 0x07 == 0x05;
                match i.code {
                    0x02 | 0x03 if !skippable => written[i.k as usize % 16] = true,
                    0x60 | 0x61 => prop_assume!(written[i.k as usize % 16]),
                    _ => {}
                }
            }
            let p = Program {
                instructions: insns,
            };
            prop_assume!(p.validated().is_some());
            check(&p, &frames, &format!("{:?}", p.instructions))
        })
        .unwrap();
}

#[test]
fn crafted_frames_at_the_edges() {
    skip_unless_bpf!();
    // Each filter on frames cut at every length from 14 to its end: every
    // bounds check meets the packet's end once.
    let mut r = [0u8; 96];
    for (i, b) in r.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37);
    }
    r[2] = 2; // one VLAN tag
    let mut full = Vec::new();
    for kind in 0..5u8 {
        r[6] = kind;
        r[15] = 1; // not cut
        full.push(frame(&r));
    }
    for e in [
        "vlan and tcp port 443",
        "ip6 and udp",
        "ip[6:2] & 0x1fff = 0 and udp port 53",
        "tcp[13] & 2 != 0",
        "len > 60 or arp",
        "not ip",
    ] {
        let p = compile(e, 1, 96, Target::Offline).unwrap();
        let mut frames = Vec::new();
        for f in &full {
            for n in 14..=f.len() {
                frames.push(f[..n].to_vec());
            }
        }
        check(&p, &frames, e).unwrap();
    }
}
