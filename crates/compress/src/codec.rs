//! The record codec: flow contexts, predictions, and the encoder and
//! decoder of one block's records. The wire layout is described in the
//! crate documentation; this file is its only implementation.

use crate::layout::{self, be16, be32, put16, put32, Layout, MAXH};
use crate::varint::{self, Cursor};
use crate::{DecodeError, ErrorKind, Record, MAX_CAPLEN, SLOTS};

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

/// Counts the bytes `$e` writes to `$out` under part `$i` (feature `stats`).
macro_rules! st {
    ($st:expr, $i:expr, $out:expr, $e:expr) => {{
        #[cfg(feature = "stats")]
        let b = $out.len();
        $e;
        #[cfg(feature = "stats")]
        {
            $st[$i] += ($out.len() - b) as u64;
        }
    }};
}

/// One flow's context: the previous packet of the flow (its header bytes)
/// and what was learned from the packets before it.
#[derive(Clone)]
struct Slot {
    /// Valid while equal to [`Contexts::gen`] (a block start invalidates
    /// every slot without touching them).
    gen: u32,
    /// The encoder's flow key (unused by the decoder).
    key: u64,
    layout: Layout,
    hdr: [u8; MAXH],
    wire: u32,
    caplen: u32,
    /// Bytes of the packet kept in `hdr`: its headers and what follows
    /// them, up to MAXH (later packets' bytes there are predicted too).
    stored: usize,
    /// Last change of the TCP acknowledgement number.
    ack_step: u32,
    /// Last change of the TCP/UDP checksum (ones' complement): constant
    /// when only a counted field changes, e.g. a masked flow's checksums
    /// recomputed over a partial (offloaded) checksum.
    csum_step: u16,
    /// IPv4 fragment offset of the packet that opened the context: where a
    /// new datagram's fragments restart in a context of non-first fragments.
    first_off: u16,
    /// Offset and original length of the last final fragment seen, and the
    /// original length of the last fragment with more to come: a stream of
    /// same-sized datagrams repeats them.
    last_off: u16,
    last_wire: u32,
    full_wire: u32,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            gen: 0,
            key: 0,
            layout: Layout::default(),
            hdr: [0; MAXH],
            wire: 0,
            caplen: 0,
            stored: 0,
            ack_step: 0,
            csum_step: 0,
            first_off: 0,
            last_off: 0,
            last_wire: 0,
            full_wire: 0,
        }
    }
}

/// The flow table both sides keep, and the three most recently used slots
/// (a record names one of those in two bits of its tag).
struct Contexts {
    slots: Vec<Slot>,
    gen: u32,
    mru: [u16; 3],
}

impl Contexts {
    fn new() -> Self {
        Contexts {
            slots: vec![Slot::default(); SLOTS],
            gen: 1,
            mru: [NONE; 3],
        }
    }

    fn reset(&mut self) {
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            for s in &mut self.slots {
                s.gen = 0;
            }
            self.gen = 1;
        }
        self.mru = [NONE; 3];
    }

    #[inline]
    fn valid(&self, s: u16) -> bool {
        s != NONE && self.slots[s as usize].gen == self.gen
    }

    #[inline]
    fn touch(&mut self, s: u16) {
        if self.mru[0] == s {
        } else if self.mru[1] == s {
            self.mru.swap(0, 1);
        } else {
            self.mru = [s, self.mru[0], self.mru[1]];
        }
    }

    /// Stores packet `data` (already known to have `layout`) into slot `d`.
    #[inline]
    fn store(&mut self, d: u16, new: bool, key: u64, layout: Layout, data: &[u8], wire: u32) {
        let gen = self.gen;
        let s = &mut self.slots[d as usize];
        let n = data.len().min(MAXH);
        if layout.tcp() || layout.udp() {
            let at = layout.l4_csum_at();
            s.csum_step = if new {
                0
            } else {
                ones_sub(be16(data, at), be16(&s.hdr, at))
            };
        }
        if new {
            s.last_off = 0;
            s.last_wire = 0;
            s.full_wire = 0;
        }
        if layout.v4() {
            let f = be16(data, layout.l3 as usize + 6);
            if f & 0x2000 != 0 {
                s.full_wire = wire;
            } else if f & 0x1fff != 0 {
                s.last_off = f & 0x1fff;
                s.last_wire = wire;
            }
        }
        if new {
            s.ack_step = 0;
            s.first_off = if layout.v4() {
                be16(data, layout.l3 as usize + 6) & 0x1fff
            } else {
                0
            };
        } else if layout.tcp() {
            let at = layout.l4 as usize + 8;
            s.ack_step = be32(data, at).wrapping_sub(be32(&s.hdr, at));
        }
        s.gen = gen;
        s.key = key;
        s.layout = layout;
        s.hdr[..n].copy_from_slice(&data[..n]);
        s.stored = n;
        s.wire = wire;
        s.caplen = data.len() as u32;
        self.touch(d);
    }
}

fn ones_add(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xffff) + (s >> 16)) as u16
}

fn ones_sub(a: u16, b: u16) -> u16 {
    ones_add(a, !b)
}

/// What a context predicts for the next packet of its flow.
struct Pred {
    l4csum: u16,
    caplen: u32,
    ip_len: u16,
    udp_len: u16,
    ipid: u16,
    frag: u16,
    seq: u32,
    ack: u32,
}

/// The original length a context predicts: its own, except between the
/// fragments of a datagram stream (see [`Slot::last_off`]).
fn predict_wire(s: &Slot) -> u32 {
    let l = &s.layout;
    if l.v4() {
        let f = be16(&s.hdr, l.l3 as usize + 6);
        let (off, mf) = (f & 0x1fff, f & 0x2000 != 0);
        if mf {
            let next = off.wrapping_add((l.ip_payload(&s.hdr) / 8) as u16) & 0x1fff;
            if s.last_off != 0 && next == s.last_off {
                return s.last_wire;
            }
        } else if off != 0 && s.full_wire != 0 {
            return s.full_wire;
        }
    }
    s.wire
}

fn predict(s: &Slot, wire: u32) -> Pred {
    let l = &s.layout;
    let h = &s.hdr;
    let caplen = if s.caplen < s.wire {
        s.caplen.min(wire)
    } else {
        wire
    };
    let grow = wire.wrapping_sub(s.wire) as u16;
    let ip_len = be16(h, l.ip_len_at()).wrapping_add(grow);
    let udp_len = if l.udp() {
        be16(h, l.l4 as usize + 4).wrapping_add(grow)
    } else {
        0
    };
    let (mut ipid, mut frag) = (0, 0);
    if l.v4() {
        let l3 = l.l3 as usize;
        let id = be16(h, l3 + 4);
        let f = be16(h, l3 + 6);
        let (off, mf) = (f & 0x1fff, f & 0x2000 != 0);
        if mf && !(off == 0 && l.kind != layout::L4::None) {
            // The datagram continues: same ID, the next offset. (A first
            // fragment's context gets the next datagram's first fragment:
            // the others have a context of their own.)
            ipid = id;
            let next = off.wrapping_add((l.ip_payload(h) / 8) as u16) & 0x1fff;
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
            ipid = if id == 0 { 0 } else { id.wrapping_add(1) };
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
        let l4 = l.l4 as usize;
        let thl = (h[l4 + 12] >> 4) as u32 * 4;
        let syn_fin = (h[l4 + 13] & 3 != 0) as u32;
        let prev = be32(h, l4 + 4);
        // A zero sequence number is a masked one (1 in 2^32 otherwise).
        seq = if prev == 0 {
            0
        } else {
            prev.wrapping_add(l.ip_payload(h).wrapping_sub(thl))
                .wrapping_add(syn_fin)
        };
        ack = be32(h, l4 + 8).wrapping_add(s.ack_step);
    }
    let l4csum = if l.tcp() || l.udp() {
        ones_add(be16(h, l.l4_csum_at()), s.csum_step)
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
    }
}

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

/// Flow key of a packet with layout `l`: addresses, protocol, ports, VLAN
/// tags, and whether it is a later fragment (those have no ports and get a
/// context of their own). Only the encoder uses it, to pick slots.
#[inline]
fn flow_key(l: &Layout, d: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |h: u64, v: u64| (h ^ v).wrapping_mul(K).rotate_left(31);
    let l3 = l.l3 as usize;
    let mut h = mix(l3 as u64, l.kind as u64);
    if l3 > 14 {
        h = mix(h, be32(d, 14) as u64);
        if l3 > 18 {
            h = mix(h, be32(d, 18) as u64);
        }
    }
    if l.v6 {
        for i in 0..4 {
            let at = l3 + 8 + 8 * i;
            h = mix(h, (be32(d, at) as u64) << 32 | be32(d, at + 4) as u64);
        }
        h = mix(h, d[l3 + 6] as u64);
    } else {
        h = mix(h, (be32(d, l3 + 12) as u64) << 32 | be32(d, l3 + 16) as u64);
        let later = (be16(d, l3 + 6) & 0x1fff != 0) as u64;
        h = mix(h, d[l3 + 9] as u64 | later << 8);
    }
    if l.kind != layout::L4::None {
        h = mix(h, be32(d, l.l4 as usize) as u64);
    }
    // splitmix64's finalizer: every key bit reaches the slot bits.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Writes the predicted-or-coded field values into header `p`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn put_fields(p: &mut [u8], l: &Layout, pr: &Pred, v: &Fields) {
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

/// The coded fields of one packet.
#[derive(Default)]
struct Fields {
    ipid: u16,
    frag: u16,
    l4csum: u16,
    seq: u32,
    ack: u32,
    win: u16,
    tsval: u32,
    tsecr: u32,
}

impl Fields {
    fn read(l: &Layout, h: &[u8]) -> Fields {
        let mut f = Fields::default();
        if l.v4() {
            f.ipid = be16(h, l.l3 as usize + 4);
            f.frag = be16(h, l.l3 as usize + 6);
        }
        if l.tcp() || l.udp() {
            f.l4csum = be16(h, l.l4_csum_at());
        }
        if l.tcp() {
            let l4 = l.l4 as usize;
            f.seq = be32(h, l4 + 4);
            f.ack = be32(h, l4 + 8);
            f.win = be16(h, l4 + 14);
            if l.ts_opt != 0 {
                f.tsval = be32(h, l.ts_opt as usize);
                f.tsecr = be32(h, l.ts_opt as usize + 4);
            }
        }
        f
    }
}

/// Encodes records into one block's payload. Allocates only when the
/// payload outgrows what earlier blocks needed.
pub(crate) struct BlockEncoder {
    linktype: u32,
    ctx: Contexts,
    pub payload: Vec<u8>,
    pub count: u32,
    pub base_ts: u64,
    prev_ts: u64,
    scratch: [u8; MAXH],
    /// Bytes written per part of the record (feature `stats`).
    #[cfg(feature = "stats")]
    pub stats: [u64; 24],
}

impl BlockEncoder {
    pub fn new(linktype: u32) -> Self {
        BlockEncoder {
            linktype,
            ctx: Contexts::new(),
            payload: Vec::with_capacity(1 << 20),
            count: 0,
            base_ts: 0,
            prev_ts: 0,
            scratch: [0; MAXH],
            #[cfg(feature = "stats")]
            stats: [0; 24],
        }
    }

    /// Starts a new block: empty payload, every context forgotten.
    pub fn reset(&mut self) {
        self.ctx.reset();
        self.payload.clear();
        self.count = 0;
    }

    pub fn push(&mut self, ts: u64, wire: u32, data: &[u8]) {
        if self.count == 0 {
            self.base_ts = ts;
            self.prev_ts = ts;
        }
        self.count += 1;
        let dts = varint::zigzag(ts.wrapping_sub(self.prev_ts) as i64);
        self.prev_ts = ts;
        let out = &mut self.payload;
        out.reserve(data.len() + 64);
        let Some(l) = layout::parse(self.linktype, data) else {
            // Not understood: stored as it is, no context.
            st!(self.stats, 0, out, {
                out.push(0);
                varint::put(out, dts);
                varint::put(out, wire as u64);
                varint::put(out, data.len() as u64);
                out.extend_from_slice(data);
            });
            return;
        };
        let key = flow_key(&l, data);
        // Two candidate slots per flow (two-way associative), so two busy
        // flows that collide in one do not keep evicting each other.
        let c1 = (key as usize & (SLOTS - 1)) as u16;
        let c2 = ((key >> 32) as usize & (SLOTS - 1)) as u16;
        let holds = |s: u16| {
            let o = &self.ctx.slots[s as usize];
            o.gen == self.ctx.gen && o.key == key && o.layout == l
        };
        let (d, continues) = if holds(c1) {
            (c1, true)
        } else if holds(c2) {
            (c2, true)
        } else if !self.ctx.valid(c1) || (self.ctx.valid(c2) && !self.ctx.mru.contains(&c1)) {
            (c1, false)
        } else {
            (c2, false)
        };
        let r = if continues {
            d
        } else {
            // A new flow (or one whose headers changed shape): predicted
            // from a recent packet with the same layout, else literal.
            match self
                .ctx
                .mru
                .iter()
                .copied()
                .find(|&m| self.ctx.valid(m) && self.ctx.slots[m as usize].layout == l)
            {
                Some(m) => m,
                None => {
                    st!(self.stats, 1, out, {
                        out.push(0x40);
                        varint::put(out, dts);
                        varint::put(out, wire as u64);
                        varint::put(out, data.len() as u64);
                        varint::put(out, d as u64);
                        out.extend_from_slice(data);
                    });
                    self.ctx.store(d, true, key, l, data, wire);
                    return;
                }
            }
        };
        let rs = &self.ctx.slots[r as usize];
        // Headers and the bytes after them that the reference also has.
        let hl = data.len().min(rs.stored);
        let pr = predict(rs, wire);
        let old = Fields::read(&l, &rs.hdr);
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
        if l.v4() {
            if v.ipid != pr.ipid {
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
        // differs from the packet goes into the byte runs.
        let p = &mut self.scratch[..hl];
        p.copy_from_slice(&rs.hdr[..hl]);
        put_fields(p, &l, &pr, &v);
        if l.v4() {
            let at = l.l3 as usize + 10;
            p[at..at + 2].copy_from_slice(&data[at..at + 2]);
        }
        let diff = p[..hl] != data[..hl];
        if diff {
            flags |= F_DIFF;
        }
        let sel = match self.ctx.mru.iter().position(|&m| m == r) {
            Some(i) => i as u8,
            None => 3,
        };
        let ext1 = (flags >> 4) & 0x7f;
        let ext2 = flags >> 11;
        st!(self.stats, 2, out, {
            out.push(0x80 | sel << 5 | ((flags & 15) as u8) << 1 | (ext1 != 0 || ext2 != 0) as u8);
        });
        st!(self.stats, 3, out, {
            if sel == 3 {
                varint::put(out, r as u64);
            }
        });
        st!(self.stats, 2, out, {
            if ext1 != 0 || ext2 != 0 {
                out.push(ext1 as u8 | ((ext2 != 0) as u8) << 7);
                if ext2 != 0 {
                    out.push(ext2 as u8);
                }
            }
        });
        st!(self.stats, 4, out, varint::put(out, dts));
        let sd = |a: u32, b: u32| varint::zigzag(a.wrapping_sub(b) as i32 as i64);
        #[cfg(feature = "stats")]
        let b0 = out.len();
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_L4CSUM != 0 {
            out.extend_from_slice(&v.l4csum.to_be_bytes());
        }
        #[cfg(feature = "stats")]
        {
            self.stats[8] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_ACK != 0 {
            varint::put(out, sd(v.ack, pr.ack));
        }
        #[cfg(feature = "stats")]
        {
            self.stats[9] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_TSVAL != 0 {
            varint::put(out, sd(v.tsval, old.tsval));
        }
        #[cfg(feature = "stats")]
        {
            self.stats[10] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_TSECR != 0 {
            varint::put(out, sd(v.tsecr, old.tsecr));
        }
        #[cfg(feature = "stats")]
        {
            self.stats[11] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_WIRE != 0 {
            varint::put(out, varint::zigzag(wire as i64 - wire_pred as i64));
        }
        #[cfg(feature = "stats")]
        {
            self.stats[12] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_IPID != 0 {
            varint::put(
                out,
                varint::zigzag(v.ipid.wrapping_sub(pr.ipid) as i16 as i64),
            );
        }
        #[cfg(feature = "stats")]
        {
            self.stats[13] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_FRAG != 0 {
            out.extend_from_slice(&v.frag.to_be_bytes());
        }
        #[cfg(feature = "stats")]
        {
            self.stats[14] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_SEQ != 0 {
            varint::put(out, sd(v.seq, pr.seq));
        }
        #[cfg(feature = "stats")]
        {
            self.stats[15] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_WIN != 0 {
            varint::put(
                out,
                varint::zigzag(v.win.wrapping_sub(old.win) as i16 as i64),
            );
        }
        #[cfg(feature = "stats")]
        {
            self.stats[16] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_CAPLEN != 0 {
            varint::put(out, data.len() as u64);
        }
        #[cfg(feature = "stats")]
        {
            self.stats[17] += (out.len() - bb) as u64;
        }
        #[cfg(feature = "stats")]
        let bb = out.len();
        if flags & F_NEW != 0 {
            varint::put(out, d as u64);
        }
        #[cfg(feature = "stats")]
        {
            self.stats[18] += (out.len() - bb) as u64;
        }
        st!(
            self.stats,
            19,
            out,
            if diff {
                write_runs(out, &self.scratch[..hl], &data[..hl]);
            }
        );
        if flags & F_IPCSUM != 0 {
            let at = l.l3 as usize + 10;
            out.extend_from_slice(&data[at..at + 2]);
        }
        st!(self.stats, 6, out, out.extend_from_slice(&data[hl..]));
        #[cfg(feature = "stats")]
        {
            self.stats[5] += (out.len() - b0) as u64;
            self.stats[7] += 1;
            self.stats[20] += !continues as u64;
        }
        self.ctx.store(d, !continues, key, l, data, wire);
    }
}

/// Byte runs where `p` (the prediction) and `a` (the packet) differ: their
/// number, then for each the gap since the previous run's end, its length
/// less one, and its bytes.
fn write_runs(out: &mut Vec<u8>, p: &[u8], a: &[u8]) {
    let n_at = out.len();
    out.push(0);
    let mut n = 0u8;
    let (mut i, mut last) = (0, 0);
    while i < a.len() {
        if p[i] == a[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < a.len() && p[i] != a[i] {
            i += 1;
        }
        varint::put(out, (start - last) as u64);
        varint::put(out, (i - start - 1) as u64);
        out.extend_from_slice(&a[start..i]);
        last = i;
        n += 1;
    }
    // At most MAXH / 2 runs: the count always fits in one byte.
    out[n_at] = n;
}

/// Decodes one block's records, one at a time.
pub(crate) struct BlockDecoder {
    linktype: u32,
    ctx: Contexts,
    prev_ts: u64,
    rec: Vec<u8>,
}

impl BlockDecoder {
    pub fn new(linktype: u32) -> Self {
        BlockDecoder {
            linktype,
            ctx: Contexts::new(),
            prev_ts: 0,
            rec: Vec::new(),
        }
    }

    pub fn reset(&mut self, base_ts: u64) {
        self.ctx.reset();
        self.prev_ts = base_ts;
    }

    /// Decodes the record at `c`.
    pub fn next(&mut self, c: &mut Cursor<'_>) -> Result<Record<'_>, DecodeError> {
        let at = c.pos;
        let tag = c.byte()?;
        if tag & 0x80 == 0 {
            if tag & 0xbf != 0 {
                c.pos = at;
                return Err(c.err(ErrorKind::BadTag(tag)));
            }
            let ts = self.ts(c)?;
            let wire = len32(c)?;
            let caplen = caplen(c)?;
            let slot = if tag & 0x40 != 0 {
                Some(slot_no(c)?)
            } else {
                None
            };
            let bytes = c.bytes(caplen as usize)?;
            self.rec.clear();
            self.rec.extend_from_slice(bytes);
            if let Some(d) = slot {
                let Some(l) = layout::parse(self.linktype, &self.rec) else {
                    c.pos = at;
                    return Err(c.err(ErrorKind::NoLayout));
                };
                self.ctx.store(d, true, 0, l, &self.rec, wire);
            }
            return Ok(Record {
                ts,
                wire_len: wire,
                data: &self.rec,
            });
        }
        let sel = (tag >> 5) & 3;
        let r = if sel == 3 {
            slot_no(c)?
        } else {
            self.ctx.mru[sel as usize]
        };
        if !self.ctx.valid(r) {
            c.pos = at;
            return Err(c.err(ErrorKind::EmptyContext));
        }
        let mut flags = ((tag >> 1) & 15) as u32;
        if tag & 1 != 0 {
            let e1 = c.byte()?;
            flags |= ((e1 & 0x7f) as u32) << 4;
            if e1 & 0x80 != 0 {
                flags |= (c.byte()? as u32) << 11;
            }
        }
        let rs = &self.ctx.slots[r as usize];
        let l = rs.layout;
        if flags & !(F_KNOWN & allowed(&l)) != 0 {
            c.pos = at;
            return Err(c.err(ErrorKind::BadFlags(flags)));
        }
        // ts is read after the flags; borrowing rules want it outside `rs`.
        let dts = c.signed()?;
        let ts = self.prev_ts.wrapping_add(dts as u64);
        let rs = &self.ctx.slots[r as usize];
        let old = Fields::read(&l, &rs.hdr);
        let sd = |b: u32, d: i64| b.wrapping_add(d as i32 as u32);
        let mut v = Fields {
            win: old.win,
            tsval: old.tsval,
            tsecr: old.tsecr,
            ..Fields::default()
        };
        let l4csum = if flags & F_L4CSUM != 0 {
            Some(c.u16()?)
        } else {
            None
        };
        let ack_d = if flags & F_ACK != 0 { c.signed()? } else { 0 };
        if flags & F_TSVAL != 0 {
            v.tsval = sd(old.tsval, c.signed()?);
        }
        if flags & F_TSECR != 0 {
            v.tsecr = sd(old.tsecr, c.signed()?);
        }
        let wire_pred = predict_wire(rs);
        let wire = if flags & F_WIRE != 0 {
            let w = (wire_pred as i64).checked_add(c.signed()?);
            w.and_then(|w| u32::try_from(w).ok())
                .ok_or_else(|| c.err(ErrorKind::BadLength))?
        } else {
            wire_pred
        };
        let pr = predict(rs, wire);
        v.l4csum = l4csum.unwrap_or(pr.l4csum);
        v.ipid = pr.ipid;
        if flags & F_IPID != 0 {
            v.ipid = pr.ipid.wrapping_add(c.signed()? as u16);
        }
        v.frag = pr.frag;
        if flags & F_FRAG != 0 {
            v.frag = c.u16()?;
        }
        v.seq = pr.seq;
        if flags & F_SEQ != 0 {
            v.seq = sd(pr.seq, c.signed()?);
        }
        v.ack = sd(pr.ack, ack_d);
        if flags & F_WIN != 0 {
            v.win = old.win.wrapping_add(c.signed()? as u16);
        }
        let caplen = if flags & F_CAPLEN != 0 {
            caplen(c)?
        } else {
            pr.caplen
        };
        if (caplen as usize) < l.hdr_len as usize || caplen > MAX_CAPLEN {
            c.pos = at;
            return Err(c.err(ErrorKind::BadLength));
        }
        let d = if flags & F_NEW != 0 { slot_no(c)? } else { r };
        let hl = (caplen as usize).min(rs.stored);
        self.rec.clear();
        self.rec.extend_from_slice(&rs.hdr[..hl]);
        let p = &mut self.rec[..hl];
        put_fields(p, &l, &pr, &v);
        if flags & F_DIFF != 0 {
            let n = c.byte()?;
            let mut last = 0usize;
            for _ in 0..n {
                let gap = c.varint()?;
                let len = c.varint()?;
                let start = (last as u64).saturating_add(gap);
                let end = start.saturating_add(len).saturating_add(1);
                if end > hl as u64 {
                    return Err(c.err(ErrorKind::BadRun));
                }
                let bytes = c.bytes((end - start) as usize)?;
                p[start as usize..end as usize].copy_from_slice(bytes);
                last = end as usize;
            }
        }
        if l.v4() {
            let l3 = l.l3 as usize;
            let sum = if flags & F_IPCSUM != 0 {
                c.u16()?
            } else {
                layout::ipv4_checksum(&p[l3..l.l4 as usize])
            };
            put16(p, l3 + 10, sum);
        }
        let rest = c.bytes(caplen as usize - hl)?;
        self.rec.extend_from_slice(rest);
        // The rebuilt packet opens or continues the context; one whose
        // headers no longer parse (only from input no encoder wrote) is an
        // error, so the contexts stay what an encoder would have.
        match layout::parse(self.linktype, &self.rec) {
            Some(nl) if nl == l => self
                .ctx
                .store(d, flags & F_NEW != 0, 0, nl, &self.rec, wire),
            _ => {
                c.pos = at;
                return Err(c.err(ErrorKind::NoLayout));
            }
        }
        self.prev_ts = ts;
        Ok(Record {
            ts,
            wire_len: wire,
            data: &self.rec,
        })
    }

    fn ts(&mut self, c: &mut Cursor<'_>) -> Result<u64, DecodeError> {
        let ts = self.prev_ts.wrapping_add(c.signed()? as u64);
        self.prev_ts = ts;
        Ok(ts)
    }
}

fn len32(c: &mut Cursor<'_>) -> Result<u32, DecodeError> {
    let at = c.pos;
    let v = c.varint()?;
    u32::try_from(v).map_err(|_| {
        c.pos = at;
        c.err(ErrorKind::BadLength)
    })
}

fn caplen(c: &mut Cursor<'_>) -> Result<u32, DecodeError> {
    let at = c.pos;
    let v = len32(c)?;
    if v > MAX_CAPLEN {
        c.pos = at;
        return Err(c.err(ErrorKind::BadLength));
    }
    Ok(v)
}

fn slot_no(c: &mut Cursor<'_>) -> Result<u16, DecodeError> {
    let at = c.pos;
    let v = c.varint()?;
    if v >= SLOTS as u64 {
        c.pos = at;
        return Err(c.err(ErrorKind::BadSlot));
    }
    Ok(v as u16)
}
