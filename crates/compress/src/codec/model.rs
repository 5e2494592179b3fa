//! The adaptive models of a block (every probability both sides start at
//! one half), the record kinds, and the small helpers that code a value
//! with them: shared by the encoder and the decoder, which must walk the
//! models in the same order.

use crate::rc::{self, Prob, Tree, UInt, HALF};
use crate::{DecodeError, ErrorKind};

/// Record kinds (coded first, by a bit tree in the context of the previous
/// record's kind): compressed with the reference named by the most, second
/// and third most recently used slot or by its number, a literal, and a
/// literal that opens a context.
pub(super) const K_NUMBERED: u32 = 3;
pub(super) const K_LITERAL: u32 = 4;
pub(super) const K_OPEN: u32 = 5;

/// Field models, in the order of the flags.
pub(super) const M_L4CSUM: usize = 0;
pub(super) const M_ACK: usize = 1;
pub(super) const M_TSVAL: usize = 2;
pub(super) const M_TSECR: usize = 3;
pub(super) const M_WIRE: usize = 4;
pub(super) const M_IPID: usize = 5;
pub(super) const M_FRAG: usize = 6;
pub(super) const M_SEQ: usize = 7;
pub(super) const M_WIN: usize = 8;
pub(super) const M_CAPLEN: usize = 9;
pub(super) const M_IPCSUM: usize = 10;
pub(super) const M_LIT_WIRE: usize = 11;
pub(super) const M_LIT_CAPLEN: usize = 12;
pub(super) const M_RUNS: usize = 13;
pub(super) const M_GAP: usize = 14;
pub(super) const M_RUNLEN: usize = 15;
const FIELDS: usize = 16;

/// Every adaptive probability of a block (both sides start each block
/// with all of them at one half).
#[derive(Clone)]
pub(super) struct Models {
    /// Kind as the one that followed the previous kind last time?
    kind_hit: [Prob; 6],
    kind: [Tree<8>; 6],
    /// Transport checksum: a small change of the prediction (or else 16
    /// bits as they are).
    pub(super) csum_small: [Prob; 2],
    /// The top 4 bits of a slot number (the low 8 are sent as they are).
    pub(super) slot: Tree<16>,
    pub(super) same_flags: [Prob; 16],
    pub(super) flag: [[Prob; 2]; 13],
    /// Timestamp deltas: continuing a flow, opening a context, literal.
    pub(super) dts: [UInt; 3],
    pub(super) field: [UInt; FIELDS],
    pub(super) host: [Prob; 2],
    /// Bytes of byte runs (format version 2; version 3 sends them direct).
    pub(super) byte: Tree<256>,
    /// Byte runs of records that open a context (format version 4): the
    /// bytes by a tree per header offset modulo 16 (a new flow's ports and
    /// addresses: ephemeral port ranges, well-known ports, address
    /// prefixes are far from uniform), gaps and lengths by trees.
    pub(super) new_byte: [Tree<256>; 16],
    pub(super) new_gap: Tree<256>,
    pub(super) new_len: Tree<256>,
}

impl Models {
    pub(super) fn new() -> Box<Models> {
        Box::new(Models {
            kind_hit: [HALF; 6],
            kind: [const { Tree::new() }; 6],
            csum_small: [HALF; 2],
            slot: Tree::new(),
            same_flags: [HALF; 16],
            flag: [[HALF; 2]; 13],
            dts: [const { UInt::new() }; 3],
            field: [const { UInt::new() }; FIELDS],
            host: [HALF; 2],
            byte: Tree::new(),
            new_byte: [const { Tree::new() }; 16],
            new_gap: Tree::new(),
            new_len: Tree::new(),
        })
    }

    pub(super) fn reset(&mut self) {
        for t in &mut self.kind {
            t.0.fill(HALF);
        }
        self.kind_hit.fill(HALF);
        self.csum_small.fill(HALF);
        self.slot.0.fill(HALF);
        self.same_flags.fill(HALF);
        self.flag = [[HALF; 2]; 13];
        for u in self.dts.iter_mut().chain(self.field.iter_mut()) {
            *u = UInt::new();
        }
        self.host = [HALF; 2];
        self.byte.0.fill(HALF);
        for t in &mut self.new_byte {
            t.0.fill(HALF);
        }
        self.new_gap.0.fill(HALF);
        self.new_len.0.fill(HALF);
    }
}

/// The previous record's kind and the kind that followed each kind last:
/// a record of the kind expected costs one decision.
#[derive(Clone, Copy, Default)]
pub(super) struct Kinds {
    prev: u32,
    next: [u8; 6],
}

impl Kinds {
    #[inline(always)]
    pub(super) fn put(&mut self, e: &mut rc::Encoder, m: &mut Models, kind: u32) {
        let p = self.prev as usize;
        let hit = kind == self.next[p] as u32;
        e.bit(&mut m.kind_hit[p], !hit);
        if !hit {
            e.tree(&mut m.kind[p], kind);
        }
        self.next[p] = kind as u8;
        self.prev = kind;
    }

    /// The next kind (above [`K_OPEN`] only from corrupt input).
    #[inline]
    pub(super) fn get(&mut self, d: &mut rc::Decoder<'_>, m: &mut Models) -> u32 {
        let p = self.prev as usize;
        let kind = if d.bit(&mut m.kind_hit[p]) {
            d.tree(&mut m.kind[p])
        } else {
            self.next[p] as u32
        };
        if kind <= K_OPEN {
            self.next[p] = kind as u8;
            self.prev = kind;
        }
        kind
    }
}

/// Context of the "flags as the flow's last ones" decision: the kind and
/// whether the previous record's flags were its flow's last ones.
#[inline]
pub(super) fn same_ctx(kind: u32, prev_same: bool, new: bool) -> usize {
    (kind as usize) << 2 | (prev_same as usize) << 1 | new as usize
}

/// A value below 255 by the tree `t`; 255 and more as 255, then the
/// excess by the integer model `u`.
#[inline]
pub(super) fn put_small(e: &mut rc::Encoder, t: &mut Tree<256>, u: &mut UInt, v: u64) {
    if v < 255 {
        e.tree(t, v as u32);
    } else {
        e.tree(t, 255);
        e.uint(u, v - 255);
    }
}

/// A value as [`put_small`] codes it.
#[inline]
pub(super) fn get_small(
    d: &mut rc::Decoder<'_>,
    t: &mut Tree<256>,
    u: &mut UInt,
    at: u64,
) -> Result<u64, DecodeError> {
    let v = d.tree(t) as u64;
    if v < 255 {
        return Ok(v);
    }
    Ok(uint(d, u, at)?.saturating_add(255))
}

#[inline]
pub(super) fn uint(d: &mut rc::Decoder<'_>, u: &mut UInt, at: u64) -> Result<u64, DecodeError> {
    d.uint(u).ok_or(DecodeError {
        offset: at,
        kind: ErrorKind::BadVarint,
    })
}
