//! Classic BPF programs: the instruction type the kernel takes, the rewrites
//! ringcap applies to libpcap's output (snap length, sampler tail, the AND of an
//! administrator's and a client's program), and two interpreters for user
//! space: libpcap's, and [`interp`]'s (the same results, faster) for the
//! programs a capture thread runs on every packet.

pub mod interp;

mod and;
mod ffi;
mod flow_hash;

pub use flow_hash::flow_hash_tail;

use crate::sample::{SampleMode, Sampling};

/// One classic BPF instruction, laid out as `struct sock_filter` / `struct bpf_insn`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction {
    /// Operation code.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

const BPF_LD: u16 = 0x00;
const BPF_LDX: u16 = 0x01;
const BPF_ST: u16 = 0x02;
const BPF_STX: u16 = 0x03;
const BPF_ADD: u16 = 0x00;
const BPF_AND: u16 = 0x50;
const BPF_MISC: u16 = 0x07;
const BPF_H: u16 = 0x08;
const BPF_B: u16 = 0x10;
const BPF_IMM: u16 = 0x00;
const BPF_IND: u16 = 0x40;
const BPF_MEM: u16 = 0x60;
const BPF_X: u16 = 0x08;
const BPF_XOR: u16 = 0xa0;
const BPF_MUL: u16 = 0x20;
const BPF_RSH: u16 = 0x70;
const BPF_LSH: u16 = 0x60;
const BPF_JSET: u16 = 0x40;
const BPF_TAX: u16 = 0x00;
const BPF_W: u16 = 0x00;
const BPF_ABS: u16 = 0x20;
const BPF_ALU: u16 = 0x04;
const BPF_MOD: u16 = 0x90;
const BPF_JMP: u16 = 0x05;
const BPF_JA: u16 = 0x00;
const BPF_JEQ: u16 = 0x10;
const BPF_JGT: u16 = 0x20;
const BPF_K: u16 = 0x00;
const BPF_A: u16 = 0x10;
const BPF_OP_MASK: u16 = 0xf0;
const BPF_RET: u16 = 0x06;
const BPF_CLASS_MASK: u16 = 0x07;
const BPF_RVAL_MASK: u16 = 0x18;

/// Linux ancillary data offsets (`SKF_AD_OFF + SKF_AD_*`, linux/filter.h).
const SKF_AD_OFF: i32 = -0x1000;
const SKF_AD_RANDOM: i32 = 56;

/// The kernel rejects programs longer than this (BPF_MAXINSNS).
pub const MAX_INSTRUCTIONS: usize = 4096;

/// A classic BPF program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The instructions, in order.
    pub instructions: Vec<Instruction>,
}

impl Program {
    /// A program that accepts `snaplen` bytes of every packet.
    pub fn accept_all(snaplen: u32) -> Program {
        Program {
            instructions: vec![ret(snaplen)],
        }
    }

    /// Makes every accepting return give `snaplen`: the kernel copies the
    /// filter's return value as the capture length, so this *is* truncation.
    /// (libpcap compiled on a dead handle returns 65535 or 262144.)
    pub fn set_snaplen(&mut self, snaplen: u32) {
        for insn in &mut self.instructions {
            if is_accepting_ret(insn) {
                insn.k = snaplen;
            }
        }
    }

    /// Appends a kernel sampler after the filter: every accepting return jumps
    /// to a tail that keeps the packet only if `random % N == 0` (random mode)
    /// or `flow_hash % N == 0` (flow mode, see [`flow_hash_tail`]). Count mode
    /// needs state, which classic BPF has not: it is left to user space and
    /// the program is unchanged.
    pub fn add_sampler(&mut self, sampling: Sampling) -> Result<(), String> {
        let (n, flows) = match sampling {
            Sampling::All
            | Sampling::Packets {
                mode: SampleMode::Count,
                ..
            } => return Ok(()),
            Sampling::Packets {
                n,
                mode: SampleMode::Random,
            } => (n, false),
            Sampling::Flows { n } => (n, true),
        };
        if n <= 1 {
            return Ok(());
        }
        let Some(snaplen) = self
            .instructions
            .iter()
            .find(|i| is_accepting_ret(i))
            .map(|i| i.k)
        else {
            return Ok(()); // the filter accepts nothing; nothing to sample
        };
        let tail_start = self.instructions.len();
        for (pc, insn) in self.instructions.iter_mut().enumerate() {
            if is_accepting_ret(insn) {
                *insn = ja((tail_start - pc - 1) as u32);
            }
        }
        if flows {
            self.instructions.extend(flow_hash_tail(n, snaplen));
        } else {
            self.instructions.extend_from_slice(&[
                stmt(
                    BPF_LD | BPF_W | BPF_ABS,
                    (SKF_AD_OFF + SKF_AD_RANDOM) as u32,
                ),
                stmt(BPF_ALU | BPF_MOD | BPF_K, n),
                jump(BPF_JEQ | BPF_K, 0, 0, 1),
                ret(snaplen),
                ret(0),
            ]);
        }
        if self.instructions.len() > MAX_INSTRUCTIONS {
            return Err(format!(
                "the filter with sampling is {} instructions long; the kernel takes at most {MAX_INSTRUCTIONS}",
                self.instructions.len()
            ));
        }
        Ok(())
    }

    /// Runs the program on a packet with libpcap's interpreter, as the kernel
    /// would: returns the number of bytes to keep (0 = drop). Ancillary loads
    /// (random number, flow hash) are Linux-only and do not run here; offline
    /// sampling is done by [`crate::UserSampler`] instead.
    ///
    /// The program is checked first ([`Program::validated`]); one that fails
    /// the check accepts nothing. To run one program on many packets, check
    /// it once and run the [`Validated`] view.
    pub fn run(&self, data: &[u8], wire_len: u32) -> u32 {
        self.validated().map_or(0, |v| v.run(data, wire_len))
    }

    /// The program, if libpcap's checks accept it (`bpf_validate`: known
    /// opcodes, every jump inside the program, scratch memory indexes below
    /// 16, no division by a constant 0, a return at the end), as a view
    /// that runs it without checking again. An empty program is valid: it
    /// accepts everything (libpcap's rule).
    ///
    /// libpcap's interpreter trusts its program: it checks packet loads
    /// against the packet, but not jumps or scratch memory indexes, so only
    /// a checked program may reach it.
    pub fn validated(&self) -> Option<Validated<'_>> {
        let insns = self.instructions.as_slice();
        (insns.is_empty() || ffi::validate(insns)).then_some(Validated { insns })
    }
}

/// A [`Program`] that passed libpcap's checks, borrowed (so it cannot change
/// while this view exists): see [`Program::validated`].
#[derive(Debug, Clone, Copy)]
pub struct Validated<'a> {
    /// Empty, or accepted by `bpf_validate`.
    insns: &'a [Instruction],
}

impl Validated<'_> {
    /// [`Program::run`] without the check.
    #[inline]
    pub fn run(&self, data: &[u8], wire_len: u32) -> u32 {
        ffi::run(*self, data, wire_len)
    }
}

/// A [`Program`] that passed libpcap's checks, owned and decoded (for a
/// capture thread that runs it on every packet: checked once, not per
/// packet), run by [`interp`] with the results of libpcap's interpreter. The
/// program cannot change after the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedProgram {
    program: Program,
    /// `None` for the empty program (accepts everything, libpcap's rule).
    decoded: Option<interp::Decoded>,
}

impl CheckedProgram {
    /// `program`, if libpcap's checks accept it.
    pub fn new(program: Program) -> Option<CheckedProgram> {
        program.validated()?;
        let decoded = if program.instructions.is_empty() {
            None
        } else {
            Some(interp::Decoded::new(&program.instructions)?)
        };
        Some(CheckedProgram { program, decoded })
    }

    /// Runs the program on one packet: the bytes to keep (0 = reject).
    #[inline]
    pub fn run(&self, data: &[u8], wire_len: u32) -> u32 {
        match &self.decoded {
            Some(d) => d.run(data, wire_len),
            None => u32::MAX,
        }
    }

    /// [`run`](Self::run) on each of a group of up to
    /// [`interp::LANES`] packets at once, through `paths` (the paths recent
    /// packets took through this program; see
    /// [`interp::Decoded::run_group`]): `out[i]` for `data[i]`, `wire_len[i]`.
    /// One `Paths` per program.
    #[inline]
    pub fn run_group(
        &self,
        paths: &mut interp::Paths,
        data: &[&[u8]],
        wire_len: &[u32],
        out: &mut [u32],
    ) {
        match &self.decoded {
            Some(d) => d.run_group(paths, data, wire_len, out),
            None => out.iter_mut().for_each(|o| *o = u32::MAX),
        }
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// True if the program has no backward jumps: every run ends within its
    /// length (the empty program too).
    pub fn traceable(&self) -> bool {
        self.decoded.as_ref().is_none_or(|d| d.traceable())
    }
}

fn ret(k: u32) -> Instruction {
    Instruction {
        code: BPF_RET | BPF_K,
        jt: 0,
        jf: 0,
        k,
    }
}

fn stmt(code: u16, k: u32) -> Instruction {
    Instruction {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(op: u16, k: u32, jt: u8, jf: u8) -> Instruction {
    Instruction {
        code: BPF_JMP | op,
        jt,
        jf,
        k,
    }
}

fn ja(k: u32) -> Instruction {
    stmt(BPF_JMP | BPF_JA, k)
}

fn is_accepting_ret(insn: &Instruction) -> bool {
    insn.code & BPF_CLASS_MASK == BPF_RET && insn.code & BPF_RVAL_MASK == BPF_K && insn.k > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snaplen_rewrites_only_accepting_returns() {
        let mut p = Program {
            instructions: vec![ret(65535), ret(0), ret(262144)],
        };
        p.set_snaplen(96);
        assert_eq!(
            p.instructions.iter().map(|i| i.k).collect::<Vec<_>>(),
            vec![96, 0, 96]
        );
    }

    #[test]
    fn random_sampler_tail_is_reached_by_forward_jumps() {
        let mut p = Program {
            instructions: vec![jump(BPF_JEQ | BPF_K, 1, 0, 1), ret(64), ret(0)],
        };
        p.add_sampler(Sampling::Packets {
            n: 8,
            mode: SampleMode::Random,
        })
        .unwrap();
        assert_eq!(p.instructions.len(), 8);
        // ret(64) at pc 1 became `ja` to pc 3, the start of the tail.
        assert_eq!(p.instructions[1], ja(1));
        assert_eq!(p.instructions[3].k, (SKF_AD_OFF + SKF_AD_RANDOM) as u32);
        assert_eq!(p.instructions[4].k, 8);
        assert_eq!(p.instructions[6], ret(64));
        assert_eq!(p.instructions[7], ret(0));
    }

    #[test]
    fn count_sampling_leaves_program_alone() {
        let mut p = Program::accept_all(64);
        p.add_sampler(Sampling::Packets {
            n: 8,
            mode: SampleMode::Count,
        })
        .unwrap();
        assert_eq!(p, Program::accept_all(64));
    }

    #[test]
    fn interpreter_runs_rewritten_program() {
        let mut p = Program::accept_all(65535);
        p.set_snaplen(20);
        assert_eq!(p.run(&[0u8; 60], 60), 20);
    }

    #[test]
    fn programs_libpcap_would_misrun_accept_nothing() {
        let packet = [0u8; 60];
        let bad = [
            // Jumps past the end.
            vec![ja(1000), ret(64)],
            vec![jump(BPF_JEQ | BPF_K, 0, 200, 0), ret(64)],
            // Scratch memory index 1000 (of 16).
            vec![stmt(BPF_LD | BPF_MEM, 1000), ret(64)],
            vec![stmt(BPF_ST, 16), ret(64)],
            // Division by a constant 0.
            vec![stmt(BPF_ALU | BPF_MOD | BPF_K, 0), ret(64)],
            // Opcodes libpcap's interpreter aborts on, though its validator
            // takes them (a MISC class code, a byte-sized ld #k, ret x).
            vec![stmt(0xffff, 0), ret(64)],
            vec![stmt(BPF_LD | BPF_B | BPF_IMM, 1), ret(64)],
            vec![stmt(BPF_RET | BPF_X, 0)],
            // A constant shift by 32 (undefined in libpcap's C).
            vec![stmt(BPF_ALU | BPF_LSH | BPF_K, 32), ret(64)],
            // Runs off the end.
            vec![stmt(BPF_LD | BPF_IMM, 1)],
        ];
        for instructions in bad {
            let p = Program {
                instructions: instructions.clone(),
            };
            assert!(p.validated().is_none(), "{instructions:?}");
            assert_eq!(p.run(&packet, 60), 0, "{instructions:?}");
        }
        // Valid ones run, through either door.
        let p = Program::accept_all(64);
        assert_eq!(p.run(&packet, 60), 64);
        assert_eq!(p.validated().unwrap().run(&packet, 60), 64);
        let empty = Program {
            instructions: Vec::new(),
        };
        assert_eq!(empty.run(&packet, 60), u32::MAX);
    }
}
