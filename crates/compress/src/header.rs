//! The file header: its fields, and how its 20 bytes are written and
//! parsed (the first thing any reader checks, apart from the blocks).

use crate::{le32, DecodeError, ErrorKind, FILE_HEADER_LEN, MAGIC, OLDEST_VERSION, VERSION};

/// Timestamp unit of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Microseconds since the epoch.
    Micro,
    /// Nanoseconds since the epoch.
    Nano,
}

/// The file header's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Format version of the file's blocks: [`VERSION`] for what
    /// [`Encoder`](crate::Encoder) writes; [`FileHeader::parse`] gives the
    /// file's.
    pub version: u16,
    /// Unit of every timestamp in the file.
    pub resolution: Resolution,
    /// pcap LINKTYPE of every packet.
    pub linktype: u32,
    /// Snap length the capture used.
    pub snaplen: u32,
}

impl FileHeader {
    /// The 20 header bytes.
    pub fn to_bytes(&self) -> [u8; FILE_HEADER_LEN] {
        let mut h = [0u8; FILE_HEADER_LEN];
        h[..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&self.version.to_le_bytes());
        let flags: u16 = (self.resolution == Resolution::Nano) as u16;
        h[10..12].copy_from_slice(&flags.to_le_bytes());
        h[12..16].copy_from_slice(&self.linktype.to_le_bytes());
        h[16..20].copy_from_slice(&self.snaplen.to_le_bytes());
        h
    }

    /// Parses a file header from the start of `b`.
    pub fn parse(b: &[u8]) -> Result<FileHeader, DecodeError> {
        let err = |offset, kind| DecodeError { offset, kind };
        if b.len() < FILE_HEADER_LEN {
            return Err(err(b.len() as u64, ErrorKind::Truncated));
        }
        if b[..8] != MAGIC {
            return Err(err(0, ErrorKind::NotCompressed));
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(err(8, ErrorKind::Version(version)));
        }
        let flags = u16::from_le_bytes([b[10], b[11]]);
        if flags & !1 != 0 {
            return Err(err(10, ErrorKind::BadFlags(flags as u32)));
        }
        Ok(FileHeader {
            version,
            resolution: if flags & 1 != 0 {
                Resolution::Nano
            } else {
                Resolution::Micro
            },
            linktype: le32(b, 12),
            snaplen: le32(b, 16),
        })
    }
}

/// True if `b` starts like a compressed file (for format detection).
pub fn is_compressed(b: &[u8]) -> bool {
    b.len() >= 4 && b[..4] == MAGIC[..4]
}
