//! What a flow's context predicts for its next packet (lengths, IPv4 ID
//! and fragment, TCP sequence and acknowledgement numbers, checksum), and
//! how the predicted-or-coded values are written into a header: the same
//! code for the encoder and the decoder, so their predictions agree.

use super::context::{Contexts, Slot};
use super::fields::{ones_add, Fields};
use crate::layout::{self, put16, put32, Layout};

/// What a context predicts for the next packet of its flow.
pub(super) struct Pred {
    pub(super) l4csum: u16,
    pub(super) caplen: u32,
    pub(super) ip_len: u16,
    pub(super) udp_len: u16,
    pub(super) ipid: u16,
    pub(super) frag: u16,
    pub(super) seq: u32,
    pub(super) ack: u32,
    /// The IPv4 ID is predicted to count (not a datagram's next fragment).
    id_counts: bool,
}

/// The original length a context predicts: its own, except between the
/// fragments of a datagram stream (see [`Slot::last_off`]).
pub(super) fn predict_wire(s: &Slot) -> u32 {
    let l = &s.layout;
    if l.v4() {
        let f = s.f.frag;
        let (off, mf) = (f & 0x1fff, f & 0x2000 != 0);
        if mf {
            let next = off.wrapping_add((s.f.ip_payload(l) / 8) as u16) & 0x1fff;
            if s.last_off != 0 && next == s.last_off {
                return s.last_wire;
            }
        } else if off != 0 && s.full_wire != 0 {
            return s.full_wire;
        }
    }
    s.wire
}

#[inline(always)]
pub(super) fn predict(s: &Slot, wire: u32) -> Pred {
    let l = &s.layout;
    let o = &s.f;
    let caplen = if s.caplen < s.wire {
        s.caplen.min(wire)
    } else {
        wire
    };
    let grow = wire.wrapping_sub(s.wire) as u16;
    let ip_len = o.ip_len.wrapping_add(grow);
    let udp_len = if l.udp() {
        o.udp_len.wrapping_add(grow)
    } else {
        0
    };
    let (mut ipid, mut frag, mut id_counts) = (0, 0, false);
    if l.v4() {
        let id = o.ipid;
        let f = o.frag;
        let (off, mf) = (f & 0x1fff, f & 0x2000 != 0);
        if mf && !(off == 0 && l.kind != layout::L4::None) {
            // The datagram continues: same ID, the next offset. (A first
            // fragment's context gets the next datagram's first fragment:
            // the others have a context of their own.)
            ipid = id;
            let next = off.wrapping_add((o.ip_payload(l) / 8) as u16) & 0x1fff;
            // The last fragment where the previous datagram's was.
            let more = if s.last_off != 0 && next == s.last_off {
                0
            } else {
                0x2000
            };
            frag = (f & 0xc000) | more | next;
        } else {
            // Zero stays zero: masked by policy, or a sender that does not
            // number DF packets.
            ipid = if id == 0 || s.id_same {
                id
            } else {
                id.wrapping_add(1)
            };
            id_counts = true;
            frag = if off != 0 {
                // After a last fragment, the next datagram's fragments.
                (f & 0xc000) | 0x2000 | s.first_off
            } else {
                f
            };
        }
    }
    let (mut seq, mut ack) = (0, 0);
    if l.tcp() {
        let thl = (o.tcp_hf >> 12) as u32 * 4;
        let syn_fin = (o.tcp_hf & 3 != 0) as u32;
        let prev = o.seq;
        // A zero sequence number is a masked one (1 in 2^32 otherwise).
        seq = if prev == 0 {
            0
        } else {
            prev.wrapping_add(o.ip_payload(l).wrapping_sub(thl))
                .wrapping_add(syn_fin)
        };
        ack = o.ack.wrapping_add(s.ack_step);
    }
    let l4csum = if l.tcp() || l.udp() {
        ones_add(o.l4csum, s.csum_step)
    } else {
        0
    };
    Pred {
        l4csum,
        caplen,
        ip_len,
        udp_len,
        ipid,
        frag,
        seq,
        ack,
        id_counts,
    }
}

/// Writes the predicted-or-coded field values into header `p`.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) fn put_fields(p: &mut [u8], l: &Layout, pr: &Pred, v: &Fields) {
    put16(p, l.ip_len_at(), pr.ip_len);
    if l.udp() {
        put16(p, l.l4 as usize + 4, pr.udp_len);
    }
    if l.v4() {
        let l3 = l.l3 as usize;
        put16(p, l3 + 4, v.ipid);
        put16(p, l3 + 6, v.frag);
    }
    if l.tcp() || l.udp() {
        put16(p, l.l4_csum_at(), v.l4csum);
    }
    if l.tcp() {
        let l4 = l.l4 as usize;
        put32(p, l4 + 4, v.seq);
        put32(p, l4 + 8, v.ack);
        put16(p, l4 + 14, v.win);
        if l.ts_opt != 0 {
            put32(p, l.ts_opt as usize, v.tsval);
            put32(p, l.ts_opt as usize + 4, v.tsecr);
        }
    }
}

/// The IPv4 ID prediction of a compressed record and, when the host
/// counter predicts something else, the other one: the record then says
/// which of the two it uses.
#[inline]
pub(super) fn id_choice(
    ctx: &Contexts,
    l: &Layout,
    rs: &Slot,
    pr: &Pred,
    continues: bool,
) -> Option<u16> {
    if !(l.v4() && pr.id_counts && continues) {
        return None;
    }
    ctx.host_predict(rs).filter(|&h| h != pr.ipid)
}
