//! Flow records for a session (a grant with `flows = true`): a flow table
//! per capture thread of the session, fed with the packets exactly as the
//! session's policy delivers them, and flow chunks in the session's ring.
//!
//! # After the policy's transforms
//!
//! The hub runs a session's filter (framework, client, `exclude`),
//! sampling and snap cap, then hands the packet to the session's sink, and
//! only *then* runs the transforms (masks, Crypto-PAn) on the bytes the
//! sink returned, in place. So a flow table cannot look at a packet in
//! `push`: it would see the addresses in the clear. [`FlowSink`] therefore
//! takes each packet into a buffer of its own, lets the transforms run on
//! it there, and adds it to its table (and, for a session with packets,
//! hands the transformed record to the packet sink) at the next call —
//! the next packet, a flush, or the end. The flow keys are then read from
//! the very bytes the client would get as packets: masked and anonymized
//! alike, cut by the same snap length. A session of flow records only never
//! has a packet sink: no packet byte goes to its ring. Its snap length is
//! the headers (`ringcap_policy::decide`), so its buffer is small.
//!
//! # Where the records go
//!
//! Into the session's ring, as flow chunks (`ringcap_proto::flows`: a chunk
//! of 0 packets, fixed-size records); why the ring and not the control
//! socket is said there. A chunk goes out when full (128 records), and
//! whatever is waiting at each flush of the sink (the hub flushes a sink
//! once its oldest record has waited 50 ms), so records arrive within a
//! fraction of a second of their end. A chunk that does not fit because the
//! client is not reading is dropped whole and counted
//! (`flows_dropped_client`); nothing waits in the daemon for a slow client.
//!
//! # Memory
//!
//! All taken when the sink is made: the table (`ringcap_flow::FlowTable`,
//! its size fixed, no allocation per packet), the held-packet buffer and
//! one chunk. The flows are reserved in the user's budget
//! (`crate::budget::Budgets::reserve_flows`) before the session starts;
//! the reservation is held by the sinks and given back when the last of
//! them is dropped, so a table still in a hub thread is still counted.
//! When a table is full the flow idle longest is exported early
//! (flowEndReason "lack of resources", counted as `flows_evicted`).
//!
//! # Rates
//!
//! The grant's rate limits are applied here, before the table (and the
//! packet sink behind it has none), so that a flow counts exactly the
//! packets the session may have; packets over them are counted as rate
//! limited, in no flow. A packet lost because the client's ring was full
//! is still in its flow (the grant allowed it; only its delivery failed).
//!
//! A new filter or a policy reload gives the session new sinks: the old
//! tables export their flows then (as a forced end), so flows do not span
//! two different policies.

use crate::budget::FlowSlot;
use ringcap_engine::{PacketSink, SinkFactory};
use ringcap_flow::{FlowRecord, FlowTable, TableConfig, TableCounts};
use ringcap_format::record::{read_ring_record, write_ring_record, Record, HEADER_LEN};
use ringcap_proto::flows::{
    write_flow_chunk_header, FlowEntry, FLOW_CHUNK_HEADER, FLOW_RECORD_LEN,
};
use ringcap_shm::RingWriter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Records in a full flow chunk.
pub const CHUNK_RECORDS: usize = 128;
/// Held-packet buffer of a session with packets: the largest record.
const HELD_PACKETS: usize = crate::ring_sink::CHUNK_BYTES;
/// Held-packet buffer of a flows-only session: its records are the headers,
/// at most 256 bytes, and a VLAN tag.
const HELD_FLOWS_ONLY: usize = HEADER_LEN + 1024;

/// What a session's flow sinks count, shared with the session.
#[derive(Debug, Default)]
pub struct FlowCounters {
    /// Flow records appended to the client's ring.
    pub delivered: AtomicU64,
    /// Flows exported early because a table was full.
    pub evicted: AtomicU64,
    /// Flow records dropped because the client's ring was full.
    pub dropped_client: AtomicU64,
    /// Packets in no flow (not IP, or cut before the IP header).
    pub not_ip: AtomicU64,
    /// Flows held in the tables now.
    pub active: AtomicU64,
    /// Packets a session of flow records only took into its tables (in a
    /// flow or not IP): its packets' end, as `delivered` is for packets.
    pub to_flows: AtomicU64,
}

/// Makes the sinks of one session with flow records.
pub struct FlowSinks {
    /// The packet sinks, for a session with packets (`None`: flows only).
    pub packets: Option<Box<dyn SinkFactory>>,
    /// The client's ring.
    pub ring: Arc<Mutex<RingWriter>>,
    /// The session's flow counters.
    pub counters: Arc<FlowCounters>,
    /// Each sink's table.
    pub table: TableConfig,
    /// The flows reserved for the session's tables in the user's budget.
    pub slot: Arc<FlowSlot>,
    /// The grant's rates, applied here, before the tables (the packet sinks
    /// then have none): flows count exactly the packets the session may
    /// have. Split over the capture threads as the ring sinks split them.
    pub max_pps: Option<u64>,
    /// Bits per second.
    pub max_bps: Option<u64>,
    /// Capture threads in all.
    pub threads: u64,
    /// Where packets over the rates are counted (the session's).
    pub sink_counters: Arc<crate::ring_sink::SinkCounters>,
}

impl SinkFactory for FlowSinks {
    fn make(&self, input: usize, thread: usize, linktype: u32) -> Box<dyn PacketSink> {
        let packets = self
            .packets
            .as_ref()
            .map(|p| p.make(input, thread, linktype));
        let held = if packets.is_some() {
            HELD_PACKETS
        } else {
            HELD_FLOWS_ONLY
        };
        Box::new(FlowSink {
            limits: crate::ring_sink::SessionLimits::new(
                self.max_pps,
                self.max_bps,
                self.threads,
                input,
                self.sink_counters.clone(),
            ),
            table: FlowTable::new(self.table, seed()),
            packets,
            linktype,
            held: vec![0u8; held].into_boxed_slice(),
            held_len: 0,
            out: Outbox {
                buf: vec![0u8; FLOW_CHUNK_HEADER + CHUNK_RECORDS * FLOW_RECORD_LEN]
                    .into_boxed_slice(),
                n: 0,
                since: None,
                ring: self.ring.clone(),
                counters: self.counters.clone(),
            },
            last_tick: Instant::now(),
            published: TableCounts::default(),
            published_len: 0,
            closed: false,
            _slot: self.slot.clone(),
        })
    }
}

/// Flows of each of the session's tables (one per interface): the
/// decision's table size split evenly, at least one each.
pub fn per_table(decision: &ringcap_policy::Decision) -> Option<u32> {
    let f = decision.flows?;
    let n = decision.request.interfaces.len().max(1) as u32;
    Some((f.max_flows / n).max(1))
}

/// Reserves the session's flows in the user's budget (`None`: the session
/// has no flow records); the refusal names the rule `max_flows`.
// The refusal is the reply itself (as `session::admit`'s).
#[allow(clippy::result_large_err)]
pub fn reserve(
    budgets: &Arc<crate::budget::Budgets>,
    uid: u32,
    decision: &ringcap_policy::Decision,
) -> Result<Option<FlowSlot>, ringcap_proto::Response> {
    let Some(per) = per_table(decision) else {
        return Ok(None);
    };
    let total = u64::from(per) * decision.request.interfaces.len().max(1) as u64;
    budgets
        .reserve_flows(uid, total, u64::from(decision.flow_budget))
        .map(Some)
        .map_err(|reason| ringcap_proto::Response::Refused {
            grant: Some(decision.grant as u32),
            rule: "max_flows".into(),
            reason,
        })
}

/// The sinks of a session with flow records: `packets` (the session's
/// packet sinks, `None` for flows only) behind a flow table each of the
/// decision's settings, no bigger than `slot` reserved.
pub fn sinks(
    decision: &ringcap_policy::Decision,
    packets: Option<Box<dyn SinkFactory>>,
    ring: &Arc<Mutex<RingWriter>>,
    counters: &Arc<FlowCounters>,
    slot: &Arc<FlowSlot>,
    sink_counters: &Arc<crate::ring_sink::SinkCounters>,
) -> Option<FlowSinks> {
    let f = decision.flows?;
    let tables = decision.request.interfaces.len().max(1) as u64;
    // A reload may allow more than was reserved at the start: the tables
    // stay within the reservation.
    let reserved = (slot.flows / tables).clamp(1, u64::from(u32::MAX)) as u32;
    let max_flows = per_table(decision)?.min(reserved);
    Some(FlowSinks {
        packets,
        ring: ring.clone(),
        counters: counters.clone(),
        table: TableConfig {
            active_ns: u64::from(f.active_timeout_s) * 1_000_000_000,
            idle_ns: u64::from(f.idle_timeout_s) * 1_000_000_000,
            max_flows,
        },
        slot: slot.clone(),
        max_pps: decision.max_packets_per_second,
        max_bps: decision.max_bits_per_second,
        threads: tables,
        sink_counters: sink_counters.clone(),
    })
}

/// An unpredictable hash seed per table (crafted traffic cannot line its
/// flows up in one probe run).
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The flow chunk being filled, and where it goes.
struct Outbox {
    buf: Box<[u8]>,
    n: usize,
    since: Option<Instant>,
    ring: Arc<Mutex<RingWriter>>,
    counters: Arc<FlowCounters>,
}

impl Outbox {
    #[inline]
    fn put(&mut self, r: &FlowRecord) {
        let at = FLOW_CHUNK_HEADER + self.n * FLOW_RECORD_LEN;
        let Ok(slot) =
            <&mut [u8; FLOW_RECORD_LEN]>::try_from(&mut self.buf[at..at + FLOW_RECORD_LEN])
        else {
            return;
        };
        entry(r).encode(slot);
        self.n += 1;
        self.since.get_or_insert_with(Instant::now);
        if self.n == CHUNK_RECORDS {
            self.ship();
        }
    }

    fn ship(&mut self) {
        if self.n == 0 {
            return;
        }
        write_flow_chunk_header(&mut self.buf, self.n as u32);
        let len = FLOW_CHUNK_HEADER + self.n * FLOW_RECORD_LEN;
        // 0 packets: a flow chunk (see `ringcap_proto::flows`).
        let ok = match self.ring.lock() {
            Ok(mut r) => r.append(&self.buf[..len], 0),
            Err(_) => false,
        };
        let c = if ok {
            &self.counters.delivered
        } else {
            &self.counters.dropped_client
        };
        c.fetch_add(self.n as u64, Ordering::Relaxed);
        self.n = 0;
        self.since = None;
    }
}

/// A finished flow as the client gets it. The tunnel's outer addresses are
/// left out (a client gets the tunnel's kind and key only).
pub fn entry(r: &FlowRecord) -> FlowEntry {
    let k = &r.key;
    FlowEntry {
        src: k.src,
        dst: k.dst,
        start_ns: r.start_ns,
        end_ns: r.end_ns,
        packets: r.fwd.packets,
        octets: r.fwd.octets,
        rev_packets: r.rev.packets,
        rev_octets: r.rev.octets,
        sport: k.sport,
        dport: k.dport,
        tcp_flags: r.fwd.tcp_flags,
        rev_tcp_flags: r.rev.tcp_flags,
        vlan: k.vlan,
        icmp: r.icmp,
        proto: k.proto,
        v6: k.v6,
        reason: r.reason as u8,
        tunnel_kind: k.tunnel.kind,
        tunnel_id: k.tunnel.id,
    }
}

/// One capture thread's sink of a session with flow records.
pub struct FlowSink {
    limits: crate::ring_sink::SessionLimits,
    table: FlowTable,
    /// The session's packet sink (`None`: flow records only).
    packets: Option<Box<dyn PacketSink>>,
    linktype: u32,
    /// The last packet's ring record, `held[..held_len]`: transforms run on
    /// its bytes after `push` returns; it is counted at the next call.
    held: Box<[u8]>,
    held_len: usize,
    out: Outbox,
    last_tick: Instant,
    published: TableCounts,
    published_len: u64,
    closed: bool,
    /// Keeps the session's flows reserved while this table exists.
    _slot: Arc<FlowSlot>,
}

impl FlowSink {
    /// Counts the held packet (its transforms have run) in the table, and
    /// hands it to the packet sink.
    #[inline]
    fn settle(&mut self) {
        if self.held_len == 0 {
            return;
        }
        let bytes = &self.held[..self.held_len];
        self.held_len = 0;
        let Some((rec, _)) = read_ring_record(bytes) else {
            return;
        };
        if !self.limits.admit(rec.ts_ns, rec.wire_len) {
            return;
        }
        let out = &mut self.out;
        match ringcap_flow::parse(self.linktype, rec.data, None, rec.wire_len) {
            Some(p) => self.table.add(&p, rec.ts_ns, &mut |r| out.put(&r)),
            None => self.table.count_not_ip(),
        }
        if let Some(sink) = &mut self.packets {
            // The bytes are final (the VLAN tag is back in them): the
            // sink's own copy needs no transform.
            let _ = sink.push(Record {
                ts_ns: rec.ts_ns,
                wire_len: rec.wire_len,
                data: rec.data,
                tag: None,
                caplen: rec.data.len(),
            });
        }
    }

    /// Adds the table's counts since the last call to the session's.
    fn publish(&mut self) {
        let c = self.table.counts();
        let s = &self.out.counters;
        s.evicted
            .fetch_add(c.evicted - self.published.evicted, Ordering::Relaxed);
        s.not_ip
            .fetch_add(c.not_ip - self.published.not_ip, Ordering::Relaxed);
        if self.packets.is_none() {
            let taken = (c.packets + c.not_ip) - (self.published.packets + self.published.not_ip);
            s.to_flows.fetch_add(taken, Ordering::Relaxed);
        }
        let len = u64::from(self.table.len());
        ringcap_flow::stats::move_gauge(&s.active, self.published_len, len);
        self.published = c;
        self.published_len = len;
    }
}

impl PacketSink for FlowSink {
    #[inline]
    fn push(&mut self, rec: Record<'_>) -> Option<&mut [u8]> {
        self.settle();
        let need = HEADER_LEN + rec.caplen;
        if self.closed || need > self.held.len() {
            // Cannot happen with the snap lengths decide() gives (and the
            // packet could not be shown transformed): counted, never
            // counted untransformed.
            self.out.counters.not_ip.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        write_ring_record(&mut self.held[..need], &rec);
        self.held_len = need;
        Some(&mut self.held[HEADER_LEN..need])
    }

    fn push_records(&mut self, _records: &[u8], _packets: u32) -> bool {
        // One by one: each goes through the table.
        false
    }

    fn flush(&mut self) {
        self.settle();
        let out = &mut self.out;
        self.table.expire(wall_ns(), &mut |r| out.put(&r));
        self.out.ship();
        if let Some(p) = &mut self.packets {
            p.flush();
        }
        self.last_tick = Instant::now();
        self.publish();
    }

    fn oldest(&self) -> Option<Instant> {
        // A table with flows, or a packet held, is looked at every flush
        // interval (timeouts run on the clock, packets or not; the held
        // packet is settled then). From the last flush: no clock read per
        // packet.
        let tick = (!self.table.is_empty() || self.held_len > 0).then_some(self.last_tick);
        [
            self.out.since,
            tick,
            self.packets.as_ref().and_then(|p| p.oldest()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.settle();
        self.limits.leave();
        let out = &mut self.out;
        self.table.flush(&mut |r| out.put(&r));
        self.out.ship();
        if let Some(p) = &mut self.packets {
            p.close();
        }
        self.publish();
        self.closed = true;
    }

    fn dropped(&self) -> u64 {
        self.packets.as_ref().map_or(0, |p| p.dropped())
    }

    fn set_interface_id(&mut self, id: u32) {
        if let Some(p) = &mut self.packets {
            p.set_interface_id(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budgets;
    use ringcap_proto::decode_flow_chunk;
    use ringcap_shm::RingReader;

    /// A UDP frame 198.18.0.`a`:`sport` -> 198.19.0.1:53 of `len` bytes.
    fn frame(a: u8, sport: u16, len: usize) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        let ip_len = (len - 14) as u16;
        f.extend_from_slice(&[
            0x45,
            0,
            (ip_len >> 8) as u8,
            ip_len as u8,
            0,
            1,
            0,
            0,
            64,
            17,
            0,
            0,
        ]);
        f.extend_from_slice(&[198, 18, 0, a, 198, 19, 0, 1]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&[0, 53, 0, 8, 0, 0]);
        f.resize(len, 0xab);
        f
    }

    fn sinks(max_flows: u32, budget: &Arc<Budgets>) -> (FlowSinks, RingReader) {
        let mut w = RingWriter::create(1 << 20).expect("ring");
        let (d, c, e) = w.fds();
        let own = |f: std::os::fd::BorrowedFd<'_>| f.try_clone_to_owned().expect("dup");
        let reader = RingReader::map(own(d), own(c), own(e)).expect("reader");
        w.prefault();
        let slot = budget
            .reserve_flows(9, u64::from(max_flows), 1 << 20)
            .expect("budget");
        let sinks = FlowSinks {
            packets: None,
            ring: Arc::new(Mutex::new(w)),
            counters: Arc::new(FlowCounters::default()),
            table: TableConfig {
                active_ns: 60_000_000_000,
                idle_ns: 60_000_000_000,
                max_flows,
            },
            slot: Arc::new(slot),
            max_pps: None,
            max_bps: None,
            threads: 1,
            sink_counters: Default::default(),
        };
        (sinks, reader)
    }

    fn flows(reader: &mut RingReader) -> Vec<FlowEntry> {
        let mut out = Vec::new();
        while let Some(chunk) = reader.next_chunk().expect("ring") {
            assert_eq!(chunk.packets, 0, "a flows-only ring holds flow chunks only");
            decode_flow_chunk(chunk.payload, |e| out.push(e)).expect("decodes");
        }
        out
    }

    #[test]
    fn transforms_run_before_the_table_and_a_full_table_evicts() {
        let budget = Budgets::new();
        let (factory, mut reader) = sinks(2, &budget);
        let mut sink = factory.make(0, 0, 1);
        assert_eq!(budget.usage(9).flows, 2);
        // Three flows into a table of two: the first is evicted early.
        for (i, (a, len)) in [(1u8, 100usize), (2, 200), (1, 100), (3, 300)]
            .into_iter()
            .enumerate()
        {
            let f = frame(a, 1000 + u16::from(a), len);
            let ts = 1_000_000_000 + i as u64;
            let bytes = sink.push(Record::whole(ts, len as u32, &f)).expect("kept");
            // A transform: the source address's last byte is masked, as
            // the hub does after push.
            bytes[29] = 0;
        }
        sink.close();
        let got = flows(&mut reader);
        assert_eq!(got.len(), 3, "{got:?}");
        for e in &got {
            assert_eq!(e.src[..4], [198, 18, 0, 0], "masked before the table");
        }
        // 198.18.0.2 was idle longest when the third flow came: evicted.
        assert_eq!(
            (got[0].sport, got[0].packets, got[0].octets),
            (1002, 1, 186)
        );
        assert_eq!(got[0].reason, 5, "evicted: lack of resources");
        assert_eq!(
            (got[1].sport, got[1].packets, got[1].octets),
            (1001, 2, 172)
        );
        assert_eq!((got[2].sport, got[2].octets, got[2].reason), (1003, 286, 4));
        assert_eq!(got[1].reason, 4, "forced end at close");
        assert_eq!(factory.counters.evicted.load(Ordering::Relaxed), 1);
        assert_eq!(factory.counters.delivered.load(Ordering::Relaxed), 3);
        assert_eq!(factory.counters.active.load(Ordering::Relaxed), 0);
        assert_eq!(factory.counters.to_flows.load(Ordering::Relaxed), 4);
        // The flows stay reserved while a table exists.
        drop(factory);
        assert_eq!(budget.usage(9).flows, 2);
        drop(sink);
        assert_eq!(budget.usage(9).flows, 0);
    }

    #[test]
    fn a_table_costs_at_most_its_budgeted_bytes() {
        for n in [1u32, 2, 3, 100, 1000, 65_536, 100_000] {
            let t = FlowTable::new(
                TableConfig {
                    active_ns: 1,
                    idle_ns: 1,
                    max_flows: n,
                },
                1,
            );
            assert!(
                t.memory_bytes() as u64 <= u64::from(n) * ringcap_policy::FLOW_BYTES,
                "{n} flows: {} bytes",
                t.memory_bytes()
            );
        }
    }
}
