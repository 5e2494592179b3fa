//! The checks behind [`Request::validate`](crate::Request::validate) and
//! [`Response::validate`](crate::Response::validate), one per kind of value
//! (interface lists, filters and programs, dump names, snap lengths,
//! sampling, flow settings, effective settings, texts, numbers). Separate
//! from the entry points so that each message's rules read as a list of
//! these, and each bound is written once.

use std::ops::RangeInclusive;

use super::{
    is_dump_name, is_field_name, is_interface_name, MAX_CLIENT_INSTRUCTIONS, MAX_DUMP_NAME,
    MAX_DURATION_S, MAX_FIELD_NAME, MAX_FILTER, MAX_HIDDEN_FIELDS, MAX_INTERFACES,
    MAX_INTERFACE_NAME, MAX_TEXT, SAMPLE_N, SNAPLEN_BYTES, SNAPLEN_HEADERS_MAX,
};
use crate::error::{quote, ProtoError};
use crate::messages::{DumpRequest, Effective, SampleRequest, SessionInfo, SnapRequest};

pub(super) fn check_interfaces(field: &str, interfaces: &[String]) -> Result<(), ProtoError> {
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
pub(super) fn check_program(
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

pub(super) fn check_filter(field: &str, filter: &str) -> Result<(), ProtoError> {
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

pub(super) fn check_dump_name(field: &str, name: &str) -> Result<(), ProtoError> {
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

pub(super) fn check_snap(field: &str, snap: &SnapRequest) -> Result<(), ProtoError> {
    match *snap {
        SnapRequest::Bytes(n) => check_range(&format!("{field}.bytes"), n, &SNAPLEN_BYTES),
        SnapRequest::Headers { max } => {
            check_range(&format!("{field}.headers.max"), max, &SNAPLEN_HEADERS_MAX)
        }
    }
}

pub(super) fn check_sample(field: &str, sample: &SampleRequest) -> Result<(), ProtoError> {
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
pub(super) fn check_flows(
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

pub(super) fn check_dump_request(field: &str, dump: &DumpRequest) -> Result<(), ProtoError> {
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

pub(super) fn check_effective(field: &str, effective: &Effective) -> Result<(), ProtoError> {
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

pub(super) fn check_session(field: &str, session: &SessionInfo) -> Result<(), ProtoError> {
    check_interfaces(&format!("{field}.interfaces"), &session.interfaces)?;
    check_filter(&format!("{field}.filter"), &session.filter)
}

pub(super) fn check_text(field: &str, text: &str) -> Result<(), ProtoError> {
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

pub(super) fn check_at_least_one(field: &str, value: u64) -> Result<(), ProtoError> {
    if value >= 1 {
        return Ok(());
    }
    Err(ProtoError::invalid(field, "must be at least 1"))
}

pub(super) fn check_duration(field: &str, seconds: f64) -> Result<(), ProtoError> {
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
