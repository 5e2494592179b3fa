//! Flow records for the collectors people already run.
//!
//! A flow stage ([`FlowStage`]) sits in the engine's observer slot
//! (`ringcap_engine::stages::Observer`): each capture thread keeps its own
//! [`FlowTable`] (5-tuple and VLAN ID, RFC 5103 biflows, active and idle
//! timeouts, TCP FIN/RST, a fixed number of flows with the oldest exported
//! early when full), and hands finished flows to one [`Exporter`] thread
//! over a bounded queue. The exporter speaks IPFIX (RFC 7011) and NetFlow
//! v9 over UDP ([`netflow`]) and writes JSON lines ([`json`]).
//!
//! Not built here (yet): IPFIX over TCP, Kafka, the sampling options
//! template, flows through ringcapd.

pub mod export;
pub mod json;
pub mod key;
pub mod netflow;
pub mod record;
pub mod stage;
pub mod table;

pub use export::{ExportOptions, Exporter, FlowSender, FlowStats, Target};
pub use key::{parse, FlowKey, PacketInfo};
pub use netflow::{Dialect, MessageBuilder};
pub use record::{Direction, EndReason, FlowRecord};
pub use stage::FlowStage;
pub use table::{FlowTable, TableConfig, TableCounts};
