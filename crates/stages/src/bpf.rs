//! Classic BPF programs: the instruction type the kernel takes, the rewrites
//! ringcap applies to libpcap's output, and libpcap's interpreter for offline use.

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
const BPF_MISC: u16 = 0x07;
const BPF_H: u16 = 0x08;
const BPF_B: u16 = 0x10;
const BPF_IMM: u16 = 0x00;
const BPF_IND: u16 = 0x40;
const BPF_MEM: u16 = 0x60;
const BPF_MSH: u16 = 0xa0;
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
const BPF_K: u16 = 0x00;
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
    pub fn run(&self, data: &[u8], wire_len: u32) -> u32 {
        ffi::run(&self.instructions, data, wire_len)
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

/// A program fragment with symbolic forward jumps, resolved when finished.
#[derive(Default)]
struct Asm {
    code: Vec<Instruction>,
    /// (instruction index, label, which field: 0 = k of ja, 1 = jt, 2 = jf)
    fixups: Vec<(usize, &'static str, u8)>,
    labels: Vec<(&'static str, usize)>,
}

impl Asm {
    fn op(&mut self, i: Instruction) -> &mut Self {
        self.code.push(i);
        self
    }
    fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.push((name, self.code.len()));
        self
    }
    /// `if A == k goto t else goto f` (None = next instruction).
    fn jeq(&mut self, k: u32, t: Option<&'static str>, f: Option<&'static str>) -> &mut Self {
        self.cond(BPF_JEQ, k, t, f)
    }
    fn cond(
        &mut self,
        op: u16,
        k: u32,
        t: Option<&'static str>,
        f: Option<&'static str>,
    ) -> &mut Self {
        let at = self.code.len();
        if let Some(t) = t {
            self.fixups.push((at, t, 1));
        }
        if let Some(f) = f {
            self.fixups.push((at, f, 2));
        }
        self.op(jump(op | BPF_K, k, 0, 0))
    }
    fn goto(&mut self, l: &'static str) -> &mut Self {
        self.fixups.push((self.code.len(), l, 0));
        self.op(ja(0))
    }
    fn finish(mut self) -> Vec<Instruction> {
        for (at, name, field) in &self.fixups {
            let target = self
                .labels
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, p)| *p)
                .expect("label defined");
            let off = target - at - 1;
            match field {
                0 => self.code[*at].k = off as u32,
                1 => self.code[*at].jt = u8::try_from(off).expect("short jump"),
                _ => self.code[*at].jf = u8::try_from(off).expect("short jump"),
            }
        }
        self.code
    }
}

/// The flow sampler: keeps a packet if `fmix32(h) % n == 0`, where `h` is
/// symmetric in the two directions of a connection:
/// `h = (src_addr ^ dst_addr, folded to 32 bits) ^ (src_port ^ dst_port) ^ (protocol << 24)`,
/// ports only for unfragmented TCP, UDP and SCTP. Non-IP frames hash to 0
/// and are kept. Computed here from the packet bytes rather than the kernel's
/// skb hash, which is not always computed before the filter runs and, for
/// locally sent TCP, is a random per-socket value. [`crate::sample::flow_hash`]
/// is the same function in Rust (tests check they agree). One VLAN tag left in
/// the frame (the inner tag of QinQ; the kernel strips the outer) is skipped.
pub fn flow_hash_tail(n: u32, snaplen: u32) -> Vec<Instruction> {
    let mut a = Asm::default();
    a.op(stmt(BPF_LD | BPF_H | BPF_ABS, 12))
        .jeq(0x0800, Some("v4_14"), None)
        .jeq(0x86dd, Some("v6_14"), None)
        .jeq(0x8100, Some("tag"), None)
        .jeq(0x88a8, Some("tag"), Some("zero"))
        .label("tag")
        .op(stmt(BPF_LD | BPF_H | BPF_ABS, 16))
        .jeq(0x0800, Some("v4_18"), None)
        .jeq(0x86dd, Some("v6_18"), Some("zero"));
    for (b, v4, v6) in [(14u32, "v4_14", "v6_14"), (18, "v4_18", "v6_18")] {
        let (ports, noports) = if b == 14 {
            ("p4_14", "np_14")
        } else {
            ("p4_18", "np_18")
        };
        let (ports6, p6next) = if b == 14 {
            ("p6_14", "x6_14")
        } else {
            ("p6_18", "x6_18")
        };
        // IPv4: M[0] = src ^ dst; M[1] = protocol << 24.
        a.label(v4)
            .op(stmt(BPF_LD | BPF_W | BPF_ABS, b + 12))
            .op(stmt(BPF_MISC | BPF_TAX, 0))
            .op(stmt(BPF_LD | BPF_W | BPF_ABS, b + 16))
            .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
            .op(stmt(BPF_ST, 0))
            .op(stmt(BPF_LD | BPF_B | BPF_ABS, b + 9))
            .op(stmt(BPF_ALU | BPF_LSH | BPF_K, 24))
            .op(stmt(BPF_ST, 1))
            .op(stmt(BPF_LD | BPF_H | BPF_ABS, b + 6))
            .cond(BPF_JSET, 0x3fff, Some(noports), None)
            .op(stmt(BPF_LD | BPF_B | BPF_ABS, b + 9))
            .jeq(6, Some(ports), None)
            .jeq(17, Some(ports), None)
            .jeq(132, Some(ports), Some(noports))
            .label(ports)
            .op(stmt(BPF_LDX | BPF_B | BPF_MSH, b))
            .op(stmt(BPF_LD | BPF_H | BPF_IND, b))
            .op(stmt(BPF_ST, 2))
            .op(stmt(BPF_LD | BPF_H | BPF_IND, b + 2))
            .op(stmt(BPF_LDX | BPF_W | BPF_MEM, 2))
            .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
            .goto("mix_ports")
            .label(noports)
            .op(stmt(BPF_LD | BPF_IMM, 0))
            .goto("mix_ports");
        // IPv6: M[0] = xor of the eight address words; M[1] = next header << 24.
        a.label(v6).op(stmt(BPF_LD | BPF_W | BPF_ABS, b + 8));
        for w in 1..8 {
            a.op(stmt(BPF_MISC | BPF_TAX, 0))
                .op(stmt(BPF_LD | BPF_W | BPF_ABS, b + 8 + 4 * w))
                .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0));
        }
        a.op(stmt(BPF_ST, 0))
            .op(stmt(BPF_LD | BPF_B | BPF_ABS, b + 6))
            .op(stmt(BPF_ALU | BPF_LSH | BPF_K, 24))
            .op(stmt(BPF_ST, 1))
            .op(stmt(BPF_LD | BPF_B | BPF_ABS, b + 6))
            .jeq(6, Some(ports6), None)
            .jeq(17, Some(ports6), None)
            .jeq(132, Some(ports6), Some(p6next))
            .label(ports6)
            .op(stmt(BPF_LD | BPF_H | BPF_ABS, b + 40))
            .op(stmt(BPF_MISC | BPF_TAX, 0))
            .op(stmt(BPF_LD | BPF_H | BPF_ABS, b + 42))
            .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
            .goto("mix_ports")
            .label(p6next)
            .op(stmt(BPF_LD | BPF_IMM, 0))
            .goto("mix_ports");
    }
    // A = ports xor; h = A ^ M[0] ^ M[1], then murmur3's fmix32 and the test.
    a.label("mix_ports")
        .op(stmt(BPF_LDX | BPF_W | BPF_MEM, 0))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
        .op(stmt(BPF_LDX | BPF_W | BPF_MEM, 1))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
        .goto("mix")
        .label("zero")
        .op(stmt(BPF_LD | BPF_IMM, 0))
        .label("mix");
    for (shift, mul) in [(16, 0x85eb_ca6b), (13, 0xc2b2_ae35)] {
        a.op(stmt(BPF_MISC | BPF_TAX, 0))
            .op(stmt(BPF_ALU | BPF_RSH | BPF_K, shift))
            .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
            .op(stmt(BPF_ALU | BPF_MUL | BPF_K, mul));
    }
    a.op(stmt(BPF_MISC | BPF_TAX, 0))
        .op(stmt(BPF_ALU | BPF_RSH | BPF_K, 16))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
        .op(stmt(BPF_ALU | BPF_MOD | BPF_K, n))
        .jeq(0, None, Some("drop"))
        .op(ret(snaplen))
        .label("drop")
        .op(ret(0));
    a.finish()
}

fn is_accepting_ret(insn: &Instruction) -> bool {
    insn.code & BPF_CLASS_MASK == BPF_RET && insn.code & BPF_RVAL_MASK == BPF_K && insn.k > 0
}

mod ffi {
    //! libpcap's classic BPF interpreter (`bpf_filter`), for offline filtering.
    use super::Instruction;

    #[link(name = "pcap")]
    extern "C" {
        fn bpf_filter(pc: *const Instruction, p: *const u8, wirelen: u32, buflen: u32) -> u32;
    }

    pub(super) fn run(insns: &[Instruction], data: &[u8], wire_len: u32) -> u32 {
        if insns.is_empty() {
            return u32::MAX; // an empty program accepts everything (libpcap's rule)
        }
        // SAFETY: `insns` is a valid slice of `struct bpf_insn`-layout instructions
        // (repr(C), same fields); libpcap's interpreter checks every packet load
        // against `buflen`, which is `data.len()`, so it never reads past `data`.
        // Jumps are not validated by bpf_filter, so the caller's program must have
        // come from pcap_compile (always valid) plus our rewrites, which only jump
        // forward inside the program.
        unsafe { bpf_filter(insns.as_ptr(), data.as_ptr(), wire_len, data.len() as u32) }
    }
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
}
