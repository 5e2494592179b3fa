//! libringcap: a stable C ABI over the Rust client of ringcapd
//! (`ringcap-client`), for tools written in C, C++ or anything with a C FFI
//! (the Python package in `python/` is a ctypes binding over it). The
//! declarations and their documentation are in `include/ringcap.h`; a test
//! checks that header against this crate's source.
//!
//! Rules at the boundary:
//! - every call returns an `int` (or a pointer / count) and reports failures
//!   as a negative `RINGCAP_ERR_*` code plus a message written into a
//!   caller-provided buffer (NUL-terminated, truncated to its size; the
//!   buffer may be NULL);
//! - no panic crosses it: every entry point runs under `catch_unwind` and
//!   turns a panic into `RINGCAP_ERR_INTERNAL`;
//! - a session is used by one thread at a time; a second call on a session
//!   while one is running (from another thread, or from inside a packet
//!   callback) is refused with `RINGCAP_ERR_BUSY`, except
//!   `ringcap_breakloop`, which only sets a flag.

#![allow(non_camel_case_types)]

mod errors;
mod handle;
mod inject;
mod options;
mod records;
mod session;

pub use errors::{ringcap_strerror, ringcap_version};
pub use handle::ringcap_session;
pub use inject::{
    ringcap_inject, ringcap_inject_frame, ringcap_inject_report, ringcap_inject_reports,
    RINGCAP_REASON_SIZE,
};
pub use options::{ringcap_options, ringcap_options_init, ringcap_options_init_sized};
pub use records::{
    ringcap_breakloop, ringcap_dispatch, ringcap_handler, ringcap_loop, ringcap_next_batch,
    ringcap_pkthdr, ringcap_read_batch,
};
pub use session::{
    ringcap_checkpoint, ringcap_close, ringcap_describe, ringcap_ended, ringcap_flush,
    ringcap_get_stats, ringcap_next_dump, ringcap_open, ringcap_setfilter, ringcap_stats,
    ringcap_stop, ringcap_wait,
};

use std::ffi::c_int;

/// Success.
pub const RINGCAP_OK: c_int = 0;
/// A bad argument (NULL where a value is needed, text that is not UTF-8,
/// an option out of range, an options struct of an unknown size).
pub const RINGCAP_ERR_ARG: c_int = -1;
/// The socket or the shared-memory ring failed (also: the daemon cannot be
/// reached, or it closed the connection).
pub const RINGCAP_ERR_IO: c_int = -2;
/// The daemon's policy refused the request.
pub const RINGCAP_ERR_REFUSED: c_int = -3;
/// The daemon answered with an error.
pub const RINGCAP_ERR_DAEMON: c_int = -4;
/// The daemon's answer did not make sense.
pub const RINGCAP_ERR_PROTOCOL: c_int = -5;
/// The session has ended (the call needs a running session).
pub const RINGCAP_ERR_ENDED: c_int = -6;
/// A bug in libringcap (a Rust panic, caught at the boundary).
pub const RINGCAP_ERR_INTERNAL: c_int = -7;
/// The caller's buffer cannot hold the next packet.
pub const RINGCAP_ERR_TOO_SMALL: c_int = -8;
/// Another call on this session is running (another thread, or a packet
/// callback calling back into the library).
pub const RINGCAP_ERR_BUSY: c_int = -9;

/// `ringcap_inject_report.status`: the frame left at `sent_ns`.
pub const RINGCAP_INJECT_SENT: i32 = 0;
/// Its time had passed by more than its tolerance: not sent.
pub const RINGCAP_INJECT_MISSED: i32 = 1;
/// The grant refused it (`reason` says which rule): not sent.
pub const RINGCAP_INJECT_REFUSED: i32 = 2;
/// Sending failed, or the session ended before its time (`reason`).
pub const RINGCAP_INJECT_FAILED: i32 = 3;

/// `ringcap_options.format`: classic pcap dump files.
pub const RINGCAP_FORMAT_PCAP: u32 = 0;
/// `ringcap_options.format`: pcapng dump files.
pub const RINGCAP_FORMAT_PCAPNG: u32 = 1;

#[cfg(test)]
mod tests;
