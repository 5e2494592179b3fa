//! The capture thread: source → stages → encoder, with counts on the side.
//!
//! Generic over the [`Source`], so a ring block's packets go through the
//! stages with no indirect call. Counts are kept locally and published to the
//! board once per batch at most every 250 ms (no atomic per packet). A stop
//! (this capture's own flag) lets the source drain what is already on its
//! way, then the encoder ships what it holds.
//!
//! Backpressure: before taking a ring block, the thread asks the sink for
//! room for a whole block. While there is none (the writer's buffers are all
//! filled, queued or being written: a disk stall), the block stays with the
//! kernel, which keeps filling the others; packets wait in the ring, the
//! biggest buffer, and only when it is full too does the kernel drop them
//! (and count them: `packets_dropped_ring`). The thread checks every few
//! milliseconds, on the sink's free-buffer queue. After a stop it waits at
//! most [`HOLD_LIMIT`] for a stalled writer, then reads what is left and
//! the writer drops what does not fit (counted), so that a capture always ends.

use crate::sink::PacketSink;
use crate::source::{Flow, Next, Source, SourceError};
use crate::stages::Stages;
use ringcap_stats::{Board, CaptureCounts};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a stopping thread keeps draining a busy source.
const DRAIN_LIMIT: Duration = Duration::from_secs(3);
/// How often kernel statistics are read and counts published while busy.
const PUBLISH_INTERVAL: Duration = Duration::from_millis(250);
/// Longest a stopping thread leaves ring blocks with the kernel because the
/// writer has no room (within [`DRAIN_LIMIT`]).
const HOLD_LIMIT: Duration = Duration::from_secs(2);
/// How long a thread waits for writer room before looking again.
const HOLD_NAP: Duration = Duration::from_millis(5);

/// One capture thread's job.
pub struct Worker<S: Source, K: PacketSink> {
    /// Where packets come from.
    pub source: S,
    /// What happens to each.
    pub stages: Stages,
    /// Where kept packets go.
    pub encoder: K,
    /// Counters.
    pub board: Arc<Board>,
    /// Board entry (interface) and thread slot.
    pub slot: (usize, usize),
    /// The capture's stop flag.
    pub stop: Arc<AtomicBool>,
    /// Ship a partial batch after this long.
    pub flush_interval: Duration,
}

impl<S: Source, K: PacketSink> Worker<S, K> {
    /// Runs until the source ends or the capture stops.
    pub fn run(mut self) -> Result<(), SourceError> {
        let mut counts = CaptureCounts::default();
        let mut last_publish = Instant::now();
        let mut draining_since: Option<Instant> = None;
        // The wait only bounds how late a stop or a partial-batch flush is
        // noticed (a retired block wakes it at once); each wake-up costs tens
        // of microseconds in a VM.
        let nap = self
            .flush_interval
            .clamp(Duration::from_millis(10), PUBLISH_INTERVAL);
        let mut exhausted = false;
        let mut result = Ok(());
        let hold = self.source.hold_bytes();
        loop {
            if draining_since.is_none() && (self.stop.load(Ordering::Relaxed) || exhausted) {
                draining_since = Some(Instant::now());
            }
            if let Some((ready, blocks)) = self.source.backlog() {
                counts.ring_blocks = u64::from(blocks);
                counts.ring_blocks_high_water = counts.ring_blocks_high_water.max(u64::from(ready));
            }
            let held = match hold {
                Some(bytes) if !exhausted => {
                    draining_since.is_none_or(|s| s.elapsed() <= HOLD_LIMIT)
                        && !self.encoder.has_room(bytes)
                }
                _ => false,
            };
            let next = if held {
                Ok(Next::Idle)
            } else if exhausted {
                self.source.next_batch(|_| Flow::Stop)
            } else {
                let (stages, encoder, c) = (&mut self.stages, &mut self.encoder, &mut counts);
                self.source.next_batch(|p| stages.handle(p, encoder, c))
            };
            let next = match next {
                Ok(n) => n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let got = matches!(next, Next::Packets { .. });
            if let Next::Packets { skipped } = next {
                counts.after_count += skipped;
            }
            if next == Next::End {
                break;
            }
            if !exhausted && self.stages.count_reached() {
                exhausted = true;
                // This capture only: its other threads drain and stop too.
                self.stop.store(true, Ordering::Relaxed);
            }
            if let Some(since) = draining_since {
                let grace = self.source.drain_grace();
                if grace.is_zero()
                    || (!got && !held && since.elapsed() > grace)
                    || since.elapsed() > DRAIN_LIMIT
                {
                    break;
                }
            }
            if !got || last_publish.elapsed() >= PUBLISH_INTERVAL {
                if last_publish.elapsed() >= PUBLISH_INTERVAL {
                    if let Err(e) = self.source.refresh(&mut counts) {
                        result = Err(e);
                        break;
                    }
                    last_publish = Instant::now();
                }
                if self
                    .encoder
                    .oldest()
                    .is_some_and(|t| t.elapsed() >= self.flush_interval)
                {
                    self.encoder.flush();
                }
                self.publish(&counts);
            }
            if held {
                self.encoder.wait_room(HOLD_NAP);
            } else if !got {
                if let Err(e) = self.source.wait(nap) {
                    result = Err(e);
                    break;
                }
            }
        }
        self.encoder.close();
        if let Err(e) = self.source.refresh(&mut counts) {
            result = result.and(Err(e));
        }
        self.publish(&counts);
        result
    }

    fn publish(&self, counts: &CaptureCounts) {
        let mut c = *counts;
        c.dropped_writer = self.encoder.dropped();
        // Measured where the source can wait for the writer (live rings);
        // a file source blocks in the encoder instead, unmeasured.
        if let Some((peak, size)) = self
            .encoder
            .buffer_use()
            .filter(|_| self.source.hold_bytes().is_some())
        {
            c.writer_buffer_high_water = peak;
            c.writer_buffer_bytes = size;
        }
        let (i, t) = self.slot;
        self.board.interfaces[i].threads[t].publish(&c);
        if let Some(seen) = self.source.seen() {
            self.board.set_interface_now(i, seen, 0);
        }
    }
}

/// A capture thread that writes whole ring blocks in place (zero copy): each
/// block the kernel hands over is turned into pcapng where it lies
/// (`ringcap_source::inplace`) and sent to the writer, which writes it from
/// the ring memory and then gives it back to the kernel. There is no user
/// space stage per packet (the kernel filtered, sampled and cut it); the
/// engine uses this thread only when none is needed (see
/// `crate::capture::in_place_blocker`).
///
/// Backpressure is the ring itself: blocks the writer has not written yet
/// stay with user space, the kernel fills the others, and when it comes
/// round to a block still held it drops packets and counts them
/// (`packets_dropped_ring`), as for any full ring.
pub struct InPlaceWorker {
    /// The ring.
    pub source: crate::source::live::LiveSource,
    /// What packets become.
    pub opts: ringcap_source::inplace::InPlace,
    /// To the writer.
    pub rings: crossbeam_channel::Sender<ringcap_sink::RingWrite>,
    /// Counters.
    pub board: Arc<Board>,
    /// Board entry (interface) and thread slot.
    pub slot: (usize, usize),
    /// The capture's stop flag.
    pub stop: Arc<AtomicBool>,
}

impl InPlaceWorker {
    /// Runs until the capture stops.
    pub fn run(mut self) -> Result<(), SourceError> {
        let mut counts = CaptureCounts::default();
        let mut last_publish = Instant::now();
        let mut draining_since: Option<Instant> = None;
        // A retired block wakes the wait at once; the nap only bounds how
        // late a stop is noticed (nothing waits to be flushed here).
        let nap = PUBLISH_INTERVAL;
        let mut result = Ok(());
        loop {
            if draining_since.is_none() && self.stop.load(Ordering::Relaxed) {
                draining_since = Some(Instant::now());
            }
            let held = self.source.held_blocks();
            if let Some((ready, blocks)) = self.source.backlog() {
                counts.ring_blocks = u64::from(blocks);
                let used = (ready + held).min(blocks);
                counts.ring_blocks_high_water = counts.ring_blocks_high_water.max(u64::from(used));
            }
            let got = match self.source.take_block() {
                Some(mut block) => {
                    let c = ringcap_source::inplace::to_pcapng(block.bytes_mut(), &self.opts);
                    // Packets the layout check left out (never seen) count
                    // as delivered and lost by the writer, so the counts
                    // still add up.
                    counts.delivered += c.packets + c.malformed;
                    counts.bytes_on_wire += c.bytes_on_wire;
                    counts.merged_by_offload += c.merged_by_offload;
                    if c.malformed > 0 {
                        self.board.add_write_failed(self.slot.0, c.malformed);
                    }
                    if c.len > 0 {
                        let write = ringcap_sink::RingWrite {
                            block,
                            len: c.len,
                            packets: c.packets,
                            interface: self.slot.0,
                            first_ts: c.first_ts,
                            last_ts: c.last_ts,
                        };
                        if self.rings.send(write).is_err() {
                            // The writer is gone (it reports why).
                            self.board.add_write_failed(self.slot.0, c.packets);
                        }
                    }
                    true
                }
                None => false,
            };
            if let Some(since) = draining_since {
                let grace = self.source.drain_grace();
                if (!got && since.elapsed() > grace) || since.elapsed() > DRAIN_LIMIT {
                    break;
                }
            }
            if !got || last_publish.elapsed() >= PUBLISH_INTERVAL {
                if last_publish.elapsed() >= PUBLISH_INTERVAL {
                    if let Err(e) = self.source.refresh(&mut counts) {
                        result = Err(e);
                        break;
                    }
                    last_publish = Instant::now();
                }
                self.publish(&counts);
            }
            if !got {
                if held >= counts.ring_blocks as u32 && held > 0 {
                    // Every block is with the writer: wait for one back.
                    std::thread::sleep(HOLD_NAP);
                    continue;
                }
                let t = Instant::now();
                if let Err(e) = self.source.wait(nap) {
                    result = Err(e);
                    break;
                }
                // poll() reports a ring readable while an earlier block is
                // still held (being written), though the next one is not
                // ready: nap instead of spinning. A block takes tens of
                // milliseconds to fill at the top rate and the ring holds
                // dozens, so a 5 ms nap (one or two per block, where 1 ms
                // took three or four) delays nothing that matters.
                if t.elapsed() < Duration::from_micros(200) && held > 0 {
                    std::thread::sleep(HOLD_NAP);
                }
            }
        }
        if let Err(e) = self.source.refresh(&mut counts) {
            result = result.and(Err(e));
        }
        self.publish(&counts);
        result
    }

    fn publish(&self, counts: &CaptureCounts) {
        let (i, t) = self.slot;
        self.board.interfaces[i].threads[t].publish(counts);
    }
}
