//! [`PacketSink`]: where one capture thread puts kept packets. The file
//! path is this crate's [`Encoder`] (records into batches for the writer
//! thread); other front ends bring their own (the daemon's per-client
//! shared-memory rings) through a [`SinkFactory`]. The capture thread is
//! generic over the sink, so the file path pays no indirect call.

use crate::Encoder;
use ringcap_format::record::Record;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where one capture thread puts kept packets.
pub trait PacketSink: Send {
    /// Keeps one packet (see [`Record`]). Returns the kept bytes, for
    /// in-place transforms, or `None` when the packet had to be dropped (and
    /// counted in [`dropped`](Self::dropped)).
    fn push(&mut self, rec: Record<'_>) -> Option<&mut [u8]>;
    /// Keeps `packets` packets at once: `records`, whole records as
    /// [`write_ring_record`](ringcap_format::record::write_ring_record) makes them (the daemon's hub makes a group's records
    /// once for every subscriber that keeps them alike). False when this sink
    /// only keeps packets one by one (the default, and when rate limits or
    /// transforms are in the way); then nothing was taken.
    fn push_records(&mut self, records: &[u8], packets: u32) -> bool {
        let _ = (records, packets);
        false
    }
    /// As [`push_records`](Self::push_records) for `packets` records of
    /// `len` bytes in all that `build` writes straight where the sink keeps
    /// them (no copy made first). False, without calling `build`, when this
    /// sink only keeps packets one by one (the default).
    fn push_built(&mut self, len: usize, packets: u32, build: &mut dyn FnMut(&mut [u8])) -> bool {
        let _ = (len, packets, build);
        false
    }
    /// Hands over what is buffered now.
    fn flush(&mut self);
    /// When the oldest buffered packet came, if any is buffered.
    fn oldest(&self) -> Option<Instant>;
    /// Hands over what is left; later packets are dropped.
    fn close(&mut self);
    /// Packets dropped so far for want of room.
    fn dropped(&self) -> u64;
    /// Sets the output interface of the packets that follow (files with
    /// several interfaces).
    fn set_interface_id(&mut self, id: u32);
    /// True when `bytes` of packets (a whole ring block) can be kept now
    /// without dropping any. While it is false a source that can wait leaves
    /// its packets with the kernel (backpressure). Sinks that must never
    /// make the source wait say true (the default: the daemon's per-client
    /// rings, where one slow client must not hold the ring all share).
    fn has_room(&mut self, bytes: usize) -> bool {
        let _ = bytes;
        true
    }
    /// Waits up to `timeout` for buffer room to come back.
    fn wait_room(&mut self, timeout: Duration) {
        std::thread::sleep(timeout);
    }
    /// (most bytes of the buffer in use at once so far, its size), for
    /// sinks with a buffer of their own between the source and the output.
    fn buffer_use(&self) -> Option<(u64, u64)> {
        None
    }
}

impl PacketSink for Encoder {
    #[inline]
    fn push(&mut self, rec: Record<'_>) -> Option<&mut [u8]> {
        Encoder::push(self, rec)
    }
    fn flush(&mut self) {
        Encoder::flush(self)
    }
    fn oldest(&self) -> Option<Instant> {
        Encoder::oldest(self)
    }
    fn close(&mut self) {
        Encoder::close(self)
    }
    fn dropped(&self) -> u64 {
        self.dropped
    }
    #[inline]
    fn set_interface_id(&mut self, id: u32) {
        Encoder::set_interface_id(self, id)
    }
    fn has_room(&mut self, bytes: usize) -> bool {
        Encoder::has_room(self, bytes)
    }
    fn wait_room(&mut self, timeout: Duration) {
        Encoder::wait_room(self, timeout)
    }
    fn buffer_use(&self) -> Option<(u64, u64)> {
        Some(Encoder::buffer_use(self))
    }
}

impl PacketSink for Box<dyn PacketSink> {
    #[inline]
    fn push(&mut self, rec: Record<'_>) -> Option<&mut [u8]> {
        (**self).push(rec)
    }
    #[inline]
    fn push_records(&mut self, records: &[u8], packets: u32) -> bool {
        (**self).push_records(records, packets)
    }
    #[inline]
    fn push_built(&mut self, len: usize, packets: u32, build: &mut dyn FnMut(&mut [u8])) -> bool {
        (**self).push_built(len, packets, build)
    }
    fn flush(&mut self) {
        (**self).flush()
    }
    fn oldest(&self) -> Option<Instant> {
        (**self).oldest()
    }
    fn close(&mut self) {
        (**self).close()
    }
    fn dropped(&self) -> u64 {
        (**self).dropped()
    }
    fn set_interface_id(&mut self, id: u32) {
        (**self).set_interface_id(id)
    }
    fn has_room(&mut self, bytes: usize) -> bool {
        (**self).has_room(bytes)
    }
    fn wait_room(&mut self, timeout: Duration) {
        (**self).wait_room(timeout)
    }
    fn buffer_use(&self) -> Option<(u64, u64)> {
        (**self).buffer_use()
    }
}

/// Makes the sink of each capture thread of a capture whose packets do not
/// go to files.
pub trait SinkFactory: Send + Sync {
    /// The sink of the `thread`th capture thread of input `input`, whose
    /// packets have link type `linktype`.
    fn make(&self, input: usize, thread: usize, linktype: u32) -> Box<dyn PacketSink>;
}

/// A capture's sink factory, shared.
pub type SharedSinkFactory = Arc<dyn SinkFactory>;
