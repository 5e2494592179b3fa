//! The coded fields of one packet's headers (the values a record predicts
//! and codes), and the ones' complement arithmetic of their checksums:
//! what both the flow contexts and the predictions are made of.

use crate::layout::{be16, be32, Layout};

pub(super) fn ones_add(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xffff) + (s >> 16)) as u16
}

pub(super) fn ones_sub(a: u16, b: u16) -> u16 {
    ones_add(a, !b)
}

/// The coded fields of one packet.
#[derive(Default, Clone, Copy)]
pub(super) struct Fields {
    pub(super) ipid: u16,
    pub(super) frag: u16,
    pub(super) l4csum: u16,
    pub(super) seq: u32,
    pub(super) ack: u32,
    pub(super) win: u16,
    pub(super) tsval: u32,
    pub(super) tsecr: u32,
    /// Not coded as fields (predicted from the original length, or kept):
    /// the IP length field, the UDP length, TCP's data offset and flags.
    pub(super) ip_len: u16,
    pub(super) udp_len: u16,
    pub(super) tcp_hf: u16,
}

impl Fields {
    #[inline(always)]
    pub(super) fn read(l: &Layout, h: &[u8]) -> Fields {
        let mut f = Fields {
            ip_len: be16(h, l.ip_len_at()),
            ..Fields::default()
        };
        if l.v4() {
            f.ipid = be16(h, l.l3 as usize + 4);
            f.frag = be16(h, l.l3 as usize + 6);
        }
        if l.tcp() || l.udp() {
            f.l4csum = be16(h, l.l4_csum_at());
        }
        if l.udp() {
            f.udp_len = be16(h, l.l4 as usize + 4);
        }
        if l.tcp() {
            let l4 = l.l4 as usize;
            f.seq = be32(h, l4 + 4);
            f.ack = be32(h, l4 + 8);
            f.tcp_hf = be16(h, l4 + 12);
            f.win = be16(h, l4 + 14);
            if l.ts_opt != 0 {
                f.tsval = be32(h, l.ts_opt as usize);
                f.tsecr = be32(h, l.ts_opt as usize + 4);
            }
        }
        f
    }

    /// Bytes after the IP header by its length field (IPv6: payload
    /// length, which is the same thing as the layout allows no extension
    /// headers).
    #[inline(always)]
    pub(super) fn ip_payload(&self, l: &Layout) -> u32 {
        let len = self.ip_len as u32;
        if l.v6 {
            len
        } else {
            len.wrapping_sub(l.l4 as u32 - l.l3 as u32)
        }
    }
}
