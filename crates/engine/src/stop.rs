//! A capture's stop request: a flag the capture threads look at between
//! ring blocks (no system call per block), and a [`Bell`] that wakes
//! threads waiting for packets, the supervisor and anything else that
//! waits for the capture, so that none of them needs a timer to notice a
//! stop. The bell stays rung once rung: a stop is for good. It may also be
//! rung from outside (a signal handler writing to [`Stop::ringer`]): a
//! thread that sees it rung sets the flag itself.

use ringcap_sink::Bell;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// See the module documentation. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Stop {
    flag: Arc<AtomicBool>,
    bell: Arc<Bell>,
}

impl Stop {
    /// A stop not yet requested.
    pub fn new() -> io::Result<Stop> {
        Ok(Stop {
            flag: Arc::new(AtomicBool::new(false)),
            bell: Arc::new(Bell::new()?),
        })
    }

    /// Requests the stop and wakes everyone waiting.
    pub fn request(&self) {
        self.flag.store(true, Ordering::Relaxed);
        self.bell.ring();
    }

    /// True once requested (as far as this thread has seen: a waiter that
    /// found [`fd`](Self::fd) readable calls [`noticed`](Self::noticed)).
    #[inline]
    pub fn requested(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// The bell was found rung: the stop is requested, whoever rang it.
    pub fn noticed(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// Readable once the stop is requested, for poll sets.
    pub fn fd(&self) -> RawFd {
        self.bell.fd()
    }

    /// The flag alone.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.flag.clone()
    }

    /// A descriptor that requests the stop when a byte is written to it
    /// (async-signal-safe: for a signal handler, which then owns it).
    pub fn ringer(&self) -> io::Result<OwnedFd> {
        self.bell.ringer()
    }
}
