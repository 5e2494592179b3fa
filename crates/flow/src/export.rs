//! Exporters: where finished flows go, on a thread of their own.
//!
//! Capture threads hand records over a bounded queue; the exporter thread
//! encodes them for each target (IPFIX or NetFlow v9 over UDP, JSON lines)
//! and sends. A live capture never waits for it: when the queue is full the
//! record is dropped and counted. Files wait (nothing is lost by reading a
//! file more slowly). A collector that is down costs failed sends, counted;
//! UDP sends never block.

use crate::netflow::{Dialect, SamplingReport};
use crate::record::FlowRecord;
pub use crate::stats::FlowStats;
use crate::tcp::TcpSink;
use crate::udp::UdpSink;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::io::Write;
use std::net::ToSocketAddrs;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Records waiting for the exporter thread, at most.
pub const QUEUE_LEN: usize = 65_536;
/// Records taken off the queue per look at the clock.
const BATCH: usize = 1024;
/// A partly filled message waits at most this long.
const FLUSH_INTERVAL: Duration = Duration::from_millis(500);

/// Where flows go, as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `ipfix://HOST:PORT`: IPFIX over UDP.
    Ipfix(String),
    /// `ipfix+tcp://HOST:PORT`: IPFIX over TCP.
    IpfixTcp(String),
    /// `netflow9://HOST:PORT`: NetFlow v9 over UDP.
    Netflow9(String),
    /// `kafka://BROKER[,BROKER...]/TOPIC[?format=json|protobuf]`: one
    /// message per flow (protobuf: per direction, goflow2's schema).
    Kafka {
        /// Bootstrap brokers, HOST:PORT, comma-separated.
        brokers: String,
        /// Topic.
        topic: String,
        /// What each message holds.
        format: KafkaFormat,
    },
    /// `json:PATH` (`json:-`: standard output): one JSON object per line.
    Json(String),
}

impl Target {
    /// Parses a flow export URL; the message (which begins with the URL) says
    /// what is accepted.
    pub fn parse(url: &str) -> Result<Target, String> {
        if let Some(p) = url.strip_prefix("json:") {
            if p.is_empty() {
                return Err(format!(
                    "{url}: give a path (json:PATH, json:- for standard output)"
                ));
            }
            return Ok(Target::Json(p.to_string()));
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(format!(
                "{url}: use ipfix://HOST:PORT, ipfix+tcp://HOST:PORT, netflow9://HOST:PORT, kafka://BROKER/TOPIC[?format=protobuf] or json:PATH"
            ));
        };
        if scheme == "kafka" {
            return parse_kafka(url, rest);
        }
        let hostport = rest.trim_end_matches('/');
        match scheme {
            "ipfix" | "ipfix+udp" => Ok(Target::Ipfix(check_hostport(url, hostport)?)),
            "ipfix+tcp" => Ok(Target::IpfixTcp(check_hostport(url, hostport)?)),
            "netflow9" | "nf9" => Ok(Target::Netflow9(check_hostport(url, hostport)?)),
            _ => Err(format!(
                "{url}: unknown scheme {scheme}; use ipfix://HOST:PORT, ipfix+tcp://HOST:PORT, netflow9://HOST:PORT, kafka://BROKER/TOPIC or json:PATH"
            )),
        }
    }
}

fn parse_kafka(url: &str, rest: &str) -> Result<Target, String> {
    let Some((brokers, topic)) = rest.split_once('/') else {
        return Err(format!("{url}: give kafka://BROKER[,BROKER...]/TOPIC"));
    };
    let (topic, format) = match topic.split_once('?') {
        None => (topic, KafkaFormat::Json),
        Some((t, "format=json")) => (t, KafkaFormat::Json),
        Some((t, "format=protobuf")) => (t, KafkaFormat::Protobuf),
        Some(_) => {
            return Err(format!(
                "{url}: the one option is ?format=json (the default) or ?format=protobuf (goflow2's schema)"
            ))
        }
    };
    for b in brokers.split(',') {
        check_hostport(url, b)?;
    }
    // Kafka's own rule for topic names.
    let ok = !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if !ok {
        return Err(format!(
            "{url}: a Kafka topic is 1 to 249 of a-z A-Z 0-9 . _ -"
        ));
    }
    if !cfg!(feature = "kafka") {
        return Err(format!(
            "{url}: Kafka export is not built in this ringcap (cargo feature \"kafka\")"
        ));
    }
    Ok(Target::Kafka {
        brokers: brokers.to_string(),
        topic: topic.to_string(),
        format,
    })
}

fn check_hostport(url: &str, hp: &str) -> Result<String, String> {
    match hp.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(hp.to_string())
        }
        _ => Err(format!("{url}: give HOST:PORT (a port from 1 to 65535)")),
    }
}

/// The messages a Kafka target gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaFormat {
    /// The flow's JSON line ([`crate::json`]): the default.
    Json,
    /// goflow2's protobuf `FlowMessage`, length-delimited
    /// ([`crate::goflow`]).
    Protobuf,
}

enum Msg {
    Flow(FlowRecord),
    End,
}

/// The exporter thread and the queue to it.
pub struct Exporter {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<FlowStats>,
}

/// A capture thread's end of the queue.
#[derive(Clone)]
pub struct FlowSender {
    tx: Sender<Msg>,
    stats: Arc<FlowStats>,
}

impl FlowSender {
    /// Hands `r` on: waiting for room when `wait` (files), else dropping
    /// it, counted, when the queue is full.
    #[inline]
    pub fn send(&self, r: FlowRecord, wait: bool) {
        let ok = if wait {
            self.tx.send(Msg::Flow(r)).is_ok()
        } else {
            self.tx.try_send(Msg::Flow(r)).is_ok()
        };
        if !ok {
            self.stats.queue_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// True while the queue has room for a record (it may fill before the
    /// record comes when other threads send too: then it is dropped,
    /// counted, as always).
    #[inline]
    pub fn has_room(&self) -> bool {
        !self.tx.is_full()
    }

    /// The shared counters.
    pub fn stats(&self) -> &Arc<FlowStats> {
        &self.stats
    }
}

/// Options of the IPFIX and NetFlow v9 exporters.
#[derive(Debug, Clone, Copy)]
pub struct ExportOptions {
    /// Observation domain (v9: source ID).
    pub domain: u32,
    /// Largest datagram payload.
    pub max_message: usize,
    /// Templates are sent again this often (UDP), and the exporter's
    /// statistics (IPFIX options record) this often on every IPFIX target.
    pub template_refresh: Duration,
    /// Sampling in front of the flow table: IPFIX and NetFlow v9 report it
    /// in an options record with the templates.
    pub sampling: Option<SamplingReport>,
    /// Adds each flow's Community ID to JSON and Kafka records.
    pub community_id: bool,
    /// UDP targets: at most this many bytes of datagrams a second (`None`:
    /// as fast as they come). A UDP collector that falls behind loses
    /// datagrams in its socket buffer, unseen by the exporter; pacing keeps
    /// a burst (a table flushed at the end of a file, a million flows
    /// idling out at once) within what it reads.
    pub pace_bytes_per_s: Option<u64>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            domain: 1,
            // 1500-byte MTU less IPv6 and UDP headers.
            max_message: 1452,
            template_refresh: Duration::from_secs(60),
            sampling: None,
            community_id: true,
            pace_bytes_per_s: None,
        }
    }
}

enum Sink {
    Udp(Box<UdpSink>),
    Tcp(Box<TcpSink>),
    Json(Box<dyn Write + Send>),
    #[cfg(feature = "kafka")]
    Kafka(Box<crate::kafka::KafkaSink>),
}

/// How long the end of an export waits for a TCP collector or Kafka.
const DRAIN: Duration = Duration::from_secs(10);

fn udp_sink(t: &Target, hp: &str, opts: &ExportOptions) -> Result<Sink, String> {
    let dialect = match t {
        Target::Ipfix(_) => Dialect::Ipfix,
        _ => Dialect::NetflowV9,
    };
    Ok(Sink::Udp(Box::new(UdpSink::open(
        hp,
        dialect,
        opts.domain,
        opts.max_message,
        opts.sampling,
        opts.pace_bytes_per_s,
    )?)))
}

impl Exporter {
    /// Opens every target (sockets bound, files created, a first TCP
    /// connection tried: before a capture starts and before privileges are
    /// dropped) and starts the thread.
    pub fn start(targets: &[Target], opts: ExportOptions) -> Result<Exporter, String> {
        let stats = Arc::new(FlowStats::default());
        let mut sinks = Vec::new();
        for t in targets {
            sinks.push(match t {
                Target::Ipfix(hp) | Target::Netflow9(hp) => udp_sink(t, hp, &opts)?,
                Target::IpfixTcp(hp) => {
                    // The name must resolve now; the collector may come later.
                    hp.to_socket_addrs()
                        .map_err(|e| format!("ipfix+tcp://{hp}: {e}"))?;
                    let mut s = TcpSink::new(hp.clone(), opts.domain, opts.sampling);
                    s.connect_now(now_secs(), &stats);
                    Sink::Tcp(Box::new(s))
                }
                #[cfg(feature = "kafka")]
                Target::Kafka {
                    brokers,
                    topic,
                    format,
                } => Sink::Kafka(Box::new(crate::kafka::KafkaSink::new(
                    brokers,
                    topic,
                    stats.clone(),
                    match format {
                        KafkaFormat::Json => None,
                        KafkaFormat::Protobuf => Some(crate::goflow::Encoder::new(
                            opts.domain,
                            opts.sampling
                                .map_or(1, |s| u64::from(crate::v9_options::interval(&s))),
                        )),
                    },
                )?)),
                #[cfg(not(feature = "kafka"))]
                Target::Kafka { .. } => {
                    return Err("Kafka export is not built in this ringcap".into())
                }
                Target::Json(p) if p == "-" => {
                    Sink::Json(Box::new(std::io::BufWriter::new(std::io::stdout())))
                }
                Target::Json(p) => {
                    let f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(p)
                        .map_err(|e| format!("json:{p}: {e}"))?;
                    Sink::Json(Box::new(std::io::BufWriter::new(f)))
                }
            });
        }
        let (tx, rx) = crossbeam_channel::bounded(QUEUE_LEN);
        let s = stats.clone();
        let thread = std::thread::Builder::new()
            .name("ringcap-flows".into())
            .spawn(move || run(rx, sinks, opts, &s))
            .map_err(|e| format!("cannot start the flow exporter: {e}"))?;
        Ok(Exporter {
            tx,
            thread: Some(thread),
            stats,
        })
    }

    /// A sender for a capture thread.
    pub fn sender(&self) -> FlowSender {
        FlowSender {
            tx: self.tx.clone(),
            stats: self.stats.clone(),
        }
    }

    /// The shared counters.
    pub fn stats(&self) -> Arc<FlowStats> {
        self.stats.clone()
    }

    /// Exports what is queued (every capture thread must have finished),
    /// then stops the thread.
    pub fn finish(mut self) -> Arc<FlowStats> {
        let _ = self.tx.send(Msg::End);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stats.clone()
    }
}

fn now_secs() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

#[cfg(feature = "kafka")]
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A flow as one JSON line (Community ID when asked), into `line`.
fn json_line(line: &mut String, r: &FlowRecord, opts: &ExportOptions) {
    line.clear();
    crate::json::write(line, r, opts.community_id);
}

fn run(rx: Receiver<Msg>, mut sinks: Vec<Sink>, opts: ExportOptions, stats: &FlowStats) {
    let began = Instant::now();
    let mut last_templates = Instant::now();
    let mut last_flush = Instant::now();
    let mut line = String::with_capacity(512);
    loop {
        // A stream with messages waiting is looked at often.
        let busy = sinks.iter().any(|s| match s {
            Sink::Tcp(t) => t.busy(),
            _ => false,
        });
        let wait = if busy {
            Duration::from_millis(10)
        } else {
            FLUSH_INTERVAL
        };
        let mut msg = rx.recv_timeout(wait);
        // One look at the clock for a batch of records: with a million
        // records a second, reading it per record cost a tenth of the
        // exporter's CPU (measured with perf).
        let secs = now_secs();
        let uptime = began.elapsed().as_millis() as u32;
        let mut end = matches!(msg, Err(RecvTimeoutError::Disconnected));
        // Statistics (IPFIX options records) with each refresh and at the
        // end; UDP templates with each refresh.
        let report = last_templates.elapsed() >= opts.template_refresh;
        if report {
            last_templates = Instant::now();
            put_stats(&mut sinks, stats, secs);
        }
        let mut n = 0;
        while let Ok(m) = msg {
            match m {
                Msg::Flow(r) => put(&mut sinks, &r, secs, uptime, &mut line, &opts, stats),
                Msg::End => {
                    end = true;
                    break;
                }
            }
            n += 1;
            if n == BATCH {
                break;
            }
            msg = rx.try_recv().map_err(|_| RecvTimeoutError::Timeout);
        }
        if end {
            put_stats(&mut sinks, stats, secs);
        }
        if end || rx.is_empty() && last_flush.elapsed() >= FLUSH_INTERVAL {
            last_flush = Instant::now();
            for s in &mut sinks {
                match s {
                    Sink::Udp(u) => u.flush(secs, stats),
                    Sink::Tcp(t) => {
                        let mut out = Vec::new();
                        t.builder().flush(secs, &mut |m| out.push(m.to_vec()));
                        for m in out {
                            t.take(&m, stats);
                        }
                    }
                    Sink::Json(w) => {
                        if w.flush().is_err() {
                            stats.export_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    #[cfg(feature = "kafka")]
                    Sink::Kafka(_) => {}
                }
            }
        }
        for s in &mut sinks {
            match s {
                Sink::Udp(u) => u.send_pending(stats),
                Sink::Tcp(t) => t.pump(secs, stats),
                #[cfg(feature = "kafka")]
                Sink::Kafka(k) => k.poll(),
                _ => {}
            }
        }
        if end {
            let deadline = Instant::now() + DRAIN;
            for s in &mut sinks {
                match s {
                    Sink::Tcp(t) => t.drain(secs, deadline, stats),
                    #[cfg(feature = "kafka")]
                    Sink::Kafka(k) => k.drain(deadline),
                    _ => {}
                }
            }
            break;
        }
    }
}

/// The exporter's statistics (IPFIX options records) to every IPFIX
/// target, with the templates again on UDP.
fn put_stats(sinks: &mut [Sink], stats: &FlowStats, secs: u32) {
    let r = stats.report();
    for s in sinks {
        match s {
            Sink::Udp(u) => u.add_stats(&r, now_ms(), secs, stats),
            Sink::Tcp(t) => {
                let mut out = Vec::new();
                t.builder()
                    .add_stats(&r, now_ms(), secs, &mut |m| out.push(m.to_vec()));
                for m in out {
                    t.take(&m, stats);
                }
            }
            _ => {}
        }
    }
}

/// One record to every target.
fn put(
    sinks: &mut [Sink],
    r: &FlowRecord,
    secs: u32,
    uptime: u32,
    line: &mut String,
    opts: &ExportOptions,
    stats: &FlowStats,
) {
    stats.exported.fetch_add(1, Ordering::Relaxed);
    let mut have_line = false;
    for s in sinks {
        match s {
            Sink::Udp(u) => u.add(r, secs, uptime, stats),
            Sink::Tcp(t) => {
                let mut out = Vec::new();
                t.builder()
                    .add(r, secs, uptime, &mut |m| out.push(m.to_vec()));
                for m in out {
                    t.take(&m, stats);
                }
            }
            Sink::Json(w) => {
                if !have_line {
                    json_line(line, r, opts);
                    have_line = true;
                }
                let ok = w.write_all(line.as_bytes()).is_ok() && w.write_all(b"\n").is_ok();
                if ok {
                    stats.messages.fetch_add(1, Ordering::Relaxed);
                } else {
                    stats.export_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            #[cfg(feature = "kafka")]
            Sink::Kafka(k) => {
                if k.protobuf() {
                    k.send_flow(r, now_ns());
                    continue;
                }
                if !have_line {
                    json_line(line, r, opts);
                    have_line = true;
                }
                k.send(line.as_bytes());
            }
        }
    }
}
