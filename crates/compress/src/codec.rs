//! The record codec: flow contexts, predictions, and the encoder and
//! decoder of one block's records. The wire layout is described in the
//! crate documentation; this module is its only implementation.
//!
//! The parts, each in a file of its own so a reader can take one at a
//! time: [`fields`] (the coded header fields of a packet), [`context`]
//! (the flow table both sides keep), [`predict`] (what a context predicts
//! for its flow's next packet), [`model`] (the adaptive probabilities and
//! the record kinds), [`runs`] (the encoder's byte runs), then the two
//! sides that use them all: [`encode`] and [`decode`]. What both sides
//! must agree on bit for bit (the flags) stays here.

use crate::layout::Layout;

mod context;
mod decode;
mod encode;
mod fields;
mod model;
mod predict;
mod runs;

pub(crate) use decode::BlockDecoder;
pub(crate) use encode::BlockEncoder;

// Flags of a compressed record, in the order their values follow.
const F_L4CSUM: u32 = 1 << 0;
const F_ACK: u32 = 1 << 1;
const F_TSVAL: u32 = 1 << 2;
const F_TSECR: u32 = 1 << 3;
const F_WIRE: u32 = 1 << 4;
const F_IPID: u32 = 1 << 5;
const F_FRAG: u32 = 1 << 6;
const F_SEQ: u32 = 1 << 7;
const F_WIN: u32 = 1 << 8;
const F_CAPLEN: u32 = 1 << 9;
const F_NEW: u32 = 1 << 10;
const F_DIFF: u32 = 1 << 11;
const F_IPCSUM: u32 = 1 << 12;
const F_KNOWN: u32 = (1 << 13) - 1;

const NONE: u16 = u16::MAX;

/// Flags that may be set for a layout.
fn allowed(l: &Layout) -> u32 {
    let mut a = F_WIRE | F_CAPLEN | F_NEW | F_DIFF;
    if l.v4() {
        a |= F_IPID | F_FRAG | F_IPCSUM;
    }
    if l.tcp() || l.udp() {
        a |= F_L4CSUM;
    }
    if l.tcp() {
        a |= F_ACK | F_SEQ | F_WIN;
        if l.ts_opt != 0 {
            a |= F_TSVAL | F_TSECR;
        }
    }
    a
}
