//! The `ringcap` command: parses the command line and runs captures, built
//! from the library crates along the capture path:
//! `ringcap-source` → `ringcap-stages` (filter, sample, truncate) →
//! `ringcap-sink`, with `ringcap-stats` counting alongside.

pub mod benchsink;
pub mod cli;
pub mod config;
pub mod demo;
pub mod failure;
pub mod live;
pub mod offline;
pub mod offloads;
pub mod privileges;
pub mod session;
