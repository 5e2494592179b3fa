//! Who gets a connection slot before it has shown a certificate.
//!
//! A connection holds one of the server's slots from `accept` on, and
//! before its TLS handshake completes nothing is known of it: one address
//! could open every slot and leave the handshakes idle. So each address may
//! have only a few connections in their handshake at once
//! ([`Handshakes`]), and refusals are logged at most once a second with a
//! count ([`Refusals`]): a flood of refused connections must not become a
//! flood of log lines.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Connections in their TLS handshake, per peer address.
#[derive(Clone, Default)]
pub struct Handshakes(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection's place among its address's handshakes, given back on drop.
pub struct Handshaking {
    all: Handshakes,
    ip: IpAddr,
}

impl Handshakes {
    fn map(&self) -> MutexGuard<'_, HashMap<IpAddr, usize>> {
        // A panic elsewhere while holding the lock leaves a usable map.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a handshake from `ip`, unless it has `max` already.
    pub fn enter(&self, ip: IpAddr, max: usize) -> Option<Handshaking> {
        // An IPv4 peer on a dual-stack socket is one address, however written.
        let ip = ip.to_canonical();
        let mut m = self.map();
        let n = m.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Handshaking {
            all: self.clone(),
            ip,
        })
    }

    /// Addresses with a handshake under way (the map holds no others).
    pub fn peers(&self) -> usize {
        self.map().len()
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        let mut m = self.all.map();
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
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
