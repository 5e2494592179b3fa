//! The capture thread's side of the sink: encoding packets into batches.

use crate::batch::{Batch, ALIGN};
use crossbeam_channel::{Receiver, Sender};
pub use ringcap_format::record::copy_with_tag;
use ringcap_format::record::{read_ring_record, Endian, Header, Record, HEADER_LEN};
use ringcap_format::walk::RecordFormat;
use ringcap_format::{pcap, pcapng, TsResolution};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest packet a record may hold (the largest snap length): what a batch
/// may have to leave unused at its end when the next record does not fit.
const MAX_RECORD_DATA: usize = 262_144 + 4;

/// Encodes packets of one capture thread into batches and ships full ones.
pub struct Encoder {
    format: RecordFormat,
    interface_id: u32,
    current: Option<Batch>,
    free: Receiver<Batch>,
    full: Sender<Batch>,
    /// Packets dropped because no free batch was available.
    pub dropped: u64,
    closed: bool,
    blocking: bool,
    placement: Option<(Arc<Vec<AtomicU64>>, usize)>,
    shipped: u64,
    /// Free batches taken from the pool while waiting for room.
    spare: Vec<Batch>,
    /// Batches of this encoder's pool, and the size of each.
    pool_batches: usize,
    batch_capacity: usize,
    /// Most batches in use at once (filled, queued or being written), as
    /// seen by [`has_room`](Self::has_room).
    peak_in_use: usize,
}

/// Packs what the writer publishes per producer for batch placement: bytes of
/// this producer's batches consumed so far, and the output's length modulo
/// [`ALIGN`] after them.
pub fn placement_word(consumed: u64, out_len: u64) -> u64 {
    (consumed << 12) | (out_len % ALIGN as u64)
}

impl Encoder {
    /// An encoder for records of `format` with pcapng interface id `interface_id`,
    /// taking empty batches from `free` and sending full ones to `full`.
    pub fn new(
        format: RecordFormat,
        interface_id: u32,
        free: Receiver<Batch>,
        full: Sender<Batch>,
    ) -> Encoder {
        let pool_batches = free.len();
        let current = free.try_recv().ok();
        let batch_capacity = current.as_ref().map_or(0, Batch::capacity);
        Encoder {
            spare: Vec::with_capacity(pool_batches),
            pool_batches,
            batch_capacity,
            peak_in_use: 0,
            format,
            interface_id,
            current,
            free,
            full,
            dropped: 0,
            closed: false,
            blocking: false,
            placement: None,
            shipped: 0,
        }
    }

    /// Places each new batch's data at the page offset it will have in the
    /// output file (so the O_DIRECT writer need not copy it), using what the
    /// writer publishes in `hints[producer]`.
    pub fn set_placement(&mut self, hints: Arc<Vec<AtomicU64>>, producer: usize) {
        self.placement = Some((hints, producer));
        if matches!(&self.current, Some(b) if b.is_empty()) {
            self.place_current();
        }
    }

    fn place(&self, batch: &mut Batch) {
        if let Some((hints, i)) = &self.placement {
            let word = hints[*i].load(Ordering::Acquire);
            let (consumed, at) = (word >> 12, word & (ALIGN as u64 - 1));
            let offset = (at + self.shipped.wrapping_sub(consumed)) % ALIGN as u64;
            batch.clear_at(offset as usize);
        }
    }

    /// Makes the encoder wait for a free batch instead of dropping (offline
    /// use, where the source can wait and nothing may be lost).
    pub fn set_blocking(&mut self, blocking: bool) {
        self.blocking = blocking;
        if blocking && self.current.is_none() {
            self.current = self.free.recv().ok();
            self.place_current();
        }
    }

    /// Bytes a record with `caplen` bytes of data takes.
    #[inline]
    pub fn record_len(&self, caplen: usize) -> usize {
        match self.format {
            RecordFormat::Pcap(_) => pcap::RECORD_HEADER_LEN + caplen,
            RecordFormat::Pcapng => pcapng::epb_len(caplen),
        }
    }

    /// Encodes one packet (see [`Record`]): `caplen` bytes made of `data`,
    /// with `tag` (a VLAN tag the kernel stripped) put back after the two MAC
    /// addresses. Returns
    /// the record's packet bytes (for in-place transforms), or `None` if the
    /// packet had to be dropped (no free batch).
    #[inline]
    pub fn push(&mut self, rec: Record<'_>) -> Option<&mut [u8]> {
        let Record {
            ts_ns,
            wire_len,
            data,
            tag,
            caplen,
        } = rec;
        let need = self.record_len(caplen);
        let fits = matches!(&self.current, Some(b) if b.remaining() >= need && !b.coded);
        if !fits && !self.next_batch(need) {
            self.dropped += 1;
            return None;
        }
        let Some(batch) = self.current.as_mut() else {
            self.dropped += 1;
            return None;
        };
        if batch.started.is_none() {
            batch.started = Some(Instant::now());
        }
        let start = batch.len();
        let rec = batch.reserve(need);
        let body_at = match self.format {
            RecordFormat::Pcap(res) => {
                pcap::write_record_header(rec, ts_ns, caplen as u32, wire_len, res);
                pcap::RECORD_HEADER_LEN
            }
            RecordFormat::Pcapng => {
                pcapng::write_epb_header(rec, self.interface_id, ts_ns, caplen as u32, wire_len);
                pcapng::EPB_DATA_OFFSET
            }
        };
        copy_with_tag(&mut rec[body_at..], data, tag, caplen);
        if let RecordFormat::Pcapng = self.format {
            pcapng::write_epb_trailer(rec, caplen as u32);
        }
        batch.commit(need);
        batch.last_ts = ts_ns;
        Some(batch.record_mut(start + body_at, caplen))
    }

    /// Appends `records`: whole pcap records as ringcapd hands them to its
    /// clients (16-byte little-endian headers with nanosecond timestamps,
    /// then the captured bytes, back to back). For a pcap output the records
    /// are copied in runs (one copy per run that fits the current batch, not
    /// per packet), then each header is put into the file's byte order and
    /// resolution; other outputs take them one by one. Returns how many were
    /// kept; the others were dropped (no free batch) and are counted in
    /// [`dropped`](Self::dropped). A record running past the end of
    /// `records` ends the call: it and anything after it are not kept (and
    /// not counted: callers hand over records they checked).
    pub fn push_pcap_records(&mut self, records: &[u8]) -> u64 {
        // Length of the record at the start of `r`, if it is whole.
        let record = |r: &[u8]| read_ring_record(r).map(|(_, len)| len);
        let RecordFormat::Pcap(res) = self.format else {
            let mut kept = 0;
            let mut rest = records;
            while let Some((rec, len)) = read_ring_record(rest) {
                if self.push(rec).is_some() {
                    kept += 1;
                }
                rest = &rest[len..];
            }
            return kept;
        };
        let mut kept = 0u64;
        let mut rest = records;
        while let Some(first) = record(rest) {
            let fits = matches!(&self.current, Some(b) if b.remaining() >= first && !b.coded);
            if !fits && !self.next_batch(first) {
                // No room: the rest is dropped.
                let mut r = rest;
                while let Some(len) = record(r) {
                    self.dropped += 1;
                    r = &r[len..];
                }
                return kept;
            }
            let Some(batch) = self.current.as_mut() else {
                return kept;
            };
            // The longest run of whole records that fits the batch.
            let room = batch.remaining();
            let (mut take, mut n, mut last) = (0usize, 0u64, 0usize);
            while let Some(len) = record(&rest[take..]) {
                if take + len > room {
                    break;
                }
                last = take;
                take += len;
                n += 1;
            }
            let dst = batch.reserve(take);
            dst.copy_from_slice(&rest[..take]);
            let mut at = 0;
            while at < take {
                let h = &mut dst[at..at + HEADER_LEN];
                let Some(ring) = Header::read(h, Endian::Little) else {
                    break;
                };
                let mut file = ring;
                if res == TsResolution::Micro {
                    file.frac /= 1_000;
                }
                file.write(h, Endian::Host);
                at += HEADER_LEN + ring.caplen as usize;
            }
            if batch.started.is_none() {
                batch.started = Some(Instant::now());
            }
            if let Some(l) = Header::read(&rest[last..], Endian::Little) {
                batch.last_ts = l.ts_ns();
            }
            batch.commit_records(take, n);
            kept += n;
            rest = &rest[take..];
        }
        kept
    }

    /// Appends `block`: one whole ringcap-compress block of `packets`
    /// records whose first timestamp is `first_ts_ns`, coded elsewhere for
    /// an output like this one (ringcapd's compressed stream into a
    /// compressed file with nanosecond timestamps), to be written as it is:
    /// no decoding and coding again. Blocks and records never share a
    /// batch. False if it was dropped (no free batch; counted in
    /// [`dropped`](Self::dropped)).
    pub fn push_coded_block(&mut self, block: &[u8], packets: u32, first_ts_ns: u64) -> bool {
        let fits = matches!(&self.current,
            Some(b) if b.remaining() >= block.len() && (b.coded || b.is_empty()));
        if !fits && !self.next_batch(block.len()) {
            self.dropped += u64::from(packets);
            return false;
        }
        let Some(batch) = self.current.as_mut() else {
            self.dropped += u64::from(packets);
            return false;
        };
        batch.coded = true;
        if batch.started.is_none() {
            batch.started = Some(Instant::now());
        }
        batch.reserve(block.len()).copy_from_slice(block);
        batch.commit_records(block.len(), u64::from(packets));
        batch.last_ts = first_ts_ns;
        true
    }

    /// Sets the pcapng interface id of the records that follow (a source
    /// with several input interfaces, such as a pcapng file).
    #[inline]
    pub fn set_interface_id(&mut self, id: u32) {
        self.interface_id = id;
    }

    /// Sends the current batch (if not empty) to the writer now.
    pub fn flush(&mut self) {
        if matches!(&self.current, Some(b) if !b.is_empty()) {
            if let Some(b) = self.current.take() {
                self.ship(b);
            }
        }
        if self.current.is_none() {
            self.current = self.take_free();
            self.place_current();
        }
    }

    fn take_free(&mut self) -> Option<Batch> {
        self.spare.pop().or_else(|| self.free.try_recv().ok())
    }

    /// True when `bytes` of packets will fit in the current batch and the
    /// free ones, however they fall into records (each batch may leave up
    /// to one largest record unused at its end): a capture thread that can
    /// leave a ring block with the kernel does so while this is false.
    /// Also true when every batch is free (nothing more will come back), and
    /// after [`close`](Self::close). Notes how many batches were in use.
    pub fn has_room(&mut self, bytes: usize) -> bool {
        if self.closed {
            return true;
        }
        let free = self.free.len() + self.spare.len();
        let idle = free + usize::from(matches!(&self.current, Some(b) if b.is_empty()));
        self.peak_in_use = self.peak_in_use.max(self.pool_batches.saturating_sub(idle));
        let slack = self.record_len(MAX_RECORD_DATA.min(bytes));
        let room = self
            .current
            .as_ref()
            .map_or(0, |b| b.remaining().saturating_sub(slack))
            + free * self.batch_capacity.saturating_sub(slack);
        room >= bytes || idle >= self.pool_batches
    }

    /// Waits up to `timeout` for the writer to give a batch back.
    pub fn wait_room(&mut self, timeout: Duration) {
        if self.spare.len() < self.spare.capacity() {
            if let Ok(b) = self.free.recv_timeout(timeout) {
                self.spare.push(b);
            }
        } else {
            std::thread::sleep(timeout);
        }
    }

    /// (most bytes of this encoder's batches in use at once so far, bytes of
    /// all of them).
    pub fn buffer_use(&self) -> (u64, u64) {
        let cap = self.batch_capacity as u64;
        (
            self.peak_in_use as u64 * cap,
            self.pool_batches as u64 * cap,
        )
    }

    /// When the current batch got its first record, if it has any.
    pub fn oldest(&self) -> Option<Instant> {
        self.current.as_ref().and_then(|b| b.started)
    }

    /// Ships what is left; the encoder drops further packets.
    pub fn close(&mut self) {
        self.flush();
        self.current = None;
        self.closed = true;
    }

    fn place_current(&mut self) {
        if let Some(mut b) = self.current.take() {
            self.place(&mut b);
            self.current = Some(b);
        }
    }

    fn ship(&mut self, b: Batch) {
        self.shipped += b.len() as u64;
        // The writer holds the receiving end until every encoder is closed; if
        // it has died the batch is lost with it and the error is reported there.
        let _ = self.full.send(b);
    }

    fn next_batch(&mut self, need: usize) -> bool {
        if self.closed {
            return false;
        }
        if let Some(b) = self.current.take() {
            if b.is_empty() {
                // An empty batch too small for this record: the record is larger
                // than any batch; it cannot be kept.
                self.current = Some(b);
                return false;
            }
            self.ship(b);
        }
        self.current = match self.spare.pop() {
            Some(b) => Some(b),
            None if self.blocking => self.free.recv().ok(),
            None => self.free.try_recv().ok(),
        };
        self.place_current();
        matches!(&self.current, Some(b) if b.remaining() >= need)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use ringcap_format::TsResolution;

    fn pool(n: usize, size: usize) -> (Sender<Batch>, Receiver<Batch>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        for _ in 0..n {
            tx.send(Batch::new(size, 0, 0)).unwrap();
        }
        (tx, rx)
    }

    /// What the batches that reached the writer hold, in order.
    fn shipped(mut e: Encoder, full: &Receiver<Batch>) -> (Vec<u8>, u64) {
        e.close();
        let (mut bytes, mut packets) = (Vec::new(), 0);
        while let Ok(b) = full.try_recv() {
            bytes.extend_from_slice(b.bytes());
            packets += b.packets;
        }
        (bytes, packets)
    }

    #[test]
    fn daemon_records_in_bulk_equal_records_one_by_one() {
        // Records as ringcapd writes them: little-endian, nanoseconds, of
        // lengths that split across small batches in various places.
        let mut records = Vec::new();
        let mut packets = Vec::new();
        for i in 0..300u32 {
            let caplen = (i * 37 % 200) as usize;
            let ts = 1_700_000_000_123_456_789u64 + u64::from(i) * 1_000_777;
            let data: Vec<u8> = (0..caplen).map(|j| (i as usize + j) as u8).collect();
            records.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
            records.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
            records.extend_from_slice(&(caplen as u32).to_le_bytes());
            records.extend_from_slice(&(caplen as u32 + 7).to_le_bytes());
            records.extend_from_slice(&data);
            packets.push((ts, caplen as u32 + 7, data));
        }
        for format in [
            RecordFormat::Pcap(TsResolution::Micro),
            RecordFormat::Pcap(TsResolution::Nano),
            RecordFormat::Pcapng,
        ] {
            for (batches, size) in [(64, 4096), (4, 4096), (2, 1 << 20)] {
                let run = |bulk: bool| {
                    let (_free_tx, free_rx) = pool(batches, size);
                    let (full_tx, full_rx) = crossbeam_channel::unbounded();
                    let mut e = Encoder::new(format, 0, free_rx, full_tx);
                    let kept = if bulk {
                        // In three pieces, as three chunks would come.
                        let cut = |n: usize| {
                            let mut at = 0;
                            for _ in 0..n {
                                let caplen = u32::from_le_bytes(
                                    records[at + 8..at + 12].try_into().unwrap(),
                                );
                                at += 16 + caplen as usize;
                            }
                            at
                        };
                        let (a, b) = (cut(100), cut(101));
                        e.push_pcap_records(&records[..a])
                            + e.push_pcap_records(&records[a..b])
                            + e.push_pcap_records(&records[b..])
                    } else {
                        packets
                            .iter()
                            .filter(|(ts, wire, d)| e.push(Record::whole(*ts, *wire, d)).is_some())
                            .count() as u64
                    };
                    let dropped = e.dropped;
                    let (bytes, n) = shipped(e, &full_rx);
                    assert_eq!(n, kept, "{format:?}");
                    (bytes, kept, dropped)
                };
                let (bulk, one) = (run(true), run(false));
                assert_eq!(bulk.1 + bulk.2, 300, "{format:?} {batches}x{size}");
                assert_eq!(bulk, one, "{format:?} {batches}x{size}");
            }
        }
        // A record running past the end is not kept.
        let (_free_tx, free_rx) = pool(2, 1 << 20);
        let (full_tx, _full_rx) = crossbeam_channel::unbounded();
        let mut e = Encoder::new(RecordFormat::Pcap(TsResolution::Nano), 0, free_rx, full_tx);
        let first = 16 + packets[0].2.len();
        assert_eq!(e.push_pcap_records(&records[..first + 20]), 1);
    }

    #[test]
    fn vlan_tag_goes_back_after_macs() {
        let mut dst = [0u8; 20];
        let data: Vec<u8> = (0..16).collect();
        copy_with_tag(&mut dst, &data, Some([0x81, 0, 0, 5]), 20);
        assert_eq!(&dst[..12], &data[..12]);
        assert_eq!(&dst[12..16], &[0x81, 0, 0, 5]);
        assert_eq!(&dst[16..20], &data[12..16]);
        let mut short = [0u8; 14];
        copy_with_tag(&mut short, &data, Some([0x81, 0, 0, 5]), 14);
        assert_eq!(&short[12..14], &[0x81, 0]);
    }

    #[test]
    fn full_batches_ship_and_empty_pool_drops() {
        let (_free_tx, free_rx) = pool(2, 4096);
        let (full_tx, full_rx) = crossbeam_channel::unbounded();
        let mut e = Encoder::new(RecordFormat::Pcap(TsResolution::Nano), 0, free_rx, full_tx);
        let data = [7u8; 1000];
        let mut kept = 0;
        for i in 0..10 {
            if e.push(Record::whole(i, 1000, &data)).is_some() {
                kept += 1;
            }
        }
        // 4 records of 1016 bytes fit in a 4096-byte batch; two batches.
        assert_eq!(kept, 8);
        assert_eq!(e.dropped, 2);
        e.close();
        let batches: Vec<Batch> = full_rx.try_iter().collect();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches.iter().map(|b| b.packets).sum::<u64>(), 8);
        assert_eq!(&batches[0].bytes()[16..20], &[7, 7, 7, 7]);
    }

    #[test]
    fn room_for_a_block_counts_free_batches_and_their_slack() {
        let (free_tx, free_rx) = pool(3, 64 << 10);
        let (full_tx, full_rx) = crossbeam_channel::unbounded();
        let mut e = Encoder::new(RecordFormat::Pcap(TsResolution::Nano), 0, free_rx, full_tx);
        let block = 16 << 10;
        // All three batches free: room for a block; nothing in use yet.
        assert!(e.has_room(block));
        assert_eq!(e.buffer_use(), (0, 3 * (64 << 10)));
        // Everything free: true even for more than the pool could ever hold.
        assert!(e.has_room(1 << 30));
        let data = [1u8; 1000];
        let mut kept = 0;
        while e.push(Record::whole(kept, 1000, &data)).is_some() {
            kept += 1;
        }
        assert_eq!(e.dropped, 1);
        // No batch free and the current one full: no room, three in use.
        assert!(!e.has_room(block));
        assert_eq!(e.buffer_use().0, 3 * (64 << 10));
        // The writer gives one back: a batch (less one largest record of
        // the block) is room for the block.
        let mut b = full_rx.try_recv().unwrap();
        b.clear();
        free_tx.send(b).unwrap();
        assert!(e.has_room(block));
        assert!(!e.has_room(60 << 10), "64 KiB less a 60 KiB record's slack");
        // Waiting takes it as a spare, which the next record goes into.
        e.wait_room(std::time::Duration::from_millis(10));
        assert!(e.has_room(block));
        assert!(e.push(Record::whole(kept, 1000, &data)).is_some());
        assert_eq!(e.dropped, 1);
        // A closed encoder never holds the source back.
        e.close();
        assert!(e.has_room(1 << 30));
    }

    #[test]
    fn pcapng_records_are_walkable() {
        let (_t, free_rx) = pool(1, 8192);
        let (full_tx, full_rx) = crossbeam_channel::unbounded();
        let mut e = Encoder::new(RecordFormat::Pcapng, 3, free_rx, full_tx);
        assert!(e
            .push(Record::whole(1_000_000_007, 61, &[1u8; 61]))
            .is_some());
        assert!(e
            .push(Record {
                ts_ns: 2_000_000_009,
                wire_len: 64,
                data: &[2u8; 60],
                tag: Some([0x81, 0, 0, 1]),
                caplen: 64,
            })
            .is_some());
        e.close();
        let b = full_rx.try_recv().unwrap();
        let (len, ts) =
            ringcap_format::walk::record_at(RecordFormat::Pcapng, b.bytes(), 0).unwrap();
        assert_eq!(len, pcapng::epb_len(61));
        assert_eq!(ts, Some(1_000_000_007));
        let (len2, ts2) =
            ringcap_format::walk::record_at(RecordFormat::Pcapng, b.bytes(), len).unwrap();
        assert_eq!(len + len2, b.len());
        assert_eq!(ts2, Some(2_000_000_009));
    }
}
