//! A doorbell between threads, and from signal handlers: a non-blocking
//! pipe. Ringing writes one byte (async-signal-safe, so a handler can ring
//! it through [`Bell::ringer`], e.g. with `signal_hook::low_level::pipe`);
//! a thread that has nothing else to do polls [`Bell::fd`] alongside what
//! it waits for, instead of waking on a timer to look at flags.

use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// See the module documentation.
#[derive(Debug)]
pub struct Bell {
    read: OwnedFd,
    write: OwnedFd,
}

impl Bell {
    /// A new, silent bell.
    pub fn new() -> io::Result<Bell> {
        let (read, write) = sys::pipe_nonblocking()?;
        Ok(Bell { read, write })
    }

    /// Rings it (a full pipe is rung already).
    pub fn ring(&self) {
        let _ = sys::write_some(self.write.as_raw_fd(), b"!");
    }

    /// Silences it; true if it had been rung.
    pub fn clear(&self) -> bool {
        let mut buf = [0u8; 64];
        let mut rung = false;
        while sys::read_some(self.read.as_raw_fd(), &mut buf).is_ok_and(|n| n > 0) {
            rung = true;
        }
        rung
    }

    /// The descriptor to poll for POLLIN: readable from the first ring until
    /// the next [`clear`](Self::clear).
    pub fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// A descriptor of its own that rings the bell when a byte is written to
    /// it (for a signal handler, which then owns it).
    pub fn ringer(&self) -> io::Result<OwnedFd> {
        self.write.try_clone()
    }
}

/// Waits up to `timeout` (`None`: for as long as it takes) until one of
/// `fds` (at most 8) is readable (or has an error or hang-up); returns which
/// are, as a bit mask by position. An interrupted wait returns 0.
pub fn wait_readable(fds: &[RawFd], timeout: Option<std::time::Duration>) -> io::Result<u32> {
    // Rounded up, so that a wait for a deadline does not end just short of
    // it and spin.
    let ms = timeout.map_or(-1, |t| {
        t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
    });
    match sys::poll_in(fds, ms) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn rings_until_cleared() {
        let b = Bell::new().unwrap();
        assert_eq!(wait_readable(&[b.fd()], Some(Duration::ZERO)).unwrap(), 0);
        assert!(!b.clear());
        b.ring();
        b.ring();
        assert_eq!(wait_readable(&[b.fd()], Some(Duration::ZERO)).unwrap(), 1);
        assert!(b.clear());
        assert_eq!(wait_readable(&[b.fd()], Some(Duration::ZERO)).unwrap(), 0);
    }

    #[test]
    fn a_ringer_wakes_a_waiter() {
        let a = Bell::new().unwrap();
        let b = Bell::new().unwrap();
        let ringer = b.ringer().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            sys::write_some(ringer.as_raw_fd(), b"x").unwrap();
        });
        let t0 = Instant::now();
        assert_eq!(wait_readable(&[a.fd(), b.fd()], None).unwrap(), 2);
        assert!(t0.elapsed() < Duration::from_secs(5));
        t.join().unwrap();
    }

    #[test]
    fn a_timeout_is_not_cut_short() {
        let b = Bell::new().unwrap();
        let t0 = Instant::now();
        assert_eq!(
            wait_readable(&[b.fd()], Some(Duration::from_micros(1500))).unwrap(),
            0
        );
        assert!(t0.elapsed() >= Duration::from_micros(1500));
    }
}
