//! What can be wrong with a file, always with the byte offset where it was
//! found, and the few constructors and checks the format readers share.

use std::fmt;
use std::io;

use super::{MAX_ORDINARY_CAPLEN, MAX_RECORD_LEN};

/// What is wrong with a file.
#[derive(Debug)]
#[non_exhaustive]
pub enum FormatErrorKind {
    /// Reading failed.
    Io(io::Error),
    /// The file is empty.
    Empty,
    /// The file starts with neither a pcap magic number nor a pcapng SHB.
    NotCapture {
        /// The first (up to 4) bytes of the file.
        first_bytes: Vec<u8>,
    },
    /// The pcap or pcapng version is one this reader does not know.
    UnsupportedVersion {
        /// Major version.
        major: u16,
        /// Minor version.
        minor: u16,
    },
    /// The file ends in the middle of something.
    Truncated {
        /// What was cut: "file header", "record header", "record", "block header"
        /// or "block".
        what: &'static str,
        /// Bytes present.
        have: u64,
        /// Bytes needed.
        need: u64,
    },
    /// A record claims more packet data than the snapshot length allows.
    CaplenTooLarge {
        /// The captured length the record claims.
        caplen: u32,
        /// The interface's snapshot length.
        snaplen: u32,
        /// The limit applied: the snapshot length, at least 262144.
        limit: u32,
    },
    /// A pcapng block length that cannot be right.
    BadBlockLength {
        /// The length claimed.
        len: u32,
    },
    /// The total length at the end of a pcapng block differs from the one at
    /// its start.
    LengthMismatch {
        /// Length at the start of the block.
        leading: u32,
        /// Length at the end of the block.
        trailing: u32,
    },
    /// A section header block with an unknown byte-order magic.
    BadByteOrderMagic {
        /// The four bytes found.
        bytes: [u8; 4],
    },
    /// A packet refers to an interface the section has not described.
    UnknownInterface {
        /// The interface id in the packet.
        id: u32,
        /// How many interfaces the section has.
        count: usize,
    },
    /// A record header of all zeros (only reported when checking a file for
    /// repair: it is what a crash leaves where the file was not yet written).
    ZeroRecord,
    /// Any other inconsistency, described in a sentence.
    Malformed(String),
    /// A problem in a compressed file (see `ringcap_compress::ErrorKind`).
    Compressed(ringcap_compress::ErrorKind),
}

impl fmt::Display for FormatErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatErrorKind::Io(e) => write!(f, "read error: {e}"),
            FormatErrorKind::Empty => write!(f, "not a pcap or pcapng file (it is empty)"),
            FormatErrorKind::NotCapture { first_bytes } => {
                write!(f, "not a pcap or pcapng file (starts with")?;
                for b in first_bytes {
                    write!(f, " {b:02x}")?;
                }
                write!(f, ")")
            }
            FormatErrorKind::UnsupportedVersion { major, minor } => {
                write!(f, "unsupported file format version {major}.{minor}")
            }
            FormatErrorKind::Truncated { what, have, need } => write!(
                f,
                "file ends in the middle of a {what} (truncated: {have} of {need} bytes)"
            ),
            FormatErrorKind::CaplenTooLarge {
                caplen,
                snaplen,
                limit,
            } => {
                if limit == snaplen {
                    write!(
                        f,
                        "record claims {caplen} bytes of packet data, more than the snapshot length {snaplen} allows"
                    )
                } else {
                    write!(
                        f,
                        "record claims {caplen} bytes of packet data, more than the limit of {limit} bytes (snapshot length {snaplen})"
                    )
                }
            }
            FormatErrorKind::BadBlockLength { len } => write!(
                f,
                "block claims a length of {len} bytes, which is impossible (pcapng blocks are at least 12 bytes, a multiple of 4, and at most {MAX_RECORD_LEN})"
            ),
            FormatErrorKind::LengthMismatch { leading, trailing } => write!(
                f,
                "block length {leading} at the start of the block does not match the length {trailing} at its end"
            ),
            FormatErrorKind::BadByteOrderMagic { bytes } => write!(
                f,
                "section header block has an invalid byte-order magic {:02x} {:02x} {:02x} {:02x}",
                bytes[0], bytes[1], bytes[2], bytes[3]
            ),
            FormatErrorKind::UnknownInterface { id, count } => write!(
                f,
                "packet refers to interface {id}, but the section describes only {count} interface{}",
                if *count == 1 { "" } else { "s" }
            ),
            FormatErrorKind::ZeroRecord => write!(
                f,
                "record header is all zeros (what a crash leaves where data was never written)"
            ),
            FormatErrorKind::Malformed(s) => f.write_str(s),
            FormatErrorKind::Compressed(k) => write!(f, "compressed file: {k}"),
        }
    }
}

/// A problem with a capture file, at a byte offset.
#[derive(Debug)]
pub struct FormatError {
    /// Byte offset in the file of the record (or header) that could not be read.
    pub offset: u64,
    /// What is wrong.
    pub kind: FormatErrorKind,
}

impl FormatError {
    pub(super) fn new(offset: u64, kind: FormatErrorKind) -> Self {
        FormatError { offset, kind }
    }

    /// True if the error is that the file ends in the middle of a record.
    pub fn is_truncation(&self) -> bool {
        matches!(
            self.kind,
            FormatErrorKind::Truncated { .. }
                | FormatErrorKind::Compressed(ringcap_compress::ErrorKind::Truncated)
        )
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}: {}", self.offset, self.kind)
    }
}

impl std::error::Error for FormatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            FormatErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

pub(super) fn truncated(offset: u64, what: &'static str, have: usize, need: usize) -> FormatError {
    FormatError::new(
        offset,
        FormatErrorKind::Truncated {
            what,
            have: have as u64,
            need: need as u64,
        },
    )
}

pub(super) fn malformed(offset: u64, msg: String) -> FormatError {
    FormatError::new(offset, FormatErrorKind::Malformed(msg))
}

/// The limit on a captured length for a snapshot length.
fn caplen_limit(snaplen: u32) -> u32 {
    snaplen.clamp(MAX_ORDINARY_CAPLEN, MAX_RECORD_LEN)
}

pub(super) fn check_caplen(offset: u64, caplen: u32, snaplen: u32) -> Result<(), FormatError> {
    let limit = caplen_limit(snaplen);
    if caplen > limit {
        return Err(FormatError::new(
            offset,
            FormatErrorKind::CaplenTooLarge {
                caplen,
                snaplen,
                limit,
            },
        ));
    }
    Ok(())
}
