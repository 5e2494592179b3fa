//! libpcap's classic BPF filter translated to an eBPF XDP program at attach
//! time, so that the capture filter runs at the driver and frames it
//! rejects are never copied (and, in monitor mode, dropped right there).
//!
//! The translation keeps classic BPF's meaning exactly as libpcap's
//! interpreter (`bpf_filter`, what `tcpdump -r` runs) and the kernel's
//! socket filters give it, which the property test in tests/cbpf.rs checks
//! against libpcap itself with the kernel running the result:
//!
//! - A (accumulator) is r7, X (index) is r8, both 32-bit and 0 at the start;
//!   the 16 words of scratch memory M[] live on the stack (zeroed first, so
//!   the verifier sees every read initialised); ctx is kept in r6, the
//!   packet's start in r9 and its end in r5.
//! - Packet loads are big-endian and checked against the packet's end
//!   before the read: a load past it ends the program with "no match", as
//!   in classic BPF. Indirect offsets (X + k) are bounded first, so the
//!   verifier can prove the access.
//! - ALU runs in 32 bits (ALU32 instructions) and comparisons are unsigned
//!   32-bit (JMP32), as classic BPF's; division or modulo by X = 0 is "no
//!   match"; a shift by X of 32 or more gives 0 (libpcap's rule; eBPF would
//!   mask the count).
//! - `ret #k` / `ret a` give the snap length; 0 is no match.
//!
//! Refused (the caller falls back to filtering in user space): ancillary
//! loads (libpcap uses them only for live VLAN filters; at XDP the tags are
//! in the bytes), unknown opcodes, constant division by 0 or shifts of 32
//! or more, jumps past the end, programs not ending in a return.
//!
//! What happens on a match is the [`Finish`]: in a capture, the snap length
//! goes into the per-CPU scratch record and the program tail-calls the
//! capture program (bpf/xdp.bpf.c), which copies the bytes; in tests the
//! program returns the snap length itself.

use crate::ebpf::{self, alu, helper, jmp, Insn, FP, R0, R1, R2, R3, R5, R6, R7, R8, R9};

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classic {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// What the program does at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Return the filter's result (the snap length, 0 for no match): for
    /// running the translation alone with BPF_PROG_TEST_RUN.
    Value,
    /// On a match, store the snap length in the scratch record's `cap_len`
    /// (map `scratch`, key 0) and tail-call entry 0 of `progs`; otherwise
    /// return `miss` (XDP_PASS, or XDP_DROP in monitor mode). Every run
    /// adds 1 to entry 0 (packets seen) of the per-CPU `counters`.
    Capture {
        scratch_fd: i32,
        progs_fd: i32,
        counters_fd: i32,
        miss: u32,
    },
}

/// Offset of `cap_len` in `struct ringcap_record` (bpf/record.h).
const CAP_LEN_OFFSET: i16 = 12;
/// Stack layout: M[0..16] at fp-64.., the packet length at fp-72, a map
/// key at fp-80.
const MEM: i16 = -64;
const LEN: i16 = -72;
const KEY: i16 = -80;
/// Largest packet offset the program reads at (the verifier's bound on
/// packet pointer offsets, and more than any XDP frame).
const MAX_OFF: u64 = 0xffff;
/// Ancillary loads start here (SKF_AD_OFF, -0x1000).
const ANCILLARY: u32 = 0xffff_f000;

// Classic BPF fields.
const CLASS: u16 = 0x07;
const SIZE: u16 = 0x18;
const MODE: u16 = 0xe0;
const OP: u16 = 0xf0;
const SRC_X: u16 = 0x08;
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const STX: u16 = 0x03;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const M_IMM: u16 = 0x00;
const M_ABS: u16 = 0x20;
const M_IND: u16 = 0x40;
const M_MEM: u16 = 0x60;
const M_LEN: u16 = 0x80;

/// Where a jump goes.
#[derive(Debug, Clone, Copy)]
enum Label {
    Classic(usize),
    Miss,
    Match,
}

struct Out {
    code: Vec<Insn>,
    fixups: Vec<(usize, Label)>,
}

impl Out {
    fn push(&mut self, i: Insn) {
        self.code.push(i);
    }
    fn jump(&mut self, i: Insn, to: Label) {
        self.fixups.push((self.code.len(), to));
        self.code.push(i);
    }
}

/// Bytes a load of `code`'s size reads.
fn size_of(code: u16) -> Result<(u8, u64), String> {
    match code & SIZE {
        0x00 => Ok((ebpf::W, 4)),
        0x08 => Ok((ebpf::H, 2)),
        0x10 => Ok((ebpf::B, 1)),
        _ => Err(format!("load size of opcode {code:#x}")),
    }
}

/// Loads `size` bytes at constant offset `k` into `dst` (host order), or
/// ends with no match when the packet is shorter.
fn load_abs(out: &mut Out, code: u16, k: u32, dst: u8) -> Result<(), String> {
    let (size, n) = size_of(code)?;
    if k >= ANCILLARY {
        return Err(format!(
            "ancillary load at {:#x} (only the kernel's socket filters have them)",
            k
        ));
    }
    let end = u64::from(k) + n;
    if end > MAX_OFF {
        out.jump(ebpf::ja(0), Label::Miss);
        return Ok(());
    }
    if end <= i16::MAX as u64 {
        out.push(ebpf::mov64_reg(R2, R9));
        out.push(ebpf::alu64_imm(alu::ADD, R2, end as i32));
        out.jump(ebpf::jmp64_reg(jmp::JGT, R2, R5, 0), Label::Miss);
        out.push(ebpf::ldx(size, dst, R9, k as i16));
    } else {
        out.push(ebpf::mov64_reg(R1, R9));
        out.push(ebpf::alu64_imm(alu::ADD, R1, k as i32));
        out.push(ebpf::mov64_reg(R2, R1));
        out.push(ebpf::alu64_imm(alu::ADD, R2, n as i32));
        out.jump(ebpf::jmp64_reg(jmp::JGT, R2, R5, 0), Label::Miss);
        out.push(ebpf::ldx(size, dst, R1, 0));
    }
    if n > 1 {
        out.push(ebpf::to_be(dst, (n * 8) as i32));
    }
    Ok(())
}

/// Loads `size` bytes at X + k into A, or no match past the end.
fn load_ind(out: &mut Out, code: u16, k: u32) -> Result<(), String> {
    let (size, n) = size_of(code)?;
    if u64::from(k) + n > MAX_OFF {
        out.jump(ebpf::ja(0), Label::Miss);
        return Ok(());
    }
    out.push(ebpf::mov32_reg(R1, R8));
    if k != 0 {
        out.push(ebpf::alu64_imm(alu::ADD, R1, k as i32));
    }
    // Bounded, so that the verifier accepts the variable packet offset.
    out.jump(
        ebpf::jmp64_imm(jmp::JGT, R1, (MAX_OFF - n) as i32, 0),
        Label::Miss,
    );
    out.push(ebpf::mov64_reg(R2, R9));
    out.push(ebpf::alu64_reg(alu::ADD, R2, R1));
    out.push(ebpf::mov64_reg(R3, R2));
    out.push(ebpf::alu64_imm(alu::ADD, R3, n as i32));
    out.jump(ebpf::jmp64_reg(jmp::JGT, R3, R5, 0), Label::Miss);
    out.push(ebpf::ldx(size, R7, R2, 0));
    if n > 1 {
        out.push(ebpf::to_be(R7, (n * 8) as i32));
    }
    Ok(())
}

fn mem_slot(k: u32) -> Result<i16, String> {
    if k >= 16 {
        return Err(format!("scratch memory index {k} (16 words)"));
    }
    Ok(MEM + 4 * k as i16)
}

/// Instructions reachable from the first (classic BPF only jumps forward),
/// after checking every jump target is inside the program.
fn reachable(prog: &[Classic]) -> Result<Vec<bool>, String> {
    let n = prog.len();
    let mut seen = vec![false; n];
    if n == 0 {
        return Err("empty program".into());
    }
    seen[0] = true;
    for i in 0..n {
        if !seen[i] {
            continue;
        }
        let c = prog[i];
        let next: Vec<u64> = match c.code & CLASS {
            RET => vec![],
            JMP if c.code & OP == 0 => vec![i as u64 + 1 + u64::from(c.k)],
            JMP => vec![
                i as u64 + 1 + u64::from(c.jt),
                i as u64 + 1 + u64::from(c.jf),
            ],
            _ => vec![i as u64 + 1],
        };
        for t in next {
            if t >= n as u64 {
                return Err(format!(
                    "instruction {i} jumps backwards (a loop, as in protochain) or past the end"
                ));
            }
            seen[t as usize] = true;
        }
    }
    Ok(seen)
}

/// Translates a classic BPF program to eBPF for an XDP program.
pub fn translate(prog: &[Classic], finish: Finish) -> Result<Vec<Insn>, String> {
    let live = reachable(prog)?;
    let mut out = Out {
        code: Vec::with_capacity(prog.len() * 4 + 32),
        fixups: Vec::new(),
    };
    let uses = |f: &dyn Fn(&Classic) -> bool| prog.iter().zip(&live).any(|(c, l)| *l && f(c));
    let uses_len = uses(&|c| matches!(c.code & CLASS, LD | LDX) && c.code & MODE == M_LEN);
    let uses_mem = uses(&|c| {
        matches!(c.code & CLASS, ST | STX)
            || (matches!(c.code & CLASS, LD | LDX) && c.code & MODE == M_MEM)
    });

    // Prologue.
    out.push(ebpf::mov64_reg(R6, R1));
    if let Finish::Capture { counters_fd, .. } = finish {
        // counters[0] += 1 (per CPU: no atomics needed).
        out.push(ebpf::st(ebpf::W, FP, KEY, 0));
        for i in ebpf::ld_map_fd(R1, counters_fd) {
            out.push(i);
        }
        out.push(ebpf::mov64_reg(R2, FP));
        out.push(ebpf::alu64_imm(alu::ADD, R2, KEY as i32));
        out.push(ebpf::call(helper::MAP_LOOKUP_ELEM));
        out.push(ebpf::jmp64_imm(jmp::JEQ, R0, 0, 3));
        out.push(ebpf::ldx(ebpf::DW, R1, R0, 0));
        out.push(ebpf::alu64_imm(alu::ADD, R1, 1));
        out.push(ebpf::stx(ebpf::DW, R0, 0, R1));
    }
    if uses_len {
        out.push(ebpf::mov64_reg(R1, R6));
        out.push(ebpf::call(helper::XDP_GET_BUFF_LEN));
        out.push(ebpf::stx(ebpf::W, FP, LEN, R0));
    }
    if uses_mem {
        for i in 0..8 {
            out.push(ebpf::st(ebpf::DW, FP, MEM + 8 * i, 0));
        }
    }
    out.push(ebpf::ldx(ebpf::W, R9, R6, 0)); // xdp_md.data
    out.push(ebpf::ldx(ebpf::W, R5, R6, 4)); // xdp_md.data_end
    out.push(ebpf::mov32_imm(R7, 0));
    out.push(ebpf::mov32_imm(R8, 0));

    let mut start = vec![0usize; prog.len()];
    for (i, c) in prog.iter().enumerate() {
        start[i] = out.code.len();
        if !live[i] {
            continue;
        }
        let k = c.k;
        let bad = || Err(format!("opcode {:#06x} at instruction {i}", c.code));
        match c.code & CLASS {
            LD => match c.code & MODE {
                M_ABS => load_abs(&mut out, c.code, k, R7)?,
                M_IND => load_ind(&mut out, c.code, k)?,
                M_IMM if c.code & SIZE == 0 => out.push(ebpf::mov32_imm(R7, k as i32)),
                M_MEM if c.code & SIZE == 0 => out.push(ebpf::ldx(ebpf::W, R7, FP, mem_slot(k)?)),
                M_LEN if c.code & SIZE == 0 => out.push(ebpf::ldx(ebpf::W, R7, FP, LEN)),
                _ => return bad(),
            },
            LDX => match c.code & (MODE | SIZE) {
                0x00 => out.push(ebpf::mov32_imm(R8, k as i32)),
                0x60 => out.push(ebpf::ldx(ebpf::W, R8, FP, mem_slot(k)?)),
                0x80 => out.push(ebpf::ldx(ebpf::W, R8, FP, LEN)),
                0xb0 => {
                    // ldxb 4*([k]&0xf)
                    load_abs(&mut out, 0x30, k, R8)?;
                    out.push(ebpf::alu32_imm(alu::AND, R8, 0xf));
                    out.push(ebpf::alu32_imm(alu::LSH, R8, 2));
                }
                _ => return bad(),
            },
            ST if c.code == ST => out.push(ebpf::stx(ebpf::W, FP, mem_slot(k)?, R7)),
            STX if c.code == STX => out.push(ebpf::stx(ebpf::W, FP, mem_slot(k)?, R8)),
            ALU => {
                let op = (c.code & OP) as u8;
                let by_x = c.code & SRC_X != 0;
                match op {
                    alu::ADD | alu::SUB | alu::MUL | alu::OR | alu::AND | alu::XOR => {
                        out.push(if by_x {
                            ebpf::alu32_reg(op, R7, R8)
                        } else {
                            ebpf::alu32_imm(op, R7, k as i32)
                        })
                    }
                    alu::DIV | alu::MOD if by_x => {
                        out.jump(ebpf::jmp32_imm(jmp::JEQ, R8, 0, 0), Label::Miss);
                        out.push(ebpf::alu32_reg(op, R7, R8));
                    }
                    alu::DIV | alu::MOD if k != 0 => out.push(ebpf::alu32_imm(op, R7, k as i32)),
                    alu::LSH | alu::RSH if by_x => {
                        out.push(ebpf::jmp32_imm(jmp::JGT, R8, 31, 2));
                        out.push(ebpf::alu32_reg(op, R7, R8));
                        out.push(ebpf::ja(1));
                        out.push(ebpf::mov32_imm(R7, 0));
                    }
                    alu::LSH | alu::RSH if k < 32 => out.push(ebpf::alu32_imm(op, R7, k as i32)),
                    alu::NEG if !by_x => out.push(ebpf::alu32_imm(alu::NEG, R7, 0)),
                    _ => return bad(),
                }
            }
            JMP => {
                let op = (c.code & OP) as u8;
                if op == jmp::JA {
                    if c.code != JMP {
                        return bad();
                    }
                    let to = i + 1 + k as usize;
                    if to != i + 1 {
                        out.jump(ebpf::ja(0), Label::Classic(to));
                    }
                    continue;
                }
                if !matches!(op, jmp::JEQ | jmp::JGT | jmp::JGE | jmp::JSET) {
                    return bad();
                }
                let t = i + 1 + usize::from(c.jt);
                let f = i + 1 + usize::from(c.jf);
                let cond = |op: u8| {
                    if c.code & SRC_X != 0 {
                        ebpf::jmp32_reg(op, R7, R8, 0)
                    } else {
                        ebpf::jmp32_imm(op, R7, k as i32, 0)
                    }
                };
                // The negation of each test but JSET (eBPF has JNE, JLE,
                // JLT), to save the second jump when the true branch is
                // the next instruction.
                let inverse = match op {
                    jmp::JEQ => Some(0x50),
                    jmp::JGT => Some(0xb0),
                    jmp::JGE => Some(0xa0),
                    _ => None,
                };
                if t == f {
                    if t != i + 1 {
                        out.jump(ebpf::ja(0), Label::Classic(t));
                    }
                } else if let (true, Some(inv)) = (t == i + 1, inverse) {
                    out.jump(cond(inv), Label::Classic(f));
                } else {
                    out.jump(cond(op), Label::Classic(t));
                    if f != i + 1 {
                        out.jump(ebpf::ja(0), Label::Classic(f));
                    }
                }
            }
            RET => match c.code & 0x18 {
                0x00 if k == 0 => out.jump(ebpf::ja(0), Label::Miss),
                0x00 => {
                    out.push(ebpf::mov32_imm(R7, k as i32));
                    out.jump(ebpf::ja(0), Label::Match);
                }
                0x10 => out.jump(ebpf::ja(0), Label::Match),
                _ => return bad(),
            },
            MISC => match c.code {
                0x07 => out.push(ebpf::mov32_reg(R8, R7)), // tax
                0x87 => out.push(ebpf::mov32_reg(R7, R8)), // txa
                _ => return bad(),
            },
            _ => return bad(),
        }
    }

    // Epilogue: the match, then the miss, each only if something goes
    // there (the verifier refuses unreachable instructions).
    let matched = out.code.len();
    let refers = |out: &Out, l: fn(&Label) -> bool| out.fixups.iter().any(|(_, t)| l(t));
    let has_match = refers(&out, |t| matches!(t, Label::Match));
    let miss_value = match finish {
        _ if !has_match => match finish {
            Finish::Value => 0,
            Finish::Capture { miss, .. } => miss,
        },
        Finish::Value => {
            out.push(ebpf::mov32_reg(R0, R7));
            out.push(ebpf::exit());
            0
        }
        Finish::Capture {
            scratch_fd,
            progs_fd,
            miss,
            ..
        } => {
            out.jump(ebpf::jmp32_imm(jmp::JEQ, R7, 0, 0), Label::Miss);
            out.push(ebpf::st(ebpf::W, FP, KEY, 0));
            for i in ebpf::ld_map_fd(R1, scratch_fd) {
                out.push(i);
            }
            out.push(ebpf::mov64_reg(R2, FP));
            out.push(ebpf::alu64_imm(alu::ADD, R2, KEY as i32));
            out.push(ebpf::call(helper::MAP_LOOKUP_ELEM));
            out.jump(ebpf::jmp64_imm(jmp::JEQ, R0, 0, 0), Label::Miss);
            out.push(ebpf::stx(ebpf::W, R0, CAP_LEN_OFFSET, R7));
            out.push(ebpf::mov64_reg(R1, R6));
            for i in ebpf::ld_map_fd(R2, progs_fd) {
                out.push(i);
            }
            out.push(ebpf::mov32_imm(R3, 0));
            out.push(ebpf::call(helper::TAIL_CALL));
            // The tail call failed (no program in the array): a miss.
            miss
        }
    };
    let missed = out.code.len();
    let falls_through = has_match && matches!(finish, Finish::Capture { .. });
    if falls_through || refers(&out, |t| matches!(t, Label::Miss)) {
        out.push(ebpf::mov32_imm(R0, miss_value as i32));
        out.push(ebpf::exit());
    }

    for (at, to) in std::mem::take(&mut out.fixups) {
        let target = match to {
            Label::Classic(i) => start[i],
            Label::Miss => missed,
            Label::Match => matched,
        };
        let off = target as i64 - (at as i64 + 1);
        out.code[at].off =
            i16::try_from(off).map_err(|_| "a jump too long for eBPF (program too big)")?;
    }
    Ok(out.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(code: u16, jt: u8, jf: u8, k: u32) -> Classic {
        Classic { code, jt, jf, k }
    }

    #[test]
    fn refuses_what_it_cannot_translate() {
        // Ancillary load (vlan tag present).
        assert!(translate(
            &[c(0x20, 0, 0, 0xffff_f02c), c(0x16, 0, 0, 0)],
            Finish::Value
        )
        .is_err());
        // Jump past the end.
        assert!(translate(&[c(0x15, 3, 0, 1), c(0x06, 0, 0, 0)], Finish::Value).is_err());
        // Division by constant 0, shift by 32.
        assert!(translate(&[c(0x34, 0, 0, 0), c(0x16, 0, 0, 0)], Finish::Value).is_err());
        assert!(translate(&[c(0x64, 0, 0, 32), c(0x16, 0, 0, 0)], Finish::Value).is_err());
        // Scratch index 16, no return at the end, empty.
        assert!(translate(&[c(0x02, 0, 0, 16), c(0x16, 0, 0, 0)], Finish::Value).is_err());
        assert!(translate(&[c(0x00, 0, 0, 1)], Finish::Value).is_err());
        assert!(translate(&[], Finish::Value).is_err());
    }

    #[test]
    fn jumps_land_on_their_instructions() {
        // ldh [12]; jeq #0x800, L1, L2; L1: ret #96; L2: ret #0
        let p = translate(
            &[
                c(0x28, 0, 0, 12),
                c(0x15, 0, 1, 0x800),
                c(0x06, 0, 0, 96),
                c(0x06, 0, 0, 0),
            ],
            Finish::Value,
        )
        .unwrap();
        for (at, i) in p.iter().enumerate() {
            if i.is_jump() {
                let to = at as i64 + 1 + i64::from(i.off);
                assert!(to > at as i64 && (to as usize) < p.len(), "{at}: {i:?}");
            }
        }
        assert_eq!(p.last().unwrap().code, 0x95);
    }
}
