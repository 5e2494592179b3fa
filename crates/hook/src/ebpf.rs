//! eBPF instructions as the kernel takes them (`struct bpf_insn`: opcode,
//! destination and source registers, a signed 16-bit offset, a signed
//! 32-bit immediate), for the programs this crate writes at run time
//! ([`crate::cbpf`]) without clang. Only what the translator needs.

/// Registers.
pub type Reg = u8;
/// Return value and helper results.
pub const R0: Reg = 0;
/// Helper arguments (clobbered by calls).
pub const R1: Reg = 1;
pub const R2: Reg = 2;
pub const R3: Reg = 3;
pub const R4: Reg = 4;
pub const R5: Reg = 5;
/// Callee-saved registers.
pub const R6: Reg = 6;
pub const R7: Reg = 7;
pub const R8: Reg = 8;
pub const R9: Reg = 9;
/// Frame pointer (read only).
pub const FP: Reg = 10;

// Classes.
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const ALU64: u8 = 0x07;
const LD: u8 = 0x00;
// Sources.
const K: u8 = 0x00;
const X: u8 = 0x08;
// Memory modes.
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
/// Sizes.
pub const W: u8 = 0x00;
pub const H: u8 = 0x08;
pub const B: u8 = 0x10;
pub const DW: u8 = 0x18;

/// ALU operations (same values as classic BPF's).
pub mod alu {
    pub const ADD: u8 = 0x00;
    pub const SUB: u8 = 0x10;
    pub const MUL: u8 = 0x20;
    pub const DIV: u8 = 0x30;
    pub const OR: u8 = 0x40;
    pub const AND: u8 = 0x50;
    pub const LSH: u8 = 0x60;
    pub const RSH: u8 = 0x70;
    pub const NEG: u8 = 0x80;
    pub const MOD: u8 = 0x90;
    pub const XOR: u8 = 0xa0;
    pub const MOV: u8 = 0xb0;
    pub const END: u8 = 0xd0;
}

/// Jump operations (JEQ, JGT, JGE, JSET as classic BPF's).
pub mod jmp {
    pub const JA: u8 = 0x00;
    pub const JEQ: u8 = 0x10;
    pub const JGT: u8 = 0x20;
    pub const JGE: u8 = 0x30;
    pub const JSET: u8 = 0x40;
    pub const JNE: u8 = 0x50;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
}

/// Helper function numbers (include/uapi/linux/bpf.h).
pub mod helper {
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    pub const TAIL_CALL: i32 = 12;
    pub const XDP_GET_BUFF_LEN: i32 = 188;
}

/// `src_reg` of a 64-bit immediate load that names a map by descriptor.
pub const PSEUDO_MAP_FD: Reg = 1;

/// One instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: Reg,
    pub src: Reg,
    pub off: i16,
    pub imm: i32,
}

const fn insn(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        dst,
        src,
        off,
        imm,
    }
}

impl Insn {
    /// The 8 bytes of `struct bpf_insn` (registers packed low nibble
    /// first: dst, then src, as on little-endian hosts).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }

    /// The instruction as the raw 64-bit word the loader hands over.
    pub fn to_u64(self) -> u64 {
        u64::from_ne_bytes(self.to_bytes())
    }

    /// True for a jump whose `off` is to be patched (not call or exit).
    pub fn is_jump(self) -> bool {
        let class = self.code & 0x07;
        (class == JMP || class == JMP32) && !matches!(self.code & 0xf0, jmp::CALL | jmp::EXIT)
    }
}

/// `dst = imm` (32-bit, zero-extended).
pub const fn mov32_imm(dst: Reg, imm: i32) -> Insn {
    insn(ALU | alu::MOV | K, dst, 0, 0, imm)
}
/// `dst = src` (32-bit, zero-extended).
pub const fn mov32_reg(dst: Reg, src: Reg) -> Insn {
    insn(ALU | alu::MOV | X, dst, src, 0, 0)
}
/// `dst = src` (64-bit).
pub const fn mov64_reg(dst: Reg, src: Reg) -> Insn {
    insn(ALU64 | alu::MOV | X, dst, src, 0, 0)
}
/// 32-bit `dst op= imm`.
pub const fn alu32_imm(op: u8, dst: Reg, imm: i32) -> Insn {
    insn(ALU | op | K, dst, 0, 0, imm)
}
/// 32-bit `dst op= src`.
pub const fn alu32_reg(op: u8, dst: Reg, src: Reg) -> Insn {
    insn(ALU | op | X, dst, src, 0, 0)
}
/// 64-bit `dst op= imm`.
pub const fn alu64_imm(op: u8, dst: Reg, imm: i32) -> Insn {
    insn(ALU64 | op | K, dst, 0, 0, imm)
}
/// 64-bit `dst op= src`.
pub const fn alu64_reg(op: u8, dst: Reg, src: Reg) -> Insn {
    insn(ALU64 | op | X, dst, src, 0, 0)
}
/// `dst = be(bits)(dst)`: network to host order of the low `bits` bits.
pub const fn to_be(dst: Reg, bits: i32) -> Insn {
    insn(ALU | alu::END | X, dst, 0, 0, bits)
}
/// `dst = *(size *)(src + off)`.
pub const fn ldx(size: u8, dst: Reg, src: Reg, off: i16) -> Insn {
    insn(LDX | MEM | size, dst, src, off, 0)
}
/// `*(size *)(dst + off) = src`.
pub const fn stx(size: u8, dst: Reg, off: i16, src: Reg) -> Insn {
    insn(STX | MEM | size, dst, src, off, 0)
}
/// `*(size *)(dst + off) = imm`.
pub const fn st(size: u8, dst: Reg, off: i16, imm: i32) -> Insn {
    insn(ST | MEM | size, dst, 0, off, imm)
}
/// `goto +off`.
pub const fn ja(off: i16) -> Insn {
    insn(JMP | jmp::JA, 0, 0, off, 0)
}
/// 32-bit compare of `dst` with `imm` (unsigned), `goto +off` if true.
pub const fn jmp32_imm(op: u8, dst: Reg, imm: i32, off: i16) -> Insn {
    insn(JMP32 | op | K, dst, 0, off, imm)
}
/// 32-bit compare of `dst` with `src` (unsigned), `goto +off` if true.
pub const fn jmp32_reg(op: u8, dst: Reg, src: Reg, off: i16) -> Insn {
    insn(JMP32 | op | X, dst, src, off, 0)
}
/// 64-bit compare of `dst` with `imm`, `goto +off` if true.
pub const fn jmp64_imm(op: u8, dst: Reg, imm: i32, off: i16) -> Insn {
    insn(JMP | op | K, dst, 0, off, imm)
}
/// 64-bit compare of `dst` with `src` (unsigned), `goto +off` if true.
pub const fn jmp64_reg(op: u8, dst: Reg, src: Reg, off: i16) -> Insn {
    insn(JMP | op | X, dst, src, off, 0)
}
/// Helper call.
pub const fn call(helper: i32) -> Insn {
    insn(JMP | jmp::CALL, 0, 0, 0, helper)
}
/// Return `r0`.
pub const fn exit() -> Insn {
    insn(JMP | jmp::EXIT, 0, 0, 0, 0)
}
/// `dst = map` (two instruction slots).
pub const fn ld_map_fd(dst: Reg, fd: i32) -> [Insn; 2] {
    [
        insn(LD | IMM | DW, dst, PSEUDO_MAP_FD, 0, fd),
        insn(0, 0, 0, 0, 0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_match_the_kernel_headers() {
        // BPF_MOV32_IMM(BPF_REG_0, 2) = b4 00 00 00 02 00 00 00
        assert_eq!(mov32_imm(R0, 2).to_bytes(), [0xb4, 0, 0, 0, 2, 0, 0, 0]);
        // BPF_EXIT_INSN() = 95 00 ...
        assert_eq!(exit().to_bytes()[0], 0x95);
        // BPF_LDX_MEM(BPF_W, R2, R1, 4) = 61 12 04 00 ...
        assert_eq!(ldx(W, R2, R1, 4).to_bytes(), [0x61, 0x12, 4, 0, 0, 0, 0, 0]);
        // BPF_JMP32_IMM(BPF_JGT, R7, 5, 3) = 26 07 03 00 05 00 00 00
        assert_eq!(
            jmp32_imm(jmp::JGT, R7, 5, 3).to_bytes(),
            [0x26, 7, 3, 0, 5, 0, 0, 0]
        );
        // be16 r7 = dc 07 00 00 10 00 00 00
        assert_eq!(to_be(R7, 16).to_bytes(), [0xdc, 7, 0, 0, 16, 0, 0, 0]);
        // lddw r1, map fd 9 = 18 11 ...
        assert_eq!(
            ld_map_fd(R1, 9)[0].to_bytes(),
            [0x18, 0x11, 0, 0, 9, 0, 0, 0]
        );
        assert!(ja(1).is_jump() && !exit().is_jump() && !call(1).is_jump());
    }
}
