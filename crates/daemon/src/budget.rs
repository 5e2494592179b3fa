//! What one user can make the daemon (and the kernel) hold, counted and
//! bounded in one place: connections, sessions and shared-memory rings.
//!
//! - **Connections and sessions are reserved, not counted after the fact.**
//!   [`Budgets::connect`] and [`Budgets::reserve_session`] check and take a
//!   slot under one lock, at the moment of the decision, and hand back a
//!   guard that gives the slot back when it is dropped — when the
//!   connection or session is gone, whatever path it took. (Counting the
//!   session list before a session started and adding to it after the reply
//!   let 48 simultaneous opens through a limit of 16.)
//! - **Rings are pooled per user.** A ring's descriptors go to the client,
//!   and the daemon can never know when the client has closed (or unmapped)
//!   them: a ring freed at the end of a session can stay pinned by the
//!   client, so freeing and making a new one per session let a client that
//!   keeps descriptors multiply memory (48 open/close cycles held 768 MiB
//!   while the daemon listed no session). So a ring, once made, belongs to
//!   its user for the daemon's lifetime: when a session ends its ring goes
//!   back to that user's pool and serves the user's next session
//!   ([`ringcap_shm::RingWriter::recycle`]). Old descriptors a client kept
//!   then see only that same user's later data. New rings are made only
//!   while the user's rings stay within `sessions limit × the grant's ring
//!   size`, so what a user can pin is bounded by its grant however many
//!   sessions it opens and closes. The cost: a user's rings stay allocated
//!   after its last session (the daemon cannot prove them unpinned).
//!   Dump and inject-only sessions take the smallest ring.
//! - **Flow tables are reserved like sessions** ([`Budgets::reserve_flows`]):
//!   a session's flow tables (all of them, one per interface) are sized
//!   when decided and their flows reserved against the grant's `max_flows`
//!   for the user, all sessions together; the guard is held by the tables'
//!   sinks, so the flows are given back only once the last table is dropped
//!   (`crate::flows`).
//! - **Retrievals of stored packets are counted per user** like sessions
//!   ([`Budgets::reserve_query`]): a slot taken when the retrieval is
//!   decided, given back when it has ended however it ended (the grant's
//!   `max_queries`, at most `ringcap_policy::retrieve::MAX_QUERIES`).

use ringcap_shm::RingWriter;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Per-user accounting shared by every connection.
#[derive(Default)]
pub struct Budgets {
    users: Mutex<HashMap<u32, User>>,
}

#[derive(Default)]
struct User {
    connections: usize,
    sessions: usize,
    /// Retrievals running.
    queries: usize,
    /// Every ring ever made for this user (in use or idle).
    rings: Vec<Pooled>,
    /// Flows the user's flow tables hold room for.
    flows: u64,
}

struct Pooled {
    ring: Arc<Mutex<RingWriter>>,
    capacity: u64,
    in_use: bool,
}

impl User {
    fn ring_bytes(&self) -> u64 {
        self.rings.iter().map(|r| r.capacity).sum()
    }

    fn is_empty(&self) -> bool {
        self.connections == 0
            && self.sessions == 0
            && self.queries == 0
            && self.rings.is_empty()
            && self.flows == 0
    }
}

/// A connection slot; given back on drop.
pub struct ConnectionSlot {
    budgets: Arc<Budgets>,
    uid: u32,
}

/// A session slot; given back on drop.
pub struct SessionSlot {
    budgets: Arc<Budgets>,
    uid: u32,
}

/// Room for `flows` flows in one session's tables; given back on drop.
pub struct FlowSlot {
    budgets: Arc<Budgets>,
    uid: u32,
    /// Flows reserved.
    pub flows: u64,
}

/// A retrieval slot; given back on drop.
pub struct QuerySlot {
    budgets: Arc<Budgets>,
    uid: u32,
}

/// A ring lent to one session; back to its user's pool on drop (the session
/// must have ended: the ring is finished here in case it was not).
pub struct RingLease {
    budgets: Arc<Budgets>,
    uid: u32,
    /// The ring (the session's sinks hold clones while it runs).
    pub ring: Arc<Mutex<RingWriter>>,
    /// True when the ring was made for this session (false: reused).
    pub fresh: bool,
}

/// What one user holds now (for tests and the audit log).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Connections open.
    pub connections: usize,
    /// Sessions reserved or running.
    pub sessions: usize,
    /// Retrievals running.
    pub queries: usize,
    /// Rings made for the user (in use or idle).
    pub rings: usize,
    /// Their data bytes.
    pub ring_bytes: u64,
    /// Flows the user's flow tables hold room for.
    pub flows: u64,
}

impl Budgets {
    /// No user holds anything.
    pub fn new() -> Arc<Budgets> {
        Arc::new(Budgets::default())
    }

    fn users(&self) -> std::sync::MutexGuard<'_, HashMap<u32, User>> {
        self.users.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `uid` holds now.
    pub fn usage(&self, uid: u32) -> Usage {
        self.holders()
            .into_iter()
            .find_map(|(u, usage)| (u == uid).then_some(usage))
            .unwrap_or_default()
    }

    /// Every user holding something now, with what, by uid (for the
    /// metrics page).
    pub fn holders(&self) -> Vec<(u32, Usage)> {
        let mut v: Vec<_> = self
            .users()
            .iter()
            .map(|(&uid, u)| {
                let usage = Usage {
                    connections: u.connections,
                    sessions: u.sessions,
                    queries: u.queries,
                    rings: u.rings.len(),
                    ring_bytes: u.ring_bytes(),
                    flows: u.flows,
                };
                (uid, usage)
            })
            .collect();
        v.sort_by_key(|&(uid, _)| uid);
        v
    }

    /// Reserves room for `flows` flows in `uid`'s tables, at most `limit`
    /// for the user in all (the grant's `max_flows`), checked and taken in
    /// one step.
    pub fn reserve_flows(
        self: &Arc<Self>,
        uid: u32,
        flows: u64,
        limit: u64,
    ) -> Result<FlowSlot, String> {
        let mut users = self.users();
        let u = users.entry(uid).or_default();
        if u.flows.saturating_add(flows) > limit {
            let held = u.flows;
            if u.is_empty() {
                users.remove(&uid);
            }
            return Err(format!(
                "uid {uid}'s flow tables already hold room for {held} flows; a table of {flows} \
                 more would pass the grant's max_flows of {limit} for the user"
            ));
        }
        u.flows += flows;
        Ok(FlowSlot {
            budgets: self.clone(),
            uid,
            flows,
        })
    }

    /// Takes one of `uid`'s at most `limit` connections (None: no limit).
    pub fn connect(
        self: &Arc<Self>,
        uid: u32,
        limit: Option<usize>,
    ) -> Result<ConnectionSlot, String> {
        let mut users = self.users();
        let u = users.entry(uid).or_default();
        if limit.is_some_and(|l| u.connections >= l) {
            let n = u.connections;
            if u.is_empty() {
                users.remove(&uid);
            }
            return Err(format!(
                "uid {uid} already holds {n} connections, the most one user may"
            ));
        }
        u.connections += 1;
        Ok(ConnectionSlot {
            budgets: self.clone(),
            uid,
        })
    }

    /// Takes one of `uid`'s at most `limit` sessions, checked and reserved
    /// in one step.
    pub fn reserve_session(
        self: &Arc<Self>,
        uid: u32,
        limit: usize,
    ) -> Result<SessionSlot, String> {
        let mut users = self.users();
        let u = users.entry(uid).or_default();
        if u.sessions >= limit {
            return Err(format!(
                "uid {uid} already runs {limit} sessions, the most one user may"
            ));
        }
        u.sessions += 1;
        Ok(SessionSlot {
            budgets: self.clone(),
            uid,
        })
    }

    /// Takes one of `uid`'s at most `limit` retrievals, checked and reserved
    /// in one step.
    pub fn reserve_query(self: &Arc<Self>, uid: u32, limit: usize) -> Result<QuerySlot, String> {
        let mut users = self.users();
        let u = users.entry(uid).or_default();
        if u.queries >= limit {
            return Err(format!(
                "uid {uid} already runs {} retrievals, the most its grant allows at once \
                 (retrieve.max_queries = {limit})",
                u.queries
            ));
        }
        u.queries += 1;
        Ok(QuerySlot {
            budgets: self.clone(),
            uid,
        })
    }

    /// A ring of `capacity` bytes for one of `uid`'s sessions: an idle one
    /// of the user's pool if one fits, else a new one while the user's
    /// rings stay within `max_bytes`, else any idle one of the user's (a
    /// smaller or larger ring than asked: memory the user already holds).
    /// A ring some hub thread still holds a clone of is not reused yet.
    pub fn ring(
        self: &Arc<Self>,
        uid: u32,
        capacity: u64,
        max_bytes: u64,
    ) -> Result<RingLease, String> {
        let mut users = self.users();
        let u = users.entry(uid).or_default();
        let idle = |p: &Pooled| !p.in_use && Arc::strong_count(&p.ring) == 1;
        let pick = u
            .rings
            .iter()
            .position(|p| idle(p) && p.capacity == capacity)
            .or_else(|| {
                if u.ring_bytes().saturating_add(capacity) <= max_bytes {
                    None
                } else {
                    // Largest idle ring first: closest to what the grant gives.
                    let mut best: Option<usize> = None;
                    for (i, p) in u.rings.iter().enumerate() {
                        if idle(p) && best.is_none_or(|b| u.rings[b].capacity < p.capacity) {
                            best = Some(i);
                        }
                    }
                    best
                }
            });
        let (ring, fresh) = match pick {
            Some(i) => {
                let p = &mut u.rings[i];
                {
                    let mut r = p.ring.lock().unwrap_or_else(|e| e.into_inner());
                    r.finish();
                    r.recycle()
                        .map_err(|e| format!("cannot reuse a shared-memory ring: {e}"))?;
                }
                p.in_use = true;
                (p.ring.clone(), false)
            }
            None => {
                if u.ring_bytes().saturating_add(capacity) > max_bytes {
                    return Err(format!(
                        "uid {uid} holds {} bytes of shared-memory rings in {} rings, all in use; \
                         its grant allows {max_bytes}",
                        u.ring_bytes(),
                        u.rings.len()
                    ));
                }
                let mut r = RingWriter::create_pooled(capacity as usize)
                    .map_err(|e| format!("cannot make the shared-memory ring: {e}"))?;
                r.prefault();
                let ring = Arc::new(Mutex::new(r));
                u.rings.push(Pooled {
                    ring: ring.clone(),
                    capacity,
                    in_use: true,
                });
                (ring, true)
            }
        };
        Ok(RingLease {
            budgets: self.clone(),
            uid,
            ring,
            fresh,
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut users = self.budgets.users();
        if let Some(u) = users.get_mut(&self.uid) {
            u.connections = u.connections.saturating_sub(1);
            if u.is_empty() {
                users.remove(&self.uid);
            }
        }
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut users = self.budgets.users();
        if let Some(u) = users.get_mut(&self.uid) {
            u.sessions = u.sessions.saturating_sub(1);
            if u.is_empty() {
                users.remove(&self.uid);
            }
        }
    }
}

impl Drop for FlowSlot {
    fn drop(&mut self) {
        let mut users = self.budgets.users();
        if let Some(u) = users.get_mut(&self.uid) {
            u.flows = u.flows.saturating_sub(self.flows);
            if u.is_empty() {
                users.remove(&self.uid);
            }
        }
    }
}

impl Drop for QuerySlot {
    fn drop(&mut self) {
        let mut users = self.budgets.users();
        if let Some(u) = users.get_mut(&self.uid) {
            u.queries = u.queries.saturating_sub(1);
            if u.is_empty() {
                users.remove(&self.uid);
            }
        }
    }
}

impl Drop for RingLease {
    fn drop(&mut self) {
        if let Ok(mut r) = self.ring.lock() {
            r.finish();
        }
        let mut users = self.budgets.users();
        if let Some(u) = users.get_mut(&self.uid) {
            if let Some(p) = u
                .rings
                .iter_mut()
                .find(|p| Arc::ptr_eq(&p.ring, &self.ring))
            {
                p.in_use = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: u64 = 64 << 10;

    #[test]
    fn sessions_are_reserved_atomically_and_given_back() {
        let b = Budgets::new();
        let slots: Vec<_> = (0..3).map(|_| b.reserve_session(7, 3).unwrap()).collect();
        assert!(b.reserve_session(7, 3).is_err());
        assert!(
            b.reserve_session(8, 3).is_ok(),
            "another user is not counted"
        );
        drop(slots);
        assert_eq!(b.usage(7), Usage::default());
        // Many threads at once: never more than the limit.
        let taken = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..32 {
                s.spawn(|| {
                    if let Ok(slot) = b.reserve_session(9, 5) {
                        taken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        std::mem::forget(slot);
                    }
                });
            }
        });
        assert_eq!(taken.into_inner(), 5);
    }

    #[test]
    fn flows_are_reserved_against_the_limit_and_given_back() {
        let b = Budgets::new();
        let a = b.reserve_flows(3, 600, 1000).unwrap();
        assert!(b.reserve_flows(3, 401, 1000).is_err());
        let c = b.reserve_flows(3, 400, 1000).unwrap();
        assert_eq!(b.usage(3).flows, 1000);
        assert!(b.reserve_flows(4, 1000, 1000).is_ok(), "per user");
        drop(a);
        assert_eq!(b.usage(3).flows, 400);
        drop(c);
        assert_eq!(b.usage(3), Usage::default());
    }

    #[test]
    fn retrievals_are_capped_per_user_and_given_back() {
        let b = Budgets::new();
        let q: Vec<_> = (0..2).map(|_| b.reserve_query(3, 2).unwrap()).collect();
        assert!(b.reserve_query(3, 2).is_err());
        assert_eq!(b.usage(3).queries, 2);
        assert!(b.reserve_query(4, 2).is_ok(), "another user is not counted");
        drop(q);
        assert_eq!(b.usage(3), Usage::default());
        assert!(b.reserve_query(3, 2).is_ok());
    }

    #[test]
    fn connections_are_capped_per_user() {
        let b = Budgets::new();
        let a: Vec<_> = (0..2).map(|_| b.connect(1, Some(2)).unwrap()).collect();
        assert!(b.connect(1, Some(2)).is_err());
        assert!(b.connect(0, None).is_ok());
        drop(a);
        assert!(b.connect(1, Some(2)).is_ok());
    }

    #[test]
    fn rings_are_reused_and_bounded() {
        let b = Budgets::new();
        // One session after another: always the same ring.
        let first = b.ring(5, R, 2 * R).unwrap();
        assert!(first.fresh);
        let p = Arc::as_ptr(&first.ring);
        drop(first);
        for _ in 0..100 {
            let l = b.ring(5, R, 2 * R).unwrap();
            assert!(!l.fresh);
            assert_eq!(Arc::as_ptr(&l.ring), p);
        }
        assert_eq!(b.usage(5).rings, 1);
        // Two at once: two rings; a third is refused, within the budget.
        let x = b.ring(5, R, 2 * R).unwrap();
        let y = b.ring(5, R, 2 * R).unwrap();
        assert!(b.ring(5, R, 2 * R).is_err());
        assert_eq!(b.usage(5).ring_bytes, 2 * R);
        // A bigger ring asked for when the budget is spent: an idle one.
        drop(x);
        let z = b.ring(5, 4 * R, 2 * R).unwrap();
        assert!(!z.fresh);
        // A ring a sink still holds is not handed out again.
        let held = z.ring.clone();
        drop(z);
        drop(y);
        let w = b.ring(5, R, 2 * R).unwrap();
        assert!(!Arc::ptr_eq(&w.ring, &held));
        assert_eq!(b.usage(5).rings, 2);
    }
}
