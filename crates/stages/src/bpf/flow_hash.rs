//! The flow sampler's classic BPF tail ([`flow_hash_tail`]) and the small
//! assembler with symbolic forward jumps that writes it. Apart from the
//! parent because it is a program of its own (~150 instructions), not a
//! rewrite of libpcap's output.

use super::{
    ja, jump, ret, stmt, Instruction, BPF_ABS, BPF_ADD, BPF_ALU, BPF_AND, BPF_B, BPF_H, BPF_IMM,
    BPF_IND, BPF_JEQ, BPF_JSET, BPF_K, BPF_LD, BPF_LDX, BPF_LSH, BPF_MEM, BPF_MISC, BPF_MOD,
    BPF_MUL, BPF_RSH, BPF_ST, BPF_STX, BPF_TAX, BPF_W, BPF_X, BPF_XOR,
};

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
