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

use crate::error::{quote, ProtoError};
use crate::messages::{
    DumpFile, DumpRequest, Effective, Request, Response, SampleRequest, SessionInfo, SnapRequest,
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

fn check_interfaces(field: &str, interfaces: &[String]) -> Result<(), ProtoError> {
    if interfaces.is_empty() {
        return Err(ProtoError::invalid(
            field,
            "at least one interface is needed",
        ));
    }
    if interfaces.len() > MAX_INTERFACES {
        return Err(ProtoError::invalid(
            field,
            format!(
                "{} interfaces, at most {MAX_INTERFACES} are allowed",
                interfaces.len()
            ),
        ));
    }
    for (i, name) in interfaces.iter().enumerate() {
        if !is_interface_name(name) {
            return Err(ProtoError::invalid(
                format!("{field}[{i}]"),
                format!(
                    "{} is not an interface name (1 to {MAX_INTERFACE_NAME} bytes of \
                     A-Z a-z 0-9 _ . : -, not \".\" or \"..\")",
                    quote(name)
                ),
            ));
        }
        // Names are short and the list is at most 16 long: quadratic is fine.
        if interfaces[..i].contains(name) {
            return Err(ProtoError::invalid(
                format!("{field}[{i}]"),
                format!("{} is listed twice", quote(name)),
            ));
        }
    }
    Ok(())
}

/// A compiled filter: whole hex instructions, 1 to
/// [`MAX_CLIENT_INSTRUCTIONS`]. What the program does, and whether a filter
/// text came without one, is the daemon's policy to judge.
fn check_program(
    field: &str,
    program: Option<&crate::messages::FilterProgram>,
) -> Result<(), ProtoError> {
    let Some(p) = program else {
        return Ok(());
    };
    if p.code.is_empty() || p.code.len() > MAX_CLIENT_INSTRUCTIONS * 16 {
        return Err(ProtoError::invalid(
            field,
            format!(
                "{} hex digits; a program is 1 to {MAX_CLIENT_INSTRUCTIONS} instructions of 16",
                p.code.len()
            ),
        ));
    }
    if p.instructions().is_none() {
        return Err(ProtoError::invalid(
            field,
            "not a sequence of 16-digit lowercase hex instructions",
        ));
    }
    Ok(())
}

fn check_filter(field: &str, filter: &str) -> Result<(), ProtoError> {
    if filter.len() > MAX_FILTER {
        return Err(ProtoError::invalid(
            field,
            format!(
                "{} bytes, filters are limited to {MAX_FILTER}",
                filter.len()
            ),
        ));
    }
    if filter.contains('\0') {
        return Err(ProtoError::invalid(field, "contains a NUL byte"));
    }
    Ok(())
}

fn check_dump_name(field: &str, name: &str) -> Result<(), ProtoError> {
    if is_dump_name(name) {
        return Ok(());
    }
    Err(ProtoError::invalid(
        field,
        format!(
            "{} is not a dump file name (1 to {MAX_DUMP_NAME} bytes of A-Z a-z 0-9 . _ -, \
             not starting with \".\", no \"/\")",
            quote(name)
        ),
    ))
}

fn check_snap(field: &str, snap: &SnapRequest) -> Result<(), ProtoError> {
    match *snap {
        SnapRequest::Bytes(n) => check_range(&format!("{field}.bytes"), n, &SNAPLEN_BYTES),
        SnapRequest::Headers { max } => {
            check_range(&format!("{field}.headers.max"), max, &SNAPLEN_HEADERS_MAX)
        }
    }
}

fn check_sample(field: &str, sample: &SampleRequest) -> Result<(), ProtoError> {
    match *sample {
        SampleRequest::Packets(n) => check_range(&format!("{field}.packets"), n, &SAMPLE_N),
        SampleRequest::Flows(n) => check_range(&format!("{field}.flows"), n, &SAMPLE_N),
    }
}

/// Flow settings: timeouts and table size within the hard limits
/// ([`crate::flows::FLOW_TIMEOUT_S`], [`crate::flows::FLOW_TABLE`]).
fn check_flow_numbers(
    field: &str,
    active: u32,
    idle: u32,
    max_flows: u32,
) -> Result<(), ProtoError> {
    use crate::flows::{FLOW_TABLE, FLOW_TIMEOUT_S};
    for (name, v) in [("active_timeout_s", active), ("idle_timeout_s", idle)] {
        if !FLOW_TIMEOUT_S.contains(&v) {
            return Err(ProtoError::invalid(
                format!("{field}.{name}"),
                format!(
                    "{v} s; from {} to {} s",
                    FLOW_TIMEOUT_S.start(),
                    FLOW_TIMEOUT_S.end()
                ),
            ));
        }
    }
    if !FLOW_TABLE.contains(&max_flows) {
        return Err(ProtoError::invalid(
            format!("{field}.max_flows"),
            format!(
                "{max_flows} flows; from {} to {}",
                FLOW_TABLE.start(),
                FLOW_TABLE.end()
            ),
        ));
    }
    Ok(())
}

/// A flow request: its numbers in bounds, and nothing it cannot go with.
fn check_flows(
    field: &str,
    f: &crate::flows::FlowRequest,
    inject_only: bool,
    dump: bool,
    compress: bool,
) -> Result<(), ProtoError> {
    check_flow_numbers(field, f.active_timeout_s, f.idle_timeout_s, f.max_flows)?;
    if inject_only || dump {
        return Err(ProtoError::invalid(
            field,
            "flow records come through the session's ring: not with inject_only or dump",
        ));
    }
    if compress && !f.packets {
        return Err(ProtoError::invalid(
            field,
            "compress is for packets, and this session asks for flow records only",
        ));
    }
    Ok(())
}

fn check_dump_request(field: &str, dump: &DumpRequest) -> Result<(), ProtoError> {
    let DumpRequest {
        rotate_seconds,
        rotate_packets,
        rotate_bytes,
    } = dump;
    for (name, value) in [
        ("rotate_seconds", rotate_seconds),
        ("rotate_packets", rotate_packets),
        ("rotate_bytes", rotate_bytes),
    ] {
        if let Some(value) = value {
            check_at_least_one(&format!("{field}.{name}"), *value)?;
        }
    }
    Ok(())
}

fn check_effective(field: &str, effective: &Effective) -> Result<(), ProtoError> {
    let Effective {
        interfaces,
        filter,
        framework_filter,
        snaplen,
        sample,
        hide,
        anonymize: _,
        max_packets_per_second,
        max_bits_per_second,
        max_duration_s,
        grant: _,
        compress,
        compress_format,
        flows,
    } = effective;
    if let Some(f) = flows {
        check_flow_numbers(
            &format!("{field}.flows"),
            f.active_timeout_s,
            f.idle_timeout_s,
            f.max_flows,
        )?;
    }
    if compress_format.is_some() && !compress {
        return Err(ProtoError::invalid(
            format!("{field}.compress_format"),
            "given for a stream that is not compressed",
        ));
    }
    check_interfaces(&format!("{field}.interfaces"), interfaces)?;
    check_filter(&format!("{field}.filter"), filter)?;
    check_filter(&format!("{field}.framework_filter"), framework_filter)?;
    check_snap(&format!("{field}.snaplen"), snaplen)?;
    if let Some(sample) = sample {
        check_sample(&format!("{field}.sample"), sample)?;
    }
    if hide.len() > MAX_HIDDEN_FIELDS {
        return Err(ProtoError::invalid(
            format!("{field}.hide"),
            format!(
                "{} fields, at most {MAX_HIDDEN_FIELDS} are allowed",
                hide.len()
            ),
        ));
    }
    for (i, name) in hide.iter().enumerate() {
        if !is_field_name(name) {
            return Err(ProtoError::invalid(
                format!("{field}.hide[{i}]"),
                format!(
                    "{} is not a field name (1 to {MAX_FIELD_NAME} bytes of A-Z a-z 0-9 _ . -)",
                    quote(name)
                ),
            ));
        }
    }
    if let Some(rate) = max_packets_per_second {
        check_at_least_one(&format!("{field}.max_packets_per_second"), *rate)?;
    }
    if let Some(rate) = max_bits_per_second {
        check_at_least_one(&format!("{field}.max_bits_per_second"), *rate)?;
    }
    if let Some(seconds) = max_duration_s {
        check_duration(&format!("{field}.max_duration_s"), *seconds)?;
    }
    Ok(())
}

fn check_session(field: &str, session: &SessionInfo) -> Result<(), ProtoError> {
    check_interfaces(&format!("{field}.interfaces"), &session.interfaces)?;
    check_filter(&format!("{field}.filter"), &session.filter)
}

fn check_text(field: &str, text: &str) -> Result<(), ProtoError> {
    if text.len() > MAX_TEXT {
        return Err(ProtoError::invalid(
            field,
            format!("{} bytes, at most {MAX_TEXT} are allowed", text.len()),
        ));
    }
    if text.contains('\0') {
        return Err(ProtoError::invalid(field, "contains a NUL byte"));
    }
    Ok(())
}

fn check_range(field: &str, value: u32, range: &RangeInclusive<u32>) -> Result<(), ProtoError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ProtoError::invalid(
        field,
        format!(
            "{value} is out of range {}..={}",
            range.start(),
            range.end()
        ),
    ))
}

fn check_at_least_one(field: &str, value: u64) -> Result<(), ProtoError> {
    if value >= 1 {
        return Ok(());
    }
    Err(ProtoError::invalid(field, "must be at least 1"))
}

fn check_duration(field: &str, seconds: f64) -> Result<(), ProtoError> {
    // `is_finite` first: it also refuses NaN, which no comparison would (NaN
    // can only come from a locally built message; JSON has none).
    if !seconds.is_finite() || seconds <= 0.0 || seconds > MAX_DURATION_S {
        return Err(ProtoError::invalid(
            field,
            format!("{seconds} seconds is out of range: a finite number, 0 < s ≤ 1e9"),
        ));
    }
    Ok(())
}
