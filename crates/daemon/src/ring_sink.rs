//! A session's sink: kept packets go into the client's shared-memory ring as
//! pcap records (16-byte record header with nanosecond timestamps, little
//! endian, then the bytes), a chunk of many packets at a time. A capture
//! thread fills a chunk in its own buffer and appends it to the ring under a
//! lock once per chunk (never per packet); a chunk that does not fit because
//! the client has not read is dropped whole and counted in the ring's
//! header: a slow client loses only its own packets and nobody waits for it.
//! The session's rate limits (token buckets on the packets' timestamps) are
//! applied here, before the copy. Without rate limits or compression the
//! sink also takes runs of ready-made records (`push_records`: the hub makes
//! a group's records once for every session with the same snap length) and
//! copies each run in one piece.
//!
//! A session that asked for compression gets each chunk as one
//! self-contained ringcap-compress block instead (made from the chunk's
//! records when it is handed over, so transforms have already run on them;
//! nanosecond timestamps, link type Ethernet): a few bytes a packet in the
//! ring instead of the whole record. Its chunks are cut bigger, as each block
//! starts its flow contexts afresh. Encoding costs far more CPU than copying,
//! so it runs on a thread of the session's own at the lowest scheduling
//! class (SCHED_IDLE), fed through a queue of a few chunks: a capture thread
//! shared by every session never waits for it, and when the machine has no
//! time to spare for it the session loses whole chunks of its own (counted as
//! dropped in its ring), never packets of the others.

use ringcap_engine::sink::{write_record, RECORD_HEADER};
use ringcap_engine::{PacketSink, SinkFactory};
use ringcap_shm::RingWriter;
use ringcap_stages::Limits;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// Chunks a compressed session's encoder thread may have queued or in hand.
const COMPRESS_QUEUE: usize = 4;

/// Room for the largest record (a 256 KiB snap length plus its header).
pub const CHUNK_BYTES: usize = (256 << 10) + 64;
/// A chunk is handed over once it holds this much: a few hundred short
/// packets, and small enough that twelve sessions' chunks stay in the CPU's
/// cache until they are copied into the rings.
pub const CHUNK_TARGET: usize = 32 << 10;
/// The same for compressed sessions: more packets a block, so that fewer of
/// them start a flow afresh (still far below the largest block).
pub const COMPRESSED_CHUNK_TARGET: usize = 192 << 10;

/// What a session's sinks count, shared with the session.
#[derive(Debug, Default)]
pub struct SinkCounters {
    /// Refused by the rate limits.
    pub rate_limited: AtomicU64,
    /// Dropped because the client's ring was full.
    pub dropped_client: AtomicU64,
    /// Handed to the client's ring.
    pub delivered: AtomicU64,
    /// Bytes of records handed to the client's ring.
    pub bytes_delivered: AtomicU64,
}

/// Makes the sinks of one session's capture threads.
pub struct RingSinks {
    /// The client's ring.
    pub ring: Arc<Mutex<RingWriter>>,
    /// The session's counters.
    pub counters: Arc<SinkCounters>,
    /// Packets per second allowed (split over the capture threads).
    pub max_pps: Option<u64>,
    /// Bits per second allowed (split over the capture threads).
    pub max_bps: Option<u64>,
    /// Capture threads in all (for splitting the limits).
    pub threads: u64,
    /// Hand chunks over as compressed blocks.
    pub compress: bool,
}

/// A session's capture limits: each bucket holds one second of its rate.
fn limits(pps: Option<u64>, bps: Option<u64>) -> Limits {
    let mut l = Limits::none();
    if let Some(r) = pps {
        l = l.packets(r, r);
    }
    if let Some(r) = bps {
        l = l.bits(r, r);
    }
    l
}

impl SinkFactory for RingSinks {
    fn make(&self, _input: usize, _thread: usize, _linktype: u32) -> Box<dyn PacketSink> {
        let n = self.threads.max(1);
        Box::new(RingSink {
            ring: self.ring.clone(),
            counters: self.counters.clone(),
            limits: limits(
                self.max_pps.map(|r| (r / n).max(1)),
                self.max_bps.map(|r| (r / n).max(1)),
            ),
            buf: vec![0u8; CHUNK_BYTES].into_boxed_slice(),
            len: 0,
            packets: 0,
            started: None,
            dropped: 0,
            closed: false,
            compress: self.compress,
            offload: if self.compress {
                Offload::start(self.ring.clone(), self.counters.clone())
            } else {
                None
            },
        })
    }
}

/// One capture thread's sink.
pub struct RingSink {
    ring: Arc<Mutex<RingWriter>>,
    counters: Arc<SinkCounters>,
    limits: Limits,
    /// The chunk being filled: `buf[..len]`.
    buf: Box<[u8]>,
    len: usize,
    packets: u32,
    started: Option<Instant>,
    dropped: u64,
    closed: bool,
    /// Chunks go over as compressed blocks.
    compress: bool,
    /// A compressed session's encoder thread (`None` with `compress`: it
    /// could not be started, and chunks are dropped and counted).
    offload: Option<Offload>,
}

/// A chunk of records on its way to the encoder thread.
struct Raw {
    buf: Box<[u8]>,
    len: usize,
    packets: u32,
}

/// The encoder thread of a compressed session's sink, and the empty chunk
/// buffers it gives back.
struct Offload {
    to_worker: Option<crossbeam_channel::Sender<Raw>>,
    spare: crossbeam_channel::Receiver<Box<[u8]>>,
    worker: Option<JoinHandle<()>>,
    /// Packets of chunks the encoder thread found no room for in the ring.
    worker_dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl Offload {
    fn start(ring: Arc<Mutex<RingWriter>>, counters: Arc<SinkCounters>) -> Option<Offload> {
        let (to_worker, from_sink) = crossbeam_channel::bounded::<Raw>(COMPRESS_QUEUE);
        let (give_back, spare) = crossbeam_channel::bounded(COMPRESS_QUEUE);
        for _ in 0..COMPRESS_QUEUE - 1 {
            let _ = give_back.send(vec![0u8; CHUNK_BYTES].into_boxed_slice());
        }
        let worker_dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let wd = worker_dropped.clone();
        let worker = std::thread::Builder::new()
            .name("ringcapd-compress".into())
            .spawn(move || {
                // Failing to lower its own priority leaves it at the normal
                // one: still correct, less isolated.
                let _ = crate::sys::lowest_priority();
                let mut c = Compressor {
                    encoder: ringcap_compress::Encoder::new(1),
                    block: Vec::with_capacity(CHUNK_BYTES),
                };
                for raw in from_sink {
                    let block = c.block(&raw.buf[..raw.len]);
                    if !deliver(&ring, &counters, block, raw.packets) {
                        wd.fetch_add(u64::from(raw.packets), Ordering::Relaxed);
                    }
                    let _ = give_back.send(raw.buf);
                }
            })
            .ok()?;
        Some(Offload {
            to_worker: Some(to_worker),
            spare,
            worker: Some(worker),
            worker_dropped,
        })
    }

    /// Hands the chunk in `buf` to the encoder thread, swapping in an empty
    /// buffer; false when none is free (the encoder is behind).
    fn hand_over(&mut self, buf: &mut Box<[u8]>, len: usize, packets: u32) -> bool {
        let Ok(empty) = self.spare.try_recv() else {
            return false;
        };
        let full = std::mem::replace(buf, empty);
        match &self.to_worker {
            Some(tx) => tx
                .try_send(Raw {
                    buf: full,
                    len,
                    packets,
                })
                .is_ok(),
            None => false,
        }
    }

    /// Lets the encoder thread finish what it was given, and waits for it.
    fn finish(&mut self) {
        self.to_worker = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Offload {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Appends one chunk's `payload` holding `packets` to the client's ring and
/// counts it; false when it did not fit (counted as dropped).
fn deliver(
    ring: &Mutex<RingWriter>,
    counters: &SinkCounters,
    payload: &[u8],
    packets: u32,
) -> bool {
    let ok = match ring.lock() {
        Ok(mut r) => r.append(payload, packets),
        Err(_) => false,
    };
    if ok {
        counters
            .delivered
            .fetch_add(u64::from(packets), Ordering::Relaxed);
        counters
            .bytes_delivered
            .fetch_add(payload.len() as u64, Ordering::Relaxed);
    } else {
        counters
            .dropped_client
            .fetch_add(u64::from(packets), Ordering::Relaxed);
    }
    ok
}

/// A compressed session's encoder and the block it makes of each chunk.
struct Compressor {
    encoder: ringcap_compress::Encoder,
    block: Vec<u8>,
}

impl Compressor {
    /// `records` (pcap records as [`RingSink`] writes them) as one block.
    fn block(&mut self, records: &[u8]) -> &[u8] {
        let mut p = records;
        while p.len() >= RECORD_HEADER {
            let word = |i: usize| u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
            let ts = u64::from(word(0)) * 1_000_000_000 + u64::from(word(4));
            let end = RECORD_HEADER + word(8) as usize;
            self.encoder.push(ts, word(12), &p[RECORD_HEADER..end]);
            p = &p[end..];
        }
        self.block.clear();
        self.encoder.finish_block(&mut self.block);
        &self.block
    }
}

impl RingSink {
    fn ship(&mut self) {
        if self.packets == 0 {
            return;
        }
        if self.compress {
            let queued = match &mut self.offload {
                Some(o) => o.hand_over(&mut self.buf, self.len, self.packets),
                None => false,
            };
            if !queued {
                self.dropped += u64::from(self.packets);
                self.counters
                    .dropped_client
                    .fetch_add(u64::from(self.packets), Ordering::Relaxed);
                if let Ok(mut r) = self.ring.lock() {
                    r.add_dropped(u64::from(self.packets), self.len as u64);
                }
            }
        } else if !deliver(
            &self.ring,
            &self.counters,
            &self.buf[..self.len],
            self.packets,
        ) {
            self.dropped += u64::from(self.packets);
        }
        self.len = 0;
        self.packets = 0;
        self.started = None;
    }
}

impl PacketSink for RingSink {
    #[inline]
    fn push(
        &mut self,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
        tag: Option<[u8; 4]>,
        caplen: usize,
    ) -> Option<&mut [u8]> {
        if self.closed {
            self.dropped += 1;
            self.counters.dropped_client.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if !self.limits.unlimited() && self.limits.admit(ts_ns, wire_len).is_err() {
            self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let need = RECORD_HEADER + caplen;
        if need > self.buf.len() {
            // Longer than any chunk (it cannot happen with 256 KiB chunks and
            // 64 KiB + 4 frames, but a sink must not panic).
            self.dropped += 1;
            self.counters.dropped_client.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let target = if self.compress {
            COMPRESSED_CHUNK_TARGET
        } else {
            CHUNK_TARGET
        };
        if self.len + need > self.buf.len() || self.len >= target {
            self.ship();
        }
        if self.started.is_none() {
            self.started = Some(Instant::now());
        }
        let at = self.len;
        write_record(
            &mut self.buf[at..at + need],
            ts_ns,
            wire_len,
            data,
            tag,
            caplen,
        );
        self.len += need;
        self.packets += 1;
        Some(&mut self.buf[at + RECORD_HEADER..at + need])
    }

    fn push_records(&mut self, records: &[u8], packets: u32) -> bool {
        // Rate limits count packet by packet; compressed chunks are cut
        // bigger (see `push`).
        if self.closed || self.compress || !self.limits.unlimited() {
            return false;
        }
        if records.len() > self.buf.len() {
            return false;
        }
        if self.len + records.len() > self.buf.len() || self.len >= CHUNK_TARGET {
            self.ship();
        }
        if self.started.is_none() {
            self.started = Some(Instant::now());
        }
        self.buf[self.len..self.len + records.len()].copy_from_slice(records);
        self.len += records.len();
        self.packets += packets;
        true
    }

    fn flush(&mut self) {
        self.ship();
    }

    fn oldest(&self) -> Option<Instant> {
        self.started
    }

    fn close(&mut self) {
        self.ship();
        if let Some(o) = &mut self.offload {
            o.finish();
        }
        self.closed = true;
    }

    fn dropped(&self) -> u64 {
        self.dropped
            + self
                .offload
                .as_ref()
                .map_or(0, |o| o.worker_dropped.load(Ordering::Relaxed))
    }

    fn set_interface_id(&mut self, _id: u32) {}
}
