//! The Rust client of `ringcapd` (the successor of pktd's libwire): connect
//! to the daemon's Unix socket, open a capture session that the daemon holds
//! to its policy, read the packets it delivers through the session's
//! shared-memory ring, ask for counters, replace the filter, close. The
//! command line (`ringcap capture --daemon`) and the C and Python bindings
//! sit on this crate.
//!
//! ```no_run
//! use ringcap_client::{Client, OpenRequest};
//! let mut session = Client::connect_default()?.open(OpenRequest::new("eth0", "udp"))?;
//! loop {
//!     session.wait(std::time::Duration::from_millis(100))?;
//!     session.packets(|p| println!("{} bytes at {}", p.wire_len, p.ts_ns))?;
//!     if session.ended().is_some() { break; }
//! }
//! # Ok::<(), ringcap_client::ClientError>(())
//! ```

mod client;
mod error;
mod held;
mod pump;
mod records;
mod retrieve;
mod session;
mod unpack;
pub use client::Client;
pub use error::ClientError;
pub use held::Held;
pub use pump::{Batch, End, EndedBy, Pump, Stop, Tally, BUSY_NAP};
pub use records::{Packet, Records};
pub use retrieve::{Retrieval, RetrieveRequest, Retrieved};
pub use ringcap_proto::validate::MAX_INJECT_BATCH;
use ringcap_proto::FilterProgram;
use ringcap_stages::filter::Target;
pub use session::{OpenRequest, Session};

/// Link type the daemon's interfaces are compiled for (Ethernet).
const ETHERNET: i32 = 1;
/// Accepting returns of a client program: the daemon sets the real snap.
const PROGRAM_SNAPLEN: u32 = 262_144;
use ringcap_format::record::HEADER_LEN;
pub use ringcap_proto::{InjectFrame, InjectReport, InjectStatus};
use std::path::PathBuf;

pub use ringcap_proto::{
    DumpFile, DumpRequest, FlowEntry, FlowRequest, FlowSettings, OutputFormat,
    SampleRequest as Sample, SessionCounters, SnapRequest as Snap,
};

/// Flow records a session keeps for [`Session::flows`] while packets are
/// read; beyond this (a client that never asks for them) they are counted
/// and let go ([`Session::flows_lost`]).
pub const MAX_HELD_FLOWS: usize = 1 << 20;

/// Where the daemon listens unless `RINGCAP_DAEMON` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/ringcapd/ringcapd.sock";

/// The daemon's socket: `$RINGCAP_DAEMON`, else [`DEFAULT_SOCKET`].
pub fn default_socket() -> PathBuf {
    std::env::var_os("RINGCAP_DAEMON")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// Bytes of a record header in the ring (pcap, nanosecond, little endian).
const RECORD_HEADER: usize = HEADER_LEN;

/// Compiles `filter` here, in the client's process (libpcap, Ethernet, for
/// frames as in a file): the daemon takes programs, never filter text, so no
/// client's text reaches a C parser in the privileged process. `None` for an
/// empty filter. A filter that does not compile is refused with libpcap's
/// message under the rule `filter`, as the daemon would.
pub fn compile_filter(filter: &str) -> Result<Option<FilterProgram>, ClientError> {
    if filter.trim().is_empty() {
        return Ok(None);
    }
    let p = ringcap_stages::compile(filter, ETHERNET, PROGRAM_SNAPLEN, Target::Offline)
        .map_err(|e| refused_filter(format!("libpcap: {}", e.message)))?;
    let insns: Vec<_> = p
        .instructions
        .iter()
        .map(|i| (i.code, i.jt, i.jf, i.k))
        .collect();
    compiled_filter(filter, &insns)
}

/// A program libpcap compiled from `filter` in the client's process by
/// other means (the libpcap shim's `pcap_compile`, with the tool's netmask
/// and optimisation), for the daemon as [`compile_filter`] makes it: `None`
/// for an empty filter; more instructions than the daemon takes refused
/// under the rule `filter`. `insns`: (code, jt, jf, k).
pub fn compiled_filter(
    filter: &str,
    insns: &[(u16, u8, u8, u32)],
) -> Result<Option<FilterProgram>, ClientError> {
    if filter.trim().is_empty() {
        return Ok(None);
    }
    if insns.len() > ringcap_proto::validate::MAX_CLIENT_INSTRUCTIONS {
        return Err(refused_filter(format!(
            "the filter compiles to {} instructions; at most {} are taken",
            insns.len(),
            ringcap_proto::validate::MAX_CLIENT_INSTRUCTIONS
        )));
    }
    Ok(Some(FilterProgram::encode(
        insns,
        ringcap_stages::filter::mentions_vlan(filter),
    )))
}

/// A filter refused here under the rule `filter`, as the daemon would.
fn refused_filter(reason: String) -> ClientError {
    ClientError::Refused {
        grant: None,
        rule: "filter".into(),
        reason,
    }
}
