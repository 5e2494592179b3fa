//! libpcap's classic BPF interpreter (`bpf_filter`), for offline filtering.
//! A module of its own (now a file) so that the calls into libpcap, the
//! only `unsafe` of the BPF code, stay in one place.
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
