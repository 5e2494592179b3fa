//! One client's capture: the request held to the policy (the only place
//! where a session's settings are decided), an engine capture whose packets
//! go to the client's shared-memory ring, and its counters.
//!
//! Sessions share one kernel socket per interface (`ringcap_engine::hub`):
//! the kernel copies each packet once, and the hub thread runs each
//! session's program — the grant's framework filter ANDed instruction by
//! instruction with the client's — its sampling and its snap cap, then hands
//! what is left to the session's own ring. Measured against one socket per
//! session (bench/README.md, daemon phase): twelve sockets cost the sender's
//! CPU (veth's receive path) a filter run and a copy each per packet. A slow
//! client fills only its own ring; the hub never waits for it.

use crate::dump::Dump;
use crate::ring_sink::{RingSinks, SinkCounters};
use ringcap_engine::hub::{self, Subscription, SubscriptionSpec};
use ringcap_engine::{
    Counters, PacketSink, SampleMode, Sampling, SinkFactory, Snap, TransformFactory,
};
use ringcap_policy::{CaptureRequest, Peer, Policy};
use ringcap_privacy::fields::{self, FieldSet};
use ringcap_privacy::{Key, Privacy};
use ringcap_proto::{
    DumpRequest, Effective, OutputFormat, Response, SampleRequest, SessionCounters, SnapRequest,
};
use ringcap_shm::RingWriter;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a kept packet may wait in a partly filled chunk.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Smallest shared-memory ring.
pub const MIN_RING: u64 = 64 << 10;

/// What a client asked for (the `Open` request's fields, checked by the codec).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenRequest {
    /// Interfaces.
    pub interfaces: Vec<String>,
    /// The client's filter.
    pub filter: String,
    /// Snap length asked for.
    pub snap: SnapRequest,
    /// Sampling asked for.
    pub sample: Option<SampleRequest>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Files written by the daemon instead of packets to the client.
    pub dump: Option<DumpRequest>,
    /// Format of the dump files.
    pub format: OutputFormat,
    /// Only inject: no capture.
    pub inject_only: bool,
    /// Compressed blocks in the ring instead of raw records.
    pub compress: bool,
}

fn snap_of(s: SnapRequest) -> Snap {
    match s {
        SnapRequest::Bytes(n) => Snap::Bytes(n),
        SnapRequest::Headers { max } => Snap::Headers { max },
    }
}

fn snap_request(s: Snap) -> SnapRequest {
    match s {
        Snap::Bytes(n) => SnapRequest::Bytes(n),
        Snap::Headers { max } => SnapRequest::Headers { max },
    }
}

fn sampling_of(s: Option<SampleRequest>) -> Sampling {
    match s {
        None | Some(SampleRequest::Packets(1)) | Some(SampleRequest::Flows(1)) => Sampling::All,
        Some(SampleRequest::Packets(n)) => Sampling::Packets {
            n,
            mode: SampleMode::Random,
        },
        Some(SampleRequest::Flows(n)) => Sampling::Flows { n },
    }
}

fn sample_request(s: Sampling) -> Option<SampleRequest> {
    match s {
        Sampling::All => None,
        Sampling::Packets { n, .. } => Some(SampleRequest::Packets(n)),
        Sampling::Flows { n } => Some(SampleRequest::Flows(n)),
    }
}

/// A request the policy allows, with the settings it allows.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The grant that allowed it (index in the policy file).
    pub grant: usize,
    /// The client's filter.
    pub filter: String,
    /// The grant's framework filter.
    pub framework_filter: String,
    /// Snap length after the cap.
    pub snap: Snap,
    /// Sampling after the forced one.
    pub sampling: Sampling,
    /// Rate limits.
    pub max_pps: Option<u64>,
    /// Rate limits.
    pub max_bps: Option<u64>,
    /// Longest the session may run.
    pub duration: Option<Duration>,
    /// Shared-memory ring bytes.
    pub ring_size: u64,
    /// Bytes of dump files the user may keep.
    pub dump_quota: u64,
    /// Fields masked before the client sees a packet.
    pub hide: FieldSet,
    /// Addresses anonymized with the policy's key.
    pub anonymize: bool,
    /// What the client is told.
    pub effective: Effective,
}

/// The privacy transforms a session's grant asks for (none if it hides
/// nothing): masks, and Crypto-PAn on addresses under the policy's key.
fn privacy_of(admitted: &Admitted, key: Option<&Key>) -> Result<Vec<TransformFactory>, String> {
    let anonymize = match (admitted.anonymize, key) {
        (false, _) => None,
        (true, Some(k)) => Some((k.clone(), FieldSet::of(&[fields::IP_ADDR]))),
        // The policy cannot load without the key; refuse rather than serve
        // addresses in the clear if that ever changes.
        (true, None) => return Err("the grant anonymizes addresses but no key is loaded".into()),
    };
    let p = Privacy::new(admitted.hide, anonymize)?;
    Ok(if p.is_noop() {
        Vec::new()
    } else {
        vec![p.factory()]
    })
}

fn refused(grant: Option<usize>, rule: &str, reason: String) -> Response {
    Response::Refused {
        grant: grant.map(|g| g as u32),
        rule: rule.to_string(),
        reason,
    }
}

/// Holds `req` from `peer` to `policy`: every interface must be allowed by
/// the same grant (one framework filter per session). Default deny.
// The refusal is the reply itself, made once per request: boxing it would
// only add an allocation.
#[allow(clippy::result_large_err)]
pub fn admit(policy: &Policy, peer: &Peer, req: &OpenRequest) -> Result<Admitted, Response> {
    let sampling = sampling_of(req.sample);
    let mut first: Option<ringcap_policy::Effective> = None;
    for iface in &req.interfaces {
        let request = CaptureRequest {
            interface: iface.clone(),
            filter: req.filter.clone(),
            snap: snap_of(req.snap),
            sampling,
        };
        let e = policy.admit(peer, &request).map_err(|r| {
            // No grant for this interface, but one names the client: its
            // `interfaces` rule is what refused, which says more than
            // "default deny" (the client learns what it may capture on).
            let named = policy.grants.iter().find(|g| g.applies_to(peer));
            match named.map(|g| g.admit(&request)) {
                Some(Err(r)) if r.rule == "interfaces" => refused(r.grant, r.rule, r.reason),
                _ => refused(r.grant, r.rule, r.reason),
            }
        })?;
        match &first {
            Some(f) if f.grant != e.grant => {
                return Err(refused(
                    Some(e.grant),
                    "interfaces",
                    format!(
                    "{} and {} fall under different grants ({} and {}): open one session for each",
                    req.interfaces[0], iface, f.grant + 1, e.grant + 1
                ),
                ))
            }
            Some(_) => {}
            None => first = Some(e),
        }
    }
    let Some(e) = first else {
        return Err(refused(None, "interfaces", "no interface given".into()));
    };
    if req.dump.is_some() {
        if e.dump_quota == 0 {
            return Err(refused(
                Some(e.grant),
                "dump_quota",
                "the grant has no dump_quota: daemon dumps are not allowed".into(),
            ));
        }
        if req.interfaces.len() != 1 {
            return Err(refused(
                Some(e.grant),
                "dump",
                "a daemon dump records one interface: open one dump per interface".into(),
            ));
        }
    }
    let grant = &policy.grants[e.grant];
    let duration = match (req.duration, e.max_duration) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let ring_size = e.ring_size.max(MIN_RING).next_power_of_two();
    let effective = Effective {
        interfaces: req.interfaces.clone(),
        filter: req.filter.clone(),
        framework_filter: grant.capture_filter.clone(),
        snaplen: snap_request(e.snap),
        sample: sample_request(e.sampling),
        hide: e.hide.iter().map(|f| f.name().to_string()).collect(),
        anonymize: e.anonymize,
        max_packets_per_second: e.max_packets_per_second,
        max_bits_per_second: e.max_bits_per_second,
        max_duration_s: duration.map(|d| d.as_secs_f64()),
        grant: e.grant as u32,
        compress: req.compress && req.dump.is_none(),
        compress_format: (req.compress && req.dump.is_none()).then_some(ringcap_compress::VERSION),
    };
    Ok(Admitted {
        grant: e.grant,
        filter: req.filter.clone(),
        framework_filter: grant.capture_filter.clone(),
        snap: e.snap,
        sampling: e.sampling,
        max_pps: e.max_packets_per_second,
        max_bps: e.max_bits_per_second,
        duration,
        ring_size,
        dump_quota: e.dump_quota,
        hide: FieldSet::of(&e.hide),
        anonymize: e.anonymize,
        effective,
    })
}

/// Bytes of shared-memory ring a session needs: the grant's ring for a
/// capture to the client; the smallest for a dump (its packets go to files,
/// the ring only carries the end) and for inject-only (nothing is captured).
pub fn ring_size(request: &OpenRequest, admitted: &Admitted) -> u64 {
    if request.dump.is_some() || request.inject_only {
        MIN_RING
    } else {
        admitted.ring_size
    }
}

/// A running session: a subscription to the shared capture of each of its
/// interfaces (one kernel socket per interface for all clients, see
/// `ringcap_engine::hub`), all feeding the client's one ring.
pub struct Session {
    /// Daemon-wide session number.
    pub id: u64,
    /// Who.
    pub peer: Peer,
    /// What they asked for.
    pub request: OpenRequest,
    /// What they got.
    pub admitted: Admitted,
    /// The client's ring.
    pub ring: Arc<Mutex<RingWriter>>,
    /// When it started (seconds since the epoch).
    pub started_s: u64,
    began: Instant,
    subscriptions: Vec<Subscription>,
    counters: Arc<SinkCounters>,
    /// Counters of the subscriptions replaced by `restart`, kept so the
    /// session's totals never go backwards.
    before: Counters,
    dump: Option<Dump>,
    /// Injection, once the client first injects.
    pub inject: Option<crate::inject::Injecting>,
}

impl Session {
    /// Starts the capture of an admitted request into `ring` (of
    /// [`ring_size`] bytes, from the user's pool: `crate::budget`).
    pub fn start(
        id: u64,
        peer: Peer,
        request: OpenRequest,
        admitted: Admitted,
        dump_dir: &std::path::Path,
        key: Option<&Key>,
        ring: Arc<Mutex<RingWriter>>,
    ) -> Result<Session, String> {
        let transforms = privacy_of(&admitted, key)?;
        let counters = Arc::new(SinkCounters::default());
        let (dump, file_sink) = match &request.dump {
            Some(d) => {
                let dir = crate::dump::user_dir(dump_dir, peer.uid)
                    .map_err(|e| format!("cannot make the dump directory: {e}"))?;
                let filter = Some(ringcap_policy::combined_filter_text(
                    &admitted.framework_filter,
                    &admitted.filter,
                ))
                .filter(|t| !t.is_empty());
                let (dump, encoder) = Dump::open(
                    dir,
                    d,
                    request.format,
                    admitted.snap.snaplen(),
                    admitted.dump_quota,
                    filter,
                    &request.interfaces[0],
                )?;
                (Some(dump), Some(Box::new(encoder) as Box<dyn PacketSink>))
            }
            None => (None, None),
        };
        let subscriptions = if request.inject_only {
            Vec::new()
        } else {
            Self::subscribe(
                &request,
                &admitted,
                &transforms,
                &ring,
                &counters,
                file_sink,
            )?
        };
        Ok(Session {
            id,
            peer,
            request,
            admitted,
            ring,
            started_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            began: Instant::now(),
            subscriptions,
            counters,
            before: Counters::default(),
            dump,
            inject: None,
        })
    }

    /// The session's dump, if it writes files.
    pub fn dump(&mut self) -> Option<&mut Dump> {
        self.dump.as_mut()
    }

    /// What the session asks of the shared capture of its `i`th interface.
    fn spec(
        request: &OpenRequest,
        admitted: &Admitted,
        transforms: &[TransformFactory],
        sink: Box<dyn PacketSink>,
    ) -> SubscriptionSpec {
        // One budget for the whole session would need sharing across hubs;
        // with several interfaces the count is split evenly.
        let per_iface_count = request
            .count
            .map(|c| c.div_ceil(request.interfaces.len().max(1) as u64));
        SubscriptionSpec {
            filter: admitted.filter.clone(),
            framework_filter: admitted.framework_filter.clone(),
            snap: admitted.snap,
            sampling: admitted.sampling,
            transforms: transforms.to_vec(),
            count: per_iface_count,
            sink,
            flush_interval: FLUSH_INTERVAL,
        }
    }

    fn sinks(
        request: &OpenRequest,
        admitted: &Admitted,
        ring: &Arc<Mutex<RingWriter>>,
        counters: &Arc<SinkCounters>,
    ) -> RingSinks {
        RingSinks {
            ring: ring.clone(),
            counters: counters.clone(),
            max_pps: admitted.max_pps,
            max_bps: admitted.max_bps,
            threads: request.interfaces.len() as u64,
            compress: request.compress.then(crate::ring_sink::shared_blocks),
        }
    }

    fn subscribe(
        request: &OpenRequest,
        admitted: &Admitted,
        transforms: &[TransformFactory],
        ring: &Arc<Mutex<RingWriter>>,
        counters: &Arc<SinkCounters>,
        mut file_sink: Option<Box<dyn PacketSink>>,
    ) -> Result<Vec<Subscription>, String> {
        let sinks = Self::sinks(request, admitted, ring, counters);
        let mut subs = Vec::new();
        for (i, iface) in request.interfaces.iter().enumerate() {
            let sink = file_sink.take().unwrap_or_else(|| sinks.make(i, 0, 1));
            let sub = hub::subscribe(iface, Self::spec(request, admitted, transforms, sink))
                .map_err(|e| e.message)?;
            subs.push(sub);
        }
        Ok(subs)
    }

    /// Holds the session to `admitted` from now on (a new client filter, or
    /// a policy reload), on the same ring: each shared capture swaps the
    /// session's settings between two packets, so around the switch no
    /// packet is missed and none comes twice.
    pub fn restart(&mut self, admitted: Admitted, key: Option<&Key>) -> Result<(), String> {
        let transforms = privacy_of(&admitted, key)?;
        let mut request = self.request.clone();
        request.filter = admitted.filter.clone();
        if self.dump.is_some() {
            return Err(
                "a daemon dump keeps the filter it started with: close it and start another".into(),
            );
        }
        let sinks = Self::sinks(&request, &admitted, &self.ring, &self.counters);
        let mut before = self.before;
        for (i, sub) in self.subscriptions.iter_mut().enumerate() {
            let spec = Self::spec(&request, &admitted, &transforms, sinks.make(i, 0, 1));
            before.add(&sub.replace(spec).map_err(|e| e.message)?);
        }
        self.before = before;
        self.request = request;
        self.admitted = admitted;
        Ok(())
    }

    /// True once the session has all it may have: its duration is over, its
    /// count reached, or the shared capture failed (an inject-only session
    /// has no capture to end).
    pub fn finished(&self) -> bool {
        self.admitted
            .duration
            .is_some_and(|d| self.began.elapsed() >= d)
            || (!self.request.inject_only && self.subscriptions.iter().all(|s| s.is_finished()))
    }

    fn totals(&self) -> Counters {
        let mut t = self.before;
        for s in &self.subscriptions {
            t.add(&s.counters());
        }
        t
    }

    /// The session's counters now.
    pub fn counters(&self) -> SessionCounters {
        let t = self.totals();
        let c = &self.counters;
        if self.dump.is_some() {
            // Packets went to the daemon's writer: "delivered" is what it
            // was handed, "dropped_client" what it could not keep up with.
            return SessionCounters {
                packets_seen_by_interface: t.packets_seen_by_interface,
                packets_filter_accepted: t.packets_filter_accepted,
                packets_sampled_out: t.packets_sampled_out,
                packets_rate_limited: 0,
                packets_dropped_ring: t.packets_dropped_ring,
                packets_dropped_client: t.packets_dropped_writer,
                packets_delivered: t.packets_delivered
                    - t.packets_dropped_writer.min(t.packets_delivered),
                bytes_delivered: t.bytes_on_wire,
            };
        }
        SessionCounters {
            packets_seen_by_interface: t.packets_seen_by_interface,
            packets_filter_accepted: t.packets_filter_accepted,
            packets_sampled_out: t.packets_sampled_out,
            packets_rate_limited: c.rate_limited.load(Ordering::Relaxed),
            packets_dropped_ring: t.packets_dropped_ring,
            packets_dropped_client: c.dropped_client.load(Ordering::Relaxed),
            packets_delivered: c.delivered.load(Ordering::Relaxed),
            bytes_delivered: c.bytes_delivered.load(Ordering::Relaxed),
        }
    }

    /// Leaves the shared captures (their last packets handed over), marks
    /// the ring ended, and returns the final counters and why the capture
    /// failed, if it did.
    /// Also returns the names of dump files completed at the end.
    pub fn end(mut self) -> (SessionCounters, Option<String>, Vec<String>) {
        let failure = self.subscriptions.iter().find_map(|s| s.failure());
        let mut before = self.before;
        for s in std::mem::take(&mut self.subscriptions) {
            before.add(&s.leave());
        }
        self.before = before;
        let counters = self.counters();
        let failure = failure.or_else(|| self.dump.as_mut().and_then(|d| d.finish()));
        let published = self
            .dump
            .as_mut()
            .map(|d| d.take_published())
            .unwrap_or_default();
        if let Ok(mut r) = self.ring.lock() {
            r.finish();
        }
        (counters, failure, published)
    }
}
