//! The flow contexts both sides keep: one slot per flow (its previous
//! packet and what was learned from it), the most recently used slots, and
//! the host table of IPv4 IDs. Encoder and decoder update them the same
//! way, record by record, so they stay in step without sending slots.

use super::fields::{ones_sub, Fields};
use super::NONE;
use crate::layout::{be32, Layout, MAXH};
use crate::SLOTS;

/// One flow's context: the previous packet of the flow (its header bytes)
/// and what was learned from the packets before it.
#[derive(Clone)]
pub(super) struct Slot {
    /// Valid while equal to [`Contexts::gen`] (a block start invalidates
    /// every slot without touching them).
    pub(super) gen: u32,
    /// The encoder's flow key (unused by the decoder).
    pub(super) key: u64,
    pub(super) layout: Layout,
    pub(super) hdr: [u8; MAXH],
    /// The coded fields of the packet in `hdr` (read once, when stored).
    pub(super) f: Fields,
    pub(super) wire: u32,
    pub(super) caplen: u32,
    /// Bytes of the packet kept in `hdr`: its headers and what follows
    /// them, up to MAXH (later packets' bytes there are predicted too).
    pub(super) stored: usize,
    /// Last change of the TCP acknowledgement number.
    pub(super) ack_step: u32,
    /// Last change of the TCP/UDP checksum (ones' complement): constant
    /// when only a counted field changes, e.g. a masked flow's checksums
    /// recomputed over a partial (offloaded) checksum.
    pub(super) csum_step: u16,
    /// IPv4 fragment offset of the packet that opened the context: where a
    /// new datagram's fragments restart in a context of non-first fragments.
    pub(super) first_off: u16,
    /// Offset and original length of the last final fragment seen, and the
    /// original length of the last fragment with more to come: a stream of
    /// same-sized datagrams repeats them.
    pub(super) last_off: u16,
    pub(super) last_wire: u32,
    pub(super) full_wire: u32,
    /// Flags of the flow's last compressed record: the next one's likely.
    pub(super) last_flags: u16,
    /// Whether the last IPv4 ID came from the host counter (see [`Host`]).
    pub(super) host_id: bool,
    /// The flow's last IPv4 ID was its previous one (the next is predicted
    /// the same, not one more).
    pub(super) id_same: bool,
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
pub(super) struct Contexts {
    pub(super) slots: Vec<Slot>,
    pub(super) gen: u32,
    pub(super) mru: [u16; 3],
    next: u16,
    hosts: Vec<Host>,
}

impl Contexts {
    pub(super) fn new() -> Self {
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
    pub(super) fn alloc(&mut self) -> u16 {
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
    pub(super) fn host_predict(&self, s: &Slot) -> Option<u16> {
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
    pub(super) fn host_update(&mut self, d: u16) {
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

    pub(super) fn reset(&mut self) {
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
    pub(super) fn valid(&self, s: u16) -> bool {
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
    pub(super) fn store(
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
