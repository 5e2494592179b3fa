//! The encoder of one block's records: picks each packet's context (the
//! encoder's flow table, which the decoder never needs), decides the flags
//! and codes the fields, the byte runs and the raw bytes.

use super::context::Contexts;
use super::fields::Fields;
use super::model::{
    same_ctx, Kinds, Models, K_LITERAL, K_NUMBERED, K_OPEN, M_ACK, M_CAPLEN, M_FRAG, M_IPCSUM,
    M_IPID, M_L4CSUM, M_LIT_CAPLEN, M_LIT_WIRE, M_SEQ, M_TSECR, M_TSVAL, M_WIN, M_WIRE,
};
use super::predict::{id_choice, predict, predict_wire, put_fields};
use super::runs::{differs, write_runs, Masks};
use super::{
    allowed, F_ACK, F_CAPLEN, F_DIFF, F_FRAG, F_IPCSUM, F_IPID, F_L4CSUM, F_NEW, F_SEQ, F_TSECR,
    F_TSVAL, F_WIN, F_WIRE,
};
use crate::layout::{self, be16, be32, Layout, MAXH};
use crate::rc;
use crate::varint;
use crate::SLOTS;

/// Flow key of a packet with layout `l`: addresses, protocol, ports, VLAN
/// tags, and whether it is a later fragment (those have no ports and get a
/// context of their own). Only the encoder uses it, to pick slots.
#[inline]
fn flow_key(l: &Layout, d: &[u8]) -> u64 {
    // wyhash-style folded 128-bit products: two or three multiplies in
    // all, each mixing every input bit into every output bit.
    #[inline(always)]
    fn mum(a: u64, b: u64) -> u64 {
        let m = a as u128 * b as u128;
        m as u64 ^ (m >> 64) as u64
    }
    const S: [u64; 5] = [
        0xa076_1d64_78bd_642f,
        0xe703_7ed1_a0b4_28db,
        0x8ebc_6af0_9c88_c6e3,
        0x5899_65cc_7537_4cc3,
        0x1d8e_4e27_c47d_124f,
    ];
    let l3 = l.l3 as usize;
    let later = l.v4() && be16(d, l3 + 6) & 0x1fff != 0;
    let proto = if l.v6 { d[l3 + 6] } else { d[l3 + 9] };
    let ports = if l.kind != layout::L4::None {
        be32(d, l.l4 as usize)
    } else {
        0
    };
    let shape = (ports as u64) << 32
        | (l3 as u64) << 16
        | (l.kind as u64) << 12
        | (l.v6 as u64) << 9
        | (later as u64) << 8
        | proto as u64;
    let addrs = if l.v6 {
        let w = |i: usize| (be32(d, l3 + 8 + 4 * i) as u64) << 32 | be32(d, l3 + 12 + 4 * i) as u64;
        mum(w(0) ^ S[0], w(2) ^ S[1]) ^ mum(w(4) ^ S[2], w(6) ^ S[3])
    } else {
        (be32(d, l3 + 12) as u64) << 32 | be32(d, l3 + 16) as u64
    };
    let mut h = mum(addrs ^ S[0], shape ^ S[1]);
    if l3 > 14 {
        // VLAN tags.
        let tags = (be32(d, 14) as u64) << 32 | if l3 > 18 { be32(d, 18) as u64 } else { 0 };
        h = mum(h ^ S[2], tags ^ S[3]);
    }
    // splitmix64's finalizer: every key bit reaches the slot bits.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[inline]
fn sd(a: u32, b: u32) -> u64 {
    varint::zigzag(a.wrapping_sub(b) as i32 as i64)
}

#[inline]
fn sd16(a: u16, b: u16) -> u64 {
    varint::zigzag(a.wrapping_sub(b) as i16 as i64)
}

/// Encodes records into one block's payload: the range-coded stream and
/// the raw bytes (literal packets, captured bytes past the headers).
pub(crate) struct BlockEncoder {
    linktype: u32,
    ctx: Contexts,
    m: Box<Models>,
    rc: rc::Encoder,
    raw: Vec<u8>,
    /// The encoder's flow table, two candidate entries per flow key: the
    /// slot (low 12 bits) and 20 bits of the key (the slot holds all of
    /// it); 4 entries per slot (64 KiB), so few flows of a busy table
    /// find both of theirs taken and evict another flow's.
    map: Vec<u32>,
    kinds: Kinds,
    prev_same: bool,
    pub count: u32,
    pub base_ts: u64,
    prev_ts: u64,
    scratch: [u8; MAXH],
    masks: Masks,
    /// Coded bytes per part of the record (feature `stats`): approximate,
    /// the range coder's output grows a few bytes behind its input.
    #[cfg(feature = "stats")]
    pub stats: [u64; 24],
}

const MAP: usize = 4 * SLOTS;

/// Adds the growth of `$len` (the coded bytes) during `$e` to part `$i`
/// of `$stats`.
macro_rules! st {
    ($stats:expr, $i:expr, $len:expr, $e:expr) => {{
        #[cfg(feature = "stats")]
        let b = $len;
        $e;
        #[cfg(feature = "stats")]
        {
            $stats[$i] += ($len - b) as u64;
        }
    }};
}

impl BlockEncoder {
    pub fn new(linktype: u32) -> Self {
        BlockEncoder {
            linktype,
            ctx: Contexts::new(),
            m: Models::new(),
            rc: rc::Encoder::new(),
            raw: Vec::with_capacity(1 << 16),
            map: vec![0; MAP],
            kinds: Kinds::default(),
            prev_same: false,
            count: 0,
            base_ts: 0,
            prev_ts: 0,
            scratch: [0; MAXH],
            masks: Masks::default(),
            #[cfg(feature = "stats")]
            stats: [0; 24],
        }
    }

    /// Bytes of the block's payload so far (within a few bytes).
    pub fn len(&self) -> usize {
        4 + self.rc.len() + self.raw.len()
    }

    /// Ends the block: its payload appended to `out`.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.rc.finish();
        let coded = self.rc.bytes();
        out.extend_from_slice(&(coded.len() as u32).to_le_bytes());
        out.extend_from_slice(coded);
        out.extend_from_slice(&self.raw);
    }

    /// Starts a new block: empty payload, every context forgotten.
    pub fn reset(&mut self) {
        self.ctx.reset();
        self.m.reset();
        self.rc.reset();
        self.raw.clear();
        self.kinds = Kinds::default();
        self.prev_same = false;
        self.count = 0;
    }

    /// The slot of map entry `c` if it holds flow `key`.
    #[inline]
    fn lookup(&self, c: usize, key: u64) -> Option<u16> {
        let e = self.map[c];
        if e >> 12 != (key >> 44) as u32 {
            return None;
        }
        let s = (e & 0xfff) as u16;
        let o = self.ctx.slots.get(s as usize)?;
        (o.gen == self.ctx.gen && o.key == key).then_some(s)
    }

    fn literal(&mut self, kind: u32, dts: u64, wire: u32, data: &[u8]) {
        let m = &mut self.m;
        self.kinds.put(&mut self.rc, m, kind);
        self.rc.uint(&mut m.dts[2], dts);
        self.rc.uint(&mut m.field[M_LIT_WIRE], wire as u64);
        self.rc.uint(&mut m.field[M_LIT_CAPLEN], data.len() as u64);
        self.raw.extend_from_slice(data);
    }

    pub fn push(&mut self, ts: u64, wire: u32, data: &[u8]) {
        self.rc.room();
        if self.count == 0 {
            self.base_ts = ts;
            self.prev_ts = ts;
        }
        self.count += 1;
        let dts = varint::zigzag(ts.wrapping_sub(self.prev_ts) as i64);
        self.prev_ts = ts;
        let Some(l) = layout::parse(self.linktype, data) else {
            // Not understood: stored as it is, no context.
            st!(
                self.stats,
                0,
                self.rc.len() + self.raw.len(),
                self.literal(K_LITERAL, dts, wire, data)
            );
            return;
        };
        let key = flow_key(&l, data);
        // Two candidate entries per flow (two-way associative), so two busy
        // flows that collide in one do not keep evicting each other.
        let c1 = key as usize & (MAP - 1);
        let c2 = (key >> 32) as usize & (MAP - 1);
        let holds = |c: usize| {
            self.lookup(c, key)
                .filter(|&s| self.ctx.slots[s as usize].layout == l)
        };
        let found = holds(c1).or_else(|| holds(c2));
        let continues = found.is_some();
        let r = match found {
            Some(s) => s,
            // A new flow (or one whose headers changed shape): predicted
            // from a recent packet with the same layout, else literal.
            None => match self
                .ctx
                .mru
                .iter()
                .copied()
                .find(|&m| self.ctx.valid(m) && self.ctx.slots[m as usize].layout == l)
            {
                Some(m) => m,
                None => {
                    st!(
                        self.stats,
                        1,
                        self.rc.len() + self.raw.len(),
                        self.literal(K_OPEN, dts, wire, data)
                    );
                    let d = self.ctx.alloc();
                    let v = Fields::read(&l, data);
                    self.ctx.store(d, true, key, l, data, wire, &v);
                    self.ctx.slots[d as usize].last_flags = 0;
                    self.ctx.slots[d as usize].host_id = false;
                    self.ctx.host_update(d);
                    self.remember(c1, c2, key, d);
                    return;
                }
            },
        };
        let rs = &self.ctx.slots[r as usize];
        // Headers and the bytes after them that the reference also has.
        let hl = data.len().min(rs.stored);
        let pr = predict(rs, wire);
        let old = rs.f;
        let v = Fields::read(&l, data);
        let mut flags = 0u32;
        if !continues {
            flags |= F_NEW;
        }
        let wire_pred = predict_wire(rs);
        if wire != wire_pred {
            flags |= F_WIRE;
        }
        if data.len() as u32 != pr.caplen {
            flags |= F_CAPLEN;
        }
        let host = id_choice(&self.ctx, &l, rs, &pr, continues);
        let mut id_pred = pr.ipid;
        let mut use_host = false;
        if let Some(h) = host {
            let dist = |p: u16| (v.ipid.wrapping_sub(p) as i16).unsigned_abs();
            use_host = dist(h) < dist(pr.ipid);
            if use_host {
                id_pred = h;
            }
        }
        if l.v4() {
            if v.ipid != id_pred {
                flags |= F_IPID;
            }
            if v.frag != pr.frag {
                flags |= F_FRAG;
            }
            let l3 = l.l3 as usize;
            if layout::ipv4_checksum(&data[l3..l.l4 as usize]) != be16(data, l3 + 10) {
                flags |= F_IPCSUM;
            }
        }
        if (l.tcp() || l.udp()) && v.l4csum != pr.l4csum {
            flags |= F_L4CSUM;
        }
        if l.tcp() {
            if v.seq != pr.seq {
                flags |= F_SEQ;
            }
            if v.ack != pr.ack {
                flags |= F_ACK;
            }
            if v.win != old.win {
                flags |= F_WIN;
            }
            if l.ts_opt != 0 {
                if v.tsval != old.tsval {
                    flags |= F_TSVAL;
                }
                if v.tsecr != old.tsecr {
                    flags |= F_TSECR;
                }
            }
        }
        // The prediction with the coded fields filled in; what still
        // differs from the packet goes into the byte runs. The fields
        // themselves are coded (or are the packet's own, such as the IPv4
        // header checksum), so only the bytes outside them and the two
        // length fields (predicted from the original length) can differ.
        let mask = self.masks.get(&l);
        let diff = v.ip_len != pr.ip_len
            || (l.udp() && v.udp_len != pr.udp_len)
            || differs(&data[..hl], &rs.hdr, mask);
        if diff {
            flags |= F_DIFF;
            let p = &mut self.scratch[..hl];
            p.copy_from_slice(&rs.hdr[..hl]);
            put_fields(p, &l, &pr, &v);
            if l.v4() {
                let at = l.l3 as usize + 10;
                p[at..at + 2].copy_from_slice(&data[at..at + 2]);
            }
        }
        let kind = match self.ctx.mru.iter().position(|&m| m == r) {
            Some(i) => i as u32,
            None => K_NUMBERED,
        };
        let last_flags = rs.last_flags as u32;
        let host_ctx = rs.host_id as usize;
        let m = &mut *self.m;
        let e = &mut self.rc;
        st!(self.stats, 2, e.len(), self.kinds.put(e, m, kind));
        if kind == K_NUMBERED {
            st!(self.stats, 3, e.len(), {
                e.tree(&mut m.slot, r as u32 >> 8);
                e.direct(r as u32 & 0xff, 8);
            });
        }
        st!(self.stats, 2, e.len(), {
            let same = flags == last_flags;
            e.bit(
                &mut m.same_flags[same_ctx(kind, self.prev_same, last_flags & F_NEW != 0)],
                !same,
            );
            self.prev_same = same;
            if !same {
                // Only the flags the headers can have: a UDP record has
                // no sequence number to change.
                let mut a = allowed(&l);
                while a != 0 {
                    let k = a.trailing_zeros() as usize;
                    a &= a - 1;
                    e.bit(
                        &mut m.flag[k][(last_flags >> k) as usize & 1],
                        (flags >> k) & 1 != 0,
                    );
                }
            }
        });
        st!(
            self.stats,
            4,
            e.len(),
            e.uint(&mut m.dts[!continues as usize], dts)
        );
        #[cfg(feature = "stats")]
        let b0 = e.len();
        let f = &mut m.field;
        if flags & F_L4CSUM != 0 {
            let x = sd16(v.l4csum, pr.l4csum);
            let small = x < 256;
            e.bit(&mut m.csum_small[continues as usize], !small);
            if small {
                e.uint(&mut f[M_L4CSUM], x);
            } else {
                e.direct(v.l4csum as u32, 16);
            }
        }
        if flags & F_ACK != 0 {
            e.uint(&mut f[M_ACK], sd(v.ack, pr.ack));
        }
        if flags & F_TSVAL != 0 {
            e.uint(&mut f[M_TSVAL], sd(v.tsval, old.tsval));
        }
        if flags & F_TSECR != 0 {
            e.uint(&mut f[M_TSECR], sd(v.tsecr, old.tsecr));
        }
        if flags & F_WIRE != 0 {
            e.uint(
                &mut f[M_WIRE],
                varint::zigzag(wire as i64 - wire_pred as i64),
            );
        }
        if host.is_some() {
            e.bit(&mut m.host[host_ctx], use_host);
        }
        if flags & F_IPID != 0 {
            e.uint(&mut f[M_IPID], sd16(v.ipid, id_pred));
        }
        if flags & F_FRAG != 0 {
            e.uint(&mut f[M_FRAG], v.frag as u64);
        }
        if flags & F_SEQ != 0 {
            e.uint(&mut f[M_SEQ], sd(v.seq, pr.seq));
        }
        if flags & F_WIN != 0 {
            e.uint(&mut f[M_WIN], sd16(v.win, old.win));
        }
        if flags & F_CAPLEN != 0 {
            e.uint(&mut f[M_CAPLEN], data.len() as u64);
        }
        if diff {
            write_runs(e, m, &self.scratch[..hl], &data[..hl], !continues);
        }
        if flags & F_IPCSUM != 0 {
            let at = l.l3 as usize + 10;
            e.uint(&mut m.field[M_IPCSUM], be16(data, at) as u64);
        }
        #[cfg(feature = "stats")]
        {
            self.stats[5] += (e.len() - b0) as u64;
            self.stats[6] += (data.len() - hl) as u64;
            self.stats[7] += 1;
            self.stats[20] += !continues as u64;
        }
        self.raw.extend_from_slice(&data[hl..]);
        let d = if continues { r } else { self.ctx.alloc() };
        self.ctx.store(d, !continues, key, l, data, wire, &v);
        let s = &mut self.ctx.slots[d as usize];
        s.last_flags = flags as u16;
        s.host_id = use_host;
        self.ctx.host_update(d);
        if !continues {
            self.remember(c1, c2, key, d);
        }
    }

    /// Points one of a new flow's two map entries at its slot.
    fn remember(&mut self, c1: usize, c2: usize, key: u64, d: u16) {
        // An entry is free unless it names a live slot of another flow.
        let free = |c: usize| {
            let s = (self.map[c] & 0xfff) as usize;
            self.ctx.slots.get(s).is_none_or(|o| {
                o.gen != self.ctx.gen || o.key == key || (o.key >> 44) as u32 != self.map[c] >> 12
            })
        };
        let c = if free(c1) || !free(c2) { c1 } else { c2 };
        self.map[c] = ((key >> 44) as u32) << 12 | d as u32;
    }
}
