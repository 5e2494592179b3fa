//! Accounting: every packet has a place.
//!
//! Each stage publishes its counts into a [`Board`] of 64-bit counters per
//! interface. Capture threads count locally and publish once per ring block
//! (plain relaxed stores, no lock and no atomic read-modify-write per packet);
//! the writer publishes after each batch. A reporter reads the board for the
//! live status line, the JSON interval records and the final report.

pub mod report;

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// The counters of one interface (or their sum), by stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Packets the interface itself counted (sysfs rx+tx packets, delta since start).
    pub packets_seen_by_interface: u64,
    /// Packets the interface dropped (rx_dropped + rx_missed_errors + rx_fifo_errors delta).
    pub packets_dropped_by_interface: u64,
    /// Packets the filter accepted (before sampling).
    pub packets_filter_accepted: u64,
    /// Packets lost because the kernel ring was full.
    pub packets_dropped_ring: u64,
    /// Packets left out by sampling.
    pub packets_sampled_out: u64,
    /// Packets refused by a daemon session's rate limits (0 for local captures).
    pub packets_rate_limited: u64,
    /// Packets a daemon dropped because its client's ring was full (0 for
    /// local captures).
    pub packets_dropped_client: u64,
    /// Packets that reached user space and were kept by every stage.
    pub packets_delivered: u64,
    /// Packets read from the ring after the `-c` count was reached: not kept.
    pub packets_after_count: u64,
    /// Packets the kernel accepted that the capture has not read (local
    /// captures): in flight while it runs; in the final counts, those that
    /// came after it stopped (a signal, `-c`, `--duration`) and stayed in
    /// the ring, neither delivered nor dropped, nor lost. With them the
    /// counts add up: accepted = sampled out + dropped in the ring +
    /// delivered + read after the `-c` count + not read.
    pub packets_not_read: u64,
    /// Packets written to the output.
    pub packets_written: u64,
    /// Packets the writer could not keep: it failed (an I/O error), or it
    /// was still stalled when the capture stopped. A live capture waits for
    /// the writer's buffers by leaving packets in the kernel ring, so a
    /// writer that falls behind shows as ring drops, not here.
    pub packets_dropped_writer: u64,
    /// Delivered packets longer than the MTU allows: merged by GRO/LRO/GSO.
    pub packets_merged_by_offload: u64,
    /// Bytes of the delivered packets as they were on the wire.
    pub bytes_on_wire: u64,
    /// Bytes written to the output (records and headers).
    pub bytes_written: u64,
    /// Most kernel ring blocks full and waiting to be read at once (summed
    /// over capture threads, each its own peak): how much of the ring a
    /// stall used.
    pub ring_blocks_high_water: u64,
    /// Blocks of the kernel rings.
    pub ring_blocks: u64,
    /// Most bytes of the writer's buffers in use at once (filled, queued or
    /// being written; summed over capture threads, each its own peak).
    pub writer_buffer_high_water_bytes: u64,
    /// Bytes of the writer's buffers.
    pub writer_buffer_bytes: u64,
}

impl Counters {
    /// Field-wise sum.
    pub fn add(&mut self, o: &Counters) {
        self.packets_seen_by_interface += o.packets_seen_by_interface;
        self.packets_dropped_by_interface += o.packets_dropped_by_interface;
        self.packets_filter_accepted += o.packets_filter_accepted;
        self.packets_dropped_ring += o.packets_dropped_ring;
        self.packets_sampled_out += o.packets_sampled_out;
        self.packets_rate_limited += o.packets_rate_limited;
        self.packets_dropped_client += o.packets_dropped_client;
        self.packets_delivered += o.packets_delivered;
        self.packets_after_count += o.packets_after_count;
        self.packets_not_read += o.packets_not_read;
        self.packets_written += o.packets_written;
        self.packets_dropped_writer += o.packets_dropped_writer;
        self.packets_merged_by_offload += o.packets_merged_by_offload;
        self.bytes_on_wire += o.bytes_on_wire;
        self.bytes_written += o.bytes_written;
        self.ring_blocks_high_water += o.ring_blocks_high_water;
        self.ring_blocks += o.ring_blocks;
        self.writer_buffer_high_water_bytes += o.writer_buffer_high_water_bytes;
        self.writer_buffer_bytes += o.writer_buffer_bytes;
    }

    /// Packets that matched the filter and were sampled in but are not in the
    /// output: ring drops plus writer drops.
    pub fn lost(&self) -> u64 {
        self.packets_dropped_ring + self.packets_dropped_client + self.packets_dropped_writer
    }

    /// Lost packets as a percentage of those that should have been kept
    /// (not those that came after the stop).
    pub fn lost_pct(&self) -> f64 {
        let wanted = self.packets_filter_accepted.saturating_sub(
            self.packets_sampled_out
                + self.packets_after_count
                + self.packets_rate_limited
                + self.packets_not_read,
        );
        if wanted == 0 {
            0.0
        } else {
            100.0 * self.lost() as f64 / wanted as f64
        }
    }
}

/// What a capture thread counts (published per block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureCounts {
    /// Packets the socket's program accepted: delivered to the ring or dropped
    /// there (kernel counter, accumulated). Without kernel sampling this is the
    /// filter-accepted count.
    pub ring_accepted: u64,
    /// Ring drops (kernel counter, accumulated).
    pub dropped_ring: u64,
    /// Sampled out.
    pub sampled_out: u64,
    /// Delivered.
    pub delivered: u64,
    /// Read after the -c count was reached.
    pub after_count: u64,
    /// Dropped for want of a free output buffer.
    pub dropped_writer: u64,
    /// Longer than the MTU.
    pub merged_by_offload: u64,
    /// Wire bytes of delivered packets.
    pub bytes_on_wire: u64,
    /// Most ring blocks waiting to be read at once.
    pub ring_blocks_high_water: u64,
    /// Blocks of the ring.
    pub ring_blocks: u64,
    /// Most bytes of the output buffers in use at once.
    pub writer_buffer_high_water: u64,
    /// Bytes of the output buffers.
    pub writer_buffer_bytes: u64,
}

/// One capture thread's published counts: written only by that thread.
#[derive(Debug, Default)]
pub struct CaptureSlot {
    ring_accepted: AtomicU64,
    dropped_ring: AtomicU64,
    sampled_out: AtomicU64,
    delivered: AtomicU64,
    after_count: AtomicU64,
    dropped_writer: AtomicU64,
    merged_by_offload: AtomicU64,
    bytes_on_wire: AtomicU64,
    ring_blocks_high_water: AtomicU64,
    ring_blocks: AtomicU64,
    writer_buffer_high_water: AtomicU64,
    writer_buffer_bytes: AtomicU64,
}

impl CaptureSlot {
    /// Publishes the thread's running totals.
    pub fn publish(&self, c: &CaptureCounts) {
        self.ring_accepted.store(c.ring_accepted, Ordering::Relaxed);
        self.dropped_ring.store(c.dropped_ring, Ordering::Relaxed);
        self.sampled_out.store(c.sampled_out, Ordering::Relaxed);
        self.delivered.store(c.delivered, Ordering::Relaxed);
        self.after_count.store(c.after_count, Ordering::Relaxed);
        self.dropped_writer
            .store(c.dropped_writer, Ordering::Relaxed);
        self.merged_by_offload
            .store(c.merged_by_offload, Ordering::Relaxed);
        self.bytes_on_wire.store(c.bytes_on_wire, Ordering::Relaxed);
        self.ring_blocks_high_water
            .store(c.ring_blocks_high_water, Ordering::Relaxed);
        self.ring_blocks.store(c.ring_blocks, Ordering::Relaxed);
        self.writer_buffer_high_water
            .store(c.writer_buffer_high_water, Ordering::Relaxed);
        self.writer_buffer_bytes
            .store(c.writer_buffer_bytes, Ordering::Relaxed);
    }

    fn read_into(&self, c: &mut Counters) {
        c.packets_filter_accepted += self.ring_accepted.load(Ordering::Relaxed);
        c.packets_dropped_ring += self.dropped_ring.load(Ordering::Relaxed);
        c.packets_sampled_out += self.sampled_out.load(Ordering::Relaxed);
        c.packets_delivered += self.delivered.load(Ordering::Relaxed);
        c.packets_after_count += self.after_count.load(Ordering::Relaxed);
        c.packets_dropped_writer += self.dropped_writer.load(Ordering::Relaxed);
        c.packets_merged_by_offload += self.merged_by_offload.load(Ordering::Relaxed);
        c.bytes_on_wire += self.bytes_on_wire.load(Ordering::Relaxed);
        c.ring_blocks_high_water += self.ring_blocks_high_water.load(Ordering::Relaxed);
        c.ring_blocks += self.ring_blocks.load(Ordering::Relaxed);
        c.writer_buffer_high_water_bytes += self.writer_buffer_high_water.load(Ordering::Relaxed);
        c.writer_buffer_bytes += self.writer_buffer_bytes.load(Ordering::Relaxed);
    }
}

/// The counters of one interface.
#[derive(Debug, Default)]
pub struct InterfaceBoard {
    /// Interface name.
    pub name: String,
    /// One slot per capture thread of this interface.
    pub threads: Vec<CaptureSlot>,
    /// Packets written (published by the writer).
    pub written: AtomicU64,
    /// Bytes written for this interface's packets (records only).
    pub bytes_written: AtomicU64,
    /// Packets the writer had to give up on (I/O error), added to writer drops.
    pub write_failed: AtomicU64,
    /// Interface counters at start (seen, dropped).
    pub interface_base: (AtomicU64, AtomicU64),
    /// Interface counters now (seen, dropped), published by the reporter.
    pub interface_now: (AtomicU64, AtomicU64),
    /// True when sampling runs in the kernel program: the ring then sees only
    /// sampled-in packets and `filter_count` holds the filter-only count.
    pub kernel_sampling: std::sync::atomic::AtomicBool,
    /// Filter-accepted packets counted by a separate filter-only socket.
    pub filter_count: AtomicU64,
}

/// All counters of a capture.
#[derive(Debug, Default)]
pub struct Board {
    /// Per interface, in capture order.
    pub interfaces: Vec<InterfaceBoard>,
    /// File-level bytes (headers, statistics blocks) not owned by one interface.
    pub overhead_bytes: AtomicU64,
}

impl Board {
    /// A board for `interfaces` (name, number of capture threads).
    pub fn new(interfaces: &[(String, usize)]) -> Board {
        Board {
            interfaces: interfaces
                .iter()
                .map(|(name, threads)| InterfaceBoard {
                    name: name.clone(),
                    threads: (0..*threads).map(|_| CaptureSlot::default()).collect(),
                    ..Default::default()
                })
                .collect(),
            overhead_bytes: AtomicU64::new(0),
        }
    }

    /// Records an interface's own counters at start.
    pub fn set_interface_base(&self, i: usize, packets: u64, dropped: u64) {
        let b = &self.interfaces[i];
        b.interface_base.0.store(packets, Ordering::Relaxed);
        b.interface_base.1.store(dropped, Ordering::Relaxed);
        b.interface_now.0.store(packets, Ordering::Relaxed);
        b.interface_now.1.store(dropped, Ordering::Relaxed);
    }

    /// Records an interface's own counters now.
    pub fn set_interface_now(&self, i: usize, packets: u64, dropped: u64) {
        let b = &self.interfaces[i];
        b.interface_now.0.store(packets, Ordering::Relaxed);
        b.interface_now.1.store(dropped, Ordering::Relaxed);
    }

    /// Adds written packets for interface `i` (writer thread).
    pub fn add_written(&self, i: usize, packets: u64, bytes: u64) {
        let b = &self.interfaces[i];
        b.written.fetch_add(packets, Ordering::Relaxed);
        b.bytes_written.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Marks interface `i` as sampled in the kernel and sets its filter-only count.
    pub fn set_filter_count(&self, i: usize, accepted: u64) {
        let b = &self.interfaces[i];
        b.kernel_sampling.store(true, Ordering::Relaxed);
        b.filter_count.store(accepted, Ordering::Relaxed);
    }

    /// Moves `packets` of interface `i` from written to the writer's drops
    /// (they were counted as written, but a failure kept them off the disk).
    pub fn unwrite(&self, i: usize, packets: u64) {
        let b = &self.interfaces[i];
        b.written.fetch_sub(
            packets.min(b.written.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        b.write_failed.fetch_add(packets, Ordering::Relaxed);
    }

    /// Adds packets the writer could not write (I/O error) for interface `i`.
    pub fn add_write_failed(&self, i: usize, packets: u64) {
        self.interfaces[i]
            .write_failed
            .fetch_add(packets, Ordering::Relaxed);
    }

    /// A snapshot of interface `i`.
    pub fn interface(&self, i: usize) -> Counters {
        let b = &self.interfaces[i];
        let mut c = Counters::default();
        for t in &b.threads {
            t.read_into(&mut c);
        }
        if b.kernel_sampling.load(Ordering::Relaxed) {
            // The ring only saw what the kernel sampler kept; the rest of what
            // the filter accepted was sampled out.
            let filtered = b
                .filter_count
                .load(Ordering::Relaxed)
                .max(c.packets_filter_accepted);
            c.packets_sampled_out += filtered - c.packets_filter_accepted;
            c.packets_filter_accepted = filtered;
        }
        c.packets_written = b.written.load(Ordering::Relaxed);
        c.bytes_written = b.bytes_written.load(Ordering::Relaxed);
        c.packets_dropped_writer += b.write_failed.load(Ordering::Relaxed);
        c.packets_seen_by_interface = b
            .interface_now
            .0
            .load(Ordering::Relaxed)
            .saturating_sub(b.interface_base.0.load(Ordering::Relaxed));
        c.packets_dropped_by_interface = b
            .interface_now
            .1
            .load(Ordering::Relaxed)
            .saturating_sub(b.interface_base.1.load(Ordering::Relaxed));
        c.packets_not_read = c.packets_filter_accepted.saturating_sub(
            c.packets_sampled_out
                + c.packets_dropped_ring
                + c.packets_delivered
                + c.packets_after_count,
        );
        c
    }

    /// Snapshots of every interface and their total (file overhead bytes
    /// counted in the total's bytes_written).
    pub fn snapshot(&self) -> (Vec<(String, Counters)>, Counters) {
        let mut total = Counters::default();
        let per: Vec<_> = (0..self.interfaces.len())
            .map(|i| {
                let c = self.interface(i);
                total.add(&c);
                (self.interfaces[i].name.clone(), c)
            })
            .collect();
        total.bytes_written += self.overhead_bytes.load(Ordering::Relaxed);
        (per, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel accepted and nobody read (came after the stop) makes
    /// the counts add up, and is not lost.
    #[test]
    fn packets_not_read_make_the_counts_add_up() {
        let b = Board::new(&[("a".into(), 1)]);
        b.interfaces[0].threads[0].publish(&CaptureCounts {
            ring_accepted: 87,
            delivered: 10,
            after_count: 66,
            ..Default::default()
        });
        let c = b.interface(0);
        assert_eq!(c.packets_not_read, 11);
        assert_eq!(c.lost_pct(), 0.0);
        assert!(
            crate::report::final_report(&[("a".into(), c)], &c, 1.0, true)
                .contains("not read (came after the stop)")
        );
    }

    #[test]
    fn board_sums_threads_and_interfaces() {
        let b = Board::new(&[("a".into(), 2), ("b".into(), 1)]);
        b.set_interface_base(0, 100, 1);
        b.set_interface_now(0, 130, 2);
        b.interfaces[0].threads[0].publish(&CaptureCounts {
            ring_accepted: 10,
            delivered: 9,
            dropped_ring: 1,
            ..Default::default()
        });
        b.interfaces[0].threads[1].publish(&CaptureCounts {
            ring_accepted: 5,
            delivered: 5,
            ..Default::default()
        });
        b.interfaces[1].threads[0].publish(&CaptureCounts {
            ring_accepted: 1,
            delivered: 1,
            ..Default::default()
        });
        b.add_written(0, 14, 1000);
        let (per, total) = b.snapshot();
        assert_eq!(per[0].1.packets_seen_by_interface, 30);
        assert_eq!(per[0].1.packets_dropped_by_interface, 1);
        assert_eq!(per[0].1.packets_delivered, 14);
        assert_eq!(total.packets_filter_accepted, 16);
        assert_eq!(total.packets_written, 14);
        assert_eq!(total.lost(), 1);
    }
}
