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

use crate::budget::Budgets;
use nix::sys::socket::{getsockopt, sockopt};
use ringcap_policy::{Peer, Policy};
use ringcap_privacy::Key;
use ringcap_proto::{encode_response, transport, Response, SessionInfo};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

mod admission;
mod connection;

use connection::Connection;

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

/// Bytes of a Unix socket's path (`sun_path` less its terminating NUL).
const SUN_PATH_MAX: usize = 107;

/// Makes the socket's directory and the socket, replacing a stale socket
/// (only a socket: never another kind of file) and letting every local user
/// connect (the policy decides what they get). Called before any other
/// thread starts (it sets the process's umask for the bind).
pub fn listen(path: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
    if !path.is_absolute() {
        return Err(invalid(format!(
            "the socket {} is not an absolute path",
            path.display()
        )));
    }
    if path.as_os_str().len() > SUN_PATH_MAX {
        return Err(invalid(format!(
            "the socket path {} is {} bytes long; a Unix socket's holds at most {SUN_PATH_MAX}",
            path.display(),
            path.as_os_str().len()
        )));
    }
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
        crate::trust::open_trusted(dir, crate::trust::SOCKET_DIR)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::tests::mode;

    /// A socket directory another user could write is refused before the
    /// socket is made; a relative or too long path is refused before any
    /// directory is made.
    #[test]
    fn the_socket_goes_only_where_no_one_else_can_replace_it() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        let sock = dir.join("d.sock");
        mode(&dir, 0o777);
        let e = listen(&sock).unwrap_err();
        assert!(e.to_string().contains("without the sticky bit"), "{e}");
        assert!(!sock.exists());
        if nix::unistd::geteuid().is_root() {
            mode(&dir, 0o755);
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
            let e = listen(&sock).unwrap_err();
            assert!(e.to_string().contains("owned by uid 65534"), "{e}");
            std::os::unix::fs::chown(&dir, Some(0), None).unwrap();
        }
        mode(&dir, 0o1777);
        drop(listen(&sock).expect("a sticky directory, as /run or /tmp"));
        // A parent others may write: they could rename the directory.
        let inner = dir.join("inner");
        std::fs::create_dir(&inner).unwrap();
        mode(&dir, 0o777);
        let e = listen(&inner.join("d.sock")).unwrap_err();
        assert!(e.to_string().contains("its parent"), "{e}");
        mode(&dir, 0o755);
        drop(listen(&sock).expect("the daemon's own directory"));
        let e = listen(Path::new("rel/d.sock")).unwrap_err();
        assert!(e.to_string().contains("not an absolute path"), "{e}");
        let long = t.path().join("x".repeat(120)).join("d.sock");
        let e = listen(&long).unwrap_err();
        assert!(e.to_string().contains("at most 107"), "{e}");
        assert!(!long.parent().unwrap().exists(), "no directory left behind");
    }
}
