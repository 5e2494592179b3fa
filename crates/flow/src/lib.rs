//! Flow records for the collectors people already run.
//!
//! A flow stage ([`FlowStage`]) sits in the engine's observer slot
//! (`ringcap_engine::stages::Observer`): each capture thread keeps its own
//! [`FlowTable`] (5-tuple and VLAN ID, RFC 5103 biflows, active and idle
//! timeouts, TCP FIN/RST, a fixed number of flows with the oldest exported
//! early when full), and hands finished flows to one [`Exporter`] thread
//! over a bounded queue. The exporter speaks IPFIX (RFC 7011) and NetFlow
//! v9 over UDP ([`netflow`], sent many datagrams a system call by [`udp`]), IPFIX over TCP ([`tcp`]), writes JSON lines
//! ([`json`], with the flow's [`community_id`]) and, with the `kafka`
//! feature, sends one JSON message per flow to Kafka ([`kafka`]), or
//! goflow2's protobuf messages ([`goflow`]). IPFIX
//! carries the exporter's statistics and, when sampling is on, its
//! parameters in options records (RFC 7011 section 4, RFC 5476); NetFlow
//! v9 the sampling parameters ([`v9_options`], RFC 3954 section 6.1).

pub mod community_id;
mod encode;
pub mod export;
pub mod goflow;
pub mod json;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod key;
pub mod netflow;
pub mod record;
pub mod sampling;
pub mod stage;
pub mod stats;
pub mod table;
pub mod tcp;
pub mod udp;
pub mod v9_options;

pub use export::{ExportOptions, Exporter, FlowSender, KafkaFormat, Target};
pub use key::{parse, FlowKey, PacketInfo, Tunnel, NO_TUNNEL};
pub use netflow::{Dialect, MessageBuilder, SamplingReport, StatsReport};
pub use record::{Direction, EndReason, FlowRecord};
pub use stage::FlowStage;
pub use stats::FlowStats;
pub use table::{FlowTable, TableConfig, TableCounts};
