//! The handles this library made: a fixed table of addresses, lock-free so
//! `pcap_breakloop` may look a handle up from a signal handler. A pointer
//! not in the table belongs to the system's libpcap and goes there.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Live handles one process may hold at once.
pub const MAX_HANDLES: usize = 256;

static SLOTS: [AtomicUsize; MAX_HANDLES] = [const { AtomicUsize::new(0) }; MAX_HANDLES];

/// Adds `addr`; false if the table is full.
pub fn insert(addr: usize) -> bool {
    SLOTS.iter().any(|s| {
        s.compare_exchange(0, addr, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// Whether `addr` is one of ours.
pub fn contains(addr: usize) -> bool {
    addr != 0 && SLOTS.iter().any(|s| s.load(Ordering::Acquire) == addr)
}

/// Removes `addr`.
pub fn remove(addr: usize) {
    for s in &SLOTS {
        if s.compare_exchange(addr, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}
