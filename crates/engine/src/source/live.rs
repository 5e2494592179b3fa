//! The live source: one AF_PACKET socket with its TPACKET_V3 ring. The
//! filter, the snap length and (where it can) the sampler already ran in the
//! kernel; each call hands over one ring block and gives it back after.

use super::{Flow, Next, Packet, Source, SourceError};
use ringcap_source::socket::WaitError;
use ringcap_source::CaptureSocket;
use ringcap_stats::CaptureCounts;
use std::time::Duration;

/// A ring packet as the stages see it.
#[inline(always)]
fn packet(p: ringcap_source::RingPacket<'_>) -> Packet<'_> {
    Packet {
        ts_ns: p.ts_ns,
        wire_len: p.wire_len,
        data: p.data,
        // A tag can only go back into a frame that has its MAC addresses.
        vlan: p.vlan.filter(|_| p.data.len() >= 12).map(|v| v.bytes()),
        interface: 0,
        ahead: &[],
    }
}

/// Packets a group of [`LiveSource::next_groups`] holds at most.
pub const GROUP: usize = 64;

/// A capture socket as a [`Source`].
pub struct LiveSource {
    socket: CaptureSocket,
    retire_timeout: Duration,
    /// Blocks known to be ready, from the current one on.
    ready: u32,
}

impl LiveSource {
    /// Reads from `socket`, whose ring retires partly filled blocks after
    /// `retire_timeout`.
    pub fn new(socket: CaptureSocket, retire_timeout: Duration) -> LiveSource {
        LiveSource {
            socket,
            retire_timeout,
            ready: 0,
        }
    }
}

impl LiveSource {
    /// The current ring block as a whole, held away from the kernel until
    /// the returned value is dropped (in-place writing; see
    /// `ringcap_source::RxRing::take_block`).
    pub fn take_block(&mut self) -> Option<ringcap_source::HeldBlock> {
        let b = self.socket.ring().take_block()?;
        self.ready = self.ready.saturating_sub(1);
        Some(b)
    }

    /// The current ring block's packets, handed to `each` in groups of at
    /// most [`GROUP`] (all of them, none skipped), for a caller that runs
    /// several consumers over the same packets: one consumer at a time over
    /// a group keeps its code and state hot and the group in the first-level
    /// cache. False when no block was ready.
    pub fn next_groups<F: FnMut(&[Packet<'_>])>(&mut self, mut each: F) -> bool {
        let ring = self.socket.ring();
        let Some(block) = ring.next_block() else {
            return false;
        };
        self.ready = self.ready.saturating_sub(1);
        let empty = Packet {
            ts_ns: 0,
            wire_len: 0,
            data: &[],
            vlan: None,
            interface: 0,
            ahead: &[],
        };
        let mut group = [empty; GROUP];
        let mut n = 0;
        for p in block.packets() {
            group[n] = packet(p);
            n += 1;
            if n == GROUP {
                each(&group);
                n = 0;
            }
        }
        if n > 0 {
            each(&group[..n]);
        }
        true
    }

    /// The sequence number of the block [`next_groups`](Self::next_groups)
    /// takes next (see `ringcap_source::RxRing::sequence`).
    pub fn sequence(&mut self) -> u64 {
        self.socket.ring().sequence()
    }

    /// The first block sequence number whose packets all reach the ring
    /// after this call (see `ringcap_source::RxRing::fresh_from`).
    pub fn fresh_from(&mut self) -> u64 {
        self.socket.ring().fresh_from()
    }

    /// A handle on the socket's filter (see `CaptureSocket::filter_handle`).
    pub fn filter_handle(&self) -> std::io::Result<ringcap_source::FilterHandle> {
        self.socket.filter_handle()
    }

    /// Blocks held (taken and not given back).
    pub fn held_blocks(&mut self) -> u32 {
        self.socket.ring().held_blocks()
    }
}

impl Source for LiveSource {
    #[inline]
    fn next_batch<F: FnMut(Packet<'_>) -> Flow>(
        &mut self,
        mut each: F,
    ) -> Result<Next, SourceError> {
        let ring = self.socket.ring();
        let Some(block) = ring.next_block() else {
            return Ok(Next::Idle);
        };
        self.ready = self.ready.saturating_sub(1);
        let total = u64::from(block.packet_count());
        for (i, p) in block.packets().enumerate() {
            match each(packet(p)) {
                Flow::Continue => {}
                Flow::Done => {
                    return Ok(Next::Packets {
                        skipped: total - i as u64 - 1,
                    })
                }
                Flow::Stop => {
                    return Ok(Next::Packets {
                        skipped: total - i as u64,
                    })
                }
            }
        }
        Ok(Next::Packets { skipped: 0 })
    }

    fn wait(
        &mut self,
        timeout: Option<Duration>,
        wake: Option<std::os::fd::RawFd>,
    ) -> Result<bool, SourceError> {
        // Rounded up: a wait for a deadline does not end just short of it.
        let ms = timeout.map_or(-1, |t| {
            t.as_micros().div_ceil(1000).clamp(1, i32::MAX as u128) as i32
        });
        self.socket.wait(ms, wake).map_err(|e| match e {
            WaitError::InterfaceGone(_) => SourceError::Os(format!(
                "{e} (deleted or moved to another network namespace while capturing)"
            )),
            WaitError::Os(_) => SourceError::Os(e.to_string()),
        })
    }

    fn refresh(&mut self, counts: &mut CaptureCounts) -> Result<(), SourceError> {
        let s = self
            .socket
            .update_stats()
            .map_err(|e| SourceError::Os(format!("reading socket statistics: {e}")))?;
        counts.ring_accepted = s.accepted;
        counts.dropped_ring = s.dropped;
        Ok(())
    }

    fn seen(&self) -> Option<u64> {
        None
    }

    fn drain_grace(&self) -> Duration {
        // Blocks the kernel retires within two retire timeouts hold packets
        // that arrived before the stop.
        self.retire_timeout * 2 + Duration::from_millis(20)
    }

    fn hold_bytes(&self) -> Option<usize> {
        Some(self.socket.ring_geometry().block_size as usize)
    }

    fn backlog(&mut self) -> Option<(u32, u32)> {
        let total = self.socket.ring_geometry().block_count;
        self.ready = self.socket.ring().ready_blocks(self.ready);
        Some((self.ready, total))
    }
}
