//! A classic BPF interpreter in safe Rust, giving the same answer as
//! libpcap's `bpf_filter` on every program libpcap's checks accept.
//!
//! Why not libpcap's: ringcapd runs every session's filter on every packet in
//! its hub thread, and there libpcap's interpreter was about two fifths of the
//! daemon's CPU. This one decodes a program once (opcodes to an enum, jump
//! offsets to absolute targets, checked to stay inside the program), then
//! runs it without re-decoding, inlined into the caller, with one bounds
//! check per packet load. No well-kept crate interprets classic BPF (rbpf
//! runs eBPF, and converting is the kernel's job), so it is written here; a
//! differential test holds it to libpcap's results.
//!
//! Semantics, as libpcap's: a load that does not fit in the packet returns 0
//! (reject); `len` is the length on the wire; division or modulo by zero
//! returns 0; a shift by 32 or more gives 0; ancillary loads (`SKF_AD_*`
//! offsets) fall outside any packet and return 0. Backward jumps (libpcap's
//! `protochain` loops) are allowed, at most [`MAX_BACKWARD_JUMPS`] a packet,
//! so that every run ends.

use super::Instruction;

mod group;

pub use group::{Paths, LANES};

/// Backward jumps one run may take before it gives up (returns 0).
pub const MAX_BACKWARD_JUMPS: u32 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    RetK(u32),
    RetA,
    LdW(u32),
    LdH(u32),
    LdB(u32),
    LdWInd(u32),
    LdHInd(u32),
    LdBInd(u32),
    LdLen,
    LdxLen,
    LdImm(u32),
    LdxImm(u32),
    LdMem(u8),
    LdxMem(u8),
    LdxMsh(u32),
    St(u8),
    Stx(u8),
    Ja(u32),
    JgtK(u32, u32, u32),
    JgeK(u32, u32, u32),
    JeqK(u32, u32, u32),
    JsetK(u32, u32, u32),
    JgtX(u32, u32),
    JgeX(u32, u32),
    JeqX(u32, u32),
    JsetX(u32, u32),
    AddX,
    SubX,
    MulX,
    DivX,
    ModX,
    AndX,
    OrX,
    XorX,
    LshX,
    RshX,
    AddK(u32),
    SubK(u32),
    MulK(u32),
    DivK(u32),
    ModK(u32),
    AndK(u32),
    OrK(u32),
    XorK(u32),
    LshK(u32),
    RshK(u32),
    Neg,
    Tax,
    Txa,
    // A load followed by a conditional jump on a constant (most of what
    // libpcap emits): one dispatch instead of two. The jump stays in the
    // program too, for jumps that land on it.
    LdHJeq(u32, u32, u32, u32),
    LdBJeq(u32, u32, u32, u32),
    LdWJeq(u32, u32, u32, u32),
    LdHJset(u32, u32, u32, u32),
    LdBJset(u32, u32, u32, u32),
    LdHJgt(u32, u32, u32, u32),
    LdHJge(u32, u32, u32, u32),
    LdHIndJeq(u32, u32, u32, u32),
    LdBIndJeq(u32, u32, u32, u32),
}

/// A decoded program, ready to run on many packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    ops: Box<[Op]>,
    /// No backward jumps: every run is one path, which a group can follow
    /// ([`Decoded::run_group`]).
    traceable: bool,
}

impl Decoded {
    /// Decodes `insns`; `None` for an opcode libpcap's interpreter does not
    /// have, a scratch-memory index of 16 or more, a jump outside the
    /// program, or a program that can run off its end (its last instruction
    /// is not a return). An empty program is refused too (callers give it
    /// libpcap's meaning, accept all, themselves).
    pub fn new(insns: &[Instruction]) -> Option<Decoded> {
        let len = insns.len();
        if len == 0 || u32::try_from(len).is_err() {
            return None;
        }
        // The target of a jump from `pc` by `off` (libpcap: forward offsets
        // for conditional jumps; `ja` takes a signed 32-bit offset).
        let target = |pc: usize, off: i64| -> Option<u32> {
            let t = pc as i64 + 1 + off;
            (0..len as i64).contains(&t).then_some(t as u32)
        };
        let mut ops = Vec::with_capacity(len);
        for (pc, i) in insns.iter().enumerate() {
            let k = i.k;
            let mem = || u8::try_from(k).ok().filter(|&m| m < 16);
            let cond = |make: fn(u32, u32, u32) -> Op| {
                Some(make(
                    k,
                    target(pc, i64::from(i.jt))?,
                    target(pc, i64::from(i.jf))?,
                ))
            };
            let cond_x = |make: fn(u32, u32) -> Op| {
                Some(make(
                    target(pc, i64::from(i.jt))?,
                    target(pc, i64::from(i.jf))?,
                ))
            };
            let op = match i.code {
                0x06 => Op::RetK(k),
                0x16 => Op::RetA,
                0x20 => Op::LdW(k),
                0x28 => Op::LdH(k),
                0x30 => Op::LdB(k),
                0x40 => Op::LdWInd(k),
                0x48 => Op::LdHInd(k),
                0x50 => Op::LdBInd(k),
                0x80 => Op::LdLen,
                0x81 => Op::LdxLen,
                0x00 => Op::LdImm(k),
                0x01 => Op::LdxImm(k),
                0x60 => Op::LdMem(mem()?),
                0x61 => Op::LdxMem(mem()?),
                0xb1 => Op::LdxMsh(k),
                0x02 => Op::St(mem()?),
                0x03 => Op::Stx(mem()?),
                0x05 => Op::Ja(target(pc, i64::from(k as i32))?),
                0x25 => cond(Op::JgtK)?,
                0x35 => cond(Op::JgeK)?,
                0x15 => cond(Op::JeqK)?,
                0x45 => cond(Op::JsetK)?,
                0x2d => cond_x(Op::JgtX)?,
                0x3d => cond_x(Op::JgeX)?,
                0x1d => cond_x(Op::JeqX)?,
                0x4d => cond_x(Op::JsetX)?,
                0x0c => Op::AddX,
                0x1c => Op::SubX,
                0x2c => Op::MulX,
                0x3c => Op::DivX,
                0x9c => Op::ModX,
                0x5c => Op::AndX,
                0x4c => Op::OrX,
                0xac => Op::XorX,
                0x6c => Op::LshX,
                0x7c => Op::RshX,
                0x04 => Op::AddK(k),
                0x14 => Op::SubK(k),
                0x24 => Op::MulK(k),
                0x34 => Op::DivK(k),
                0x94 => Op::ModK(k),
                0x54 => Op::AndK(k),
                0x44 => Op::OrK(k),
                0xa4 => Op::XorK(k),
                0x64 => Op::LshK(k),
                0x74 => Op::RshK(k),
                0x84 => Op::Neg,
                0x07 => Op::Tax,
                0x87 => Op::Txa,
                _ => return None,
            };
            ops.push(op);
        }
        if !matches!(ops.last(), Some(Op::RetK(_) | Op::RetA)) {
            return None;
        }
        for i in 0..ops.len() - 1 {
            ops[i] = match (ops[i], ops[i + 1]) {
                (Op::LdH(k), Op::JeqK(v, t, f)) => Op::LdHJeq(k, v, t, f),
                (Op::LdB(k), Op::JeqK(v, t, f)) => Op::LdBJeq(k, v, t, f),
                (Op::LdW(k), Op::JeqK(v, t, f)) => Op::LdWJeq(k, v, t, f),
                (Op::LdH(k), Op::JsetK(v, t, f)) => Op::LdHJset(k, v, t, f),
                (Op::LdB(k), Op::JsetK(v, t, f)) => Op::LdBJset(k, v, t, f),
                (Op::LdH(k), Op::JgtK(v, t, f)) => Op::LdHJgt(k, v, t, f),
                (Op::LdH(k), Op::JgeK(v, t, f)) => Op::LdHJge(k, v, t, f),
                (Op::LdHInd(k), Op::JeqK(v, t, f)) => Op::LdHIndJeq(k, v, t, f),
                (Op::LdBInd(k), Op::JeqK(v, t, f)) => Op::LdBIndJeq(k, v, t, f),
                (op, _) => op,
            };
        }
        let traceable = ops
            .iter()
            .enumerate()
            .all(|(pc, op)| !matches!(op, Op::Ja(t) if (*t as usize) <= pc));
        Some(Decoded {
            ops: ops.into_boxed_slice(),
            traceable,
        })
    }

    /// True if no jump goes backwards (see `traceable`).
    pub fn traceable(&self) -> bool {
        self.traceable
    }

    /// Runs the program on `data`, a packet `wire_len` bytes long on the
    /// wire: the number of bytes to keep (0 = reject).
    #[inline]
    pub fn run(&self, data: &[u8], wire_len: u32) -> u32 {
        self.run_from(
            0,
            &mut Regs::default(),
            &mut [0; 16],
            data,
            wire_len,
            &mut (),
        )
    }

    /// Runs the program from `pc` with registers `r` and scratch memory
    /// `mem`, telling `record` each operation it executes (but jumps) and
    /// which way each conditional jump went.
    #[inline(always)]
    fn run_from<R: Record>(
        &self,
        mut pc: usize,
        r: &mut Regs,
        mem: &mut [u32; 16],
        data: &[u8],
        wire_len: u32,
        record: &mut R,
    ) -> u32 {
        // libpcap sees at most 4 GiB - 1 bytes of a packet.
        let data = &data[..data.len().min(u32::MAX as usize)];
        let ops = &self.ops[..];
        let mut backward = 0u32;
        loop {
            let Some(&op) = ops.get(pc) else { return 0 };
            pc += 1;
            match exec(op, r, mem, data, wire_len) {
                Step::Next => record.op(op, false),
                Step::Branch(taken, t, f) => {
                    record.op(op, taken);
                    pc = if taken { t } else { f } as usize;
                }
                Step::Jump(t) => {
                    let t = t as usize;
                    if t < pc {
                        backward += 1;
                        if backward > MAX_BACKWARD_JUMPS {
                            return 0;
                        }
                    }
                    pc = t;
                }
                Step::Return(v) => {
                    record.op(op, false);
                    return v;
                }
            }
        }
    }
}

/// A program's registers (its scratch memory is kept apart: paths with
/// stores never run as a group).
#[derive(Default, Clone, Copy)]
struct Regs {
    a: u32,
    x: u32,
}

/// What one operation did.
enum Step {
    Next,
    /// A conditional jump: taken or not, and its two targets.
    Branch(bool, u32, u32),
    Jump(u32),
    Return(u32),
}

/// Where [`Decoded::run_from`] tells the operations it executes.
trait Record {
    fn op(&mut self, op: Op, taken: bool);
}

impl Record for () {
    #[inline(always)]
    fn op(&mut self, _: Op, _: bool) {}
}
/// Executes one operation on the registers.
#[inline(always)]
fn exec(op: Op, r: &mut Regs, mem: &mut [u32; 16], data: &[u8], wire_len: u32) -> Step {
    // The `len`-byte load at `off` (+ `x` for indexed loads), if it lies
    // inside the packet.
    let load = |off: u64, len: usize| -> Option<&[u8]> {
        let start = usize::try_from(off).ok()?;
        data.get(start..start.checked_add(len)?)
    };
    macro_rules! ld {
        ($off:expr, $n:literal) => {
            match load($off, $n) {
                Some(b) => {
                    let mut w = [0u8; 4];
                    w[4 - $n..].copy_from_slice(b);
                    u32::from_be_bytes(w)
                }
                None => return Step::Return(0),
            }
        };
    }
    let x = r.x;
    match op {
        Op::RetK(k) => return Step::Return(k),
        Op::RetA => return Step::Return(r.a),
        Op::LdW(k) => r.a = ld!(u64::from(k), 4),
        Op::LdH(k) => r.a = ld!(u64::from(k), 2),
        Op::LdB(k) => r.a = ld!(u64::from(k), 1),
        Op::LdWInd(k) => r.a = ld!(u64::from(x) + u64::from(k), 4),
        Op::LdHInd(k) => r.a = ld!(u64::from(x) + u64::from(k), 2),
        Op::LdBInd(k) => r.a = ld!(u64::from(x) + u64::from(k), 1),
        Op::LdLen => r.a = wire_len,
        Op::LdxLen => r.x = wire_len,
        Op::LdImm(k) => r.a = k,
        Op::LdxImm(k) => r.x = k,
        Op::LdMem(m) => r.a = mem[usize::from(m & 15)],
        Op::LdxMem(m) => r.x = mem[usize::from(m & 15)],
        Op::LdxMsh(k) => r.x = (ld!(u64::from(k), 1) & 0xf) << 2,
        Op::St(m) => mem[usize::from(m & 15)] = r.a,
        Op::Stx(m) => mem[usize::from(m & 15)] = x,
        Op::Ja(t) => return Step::Jump(t),
        Op::JgtK(k, t, f) => return Step::Branch(r.a > k, t, f),
        Op::JgeK(k, t, f) => return Step::Branch(r.a >= k, t, f),
        Op::JeqK(k, t, f) => return Step::Branch(r.a == k, t, f),
        Op::JsetK(k, t, f) => return Step::Branch(r.a & k != 0, t, f),
        Op::JgtX(t, f) => return Step::Branch(r.a > x, t, f),
        Op::JgeX(t, f) => return Step::Branch(r.a >= x, t, f),
        Op::JeqX(t, f) => return Step::Branch(r.a == x, t, f),
        Op::JsetX(t, f) => return Step::Branch(r.a & x != 0, t, f),
        Op::AddX => r.a = r.a.wrapping_add(x),
        Op::SubX => r.a = r.a.wrapping_sub(x),
        Op::MulX => r.a = r.a.wrapping_mul(x),
        Op::DivX => match r.a.checked_div(x) {
            Some(v) => r.a = v,
            None => return Step::Return(0),
        },
        Op::ModX => match r.a.checked_rem(x) {
            Some(v) => r.a = v,
            None => return Step::Return(0),
        },
        Op::AndX => r.a &= x,
        Op::OrX => r.a |= x,
        Op::XorX => r.a ^= x,
        Op::LshX => r.a = r.a.checked_shl(x).unwrap_or(0),
        Op::RshX => r.a = r.a.checked_shr(x).unwrap_or(0),
        Op::AddK(k) => r.a = r.a.wrapping_add(k),
        Op::SubK(k) => r.a = r.a.wrapping_sub(k),
        Op::MulK(k) => r.a = r.a.wrapping_mul(k),
        Op::DivK(k) => match r.a.checked_div(k) {
            Some(v) => r.a = v,
            None => return Step::Return(0),
        },
        Op::ModK(k) => match r.a.checked_rem(k) {
            Some(v) => r.a = v,
            None => return Step::Return(0),
        },
        Op::AndK(k) => r.a &= k,
        Op::OrK(k) => r.a |= k,
        Op::XorK(k) => r.a ^= k,
        Op::LshK(k) => r.a = r.a.checked_shl(k).unwrap_or(0),
        Op::RshK(k) => r.a = r.a.checked_shr(k).unwrap_or(0),
        Op::LdHJeq(k, v, t, f) => {
            r.a = ld!(u64::from(k), 2);
            return Step::Branch(r.a == v, t, f);
        }
        Op::LdBJeq(k, v, t, f) => {
            r.a = ld!(u64::from(k), 1);
            return Step::Branch(r.a == v, t, f);
        }
        Op::LdWJeq(k, v, t, f) => {
            r.a = ld!(u64::from(k), 4);
            return Step::Branch(r.a == v, t, f);
        }
        Op::LdHJset(k, v, t, f) => {
            r.a = ld!(u64::from(k), 2);
            return Step::Branch(r.a & v != 0, t, f);
        }
        Op::LdBJset(k, v, t, f) => {
            r.a = ld!(u64::from(k), 1);
            return Step::Branch(r.a & v != 0, t, f);
        }
        Op::LdHJgt(k, v, t, f) => {
            r.a = ld!(u64::from(k), 2);
            return Step::Branch(r.a > v, t, f);
        }
        Op::LdHJge(k, v, t, f) => {
            r.a = ld!(u64::from(k), 2);
            return Step::Branch(r.a >= v, t, f);
        }
        Op::LdHIndJeq(k, v, t, f) => {
            r.a = ld!(u64::from(x) + u64::from(k), 2);
            return Step::Branch(r.a == v, t, f);
        }
        Op::LdBIndJeq(k, v, t, f) => {
            r.a = ld!(u64::from(x) + u64::from(k), 1);
            return Step::Branch(r.a == v, t, f);
        }
        Op::Neg => r.a = 0u32.wrapping_sub(r.a),
        Op::Tax => r.x = r.a,
        Op::Txa => r.a = x,
    }
    Step::Next
}
