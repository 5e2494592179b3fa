//! Retrieval of stored packets under policy: an unprivileged client asks
//! for the packets of an interface in a time window that root's `ringcap
//! capture` stored (the policy's `[[store]]` for that interface) and gets
//! what its grant would have given it live.
//!
//! - **One admission point.** The request goes through
//!   [`ringcap_policy::decide_retrieve`], which calls
//!   [`ringcap_policy::decide`] with the same filter and snap as a
//!   one-interface `Open` and returns its [`Decision`] with the retrieval's
//!   window and bounds. Everything enforced below is read from those two:
//!   the framework program ANDed with the client's, run on the views a live
//!   session's are run on (outer VLAN tag taken out unless a program tests
//!   `vlan`), the `exclude` rule at every layer, the snap cap, masks and
//!   anonymization. A policy reload during a retrieval decides again; a
//!   retrieval the new policy does not allow as it was is cut.
//! - **No client text reaches a C parser here.** The client compiles its
//!   filter (as for `Open`); the daemon checks the program. The text is only
//!   given to the index planner ([`ringcap_index::plan`], Rust, bounded in
//!   length, depth and terms, property-tested), which picks the groups of
//!   records to read: if text and program disagree, the client can only get
//!   fewer packets, never one the decision's program refuses.
//! - **What comes back about a packet depends on that packet only.** The
//!   index picks groups of records by the keys of all their packets, hidden
//!   ones included, so each packet read is also held to the plan by its own
//!   keys ([`ringcap_index::packet_may_match`]); otherwise a client sending
//!   the text `host H` with an accept-all program would get exactly the
//!   visible packets that share a group with hidden host H's. Whether the
//!   index is used at all is the decision's (`Retrieval::use_index`): the
//!   time a retrieval takes still depends on which groups hold hidden
//!   packets, so by default only grants that hide no packet use it.
//! - **Bounded.** The window is checked against the grant's `max_window`
//!   before anything is read; the answer stops before the record that would
//!   take it past `max_bytes` (whole records, then `Retrieved` says why it
//!   was cut); `max_time` bounds the whole retrieval; the user's concurrent
//!   retrievals are counted in [`crate::budget`]. All of it is audit-logged.
//!
//! # Delivery: a pcap stream on a pipe
//!
//! The answer goes to the client as the read end of a pipe
//! (`Response::Retrieving` carries it), not through a session's shared
//! ring: a retrieval is a finite, ordered answer that must arrive whole (the
//! ring drops for a slow reader, which a live capture must do and an answer
//! must not), a pipe gives back-pressure for free (the daemon waits while
//! the client reads), the kernel bounds what is in flight to the pipe's
//! buffer, and the end of the answer is the pipe's end of file, so a client
//! can hand the descriptor straight to `tcpdump -r -`. The daemon writes
//! without blocking and waits in `poll` on the pipe and the control socket
//! together, so a client that closes either, or stops reading past
//! `max_time`, ends the retrieval at once: its files, its pipe and its
//! budget slot are freed when [`serve`] returns.
//!
//! # Where the files are
//!
//! The store's directory must be a real directory (no symbolic link on its
//! path: its canonical path is the configured one) owned by root or the
//! daemon's user and writable by no one else, so no user can plant a file
//! or a link in it; entries that are symbolic links are not read. Its
//! parents likewise (or sticky, as /tmp), so that no user can put another
//! directory in its place while a retrieval runs.

use crate::audit;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use ringcap_format::read::Interface;
use ringcap_index::keys::Key;
use ringcap_index::{
    packet_may_match, plan, run_with, Expr, OutFormat, Output, Query, QueryError, Taker, Window,
};
use ringcap_policy::{decide_retrieve, Decision, Peer, Retrieval, RetrieveRequest};
use ringcap_proto::{encode_response, transport, Effective, Response, SnapRequest};
use ringcap_stages::transform::{apply_all, Transform};
use ringcap_stages::Snap;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a retrieval needs of the daemon's shared state (the server's
/// `Shared` implements it): the policy in force with its generation (and
/// the anonymization key it names), and the users' budgets. A trait, so
/// that this module does not import the server that calls it.
pub trait DaemonState {
    /// The policy in force and its generation.
    fn policy(&self) -> (Arc<ringcap_policy::Policy>, u64);
    /// The same, with its anonymization key.
    fn policy_and_key(
        &self,
    ) -> (
        Arc<ringcap_policy::Policy>,
        u64,
        Option<ringcap_privacy::Key>,
    );
    /// What each user holds.
    fn budgets(&self) -> &Arc<crate::budget::Budgets>;
}

/// LINKTYPE_ETHERNET: the link type stores are served for (the grant's
/// programs are compiled for it).
const ETHERNET: u32 = 1;
/// The daemon's write buffer in front of the pipe.
const WRITE_BUFFER: usize = 64 << 10;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

/// Why a retrieval stopped early, other than a file error.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    /// The client closed its connection or the pipe.
    Gone,
    /// Something the client is told (`Retrieved.cut`).
    Cut(String),
}

/// Checks that `dir` is a store the daemon may read for others: see the
/// module docs ([`crate::trust`]'s rule).
pub fn check_store(dir: &Path) -> Result<(), String> {
    crate::trust::open_trusted(dir, crate::trust::STORE)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// What the client is told of a decision.
fn effective(d: &Decision, interface: &str, filter: &str) -> Effective {
    Effective {
        interfaces: vec![interface.to_string()],
        filter: filter.to_string(),
        framework_filter: d.framework_text.clone(),
        snaplen: match d.snap {
            Snap::Bytes(n) => SnapRequest::Bytes(n),
            Snap::Headers { max } => SnapRequest::Headers { max },
        },
        sample: None,
        hide: d.hide.iter().map(|f| f.name().to_string()).collect(),
        anonymize: d.anonymize,
        max_packets_per_second: None,
        max_bits_per_second: None,
        max_duration_s: None,
        grant: d.grant as u32,
        compress: false,
        compress_format: None,
        flows: None,
    }
}

/// The pipe to the client, written without blocking; waits in `poll` on
/// the pipe and the control socket, so that a client gone or a deadline
/// passed ends a write that cannot proceed.
struct PipeOut {
    pipe: OwnedFd,
    conn: OwnedFd,
    deadline: Instant,
    stop: Option<Stop>,
}

impl PipeOut {
    /// Looks at the control socket (and the deadline) without waiting.
    fn check(&mut self) -> Result<(), Stop> {
        if let Some(s) = &self.stop {
            return Err(s.clone());
        }
        if Instant::now() >= self.deadline {
            return Err(self.stopped(Stop::Cut(
                "the retrieval took longer than the grant's retrieve.max_time".into(),
            )));
        }
        let mut fds = [PollFd::new(self.conn.as_fd(), PollFlags::POLLIN)];
        if matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0) {
            return Err(self.stopped(Stop::Gone));
        }
        Ok(())
    }

    fn stopped(&mut self, s: Stop) -> Stop {
        self.stop = Some(s.clone());
        s
    }
}

impl Write for PipeOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            if let Some(s) = &self.stop {
                return Err(io::Error::other(format!("{s:?}")));
            }
            match nix::unistd::write(&self.pipe, buf) {
                Ok(n) => return Ok(n),
                Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EPIPE) => {
                    self.stopped(Stop::Gone);
                    return Err(io::ErrorKind::BrokenPipe.into());
                }
                Err(e) => return Err(e.into()),
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.check()
                    .map_err(|s| io::Error::other(format!("{s:?}")))?;
            }
            let wait = left.min(Duration::from_millis(200));
            let mut fds = [
                PollFd::new(self.pipe.as_fd(), PollFlags::POLLOUT),
                PollFd::new(self.conn.as_fd(), PollFlags::POLLIN),
            ];
            let ms = PollTimeout::try_from(wait.as_millis() as i32).unwrap_or(PollTimeout::ZERO);
            match poll(&mut fds, ms) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            let bad = PollFlags::POLLERR | PollFlags::POLLHUP;
            let pipe_gone = fds[0].revents().is_some_and(|r| r.intersects(bad));
            let conn_ready = fds[1].revents().is_some_and(|r| !r.is_empty());
            if pipe_gone || conn_ready {
                self.stopped(Stop::Gone);
                return Err(io::ErrorKind::BrokenPipe.into());
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The retrieval's taker: each stored packet held to the decision as the
/// hub holds a live one.
struct Granted<'a> {
    decision: Decision,
    transforms: Vec<Box<dyn Transform>>,
    out: Output,
    /// The deadline, the client and the policy, checked before each file
    /// and every [`ringcap_index::TICK`] records read (the pipe, inside
    /// `out`'s buffer, is also checked between writes).
    check: Box<dyn FnMut() -> Result<(), Stop> + 'a>,
    /// The store's interface: the only one whose packets are served.
    interface: String,
    /// The client's text as the index planned it: each packet is held to
    /// it by its own keys.
    plan: Expr,
    keys: Vec<Key>,
    untagged: Vec<u8>,
    scratch: Vec<u8>,
}

impl Taker for Granted<'_> {
    fn tick(&mut self) -> Result<(), QueryError> {
        (self.check)().map_err(|_| QueryError::Stopped)
    }

    /// The packets of the store's interface only: a pcapng file in the
    /// store may hold other interfaces (a capture of several), whose
    /// packets the grant does not cover. An interface without a name is
    /// taken for the store's only if it is the file's first (pcap files,
    /// pcapng writers that leave `if_name` out); default deny otherwise.
    fn admits(&mut self, i: usize, iface: &Interface) -> bool {
        match &iface.name {
            Some(name) => *name == self.interface,
            None => i == 0,
        }
    }

    fn packet(&mut self, lt: u32, ts: u64, wire: u32, data: &[u8]) -> Result<bool, QueryError> {
        if lt != ETHERNET {
            return Err(QueryError::Filter(format!(
                "a stored file holds packets of link type {lt}; ringcapd serves Ethernet stores only"
            )));
        }
        if !packet_may_match(&self.plan, lt, data, &mut self.keys) {
            return Ok(false);
        }
        // The kernel's view: the outer VLAN tag taken out, as live.
        let tagged =
            data.len() >= 18 && matches!(u16::from_be_bytes([data[12], data[13]]), 0x8100 | 0x88a8);
        let (kernel, tag_view, kernel_wire) = if tagged {
            self.untagged.clear();
            self.untagged.extend_from_slice(&data[..12]);
            self.untagged.extend_from_slice(&data[16..]);
            (&self.untagged[..], Some(data), wire.saturating_sub(4))
        } else {
            (data, None, wire)
        };
        if self.decision.filter.run(kernel, tag_view, kernel_wire) == 0 {
            return Ok(false);
        }
        let caplen = self
            .decision
            .snap
            .keep_len(kernel, if tagged { 4 } else { 0 })
            .min(data.len());
        self.scratch.clear();
        self.scratch.extend_from_slice(&data[..caplen]);
        apply_all(&mut self.transforms, ETHERNET, &mut self.scratch, wire);
        // With hidden fields the client's program judges the packet as
        // delivered (the filter above was the framework's alone).
        if !self.decision.filter.client_accepts_delivered(
            &self.scratch,
            tagged,
            wire,
            &mut self.untagged,
        ) {
            return Ok(false);
        }
        self.out
            .packet(ETHERNET, ts, wire, &self.scratch)
            .map_err(QueryError::Output)?;
        Ok(true)
    }
}

/// The files of a store, in name order (hidden and non-regular entries,
/// symbolic links among them, are not read).
fn store_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    ringcap_index::dir::capture_files(&[dir.to_path_buf()], &mut |_| {})
}

/// Serves one `Retrieve` on `conn` (a connection without a session): true
/// if the connection stays open.
pub fn serve(conn: &OwnedFd, shared: &dyn DaemonState, peer: &Peer, req: RetrieveRequest) -> bool {
    let send = |r: &Response| transport::send(conn, &encode_response(r), &[]).is_ok();
    let (policy, generation, key) = shared.policy_and_key();
    let now = now_ns();
    let (decision, retrieval) = match decide_retrieve(&policy, peer, &req, now) {
        Ok(d) => d,
        Err(r) => {
            audit::refused(
                peer.uid,
                &format!(
                    "retrieve interface={:?} filter={} after={:?} before={:?} rule={:?} reason={}",
                    req.interface,
                    audit::text(&req.filter),
                    req.after_ns,
                    req.before_ns,
                    r.rule,
                    audit::text(&r.reason)
                ),
            );
            return send(&Response::Refused {
                grant: r.grant.map(|g| g as u32),
                rule: r.rule.to_string(),
                reason: r.reason,
            });
        }
    };
    let refuse = |rule: &str, reason: String| {
        audit::refused(
            peer.uid,
            &format!(
                "retrieve interface={:?} rule={rule:?} reason={reason:?}",
                req.interface
            ),
        );
        send(&Response::Refused {
            grant: Some(decision.grant as u32),
            rule: rule.into(),
            reason,
        })
    };
    let slot = match shared
        .budgets()
        .reserve_query(peer.uid, retrieval.max_queries as usize)
    {
        Ok(s) => s,
        Err(reason) => return refuse("retrieve.max_queries", reason),
    };
    if let Err(reason) = check_store(&retrieval.dir) {
        return refuse("store", reason);
    }
    let files = match store_files(&retrieval.dir) {
        Ok(f) => f,
        Err(reason) => return refuse("store", reason),
    };
    let transforms = match crate::session::privacy_of(&decision, key.as_ref()) {
        Ok(t) => t.iter().map(|f| f()).collect::<Vec<_>>(),
        Err(e) => return send(&Response::error(e)),
    };
    let (rd, wr) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return send(&Response::error(format!("cannot make a pipe: {e}"))),
    };
    let nonblock = nix::fcntl::fcntl(
        &wr,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let dup = conn.try_clone();
    let (Ok(_), Ok(conn2)) = (nonblock, dup) else {
        return send(&Response::error("cannot set up the answer's pipe"));
    };
    let reply = Response::Retrieving {
        effective: effective(&decision, &req.interface, &req.filter),
        after_ns: retrieval.after_ns,
        before_ns: retrieval.before_ns,
        max_bytes: retrieval.max_bytes,
    };
    if transport::send(conn, &encode_response(&reply), &[rd.as_fd()]).is_err() {
        return false;
    }
    drop(rd);
    audit::log(
        "retrieve",
        None,
        peer.uid,
        &format!(
            "interface={:?} store={:?} after_ns={} before_ns={} filter={} framework={:?} snap={:?} max_bytes={} grant={}",
            req.interface,
            retrieval.dir,
            retrieval.after_ns,
            retrieval.before_ns,
            audit::text(&req.filter),
            decision.framework_text,
            decision.snap,
            retrieval.max_bytes,
            decision.grant + 1
        ),
    );
    let (outcome, stats) = run(
        shared, peer, &req, decision, &retrieval, generation, transforms, files, wr, conn2,
    );
    let (packets, bytes, nfiles) = stats;
    let (cut, keep) = match outcome {
        Ok(()) => (None, true),
        Err(Stop::Gone) => (Some("the client went away".to_string()), false),
        Err(Stop::Cut(why)) => (Some(why), true),
    };
    audit::log(
        "retrieve-end",
        None,
        peer.uid,
        &format!(
            "interface={:?} packets={packets} bytes={bytes} files={nfiles} result={:?}",
            req.interface,
            cut.as_deref().unwrap_or("complete")
        ),
    );
    drop(slot);
    if !keep {
        return false;
    }
    send(&Response::Retrieved {
        packets,
        bytes,
        files: nfiles,
        cut: cut.map(|c| ringcap_proto::validate::clamp_text(&c)),
    })
}

/// Runs the query; the pipe is closed (end of the answer) when it returns.
#[allow(clippy::too_many_arguments)]
fn run(
    shared: &dyn DaemonState,
    peer: &Peer,
    req: &RetrieveRequest,
    decision: Decision,
    retrieval: &Retrieval,
    generation: u64,
    transforms: Vec<Box<dyn Transform>>,
    files: Vec<PathBuf>,
    pipe: OwnedFd,
    conn: OwnedFd,
) -> (Result<(), Stop>, (u64, u64, u64)) {
    let deadline = Instant::now() + retrieval.max_time;
    let pipe_out = PipeOut {
        pipe,
        conn,
        deadline,
        stop: None,
    };
    // The pipe is shared by the output's buffer (writes) and the checks.
    let shared_out = Arc::new(std::sync::Mutex::new(pipe_out));
    let w = SharedWrite(shared_out.clone());
    let snaplen = decision.snap.snaplen();
    let mut out = Output::new(
        Box::new(io::BufWriter::with_capacity(WRITE_BUFFER, w)),
        OutFormat::Pcap,
    )
    .with_snaplen(snaplen);
    out.limit(None, Some(retrieval.max_bytes));
    let check_out = shared_out.clone();
    let same = decision.clone();
    let check = move || -> Result<(), Stop> {
        check_out
            .lock()
            .map_err(|_| Stop::Gone)
            .and_then(|mut p| p.check())?;
        // A reload: decided again; a retrieval no longer allowed as it was
        // is cut.
        let (policy, g) = shared.policy();
        if g != generation {
            let allowed =
                decide_retrieve(&policy, peer, req, now_ns()).is_ok_and(|(d, _)| d.same_as(&same));
            if !allowed {
                let cut = Stop::Cut(
                    "the policy was reloaded and no longer allows this retrieval as it was".into(),
                );
                if let Ok(mut p) = check_out.lock() {
                    p.stop = Some(cut.clone());
                }
                return Err(cut);
            }
        }
        Ok(())
    };
    let plan = if retrieval.use_index {
        plan(&req.filter)
    } else {
        Expr::All
    };
    let mut taker = Granted {
        decision,
        transforms,
        out,
        check: Box::new(check),
        interface: req.interface.clone(),
        plan: plan.clone(),
        keys: Vec::new(),
        untagged: Vec::new(),
        scratch: Vec::new(),
    };
    let q = Query {
        filter: &req.filter,
        plan,
        window: Window {
            after: Some(retrieval.after_ns),
            before: Some(retrieval.before_ns),
        },
        use_index: retrieval.use_index,
        stop: None,
        // One thread a retrieval: reading threads would be threads and up
        // to 48 MiB more that a local user could make the daemon hold.
        readers: 0,
    };
    let result = run_with(&q, &files, &mut taker, &mut |_| {});
    let nfiles = result.as_ref().map_or(0, |s| s.files);
    let stopped = shared_out.lock().ok().and_then(|p| p.stop.clone());
    let outcome = match (result, stopped) {
        (_, Some(s)) => Err(s),
        // Files read in part: the answer is complete up to their damage.
        // Their paths are the store's, not said to the client.
        (Ok(st), None) if !st.damaged.is_empty() => Err(Stop::Cut(format!(
            "{} stored file(s) end in damage (a torn last record, say) and were read up to it; \
             the rest of the answer is whole (`ringcap repair` on the sensor cuts them)",
            st.damaged.len()
        ))),
        (Ok(_), None) => Ok(()),
        (Err(QueryError::Output(e)), None)
            if e.to_string() == ringcap_index::out::LIMIT_REACHED =>
        {
            Err(Stop::Cut(format!(
                "the answer reached max_bytes ({} bytes, the smaller of the request's and the grant's \
                 retrieve.max_bytes): it holds the first packets in time order; narrow the window or the filter",
                retrieval.max_bytes
            )))
        }
        (Err(QueryError::Stopped), None) => Err(Stop::Cut("stopped".into())),
        (Err(e), None) => Err(Stop::Cut(e.to_string())),
    };
    let finished = if matches!(outcome, Err(Stop::Gone)) {
        Ok(())
    } else {
        taker.out.finish(ETHERNET)
    };
    let (packets, bytes) = (taker.out.packets, taker.out.bytes);
    let outcome = match (outcome, finished) {
        (Ok(()), Err(_)) => Err(Stop::Gone),
        (o, _) => o,
    };
    (outcome, (packets, bytes, nfiles))
}

/// A `Write` over the shared [`PipeOut`].
struct SharedWrite(Arc<std::sync::Mutex<PipeOut>>);

impl Write for SharedWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("poisoned"))?
            .write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
