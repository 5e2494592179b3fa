//! Sending frames on an interface (AF_PACKET, raw Ethernet frames).

use crate::interface::{Interface, OpenError};
use crate::sys;
use std::os::fd::OwnedFd;

/// The SCHED_FIFO priority of an injection sender thread: above every
/// normal thread, below the kernel's own real-time threads (50 and up).
pub const FIFO_PRIORITY: i32 = 10;

/// A socket that sends whole link-layer frames on one interface.
pub struct Injector {
    fd: OwnedFd,
}

impl Injector {
    /// Opens an injector on `iface`. The socket receives nothing (protocol 0
    /// and a reject-all filter), it only sends.
    pub fn open(iface: &Interface) -> Result<Injector, OpenError> {
        let fd = sys::packet_socket()
            .map_err(|e| OpenError::os("opening a packet socket", e, "CAP_NET_RAW"))?;
        let reject_all = [libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        sys::attach_filter(&fd, &reject_all).map_err(|e| OpenError::Os {
            action: "attaching a filter".into(),
            error: e,
        })?;
        sys::bind_packet(&fd, iface.index)
            .map_err(|e| OpenError::os(format!("binding to {}", iface.name), e, "CAP_NET_RAW"))?;
        Ok(Injector { fd })
    }

    /// Asks for a kernel transmit timestamp of every frame sent from now
    /// on, numbered 0, 1, 2, ... in sending order (see [`Injector::tx_timestamp`]).
    pub fn enable_tx_timestamps(&self) -> std::io::Result<()> {
        sys::enable_tx_timestamps(&self.fd)
    }

    /// The next transmit timestamp the kernel has ready, without waiting:
    /// `(number of the frame, CLOCK_REALTIME nanoseconds when it left)`.
    pub fn tx_timestamp(&self) -> std::io::Result<Option<(u32, u64)>> {
        sys::read_tx_timestamp(&self.fd)
    }

    /// Makes the calling (sending) thread real-time (SCHED_FIFO at
    /// [`FIFO_PRIORITY`]), if allowed — by CAP_SYS_NICE, or without it by an
    /// RLIMIT_RTPRIO of at least that (ringcapd's systemd unit sets
    /// `LimitRTPRIO=`) — else as favoured as it may be (nice -15): its
    /// wake-ups at send times then do not wait behind other threads.
    pub fn prefer_realtime() -> std::io::Result<()> {
        sys::set_fifo_priority(FIFO_PRIORITY).or_else(|_| sys::set_thread_nice(-15))
    }

    /// Sends one frame.
    pub fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        let n = sys::send(&self.fd, frame)?;
        if n != frame.len() {
            return Err(std::io::Error::other(format!(
                "sent {n} of {} bytes",
                frame.len()
            )));
        }
        Ok(())
    }
}
