//! One live capture of an interface shared by many subscribers, each with
//! its own filter, snap length, sampling, transforms and sink (pktd's
//! "filter manager"). The kernel copies each packet once, into one ring;
//! the hub thread runs every subscriber's stages on it in user space, so N
//! clients cost the kernel — and the sender's CPU, where veth's receive
//! work runs — one socket, not N. It takes the ring's packets in groups of
//! 64 and runs one subscriber at a time over a group ([`group`]): its
//! filter on the whole group along paths earlier packets took, and, where
//! nothing else acts on single packets, runs of records made once per group
//! for all subscribers with the same snap length. Subscribers come and go
//! while it runs; the hub stops when the last one leaves.
//!
//! A subscriber alone on the interface may have its filter run by the kernel
//! instead (module `kernel`; see `kernel::try_narrow` for when the hub trusts
//! it).
//!
//! Accounting per subscriber: `packets_filter_accepted` is what its own
//! filter accepted; `packets_dropped_ring` is what the shared kernel ring
//! lost since it joined (before any filter ran, so not necessarily its
//! packets); `packets_seen_by_interface` is the interface's count since it
//! joined.

use crate::error::EngineError;
use crate::source::live::LiveSource;
use crate::source::Source;
use crate::stages::Stages;
use group::{Group, GroupWork, Subscriber};
use kernel::{accept_all, try_narrow, widen, Narrow};
use ringcap_sink::PacketSink;
use ringcap_source::{
    CaptureSocket, CounterFiles, FilterHandle, Interface, RingGeometry, SocketOptions,
    TimestampSource,
};
use ringcap_stages::{Sampling, SessionFilter, Snap, TransformFactory, UserSampler};
use ringcap_stats::{CaptureCounts, Counters};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub mod group;
mod kernel;

#[cfg(test)]
mod framework_tests;

/// Kernel ring of a hub (one per interface, whatever the subscribers).
pub const HUB_RING_BYTES: u64 = 64 << 20;
/// Bytes the kernel copies of each packet: all of it (subscribers cut).
pub const HUB_SNAPLEN: u32 = 262_144;
const PUBLISH: Duration = Duration::from_millis(100);
const NAP: Duration = Duration::from_millis(50);
/// How long a leaving subscriber still gets packets: what the kernel had
/// already taken when it asked to leave is in blocks that retire within two
/// retire timeouts (as a capture drains its ring when it stops).
const DRAIN: Duration = Duration::from_millis(2 * crate::capture::RETIRE_TIMEOUT_MS as u64 + 20);
/// Least time between two narrowings of the kernel filter: each waits for a
/// grace period (8 ms here, two ticks, during which the hub reads nothing;
/// the ring holds what comes meanwhile), and a user who opens and closes a
/// second session over and over must not make the hub spend more than a
/// few percent of its time waiting.
const NARROW_EVERY: Duration = Duration::from_millis(250);

/// What a subscriber asks of the shared capture.
pub struct SubscriptionSpec {
    /// Its filter, as the policy decided it (programs, never text: the hub
    /// compiles nothing).
    pub filter: SessionFilter,
    /// Truncation.
    pub snap: Snap,
    /// Sampling (all in user space here).
    pub sampling: Sampling,
    /// In-place rewrites of its kept packets.
    pub transforms: Vec<TransformFactory>,
    /// Stop after this many kept packets.
    pub count: Option<u64>,
    /// Where its packets go.
    pub sink: Box<dyn PacketSink>,
    /// Longest a kept packet waits in its sink.
    pub flush_interval: Duration,
}

#[derive(Debug, Default)]
struct Published {
    accepted: AtomicU64,
    sampled_out: AtomicU64,
    delivered: AtomicU64,
    after_count: AtomicU64,
    dropped_sink: AtomicU64,
    bytes_on_wire: AtomicU64,
    finished: AtomicBool,
}

struct Entry {
    id: u64,
    /// Its filter as the hub's kernel program, when the kernel would decide
    /// exactly as user space (see [`kernel`]).
    kernel: Option<Vec<libc::sock_filter>>,
    sub: Subscriber,
    published: Arc<Published>,
    flush_interval: Duration,
}

impl Entry {
    fn publish(&self) {
        let p = &self.published;
        p.accepted
            .store(self.sub.counts.ring_accepted, Ordering::Relaxed);
        p.sampled_out
            .store(self.sub.counts.sampled_out, Ordering::Relaxed);
        p.delivered
            .store(self.sub.counts.delivered, Ordering::Relaxed);
        p.after_count
            .store(self.sub.counts.after_count, Ordering::Relaxed);
        p.dropped_sink
            .store(self.sub.sink.dropped(), Ordering::Relaxed);
        p.bytes_on_wire
            .store(self.sub.counts.bytes_on_wire, Ordering::Relaxed);
        p.finished.store(self.sub.done, Ordering::Relaxed);
    }
}

struct Shared {
    interface: Interface,
    /// The interface's counter files, kept open: every session's control
    /// thread reads them several times a second (`Subscription::counters`),
    /// and opening them by path each time cost the daemon more CPU than
    /// some of its per-packet work at the testbed's rate.
    counter_files: CounterFiles,
    added: Mutex<Vec<Entry>>,
    removed: Mutex<Vec<u64>>,
    /// (old subscriber, its successor): swapped between two packets.
    replaced: Mutex<Vec<(u64, Entry)>>,
    changed: AtomicBool,
    stop: AtomicBool,
    /// Kernel ring counters of the hub's socket (accumulated).
    ring_dropped: AtomicU64,
    /// An error that ended the hub thread.
    failure: Mutex<Option<String>>,
    /// The hub socket's filter: accept all, or the lone subscriber's.
    filter: FilterHandle,
    /// The subscriber the kernel filter is narrowed to, if any. Held while
    /// the filter changes, so that a subscriber joining widens it after any
    /// narrowing the hub thread has begun.
    narrowed: Mutex<Option<u64>>,
    /// Bumped before every change of the kernel filter: the hub thread
    /// trusts the kernel's decisions only while it stays what it was when
    /// the hub narrowed the filter.
    epoch: AtomicU64,
}

struct Hub {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    subscribers: usize,
}

static HUBS: Mutex<Option<HashMap<String, Hub>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A subscriber's handle: counters, and leaving (on drop).
pub struct Subscription {
    id: u64,
    interface: String,
    shared: Arc<Shared>,
    published: Arc<Published>,
    base_seen: u64,
    base_ring_dropped: u64,
    left: bool,
}

/// A subscriber's state in the hub thread, for `spec` on `iface`.
fn entry(iface: &Interface, spec: SubscriptionSpec) -> Result<Entry, EngineError> {
    let linktype = iface
        .linktype()
        .ok_or_else(|| EngineError::system(format!("{}: unsupported link type", iface.name)))?;
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    // Unpredictable per subscriber: a client that could predict which
    // packets a forced 1:N sampling keeps could aim its traffic at them.
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed)
        .map_err(|e| EngineError::system(format!("cannot seed the sampler: {e}")))?;
    let stages = Stages::new(
        UserSampler::offline(spec.sampling, u64::from_ne_bytes(seed)),
        spec.snap,
        iface.max_frame_len(),
        spec.transforms.iter().map(|f| f()).collect(),
        vec![linktype],
    )
    .with_budget(spec.count.map(|c| Arc::new(AtomicU64::new(c))))
    .with_client_after(&spec.filter);
    Ok(Entry {
        id,
        kernel: kernel::program(&spec.filter),
        sub: Subscriber::new(spec.filter, stages, spec.sink),
        published: Arc::new(Published::default()),
        flush_interval: spec.flush_interval,
    })
}

/// Joins the shared capture of `interface` (starting it if it is the first).
pub fn subscribe(interface: &str, spec: SubscriptionSpec) -> Result<Subscription, EngineError> {
    let iface = Interface::open(interface)?;
    let entry = entry(&iface, spec)?;
    let (id, published) = (entry.id, entry.published.clone());
    let mut hubs = HUBS.lock().unwrap_or_else(|e| e.into_inner());
    let map = hubs.get_or_insert_with(HashMap::new);
    let hub = match map.get_mut(interface) {
        Some(h) if !h.shared.stop.load(Ordering::Relaxed) => h,
        _ => {
            let h = start(iface.clone())?;
            map.insert(interface.to_string(), h);
            map.get_mut(interface).expect("just inserted")
        }
    };
    hub.subscribers += 1;
    let shared = hub.shared.clone();
    let base_ring_dropped = shared.ring_dropped.load(Ordering::Relaxed);
    shared
        .added
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(entry);
    shared.changed.store(true, Ordering::SeqCst);
    // Packets from now on are this subscriber's to judge too.
    widen(&shared);
    Ok(Subscription {
        id,
        interface: interface.to_string(),
        base_seen: shared.counter_files.read().packets,
        shared,
        published,
        base_ring_dropped,
        left: false,
    })
}

fn start(interface: Interface) -> Result<Hub, EngineError> {
    let geometry = RingGeometry::with_total(
        HUB_RING_BYTES,
        crate::capture::BLOCK_SIZE,
        crate::capture::RETIRE_TIMEOUT_MS,
    );
    let socket = CaptureSocket::open(
        &interface,
        &SocketOptions {
            program: accept_all(),
            geometry,
            fanout: ringcap_source::Fanout::New,
            promiscuous: true,
            timestamps: TimestampSource::Host,
            reserve: 0,
            // Only this process holds the socket; the hub narrows it.
            lock_filter: false,
        },
    )?;
    let filter = socket
        .filter_handle()
        .map_err(|e| EngineError::system(format!("duplicating the capture socket: {e}")))?;
    let shared = Arc::new(Shared {
        counter_files: interface.counter_files(),
        interface: interface.clone(),
        added: Mutex::new(Vec::new()),
        removed: Mutex::new(Vec::new()),
        replaced: Mutex::new(Vec::new()),
        changed: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        ring_dropped: AtomicU64::new(0),
        failure: Mutex::new(None),
        filter,
        narrowed: Mutex::new(None),
        epoch: AtomicU64::new(0),
    });
    let s = shared.clone();
    let retire = Duration::from_millis(u64::from(crate::capture::RETIRE_TIMEOUT_MS));
    let thread = std::thread::Builder::new()
        .name(format!("ringcap-hub-{}", interface.name))
        .spawn(move || run(LiveSource::new(socket, retire), s))
        .map_err(|e| EngineError::runtime(format!("starting a capture thread: {e}")))?;
    Ok(Hub {
        shared,
        thread: Some(thread),
        subscribers: 0,
    })
}

fn run(mut source: LiveSource, shared: Arc<Shared>) {
    let mut entries: Vec<Entry> = Vec::new();
    // Subscribers that asked to leave, and when they stop getting packets.
    let mut leaving: Vec<(u64, Instant)> = Vec::new();
    let mut work = GroupWork::new();
    let mut ring = CaptureCounts::default();
    let mut last_publish = Instant::now();
    // Blocks the kernel filled under the lone subscriber's filter, from
    // when the hub narrowed it (see `try_narrow`).
    let mut narrow: Option<Narrow> = None;
    // The subscriber whose filter the kernel does not take (or for whom the
    // hub cannot tell when the kernel's decisions begin).
    let mut refused: Option<u64> = None;
    let mut next_narrowing = Instant::now();
    loop {
        if shared.changed.swap(false, Ordering::Acquire) {
            entries.append(&mut shared.added.lock().unwrap_or_else(|e| e.into_inner()));
            let swaps =
                std::mem::take(&mut *shared.replaced.lock().unwrap_or_else(|e| e.into_inner()));
            for (old, new) in swaps {
                // The old sink hands over its last packets first, so the
                // client's ring stays in order; the new one takes every
                // packet from here on: none twice, none missed.
                if let Some(e) = entries.iter_mut().find(|e| e.id == old) {
                    e.sub.sink.close();
                    e.sub.done = true;
                    e.publish();
                    *e = new;
                } else {
                    entries.push(new);
                }
            }
            let gone =
                std::mem::take(&mut *shared.removed.lock().unwrap_or_else(|e| e.into_inner()));
            leaving.extend(gone.into_iter().map(|id| (id, Instant::now() + DRAIN)));
        }
        if !leaving.is_empty() {
            let now = Instant::now();
            let due: Vec<u64> = leaving
                .iter()
                .filter(|(_, t)| *t <= now)
                .map(|(id, _)| *id)
                .collect();
            if !due.is_empty() {
                leaving.retain(|(id, _)| !due.contains(id));
                entries.retain_mut(|e| {
                    if due.contains(&e.id) {
                        e.sub.sink.close();
                        e.sub.done = true;
                        e.publish();
                        false
                    } else {
                        true
                    }
                });
            }
        }
        try_narrow(
            &mut source,
            &shared,
            &entries,
            leaving.is_empty(),
            &mut narrow,
            &mut refused,
            &mut next_narrowing,
        );
        if shared.stop.load(Ordering::Relaxed) {
            for e in &mut entries {
                e.sub.sink.close();
                e.sub.done = true;
                e.publish();
            }
            return;
        }
        // One subscriber at a time over each group of packets (see
        // `LiveSource::next_groups` and `group`).
        let seq = source.sequence();
        let got = source.next_groups(|packets| {
            let group = Group::new(packets);
            work.next_group();
            // Read after the block was handed over: a wider filter put on
            // before any of its packets was filtered shows here.
            let decided = narrow
                .as_ref()
                .filter(|n| seq >= n.from && shared.epoch.load(Ordering::SeqCst) == n.epoch)
                .map(|n| n.id);
            for e in entries.iter_mut() {
                if decided == Some(e.id) {
                    e.sub.take_passed(&group, &mut work);
                } else {
                    e.sub.take(&group, &mut work);
                }
            }
        });
        if !got || last_publish.elapsed() >= PUBLISH {
            if source.refresh(&mut ring).is_ok() {
                shared
                    .ring_dropped
                    .store(ring.dropped_ring, Ordering::Relaxed);
            }
            for e in &mut entries {
                if e.sub
                    .sink
                    .oldest()
                    .is_some_and(|t| t.elapsed() >= e.flush_interval)
                {
                    e.sub.sink.flush();
                }
                e.publish();
            }
            last_publish = Instant::now();
        }
        if !got {
            if let Err(e) = source.wait(Some(NAP), None) {
                // The interface is gone (or the socket failed): nothing
                // more can come. Every session ends with why
                // (`Subscription::failure`), its packets so far delivered.
                *shared.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                // A new subscriber starts a new hub (the interface may be
                // back by then).
                shared.stop.store(true, Ordering::Relaxed);
                for entry in &mut entries {
                    entry.sub.sink.close();
                    entry.sub.done = true;
                    entry.publish();
                }
                return;
            }
        }
    }
}

impl Subscription {
    /// Its counters now.
    pub fn counters(&self) -> Counters {
        let p = &self.published;
        let delivered = p.delivered.load(Ordering::Relaxed);
        let dropped_sink = p.dropped_sink.load(Ordering::Relaxed);
        Counters {
            packets_seen_by_interface: self
                .shared
                .counter_files
                .read()
                .packets
                .saturating_sub(self.base_seen),
            packets_filter_accepted: p.accepted.load(Ordering::Relaxed),
            packets_dropped_ring: self
                .shared
                .ring_dropped
                .load(Ordering::Relaxed)
                .saturating_sub(self.base_ring_dropped),
            packets_sampled_out: p.sampled_out.load(Ordering::Relaxed),
            packets_delivered: delivered,
            packets_after_count: p.after_count.load(Ordering::Relaxed),
            packets_dropped_writer: dropped_sink,
            bytes_on_wire: p.bytes_on_wire.load(Ordering::Relaxed),
            ..Counters::default()
        }
    }

    /// True once it has all it asked for (its count), or the hub failed.
    pub fn is_finished(&self) -> bool {
        self.published.finished.load(Ordering::Relaxed)
            || self
                .shared
                .failure
                .lock()
                .map(|f| f.is_some())
                .unwrap_or(true)
    }

    /// Why the shared capture failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.shared.failure.lock().ok().and_then(|f| f.clone())
    }
}

impl Subscription {
    /// Replaces this subscriber's filter, snap, sampling and sink with
    /// `spec`'s, between two packets (none missed, none twice); returns the
    /// counters of what it was until then.
    pub fn replace(&mut self, spec: SubscriptionSpec) -> Result<Counters, EngineError> {
        let entry = entry(&self.shared.interface, spec)?;
        let (id, published) = (entry.id, entry.published.clone());
        self.shared
            .replaced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((self.id, entry));
        self.shared.changed.store(true, Ordering::SeqCst);
        // The successor judges packets from here on with its own filter.
        widen(&self.shared);
        let t0 = Instant::now();
        while !self.published.finished.load(Ordering::Relaxed)
            && self.failure().is_none()
            && t0.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        let before = self.counters();
        self.id = id;
        self.published = published;
        self.base_seen = self.shared.counter_files.read().packets;
        self.base_ring_dropped = self.shared.ring_dropped.load(Ordering::Relaxed);
        Ok(before)
    }

    /// Leaves the shared capture: its sink gets its last packets and is
    /// closed; returns its final counters.
    pub fn leave(mut self) -> Counters {
        self.depart();
        self.counters()
    }

    fn depart(&mut self) {
        if self.left {
            return;
        }
        self.left = true;
        self.shared
            .removed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.id);
        self.shared.changed.store(true, Ordering::Release);
        // The hub drains what the kernel already took, then closes this
        // subscriber's sink: wait for that, so its last packets are handed
        // over before we return.
        let t0 = Instant::now();
        while !self.published.finished.load(Ordering::Relaxed)
            && self.failure().is_none()
            && t0.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let thread = {
            let mut hubs = HUBS.lock().unwrap_or_else(|e| e.into_inner());
            let Some(map) = hubs.as_mut() else { return };
            let last = match map.get_mut(&self.interface) {
                Some(h) if Arc::ptr_eq(&h.shared, &self.shared) => {
                    h.subscribers = h.subscribers.saturating_sub(1);
                    h.subscribers == 0
                }
                _ => false,
            };
            if !last {
                None
            } else {
                map.remove(&self.interface).and_then(|mut h| {
                    h.shared.stop.store(true, Ordering::Relaxed);
                    h.thread.take()
                })
            }
        };
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.depart();
    }
}
