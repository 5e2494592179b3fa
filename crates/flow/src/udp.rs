//! IPFIX and NetFlow v9 over UDP: finished messages are gathered and sent
//! many at a time with one sendmmsg(2).
//!
//! At a million records a second the kernel's per-datagram work is most of
//! the export's cost (bench/README.md, flows); a system call per datagram
//! was part of it. Datagrams wait in a batch until it is full or the
//! exporter thread has taken what was queued (so a message goes out no
//! later than before, give or take one pass over at most 1024 records).
//! The socket is connected and non-blocking: a full socket buffer is
//! waited out briefly on this thread (never a capture thread's), a
//! datagram refused by the kernel is sent again, and what cannot be sent
//! is counted, as before batching.

use crate::netflow::{Dialect, MessageBuilder, SamplingReport, StatsReport};
use crate::record::FlowRecord;
use crate::stats::FlowStats;
use rustix::io::Errno;
use rustix::net::{sendmmsg, MMsgHdr, SendAncillaryBuffer, SendFlags};
use std::io::IoSlice;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Datagrams sent by one sendmmsg(2), at most (~93 KB of 1452-byte
/// datagrams: well within a socket's default send buffer).
pub const BATCH_DATAGRAMS: usize = 64;
/// Tries for one datagram (a full socket buffer waited out, a refusal).
const TRIES: u32 = 100;
/// Wait after a full socket buffer.
const FULL_WAIT: Duration = Duration::from_micros(200);

/// Datagrams waiting to be sent, back to back in one buffer.
struct Batch {
    bytes: Vec<u8>,
    /// Where each datagram ends in `bytes`.
    ends: Vec<usize>,
}

impl Batch {
    fn push(&mut self, m: &[u8]) {
        self.bytes.extend_from_slice(m);
        self.ends.push(self.bytes.len());
    }

    fn full(&self) -> bool {
        self.ends.len() >= BATCH_DATAGRAMS
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

/// One UDP collector.
pub struct UdpSink {
    socket: UdpSocket,
    pace: Pacer,
    builder: MessageBuilder,
    batch: Batch,
}

impl UdpSink {
    /// A connected, non-blocking socket to `hp` (HOST:PORT) and a message
    /// builder for `dialect`.
    pub fn open(
        hp: &str,
        dialect: Dialect,
        domain: u32,
        max_message: usize,
        sampling: Option<SamplingReport>,
        pace_bytes_per_s: Option<u64>,
    ) -> Result<UdpSink, String> {
        let to = hp
            .to_socket_addrs()
            .map_err(|e| format!("{hp}: {e}"))?
            .next()
            .ok_or_else(|| format!("{hp}: no address"))?;
        let bind: SocketAddr = if to.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(bind).map_err(|e| format!("{hp}: {e}"))?;
        // Connected: the kernel keeps the route rather than looking it up
        // for every datagram (a tenth of a send's cost at a million records
        // a second, measured with perf).
        socket.connect(to).map_err(|e| format!("{hp}: {e}"))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| format!("{hp}: {e}"))?;
        let mut builder = MessageBuilder::new(dialect, domain, max_message);
        builder.set_sampling(sampling);
        let max = builder.max_len();
        Ok(UdpSink {
            socket,
            pace: Pacer::new(pace_bytes_per_s),
            builder,
            batch: Batch {
                bytes: Vec::with_capacity(BATCH_DATAGRAMS * max),
                ends: Vec::with_capacity(BATCH_DATAGRAMS),
            },
        })
    }

    /// Adds one flow; full messages join the batch, a full batch is sent.
    pub fn add(&mut self, r: &FlowRecord, secs: u32, uptime: u32, stats: &FlowStats) {
        let UdpSink {
            socket,
            pace,
            builder,
            batch,
        } = self;
        builder.add(r, secs, uptime, &mut |m| {
            take(socket, pace, batch, m, stats);
        });
    }

    /// The exporter's statistics (IPFIX), with the templates again.
    pub fn add_stats(&mut self, r: &StatsReport, now_ms: u64, secs: u32, stats: &FlowStats) {
        let UdpSink {
            socket,
            pace,
            builder,
            batch,
        } = self;
        builder.refresh_templates();
        builder.add_stats(r, now_ms, secs, &mut |m| {
            take(socket, pace, batch, m, stats);
        });
    }

    /// Ends the open message and sends everything waiting.
    pub fn flush(&mut self, secs: u32, stats: &FlowStats) {
        let UdpSink {
            socket,
            pace,
            builder,
            batch,
        } = self;
        builder.flush(secs, &mut |m| {
            take(socket, pace, batch, m, stats);
        });
        send_batch(socket, pace, batch, stats);
    }

    /// Sends the finished messages waiting (the open one stays open).
    pub fn send_pending(&mut self, stats: &FlowStats) {
        send_batch(&self.socket, &mut self.pace, &mut self.batch, stats);
    }
}

fn take(socket: &UdpSocket, pace: &mut Pacer, batch: &mut Batch, m: &[u8], stats: &FlowStats) {
    batch.push(m);
    if batch.full() {
        send_batch(socket, pace, batch, stats);
    }
}

/// Sends the batch, paced, with as few system calls as the kernel allows:
/// sendmmsg(2) stops at the first datagram it cannot send and says how many
/// went; that one is retried (a full buffer waited out, a refusal counted
/// and sent again, as a single send was) or, after [`TRIES`] or another
/// error, counted as failed and skipped.
fn send_batch(socket: &UdpSocket, pace: &mut Pacer, batch: &mut Batch, stats: &FlowStats) {
    let n = batch.ends.len();
    if n == 0 {
        return;
    }
    pace.wait(batch.bytes.len());
    let mut slices = Vec::with_capacity(n);
    let mut from = 0;
    for &end in &batch.ends {
        slices.push(IoSlice::new(&batch.bytes[from..end]));
        from = end;
    }
    let mut i = 0;
    let mut tries = 0;
    while i < n {
        let mut control: Vec<SendAncillaryBuffer<'_, '_, '_>> =
            (i..n).map(|_| SendAncillaryBuffer::default()).collect();
        let mut msgs: Vec<MMsgHdr<'_>> = slices[i..]
            .iter()
            .zip(control.iter_mut())
            .map(|(s, c)| MMsgHdr::new(std::slice::from_ref(s), c))
            .collect();
        let failed = match sendmmsg(socket, &mut msgs, SendFlags::empty()) {
            Ok(sent) if sent > 0 => {
                stats.messages.fetch_add(sent as u64, Ordering::Relaxed);
                i += sent;
                tries = 0;
                false
            }
            Ok(_) | Err(Errno::AGAIN) => {
                std::thread::sleep(FULL_WAIT);
                tries += 1;
                false
            }
            // A connected socket reports an earlier datagram's ICMP port
            // unreachable (nothing listened) on a later send, which then
            // did not go: the earlier one is counted as lost, this one is
            // sent again.
            Err(Errno::CONNREFUSED) => {
                stats.export_errors.fetch_add(1, Ordering::Relaxed);
                tries += 1;
                false
            }
            Err(_) => true,
        };
        if failed || tries >= TRIES {
            stats.export_errors.fetch_add(1, Ordering::Relaxed);
            i += 1;
            tries = 0;
        }
    }
    batch.clear();
}

/// Keeps a UDP target's datagrams within a rate: the exporter thread
/// sleeps when it is ahead of it (bursts of at most `SLACK`, plus a batch).
struct Pacer {
    rate: Option<u64>,
    since: Instant,
    bytes: u64,
}

/// How far ahead of (or behind) the rate the exporter may get.
const SLACK: Duration = Duration::from_millis(2);

impl Pacer {
    fn new(rate: Option<u64>) -> Pacer {
        Pacer {
            rate: rate.filter(|r| *r > 0),
            since: Instant::now(),
            bytes: 0,
        }
    }

    fn wait(&mut self, len: usize) {
        let Some(rate) = self.rate else { return };
        self.bytes += len as u64;
        let due = Duration::from_nanos(
            (u128::from(self.bytes) * 1_000_000_000 / u128::from(rate)) as u64,
        );
        let now = self.since.elapsed();
        if due > now + SLACK {
            std::thread::sleep(due - now);
        } else if now > due + SLACK {
            // Idle for a while: no credit saved up for a burst.
            self.since = Instant::now();
            self.bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> FlowStats {
        FlowStats::default()
    }

    /// A local receiver and a sink sending to it.
    fn pair() -> (UdpSocket, UdpSink) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let hp = rx.local_addr().unwrap().to_string();
        let sink = UdpSink::open(&hp, Dialect::Ipfix, 1, 1452, None, None).unwrap();
        (rx, sink)
    }

    #[test]
    fn a_batch_goes_out_as_its_datagrams_in_order() {
        let (rx, mut sink) = pair();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let st = stats();
        // More than one sendmmsg's worth, of different lengths.
        let n = BATCH_DATAGRAMS + 7;
        for i in 0..n {
            let m: Vec<u8> = (0..(20 + i * 3)).map(|b| (b + i) as u8).collect();
            take(&sink.socket, &mut sink.pace, &mut sink.batch, &m, &st);
        }
        // One full batch went at once; the rest waits for send_pending.
        assert_eq!(st.messages.load(Ordering::Relaxed), BATCH_DATAGRAMS as u64);
        sink.send_pending(&st);
        assert_eq!(st.messages.load(Ordering::Relaxed), n as u64);
        let mut buf = [0u8; 2048];
        for i in 0..n {
            let len = rx.recv(&mut buf).unwrap();
            let want: Vec<u8> = (0..(20 + i * 3)).map(|b| (b + i) as u8).collect();
            assert_eq!(&buf[..len], &want[..], "datagram {i}");
        }
        assert_eq!(st.export_errors.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn refused_datagrams_are_counted_and_the_rest_sent_again() {
        // Nothing listens: the first datagram draws an ICMP port
        // unreachable, reported on a later send, which is retried.
        let port = {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap().port()
        };
        let mut sink = UdpSink::open(
            &format!("127.0.0.1:{port}"),
            Dialect::Ipfix,
            1,
            1452,
            None,
            None,
        )
        .unwrap();
        let st = stats();
        for round in 0..4 {
            for _ in 0..3 {
                take(&sink.socket, &mut sink.pace, &mut sink.batch, b"x", &st);
            }
            sink.send_pending(&st);
            // Give the ICMP error time to come back.
            std::thread::sleep(Duration::from_millis(20 + round));
        }
        let sent = st.messages.load(Ordering::Relaxed);
        let errors = st.export_errors.load(Ordering::Relaxed);
        // Every datagram went (refusals are of earlier ones), and at
        // least one refusal was seen and counted.
        assert_eq!(sent, 12, "errors {errors}");
        assert!(errors >= 1, "no refusal counted");
    }
}
