//! [`ProtoError`]: why bytes were not a valid message, in words.
//!
//! The text of these errors goes into the daemon's log and back to the client
//! in a [`Response::Error`](crate::Response::Error), so anything in it that
//! came from the peer (an unknown field's name, a bad interface name) is
//! escaped to printable ASCII and cut short (`quote`): a hostile client
//! must not be able to forge log lines, send terminal escapes to an
//! administrator's terminal, or make the daemon echo 64 KiB back.

use std::fmt;

use crate::messages::MessageKind;
use crate::{MAX_MESSAGE, VERSION};

/// Longest piece of peer-supplied text quoted in an error, in characters.
const QUOTE_MAX: usize = 64;

/// Longest serde detail kept in an error, in characters (serde's "expected
/// one of …" lists are long but useful; bounded all the same).
const DETAIL_MAX: usize = 240;

/// Why a message was refused. Never produced by a panic: every input, however
/// hostile, ends in a value or one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtoError {
    /// Shorter than the 8-byte header.
    TruncatedHeader {
        /// Bytes received.
        len: usize,
    },
    /// The body is over [`MAX_MESSAGE`] bytes (checked before any parsing).
    TooLarge {
        /// Body bytes received (datagram length less the header).
        len: usize,
    },
    /// The first four bytes are not `RCD1`: not a ringcapd message.
    BadMagic {
        /// What was there instead.
        found: [u8; 4],
    },
    /// A protocol version this side does not speak.
    UnsupportedVersion {
        /// The version in the header.
        found: u16,
        /// What was being decoded (tells who "this side" is).
        expected: MessageKind,
    },
    /// The header's kind field is not the kind being decoded (a response
    /// sent where a request belongs, or an unknown kind).
    WrongKind {
        /// The kind field in the header.
        found: u16,
        /// What was being decoded.
        expected: MessageKind,
    },
    /// The body is not well-formed JSON (syntax error or cut short).
    Malformed {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// serde_json's description, escaped and bounded.
        detail: String,
    },
    /// Well-formed JSON that is not a message: unknown `"type"`, unknown
    /// field, missing field, wrong type of value, duplicate field.
    Schema {
        /// 1-based line of the error (0 if not known).
        line: usize,
        /// 1-based column of the error (0 if not known).
        column: usize,
        /// serde's description (names the field), escaped and bounded.
        detail: String,
    },
    /// A field's value is outside its bounds (checked after serde by
    /// `validate`).
    Invalid {
        /// Path of the field, e.g. `interfaces[0]` or `snaplen.bytes`.
        field: String,
        /// What is wrong with it, in words.
        reason: String,
    },
}

impl ProtoError {
    /// Shorthand for [`ProtoError::Invalid`].
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ProtoError {
        ProtoError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Turns a serde_json error into the matching variant.
    pub(crate) fn from_json(err: &serde_json::Error) -> ProtoError {
        let (line, column) = (err.line(), err.column());
        // serde_json's Display appends " at line L column C"; keep only the
        // description, the position has its own fields.
        let full = err.to_string();
        let suffix = format!(" at line {line} column {column}");
        let detail = full.strip_suffix(&suffix).unwrap_or(&full);
        let detail = escape(detail, DETAIL_MAX);
        match err.classify() {
            serde_json::error::Category::Data => ProtoError::Schema {
                line,
                column,
                detail,
            },
            // Syntax, Eof, and Io (cannot happen from a slice, but would mean
            // the bytes could not be read as JSON all the same).
            _ => ProtoError::Malformed {
                line,
                column,
                detail,
            },
        }
    }
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::TruncatedHeader { len } => write!(
                f,
                "truncated header: {len} bytes, every message starts with an 8-byte header"
            ),
            ProtoError::TooLarge { len } => write!(
                f,
                "message too large: body of {len} bytes, the limit is {MAX_MESSAGE}"
            ),
            ProtoError::BadMagic { found } => write!(
                f,
                "bad magic \"{}\": not a ringcapd message (expected \"RCD1\")",
                found.escape_ascii()
            ),
            ProtoError::UnsupportedVersion { found, expected } => {
                let side = match expected {
                    MessageKind::Request => "daemon",
                    MessageKind::Response => "client",
                };
                write!(
                    f,
                    "unsupported protocol version {found} (this {side} speaks {VERSION})"
                )
            }
            ProtoError::WrongKind { found, expected } => write!(
                f,
                "header kind {found} where a {} ({}) was expected",
                expected.name(),
                *expected as u16
            ),
            ProtoError::Malformed {
                line,
                column,
                detail,
            } => write!(f, "malformed JSON at line {line} column {column}: {detail}"),
            ProtoError::Schema {
                line,
                column,
                detail,
            } => {
                if *line == 0 {
                    write!(f, "not a valid message: {detail}")
                } else {
                    write!(
                        f,
                        "not a valid message (line {line} column {column}): {detail}"
                    )
                }
            }
            ProtoError::Invalid { field, reason } => write!(f, "{field}: {reason}"),
        }
    }
}

impl std::error::Error for ProtoError {}

/// `s` as a double-quoted, printable-ASCII literal of at most [`QUOTE_MAX`]
/// characters (then `...`), for echoing a peer's value in an error.
pub(crate) fn quote(s: &str) -> String {
    format!("\"{}\"", escape(s, QUOTE_MAX))
}

/// `s` with everything outside printable ASCII (and `"`/`\`) escaped, cut
/// after `max` characters of input; the result is always printable ASCII.
fn escape(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push_str("...");
            break;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            _ => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_and_bounds() {
        assert_eq!(quote("a\nb\u{1b}[31m\"\\"), r#""a\nb\u{1b}[31m\"\\""#);
        assert_eq!(quote("\u{202e}é"), r#""\u{202e}\u{e9}""#);
        let long = "x".repeat(1000);
        let q = quote(&long);
        assert_eq!(q.len(), QUOTE_MAX + 5);
        assert!(q.ends_with("x...\""));
    }
}
