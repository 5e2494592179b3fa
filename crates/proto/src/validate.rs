//! The bounds on every value a message can carry, checked after serde and
//! before a message is handed to anyone ([`Request::validate`],
//! [`Response::validate`]).
//!
//! serde only checks shapes and integer widths; these checks are what make a
//! decoded [`Request`] safe to pass on: names that cannot walk a path or
//! overflow `IFNAMSIZ`, filters that fit a C string, numbers that the capture
//! engine accepts. They are deliberately narrower than what the kernel or the
//! filesystem would take (an ASCII allow-list rather than a deny-list). The
//! daemon still applies its own checks (the policy, and `openat` relative to
//! the user's dump directory): this is the first wall, not the only one.
//!
//! Responses are bounded too, so a client can trust a decoded response's
//! shape as much as the daemon trusts a request's. Lists in responses
//! (`Dumps`, `Sessions`) have no count limit of their own: the 64 KiB message
//! limit bounds them.
//!
//! The predicates ([`is_interface_name`], [`is_dump_name`], …) are public so
//! that the daemon and client can apply the same rule to names that do not
//! come from a message.

use std::ops::RangeInclusive;

use crate::error::ProtoError;
#[cfg(doc)]
use crate::messages::Effective;
use crate::messages::{DumpFile, Request, Response};

mod checks;

use checks::{
    check_at_least_one, check_dump_name, check_dump_request, check_duration, check_effective,
    check_filter, check_flows, check_interfaces, check_program, check_sample, check_session,
    check_snap, check_text,
};

/// Most interfaces in one session.
pub const MAX_INTERFACES: usize = 16;

/// Longest interface name: `IFNAMSIZ` (16) less the terminating NUL.
pub const MAX_INTERFACE_NAME: usize = 15;

/// Longest filter expression, in bytes.
pub const MAX_FILTER: usize = 16 * 1024;

/// Most instructions in a client's compiled filter: half of the kernel's
/// 4096, leaving room for the framework's; 32 KiB of hex in a message.
pub const MAX_CLIENT_INSTRUCTIONS: usize = 2048;

/// Longest dump file name, in bytes (`NAME_MAX`).
pub const MAX_DUMP_NAME: usize = 255;

/// Snap lengths a client may ask for, in bytes.
pub const SNAPLEN_BYTES: RangeInclusive<u32> = 1..=262_144;

/// Header-mode upper bounds: at least an Ethernet header, at most 64 KiB.
pub const SNAPLEN_HEADERS_MAX: RangeInclusive<u32> = 14..=65_535;

/// Sampling ratios `1:N`.
pub const SAMPLE_N: RangeInclusive<u32> = 1..=(1 << 31);

/// Longest duration, in seconds (about 31 years: "forever" without infinity).
pub const MAX_DURATION_S: f64 = 1e9;

/// Longest free text (reasons, error messages, rule names), in bytes.
pub const MAX_TEXT: usize = 4096;

/// Most hidden fields in an [`Effective`].
pub const MAX_HIDDEN_FIELDS: usize = 64;

/// Longest hidden-field name (`ip.id`, `payload`), in bytes.
pub const MAX_FIELD_NAME: usize = 64;

/// Most frames in one `Inject` request.
pub const MAX_INJECT_BATCH: usize = 64;

/// Field names in one report's `rewritten`, at most (the guard knows 24).
pub const MAX_REWRITTEN: usize = 32;

/// Injected frame sizes: an Ethernet header at least, a jumbo frame at most.
pub const INJECT_FRAME_LEN: RangeInclusive<usize> = 14..=9216;

/// Longest tolerance of an injected frame, in nanoseconds (one minute).
pub const MAX_TOLERANCE_NS: u64 = 60_000_000_000;

/// Most reports in one `InjectReports` response.
pub const MAX_REPORTS: usize = 256;

/// Whether `name` is an acceptable interface name: 1 to 15 bytes of
/// `[A-Za-z0-9_.:-]`, and not `.` or `..`.
///
/// (`:` is kept for alias labels such as `eth0:1`; `/`, whitespace and
/// anything non-ASCII never pass.)
pub fn is_interface_name(name: &str) -> bool {
    (1..=MAX_INTERFACE_NAME).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// Whether `name` is an acceptable dump file name: 1 to 255 bytes of
/// `[A-Za-z0-9._-]`, not starting with `.` (so never `.`, `..` or a hidden
/// file) and never containing `/` (so it cannot leave the directory).
pub fn is_dump_name(name: &str) -> bool {
    (1..=MAX_DUMP_NAME).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether `filter` is an acceptable filter text: at most 16 KiB and no NUL
/// (it is handed to libpcap as a C string; a NUL would cut it short and the
/// daemon would compile something other than what it logged).
pub fn is_filter_text(filter: &str) -> bool {
    filter.len() <= MAX_FILTER && !filter.contains('\0')
}

/// Whether `name` is an acceptable hidden-field name: 1 to 64 bytes of
/// `[A-Za-z0-9_.-]`.
pub fn is_field_name(name: &str) -> bool {
    (1..=MAX_FIELD_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// `text` made fit for a free-text field: NULs removed and cut (on a
/// character boundary) to [`MAX_TEXT`] bytes. For the daemon building
/// `Error`/`Refused`/`Ended` texts out of libpcap messages and the like.
pub fn clamp_text(text: &str) -> String {
    let mut out: String = text.chars().filter(|&c| c != '\0').collect();
    if out.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

impl Request {
    /// Checks every value against its bounds (see the module docs). Run by
    /// [`decode_request`](crate::decode_request); public so that a client can
    /// check a request it built before sending it.
    pub fn validate(&self) -> Result<(), ProtoError> {
        match self {
            Request::Open {
                interfaces,
                filter,
                program,
                snaplen,
                sample,
                format: _,
                dump,
                duration_s,
                count,
                compress,
                inject_only,
                flows,
            } => {
                if let Some(f) = flows {
                    check_flows("flows", f, *inject_only, dump.is_some(), *compress)?;
                }
                check_interfaces("interfaces", interfaces)?;
                check_filter("filter", filter)?;
                check_program("program", program.as_ref())?;
                check_snap("snaplen", snaplen)?;
                if let Some(sample) = sample {
                    check_sample("sample", sample)?;
                }
                if let Some(dump) = dump {
                    check_dump_request("dump", dump)?;
                }
                if let Some(seconds) = duration_s {
                    check_duration("duration_s", *seconds)?;
                }
                if let Some(count) = count {
                    check_at_least_one("count", *count)?;
                }
                Ok(())
            }
            Request::SetFilter { filter, program } => {
                check_filter("filter", filter)?;
                check_program("program", program.as_ref())
            }
            Request::FetchDump { name } | Request::DeleteDump { name } => {
                check_dump_name("name", name)
            }
            Request::Inject { frames } => {
                if frames.is_empty() || frames.len() > MAX_INJECT_BATCH {
                    return Err(ProtoError::invalid(
                        "frames",
                        format!(
                            "{} frames; 1 to {MAX_INJECT_BATCH} per request",
                            frames.len()
                        ),
                    ));
                }
                for (i, f) in frames.iter().enumerate() {
                    if !INJECT_FRAME_LEN.contains(&f.data.len()) {
                        return Err(ProtoError::invalid(
                            format!("frames[{i}].data"),
                            format!(
                                "{} bytes; a frame is {} to {} bytes",
                                f.data.len(),
                                INJECT_FRAME_LEN.start(),
                                INJECT_FRAME_LEN.end()
                            ),
                        ));
                    }
                    if f.tolerance_ns > MAX_TOLERANCE_NS {
                        return Err(ProtoError::invalid(
                            format!("frames[{i}].tolerance_ns"),
                            format!("{}; at most {MAX_TOLERANCE_NS}", f.tolerance_ns),
                        ));
                    }
                }
                Ok(())
            }
            Request::InjectReports => Ok(()),
            Request::Retrieve {
                interface,
                filter,
                program,
                snaplen,
                after_ns: _,
                before_ns: _,
                max_bytes,
            } => {
                check_interfaces("interface", std::slice::from_ref(interface))?;
                check_filter("filter", filter)?;
                check_program("program", program.as_ref())?;
                check_snap("snaplen", snaplen)?;
                if let Some(b) = max_bytes {
                    check_at_least_one("max_bytes", *b)?;
                }
                Ok(())
            }
            Request::Stats
            | Request::Checkpoint
            | Request::Flush
            | Request::Close
            | Request::ListDumps
            | Request::Sessions => Ok(()),
        }
    }
}

impl Response {
    /// Checks every value against its bounds (see the module docs). Run by
    /// [`decode_response`](crate::decode_response); public so that the
    /// daemon can check a response before sending it.
    pub fn validate(&self) -> Result<(), ProtoError> {
        match self {
            Response::Accepted {
                session: _,
                effective,
                ring,
            } => {
                check_effective("effective", effective)?;
                check_at_least_one("ring.capacity", ring.capacity)
            }
            Response::Refused {
                grant: _,
                rule,
                reason,
            } => {
                check_text("rule", rule)?;
                check_text("reason", reason)
            }
            Response::Error { message } => check_text("message", message),
            Response::Ended {
                reason,
                counters: _,
            } => check_text("reason", reason),
            Response::DumpPublished { name } | Response::Dump { name, bytes: _ } => {
                check_dump_name("name", name)
            }
            Response::InjectReports { reports } => {
                if reports.len() > MAX_REPORTS {
                    return Err(ProtoError::invalid(
                        "reports",
                        format!("{} reports, at most {MAX_REPORTS}", reports.len()),
                    ));
                }
                for (i, r) in reports.iter().enumerate() {
                    if let Some(reason) = &r.reason {
                        check_text(&format!("reports[{i}].reason"), reason)?;
                    }
                    if r.rewritten.len() > MAX_REWRITTEN {
                        return Err(ProtoError::invalid(
                            "rewritten",
                            format!("{} fields, at most {MAX_REWRITTEN}", r.rewritten.len()),
                        ));
                    }
                    for f in &r.rewritten {
                        check_text(&format!("reports[{i}].rewritten"), f)?;
                    }
                }
                Ok(())
            }
            Response::Dumps { files } => {
                for (i, DumpFile { name, .. }) in files.iter().enumerate() {
                    check_dump_name(&format!("files[{i}].name"), name)?;
                }
                Ok(())
            }
            Response::Sessions { sessions, .. } => {
                for (i, session) in sessions.iter().enumerate() {
                    check_session(&format!("sessions[{i}]"), session)?;
                }
                Ok(())
            }
            Response::Retrieving { effective, .. } => check_effective("effective", effective),
            Response::Retrieved { cut, .. } => match cut {
                Some(c) => check_text("cut", c),
                None => Ok(()),
            },
            Response::Stats { counters: _ } | Response::Ok => Ok(()),
        }
    }

    /// An `Error` response whose message is `message` made fit
    /// ([`clamp_text`]), so that it always passes validation.
    pub fn error(message: impl std::fmt::Display) -> Response {
        Response::Error {
            message: clamp_text(&message.to_string()),
        }
    }
}
