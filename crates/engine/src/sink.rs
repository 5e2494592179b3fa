//! The sink interface of a capture thread: where kept packets go. The file
//! path is `ringcap_sink`'s [`Encoder`] (records into batches for the writer
//! thread); other front ends bring their own (the daemon's per-client
//! shared-memory rings) through a [`SinkFactory`]. The capture thread is
//! generic over the sink, so the file path pays no indirect call.

use ringcap_sink::Encoder;
use std::sync::Arc;
use std::time::Instant;

/// Where one capture thread puts kept packets.
pub trait PacketSink: Send {
    /// Keeps one packet: `caplen` bytes of `data` (with `tag`, a VLAN tag the
    /// kernel stripped, put back after the MAC addresses) that was `wire_len`
    /// bytes long. Returns the kept bytes, for in-place transforms, or `None`
    /// when the packet had to be dropped (and counted in [`dropped`](Self::dropped)).
    fn push(
        &mut self,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
        tag: Option<[u8; 4]>,
        caplen: usize,
    ) -> Option<&mut [u8]>;
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
}

impl PacketSink for Encoder {
    #[inline]
    fn push(
        &mut self,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
        tag: Option<[u8; 4]>,
        caplen: usize,
    ) -> Option<&mut [u8]> {
        Encoder::push(self, ts_ns, wire_len, data, tag, caplen)
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
}

impl PacketSink for Box<dyn PacketSink> {
    #[inline]
    fn push(
        &mut self,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
        tag: Option<[u8; 4]>,
        caplen: usize,
    ) -> Option<&mut [u8]> {
        (**self).push(ts_ns, wire_len, data, tag, caplen)
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
