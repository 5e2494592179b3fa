//! IPFIX over TCP (RFC 7011 section 10.4): one stream per collector,
//! templates once at the start of each connection, reconnection with
//! back-off, and a bounded queue of whole messages while the collector is
//! away or slow.
//!
//! Everything here runs on the exporter thread; the socket is non-blocking,
//! so a stalled collector fills this sink's queue (oldest messages dropped,
//! their records counted as lost) and never the capture threads'. A
//! message cut by a broken connection is sent again whole on the next one
//! (the collector discards the cut copy with the old connection), so a
//! record may arrive twice across a reconnection, never half. Sequence
//! numbers count data records per connection, as the RFC asks of a
//! transport session: they are written into each message's header when it
//! starts going out on a connection.

use crate::netflow::{Dialect, MessageBuilder, SamplingReport};
use crate::stats::FlowStats;
use std::collections::VecDeque;
use std::io::{ErrorKind, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Largest message built for a stream.
pub const TCP_MESSAGE: usize = 16 * 1024;
/// Bytes of messages held for the collector, at most.
pub const TCP_QUEUE_BYTES: usize = 8 << 20;
/// First wait after a failed connection; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A connection attempt waits at most this long (the exporter thread's
/// other targets wait with it).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

struct Pending {
    bytes: Vec<u8>,
    /// Data records in it (flow and options records).
    records: u32,
    /// The templates that open a connection (dropped with it).
    templates: bool,
}

/// One IPFIX/TCP collector.
pub struct TcpSink {
    addr: String,
    stream: Option<TcpStream>,
    builder: MessageBuilder,
    queue: VecDeque<Pending>,
    queued_bytes: usize,
    /// Bytes of the queue's front already written on this connection.
    written: usize,
    /// Data records sent on this connection (the sequence number).
    sequence: u32,
    retry_at: Instant,
    backoff: Duration,
}

impl TcpSink {
    /// A sink for `addr` (HOST:PORT); the first connection is tried at
    /// once by [`TcpSink::connect_now`] or on the first [`TcpSink::pump`].
    pub fn new(addr: String, domain: u32, sampling: Option<SamplingReport>) -> TcpSink {
        let mut builder = MessageBuilder::for_stream(Dialect::Ipfix, domain, TCP_MESSAGE);
        builder.set_sampling(sampling);
        TcpSink {
            addr,
            stream: None,
            builder,
            queue: VecDeque::new(),
            queued_bytes: 0,
            written: 0,
            sequence: 0,
            retry_at: Instant::now(),
            backoff: FIRST_BACKOFF,
        }
    }

    /// The message builder (records go in through it, then [`Self::take`]).
    pub fn builder(&mut self) -> &mut MessageBuilder {
        &mut self.builder
    }

    /// Queues a finished message of the builder.
    pub fn take(&mut self, m: &[u8], stats: &FlowStats) {
        // The builder counts data records in the header's sequence field
        // difference; recount from the sets here (cheap, once a message).
        let records = count_records(m);
        self.push(
            Pending {
                bytes: m.to_vec(),
                records,
                templates: false,
            },
            stats,
        );
    }

    fn push(&mut self, p: Pending, stats: &FlowStats) {
        self.queued_bytes += p.bytes.len();
        if p.templates {
            self.queue.push_front(p);
        } else {
            self.queue.push_back(p);
        }
        // Over the bound: the oldest messages go, except one being written.
        let keep_front = self.written > 0;
        while self.queued_bytes > TCP_QUEUE_BYTES && self.queue.len() > 1 {
            let at = usize::from(keep_front);
            let Some(old) = self.queue.remove(at) else {
                break;
            };
            self.queued_bytes -= old.bytes.len();
            stats
                .export_dropped
                .fetch_add(u64::from(old.records), Ordering::Relaxed);
        }
    }

    /// True when messages wait for the collector.
    pub fn busy(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Tries to connect if the back-off allows; then writes what the
    /// socket takes without waiting.
    pub fn pump(&mut self, secs: u32, stats: &FlowStats) {
        if self.stream.is_none() {
            if Instant::now() < self.retry_at || self.queue.is_empty() {
                return;
            }
            self.connect(secs, stats);
        }
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        while let Some(front) = self.queue.front_mut() {
            if self.written == 0 && front.bytes.len() >= 16 {
                front.bytes[8..12].copy_from_slice(&self.sequence.to_be_bytes());
            }
            match stream.write(&front.bytes[self.written..]) {
                Ok(0) => {
                    self.broken(stats);
                    return;
                }
                Ok(n) => {
                    self.written += n;
                    if self.written == front.bytes.len() {
                        self.sequence = self.sequence.wrapping_add(front.records);
                        self.written = 0;
                        self.queued_bytes -= front.bytes.len();
                        self.queue.pop_front();
                        stats.messages.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.broken(stats);
                    return;
                }
            }
        }
    }

    /// Connects now (at start: a collector that is up gets the templates
    /// before any flow); a failure is counted and retried later.
    pub fn connect_now(&mut self, secs: u32, stats: &FlowStats) {
        if self.stream.is_none() {
            self.connect(secs, stats);
        }
    }

    fn connect(&mut self, secs: u32, stats: &FlowStats) {
        let stream = self
            .addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .and_then(|a| TcpStream::connect_timeout(&a, CONNECT_TIMEOUT).ok());
        let Some(s) = stream.filter(|s| s.set_nonblocking(true).is_ok()) else {
            stats.connect_failures.fetch_add(1, Ordering::Relaxed);
            self.retry_at = Instant::now() + self.backoff;
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            return;
        };
        let _ = s.set_nodelay(true);
        self.stream = Some(s);
        self.backoff = FIRST_BACKOFF;
        self.sequence = 0;
        self.written = 0;
        let t = self.builder.templates_message(secs);
        self.push(
            Pending {
                records: count_records(&t),
                bytes: t,
                templates: true,
            },
            stats,
        );
    }

    /// The connection broke: counted; its templates go with it, the
    /// message in flight is sent again whole on the next one.
    fn broken(&mut self, stats: &FlowStats) {
        stats.export_errors.fetch_add(1, Ordering::Relaxed);
        self.stream = None;
        self.written = 0;
        let before = self.queue.len();
        self.queue.retain(|p| !p.templates);
        if self.queue.len() != before {
            self.queued_bytes = self.queue.iter().map(|p| p.bytes.len()).sum();
        }
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// At the end: keeps writing (and reconnecting) until the queue is
    /// empty or `deadline`; what is left is counted as lost.
    pub fn drain(&mut self, secs: u32, deadline: Instant, stats: &FlowStats) {
        while self.busy() && Instant::now() < deadline {
            self.pump(secs, stats);
            if self.busy() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let lost: u64 = self.queue.iter().map(|p| u64::from(p.records)).sum();
        stats.export_dropped.fetch_add(lost, Ordering::Relaxed);
        if let Some(s) = self.stream.take() {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
    }
}

/// Data records in an IPFIX message (sets with IDs >= 256), from the
/// record lengths of this exporter's own templates.
fn count_records(m: &[u8]) -> u32 {
    let mut off = 16;
    let mut n = 0;
    while off + 4 <= m.len() {
        let id = u16::from_be_bytes([m[off], m[off + 1]]);
        let len = usize::from(u16::from_be_bytes([m[off + 2], m[off + 3]]));
        if len < 4 || off + len > m.len() {
            break;
        }
        if let Some(rlen) = crate::netflow::ipfix_record_len(id) {
            n += ((len - 4) / rlen) as u32;
        }
        off += len;
    }
    n
}
