//! Who gets a connection slot before it has shown a certificate.
//!
//! A connection holds one of the server's slots from `accept` on, and
//! before its TLS handshake completes nothing is known of it: one address
//! could open every slot and leave the handshakes idle. So each address may
//! have only a few connections in their handshake at once, an IPv6 address
//! counted with its /64 (one host is given a whole /64 and picks addresses
//! in it freely); and when every slot is taken, the oldest connection still
//! in its handshake gives its slot to the newcomer ([`Handshakes::evict_oldest`]),
//! so idle handshakes from many addresses cannot lock out a client that
//! completes its own in milliseconds. Refusals are logged at most once a
//! second with a count ([`Refusals`]): a flood of refused connections must
//! not become a flood of log lines.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Connections in their TLS handshake: how many per peer (see
/// [`peer_key`]), and each one's task by arrival (to end the oldest).
#[derive(Clone, Default)]
pub struct Handshakes(Arc<Mutex<State>>);

#[derive(Default)]
struct State {
    per_peer: HashMap<IpAddr, usize>,
    /// By arrival; the task's handle once [`Handshakes::register`]ed.
    tasks: BTreeMap<u64, Option<tokio::task::AbortHandle>>,
    next: u64,
}

/// Whose handshakes a connection from `ip` counts among: the address (an
/// IPv4 peer on a dual-stack socket is one address, however written), or
/// for IPv6 its /64.
pub fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & (!0u128 << 64)).into()),
        v4 => v4,
    }
}

/// One connection's place among the handshakes, given back on drop.
pub struct Handshaking {
    all: Handshakes,
    ip: IpAddr,
    id: u64,
}

impl Handshakes {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves a usable map.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a handshake from `ip`, unless its peer ([`peer_key`])
    /// has `per_peer` already.
    pub fn enter(&self, ip: IpAddr, per_peer: usize) -> Option<Handshaking> {
        let ip = peer_key(ip);
        let mut st = self.state();
        let n = st.per_peer.entry(ip).or_insert(0);
        if *n >= per_peer {
            return None;
        }
        *n += 1;
        let id = st.next;
        st.next += 1;
        st.tasks.insert(id, None);
        Some(Handshaking {
            all: self.clone(),
            ip,
            id,
        })
    }

    /// The task doing `h`'s handshake, which [`evict_oldest`](Self::evict_oldest)
    /// may end (nothing if the handshake is over already).
    pub fn register(&self, h: &HandshakeId, task: tokio::task::AbortHandle) {
        if let Some(slot) = self.state().tasks.get_mut(&h.0) {
            *slot = Some(task);
        }
    }

    /// Ends the task of the oldest connection still in its handshake; false
    /// if there is none.
    pub fn evict_oldest(&self) -> bool {
        let mut st = self.state();
        let oldest = st
            .tasks
            .iter()
            .find_map(|(id, t)| t.as_ref().map(|t| (*id, t.clone())));
        match oldest {
            Some((id, task)) => {
                // Its Handshaking goes with the task; the entry goes now, so
                // that the next eviction takes the next one.
                st.tasks.remove(&id);
                task.abort();
                true
            }
            None => false,
        }
    }

    /// Peers with a handshake under way (the map holds no others).
    pub fn peers(&self) -> usize {
        self.state().per_peer.len()
    }
}

/// Names a [`Handshaking`] for [`Handshakes::register`] once the
/// `Handshaking` itself has moved into its task.
pub struct HandshakeId(u64);

impl Handshaking {
    /// This handshake's name.
    pub fn id(&self) -> HandshakeId {
        HandshakeId(self.id)
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        let mut st = self.all.state();
        st.tasks.remove(&self.id);
        if let Some(n) = st.per_peer.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                st.per_peer.remove(&self.ip);
            }
        }
    }
}

/// Refused connections, logged at most once per `every` with a count.
pub struct Refusals {
    every: Duration,
    last_log: Option<Instant>,
    count: u64,
    last: String,
}

impl Refusals {
    /// Nothing refused yet.
    pub fn new(every: Duration) -> Refusals {
        Refusals {
            every,
            last_log: None,
            count: 0,
            last: String::new(),
        }
    }

    /// One refusal; logged now if no line was written for `every`.
    pub fn note(&mut self, why: String, log: &dyn Fn(String)) {
        self.count += 1;
        self.last = why;
        if self.last_log.is_none_or(|t| t.elapsed() >= self.every) {
            self.flush(log);
        }
    }

    /// When the refusals not yet logged are due (none: `None`).
    pub fn due(&self) -> Option<Instant> {
        (self.count > 0).then(|| self.last_log.map_or_else(Instant::now, |t| t + self.every))
    }

    /// Logs the refusals not yet logged.
    pub fn flush(&mut self, log: &dyn Fn(String)) {
        if self.count == 0 {
            return;
        }
        log(match self.count {
            1 => format!("connection refused: {}", self.last),
            n => format!("{n} connections refused (the last: {})", self.last),
        });
        self.count = 0;
        self.last_log = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as M;

    #[test]
    fn a_few_handshakes_per_address() {
        let h = Handshakes::default();
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let b: IpAddr = "::ffff:198.18.0.2".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| h.enter(a, 3).unwrap()).collect();
        assert!(h.enter(a, 3).is_none());
        assert!(h.enter("::ffff:198.18.0.1".parse().unwrap(), 3).is_none());
        let other = h.enter(b, 3).unwrap();
        assert_eq!(h.peers(), 2);
        drop(held);
        assert!(h.enter(a, 3).is_some());
        drop(other);
        assert_eq!(h.peers(), 0);
    }

    /// Addresses of one IPv6 /64 are one peer.
    #[test]
    fn a_slash_64_is_one_peer() {
        let h = Handshakes::default();
        let in_64 = |i: u16| -> IpAddr { format!("2001:db8:1:2::{i:x}").parse().unwrap() };
        let _held: Vec<_> = (1..=3).map(|i| h.enter(in_64(i), 3).unwrap()).collect();
        assert!(
            h.enter(in_64(99), 3).is_none(),
            "another address of the /64"
        );
        let next_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(h.enter(next_64, 3).is_some());
        assert_eq!(
            peer_key("::ffff:198.18.0.9".parse().unwrap()),
            IpAddr::from([198, 18, 0, 9])
        );
    }

    /// The oldest registered handshake's task is ended first; a handshake
    /// over (dropped) is never ended.
    #[test]
    fn the_oldest_handshake_is_evicted() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let h = Handshakes::default();
            let mut tasks = Vec::new();
            for i in 0..3u8 {
                let hs = h.enter(IpAddr::from([198, 18, 0, i]), 8).unwrap();
                let id = hs.id();
                let t = tokio::spawn(async move {
                    let _hs = hs;
                    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                });
                h.register(&id, t.abort_handle());
                tasks.push(t);
            }
            assert!(h.evict_oldest());
            let first = tasks.remove(0);
            assert!(first.await.unwrap_err().is_cancelled());
            assert_eq!(h.peers(), 2, "the evicted handshake gave its place back");
            assert!(!tasks[0].is_finished() && !tasks[1].is_finished());
            assert!(h.evict_oldest() && h.evict_oldest());
            assert!(!h.evict_oldest(), "none left");
        });
    }

    #[test]
    fn refusals_logged_once_a_second_with_a_count() {
        let lines = M::new(Vec::new());
        let log = |l: String| lines.lock().unwrap().push(l);
        let mut r = Refusals::new(Duration::from_millis(300));
        for i in 0..100 {
            r.note(format!("peer {i}"), &log);
        }
        assert_eq!(lines.lock().unwrap().len(), 1);
        assert!(r.due().is_some());
        std::thread::sleep(Duration::from_millis(300));
        r.note("peer 100".into(), &log);
        let l = lines.lock().unwrap().clone();
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(l[1], "100 connections refused (the last: peer 100)");
        assert!(r.due().is_none());
    }
}
