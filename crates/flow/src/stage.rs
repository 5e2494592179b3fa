//! The flow stage in the engine's observer slot: one flow table per
//! capture thread, owned by it (no lock), feeding the exporter's queue.

use crate::export::FlowSender;
use crate::key;
use crate::record::FlowRecord;
use crate::table::{FlowTable, TableConfig};
use ringcap_engine::stages::{Observer, ObserverContext, ObserverFactory};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often a live table looks at the clock without packets.
const TICK: Duration = Duration::from_millis(500);

/// One capture thread's flow stage.
pub struct FlowStage {
    table: FlowTable,
    out: FlowSender,
    /// Live: time also goes on without packets, and the queue never waits.
    live: bool,
    /// Counts already added to the shared stats.
    published: crate::table::TableCounts,
    /// Flows held at the last publish.
    published_len: u64,
}

impl FlowStage {
    /// A stage with its own table of `cfg`.
    pub fn new(cfg: TableConfig, out: FlowSender, live: bool) -> FlowStage {
        // Hash seed: random per table (see `FlowTable::new`).
        let seed = {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        };
        FlowStage {
            table: FlowTable::new(cfg, seed),
            out,
            live,
            published: Default::default(),
            published_len: 0,
        }
    }

    /// A factory for the engine: one stage per capture thread.
    pub fn factory(cfg: TableConfig, out: FlowSender) -> ObserverFactory {
        Arc::new(move |ctx: ObserverContext| {
            Box::new(FlowStage::new(cfg, out.clone(), ctx.live)) as Box<dyn Observer>
        })
    }

    fn publish(&mut self) {
        let c = self.table.counts();
        let p = self.published;
        let s = self.out.stats();
        s.created
            .fetch_add(c.created - p.created, Ordering::Relaxed);
        s.evicted_early
            .fetch_add(c.evicted - p.evicted, Ordering::Relaxed);
        s.not_ip.fetch_add(c.not_ip - p.not_ip, Ordering::Relaxed);
        // Flows held: this table's change since the last publish.
        let len = u64::from(self.table.len());
        crate::stats::move_gauge(&s.active, self.published_len, len);
        self.published = c;
        self.published_len = len;
    }
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Observer for FlowStage {
    #[inline]
    fn packet(
        &mut self,
        data: &[u8],
        vlan: Option<[u8; 4]>,
        wire_len: u32,
        ts_ns: u64,
        linktype: u32,
    ) {
        let (out, wait) = (&self.out, !self.live);
        // A live capture never waits for the exporter: flows that time out
        // while its queue is full stay in the table until there is room.
        match key::parse(linktype, data, vlan, wire_len) {
            Some(p) => self.table.add_with_room(
                &p,
                ts_ns,
                &mut || wait || out.has_room(),
                &mut |r: FlowRecord| out.send(r, wait),
            ),
            None => self.table.count_not_ip(),
        }
    }

    fn idle(&mut self) {
        if self.live {
            let (out, now) = (&self.out, wall_ns());
            self.table
                .expire_with_room(now, &mut || out.has_room(), &mut |r: FlowRecord| {
                    out.send(r, false)
                });
        }
        self.publish();
    }

    fn wake_within(&self) -> Option<Duration> {
        (self.live && !self.table.is_empty()).then_some(TICK)
    }

    fn finish(&mut self) {
        // The capture is ending: the whole table goes to the queue, waiting
        // for room even on a live capture (trying would drop most of a big
        // table at once; the exporter thread never waits without bound).
        let out = &self.out;
        self.table.flush(&mut |r: FlowRecord| out.send(r, true));
        self.publish();
    }
}
