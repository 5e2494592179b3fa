//! The flow table: a fixed number of flows, all memory taken up front, so a
//! packet never allocates.
//!
//! Flows live in a slab (`Vec<Entry>`, a free list through it); a hash
//! index of twice as many slots, open addressing with linear probing and
//! backward-shift deletion (no tombstones), finds them. Each slot holds the
//! entry's number and the low 32 bits of its hash, so a probe compares
//! hashes without loading entries (with many flows each entry is a cache
//! miss: measured, probes that loaded every entry they passed cost ~40% of
//! the stage) and a deletion shifts slots without loading any. The hash is
//! symmetric in the two ends, so both directions of a conversation find the
//! same entry: RFC 5103 biflows, forward being the first packet's direction.
//!
//! Two intrusive lists order the flows for expiry without a scan: by last
//! packet (the head is the first to go idle, and the one evicted when the
//! table is full) and by first packet (the head is the first to reach the
//! active timeout). Time is whatever the caller says (packet times for
//! files, the clock for live captures), so the same file gives the same
//! flows every run.

use crate::key::{FlowKey, PacketInfo};
use crate::record::{Direction, EndReason, FlowRecord};

const NIL: u32 = u32::MAX;
/// An empty index slot.
const FREE: u64 = u64::MAX;
/// TCP flags.
const FIN: u16 = 0x001;
const RST: u16 = 0x004;

/// Timeouts and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableConfig {
    /// A flow is exported (and starts again) after this long, ns.
    pub active_ns: u64,
    /// A flow without packets for this long is exported, ns.
    pub idle_ns: u64,
    /// Most flows held at once.
    pub max_flows: u32,
}

/// What the table has done, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Flows begun.
    pub created: u64,
    /// Flows exported early because the table was full.
    pub evicted: u64,
    /// Packets counted in a flow.
    pub packets: u64,
    /// Packets that were not IP (or whose IP header was cut): in no flow.
    pub not_ip: u64,
}

#[derive(Clone, Copy)]
struct Entry {
    key: FlowKey,
    hash: u64,
    /// The first packet's time: the flow's place in the age list (active
    /// timeout), which stays ordered by it.
    first_ns: u64,
    /// The earliest packet's time (packets out of time order: the record's
    /// start, never after a packet it counts).
    start_ns: u64,
    last_ns: u64,
    fwd: Direction,
    rev: Direction,
    /// First-packet list.
    age_prev: u32,
    age_next: u32,
}

const EMPTY_ENTRY: Entry = Entry {
    key: FlowKey {
        src: [0; 16],
        dst: [0; 16],
        sport: 0,
        dport: 0,
        proto: 0,
        v6: false,
        vlan: 0,
        icmp: 0,
        tunnel: crate::key::NO_TUNNEL,
    },
    hash: 0,
    first_ns: 0,
    start_ns: 0,
    last_ns: 0,
    fwd: Direction::ZERO,
    rev: Direction::ZERO,
    age_prev: NIL,
    age_next: NIL,
};

/// Head and tail of an intrusive list.
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

/// The flow table of one capture thread.
pub struct FlowTable {
    cfg: TableConfig,
    entries: Vec<Entry>,
    /// Last-packet list (prev, next) per entry, apart from the entries: a
    /// packet moves its flow to the tail, which touches two neighbours, and
    /// 8 bytes each stay in cache where whole entries would not. The free
    /// list runs through `.1`.
    links: Vec<(u32, u32)>,
    /// `hash as u32` << 32 | entry number; [`FREE`] when empty.
    index: Vec<u64>,
    mask: usize,
    free: u32,
    len: u32,
    lru: List,
    age: List,
    seed: u64,
    /// Latest time seen (packets may come slightly out of order).
    now_ns: u64,
    /// No timeout falls before this (a bound kept so that a packet does not
    /// load the list heads, two cache misses with many flows, to learn it).
    next_check_ns: u64,
    counts: TableCounts,
}

/// A symmetric hash of a key: the same for both directions.
#[inline]
fn hash_key(k: &FlowKey, seed: u64) -> u64 {
    #[inline]
    fn end(a: &[u8; 16], port: u16) -> u64 {
        let lo = u64::from_le_bytes(a[..8].try_into().unwrap_or([0; 8]));
        let hi = u64::from_le_bytes(a[8..].try_into().unwrap_or([0; 8]));
        mix(lo ^ mix(hi ^ u64::from(port)))
    }
    let (a, b) = (end(&k.src, k.sport), end(&k.dst, k.dport));
    // Commutative in the ends, then mixed with the rest.
    let ends = a.wrapping_add(b) ^ (a ^ b).rotate_left(17);
    let mut x = ends
        ^ seed
        ^ (u64::from(k.icmp) << 48
            | u64::from(k.proto) << 32
            | u64::from(k.vlan) << 8
            | u64::from(k.v6));
    if k.tunnel.kind != 0 {
        // The tunnel's outer ends, also commutative.
        let t = &k.tunnel;
        let (c, d) = (end(&t.src, 0), end(&t.dst, 0));
        x ^= mix(c.wrapping_add(d) ^ (u64::from(t.id) << 8 | u64::from(t.kind)));
    }
    mix(x)
}

#[inline]
fn mix(mut x: u64) -> u64 {
    // splitmix64's finalizer.
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The record of a flow that ends.
#[inline]
fn record(e: &Entry, reason: EndReason) -> FlowRecord {
    FlowRecord {
        key: e.key,
        start_ns: e.start_ns,
        end_ns: e.last_ns,
        fwd: e.fwd,
        rev: e.rev,
        icmp: e.key.icmp,
        reason,
    }
}

impl FlowTable {
    /// A table for `cfg.max_flows` flows (at least 1); `seed` keys the hash
    /// (a random one keeps crafted traffic from lining flows up in one
    /// probe run; the flows exported do not depend on it).
    pub fn new(cfg: TableConfig, seed: u64) -> FlowTable {
        let n = cfg.max_flows.clamp(1, 1 << 28);
        let slots = (n as usize * 2).next_power_of_two();
        let entries = vec![EMPTY_ENTRY; n as usize];
        let links = (0..n)
            .map(|i| (NIL, if i + 1 < n { i + 1 } else { NIL }))
            .collect();
        FlowTable {
            cfg: TableConfig {
                max_flows: n,
                ..cfg
            },
            entries,
            links,
            index: vec![FREE; slots],
            mask: slots - 1,
            free: 0,
            len: 0,
            lru: List {
                head: NIL,
                tail: NIL,
            },
            age: List {
                head: NIL,
                tail: NIL,
            },
            seed,
            now_ns: 0,
            next_check_ns: u64::MAX,
            counts: TableCounts::default(),
        }
    }

    /// Flows held now.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True when no flow is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What the table has done so far.
    pub fn counts(&self) -> TableCounts {
        self.counts
    }

    /// Bytes the table holds (entries and index), for reports.
    pub fn memory_bytes(&self) -> usize {
        self.entries.len() * (std::mem::size_of::<Entry>() + 8) + self.index.len() * 8
    }

    /// Counts a packet that is in no flow.
    pub fn count_not_ip(&mut self) {
        self.counts.not_ip += 1;
    }

    /// Adds one packet at `ts_ns`; flows that end (timeouts reached by
    /// then, a full table, FIN/RST) go to `out`.
    #[inline]
    pub fn add(&mut self, p: &PacketInfo, ts_ns: u64, out: &mut impl FnMut(FlowRecord)) {
        self.add_with_room(p, ts_ns, &mut || true, out);
    }

    /// [`add`](Self::add), with flows that time out exported only while
    /// `room()` says their records will be taken (see
    /// [`expire_with_room`](Self::expire_with_room)).
    #[inline]
    pub fn add_with_room(
        &mut self,
        p: &PacketInfo,
        ts_ns: u64,
        room: &mut impl FnMut() -> bool,
        out: &mut impl FnMut(FlowRecord),
    ) {
        self.expire_with_room(ts_ns, room, out);
        self.counts.packets += 1;
        let hash = hash_key(&p.key, self.seed);
        let (idx, forward) = match self.find(&p.key, hash) {
            Some(found) => found,
            None => (self.insert(p, hash, ts_ns, out), true),
        };
        let e = &mut self.entries[idx as usize];
        e.last_ns = e.last_ns.max(ts_ns);
        e.start_ns = e.start_ns.min(ts_ns);
        let d = if forward { &mut e.fwd } else { &mut e.rev };
        d.packets += 1;
        d.octets += u64::from(p.octets);
        d.tcp_flags |= p.tcp_flags;
        let ended = p.tcp_flags & RST != 0 || (e.fwd.tcp_flags & e.rev.tcp_flags & FIN != 0);
        if ended {
            self.remove(idx, EndReason::EndOfFlow, out);
        } else {
            self.lru_unlink(idx);
            self.lru_push(idx);
        }
    }

    /// Exports the flows whose idle or active timeout has passed at `now_ns`.
    #[inline]
    pub fn expire(&mut self, now_ns: u64, out: &mut impl FnMut(FlowRecord)) {
        self.expire_with_room(now_ns, &mut || true, out);
    }

    /// [`expire`](Self::expire), exporting a flow only while `room()` says
    /// its record will be taken (asked only when a flow is due): the others
    /// stay in the table, timed out, until a later call finds room. A live
    /// capture's queue to the exporter is bounded and must not block the
    /// capture; without this, when many flows idled out at once (a burst of
    /// new flows ending together), the records beyond the queue's room were
    /// dropped (0.43 % of 2 M flows in the live bench) although the table
    /// could hold them until the exporter caught up.
    #[inline]
    pub fn expire_with_room(
        &mut self,
        now_ns: u64,
        room: &mut impl FnMut() -> bool,
        out: &mut impl FnMut(FlowRecord),
    ) {
        self.now_ns = self.now_ns.max(now_ns);
        let now = self.now_ns;
        if now < self.next_check_ns {
            return;
        }
        while self.lru.head != NIL {
            let h = self.lru.head;
            if now.saturating_sub(self.entries[h as usize].last_ns) < self.cfg.idle_ns {
                break;
            }
            // No room: the next call looks again (next_check_ns stays).
            if !room() {
                return;
            }
            self.remove(h, EndReason::IdleTimeout, out);
        }
        while self.age.head != NIL {
            let h = self.age.head;
            if now.saturating_sub(self.entries[h as usize].first_ns) < self.cfg.active_ns {
                break;
            }
            if !room() {
                return;
            }
            self.remove(h, EndReason::ActiveTimeout, out);
        }
        // Heads only ever move to later deadlines between passes (a flow
        // moved to the tail, or removed), so this bound stays safe.
        self.next_check_ns = self
            .now_ns
            .saturating_add(self.next_deadline_ns().unwrap_or(u64::MAX));
    }

    /// Exports every flow (the end of the capture), oldest first.
    pub fn flush(&mut self, out: &mut impl FnMut(FlowRecord)) {
        // Every flow goes: the entries are read in age order and the index
        // is cleared in one sweep afterwards, rather than each removal
        // finding and shifting its slot (a cache miss per flow; with 1 M
        // flows that was most of the flush, measured with perf).
        let mut i = self.age.head;
        while i != NIL {
            let e = &self.entries[i as usize];
            out(record(e, EndReason::ForcedEnd));
            i = e.age_next;
        }
        if self.len > 0 {
            self.index.fill(FREE);
            let n = self.cfg.max_flows;
            for (i, l) in self.links.iter_mut().enumerate() {
                let next = i as u32 + 1;
                *l = (NIL, if next < n { next } else { NIL });
            }
            self.free = 0;
            self.len = 0;
            self.lru = List {
                head: NIL,
                tail: NIL,
            };
            self.age = self.lru;
            self.next_check_ns = u64::MAX;
        }
    }

    /// The time until the next timeout, from the latest time seen (`None`:
    /// no flow held).
    pub fn next_deadline_ns(&self) -> Option<u64> {
        if self.lru.head == NIL {
            return None;
        }
        let idle = self.entries[self.lru.head as usize].last_ns + self.cfg.idle_ns;
        let active = self.entries[self.age.head as usize].first_ns + self.cfg.active_ns;
        Some(idle.min(active).saturating_sub(self.now_ns))
    }

    #[inline]
    fn find(&self, key: &FlowKey, hash: u64) -> Option<(u32, bool)> {
        let mut slot = hash as usize & self.mask;
        let tag = hash & 0xffff_ffff;
        loop {
            let v = self.index[slot];
            if v == FREE {
                return None;
            }
            if v >> 32 == tag {
                let i = v as u32;
                let e = &self.entries[i as usize];
                if e.key == *key {
                    return Some((i, true));
                }
                if e.key == key.reversed() {
                    return Some((i, false));
                }
            }
            slot = (slot + 1) & self.mask;
        }
    }

    fn insert(
        &mut self,
        p: &PacketInfo,
        hash: u64,
        ts_ns: u64,
        out: &mut impl FnMut(FlowRecord),
    ) -> u32 {
        if self.free == NIL {
            // Full: the flow idle longest goes first.
            self.counts.evicted += 1;
            self.remove(self.lru.head, EndReason::LackOfResources, out);
        }
        let i = self.free;
        self.free = self.links[i as usize].1;
        self.entries[i as usize] = Entry {
            key: p.key,
            hash,
            first_ns: ts_ns,
            start_ns: ts_ns,
            last_ns: ts_ns,
            ..EMPTY_ENTRY
        };
        let mut slot = hash as usize & self.mask;
        while self.index[slot] != FREE {
            slot = (slot + 1) & self.mask;
        }
        self.index[slot] = (hash & 0xffff_ffff) << 32 | u64::from(i);
        self.lru_push(i);
        // By first packet: appended, as times only grow (a packet slightly
        // out of order is at most that much late).
        let t = self.age.tail;
        self.entries[i as usize].age_prev = t;
        if t == NIL {
            self.age.head = i;
        } else {
            self.entries[t as usize].age_next = i;
        }
        self.age.tail = i;
        self.len += 1;
        self.counts.created += 1;
        let soonest = ts_ns.saturating_add(self.cfg.idle_ns.min(self.cfg.active_ns));
        self.next_check_ns = self.next_check_ns.min(soonest);
        i
    }

    fn remove(&mut self, i: u32, reason: EndReason, out: &mut impl FnMut(FlowRecord)) {
        let e = self.entries[i as usize];
        out(record(&e, reason));
        // Index: find the slot, then shift later members of the run back.
        let mut slot = e.hash as usize & self.mask;
        while self.index[slot] as u32 != i {
            slot = (slot + 1) & self.mask;
        }
        let mut hole = slot;
        let mut next = (hole + 1) & self.mask;
        loop {
            let j = self.index[next];
            if j == FREE {
                break;
            }
            // The slots are at most 2^29 (`max_flows` <= 2^28 here), so the
            // home slot is in the low 32 bits of the hash the slot keeps.
            let home = (j >> 32) as usize & self.mask;
            // `j` may fill the hole if its home is not in (hole, next].
            if (next.wrapping_sub(home) & self.mask) >= (next.wrapping_sub(hole) & self.mask) {
                self.index[hole] = j;
                hole = next;
            }
            next = (next + 1) & self.mask;
        }
        self.index[hole] = FREE;
        self.lru_unlink(i);
        let (p, n) = (e.age_prev, e.age_next);
        if p == NIL {
            self.age.head = n;
        } else {
            self.entries[p as usize].age_next = n;
        }
        if n == NIL {
            self.age.tail = p;
        } else {
            self.entries[n as usize].age_prev = p;
        }
        self.links[i as usize].1 = self.free;
        self.free = i;
        self.len -= 1;
    }

    #[inline]
    fn lru_unlink(&mut self, i: u32) {
        let (p, n) = self.links[i as usize];
        if p == NIL {
            self.lru.head = n;
        } else {
            self.links[p as usize].1 = n;
        }
        if n == NIL {
            self.lru.tail = p;
        } else {
            self.links[n as usize].0 = p;
        }
    }

    #[inline]
    fn lru_push(&mut self, i: u32) {
        let t = self.lru.tail;
        self.links[i as usize] = (t, NIL);
        if t == NIL {
            self.lru.head = i;
        } else {
            self.links[t as usize].1 = i;
        }
        self.lru.tail = i;
    }
}
