//! The Rust interpreter against libpcap's: the same answer for every packet,
//! on the programs libpcap compiles from real filters and on random programs
//! libpcap's checks accept.

use ringcap_stages::bpf::interp::{Decoded, Paths, LANES};
use ringcap_stages::filter::Target;
use ringcap_stages::{compile, CheckedProgram, Instruction, Program};

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Frames of the shapes filters look at (Ethernet): IPv4 UDP/TCP/ICMP,
/// IPv4 fragments and options, IPv6 with an extension header, ARP, VLAN,
/// and every one of them cut at every length.
fn frames() -> Vec<Vec<u8>> {
    let eth = |ethertype: [u8; 2]| {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ethertype);
        f
    };
    let ipv4 = |proto: u8, ihl: u8, frag: [u8; 2], l4: &[u8]| {
        let mut f = eth([0x08, 0x00]);
        let total = (usize::from(ihl) * 4 + l4.len()) as u16;
        f.extend_from_slice(&[0x40 | ihl, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0x12, 0x34, frag[0], frag[1], 64, proto, 0, 0]);
        f.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
        f.extend(std::iter::repeat_n(1u8, usize::from(ihl) * 4 - 20));
        f.extend_from_slice(l4);
        f
    };
    let udp = [0x9c, 0x40, 0xea, 0x61, 0, 12, 0, 0, 1, 2, 3, 4];
    let tcp = [
        0x00, 0x16, 0xc3, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12, 0xff, 0xff, 0, 0, 0, 0,
    ];
    let icmp = [8, 0, 0, 0, 0, 1, 0, 1];
    let mut all = vec![
        ipv4(17, 5, [0, 0], &udp),
        ipv4(17, 5, [0x20, 0], &udp),
        ipv4(17, 5, [0, 0x10], &udp),
        ipv4(6, 5, [0x40, 0], &tcp),
        ipv4(6, 7, [0, 0], &tcp),
        ipv4(1, 5, [0, 0], &icmp),
    ];
    let mut v6 = eth([0x86, 0xdd]);
    v6.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, 0, 64]);
    v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    v6.extend(std::iter::repeat_n(0u8, 11));
    v6.push(1);
    v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    v6.extend(std::iter::repeat_n(0u8, 11));
    v6.push(2);
    v6.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 0]);
    v6.extend_from_slice(&udp);
    v6[20] = 0; // hop-by-hop, then UDP
    all.push(v6);
    let mut arp = eth([0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 198, 18, 0, 1]);
    arp.extend_from_slice(&[0, 0, 0, 0, 0, 0, 198, 18, 0, 2]);
    all.push(arp);
    let mut vlan = eth([0x81, 0x00]);
    vlan.extend_from_slice(&[0, 7]);
    vlan.extend_from_slice(&ipv4(17, 5, [0, 0], &udp)[12..]);
    all.push(vlan);
    let mut cut = Vec::new();
    for f in &all {
        for n in 0..f.len() {
            cut.push(f[..n].to_vec());
        }
    }
    all.extend(cut);
    all
}

fn same(program: &Program, checked: &CheckedProgram, frame: &[u8], wire_len: u32, what: &str) {
    assert_eq!(
        checked.run(frame, wire_len),
        program.run(frame, wire_len),
        "{what} on {frame:02x?} (wire length {wire_len})"
    );
}

#[test]
fn compiled_filters_agree_with_libpcap() {
    let exprs = [
        "",
        "udp",
        "tcp",
        "udp and not dst port 60001",
        "tcp port 22 or udp port 53",
        "host 198.18.0.1",
        "net 198.18.0.0/15 and not host 198.18.0.2",
        "ip[8] > 32",
        "ip[6:2] & 0x1fff != 0",
        "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn",
        "icmp[icmptype] == icmp-echo",
        "ip6",
        "ip6 and udp",
        "ip6 protochain 17",
        "ip protochain 6",
        "arp",
        "vlan 7",
        "vlan and udp",
        "ether host 02:00:00:00:00:01",
        "less 60",
        "greater 100",
        "len > 40 and len < 100",
        "ip[2:2] / 4 == 10",
        "ip[2:2] % 7 == 3",
        "ip[0] & 0xf << 2 > 20",
        "udp[8:4] = 0x01020304",
        "portrange 1000-50000",
        "ip multicast or ip broadcast",
        "not ip and not ip6",
    ];
    let frames = frames();
    for expr in exprs {
        let program = match compile(expr, 1, 262_144, Target::Offline) {
            Ok(p) => p,
            Err(e) => panic!("{expr}: {e}"),
        };
        let Some(checked) = CheckedProgram::new(program.clone()) else {
            // libpcap's own checks refuse it: nothing to compare.
            assert!(program.validated().is_none(), "{expr}: decoded refused");
            continue;
        };
        for f in &frames {
            same(&program, &checked, f, f.len() as u32, expr);
            same(&program, &checked, f, f.len() as u32 + 1000, expr);
        }
    }
}

/// A random instruction libpcap's interpreter has, with jumps that stay
/// inside a program of `len` instructions from `pc`.
fn random_insn(rng: &mut Rng, pc: usize, len: usize) -> Instruction {
    const CODES: [u16; 48] = [
        0x06, 0x16, 0x20, 0x28, 0x30, 0x40, 0x48, 0x50, 0x80, 0x81, 0x00, 0x01, 0x60, 0x61, 0xb1,
        0x02, 0x03, 0x05, 0x25, 0x35, 0x15, 0x45, 0x2d, 0x3d, 0x1d, 0x4d, 0x0c, 0x1c, 0x2c, 0x3c,
        0x9c, 0x5c, 0x4c, 0xac, 0x6c, 0x7c, 0x04, 0x14, 0x24, 0x34, 0x94, 0x54, 0x44, 0xa4, 0x64,
        0x74, 0x84, 0x07,
    ];
    let code = if rng.below(20) == 0 {
        0x87
    } else {
        CODES[rng.below(CODES.len() as u64) as usize]
    };
    let room = (len - pc - 1) as u64; // instructions after this one
    let jump = |rng: &mut Rng| rng.below(room.min(255)) as u8;
    let k = match code {
        0x60 | 0x61 | 0x02 | 0x03 => rng.below(16) as u32,
        0x34 | 0x94 => 1 + rng.below(9) as u32,
        0x64 | 0x74 => rng.below(32) as u32,
        0x05 => rng.below(room.max(1)) as u32,
        _ => match rng.below(4) {
            0 => rng.below(80) as u32,
            1 => rng.below(4) as u32,
            2 => rng.next() as u32,
            _ => 0xffff_f000u32.wrapping_add(rng.below(64) as u32),
        },
    };
    let (jt, jf) = if matches!(code & 0x07, 0x05) && code != 0x05 {
        (jump(rng), jump(rng))
    } else {
        (0, 0)
    };
    Instruction { code, jt, jf, k }
}

#[test]
fn random_programs_agree_with_libpcap() {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let frames = frames();
    let mut compared = 0u64;
    let mut accepted_some = 0u64;
    for _ in 0..4000 {
        let len = 2 + rng.below(24) as usize;
        let mut insns: Vec<Instruction> = (0..len - 1)
            .map(|pc| random_insn(&mut rng, pc, len))
            .collect();
        insns.push(Instruction {
            code: if rng.below(2) == 0 { 0x06 } else { 0x16 },
            jt: 0,
            jf: 0,
            k: rng.next() as u32,
        });
        // libpcap 1.10 leaves scratch memory uninitialised (newer versions
        // and this interpreter start it at 0): store 0 in every word first.
        let mut instructions: Vec<Instruction> = (0..16)
            .map(|m| Instruction {
                code: 0x02,
                jt: 0,
                jf: 0,
                k: m,
            })
            .collect();
        instructions.extend(insns);
        let program = Program { instructions };
        let Some(checked) = CheckedProgram::new(program.clone()) else {
            assert!(
                program.validated().is_none() || Decoded::new(&program.instructions).is_none(),
                "{program:?}"
            );
            continue;
        };
        for _ in 0..24 {
            let f = &frames[rng.below(frames.len() as u64) as usize];
            let wire = f.len() as u32 + rng.below(3) as u32 * 700;
            if checked.run(f, wire) != 0 {
                accepted_some += 1;
            }
            same(
                &program,
                &checked,
                f,
                wire,
                &format!("{:?}", program.instructions),
            );
            compared += 1;
        }
    }
    // The test means something only if many programs ran and some accepted.
    assert!(compared > 20_000, "{compared} runs compared");
    assert!(accepted_some > 1_000, "{accepted_some} accepted");
}

/// Runs `checked` on groups of `frames` (random sizes and mixes, one set of
/// paths kept across them, as the daemon's hub does) and checks every
/// answer against one run per frame; returns the answers compared.
fn groups_agree(checked: &CheckedProgram, frames: &[Vec<u8>], rng: &mut Rng, what: &str) -> u64 {
    let mut paths = Paths::default();
    let mut compared = 0;
    for round in 0..12 {
        let n = 1 + rng.below(LANES as u64) as usize;
        // Some groups of one kind of frame (most packets on one path), the
        // rest mixed (packets leaving paths, paths replaced).
        let same_kind = round % 3 == 0;
        let first = rng.below(frames.len() as u64) as usize;
        let group: Vec<&[u8]> = (0..n)
            .map(|_| {
                let i = if same_kind {
                    first
                } else {
                    rng.below(frames.len() as u64) as usize
                };
                &frames[i][..]
            })
            .collect();
        let wire: Vec<u32> = group
            .iter()
            .map(|f| f.len() as u32 + rng.below(3) as u32 * 700)
            .collect();
        let mut out = vec![0xdead_beef; n];
        checked.run_group(&mut paths, &group, &wire, &mut out);
        for i in 0..n {
            assert_eq!(
                out[i],
                checked.run(group[i], wire[i]),
                "{what}: lane {i} of {n}, {:02x?} (wire length {})",
                group[i],
                wire[i]
            );
            compared += 1;
        }
    }
    compared
}

#[test]
fn groups_agree_with_single_runs() {
    let frames = frames();
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut compared = 0;
    for expr in [
        "udp and not dst port 60001",
        "tcp port 22 or udp port 53",
        "net 198.18.0.0/15 and not host 198.18.0.2 and udp",
        "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn",
        "ip[2:2] / 4 == 10",
        "vlan and udp",
        "ip6 protochain 17",
        "len > 40 and len < 100",
        "",
    ] {
        let program = compile(expr, 1, 262_144, Target::Offline).expect("compiles");
        let checked = CheckedProgram::new(program.clone()).expect("valid");
        // And single runs agree with libpcap's (the tests above).
        for f in &frames {
            same(&program, &checked, f, f.len() as u32, expr);
        }
        compared += groups_agree(&checked, &frames, &mut rng, expr);
    }
    // Random programs (no stores of their own first: this interpreter
    // starts scratch memory at 0 in both ways of running).
    let mut programs = 0;
    for _ in 0..3000 {
        let len = 2 + rng.below(24) as usize;
        let mut instructions: Vec<Instruction> = (0..len - 1)
            .map(|pc| random_insn(&mut rng, pc, len))
            .collect();
        instructions.push(Instruction {
            code: if rng.below(2) == 0 { 0x06 } else { 0x16 },
            jt: 0,
            jf: 0,
            k: rng.next() as u32,
        });
        let Some(checked) = CheckedProgram::new(Program { instructions }) else {
            continue;
        };
        programs += 1;
        compared += groups_agree(&checked, &frames, &mut rng, "random program");
    }
    assert!(programs > 500, "{programs} random programs");
    assert!(compared > 100_000, "{compared} answers compared");
}

#[test]
fn bad_programs_are_not_decoded() {
    let ret = |k| Instruction {
        code: 0x06,
        jt: 0,
        jf: 0,
        k,
    };
    // Empty, no return at the end, a jump past the end, an unknown opcode,
    // scratch memory out of range.
    assert!(Decoded::new(&[]).is_none());
    let ld = Instruction {
        code: 0x20,
        jt: 0,
        jf: 0,
        k: 0,
    };
    assert!(Decoded::new(&[ld]).is_none());
    let jeq = Instruction {
        code: 0x15,
        jt: 5,
        jf: 0,
        k: 0,
    };
    assert!(Decoded::new(&[jeq, ret(1)]).is_none());
    let bad = Instruction {
        code: 0xff,
        jt: 0,
        jf: 0,
        k: 0,
    };
    assert!(Decoded::new(&[bad, ret(1)]).is_none());
    let st = Instruction {
        code: 0x02,
        jt: 0,
        jf: 0,
        k: 16,
    };
    assert!(Decoded::new(&[st, ret(1)]).is_none());
    // A loop back to itself ends: rejected after the backward-jump budget.
    let back = Instruction {
        code: 0x05,
        jt: 0,
        jf: 0,
        k: u32::MAX,
    };
    let looping = Decoded::new(&[ld, back, ret(1)]).expect("ja -1 decodes");
    assert_eq!(looping.run(&[0; 64], 64), 0, "a jump to itself gives up");
    let to_start = Instruction {
        code: 0x05,
        jt: 0,
        jf: 0,
        k: (-2i32) as u32,
    };
    let d = Decoded::new(&[ld, to_start, ret(1)]).expect("a loop back to 0 decodes");
    assert_eq!(
        d.run(&[0; 64], 64),
        0,
        "an endless loop gives up and rejects"
    );
}
