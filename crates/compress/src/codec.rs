//! The record codec: flow contexts, predictions, and the encoder and
//! decoder of one block's records. The wire layout is described in the
//! crate documentation; this file is its only implementation.

use crate::layout::{self, be16, be32, put16, put32, Layout, MAXH};
use crate::rc::{self, Prob, Tree, UInt, HALF};
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
    /// The coded fields of the packet in `hdr` (read once, when stored).
    f: Fields,
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
    /// Flags of the flow's last compressed record: the next one's likely.
    last_flags: u16,
    /// Whether the last IPv4 ID came from the host counter (see [`Host`]).
    host_id: bool,
    /// The flow's last IPv4 ID was its previous one (the next is predicted
    /// the same, not one more).
    id_same: bool,
    /// Host table entry of the flow's addresses and protocol (IPv4; set
    /// when the context opens: a flow keeps its addresses).
    host: (usize, u64, u8),
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            gen: 0,
            key: 0,
            layout: Layout::default(),
            hdr: [0; MAXH],
            f: Fields::default(),
            wire: 0,
            caplen: 0,
            stored: 0,
            ack_step: 0,
            csum_step: 0,
            first_off: 0,
            last_off: 0,
            last_wire: 0,
            full_wire: 0,
            last_flags: 0,
            host_id: false,
            id_same: false,
            host: (0, 0, 0),
        }
    }
}

/// The last IPv4 ID seen from one source to one destination with one
/// protocol: Linux numbers the packets of unconnected sockets (and others)
/// from counters shared by destination, so a packet of one flow often
/// follows the previous packet of another flow between the same hosts.
#[derive(Clone, Copy, Default)]
struct Host {
    gen: u32,
    /// Source and destination address.
    addrs: u64,
    proto: u8,
    id: u16,
}

const HOSTS: usize = 256;

/// The flow table both sides keep, the three most recently used slots
/// (cheap to name), the slot the next new context goes to (slots are
/// handed out round-robin, so neither side needs to send slot numbers for
/// new contexts), and the host table of IPv4 IDs.
struct Contexts {
    slots: Vec<Slot>,
    gen: u32,
    mru: [u16; 3],
    next: u16,
    hosts: Vec<Host>,
}

impl Contexts {
    fn new() -> Self {
        Contexts {
            // Grown as contexts open (to SLOTS), so a short block or a
            // decoder given garbage does not set up the whole table; the
            // room is reserved (not touched) so it never moves.
            slots: Vec::with_capacity(SLOTS),
            gen: 1,
            mru: [NONE; 3],
            next: 0,
            hosts: vec![Host::default(); HOSTS],
        }
    }

    /// The slot a new context goes to.
    #[inline]
    fn alloc(&mut self) -> u16 {
        let d = self.next;
        self.next = (self.next + 1) % SLOTS as u16;
        if d as usize == self.slots.len() {
            self.slots.push(Slot::default());
        }
        d
    }

    /// Host table entry of an IPv4 packet's addresses and protocol.
    #[inline]
    fn host_at(l: &Layout, h: &[u8]) -> (usize, u64, u8) {
        let l3 = l.l3 as usize;
        let addrs = (be32(h, l3 + 12) as u64) << 32 | be32(h, l3 + 16) as u64;
        let proto = h[l3 + 9];
        let x = addrs.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ proto as u64;
        ((x >> 56) as usize % HOSTS, addrs, proto)
    }

    /// What the host counter predicts for the next IPv4 ID of flow `s`,
    /// if it has seen those hosts.
    #[inline]
    fn host_predict(&self, s: &Slot) -> Option<u16> {
        let (i, addrs, proto) = s.host;
        let e = &self.hosts[i];
        (e.gen == self.gen && e.addrs == addrs && e.proto == proto).then_some(if e.id == 0 {
            0
        } else {
            e.id.wrapping_add(1)
        })
    }

    /// Counts the IPv4 ID of the packet just stored in slot `d`.
    #[inline]
    fn host_update(&mut self, d: u16) {
        let s = &self.slots[d as usize];
        if s.layout.v4() {
            let (i, addrs, proto) = s.host;
            let id = s.f.ipid;
            self.hosts[i] = Host {
                gen: self.gen,
                addrs,
                proto,
                id,
            };
        }
    }

    fn reset(&mut self) {
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            for s in &mut self.slots {
                s.gen = 0;
            }
            for h in &mut self.hosts {
                h.gen = 0;
            }
            self.gen = 1;
        }
        self.mru = [NONE; 3];
        self.next = 0;
    }

    #[inline]
    fn valid(&self, s: u16) -> bool {
        s != NONE
            && self
                .slots
                .get(s as usize)
                .is_some_and(|o| o.gen == self.gen)
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

    /// Stores packet `data` (already known to have `layout`, and the
    /// fields `v` = `Fields::read(&layout, data)`) into slot `d`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn store(
        &mut self,
        d: u16,
        new: bool,
        key: u64,
        layout: Layout,
        data: &[u8],
        wire: u32,
        v: &Fields,
    ) {
        let gen = self.gen;
        let s = &mut self.slots[d as usize];
        let n = data.len().min(MAXH);
        // The slot's previous packet's fields (same layout when `!new`).
        let old = s.f;
        if layout.tcp() || layout.udp() {
            let (a, b) = (v.l4csum, old.l4csum);
            // Equal values step by 0, not by ones' complement -0 (0xffff),
            // so a zero (absent) UDP checksum predicts zero.
            s.csum_step = if new || a == b { 0 } else { ones_sub(a, b) };
        }
        if new {
            s.last_off = 0;
            s.last_wire = 0;
            s.full_wire = 0;
            s.ack_step = 0;
        }
        if layout.v4() {
            let f = v.frag;
            if f & 0x2000 != 0 {
                s.full_wire = wire;
            } else if f & 0x1fff != 0 {
                s.last_off = f & 0x1fff;
                s.last_wire = wire;
            }
            if new {
                s.host = Self::host_at(&layout, data);
                s.first_off = f & 0x1fff;
                s.id_same = false;
            } else {
                // A datagram's later fragments starting again after its
                // last one: where they restart (a block that began
                // mid-datagram opened the context at a later offset).
                let prev = old.frag;
                if prev & 0x2000 == 0 && prev & 0x1fff != 0 && f & 0x1fff != 0 {
                    s.first_off = f & 0x1fff;
                }
                // Only between whole datagrams (a datagram's fragments
                // share their ID anyway).
                s.id_same = f & 0x3fff == 0 && prev & 0x3fff == 0 && v.ipid == old.ipid;
            }
        } else if new {
            s.first_off = 0;
        }
        if !new && layout.tcp() {
            s.ack_step = v.ack.wrapping_sub(old.ack);
        }
        s.gen = gen;
        s.key = key;
        s.layout = layout;
        s.f = *v;
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
    /// The IPv4 ID is predicted to count (not a datagram's next fragment).
    id_counts: bool,
}

/// The original length a context predicts: its own, except between the
/// fragments of a datagram stream (see [`Slot::last_off`]).
fn predict_wire(s: &Slot) -> u32 {
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
fn predict(s: &Slot, wire: u32) -> Pred {
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
#[derive(Default, Clone, Copy)]
struct Fields {
    ipid: u16,
    frag: u16,
    l4csum: u16,
    seq: u32,
    ack: u32,
    win: u16,
    tsval: u32,
    tsecr: u32,
    /// Not coded as fields (predicted from the original length, or kept):
    /// the IP length field, the UDP length, TCP's data offset and flags.
    ip_len: u16,
    udp_len: u16,
    tcp_hf: u16,
}

impl Fields {
    #[inline(always)]
    fn read(l: &Layout, h: &[u8]) -> Fields {
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
    fn ip_payload(&self, l: &Layout) -> u32 {
        let len = self.ip_len as u32;
        if l.v6 {
            len
        } else {
            len.wrapping_sub(l.l4 as u32 - l.l3 as u32)
        }
    }
}

/// Record kinds (coded first, by a bit tree in the context of the previous
/// record's kind): compressed with the reference named by the most, second
/// and third most recently used slot or by its number, a literal, and a
/// literal that opens a context.
const K_NUMBERED: u32 = 3;
const K_LITERAL: u32 = 4;
const K_OPEN: u32 = 5;

/// Field models, in the order of the flags.
const M_L4CSUM: usize = 0;
const M_ACK: usize = 1;
const M_TSVAL: usize = 2;
const M_TSECR: usize = 3;
const M_WIRE: usize = 4;
const M_IPID: usize = 5;
const M_FRAG: usize = 6;
const M_SEQ: usize = 7;
const M_WIN: usize = 8;
const M_CAPLEN: usize = 9;
const M_IPCSUM: usize = 10;
const M_LIT_WIRE: usize = 11;
const M_LIT_CAPLEN: usize = 12;
const M_RUNS: usize = 13;
const M_GAP: usize = 14;
const M_RUNLEN: usize = 15;
const FIELDS: usize = 16;

/// Every adaptive probability of a block (both sides start each block
/// with all of them at one half).
#[derive(Clone)]
struct Models {
    /// Kind as the one that followed the previous kind last time?
    kind_hit: [Prob; 6],
    kind: [Tree<8>; 6],
    /// Transport checksum: a small change of the prediction (or else 16
    /// bits as they are).
    csum_small: [Prob; 2],
    /// The top 4 bits of a slot number (the low 8 are sent as they are).
    slot: Tree<16>,
    same_flags: [Prob; 16],
    flag: [[Prob; 2]; 13],
    /// Timestamp deltas: continuing a flow, opening a context, literal.
    dts: [UInt; 3],
    field: [UInt; FIELDS],
    host: [Prob; 2],
    /// Bytes of byte runs (format version 2; version 3 sends them direct).
    byte: Tree<256>,
    /// Byte runs of records that open a context (format version 4): the
    /// bytes by a tree per header offset modulo 16 (a new flow's ports and
    /// addresses: ephemeral port ranges, well-known ports, address
    /// prefixes are far from uniform), gaps and lengths by trees.
    new_byte: [Tree<256>; 16],
    new_gap: Tree<256>,
    new_len: Tree<256>,
}

impl Models {
    fn new() -> Box<Models> {
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

    fn reset(&mut self) {
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
struct Kinds {
    prev: u32,
    next: [u8; 6],
}

impl Kinds {
    #[inline(always)]
    fn put(&mut self, e: &mut rc::Encoder, m: &mut Models, kind: u32) {
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
    fn get(&mut self, d: &mut rc::Decoder<'_>, m: &mut Models) -> u32 {
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
fn same_ctx(kind: u32, prev_same: bool, new: bool) -> usize {
    (kind as usize) << 2 | (prev_same as usize) << 1 | new as usize
}

#[inline]
fn sd(a: u32, b: u32) -> u64 {
    varint::zigzag(a.wrapping_sub(b) as i32 as i64)
}

#[inline]
fn sd16(a: u16, b: u16) -> u64 {
    varint::zigzag(a.wrapping_sub(b) as i16 as i64)
}

/// The IPv4 ID prediction of a compressed record and, when the host
/// counter predicts something else, the other one: the record then says
/// which of the two it uses.
#[inline]
fn id_choice(ctx: &Contexts, l: &Layout, rs: &Slot, pr: &Pred, continues: bool) -> Option<u16> {
    if !(l.v4() && pr.id_counts && continues) {
        return None;
    }
    ctx.host_predict(rs).filter(|&h| h != pr.ipid)
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

/// 8-byte words of a header, the bits outside the coded fields set.
type Mask = [u64; MAXH / 8];

/// The masks of the last few layouts seen (the encoder's; a trace has few
/// header shapes).
#[derive(Default)]
struct Masks {
    layouts: [Option<Layout>; 4],
    masks: [Mask; 4],
    next: usize,
}

impl Masks {
    #[inline]
    fn get(&mut self, l: &Layout) -> &Mask {
        let i = match self.layouts.iter().position(|k| k.as_ref() == Some(l)) {
            Some(i) => i,
            None => {
                let i = self.next;
                self.next = (i + 1) % self.layouts.len();
                self.layouts[i] = Some(*l);
                self.masks[i] = field_mask(l);
                i
            }
        };
        &self.masks[i]
    }
}

/// Which header bytes of layout `l` are outside the fields [`put_fields`]
/// writes and the IPv4 header checksum.
fn field_mask(l: &Layout) -> Mask {
    let mut b = [0xffu8; MAXH];
    let mut clear = |at: usize, n: usize| b[at..at + n].fill(0);
    clear(l.ip_len_at(), 2);
    if l.v4() {
        // ID, flags and fragment offset, header checksum.
        clear(l.l3 as usize + 4, 4);
        clear(l.l3 as usize + 10, 2);
    }
    if l.tcp() || l.udp() {
        clear(l.l4_csum_at(), 2);
    }
    if l.udp() {
        clear(l.l4 as usize + 4, 2);
    }
    if l.tcp() {
        // Sequence and acknowledgement numbers, window.
        clear(l.l4 as usize + 4, 8);
        clear(l.l4 as usize + 14, 2);
        if l.ts_opt != 0 {
            clear(l.ts_opt as usize, 8);
        }
    }
    let mut m = [0u64; MAXH / 8];
    for (w, c) in m.iter_mut().zip(b.chunks_exact(8)) {
        *w = u64::from_ne_bytes(c.try_into().unwrap_or_default());
    }
    m
}

/// Whether `a` (at most [`MAXH`] bytes) differs from the start of `b`
/// in a byte that `mask` keeps.
#[inline]
fn differs(a: &[u8], b: &[u8; MAXH], mask: &Mask) -> bool {
    let n = a.len().min(MAXH);
    let a = &a[..n];
    let mut x = 0u64;
    let mut i = 0;
    while i + 8 <= n {
        let wa = u64::from_ne_bytes(a[i..i + 8].try_into().unwrap_or_default());
        let wb = u64::from_ne_bytes(b[i..i + 8].try_into().unwrap_or_default());
        x |= (wa ^ wb) & mask[i / 8];
        i += 8;
    }
    if i < n {
        let m = mask[i / 8].to_ne_bytes();
        for (k, (p, q)) in a[i..].iter().zip(&b[i..n]).enumerate() {
            x |= ((p ^ q) & m[k & 7]) as u64;
        }
    }
    x != 0
}

/// Bit `i` set where byte `i` of `p` and `a` (at most [`MAXH`] bytes, as
/// long as each other) differ: eight bytes compared at a time.
fn diff_bits(p: &[u8], a: &[u8]) -> [u64; MAXH.div_ceil(64)] {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut bits = [0u64; MAXH.div_ceil(64)];
    let n = a.len().min(p.len()).min(MAXH);
    let mut i = 0;
    while i + 8 <= n {
        let word = |s: &[u8]| u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or_default());
        let x = word(a) ^ word(p);
        // The top bit of each byte of `x` that is not zero, then those
        // eight bits gathered into the low byte.
        let top = (((x & LOW7) + LOW7) | x) & !LOW7;
        let mask = (top >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
        bits[i / 64] |= mask << (i % 64);
        i += 8;
    }
    while i < n {
        bits[i / 64] |= u64::from(a[i] != p[i]) << (i % 64);
        i += 1;
    }
    bits
}

/// The first position at or after `i` (below `n`) whose bit in `bits` is
/// `set`, or `n`.
fn next_bit(bits: &[u64], mut i: usize, n: usize, set: bool) -> usize {
    while i < n {
        let Some(&word) = bits.get(i / 64) else {
            return n;
        };
        let w = if set { word } else { !word } >> (i % 64);
        if w != 0 {
            return (i + w.trailing_zeros() as usize).min(n);
        }
        i = (i / 64 + 1) * 64;
    }
    n
}

/// How many runs of set bits `bits` holds: a run starts where a set bit
/// follows a clear one.
fn count_runs(bits: &[u64]) -> u64 {
    let mut runs = 0u64;
    let mut carry = 0u64;
    for &w in bits {
        runs += u64::from((w & !(w << 1 | carry)).count_ones());
        carry = w >> 63;
    }
    runs
}

/// The first run of set bits of `bits` at or after `from` (below `n`):
/// (start, end).
fn run_from(bits: &[u64], from: usize, n: usize) -> Option<(usize, usize)> {
    let start = next_bit(bits, from, n, true);
    (start < n).then(|| (start, next_bit(bits, start, n, false)))
}

/// Byte runs where `p` (the prediction) and `a` (the packet) differ: their
/// number, then for each the gap since the previous run's end, its length
/// less one, and its bytes.
///
/// `new`: the record opens a context (format version 4 models its runs,
/// see [`Models::new_byte`]).
fn write_runs(e: &mut rc::Encoder, m: &mut Models, p: &[u8], a: &[u8], new: bool) {
    // The headers and what follows them, at most MAXH (see `push`).
    debug_assert!(a.len() <= MAXH && p.len() == a.len());
    let n = a.len();
    let bits = diff_bits(p, a);
    e.uint(&mut m.field[M_RUNS], count_runs(&bits));
    let mut last = 0;
    while let Some((start, end)) = run_from(&bits, last, n) {
        if new {
            put_small(
                e,
                &mut m.new_gap,
                &mut m.field[M_GAP],
                (start - last) as u64,
            );
            put_small(
                e,
                &mut m.new_len,
                &mut m.field[M_RUNLEN],
                (end - start - 1) as u64,
            );
            for (i, &b) in a[start..end].iter().enumerate() {
                e.tree(&mut m.new_byte[(start + i) & 15], b as u32);
            }
        } else {
            e.uint(&mut m.field[M_GAP], (start - last) as u64);
            e.uint(&mut m.field[M_RUNLEN], (end - start - 1) as u64);
            for &b in &a[start..end] {
                e.direct(b as u32, 8);
            }
        }
        last = end;
    }
}

/// A value below 255 by the tree `t`; 255 and more as 255, then the
/// excess by the integer model `u`.
#[inline]
fn put_small(e: &mut rc::Encoder, t: &mut Tree<256>, u: &mut UInt, v: u64) {
    if v < 255 {
        e.tree(t, v as u32);
    } else {
        e.tree(t, 255);
        e.uint(u, v - 255);
    }
}

/// A value as [`put_small`] codes it.
#[inline]
fn get_small(
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

/// Where a decoder is in a block: the range decoder's state and the raw
/// bytes' position (offsets in the payload).
#[derive(Clone, Copy, Default)]
struct Pos {
    rc: rc::State,
    rc_end: usize,
    raw: usize,
}

/// Decodes one block's records, one at a time.
pub(crate) struct BlockDecoder {
    linktype: u32,
    /// Blocks of format version 2 (see the crate documentation).
    v2: bool,
    /// Blocks of format version 4 or later (runs of new contexts modelled).
    v4: bool,
    ctx: Contexts,
    m: Box<Models>,
    pos: Pos,
    kinds: Kinds,
    prev_same: bool,
    prev_ts: u64,
    rec: Vec<u8>,
}

const RC_AT: usize = 4;

impl BlockDecoder {
    /// A decoder of blocks of format `version` (one the crate reads).
    pub fn new(linktype: u32, version: u16) -> Self {
        BlockDecoder {
            linktype,
            v2: version == 2,
            v4: version >= 4,
            ctx: Contexts::new(),
            m: Models::new(),
            pos: Pos::default(),
            kinds: Kinds::default(),
            prev_same: false,
            prev_ts: 0,
            rec: Vec::new(),
        }
    }

    /// Starts decoding the block with payload `p` (at file offset `base`).
    pub fn reset(&mut self, p: &[u8], base: u64, base_ts: u64) -> Result<(), DecodeError> {
        self.ctx.reset();
        self.m.reset();
        self.prev_ts = base_ts;
        self.kinds = Kinds::default();
        self.prev_same = false;
        let err = |offset, kind| DecodeError { offset, kind };
        let h = p
            .get(..RC_AT)
            .ok_or(err(base + p.len() as u64, ErrorKind::Truncated))?;
        let n = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if n > p.len() - RC_AT {
            return Err(err(base, ErrorKind::BadLength));
        }
        let rc_end = RC_AT + n;
        let d = rc::Decoder::new(&p[RC_AT..rc_end], self.v2);
        self.pos = Pos {
            rc: d.state(),
            rc_end,
            raw: rc_end,
        };
        Ok(())
    }

    /// After the last record: every byte of the payload `p` was used.
    pub fn finished(&self, p: &[u8], base: u64) -> Result<(), DecodeError> {
        let at = RC_AT + self.pos.rc.pos;
        if at != self.pos.rc_end || self.pos.raw != p.len() {
            return Err(DecodeError {
                offset: base + at.min(self.pos.raw) as u64,
                kind: ErrorKind::TrailingBytes,
            });
        }
        Ok(())
    }

    /// The captured bytes of the record decoded last.
    pub fn data(&self) -> &[u8] {
        &self.rec
    }

    /// Decodes the next record of payload `p` (at file offset `base`).
    pub fn next(&mut self, p: &[u8], base: u64) -> Result<Record<'_>, DecodeError> {
        let pos = self.pos;
        let rcbuf = p.get(RC_AT..pos.rc_end).unwrap_or_default();
        let mut d = rc::Decoder::resume(rcbuf, pos.rc);
        let mut raw = Cursor {
            buf: p,
            pos: pos.raw,
            base,
        };
        let at = base + (RC_AT + pos.rc.pos) as u64;
        let r = self.record(&mut d, &mut raw, at);
        if d.over > 0 {
            return Err(DecodeError {
                offset: base + pos.rc_end as u64,
                kind: ErrorKind::Truncated,
            });
        }
        self.pos.rc = d.state();
        self.pos.raw = raw.pos;
        let (ts, wire) = r?;
        Ok(Record {
            ts,
            wire_len: wire,
            data: &self.rec,
        })
    }

    fn record(
        &mut self,
        d: &mut rc::Decoder<'_>,
        raw: &mut Cursor<'_>,
        at: u64,
    ) -> Result<(u64, u32), DecodeError> {
        let err = |kind| DecodeError { offset: at, kind };
        let m = &mut *self.m;
        let kind = self.kinds.get(d, m);
        if kind > K_OPEN {
            return Err(err(ErrorKind::BadTag(kind as u8)));
        }
        if kind >= K_LITERAL {
            let dts = uint(d, &mut m.dts[2], at)?;
            let wire = u32::try_from(uint(d, &mut m.field[M_LIT_WIRE], at)?)
                .map_err(|_| err(ErrorKind::BadLength))?;
            let caplen = uint(d, &mut m.field[M_LIT_CAPLEN], at)?;
            if caplen > MAX_CAPLEN as u64 {
                return Err(err(ErrorKind::BadLength));
            }
            if d.over > 0 {
                return Err(err(ErrorKind::Truncated));
            }
            let bytes = raw.bytes(caplen as usize)?;
            self.rec.clear();
            self.rec.extend_from_slice(bytes);
            if kind == K_OPEN {
                let Some(l) = layout::parse(self.linktype, &self.rec) else {
                    return Err(err(ErrorKind::NoLayout));
                };
                let s = self.ctx.alloc();
                let v = Fields::read(&l, &self.rec);
                self.ctx.store(s, true, 0, l, &self.rec, wire, &v);
                self.ctx.slots[s as usize].last_flags = 0;
                self.ctx.slots[s as usize].host_id = false;
                self.ctx.host_update(s);
            }
            let ts = self.prev_ts.wrapping_add(varint::unzigzag(dts) as u64);
            self.prev_ts = ts;
            return Ok((ts, wire));
        }
        let r = if kind == K_NUMBERED {
            (d.tree(&mut m.slot) << 8 | d.direct(8)) as u16
        } else {
            self.ctx.mru[kind as usize]
        };
        if !self.ctx.valid(r) {
            return Err(err(ErrorKind::EmptyContext));
        }
        let rs = &self.ctx.slots[r as usize];
        let l = rs.layout;
        let last_flags = rs.last_flags as u32;
        let mut flags = last_flags;
        let differ =
            d.bit(&mut m.same_flags[same_ctx(kind, self.prev_same, last_flags & F_NEW != 0)]);
        self.prev_same = !differ;
        if differ {
            flags = 0;
            let mut a = if self.v2 { F_KNOWN } else { allowed(&l) };
            while a != 0 {
                let k = a.trailing_zeros() as usize;
                a &= a - 1;
                if d.bit(&mut m.flag[k][(last_flags >> k) as usize & 1]) {
                    flags |= 1 << k;
                }
            }
        }
        if flags & !(F_KNOWN & allowed(&l)) != 0 {
            return Err(err(ErrorKind::BadFlags(flags)));
        }
        let continues = flags & F_NEW == 0;
        let dts = varint::unzigzag(uint(d, &mut m.dts[!continues as usize], at)?);
        let ts = self.prev_ts.wrapping_add(dts as u64);
        let old = rs.f;
        let su = |b: u32, v: u64| b.wrapping_add(varint::unzigzag(v) as i32 as u32);
        let su16 = |b: u16, v: u64| b.wrapping_add(varint::unzigzag(v) as i16 as u16);
        let mut v = Fields {
            win: old.win,
            tsval: old.tsval,
            tsecr: old.tsecr,
            ..Fields::default()
        };
        let f = &mut m.field;
        // The change of the checksum's prediction, or the checksum.
        let l4csum_d = if flags & F_L4CSUM != 0 {
            if d.bit(&mut m.csum_small[continues as usize]) {
                Some(Err(d.direct(16) as u16))
            } else {
                Some(Ok(uint(d, &mut f[M_L4CSUM], at)?))
            }
        } else {
            None
        };
        let ack_d = if flags & F_ACK != 0 {
            uint(d, &mut f[M_ACK], at)?
        } else {
            0
        };
        if flags & F_TSVAL != 0 {
            v.tsval = su(old.tsval, uint(d, &mut f[M_TSVAL], at)?);
        }
        if flags & F_TSECR != 0 {
            v.tsecr = su(old.tsecr, uint(d, &mut f[M_TSECR], at)?);
        }
        let wire_pred = predict_wire(rs);
        let wire = if flags & F_WIRE != 0 {
            let w = (wire_pred as i64).checked_add(varint::unzigzag(uint(d, &mut f[M_WIRE], at)?));
            w.and_then(|w| u32::try_from(w).ok())
                .ok_or(err(ErrorKind::BadLength))?
        } else {
            wire_pred
        };
        let pr = predict(rs, wire);
        v.l4csum = match l4csum_d {
            Some(Ok(x)) => su16(pr.l4csum, x),
            Some(Err(c)) => c,
            None => pr.l4csum,
        };
        let mut id_pred = pr.ipid;
        let mut use_host = false;
        if let Some(h) = id_choice(&self.ctx, &l, rs, &pr, continues) {
            use_host = d.bit(&mut m.host[rs.host_id as usize]);
            if use_host {
                id_pred = h;
            }
        }
        let f = &mut m.field;
        v.ipid = id_pred;
        if flags & F_IPID != 0 {
            v.ipid = su16(id_pred, uint(d, &mut f[M_IPID], at)?);
        }
        v.frag = pr.frag;
        if flags & F_FRAG != 0 {
            v.frag = uint(d, &mut f[M_FRAG], at)? as u16;
        }
        v.seq = pr.seq;
        if flags & F_SEQ != 0 {
            v.seq = su(pr.seq, uint(d, &mut f[M_SEQ], at)?);
        }
        v.ack = su(pr.ack, ack_d);
        if flags & F_WIN != 0 {
            v.win = su16(old.win, uint(d, &mut f[M_WIN], at)?);
        }
        let caplen = if flags & F_CAPLEN != 0 {
            uint(d, &mut f[M_CAPLEN], at)?
        } else {
            pr.caplen as u64
        };
        if caplen < l.hdr_len as u64 || caplen > MAX_CAPLEN as u64 {
            return Err(err(ErrorKind::BadLength));
        }
        let caplen = caplen as usize;
        let hl = caplen.min(rs.stored);
        self.rec.clear();
        self.rec.extend_from_slice(&rs.hdr[..hl]);
        let p = &mut self.rec[..hl];
        put_fields(p, &l, &pr, &v);
        if flags & F_DIFF != 0 {
            let n = uint(d, &mut m.field[M_RUNS], at)?;
            if n > MAXH as u64 {
                return Err(err(ErrorKind::BadRun));
            }
            let mut last = 0u64;
            let modelled = self.v4 && !continues;
            for _ in 0..n {
                let (gap, len) = if modelled {
                    (
                        get_small(d, &mut m.new_gap, &mut m.field[M_GAP], at)?,
                        get_small(d, &mut m.new_len, &mut m.field[M_RUNLEN], at)?,
                    )
                } else {
                    (
                        uint(d, &mut m.field[M_GAP], at)?,
                        uint(d, &mut m.field[M_RUNLEN], at)?,
                    )
                };
                let start = last.saturating_add(gap);
                let end = start.saturating_add(len).saturating_add(1);
                if end > hl as u64 {
                    return Err(err(ErrorKind::BadRun));
                }
                for (i, b) in p[start as usize..end as usize].iter_mut().enumerate() {
                    *b = if self.v2 {
                        d.tree(&mut m.byte)
                    } else if modelled {
                        d.tree(&mut m.new_byte[(start as usize + i) & 15])
                    } else {
                        d.direct(8)
                    } as u8;
                }
                last = end;
            }
        }
        if l.v4() {
            let l3 = l.l3 as usize;
            let sum = if flags & F_IPCSUM != 0 {
                uint(d, &mut m.field[M_IPCSUM], at)? as u16
            } else {
                layout::ipv4_checksum(&p[l3..l.l4 as usize])
            };
            put16(p, l3 + 10, sum);
        }
        if d.over > 0 {
            return Err(err(ErrorKind::Truncated));
        }
        let rest = raw.bytes(caplen - hl)?;
        self.rec.extend_from_slice(rest);
        // The rebuilt packet opens or continues the context; one whose
        // headers no longer parse (only from input no encoder wrote) is an
        // error, so the contexts stay what an encoder would have.
        match layout::parse(self.linktype, &self.rec) {
            Some(nl) if nl == l => {
                let s = if continues { r } else { self.ctx.alloc() };
                let v = Fields::read(&nl, &self.rec);
                self.ctx.store(s, !continues, 0, nl, &self.rec, wire, &v);
                let sl = &mut self.ctx.slots[s as usize];
                sl.last_flags = flags as u16;
                sl.host_id = use_host;
                self.ctx.host_update(s);
            }
            _ => return Err(err(ErrorKind::NoLayout)),
        }
        self.prev_ts = ts;
        Ok((ts, wire))
    }
}

#[inline]
fn uint(d: &mut rc::Decoder<'_>, u: &mut UInt, at: u64) -> Result<u64, DecodeError> {
    d.uint(u).ok_or(DecodeError {
        offset: at,
        kind: ErrorKind::BadVarint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (start, end) of each run of differing bytes, byte by byte.
    fn runs_bytewise(p: &[u8], a: &[u8]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < a.len() {
            if p[i] == a[i] {
                i += 1;
                continue;
            }
            let s = i;
            while i < a.len() && p[i] != a[i] {
                i += 1;
            }
            out.push((s, i));
        }
        out
    }

    /// The runs and their count as `write_runs` finds them.
    fn runs_by_bits(p: &[u8], a: &[u8]) -> (Vec<(usize, usize)>, u64) {
        let bits = diff_bits(p, a);
        let mut out = Vec::new();
        let mut last = 0;
        while let Some((s, e)) = run_from(&bits, last, a.len()) {
            out.push((s, e));
            last = e;
        }
        (out, count_runs(&bits))
    }

    proptest! {
        #[test]
        fn runs_found_word_by_word_are_the_bytewise_ones(
            len in 0usize..=MAXH,
            seed in any::<u64>(),
            flips in proptest::collection::vec((0usize..MAXH, 1u8..=255), 0..40),
        ) {
            let p: Vec<u8> = (0..len).map(|i| (seed >> (i % 57)) as u8 ^ i as u8).collect();
            let mut a = p.clone();
            for (at, x) in flips {
                if at < len {
                    a[at] ^= x;
                }
            }
            let want = runs_bytewise(&p, &a);
            let (got, counted) = runs_by_bits(&p, &a);
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(counted, want.len() as u64);
        }
    }

    #[test]
    fn runs_across_word_and_bit_word_boundaries() {
        for (len, diffs) in [
            (160, vec![63, 64, 127, 128, 159]),
            (160, (60..70).collect::<Vec<_>>()),
            (130, (0..130).collect()),
            (7, vec![6]),
            (64, vec![7, 8]),
        ] {
            let p = vec![0u8; len];
            let mut a = p.clone();
            for d in diffs {
                a[d] = 1;
            }
            let (got, counted) = runs_by_bits(&p, &a);
            assert_eq!(got, runs_bytewise(&p, &a), "len {len}");
            assert_eq!(counted, got.len() as u64, "len {len}");
        }
    }
}
