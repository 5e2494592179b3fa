//! An optional Prometheus text endpoint (`--metrics 127.0.0.1:PORT`):
//! sessions' counters, labelled with their session number, uid and
//! interfaces, for a local scraper. Loopback only (the daemon has no network
//! listener for clients, and this one refuses any other address); read-only;
//! the request itself is ignored. Each connection is served on a thread of
//! its own, at most [`PER_USER`] at once for a user other than root and
//! [`OTHERS`] for all of them (root's always), so no user's idle
//! connections hold up another's scrape.
//!
//! **Each caller sees what `Sessions` would show it**: root every session,
//! any other user only their own, and a caller the daemon cannot identify
//! nothing but an empty page. The identity comes from the kernel: the
//! owner uid of the connecting TCP socket, looked up with `NETLINK_SOCK_DIAG`
//! (`inet_diag`, an exact lookup of the client's socket by its four-tuple,
//! which on loopback lives in the daemon's own network namespace). Chosen
//! over the alternatives because scrapers speak TCP (a Unix socket with
//! SO_PEERCRED would need a proxy in front of every Prometheus) and because
//! aggregate-only pages would leave root without per-session counters. The
//! socket's owner is the uid that created it, which a process cannot
//! choose; a socket passed to another process keeps its creator's uid, as
//! a file descriptor keeps its rights.

use crate::server::Shared;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections one user other than root may have served at once: each gets
/// a thread of its own, so a user's idle connections hold only that user's
/// threads (hostile review qa-d26 #6: one thread served connections in turn,
/// waiting up to 2 s for each request, and 30 idle connections of `nobody`
/// made root's scrape time out).
pub const PER_USER: usize = 4;
/// Connections of users other than root served at once, in all.
pub const OTHERS: usize = 64;

/// Connections being served, by the caller's uid (`u32::MAX`: not known).
#[derive(Default)]
struct Serving(Mutex<HashMap<u32, usize>>);

impl Serving {
    /// Counts a connection of `uid` in, if it is within the bounds.
    fn enter(&self, uid: u32) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if uid != 0 {
            let others: usize = m.iter().filter(|(u, _)| **u != 0).map(|(_, n)| n).sum();
            if others >= OTHERS || m.get(&uid).copied().unwrap_or(0) >= PER_USER {
                return false;
            }
        }
        *m.entry(uid).or_insert(0) += 1;
        true
    }

    fn leave(&self, uid: u32) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&uid);
            }
        }
    }
}

/// Listens on `addr` (a loopback address) and serves until the daemon stops.
pub fn start(addr: SocketAddr, shared: Arc<Shared>) -> Result<(), String> {
    if !addr.ip().is_loopback() {
        return Err(format!(
            "--metrics {addr}: only a loopback address (127.0.0.1 or ::1) is served"
        ));
    }
    let listener = TcpListener::bind(addr).map_err(|e| format!("--metrics {addr}: {e}"))?;
    let serving = Arc::new(Serving::default());
    std::thread::Builder::new()
        .name("ringcapd-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if shared.stopping.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                // Who it is, from the kernel, before anything is read.
                let viewer = conn
                    .peer_addr()
                    .and_then(|peer| Ok((peer, conn.local_addr()?)))
                    .ok()
                    .and_then(|(peer, local)| socket_owner(peer, local).ok());
                let uid = viewer.unwrap_or(u32::MAX);
                // Over its bounds: closed at once, unanswered.
                if !serving.enter(uid) {
                    continue;
                }
                let (shared, done) = (shared.clone(), serving.clone());
                let spawned = std::thread::Builder::new()
                    .name("ringcapd-scrape".into())
                    .spawn(move || {
                        serve(conn, &shared, viewer);
                        done.leave(uid);
                    });
                if spawned.is_err() {
                    serving.leave(uid);
                }
            }
        })
        .map_err(|e| format!("starting the metrics thread: {e}"))?;
    Ok(())
}

/// Answers one connection with the page `viewer` may see.
fn serve(mut conn: TcpStream, shared: &Shared, viewer: Option<u32>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
    // The request is read (bounded) and ignored.
    let mut buf = [0u8; 2048];
    let _ = conn.read(&mut buf);
    let body = page(shared, viewer);
    let _ = write!(
        conn,
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
}

/// Label values escaped as the text format wants.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The uid owning the TCP socket at `peer` connected to `local` (both in
/// this network namespace), from the kernel (`NETLINK_SOCK_DIAG`).
pub fn socket_owner(peer: SocketAddr, local: SocketAddr) -> std::io::Result<u32> {
    use nix::sys::socket::{
        recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
        SockType,
    };
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?;
    let timeout = nix::sys::time::TimeVal::new(1, 0);
    nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &timeout)?;
    // struct nlmsghdr + struct inet_diag_req_v2 (linux/inet_diag.h).
    let mut req = Vec::with_capacity(72);
    req.extend_from_slice(&72u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    req.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    let family = if peer.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    req.extend_from_slice(&[family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // any state
                                                    // The client's socket: its source is the peer, its destination us.
    req.extend_from_slice(&peer.port().to_be_bytes());
    req.extend_from_slice(&local.port().to_be_bytes());
    for a in [peer, local] {
        let mut addr = [0u8; 16];
        match a {
            SocketAddr::V4(v4) => addr[..4].copy_from_slice(&v4.ip().octets()),
            SocketAddr::V6(v6) => addr.copy_from_slice(&v6.ip().octets()),
        }
        req.extend_from_slice(&addr);
    }
    req.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    req.extend_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    debug_assert_eq!(req.len(), 72);
    sendto(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    let mut buf = [0u8; 1024];
    let n = recv(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &mut buf,
        MsgFlags::empty(),
    )?;
    let field = |off: usize, len: usize| buf.get(off..off + len).filter(|_| off + len <= n);
    let kind = field(4, 2)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .ok_or_else(|| std::io::Error::other("short sock_diag answer"))?;
    if kind == NLMSG_ERROR {
        let errno = field(16, 4)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0);
        return Err(std::io::Error::from_raw_os_error(-errno));
    }
    if kind != SOCK_DIAG_BY_FAMILY {
        return Err(std::io::Error::other(format!(
            "sock_diag answered message type {kind}"
        )));
    }
    // struct inet_diag_msg: 4 bytes, the 48-byte socket id, expires,
    // rqueue, wqueue, then uid.
    field(16 + 4 + 48 + 12, 4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| std::io::Error::other("short inet_diag_msg"))
}

/// The page `viewer` may see (None: a caller that could not be
/// identified): one gauge family per counter, a sample per session it may
/// see — every session for root, its own for anyone else, as `Sessions`.
pub fn page(shared: &Shared, viewer: Option<u32>) -> String {
    let mut sessions: Vec<_> = shared
        .sessions
        .lock()
        .map(|m| {
            m.values()
                .filter(|s| viewer.is_some_and(|v| v == 0 || v == s.uid))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    sessions.sort_by_key(|s: &ringcap_proto::SessionInfo| s.session);
    let mut out = String::new();
    if viewer.is_none() {
        let _ = writeln!(
            out,
            "# the caller's uid could not be read from the kernel: no sessions shown"
        );
    }
    let _ = writeln!(
        out,
        "# HELP ringcapd_sessions Sessions running now that the caller may see."
    );
    let _ = writeln!(out, "# TYPE ringcapd_sessions gauge");
    let _ = writeln!(out, "ringcapd_sessions {}", sessions.len());
    type Get = fn(&ringcap_proto::SessionCounters) -> u64;
    let families: [(&str, &str, Get); 8] = [
        (
            "packets_seen_by_interface",
            "Packets the interface counted since the session began.",
            |c| c.packets_seen_by_interface,
        ),
        (
            "packets_filter_accepted",
            "Packets the session's filters accepted.",
            |c| c.packets_filter_accepted,
        ),
        (
            "packets_sampled_out",
            "Packets left out by sampling.",
            |c| c.packets_sampled_out,
        ),
        (
            "packets_rate_limited",
            "Packets refused by the session's rate limits.",
            |c| c.packets_rate_limited,
        ),
        (
            "packets_dropped_ring",
            "Packets the shared kernel ring lost.",
            |c| c.packets_dropped_ring,
        ),
        (
            "packets_dropped_client",
            "Packets dropped because the client's ring was full.",
            |c| c.packets_dropped_client,
        ),
        ("packets_delivered", "Packets handed to the client.", |c| {
            c.packets_delivered
        }),
        ("bytes_delivered", "Bytes handed to the client.", |c| {
            c.bytes_delivered
        }),
    ];
    // What each user holds in the daemon's budgets (connections, sessions,
    // pooled rings): back to the idle values when a user's tools have exited.
    let holders: Vec<_> = shared
        .budgets
        .holders()
        .into_iter()
        .filter(|&(uid, _)| viewer.is_some_and(|v| v == 0 || v == uid))
        .collect();
    type Held = fn(&crate::budget::Usage) -> u64;
    let held: [(&str, &str, Held); 4] = [
        ("connections", "Connections the user holds.", |u| {
            u.connections as u64
        }),
        ("sessions", "Sessions reserved or running.", |u| {
            u.sessions as u64
        }),
        (
            "rings",
            "Shared-memory rings made for the user (in use or pooled).",
            |u| u.rings as u64,
        ),
        ("ring_bytes", "Their data bytes.", |u| u.ring_bytes),
    ];
    for (name, help, get) in held {
        let _ = writeln!(out, "# HELP ringcapd_user_{name} {help}");
        let _ = writeln!(out, "# TYPE ringcapd_user_{name} gauge");
        for (uid, usage) in &holders {
            let _ = writeln!(out, "ringcapd_user_{name}{{uid=\"{uid}\"}} {}", get(usage));
        }
    }
    for (name, help, get) in families {
        let _ = writeln!(out, "# HELP ringcapd_session_{name}_total {help}");
        let _ = writeln!(out, "# TYPE ringcapd_session_{name}_total counter");
        for s in &sessions {
            let _ = writeln!(
                out,
                "ringcapd_session_{name}_total{{session=\"{}\",uid=\"{}\",interfaces=\"{}\"}} {}",
                s.session,
                s.uid,
                label(&s.interfaces.join(",")),
                get(&s.counters)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_names_a_loopback_callers_uid() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let uid = socket_owner(peer, s.local_addr().unwrap()).unwrap();
        assert_eq!(uid, nix::unistd::geteuid().as_raw());
        // A four-tuple no socket has: not found, never a guess.
        let mut gone = peer;
        gone.set_port(peer.port().wrapping_add(1));
        assert!(socket_owner(gone, s.local_addr().unwrap()).is_err());
    }
}
