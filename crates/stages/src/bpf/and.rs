//! [`Program::and`]: one program out of an administrator's and a client's,
//! built at the instruction level, with the checks it relies on and the
//! differential tests that hold it to libpcap's results on both. Apart from
//! the parent because it is the one rewrite whose soundness is a security
//! matter (a client program must not widen what the framework allows).

use super::{
    is_accepting_ret, ja, jump, ret, stmt, Instruction, Program, BPF_A, BPF_CLASS_MASK, BPF_IMM,
    BPF_JA, BPF_JGT, BPF_JMP, BPF_K, BPF_LD, BPF_LDX, BPF_OP_MASK, BPF_RET, BPF_RVAL_MASK, BPF_W,
    BPF_X, MAX_INSTRUCTIONS,
};

impl Program {
    /// Combines a framework program (an administrator's) and a client program
    /// into one that accepts a packet only if both accept it, and then keeps
    /// the smaller of the two snap lengths: for every packet,
    /// `and(f, c).run(p) == if f.run(p) == 0 || c.run(p) == 0 { 0 } else { min(f.run(p), c.run(p)) }`.
    ///
    /// Built at the instruction level, never by pasting filter text, so no
    /// client expression can change how the framework is parsed. Layout:
    ///
    /// ```text
    /// framework, with each `ret #kf` (kf > 0) replaced by `ja` to the copy for kf
    /// for each distinct kf:  ld #0; ldx #0; client, each `ret #kc` (kc > 0) → `ret #min(kc, kf)`,
    ///                                                 each `ret A` → `ja` to the clamp for kf
    /// for each distinct kf (only if the client has `ret A`):  jgt #kf; ret #kf; ret A
    /// ```
    ///
    /// Why this shape:
    /// - The framework runs first and unchanged except at its accepting
    ///   returns; `ret #0` stays, so whatever the framework rejects is
    ///   rejected before a client instruction runs. Each replacement is one
    ///   instruction for one, so the framework's relative jumps stay valid,
    ///   and `ja` has a 32-bit offset, so the client can be anywhere after it.
    /// - The client is copied once per distinct framework snap length with
    ///   that length folded into its constant returns, instead of remembering
    ///   the framework's value in scratch memory, which libpcap's programs use
    ///   themselves. libpcap's output (after [`Program::set_snaplen`]) has one
    ///   accepting value, so there is one copy.
    /// - `ld #0; ldx #0` gives the client the zeroed registers it would have
    ///   run with alone (the kernel and libpcap start with A = X = 0).
    /// - The client's jumps are relative and stay inside its own copy (checked
    ///   below), so a client program cannot reach framework code.
    ///
    /// An empty program accepts everything (libpcap's rule), so an empty side
    /// gives the other side back. A framework whose accepting returns are not
    /// constants (`ret A`) is refused: its value would have to be carried past
    /// the client's code in scratch memory, and libpcap never emits one.
    /// `ret X` is refused on either side (the kernel does not take it).
    pub fn and(framework: &Program, client: &Program) -> Result<Program, String> {
        check_shape(framework, "framework")?;
        check_shape(client, "client")?;
        if framework.instructions.is_empty() {
            return Ok(client.clone());
        }
        if client.instructions.is_empty() {
            return Ok(framework.clone());
        }
        if let Some(pc) = framework
            .instructions
            .iter()
            .position(|i| i.code & BPF_CLASS_MASK == BPF_RET && i.code & BPF_RVAL_MASK != BPF_K)
        {
            return Err(format!(
                "the framework program returns a computed value at instruction {pc}; only constant returns can be combined"
            ));
        }
        // The framework's distinct accepting values, in order of appearance.
        let mut caps: Vec<u32> = Vec::new();
        for insn in &framework.instructions {
            if is_accepting_ret(insn) && !caps.contains(&insn.k) {
                caps.push(insn.k);
            }
        }
        let nf = framework.instructions.len();
        let nc = client.instructions.len();
        let copy_len = 2 + nc;
        let returns_a = client.instructions.iter().any(is_ret_a);
        let clamps_at = nf + caps.len() * copy_len;
        let total = clamps_at + if returns_a { 3 * caps.len() } else { 0 };
        if total > MAX_INSTRUCTIONS {
            return Err(format!(
                "the combined filter is {total} instructions long (framework {nf}, client {nc}); the kernel takes at most {MAX_INSTRUCTIONS}"
            ));
        }
        let copy_start = |cap: u32| {
            let i = caps.iter().position(|c| *c == cap).expect("cap collected");
            nf + i * copy_len
        };
        let mut out = Vec::with_capacity(total);
        for (pc, insn) in framework.instructions.iter().enumerate() {
            if is_accepting_ret(insn) {
                out.push(ja((copy_start(insn.k) - pc - 1) as u32));
            } else {
                out.push(*insn);
            }
        }
        for (i, &cap) in caps.iter().enumerate() {
            out.push(stmt(BPF_LD | BPF_IMM, 0));
            out.push(stmt(BPF_LDX | BPF_W | BPF_IMM, 0));
            let clamp = clamps_at + 3 * i;
            for insn in &client.instructions {
                let pc = out.len();
                if is_accepting_ret(insn) {
                    out.push(ret(insn.k.min(cap)));
                } else if is_ret_a(insn) {
                    out.push(ja((clamp - pc - 1) as u32));
                } else {
                    out.push(*insn);
                }
            }
        }
        if returns_a {
            for &cap in &caps {
                // if A > cap { ret cap } else { ret A }: min(A, cap), and A == 0 stays 0.
                out.push(jump(BPF_JGT | BPF_K, cap, 0, 1));
                out.push(ret(cap));
                out.push(stmt(BPF_RET | BPF_A, 0));
            }
        }
        debug_assert_eq!(out.len(), total);
        Ok(Program { instructions: out })
    }
}

fn is_ret_a(insn: &Instruction) -> bool {
    insn.code & BPF_CLASS_MASK == BPF_RET && insn.code & BPF_RVAL_MASK == BPF_A
}

/// What [`Program::and`] relies on in each input: every jump lands inside the
/// program, it ends with a return, and it returns only constants or A. With
/// that, a client copy can never jump out of its own copy (into framework code
/// or a copy with a larger cap), whatever produced it.
fn check_shape(p: &Program, role: &str) -> Result<(), String> {
    let n = p.instructions.len();
    if n == 0 {
        return Ok(());
    }
    if n > MAX_INSTRUCTIONS {
        return Err(format!(
            "the {role} program is {n} instructions long; the kernel takes at most {MAX_INSTRUCTIONS}"
        ));
    }
    for (pc, insn) in p.instructions.iter().enumerate() {
        match insn.code & BPF_CLASS_MASK {
            BPF_JMP => {
                let targets: &[u64] = if insn.code & BPF_OP_MASK == BPF_JA {
                    &[u64::from(insn.k)]
                } else {
                    &[u64::from(insn.jt), u64::from(insn.jf)]
                };
                if targets.iter().any(|off| pc as u64 + 1 + off >= n as u64) {
                    return Err(format!(
                        "the {role} program jumps past its end at instruction {pc}"
                    ));
                }
            }
            BPF_RET if insn.code & BPF_RVAL_MASK == BPF_X => {
                return Err(format!(
                    "the {role} program returns X at instruction {pc}, which the kernel does not take"
                ));
            }
            _ => {}
        }
    }
    if p.instructions[n - 1].code & BPF_CLASS_MASK != BPF_RET {
        return Err(format!("the {role} program does not end with a return"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::bpf::*;

    /// Frames of many kinds, built by hand: Ethernet + IPv4/IPv6 + TCP/UDP/ICMP,
    /// ARP, 802.1Q, with ports, addresses and TTLs drawn from small sets (so
    /// that filters on them match often), some cut short.
    fn frames() -> Vec<Vec<u8>> {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        const PORTS: [u16; 10] = [22, 53, 80, 443, 33434, 33500, 33534, 33535, 1024, 65535];
        const V4: [[u8; 4]; 4] = [
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            [192, 0, 2, 7],
            [198, 18, 5, 5],
        ];
        let mut out = Vec::new();
        for i in 0..1500u32 {
            let r = next();
            let sport = PORTS[(r % 10) as usize];
            let dport = PORTS[(r >> 8) as usize % 10];
            let proto = [6u8, 17, 1, 58, 47][(r >> 16) as usize % 5];
            let payload = (r >> 24) as usize % 200;
            let mut f = vec![0u8; 12];
            f[..6].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, (r >> 40) as u8 & 1]);
            if i % 13 == 0 {
                f.extend_from_slice(&[0x81, 0x00, 0x00, (r >> 44) as u8 % 3]);
            }
            let l4 = |f: &mut Vec<u8>, proto: u8| match proto {
                6 => {
                    f.extend_from_slice(&sport.to_be_bytes());
                    f.extend_from_slice(&dport.to_be_bytes());
                    f.extend_from_slice(&(r as u32).to_be_bytes());
                    f.extend_from_slice(&[0, 0, 0, 0, 0x50, (r >> 48) as u8 & 0x3f, 0xff, 0xff]);
                    f.extend_from_slice(&[0, 0, 0, 0]);
                }
                17 => {
                    f.extend_from_slice(&sport.to_be_bytes());
                    f.extend_from_slice(&dport.to_be_bytes());
                    f.extend_from_slice(&[0, 8 + payload as u8, 0, 0]);
                }
                _ => f.extend_from_slice(&[(r >> 52) as u8 % 12, 0, 0, 0, 0, 1, 0, 1]),
            };
            match (r >> 32) % 8 {
                0..=3 => {
                    f.extend_from_slice(&[0x08, 0x00]);
                    let proto = if proto == 58 { 1 } else { proto };
                    f.extend_from_slice(&[0x45, 0, 0, 0]);
                    f.extend_from_slice(&((r >> 20) as u16).to_be_bytes());
                    let frag = if i % 17 == 0 { 0x20u8 } else { 0x40 };
                    f.extend_from_slice(&[frag, 0, [1u8, 63, 64, 255][(r >> 56) as usize % 4]]);
                    f.extend_from_slice(&[proto, 0, 0]);
                    f.extend_from_slice(&V4[(r >> 58) as usize % 4]);
                    f.extend_from_slice(&V4[(r >> 60) as usize % 4]);
                    l4(&mut f, proto);
                }
                4..=5 => {
                    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 0]);
                    f.extend_from_slice(&[proto, 64]);
                    for a in 0..2u64 {
                        let mut addr = [0u8; 16];
                        addr[0] = 0xfd;
                        addr[15] = ((r >> (58 + a)) & 3) as u8;
                        f.extend_from_slice(&addr);
                    }
                    l4(&mut f, proto);
                }
                6 => {
                    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
                    f.extend_from_slice(&[2; 6]);
                    f.extend_from_slice(&V4[(r >> 58) as usize % 4]);
                    f.extend_from_slice(&[0; 6]);
                    f.extend_from_slice(&V4[(r >> 60) as usize % 4]);
                }
                _ => f.extend_from_slice(&[(r >> 36) as u8, (r >> 44) as u8, 1, 2, 3]),
            }
            f.extend(std::iter::repeat_n(0xa5, payload));
            if i % 11 == 0 {
                let cut = (next() as usize) % f.len();
                f.truncate(cut);
            }
            out.push(f);
        }
        out
    }

    fn offline(expr: &str, snaplen: u32) -> Program {
        crate::filter::compile(expr, 1, snaplen, crate::filter::Target::Offline)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Checks the AND property on every frame (with the wire length both the
    /// captured length and larger, as for a truncated capture).
    fn check_and(f: &Program, c: &Program, frames: &[Vec<u8>], what: &str) -> (usize, usize) {
        let both = Program::and(f, c).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(ffi::validate(&both.instructions), "{what}: invalid program");
        assert!(both.instructions.len() <= MAX_INSTRUCTIONS);
        let (mut accepted, mut framework_accepted) = (0, 0);
        for frame in frames {
            for wire in [frame.len() as u32, frame.len() as u32 + 100] {
                let (a, b) = (f.run(frame, wire), c.run(frame, wire));
                let want = if a == 0 || b == 0 { 0 } else { a.min(b) };
                let got = both.run(frame, wire);
                assert_eq!(got, want, "{what}: frame {frame:02x?}");
                // The framework's verdict bounds the combination, whatever the client is.
                assert!(a > 0 || got == 0, "{what}: widened");
                accepted += (got > 0) as usize;
                framework_accepted += (a > 0) as usize;
            }
        }
        (accepted, framework_accepted)
    }

    const FRAMEWORKS: &[&str] = &[
        "",
        "not port 22",
        "tcp",
        "udp dst portrange 33434-33534",
        "ip host 10.0.0.1",
        "ip6 or arp",
        "icmp or icmp6",
        "not (tcp and port 80)",
        "vlan",
        "greater 100",
        "ip[8] < 64",
        "tcp[tcpflags] & tcp-syn != 0",
    ];

    const CLIENTS: &[&str] = &[
        "",
        "1=1",
        "udp",
        "port 22",
        "not tcp",
        "ip or not ip",
        "greater 0",
        "len >= 0 or 1=1",
        "host 192.0.2.7 and (tcp or udp)",
        "ip6 and udp port 53",
        "arp",
        "tcp[13] = 2 or udp",
        "net 10.0.0.0/8 and not port 443",
    ];

    #[test]
    fn and_is_the_intersection_with_the_smaller_snaplen() {
        let frames = frames();
        let mut seen_accept = 0;
        for (fi, fe) in FRAMEWORKS.iter().enumerate() {
            for (ci, ce) in CLIENTS.iter().enumerate() {
                // Snap lengths around the frame sizes, different on each side,
                // so the minimum shows.
                let fs = [262144, 96, 40][(fi + ci) % 3];
                let cs = [64, 262144, 1500][(fi * 7 + ci) % 3];
                let (f, c) = (offline(fe, fs), offline(ce, cs));
                let what = format!("framework '{fe}' ({fs}), client '{ce}' ({cs})");
                let (acc, _) = check_and(&f, &c, &frames, &what);
                seen_accept += acc;
            }
        }
        assert!(seen_accept > 10_000, "the frames exercise accepting paths");
    }

    /// Strings built to escape a textual AND either fail to compile alone (and
    /// are then never combined) or compile to an ordinary program that the
    /// instruction-level AND keeps inside the framework.
    #[test]
    fn hostile_client_filters_cannot_widen() {
        let frames = frames();
        for bad in [
            "tcp) or (udp",
            "1=1) or (1=1",
            "not (port 22",
            ") or (",
            "tcp or",
            "(",
        ] {
            assert!(
                crate::filter::compile(bad, 1, 262144, crate::filter::Target::Offline).is_err(),
                "'{bad}' should not compile alone"
            );
        }
        for fe in ["not port 22", "udp dst portrange 33434-33534", "arp"] {
            let f = offline(fe, 262144);
            for ce in [
                "",
                "1=1",
                "ip or not ip",
                "not (port 22)",
                "port 22",
                "1=1 or 1=1",
            ] {
                let c = offline(ce, 262144);
                let what = format!("framework '{fe}', client '{ce}'");
                let (acc, facc) = check_and(&f, &c, &frames, &what);
                assert!(acc <= facc, "{what}");
            }
        }
    }

    #[test]
    fn and_with_empty_programs_gives_the_other_side() {
        let f = offline("tcp", 96);
        let empty = Program {
            instructions: vec![],
        };
        assert_eq!(Program::and(&empty, &f).unwrap(), f);
        assert_eq!(Program::and(&f, &empty).unwrap(), f);
        // compile("") is accept_all: the combination is the framework, capped.
        let all = offline("", 64);
        check_and(&f, &all, &frames(), "tcp and accept-all");
        check_and(&all, &f, &frames(), "accept-all and tcp");
    }

    /// Hand-built programs for what libpcap does not emit: a framework with two
    /// accepting values, a client that returns A, and malformed inputs.
    #[test]
    fn and_handles_several_caps_and_computed_client_returns() {
        // framework: keep 30 bytes of IPv4, 50 of anything else but ARP.
        let f = Program {
            instructions: vec![
                stmt(BPF_LD | BPF_H | BPF_ABS, 12),
                jump(BPF_JEQ | BPF_K, 0x0800, 2, 0),
                jump(BPF_JEQ | BPF_K, 0x0806, 2, 0),
                ret(50),
                ret(30),
                ret(0),
            ],
        };
        // client: keep `len - 20` bytes (0 for short frames) via ret A.
        let c = Program {
            instructions: vec![
                stmt(BPF_LD | BPF_W | 0x80 /* BPF_LEN */, 0),
                jump(BPF_JGT | BPF_K, 20, 0, 2),
                stmt(BPF_ALU | 0x10 /* BPF_SUB */ | BPF_K, 20),
                stmt(BPF_RET | BPF_A, 0),
                ret(0),
            ],
        };
        let both = Program::and(&f, &c).unwrap();
        // Two copies of the client (caps 50 and 30) and two clamps.
        assert_eq!(both.instructions.len(), 6 + 2 * (2 + 5) + 2 * 3);
        let frames = frames();
        check_and(&f, &c, &frames, "two caps, ret A");
        let mut lens = std::collections::BTreeSet::new();
        for fr in &frames {
            lens.insert(both.run(fr, fr.len() as u32));
        }
        assert!(lens.contains(&30) && lens.contains(&50) && lens.contains(&0));
        assert!(lens.iter().any(|l| *l > 0 && *l < 30), "{lens:?}");
        // A client that reads registers before setting them sees zeros, as alone.
        let reads_x = Program {
            instructions: vec![stmt(BPF_MISC | 0x80 /* TXA */, 0), stmt(BPF_RET | BPF_A, 0)],
        };
        assert_eq!(
            Program::and(&Program::accept_all(9), &reads_x)
                .unwrap()
                .run(&[0; 20], 20),
            0
        );
    }

    #[test]
    fn and_refuses_what_it_cannot_combine_soundly() {
        let ok = Program::accept_all(64);
        let ret_a = Program {
            instructions: vec![stmt(BPF_RET | BPF_A, 0)],
        };
        assert!(Program::and(&ret_a, &ok).unwrap_err().contains("computed"));
        let ret_x = Program {
            instructions: vec![stmt(BPF_RET | BPF_X, 0)],
        };
        assert!(Program::and(&ok, &ret_x).unwrap_err().contains("returns X"));
        let jumps_out = Program {
            instructions: vec![ja(1), ret(0)],
        };
        assert!(Program::and(&ok, &jumps_out)
            .unwrap_err()
            .contains("past its end"));
        let cond_out = Program {
            instructions: vec![jump(BPF_JEQ | BPF_K, 0, 0, 1), ret(1)],
        };
        assert!(Program::and(&cond_out, &ok)
            .unwrap_err()
            .contains("past its end"));
        let no_ret = Program {
            instructions: vec![stmt(BPF_LD | BPF_IMM, 1)],
        };
        assert!(Program::and(&ok, &no_ret).unwrap_err().contains("return"));
        // Too long together, though each side fits.
        let long = Program {
            instructions: [vec![stmt(BPF_LD | BPF_IMM, 0); 3000], vec![ret(64)]].concat(),
        };
        let e = Program::and(&long, &long).unwrap_err();
        assert!(e.contains("at most 4096"), "{e}");
        // A framework that accepts nothing needs no client copy.
        let none = Program::accept_all(0);
        assert_eq!(Program::and(&none, &long).unwrap(), none);
    }
}
