//! Classic BPF programs: the instruction type the kernel takes, the rewrites
//! ringcap applies to libpcap's output (snap length, sampler tail, the AND of an
//! administrator's and a client's program), and two interpreters for user
//! space: libpcap's, and [`interp`]'s (the same results, faster) for the
//! programs a capture thread runs on every packet.

pub mod interp;

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
/// symmetric in the two directions of a connection. For IP (after at most
/// one VLAN tag, or inside an MPLS label stack of up to
/// [`crate::sample::MPLS_MAX_LABELS`] entries whose payload starts with
/// version 4 or 6):
/// `h = (src_addr ^ dst_addr, folded to 32 bits) ^ (src_port ^ dst_port) ^ (protocol << 24)`,
/// ports only for unfragmented TCP, UDP and SCTP. Every other frame (ARP,
/// MPLS without IP, any other EtherType) is sampled too, by its MAC pair
/// and EtherType: `h = (dst[0..4] ^ src[0..4]) ^ (dst[4..6] ^ src[4..6]) ^ (ethertype << 16)`;
/// none is kept wholesale. Computed here from the packet bytes rather than
/// the kernel's skb hash, which is not always computed before the filter
/// runs and, for locally sent TCP, is a random per-socket value.
/// [`crate::sample::flow_hash`] is the same function in Rust (tests check
/// they agree). One VLAN tag left in the frame (the inner tag of QinQ; the
/// kernel strips the outer) is skipped.
///
/// Scratch memory: `M[0]` address (or MAC) hash, `M[1]` protocol (or
/// EtherType) word, `M[2]` a port, `M[3]` the network header's offset,
/// `M[4]` the EtherType.
pub fn flow_hash_tail(n: u32, snaplen: u32) -> Vec<Instruction> {
    const BOTTOM: [&str; crate::sample::MPLS_MAX_LABELS] = ["bos0", "bos1", "bos2", "bos3"];
    let ld_ind = |size: u16, k: u32| stmt(BPF_LD | size | BPF_IND, k);
    let mut a = Asm::default();
    a.op(stmt(BPF_LD | BPF_H | BPF_ABS, 12))
        .jeq(0x8100, Some("tag"), None)
        .jeq(0x88a8, Some("tag"), None)
        .op(stmt(BPF_LDX | BPF_W | BPF_IMM, 14))
        .goto("dispatch")
        .label("tag")
        .op(stmt(BPF_LD | BPF_H | BPF_ABS, 16))
        .op(stmt(BPF_LDX | BPF_W | BPF_IMM, 18))
        .label("dispatch")
        .op(stmt(BPF_ST, 4))
        .op(stmt(BPF_STX, 3))
        .jeq(0x0800, Some("v4"), None)
        .jeq(0x86dd, Some("v6"), None)
        .jeq(0x8847, Some("mpls"), None)
        .jeq(0x8848, Some("mpls"), None)
        .goto("l2");
    // MPLS: find the bottom of the stack, then IPv4 or IPv6 by the nibble.
    a.label("mpls");
    for (i, bos) in BOTTOM.iter().enumerate() {
        a.op(ld_ind(BPF_B, 4 * i as u32 + 2))
            .cond(BPF_JSET, 1, Some(bos), None);
    }
    a.goto("l2");
    for (i, bos) in BOTTOM.iter().enumerate() {
        a.label(bos)
            .op(stmt(BPF_LD | BPF_MEM, 3))
            .op(stmt(BPF_ALU | BPF_ADD | BPF_K, 4 * (i as u32 + 1)))
            .op(stmt(BPF_ST, 3))
            .op(stmt(BPF_MISC | BPF_TAX, 0))
            .op(ld_ind(BPF_B, 0))
            .op(stmt(BPF_ALU | BPF_RSH | BPF_K, 4))
            .jeq(4, Some("v4"), None)
            .jeq(6, Some("v6"), None)
            .goto("l2");
    }
    // IPv4 at X (= M[3]): M[0] = src ^ dst; M[1] = protocol << 24.
    a.label("v4")
        .op(stmt(BPF_LDX | BPF_MEM, 3))
        .op(ld_ind(BPF_W, 12))
        .op(stmt(BPF_ST, 0))
        .op(ld_ind(BPF_W, 16))
        .op(stmt(BPF_LDX | BPF_MEM, 0))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
        .op(stmt(BPF_ST, 0))
        .op(stmt(BPF_LDX | BPF_MEM, 3))
        .op(ld_ind(BPF_B, 9))
        .op(stmt(BPF_ALU | BPF_LSH | BPF_K, 24))
        .op(stmt(BPF_ST, 1))
        .op(ld_ind(BPF_H, 6))
        .cond(BPF_JSET, 0x3fff, Some("noports"), None)
        .op(ld_ind(BPF_B, 9))
        .jeq(6, Some("ports4"), None)
        .jeq(17, Some("ports4"), None)
        .jeq(132, Some("ports4"), Some("noports"))
        .label("ports4")
        .op(ld_ind(BPF_B, 0))
        .op(stmt(BPF_ALU | BPF_AND | BPF_K, 0xf))
        .op(stmt(BPF_ALU | BPF_LSH | BPF_K, 2))
        .op(stmt(BPF_ALU | BPF_ADD | BPF_X, 0))
        .op(stmt(BPF_MISC | BPF_TAX, 0))
        .goto("ports")
        .label("noports")
        .op(stmt(BPF_LD | BPF_IMM, 0))
        .goto("mix_ports");
    // IPv6 at X: M[0] = xor of the eight address words; M[1] = next header << 24.
    a.label("v6")
        .op(stmt(BPF_LDX | BPF_MEM, 3))
        .op(ld_ind(BPF_W, 8))
        .op(stmt(BPF_ST, 0));
    for w in 1..8 {
        a.op(ld_ind(BPF_W, 8 + 4 * w))
            .op(stmt(BPF_LDX | BPF_MEM, 0))
            .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
            .op(stmt(BPF_ST, 0))
            .op(stmt(BPF_LDX | BPF_MEM, 3));
    }
    a.op(ld_ind(BPF_B, 6))
        .op(stmt(BPF_ALU | BPF_LSH | BPF_K, 24))
        .op(stmt(BPF_ST, 1))
        .op(ld_ind(BPF_B, 6))
        .jeq(6, Some("ports6"), None)
        .jeq(17, Some("ports6"), None)
        .jeq(132, Some("ports6"), Some("noports6"))
        .label("ports6")
        .op(stmt(BPF_LD | BPF_MEM, 3))
        .op(stmt(BPF_ALU | BPF_ADD | BPF_K, 40))
        .op(stmt(BPF_MISC | BPF_TAX, 0))
        // The ports at X: A = src_port ^ dst_port.
        .label("ports")
        .op(ld_ind(BPF_H, 0))
        .op(stmt(BPF_ST, 2))
        .op(ld_ind(BPF_H, 2))
        .op(stmt(BPF_LDX | BPF_MEM, 2))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
        .goto("mix_ports")
        .label("noports6")
        .op(stmt(BPF_LD | BPF_IMM, 0))
        .goto("mix_ports");
    // Anything else: M[0] = the MAC pair folded; M[1] = EtherType << 16.
    a.label("l2")
        .op(stmt(BPF_LD | BPF_W | BPF_ABS, 0))
        .op(stmt(BPF_ST, 0))
        .op(stmt(BPF_LD | BPF_W | BPF_ABS, 6))
        .op(stmt(BPF_LDX | BPF_MEM, 0))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
        .op(stmt(BPF_ST, 0))
        .op(stmt(BPF_LD | BPF_H | BPF_ABS, 4))
        .op(stmt(BPF_ST, 1))
        .op(stmt(BPF_LD | BPF_H | BPF_ABS, 10))
        .op(stmt(BPF_LDX | BPF_MEM, 1))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
        .op(stmt(BPF_LDX | BPF_MEM, 0))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
        .op(stmt(BPF_ST, 0))
        .op(stmt(BPF_LD | BPF_MEM, 4))
        .op(stmt(BPF_ALU | BPF_LSH | BPF_K, 16))
        .op(stmt(BPF_ST, 1))
        .op(stmt(BPF_LD | BPF_IMM, 0));
    // A = ports xor; h = A ^ M[0] ^ M[1], then murmur3's fmix32 and the test.
    a.label("mix_ports")
        .op(stmt(BPF_LDX | BPF_W | BPF_MEM, 0))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
        .op(stmt(BPF_LDX | BPF_W | BPF_MEM, 1))
        .op(stmt(BPF_ALU | BPF_XOR | BPF_X, 0))
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

fn is_accepting_ret(insn: &Instruction) -> bool {
    insn.code & BPF_CLASS_MASK == BPF_RET && insn.code & BPF_RVAL_MASK == BPF_K && insn.k > 0
}

mod ffi {
    //! libpcap's classic BPF interpreter (`bpf_filter`), for offline filtering.
    use super::Instruction;

    use super::Validated;

    #[link(name = "pcap")]
    extern "C" {
        fn bpf_filter(pc: *const Instruction, p: *const u8, wirelen: u32, buflen: u32) -> u32;
        fn bpf_validate(f: *const Instruction, len: i32) -> i32;
    }

    /// True if libpcap's interpreter has a case for the instruction's
    /// opcode, and its constant is one the interpreter can use. On any other
    /// opcode libpcap 1.10's `bpf_filter` aborts the process, yet its
    /// `bpf_validate` lets many through (it checks the class and mode, not
    /// the whole opcode); a constant shift of 32 or more is undefined
    /// behaviour in its C. The list is exactly the interpreter's `case`s.
    fn interpretable(insn: &Instruction) -> bool {
        match insn.code {
            // ld/ldx/st/stx with scratch memory: index below BPF_MEMWORDS.
            0x60 | 0x61 | 0x02 | 0x03 => insn.k < 16,
            // div, mod by a constant: not by 0.
            0x34 | 0x94 => insn.k != 0,
            // lsh, rsh by a constant: below 32.
            0x64 | 0x74 => insn.k < 32,
            // ret #k, ret a
            0x06 | 0x16
            // ld [k] (w, h, b), ld len, ldx len, ld [x + k] (w, h, b),
            // ldx 4*([k]&0xf), ld #k, ldx #k
            | 0x20 | 0x28 | 0x30 | 0x80 | 0x81 | 0x40 | 0x48 | 0x50 | 0xb1 | 0x00 | 0x01
            // ja, jgt/jge/jeq/jset with k, then with x
            | 0x05 | 0x25 | 0x35 | 0x15 | 0x45 | 0x2d | 0x3d | 0x1d | 0x4d
            // add sub mul div mod and or xor lsh rsh with x
            | 0x0c | 0x1c | 0x2c | 0x3c | 0x9c | 0x5c | 0x4c | 0xac | 0x6c | 0x7c
            // add sub mul and or xor with a constant, neg
            | 0x04 | 0x14 | 0x24 | 0x54 | 0x44 | 0xa4 | 0x84
            // tax, txa
            | 0x07 | 0x87 => true,
            _ => false,
        }
    }

    /// libpcap's own check of a program (known opcode classes, jumps in
    /// range, scratch memory indexes in range, no division by a constant 0,
    /// ends with a return), after [`interpretable`] on every instruction.
    /// False for an empty program and for one longer than `i32::MAX`
    /// instructions. Backward jumps stay allowed, as libpcap's interpreter
    /// runs them (its "protochain" code uses them).
    pub(super) fn validate(insns: &[Instruction]) -> bool {
        let Ok(len) = i32::try_from(insns.len()) else {
            return false;
        };
        if !insns.iter().all(interpretable) {
            return false;
        }
        // SAFETY: `insns` is a valid slice of `len` instructions in `struct
        // bpf_insn` layout (repr(C), same fields); bpf_validate only reads
        // them, never past `len`.
        unsafe { bpf_validate(insns.as_ptr(), len) != 0 }
    }

    pub(super) fn run(program: Validated<'_>, data: &[u8], wire_len: u32) -> u32 {
        let insns = program.insns;
        if insns.is_empty() {
            return u32::MAX; // an empty program accepts everything (libpcap's rule)
        }
        // bpf_filter reads at most `buflen` bytes of the packet: a packet of
        // 4 GiB or more is seen as its first 4 GiB - 1.
        let buflen = u32::try_from(data.len()).unwrap_or(u32::MAX);
        // SAFETY: `insns` is a valid slice of `struct bpf_insn`-layout
        // instructions (repr(C), same fields), which bpf_validate accepted
        // (a `Validated` is only made after it did, and borrows the
        // instructions so they cannot change): every jump and scratch memory
        // index is in range, no constant divides by zero, unknown opcodes
        // are refused and the program ends with a return, so the
        // interpreter stays inside the program and its own state. It checks
        // every packet load against `buflen`, at most `data.len()`, so it
        // never reads past `data`, which it does not write.
        unsafe { bpf_filter(insns.as_ptr(), data.as_ptr(), wire_len, buflen) }
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
