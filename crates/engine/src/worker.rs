//! The capture thread: source → stages → encoder, with counts on the side.
//!
//! Generic over the [`Source`], so a ring block's packets go through the
//! stages with no indirect call. Counts are kept locally and published to the
//! board once per batch at most every 250 ms (no atomic per packet), and
//! whenever the thread runs out of packets. A stop (this capture's own
//! [`Stop`]) lets the source drain what is already on its way, then the
//! encoder ships what it holds.
//!
//! Idle, a thread sleeps until packets come or the capture stops (the
//! stop's bell is in the same poll set), with a timeout only while it holds
//! a partial batch, which must reach the writer within the flush interval:
//! no timer wakes an idle capture.
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

use crate::source::{Flow, Next, Source, SourceError};
use crate::stages::{Observer, Stages};
use crate::stop::Stop;
use ringcap_sink::PacketSink;
use ringcap_stats::{Board, CaptureCounts};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a stopping thread keeps draining a busy source.
const DRAIN_LIMIT: Duration = Duration::from_secs(3);
/// How often kernel statistics are read and counts published while busy
/// (and once each time the thread runs out of packets).
const PUBLISH_INTERVAL: Duration = Duration::from_millis(250);
/// Shortest wait for a partial batch's flush time (a sink that keeps its
/// packets past it must not make the thread spin).
const MIN_FLUSH_WAIT: Duration = Duration::from_millis(10);
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
    /// The capture's stop.
    pub stop: Stop,
    /// Ship a partial batch after this long.
    pub flush_interval: Duration,
    /// The observer slot (`crate::stages::Observer`), if a stage is in it.
    pub observer: Option<Box<dyn Observer>>,
}

/// How long an idle capture thread waits for packets: while stopping, until
/// the source's drain grace is over (so that its end is seen); else until
/// `flush_by`, if something is held for the writer, or for as long as it
/// takes. The stop's bell is polled too unless stopping (where it stays
/// rung).
fn idle_wait<S: Source>(
    source: &mut S,
    stop: &Stop,
    draining_since: Option<Instant>,
    flush_by: Option<Instant>,
) -> Result<(), SourceError> {
    let (timeout, wake) = match draining_since {
        Some(since) => (
            Some(
                source
                    .drain_grace()
                    .saturating_sub(since.elapsed())
                    .max(Duration::from_millis(1)),
            ),
            None,
        ),
        None => (
            flush_by.map(|t| {
                t.saturating_duration_since(Instant::now())
                    .max(MIN_FLUSH_WAIT)
            }),
            Some(stop.fd()),
        ),
    };
    if source.wait(timeout, wake)? {
        stop.noticed();
    }
    Ok(())
}

impl<S: Source, K: PacketSink> Worker<S, K> {
    /// Runs until the source ends or the capture stops; then the observer,
    /// if any, finishes.
    pub fn run(self) -> Result<(), SourceError> {
        let (result, observer) = self.run_keep();
        if let Some(mut o) = observer {
            o.finish();
        }
        result
    }

    /// [`run`](Self::run), handing the observer back unfinished (files read
    /// one after another share one).
    pub fn run_keep(mut self) -> (Result<(), SourceError>, Option<Box<dyn Observer>>) {
        let mut counts = CaptureCounts::default();
        let mut last_publish = Instant::now();
        // Packets came since the source's own counters were last read.
        let mut unread = false;
        let mut draining_since: Option<Instant> = None;
        let mut exhausted = false;
        let mut result = Ok(());
        let hold = self.source.hold_bytes();
        loop {
            if draining_since.is_none() && (self.stop.requested() || exhausted) {
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
                match self.observer.as_deref_mut() {
                    Some(o) => self
                        .source
                        .next_batch(|p| stages.handle_observed(p, encoder, c, o)),
                    None => self.source.next_batch(|p| stages.handle(p, encoder, c)),
                }
            };
            let next = match next {
                Ok(n) => n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let got = matches!(next, Next::Packets { .. });
            unread |= got;
            if let Next::Packets { skipped } = next {
                counts.after_count += skipped;
            }
            if next == Next::End {
                break;
            }
            if !exhausted && self.stages.count_reached() {
                exhausted = true;
                // This capture only: its other threads drain and stop too.
                self.stop.request();
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
                // The kernel's counters move only with packets: read them
                // while busy, and once more when the packets stop, so that
                // an idle thread has nothing to look at.
                if last_publish.elapsed() >= PUBLISH_INTERVAL || (!got && unread) {
                    if let Err(e) = self.source.refresh(&mut counts) {
                        result = Err(e);
                        break;
                    }
                    last_publish = Instant::now();
                    unread = false;
                }
                if self
                    .encoder
                    .oldest()
                    .is_some_and(|t| t.elapsed() >= self.flush_interval)
                {
                    self.encoder.flush();
                }
                if let Some(o) = self.observer.as_deref_mut() {
                    o.idle();
                }
                self.publish(&counts);
            }
            if held {
                self.encoder.wait_room(HOLD_NAP);
            } else if !got {
                let mut flush_by = self.encoder.oldest().map(|t| t + self.flush_interval);
                // An observer with time-driven work wakes the thread too.
                if let Some(w) = self.observer.as_deref().and_then(|o| o.wake_within()) {
                    let t = Instant::now() + w;
                    flush_by = Some(flush_by.map_or(t, |f| f.min(t)));
                }
                if let Err(e) = idle_wait(&mut self.source, &self.stop, draining_since, flush_by) {
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
        (result, self.observer.take())
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
    /// The capture's stop.
    pub stop: Stop,
}

impl InPlaceWorker {
    /// Runs until the capture stops.
    pub fn run(mut self) -> Result<(), SourceError> {
        let mut counts = CaptureCounts::default();
        let mut last_publish = Instant::now();
        let mut unread = false;
        let mut draining_since: Option<Instant> = None;
        let mut result = Ok(());
        loop {
            if draining_since.is_none() && self.stop.requested() {
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
            unread |= got;
            if let Some(since) = draining_since {
                let grace = self.source.drain_grace();
                if (!got && since.elapsed() > grace) || since.elapsed() > DRAIN_LIMIT {
                    break;
                }
            }
            if !got || last_publish.elapsed() >= PUBLISH_INTERVAL {
                // As in `Worker::run`: while busy, and once when idle.
                if last_publish.elapsed() >= PUBLISH_INTERVAL || (!got && unread) {
                    if let Err(e) = self.source.refresh(&mut counts) {
                        result = Err(e);
                        break;
                    }
                    last_publish = Instant::now();
                    unread = false;
                }
                self.publish(&counts);
            }
            if !got {
                if held >= counts.ring_blocks as u32 && held > 0 {
                    // Every block is with the writer: wait for one back.
                    std::thread::sleep(HOLD_NAP);
                    continue;
                }
                // Nothing is ever flushed from here: idle, the wait lasts
                // until a block retires or the capture stops.
                let t = Instant::now();
                if let Err(e) = idle_wait(&mut self.source, &self.stop, draining_since, None) {
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
