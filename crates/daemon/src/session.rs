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

use crate::budget::FlowSlot;
use crate::dump::Dump;
use crate::flows::FlowCounters;
use crate::ring_sink::{RingSinks, SinkCounters, FLUSH_INTERVAL};
use ringcap_engine::hub::{self, Subscription, SubscriptionSpec};
use ringcap_engine::{Counters, PacketSink, Sampling, SinkFactory, Snap, TransformFactory};
use ringcap_policy::{Decision, Peer, Policy};
use ringcap_privacy::fields::{self, FieldSet};
use ringcap_privacy::{Key, Privacy};
use ringcap_proto::{Effective, Response, SampleRequest, SessionCounters, SnapRequest};
use ringcap_shm::RingWriter;
use ringcap_stages::Instruction;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// What a client asked for (the `Open` request's fields, checked by the codec).
pub use ringcap_policy::OpenRequest;
/// Smallest shared-memory ring.
pub use ringcap_policy::MIN_RING;

/// The instructions of a client's compiled filter (the codec has checked
/// that they decode) and whether it wants VLAN tags in the bytes.
pub fn program_of(p: Option<ringcap_proto::FilterProgram>) -> (Option<Vec<Instruction>>, bool) {
    match p {
        None => (None, false),
        Some(p) => (
            p.instructions().map(|v| {
                v.into_iter()
                    .map(|(code, jt, jf, k)| Instruction { code, jt, jf, k })
                    .collect()
            }),
            p.tagged,
        ),
    }
}

fn snap_request(s: Snap) -> SnapRequest {
    match s {
        Snap::Bytes(n) => SnapRequest::Bytes(n),
        Snap::Headers { max } => SnapRequest::Headers { max },
    }
}

fn sample_request(s: Sampling) -> Option<SampleRequest> {
    match s {
        Sampling::All => None,
        Sampling::Packets { n, .. } => Some(SampleRequest::Packets(n)),
        Sampling::Flows { n } => Some(SampleRequest::Flows(n)),
    }
}

/// A request the policy allows: the policy's [`Decision`] (everything that
/// is enforced) and what the client is told of it.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The grant that allowed it (index in the policy file).
    pub grant: usize,
    /// What is enforced, decided by [`ringcap_policy::decide`].
    pub decision: Decision,
    /// What the client is told.
    pub effective: Effective,
}

/// The privacy transforms a session's grant asks for (none if it hides
/// nothing): masks, and Crypto-PAn on addresses under the policy's key.
pub(crate) fn privacy_of(d: &Decision, key: Option<&Key>) -> Result<Vec<TransformFactory>, String> {
    let anonymize = match (d.anonymize, key) {
        (false, _) => None,
        (true, Some(k)) => Some((k.clone(), FieldSet::of(&[fields::IP_ADDR]))),
        // The policy cannot load without the key; refuse rather than serve
        // addresses in the clear if that ever changes.
        (true, None) => return Err("the grant anonymizes addresses but no key is loaded".into()),
    };
    let p = Privacy::new(FieldSet::of(&d.hide), anonymize)?;
    Ok(if p.is_noop() {
        Vec::new()
    } else {
        vec![p.factory()]
    })
}

/// Holds `req` from `peer` to `policy` through the one admission point,
/// [`ringcap_policy::decide`], and adds the reply the client gets. Default
/// deny.
// The refusal is the reply itself, made once per request: boxing it would
// only add an allocation.
#[allow(clippy::result_large_err)]
pub fn admit(policy: &Policy, peer: &Peer, req: &OpenRequest) -> Result<Admitted, Response> {
    let d = ringcap_policy::decide(policy, peer, req).map_err(|r| Response::Refused {
        grant: r.grant.map(|g| g as u32),
        rule: r.rule.to_string(),
        reason: r.reason,
    })?;
    let compress = req.compress && req.dump.is_none();
    let effective = Effective {
        interfaces: req.interfaces.clone(),
        filter: req.filter.clone(),
        framework_filter: d.framework_text.clone(),
        snaplen: snap_request(d.snap),
        sample: sample_request(d.sampling),
        hide: d.hide.iter().map(|f| f.name().to_string()).collect(),
        anonymize: d.anonymize,
        max_packets_per_second: d.max_packets_per_second,
        max_bits_per_second: d.max_bits_per_second,
        max_duration_s: d.duration.map(|d| d.as_secs_f64()),
        grant: d.grant as u32,
        compress,
        compress_format: compress.then_some(ringcap_compress::VERSION),
        flows: d.flows,
    };
    Ok(Admitted {
        grant: d.grant,
        decision: d,
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
        admitted.decision.ring_size
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
    /// Flow records: the counters of the session's tables and their flows
    /// reserved in the user's budget (`crate::flows`).
    flows: Option<(Arc<FlowCounters>, Arc<FlowSlot>)>,
}

impl Session {
    /// Starts the capture of an admitted request into `ring` (of
    /// [`ring_size`] bytes, from the user's pool: `crate::budget`).
    // Each is a separate thing the connection decided or reserved for
    // the session; a struct around them would only move the list.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        id: u64,
        peer: Peer,
        request: OpenRequest,
        admitted: Admitted,
        dump_dir: &std::path::Path,
        key: Option<&Key>,
        ring: Arc<Mutex<RingWriter>>,
        flow_slot: Option<FlowSlot>,
    ) -> Result<Session, String> {
        let transforms = privacy_of(&admitted.decision, key)?;
        let counters = Arc::new(SinkCounters::default());
        let flows = flow_slot.map(|s| (Arc::new(FlowCounters::default()), Arc::new(s)));
        let (dump, file_sink) = match &request.dump {
            Some(d) => {
                let dir = crate::dump::user_dir(dump_dir, peer.uid)
                    .map_err(|e| format!("cannot make the dump directory: {e}"))?;
                let filter = Some(ringcap_policy::combined_filter_text(
                    &admitted.decision.framework_text,
                    &request.filter,
                ))
                .filter(|t| !t.is_empty());
                let (dump, encoder) = Dump::open(
                    dir,
                    d,
                    request.format,
                    admitted.decision.snap.snaplen(),
                    admitted.decision.dump_quota,
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
                flows.as_ref(),
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
            flows,
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
            filter: admitted.decision.filter.clone(),
            snap: admitted.decision.snap,
            sampling: admitted.decision.sampling,
            transforms: transforms.to_vec(),
            count: per_iface_count,
            sink,
            flush_interval: FLUSH_INTERVAL,
        }
    }

    /// The session's sinks: packets to the ring, behind flow tables when
    /// it has flow records, or flow tables alone (flows only).
    fn sinks(
        request: &OpenRequest,
        admitted: &Admitted,
        ring: &Arc<Mutex<RingWriter>>,
        counters: &Arc<SinkCounters>,
        flows: Option<&(Arc<FlowCounters>, Arc<FlowSlot>)>,
    ) -> Box<dyn SinkFactory> {
        let d = &admitted.decision;
        // The flow sinks apply the rates, before their tables.
        let packets = d.packets.then(|| {
            Box::new(RingSinks {
                max_pps: None,
                max_bps: None,
                ..Self::ring_sinks(request, admitted, ring, counters)
            }) as Box<dyn SinkFactory>
        });
        match flows {
            Some((c, slot)) => match crate::flows::sinks(d, packets, ring, c, slot, counters) {
                Some(f) => Box::new(f),
                // Flows reserved, none decided (a reload took them away:
                // it is refused before this): packets only.
                None => Box::new(Self::ring_sinks(request, admitted, ring, counters)),
            },
            None => Box::new(Self::ring_sinks(request, admitted, ring, counters)),
        }
    }

    fn ring_sinks(
        request: &OpenRequest,
        admitted: &Admitted,
        ring: &Arc<Mutex<RingWriter>>,
        counters: &Arc<SinkCounters>,
    ) -> RingSinks {
        RingSinks {
            ring: ring.clone(),
            counters: counters.clone(),
            max_pps: admitted.decision.max_packets_per_second,
            max_bps: admitted.decision.max_bits_per_second,
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
        flows: Option<&(Arc<FlowCounters>, Arc<FlowSlot>)>,
        mut file_sink: Option<Box<dyn PacketSink>>,
    ) -> Result<Vec<Subscription>, String> {
        let sinks = Self::sinks(request, admitted, ring, counters, flows);
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
        let transforms = privacy_of(&admitted.decision, key)?;
        let request = admitted.decision.request.clone();
        if self.dump.is_some() {
            return Err(
                "a daemon dump keeps the filter it started with: close it and start another".into(),
            );
        }
        if admitted.decision.flows.is_some() != self.flows.is_some() {
            return Err(
                "the policy now gives this session's flow records differently: open a new session"
                    .into(),
            );
        }
        let sinks = Self::sinks(
            &request,
            &admitted,
            &self.ring,
            &self.counters,
            self.flows.as_ref(),
        );
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
            .decision
            .duration
            .is_some_and(|d| self.began.elapsed() >= d)
            || (!self.request.inject_only && self.subscriptions.iter().all(|s| s.is_finished()))
    }

    /// Why [`Session::finished`] is true, in the words the client gets:
    /// those of an end it asked for, or its grant's `max_duration`, start
    /// with [`ringcap_proto::ENDED_AS_ASKED`] (the failure itself is added
    /// by [`Session::end`]).
    pub fn finish_reason(&self) -> String {
        use ringcap_proto::ENDED_AS_ASKED;
        let failed = self.dump.as_ref().is_some_and(|d| d.failed())
            || self.subscriptions.iter().any(|s| s.failure().is_some());
        if failed {
            return "the capture failed".into();
        }
        match self.admitted.decision.duration {
            Some(d) if self.began.elapsed() >= d => {
                if self.request.duration == Some(d) {
                    format!("{ENDED_AS_ASKED} (its duration)")
                } else {
                    format!(
                        "{ENDED_AS_ASKED} by the grant: its max_duration is {}",
                        ringcap_policy::units::format_duration(d)
                    )
                }
            }
            _ => format!("{ENDED_AS_ASKED} (its packet count)"),
        }
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
                ..SessionCounters::default()
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
            ..self.flow_counters()
        }
    }

    /// The flow part of the session's counters (zero without flows).
    fn flow_counters(&self) -> SessionCounters {
        let Some((f, _)) = &self.flows else {
            return SessionCounters::default();
        };
        SessionCounters {
            flows_delivered: f.delivered.load(Ordering::Relaxed),
            flows_evicted: f.evicted.load(Ordering::Relaxed),
            flows_dropped_client: f.dropped_client.load(Ordering::Relaxed),
            packets_to_flows: f.to_flows.load(Ordering::Relaxed),
            ..SessionCounters::default()
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
