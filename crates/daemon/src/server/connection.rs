//! One client connection ([`Connection`]): its loop (requests read and
//! decoded, the idle timeout, malformed messages counted), the refusal of a
//! user no grant names, the tick that holds a running session to a reloaded
//! policy, the end of a session, and the dispatch of each request. Apart
//! from the accept loop (the parent) because it is what one connection
//! thread runs; the requests that are decided under the policy (`Open`,
//! `Inject`, `SetFilter`) are in `admission`.

use super::{peer_of, ready, send, Shared, MAX_BAD_MESSAGES, NO_GRANT_GRACE, TICK};
use crate::audit;
use crate::budget::{RingLease, SessionSlot};
use crate::session::{admit, OpenRequest, Session};
use ringcap_policy::Peer;
use ringcap_proto::{
    decode_request, encode_response, transport, Request, Response, SessionInfo, MAX_DATAGRAM,
};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// One client connection: at most one session.
pub(super) struct Connection {
    pub(super) conn: OwnedFd,
    pub(super) shared: Arc<Shared>,
    pub(super) session: Option<Session>,
    /// The session's slot in its user's budget and its pooled ring, given
    /// back (in that order: ring, then slot) once the session is gone.
    pub(super) held: Option<(SessionSlot, RingLease)>,
    pub(super) generation: u64,
}

impl Connection {
    pub(super) fn new(conn: OwnedFd, shared: Arc<Shared>) -> Connection {
        Connection {
            conn,
            shared,
            session: None,
            held: None,
            generation: 0,
        }
    }

    pub(super) fn run(mut self) {
        let peer = match peer_of(&self.conn) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("ringcapd: cannot read the peer's credentials: {e}");
                return;
            }
        };
        let mut buf = Box::new([0u8; MAX_DATAGRAM]);
        if peer.uid != 0 && !self.named_by_a_grant(&peer) {
            self.refuse_stranger(&peer, &mut buf);
            return;
        }
        let mut bad = 0u32;
        let mut last_request = std::time::Instant::now();
        loop {
            if self.shared.stopping.load(Ordering::Relaxed) {
                self.end("the daemon is stopping", &peer);
                return;
            }
            let idle = Duration::from_millis(self.shared.idle_timeout_ms.load(Ordering::Relaxed));
            if self.session.is_none() && last_request.elapsed() >= idle {
                let _ = send(
                    &self.conn,
                    &Response::error(format!(
                        "no request for {} s and no session: closing the connection",
                        idle.as_secs_f64()
                    )),
                );
                break;
            }
            match ready(&self.conn, TICK) {
                Ok(false) => {}
                Ok(true) => {
                    last_request = std::time::Instant::now();
                    // Requests carry no descriptors: any sent are closed here.
                    let request = match transport::recv(&self.conn, &mut buf) {
                        Ok(None) => break,
                        Ok(Some((len, _fds))) => {
                            decode_request(&buf[..len]).map_err(|e| e.to_string())
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    match request {
                        Ok(req) => {
                            bad = 0;
                            if !self.handle(req, &peer) {
                                break;
                            }
                        }
                        Err(message) => {
                            bad += 1;
                            let _ = send(&self.conn, &Response::error(message));
                            if bad >= MAX_BAD_MESSAGES {
                                audit::log(
                                    "disconnect",
                                    None,
                                    peer.uid,
                                    "too many malformed messages",
                                );
                                break;
                            }
                        }
                    }
                }
                Err(_) => break,
            }
            self.tick(&peer);
        }
        self.end("the client went away", &peer);
    }

    /// True when some grant of the policy in force names `peer`.
    fn named_by_a_grant(&self, peer: &Peer) -> bool {
        let (policy, _) = self.shared.policy();
        policy.grants.iter().any(|g| g.applies_to(peer))
    }

    /// A user no grant names holds no connection: its first request (or
    /// none, after [`NO_GRANT_GRACE`]) gets the policy's default-deny
    /// refusal, then the connection is closed. Waiting for the request
    /// lets the client read the refusal as its answer instead of a reset.
    fn refuse_stranger(&self, peer: &Peer, buf: &mut [u8; MAX_DATAGRAM]) {
        if matches!(ready(&self.conn, NO_GRANT_GRACE), Ok(true)) {
            let _ = transport::recv(&self.conn, buf);
        }
        audit::refused(peer.uid, "no grant names this user");
        let _ = send(
            &self.conn,
            &Response::Refused {
                grant: None,
                rule: "default deny".into(),
                reason: format!(
                    "no grant names uid {} (or its groups): ringcapd serves it nothing",
                    peer.uid
                ),
            },
        );
    }

    /// Looks at the session: ended by itself, or no longer allowed.
    pub(super) fn tick(&mut self, peer: &Peer) {
        let Some(s) = &mut self.session else {
            return;
        };
        let quota = s.admitted.decision.dump_quota;
        let mut over = None;
        if let Some(d) = s.dump() {
            for name in d.take_published() {
                let _ = send(&self.conn, &Response::DumpPublished { name });
            }
            let held = crate::dump::bytes_held(&d.dir);
            if held > quota {
                over = Some(held);
            }
        }
        if let Some(held) = over {
            self.end(
                &format!(
                    "the dump stopped at the quota: uid {}'s dump files hold {held} bytes, \
                     the grant's dump_quota is {quota}",
                    peer.uid
                ),
                peer,
            );
            return;
        }
        if s.finished() {
            let why = s.finish_reason();
            self.end(&why, peer);
            return;
        }
        let (policy, generation, key) = self.shared.policy_and_key();
        if generation != self.generation {
            self.generation = generation;
            let Some(s) = &mut self.session else {
                return;
            };
            match admit(&policy, peer, &s.request) {
                Err(Response::Refused { rule, reason, .. }) => {
                    self.end(&format!("the policy was reloaded and no longer allows this session ({rule}: {reason})"), peer);
                    return;
                }
                Err(_) => {
                    self.end(
                        "the policy was reloaded and no longer allows this session",
                        peer,
                    );
                    return;
                }
                Ok(a) => {
                    // Injection too: guard, rates (ringcap_inject; see
                    // crate::inject), from the new decision's rights.
                    let rights = a.decision.inject.as_ref();
                    if let Some(change) = s.inject.as_mut().and_then(|i| i.hold_to(rights)) {
                        audit::log("change", Some(s.id), peer.uid, &change);
                    }
                    if !a.decision.same_as(&s.admitted.decision)
                        || a.effective != s.admitted.effective
                    {
                        let id = s.id;
                        if let Err(e) = s.restart(a, key.as_ref()) {
                            self.end(&format!("the policy was reloaded and the session could not be restarted: {e}"), peer);
                            return;
                        }
                        audit::log("change", Some(id), peer.uid, "held to the reloaded policy");
                    } else {
                        // Nothing the capture runs changed; the rest of the
                        // decision (inject rights) is replaced as it is.
                        s.admitted = a;
                    }
                }
            }
        }
        if let Some(s) = &self.session {
            if let Ok(mut all) = self.shared.sessions.lock() {
                if let Some(info) = all.get_mut(&s.id) {
                    info.counters = s.counters();
                }
            }
        }
    }

    /// Ends the session, if any, telling the client why.
    pub(super) fn end(&mut self, reason: &str, peer: &Peer) {
        let Some(s) = self.session.take() else {
            return;
        };
        let id = s.id;
        let (counters, failure, published) = s.end();
        for name in published {
            let _ = send(&self.conn, &Response::DumpPublished { name });
        }
        let reason = match failure {
            Some(f) => format!("{reason}: {f}"),
            None => reason.to_string(),
        };
        if let Ok(mut all) = self.shared.sessions.lock() {
            all.remove(&id);
        }
        // The session is gone (its captures left, its ring finished): the
        // ring goes back to the user's pool, then the session slot.
        self.held = None;
        audit::log(
            "end",
            Some(id),
            peer.uid,
            &format!("reason={reason:?} {}", audit::counters(&counters)),
        );
        let _ = send(&self.conn, &Response::Ended { reason, counters });
    }

    /// The peer's dump directory (made if missing).
    fn dump_dir(&self, peer: &Peer) -> std::io::Result<std::path::PathBuf> {
        let (policy, _) = self.shared.policy();
        crate::dump::user_dir(&policy.dump_dir, peer.uid)
    }

    /// Answers one request; false to close the connection.
    fn handle(&mut self, req: Request, peer: &Peer) -> bool {
        let reply = match req {
            Request::Open {
                interfaces,
                filter,
                program,
                snaplen,
                sample,
                format,
                dump,
                duration_s,
                count,
                compress,
                inject_only,
                flows,
            } => {
                if self.session.is_some() {
                    Response::error("this connection already has a session: close it first")
                } else {
                    let (program, program_tagged) = crate::session::program_of(program);
                    let request = OpenRequest {
                        interfaces,
                        filter,
                        program,
                        program_tagged,
                        snap: snaplen,
                        sample,
                        duration: duration_s.map(Duration::from_secs_f64),
                        count,
                        dump,
                        format,
                        inject_only,
                        compress,
                        flows,
                    };
                    return self.open(request, peer);
                }
            }
            Request::Retrieve {
                interface,
                filter,
                program,
                snaplen,
                after_ns,
                before_ns,
                max_bytes,
            } => {
                if self.session.is_some() {
                    Response::error("this connection has a session: retrieve on another one")
                } else {
                    let (program, program_tagged) = crate::session::program_of(program);
                    let req = ringcap_policy::RetrieveRequest {
                        interface,
                        filter,
                        program,
                        program_tagged,
                        snap: snaplen,
                        after_ns,
                        before_ns,
                        max_bytes,
                    };
                    return crate::retrieve::serve(&self.conn, &*self.shared, peer, req);
                }
            }
            Request::SetFilter { filter, program } => self.set_filter(filter, program, peer),
            Request::Inject { frames } => self.inject(frames, peer),
            Request::InjectReports => match &self.session {
                Some(s) => Response::InjectReports {
                    reports: s
                        .inject
                        .as_ref()
                        .map(|i| i.reports(ringcap_proto::validate::MAX_REPORTS))
                        .unwrap_or_default(),
                },
                None => Response::error("no session"),
            },
            Request::Stats => match &self.session {
                Some(s) => Response::Stats {
                    counters: s.counters(),
                },
                None => Response::error("no session"),
            },
            Request::Flush => match &self.session {
                // Chunks are handed over at least every FLUSH_INTERVAL.
                Some(_) => Response::Ok,
                None => Response::error("no session"),
            },
            Request::Checkpoint => match self.session.as_mut().and_then(|s| s.dump()) {
                Some(d) => {
                    d.checkpoint();
                    Response::Ok
                }
                None => {
                    Response::error("checkpoints rotate daemon dumps, and this connection has none")
                }
            },
            Request::Close => {
                if self.session.is_some() {
                    self.end("closed by the client", peer);
                    return true;
                }
                Response::error("no session")
            }
            Request::ListDumps => match self.dump_dir(peer) {
                Ok(dir) => Response::Dumps {
                    files: crate::dump::list(&dir),
                },
                Err(e) => Response::error(e),
            },
            Request::FetchDump { name } => {
                let file = self
                    .dump_dir(peer)
                    .and_then(|dir| crate::dump::open(&dir, &name));
                return match file {
                    Ok(f) => {
                        let bytes = f.metadata().map(|m| m.len()).unwrap_or(0);
                        audit::log("fetch", None, peer.uid, &format!("dump={name:?}"));
                        use std::os::fd::AsFd;
                        transport::send(
                            &self.conn,
                            &encode_response(&Response::Dump { name, bytes }),
                            &[f.as_fd()],
                        )
                        .is_ok()
                    }
                    Err(e) => send(&self.conn, &Response::error(e)).is_ok(),
                };
            }
            Request::DeleteDump { name } => match self
                .dump_dir(peer)
                .and_then(|dir| crate::dump::delete(&dir, &name))
            {
                Ok(()) => {
                    audit::log("delete", None, peer.uid, &format!("dump={name:?}"));
                    Response::Ok
                }
                Err(e) => Response::error(e),
            },
            Request::Sessions => {
                let all = self
                    .shared
                    .sessions
                    .lock()
                    .map(|m| m.clone())
                    .unwrap_or_default();
                let mut sessions: Vec<SessionInfo> = all
                    .into_values()
                    .filter(|s| peer.uid == 0 || s.uid == peer.uid)
                    .collect();
                sessions.sort_by_key(|s| s.session);
                crate::listing::sessions_reply(sessions)
            }
        };
        send(&self.conn, &reply).is_ok()
    }
}
