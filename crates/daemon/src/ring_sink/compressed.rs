//! A compressed session's side of the sink: the chunks handed to encoders
//! and the blocks made of them ([`SharedBlocks`], shared by every session so
//! that the same records are encoded once), the session's encoder thread,
//! and the append of a finished block to the ring. Separate because it is
//! the part that runs off the capture thread; the chunk cutting that decides
//! what gets encoded stays with the sink (see the parent module's doc).

use super::{SinkCounters, CHUNK_BYTES, COMPRESS_QUEUE, RECENT};
use ringcap_format::record::read_ring_record;
use ringcap_shm::RingWriter;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// A chunk of records handed to an encoder, and its block once made.
pub(super) struct Job {
    pub(super) records: Box<[u8]>,
    pub(super) len: usize,
    pub(super) packets: u32,
    pub(super) block: OnceLock<Vec<u8>>,
}

impl Job {
    fn records(&self) -> &[u8] {
        &self.records[..self.len]
    }
}

/// The chunks last handed to encoders, whatever the session, so that a
/// session with the same records takes the same block (see the module doc),
/// and chunk buffers to reuse.
#[derive(Default)]
pub struct SharedBlocks {
    inner: Mutex<Recent>,
    /// Chunks handed to an encoder.
    pub encoded: AtomicU64,
    /// Chunks that took a block already on its way instead.
    pub shared: AtomicU64,
}

#[derive(Default)]
struct Recent {
    jobs: VecDeque<Arc<Job>>,
    spare: Vec<Box<[u8]>>,
}

/// The daemon's one [`SharedBlocks`], for every session and interface.
pub fn shared_blocks() -> Arc<SharedBlocks> {
    static BLOCKS: OnceLock<Arc<SharedBlocks>> = OnceLock::new();
    BLOCKS.get_or_init(Default::default).clone()
}

impl SharedBlocks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A chunk handed over with exactly `records` (`packets` of them).
    pub(super) fn find(&self, records: &[u8], packets: u32) -> Option<Arc<Job>> {
        let found = self
            .lock()
            .jobs
            .iter()
            .rev()
            .find(|j| j.packets == packets && j.records() == records)
            .cloned();
        if found.is_some() {
            self.shared.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Remembers `job` (forgetting the oldest beyond [`RECENT`]).
    pub(super) fn remember(&self, job: Arc<Job>) {
        self.encoded.fetch_add(1, Ordering::Relaxed);
        let mut r = self.lock();
        r.jobs.push_back(job);
        while r.jobs.len() > RECENT {
            let Some(old) = r.jobs.pop_front() else { break };
            // Its buffer is free once nobody else holds the job.
            if let Ok(old) = Arc::try_unwrap(old) {
                if r.spare.len() < RECENT {
                    r.spare.push(old.records);
                }
            }
        }
    }

    /// An empty chunk buffer.
    pub(super) fn buffer(&self) -> Box<[u8]> {
        self.lock()
            .spare
            .pop()
            .unwrap_or_else(|| vec![0u8; CHUNK_BYTES].into_boxed_slice())
    }
}

/// A compressed session's side of its sink.
pub(super) struct Compressed {
    pub(super) blocks: Arc<SharedBlocks>,
    /// Its encoder thread (`None`: it could not be started; its own chunks
    /// are then dropped and counted, shared ones still arrive).
    pub(super) encoder: Option<Encoder>,
    /// Chunks handed over, oldest first, with when: their blocks go to the
    /// ring in this order once made.
    pub(super) pending: VecDeque<(Arc<Job>, Instant)>,
    /// [`SLOT_NS`] slot of the chunk's first packet.
    pub(super) slot: u64,
}

/// A compressed session's encoder thread.
pub(super) struct Encoder {
    to_worker: Option<crossbeam_channel::Sender<Arc<Job>>>,
    worker: Option<JoinHandle<()>>,
}

impl Encoder {
    pub(super) fn start() -> Option<Encoder> {
        let (to_worker, jobs) = crossbeam_channel::bounded::<Arc<Job>>(COMPRESS_QUEUE);
        let worker = std::thread::Builder::new()
            .name("ringcapd-compress".into())
            .spawn(move || {
                // Failing to lower its own priority leaves it at the normal
                // one: still correct, less isolated.
                let _ = crate::sys::lowest_priority();
                let mut encoder = ringcap_compress::Encoder::new(1);
                for job in jobs {
                    let _ = job.block.set(encode(&mut encoder, job.records()));
                }
            })
            .ok()?;
        Some(Encoder {
            to_worker: Some(to_worker),
            worker: Some(worker),
        })
    }

    /// Queues `job`; false when the queue is full (the encoder is behind).
    pub(super) fn give(&self, job: Arc<Job>) -> bool {
        self.to_worker
            .as_ref()
            .is_some_and(|tx| tx.try_send(job).is_ok())
    }

    /// Lets the thread finish what it was given, and waits for it.
    pub(super) fn finish(&mut self) {
        self.to_worker = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Encoder {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `records` (pcap records as [`RingSink`] writes them) as one block.
fn encode(encoder: &mut ringcap_compress::Encoder, records: &[u8]) -> Vec<u8> {
    let mut p = records;
    // Whole records only (as `write_ring_record` makes them).
    while let Some((r, len)) = read_ring_record(p) {
        encoder.push(r.ts_ns, r.wire_len, r.data);
        p = &p[len..];
    }
    let mut block = Vec::new();
    encoder.finish_block(&mut block);
    block
}

/// Appends one chunk's `payload` holding `packets` to the client's ring and
/// counts it; false when it did not fit (counted as dropped).
pub(super) fn deliver(
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
