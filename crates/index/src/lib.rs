//! Finding packets again: an index per capture file, and queries over many
//! files that read only what may match.
//!
//! An index (`.NAME.ringcap-index` next to `NAME`) holds the file's time
//! range, a table of *groups* (runs of up to [`build::GROUP_RECORDS`]
//! consecutive records: file offset, smallest and largest timestamp), and a
//! sorted key table: IP addresses (v4, v6), transport ports, IP protocols
//! and VLAN IDs, inner and outer ([`keys`]), each with the sorted list of
//! the groups holding it, delta- and varint-coded ([`file`]). A query
//! ([`query`]) derives from a tcpdump filter what the index can answer
//! ([`plan`]), reads only the candidate groups, and lets libpcap's compiled
//! filter decide on each packet, so the result is exactly what `tcpdump -r`
//! of the files with the filter gives; the index only saves reading.
//!
//! - [`keys`]: the keys of a packet.
//! - [`file`]: the index file format (versioned, checksummed).
//! - [`build`]: building, publishing and loading an index.
//! - [`plan`]: what an index can answer of a filter.
//! - `positions`: where the packets of the few keys that get positions
//!   start (`file/exact.rs`), found when an index is published.
//! - [`query`]: running a query (with read-ahead hints, `readahead`);
//!   [`out`]: its pcap/pcapng output.
//! - [`time`]: the times `--after`/`--before` take.
//! - [`dir`]: the capture files of directories.
//! - [`background`]: indexing files as they are published; the keys come
//!   from the writer's bytes as it writes them (`stream`, through the
//!   sink's file tap) and are gathered without a hash map (`postings`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod background;
mod bounded;
pub mod build;
pub mod dir;
pub mod file;
pub mod keys;
pub mod out;
pub mod plan;
mod positions;
mod postings;
pub mod query;
mod readahead;
mod runs;
mod stream;
pub mod time;
mod varint;

pub use build::{build_index, load_checked_index, load_index, BuildError, BuildReport, Unusable};
pub use file::{Index, IndexError};
pub use out::{OutFormat, Output};
pub use plan::{packet_may_match, plan, Expr};
pub use query::{readers_here, run, run_with, Query, QueryError, QueryStats, Taker, Window, TICK};
pub use ringcap_format::sidecar::index_path;
