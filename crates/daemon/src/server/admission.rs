//! The requests of a connection that are decided under the policy: `Open`
//! (admission, then the user's session slot, pooled ring and flow tables
//! reserved, the session started and its ring handed over), `Inject` (the
//! grant's inject rights) and `SetFilter` (the changed request admitted
//! again). Apart from the connection's loop and dispatch (`connection`)
//! because each is a decision of its own, audited as one.

use super::connection::Connection;
use super::{send, MAX_SESSIONS_PER_USER};
use crate::audit;
use crate::session::{admit, OpenRequest, Session};
use ringcap_policy::Peer;
use ringcap_proto::{encode_response, transport, Response, SessionCounters, SessionInfo};
use std::sync::atomic::Ordering;

impl Connection {
    pub(super) fn open(&mut self, request: OpenRequest, peer: &Peer) -> bool {
        let (policy, generation, key) = self.shared.policy_and_key();
        let admitted = match admit(&policy, peer, &request) {
            Ok(a) => a,
            Err(r) => {
                if let Response::Refused { rule, reason, .. } = &r {
                    audit::refused(
                        peer.uid,
                        &format!(
                            "interfaces={:?} filter={} rule={rule:?} reason={}",
                            request.interfaces,
                            audit::text(&request.filter),
                            audit::text(reason)
                        ),
                    );
                }
                return send(&self.conn, &r).is_ok();
            }
        };
        // Checked and reserved in one step, now: a session slot, then a
        // ring from the user's pool; both given back when the session is
        // gone (or at once, if it does not start).
        let slot = match self
            .shared
            .budgets
            .reserve_session(peer.uid, MAX_SESSIONS_PER_USER)
        {
            Ok(slot) => slot,
            Err(reason) => {
                let r = Response::Refused {
                    grant: Some(admitted.grant as u32),
                    rule: "sessions".into(),
                    reason,
                };
                return send(&self.conn, &r).is_ok();
            }
        };
        let ring_budget = (MAX_SESSIONS_PER_USER as u64)
            .saturating_mul(admitted.decision.ring_size.max(crate::session::MIN_RING));
        let lease = match self.shared.budgets.ring(
            peer.uid,
            crate::session::ring_size(&request, &admitted),
            ring_budget,
        ) {
            Ok(l) => l,
            Err(reason) => {
                let r = Response::Refused {
                    grant: Some(admitted.grant as u32),
                    rule: "ring_size".into(),
                    reason,
                };
                return send(&self.conn, &r).is_ok();
            }
        };
        let flow_slot =
            match crate::flows::reserve(&self.shared.budgets, peer.uid, &admitted.decision) {
                Ok(s) => s,
                Err(r) => return send(&self.conn, &r).is_ok(),
            };
        let id = self.shared.next_session.fetch_add(1, Ordering::Relaxed);
        let effective = admitted.effective.clone();
        let session = match Session::start(
            id,
            peer.clone(),
            request,
            admitted,
            &policy.dump_dir,
            key.as_ref(),
            lease.ring.clone(),
            flow_slot,
        ) {
            Ok(s) => s,
            Err(e) => {
                audit::log("fail", Some(id), peer.uid, &e);
                return send(&self.conn, &Response::error(e)).is_ok();
            }
        };
        self.held = Some((slot, lease));
        self.generation = generation;
        let capacity = session
            .ring
            .lock()
            .map(|r| r.capacity() as u64)
            .unwrap_or(0);
        let reply = Response::Accepted {
            session: id,
            effective: effective.clone(),
            ring: ringcap_proto::RingInfo { capacity },
        };
        let sent = {
            let ring = session.ring.lock();
            match ring {
                Ok(r) => {
                    let (data, consumer, event) = r.fds();
                    transport::send(
                        &self.conn,
                        &encode_response(&reply),
                        &[data, consumer, event],
                    )
                }
                Err(_) => Err(std::io::Error::other("ring lock poisoned")),
            }
        };
        audit::log(
            "start",
            Some(id),
            peer.uid,
            &format!(
                "interfaces={:?} filter={} framework={:?} snap={:?} sample={:?} flows={:?} grant={}",
                effective.interfaces,
                audit::text(&effective.filter),
                effective.framework_filter,
                effective.snaplen,
                effective.sample,
                effective.flows,
                // Counted from 1, in file order, like `ringcapd --check`.
                u64::from(effective.grant) + 1
            ),
        );
        if let Ok(mut all) = self.shared.sessions.lock() {
            all.insert(
                id,
                SessionInfo {
                    session: id,
                    uid: peer.uid,
                    interfaces: effective.interfaces.clone(),
                    filter: effective.filter.clone(),
                    counters: SessionCounters::default(),
                    started_s: session.started_s,
                },
            );
        }
        self.session = Some(session);
        if sent.is_err() {
            self.end("the client could not be told", peer);
            return false;
        }
        true
    }

    /// Checks and queues frames under the session's grant's inject rights
    /// (`ringcap_inject::guard` is where they are enforced).
    pub(super) fn inject(
        &mut self,
        frames: Vec<ringcap_proto::InjectFrame>,
        peer: &Peer,
    ) -> Response {
        // A reload not yet looked at is looked at first (grant index, rights).
        self.tick(peer);
        let Some(s) = &mut self.session else {
            return Response::error("no session: open one on the interface to inject on");
        };
        // The session's decision carries its inject rights (a reload
        // decides again and replaces it).
        let Some(rights) = s.admitted.decision.inject.as_ref() else {
            return Response::Refused {
                grant: Some(s.admitted.grant as u32),
                rule: "inject".into(),
                reason: "the grant does not allow injection".into(),
            };
        };
        if s.inject.is_none() {
            match crate::inject::Injecting::start(rights, &s.request.interfaces[0], peer.uid) {
                Ok(i) => {
                    audit::log(
                        "inject",
                        Some(s.id),
                        peer.uid,
                        &format!(
                            "on {} under filter {:?}",
                            s.request.interfaces[0], rights.filter
                        ),
                    );
                    s.inject = Some(i);
                }
                Err(e) => return Response::error(format!("cannot inject: {e}")),
            }
        }
        if let Some(i) = &mut s.inject {
            if let Some(change) = i.hold_to(Some(rights)) {
                audit::log("change", Some(s.id), peer.uid, &change);
            }
            if let Err(e) = i.submit(frames) {
                return Response::error(e);
            }
        }
        Response::Ok
    }

    pub(super) fn set_filter(
        &mut self,
        filter: String,
        program: Option<ringcap_proto::FilterProgram>,
        peer: &Peer,
    ) -> Response {
        let Some(s) = &mut self.session else {
            return Response::error("no session");
        };
        let mut request = s.request.clone();
        request.filter = filter;
        (request.program, request.program_tagged) = crate::session::program_of(program);
        let (policy, _, key) = self.shared.policy_and_key();
        let admitted = match admit(&policy, peer, &request) {
            Ok(a) => a,
            Err(r) => return r,
        };
        let id = s.id;
        match s.restart(admitted, key.as_ref()) {
            Ok(()) => {
                audit::log(
                    "change",
                    Some(id),
                    peer.uid,
                    &format!("filter={}", audit::text(&s.request.filter)),
                );
                if let Ok(mut all) = self.shared.sessions.lock() {
                    if let Some(info) = all.get_mut(&id) {
                        info.filter = s.request.filter.clone();
                    }
                }
                Response::Ok
            }
            Err(e) => Response::error(e),
        }
    }
}
