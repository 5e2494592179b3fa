//! The hook source: packets an XDP or netfilter program copied into a BPF
//! ring buffer (`ringcap_hook`). With XDP the filter usually runs in the
//! program, which copies matching frames cut to the snap length; otherwise
//! the program copies every packet (the snap length, or as far as the
//! filter reads) and the filter runs in the capture thread's stages, on
//! libpcap's program. Sampling always runs in the stages.
//!
//! Accounting: the program counts the packets it saw (reported as seen by
//! the interface, for this hook), the records it wrote and the packets it
//! could not write for a full ring (dropped in the ring). A dropped packet
//! never met the filter, so it is counted as accepted, as the kernel's
//! AF_PACKET ring counts its drops after its filter: accepted = sampled out
//! + dropped in the ring + delivered still holds.
//!
//! When the filter runs in the XDP program (`HookCapture::kernel_filter`),
//! every record written is a packet the filter accepted, counted here as
//! the ring's drops are.

use super::{Flow, Next, Packet, Source, SourceError};
use ringcap_hook::HookCapture;
use ringcap_stats::CaptureCounts;
use std::time::Duration;

/// Records handed over per call: bounds how late a stop is noticed.
const RECORDS_PER_BATCH: usize = 65_536;
/// Bytes of records handed over per call (about; one record may pass it).
const BYTES_PER_BATCH: u64 = 4 << 20;
/// The program does not wake the reader (a wakeup per packet costs the
/// sender several times the copy): an idle reader looks again after a nap
/// between these bounds, shorter while the ring fills fast (more than an
/// eighth of it in one nap), longer while it stays nearly empty. Each
/// wake-up costs tens of microseconds here: at 1 ms naps they were most of
/// the capture's CPU at 50 kpps.
const MIN_POLL: Duration = Duration::from_micros(500);
const MAX_POLL: Duration = Duration::from_millis(10);

/// A hook program's ring buffer as a [`Source`].
pub struct HookSource {
    capture: HookCapture,
    seen: u64,
    dropped: u64,
    delivered: u64,
    poll: Duration,
}

impl HookSource {
    /// Reads what `capture`'s program copies.
    pub fn new(capture: HookCapture) -> HookSource {
        HookSource {
            capture,
            seen: 0,
            dropped: 0,
            delivered: 0,
            poll: MIN_POLL,
        }
    }
}

impl Source for HookSource {
    #[inline]
    fn next_batch<F: FnMut(Packet<'_>) -> Flow>(
        &mut self,
        mut each: F,
    ) -> Result<Next, SourceError> {
        if !self.capture.has_data() {
            return Ok(Next::Idle);
        }
        // Records of this batch after a Done/Stop are read (given back to
        // the kernel) without being handled: counted as skipped.
        let mut handled = true;
        let mut skipped = 0u64;
        let n = self
            .capture
            .read_batch(RECORDS_PER_BATCH, BYTES_PER_BATCH, |p| {
                if !handled {
                    skipped += 1;
                    return true;
                }
                let packet = Packet {
                    ts_ns: p.ts_ns,
                    wire_len: p.wire_len,
                    data: p.data,
                    vlan: None,
                    interface: 0,
                    ahead: &[],
                };
                match each(packet) {
                    Flow::Continue => {}
                    Flow::Done => handled = false,
                    Flow::Stop => {
                        handled = false;
                        skipped += 1;
                    }
                }
                true
            });
        if n == 0 {
            return Ok(Next::Idle);
        }
        Ok(Next::Packets { skipped })
    }

    fn wait(
        &mut self,
        timeout: Option<Duration>,
        _wake: Option<std::os::fd::RawFd>,
    ) -> Result<bool, SourceError> {
        // The ring buffer is polled (naps of at most MAX_POLL), so the
        // caller looks at what `wake` stands for (the stop flag) soon
        // enough without it.
        if self.capture.has_data() {
            return Ok(false);
        }
        std::thread::sleep(timeout.unwrap_or(self.poll).min(self.poll));
        let (used, size) = self.capture.backlog();
        if used > size / 8 {
            self.poll = (self.poll / 2).max(MIN_POLL);
        } else if used < size / 32 {
            self.poll = (self.poll * 2).min(MAX_POLL);
        }
        Ok(false)
    }

    fn refresh(&mut self, counts: &mut CaptureCounts) -> Result<(), SourceError> {
        let c = self.capture.counters().map_err(SourceError::Os)?;
        counts.ring_accepted += c.dropped.saturating_sub(self.dropped);
        if self.capture.kernel_filter() {
            // The filter ran in the program: what it delivered was accepted
            // there (no filter stage counts it).
            counts.ring_accepted += c.delivered.saturating_sub(self.delivered);
        }
        counts.dropped_ring = c.dropped;
        self.dropped = c.dropped;
        self.delivered = c.delivered;
        self.seen = c.seen;
        Ok(())
    }

    fn seen(&self) -> Option<u64> {
        Some(self.seen)
    }

    fn drain_grace(&self) -> Duration {
        // Records are readable as soon as the program wrote them; what came
        // in just before the stop is read within a few polls.
        Duration::from_millis(50)
    }

    fn hold_bytes(&self) -> Option<usize> {
        Some((BYTES_PER_BATCH + u64::from(ringcap_hook::MAX_COPY) + 64) as usize)
    }

    fn backlog(&mut self) -> Option<(u32, u32)> {
        // In 64 KiB units, as ring blocks.
        let (used, size) = self.capture.backlog();
        Some(((used >> 16) as u32, (size >> 16).max(1) as u32))
    }
}
