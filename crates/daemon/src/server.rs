//! The control loop: a listening Unix socket, one thread per connection, and
//! the state they share (the policy, swapped whole on reload; the session
//! list for `Sessions`). Identity comes from the kernel (SO_PEERCRED, and the
//! uid's groups from the system's group database), never from the client.
//! Every request is decoded by `ringcap_proto::decode_request` — the one
//! place client bytes become a request — and answered; a connection that
//! keeps sending garbage is closed.
//!
//! What a user can make the daemon hold is bounded here through
//! [`crate::budget`]: a connection slot per connection (only for users a
//! grant names; the rest get one refusal and the close), a session slot
//! and a pooled ring per session, each taken when decided and given back
//! when gone; a connection without a session is closed after the idle
//! timeout. Replies whose size depends on other users' state (`Sessions`)
//! are bounded ([`crate::listing`]): never an error for the asker.

use crate::audit;
use crate::budget::{Budgets, RingLease, SessionSlot};
use crate::session::{admit, OpenRequest, Session};
use nix::sys::socket::{getsockopt, sockopt};
use ringcap_policy::{Peer, Policy};
use ringcap_privacy::Key;
use ringcap_proto::{
    decode_request, encode_response, transport, Request, Response, SessionCounters, SessionInfo,
    MAX_DATAGRAM,
};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// Connections served at once; more are told so and closed.
pub const MAX_CONNECTIONS: usize = 256;
/// Sessions one user may run at once (each holds a kernel ring and a
/// shared-memory ring).
pub const MAX_SESSIONS_PER_USER: usize = 16;
/// Connections one user may hold at once (root is not limited): the rest
/// of the [`MAX_CONNECTIONS`] stay available to everyone else. A
/// connection carries at most one session, so this is the session limit
/// and a few more for `stats`, dump listings and fetches. Only users a
/// grant names hold connections at all (anyone else gets one refusal and
/// the close), and a connection without a session is closed after
/// [`IDLE_TIMEOUT`] without a request.
pub const MAX_CONNECTIONS_PER_USER: usize = MAX_SESSIONS_PER_USER + 8;
/// How long a connection without a session may stay silent before it is
/// closed (`ringcapd --idle-timeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a user no grant names has to send its first request (which is
/// refused) before the connection is closed anyway.
pub const NO_GRANT_GRACE: Duration = Duration::from_secs(2);
/// Malformed messages in a row before a connection is closed.
pub const MAX_BAD_MESSAGES: u32 = 8;
/// Stack of a connection thread. Decoding a request recurses once per
/// level of JSON nesting, up to serde_json's limit of 128 levels, and a
/// level of an internally tagged enum costs ~2.5 KiB of stack in a debug
/// build: 256 KiB overflowed at 100 levels of `{"a":` — one datagram from
/// any local user aborted the daemon — and the 128 levels serde_json allows
/// need ~330 KiB. 4 MiB leaves a wide margin; only touched pages are
/// committed, so 256 connections cost little more than before.
pub const CONNECTION_STACK: usize = 4 << 20;
/// Longest the daemon waits to hand a client an answer (SO_SNDTIMEO): a
/// client whose socket stays full that long is not reading its answers and
/// is disconnected, which ends its session.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a connection looks at its session and the policy.
const TICK: Duration = Duration::from_millis(200);

/// What the connections share.
pub struct Shared {
    /// The policy in force, its generation (bumped on reload) and the
    /// anonymization key it names (read with it, so the two always match).
    pub policy: RwLock<(Arc<Policy>, u64, Option<Key>)>,
    /// Set when the daemon is stopping.
    pub stopping: AtomicBool,
    /// Sessions, for `Sessions` and the metrics page.
    pub sessions: Mutex<HashMap<u64, SessionInfo>>,
    next_session: AtomicU64,
    connections: AtomicUsize,
    /// What each user holds: connections, sessions, rings (reserved when
    /// decided, given back when gone).
    pub budgets: Arc<Budgets>,
    /// [`IDLE_TIMEOUT`] unless `--idle-timeout` says otherwise, in ms.
    pub idle_timeout_ms: AtomicU64,
}

impl crate::retrieve::DaemonState for Shared {
    fn policy(&self) -> (Arc<Policy>, u64) {
        Shared::policy(self)
    }
    fn policy_and_key(&self) -> (Arc<Policy>, u64, Option<Key>) {
        Shared::policy_and_key(self)
    }
    fn budgets(&self) -> &Arc<Budgets> {
        &self.budgets
    }
}

impl Shared {
    /// State for `policy` and its anonymization key.
    pub fn new(policy: Policy, key: Option<Key>) -> Arc<Shared> {
        Arc::new(Shared {
            policy: RwLock::new((Arc::new(policy), 0, key)),
            stopping: AtomicBool::new(false),
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
            connections: AtomicUsize::new(0),
            budgets: Budgets::new(),
            idle_timeout_ms: AtomicU64::new(IDLE_TIMEOUT.as_millis() as u64),
        })
    }

    /// The policy in force and its generation.
    pub fn policy(&self) -> (Arc<Policy>, u64) {
        let g = self.policy.read().unwrap_or_else(|e| e.into_inner());
        (g.0.clone(), g.1)
    }

    /// The policy in force, its generation and its anonymization key.
    pub fn policy_and_key(&self) -> (Arc<Policy>, u64, Option<Key>) {
        let g = self.policy.read().unwrap_or_else(|e| e.into_inner());
        (g.0.clone(), g.1, g.2.clone())
    }

    /// Puts `policy` (and its key) in force; running sessions are held to it
    /// at their next tick.
    pub fn replace_policy(&self, policy: Policy, key: Option<Key>) {
        let mut g = self.policy.write().unwrap_or_else(|e| e.into_inner());
        let generation = g.1 + 1;
        *g = (Arc::new(policy), generation, key);
    }
}

/// The peer's identity, from the kernel: uid and gid (SO_PEERCRED) and
/// supplementary groups (SO_PEERGROUPS), as the peer's process had them
/// when it connected — what file permissions would go by. Not the group
/// database: a process that dropped a group (or was given one) is judged
/// by the groups it has.
pub fn peer_of(conn: &impl AsFd) -> std::io::Result<Peer> {
    let cred = getsockopt(conn, sockopt::PeerCredentials)?;
    let (uid, gid) = (cred.uid(), cred.gid());
    let groups = crate::sys::peer_groups(conn)?;
    Ok(Peer { uid, gid, groups })
}

/// Accepts connections on `listener` until the daemon stops.
pub fn serve(listener: OwnedFd, shared: Arc<Shared>) {
    loop {
        let conn = match transport::accept(&listener) {
            Ok(c) => c,
            Err(e) => {
                if shared.stopping.load(Ordering::Relaxed) {
                    return;
                }
                eprintln!("ringcapd: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.stopping.load(Ordering::Relaxed) {
            return;
        }
        // Who is asking, from the kernel; a peer whose credentials cannot be
        // read is not served.
        let Ok(uid) = getsockopt(&conn, sockopt::PeerCredentials).map(|c| c.uid()) else {
            continue;
        };
        let limit = (uid != 0).then_some(MAX_CONNECTIONS_PER_USER);
        let slot = match shared.budgets.connect(uid, limit) {
            Ok(slot) => slot,
            Err(e) => {
                let _ = send(&conn, &Response::error(e));
                continue;
            }
        };
        if shared.connections.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            shared.connections.fetch_sub(1, Ordering::AcqRel);
            let _ = send(
                &conn,
                &Response::error(format!(
                    "ringcapd serves {MAX_CONNECTIONS} connections at most; try again later"
                )),
            );
            continue;
        }
        // A client that does not read its answers must not hold the
        // connection's thread in a send: it would never again look at its
        // session (a policy reload could not end it, nor could a stop).
        let timeout = nix::sys::time::TimeVal::new(SEND_TIMEOUT.as_secs() as _, 0);
        if let Err(e) = nix::sys::socket::setsockopt(&conn, sockopt::SendTimeout, &timeout) {
            eprintln!("ringcapd: cannot set a send timeout on a connection: {e}");
            shared.connections.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("ringcapd-conn".into())
            .stack_size(CONNECTION_STACK)
            .spawn(move || {
                Connection::new(conn, s.clone()).run();
                s.connections.fetch_sub(1, Ordering::AcqRel);
                // The user's connection slot, given back last.
                drop(slot);
            });
        if let Err(e) = spawned {
            // The closure (and the slot in it) is dropped: the slot is back.
            shared.connections.fetch_sub(1, Ordering::AcqRel);
            eprintln!("ringcapd: cannot start a connection thread: {e}");
        }
    }
}

fn send(conn: &impl AsFd, r: &Response) -> std::io::Result<()> {
    transport::send(conn, &encode_response(r), &[])
}

/// One client connection: at most one session.
struct Connection {
    conn: OwnedFd,
    shared: Arc<Shared>,
    session: Option<Session>,
    /// The session's slot in its user's budget and its pooled ring, given
    /// back (in that order: ring, then slot) once the session is gone.
    held: Option<(SessionSlot, RingLease)>,
    generation: u64,
}

impl Connection {
    fn new(conn: OwnedFd, shared: Arc<Shared>) -> Connection {
        Connection {
            conn,
            shared,
            session: None,
            held: None,
            generation: 0,
        }
    }

    fn run(mut self) {
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
        audit::log("refuse", None, peer.uid, "no grant names this user");
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
    fn tick(&mut self, peer: &Peer) {
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
            self.end("the capture ended (count, duration or failure)", peer);
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
    fn end(&mut self, reason: &str, peer: &Peer) {
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

    fn open(&mut self, request: OpenRequest, peer: &Peer) -> bool {
        let (policy, generation, key) = self.shared.policy_and_key();
        let admitted = match admit(&policy, peer, &request) {
            Ok(a) => a,
            Err(r) => {
                if let Response::Refused { rule, reason, .. } = &r {
                    audit::log(
                        "refuse",
                        None,
                        peer.uid,
                        &format!(
                            "interfaces={:?} filter={:?} rule={rule:?} reason={reason:?}",
                            request.interfaces, request.filter
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
                "interfaces={:?} filter={:?} framework={:?} snap={:?} sample={:?} flows={:?} grant={}",
                effective.interfaces,
                effective.filter,
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
    fn inject(&mut self, frames: Vec<ringcap_proto::InjectFrame>, peer: &Peer) -> Response {
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
            i.submit(frames);
        }
        Response::Ok
    }

    fn set_filter(
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
                    &format!("filter={:?}", s.request.filter),
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

/// True when `conn` has something to read (or was closed) within `timeout`.
fn ready(conn: &impl AsFd, timeout: Duration) -> std::io::Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(conn.as_fd(), PollFlags::POLLIN)];
    let ms =
        PollTimeout::try_from(timeout.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::ZERO);
    match poll(&mut fds, ms) {
        Ok(0) => Ok(false),
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Makes the socket's directory and the socket, replacing a stale socket
/// (only a socket: never another kind of file) and letting every local user
/// connect (the policy decides what they get). Called before any other
/// thread starts (it sets the process's umask for the bind).
pub fn listen(path: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if transport::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("another ringcapd is serving {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket: not touching it",
                    path.display()
                ),
            ))
        }
        Err(_) => {}
    }
    // The mode is set by bind itself (the umask in force while it makes
    // the socket), never by a chmod of the path afterwards: between the two
    // someone able to write the directory could have put a link there, and
    // the chmod would have followed it. The daemon has one thread here.
    use nix::sys::stat::{umask, Mode};
    let old = umask(Mode::from_bits_truncate(0o111));
    let fd = transport::listen(path, 128);
    umask(old);
    fd
}
