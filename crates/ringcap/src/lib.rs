//! The `ringcap` command: parses the command line, turns it into a capture
//! specification for the engine (`ringcap-engine`, which puts together the
//! crates of the capture path: `ringcap-source` → `ringcap-stages` →
//! `ringcap-sink`, with `ringcap-stats` alongside), and prints what the
//! capture reports. The daemon `ringcapd` is the engine's other front end.

pub(crate) mod answer;
pub mod cli;
pub mod config;
pub mod daemon_client;
pub mod daemon_flows;
pub mod demo;
pub mod extcap;
pub mod failure;
pub mod flows;
pub mod inject;
pub mod privacy;
pub mod privileges;
pub mod query;
pub mod reporting;
pub mod run;
pub mod serve;
pub mod session;
pub mod words;
