//! Kafka export (`kafka://BROKER[,BROKER...]/TOPIC`): one message per flow,
//! the flow's JSON line (the fields of [`crate::json`]), or with
//! `?format=protobuf` one goflow2 message per direction
//! ([`crate::goflow`]), produced with librdkafka (the `rdkafka` crate; the
//! library is built from the source its `rdkafka-sys` bundles and linked
//! statically, without SSL or SASL: the export speaks plaintext).
//!
//! librdkafka keeps its own bounded queue and retries while a broker is
//! away; this sink only hands messages to it without waiting (a full queue
//! drops the record, counted) and counts deliveries and failures from its
//! delivery reports. Everything here runs on the exporter thread.

use crate::goflow::Encoder;
use crate::record::FlowRecord;
use crate::stats::FlowStats;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig,
};
use rdkafka::ClientContext;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Messages librdkafka holds for the brokers, at most.
pub const KAFKA_QUEUE: u32 = 100_000;
/// A message not delivered within this long is given up (counted).
const MESSAGE_TIMEOUT_MS: u32 = 30_000;

/// Counts delivery reports.
struct Reports {
    stats: Arc<FlowStats>,
}

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = ();

    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(_) => self.stats.messages.fetch_add(1, Ordering::Relaxed),
            Err(_) => {
                self.stats.export_dropped.fetch_add(1, Ordering::Relaxed);
                self.stats.export_errors.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// A producer for one topic.
pub struct KafkaSink {
    producer: BaseProducer<Reports>,
    topic: String,
    stats: Arc<FlowStats>,
    /// goflow2 protobuf messages rather than JSON lines.
    protobuf: Option<Encoder>,
}

impl KafkaSink {
    /// A producer for `brokers` (comma-separated HOST:PORT) and `topic`;
    /// brokers are connected to in the background.
    pub fn new(
        brokers: &str,
        topic: &str,
        stats: Arc<FlowStats>,
        protobuf: Option<Encoder>,
    ) -> Result<KafkaSink, String> {
        let producer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("client.id", "ringcap")
            .set("queue.buffering.max.messages", KAFKA_QUEUE.to_string())
            .set("message.timeout.ms", MESSAGE_TIMEOUT_MS.to_string())
            .set("linger.ms", "50")
            .set("compression.codec", "none")
            .create_with_context(Reports {
                stats: stats.clone(),
            })
            .map_err(|e| format!("kafka://{brokers}/{topic}: {e}"))?;
        Ok(KafkaSink {
            producer,
            topic: topic.to_string(),
            stats,
            protobuf,
        })
    }

    /// Whether this sink takes flows ([`Self::send_flow`]) rather than
    /// JSON lines.
    pub fn protobuf(&self) -> bool {
        self.protobuf.is_some()
    }

    /// A flow as goflow2 messages (one per direction that saw packets).
    pub fn send_flow(&mut self, r: &FlowRecord, now_ns: u64) {
        let KafkaSink {
            producer,
            topic,
            stats,
            protobuf,
        } = self;
        if let Some(enc) = protobuf {
            enc.messages(r, now_ns, &mut |m| send(producer, topic, stats, m));
        }
    }

    /// Hands one message to librdkafka without waiting.
    pub fn send(&mut self, payload: &[u8]) {
        send(&self.producer, &self.topic, &self.stats, payload);
    }

    /// Serves delivery reports, without waiting.
    pub fn poll(&mut self) {
        self.producer.poll(Duration::ZERO);
    }

    /// At the end: waits for the brokers until `deadline`; messages still
    /// undelivered then are purged, and their failed delivery reports
    /// count them as lost (once: here, not again when the producer goes).
    pub fn drain(&mut self, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        if self.producer.flush(left).is_err() {
            self.producer
                .purge(PurgeConfig::default().queue().inflight());
            // The purged messages' reports.
            let _ = self.producer.flush(Duration::from_secs(1));
            self.producer.poll(Duration::ZERO);
        }
    }
}

fn send(producer: &BaseProducer<Reports>, topic: &str, stats: &FlowStats, payload: &[u8]) {
    let rec: BaseRecord<'_, (), [u8]> = BaseRecord::to(topic).payload(payload);
    if producer.send(rec).is_err() {
        // Queue full (brokers away for long) or a bad message: lost.
        stats.export_dropped.fetch_add(1, Ordering::Relaxed);
    }
}
