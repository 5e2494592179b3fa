//! What can be wrong with compressed input, and how it is told: every
//! reading function of the crate returns these, so they stand apart from
//! any one of them.

use std::fmt;
use std::io;

use crate::{MAX_BLOCK, OLDEST_VERSION, SLOTS, VERSION};

/// What is wrong with compressed input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input ends inside a header, block or record.
    Truncated,
    /// No compressed-file magic number.
    NotCompressed,
    /// A version this reader does not know.
    Version(u16),
    /// A block does not start with the block magic.
    BadBlockMagic,
    /// A block's payload length is over [`MAX_BLOCK`].
    BlockTooLarge(u32),
    /// A block's checksum does not match its contents.
    BadChecksum,
    /// A record's tag byte is not a defined one.
    BadTag(u8),
    /// Flags undefined, or not applicable to the reference's headers.
    BadFlags(u32),
    /// A varint longer than 64 bits.
    BadVarint,
    /// A length out of range (captured length over
    /// [`MAX_CAPLEN`](crate::MAX_CAPLEN) or shorter than the predicted
    /// headers).
    BadLength,
    /// A slot number of [`SLOTS`] or more.
    BadSlot,
    /// A record refers to a context no earlier record of the block opened.
    EmptyContext,
    /// A byte run reaches past the headers.
    BadRun,
    /// A record that should open or continue a context has headers the
    /// codec cannot model.
    NoLayout,
    /// A block's payload holds more than its records.
    TrailingBytes,
    /// Reading failed.
    Io(io::ErrorKind, String),
}

/// Corrupt or truncated input, with the byte offset (from the start of the
/// file) where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset of the problem.
    pub offset: u64,
    /// What the problem is.
    pub kind: ErrorKind,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            ErrorKind::Truncated => "input ends in the middle of a header, block or record".into(),
            ErrorKind::NotCompressed => "not a ringcap compressed file (bad magic number)".into(),
            ErrorKind::Version(1) => format!(
                "compressed format version 1 is not read any more (this reader knows versions \
                 {OLDEST_VERSION} to {VERSION}): convert the file with the ringcap that wrote it"
            ),
            ErrorKind::Version(v) => format!(
                "compressed format version {v} is not supported (this reader knows versions \
                 {OLDEST_VERSION} to {VERSION})"
            ),
            ErrorKind::BadBlockMagic => "no block starts here (bad block magic)".into(),
            ErrorKind::BlockTooLarge(n) => {
                format!("block payload of {n} bytes is over the limit of {MAX_BLOCK}")
            }
            ErrorKind::BadChecksum => "block checksum mismatch (damaged block)".into(),
            ErrorKind::BadTag(t) => format!("undefined record tag 0x{t:02x}"),
            ErrorKind::BadFlags(m) => format!("record flags 0x{m:x} undefined or not applicable"),
            ErrorKind::BadVarint => "varint longer than 64 bits".into(),
            ErrorKind::BadLength => "length out of range".into(),
            ErrorKind::BadSlot => format!("slot number not below {SLOTS}"),
            ErrorKind::EmptyContext => "record refers to an empty context".into(),
            ErrorKind::BadRun => "byte run reaches past the headers".into(),
            ErrorKind::NoLayout => "record's headers cannot be modelled".into(),
            ErrorKind::TrailingBytes => "block holds bytes after its last record".into(),
            ErrorKind::Io(_, m) => format!("read error: {m}"),
        };
        f.write_str(&what)
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "corrupt compressed input at byte {}: {}",
            self.offset, self.kind
        )
    }
}

impl std::error::Error for DecodeError {}
