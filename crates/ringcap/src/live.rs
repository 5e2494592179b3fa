//! The capture thread: ring → stages → encoder, with counts on the side.
//!
//! One thread per (interface, fanout member). Per ring block it walks the
//! packets, applies what the kernel could not (every-Nth sampling, exact
//! header truncation, VLAN tag re-insertion), encodes kept packets into the
//! current output batch and publishes its counters once.

use ringcap_sink::Encoder;
use ringcap_source::CaptureSocket;
use ringcap_stages::{Snap, UserSampler};
use ringcap_stats::{Board, CaptureCounts};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One capture thread's job.
pub struct CaptureThread {
    /// The socket and its ring.
    pub socket: CaptureSocket,
    /// Where kept packets go.
    pub encoder: Encoder,
    /// User-space sampling (count mode).
    pub sampler: UserSampler,
    /// Truncation.
    pub snap: Snap,
    /// Frames longer than this were merged by an offload.
    pub max_frame_len: u32,
    /// Counters.
    pub board: Arc<Board>,
    /// Interface index on the board.
    pub interface: usize,
    /// Thread index within the interface.
    pub thread: usize,
    /// Set to stop: the thread then drains what is in the ring and returns.
    pub stop: Arc<AtomicBool>,
    /// Packets still to capture with -c (shared by all threads).
    pub budget: Option<Arc<AtomicU64>>,
    /// Ship a partial batch after this long.
    pub flush_interval: Duration,
    /// The ring's block retire timeout.
    pub retire_timeout: Duration,
}

impl CaptureThread {
    /// Runs until stopped; returns an error message if the socket fails.
    pub fn run(mut self) -> Result<(), String> {
        let mut counts = CaptureCounts::default();
        let mut last_stats = Instant::now();
        let mut draining_since: Option<Instant> = None;
        // The timeout only bounds how late a stop or a partial-batch flush is
        // noticed (a retired block wakes the poll at once); each wake-up
        // costs tens of microseconds in a VM.
        let poll_ms = self.flush_interval.as_millis().clamp(10, 250) as i32;
        let mut exhausted = false;
        loop {
            if draining_since.is_none() && (self.stop.load(Ordering::Relaxed) || exhausted) {
                draining_since = Some(Instant::now());
            }
            let got_block = {
                let ring = self.socket.ring();
                match ring.next_block() {
                    Some(block) => {
                        if exhausted {
                            counts.after_count += u64::from(block.packet_count());
                        } else {
                            exhausted = process_block(
                                &block,
                                &mut self.encoder,
                                &mut self.sampler,
                                self.snap,
                                self.max_frame_len,
                                self.budget.as_deref(),
                                &mut counts,
                            );
                        }
                        true
                    }
                    None => false,
                }
            };
            if let Some(since) = draining_since {
                // Drain: blocks the kernel retires within two retire timeouts
                // hold packets that arrived before the stop; bounded so a busy
                // link cannot keep us here.
                if !got_block
                    && since.elapsed() > self.retire_timeout * 2 + Duration::from_millis(20)
                {
                    break;
                }
                if since.elapsed() > Duration::from_secs(3) {
                    break;
                }
            }
            if exhausted {
                self.stop.store(true, Ordering::Relaxed);
            }
            if !got_block || last_stats.elapsed() >= Duration::from_millis(250) {
                if last_stats.elapsed() >= Duration::from_millis(250) {
                    self.refresh_kernel_stats(&mut counts)?;
                    last_stats = Instant::now();
                }
                if self
                    .encoder
                    .oldest()
                    .is_some_and(|t| t.elapsed() >= self.flush_interval)
                {
                    self.encoder.flush();
                }
                counts.dropped_writer = self.encoder.dropped;
                self.board.interfaces[self.interface].threads[self.thread].publish(&counts);
            }
            if !got_block {
                if let Err(e) = self.socket.wait(poll_ms) {
                    return Err(format!("waiting for packets: {e}"));
                }
            }
        }
        self.encoder.close();
        self.refresh_kernel_stats(&mut counts)?;
        counts.dropped_writer = self.encoder.dropped;
        self.board.interfaces[self.interface].threads[self.thread].publish(&counts);
        Ok(())
    }

    fn refresh_kernel_stats(&mut self, counts: &mut CaptureCounts) -> Result<(), String> {
        let s = self
            .socket
            .update_stats()
            .map_err(|e| format!("reading socket statistics: {e}"))?;
        counts.ring_accepted = s.accepted;
        counts.dropped_ring = s.dropped;
        Ok(())
    }
}

/// Handles the packets of one block; returns true when the -c budget ran out.
#[inline]
fn process_block(
    block: &ringcap_source::Block<'_>,
    encoder: &mut Encoder,
    sampler: &mut UserSampler,
    snap: Snap,
    max_frame_len: u32,
    budget: Option<&AtomicU64>,
    counts: &mut CaptureCounts,
) -> bool {
    let sample_all = sampler.keeps_all();
    for (i, p) in block.packets().enumerate() {
        // A tag can only go back into a frame that has its MAC addresses.
        let tag = p.vlan.filter(|_| p.data.len() >= 12).map(|v| v.bytes());
        let tag_len = if tag.is_some() { 4 } else { 0 };
        if p.wire_len > max_frame_len {
            counts.merged_by_offload += 1;
        }
        if !sample_all && !sampler.keep(p.data) {
            counts.sampled_out += 1;
            continue;
        }
        if let Some(b) = budget {
            // Only with -c: one atomic per packet is fine for bounded captures.
            if b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_err()
            {
                counts.after_count += u64::from(block.packet_count()) - i as u64;
                return true;
            }
        }
        let wire_len = p.wire_len + tag_len as u32;
        let caplen = snap.keep_len(p.data, tag_len);
        counts.delivered += 1;
        counts.bytes_on_wire += u64::from(wire_len);
        encoder.push(p.ts_ns, wire_len, p.data, tag, caplen);
    }
    budget.is_some_and(|b| b.load(Ordering::Relaxed) == 0)
}
