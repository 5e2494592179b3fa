//! Reading any pcap or pcapng file, whoever wrote it.
//!
//! [`Reader`] accepts pcap with micro- or nanosecond timestamps in either byte
//! order, and pcapng in either byte order with any number of sections. Packets
//! come out one at a time with nanosecond timestamps, their data borrowed from the
//! reader's internal buffer (no allocation per packet), so multi-gigabyte files
//! read at disk speed.
//!
//! The reader is strict about framing, so that garbage and files cut short are
//! reported rather than misread: every error carries the byte offset of the
//! record that could not be read, and everything before that offset was read
//! correctly. It never panics, whatever the input.

use std::fmt;
use std::io::{self, Read};

use crate::pcap::{FILE_HEADER_LEN, MAGIC_MICRO, MAGIC_NANO, RECORD_HEADER_LEN};
use crate::pcapng::{
    BT_EPB, BT_IDB, BT_PB, BT_SHB, BT_SPB, BYTE_ORDER_MAGIC, IF_DESCRIPTION, IF_FILTER, IF_NAME,
    IF_TSOFFSET, IF_TSRESOL,
};
use crate::TsResolution;

/// Initial size of the read buffer. It grows (doubling) only for records larger
/// than itself.
const BUF_SIZE: usize = 1 << 20;

/// Captured lengths up to this are always accepted, whatever the snapshot length
/// says (it is what libpcap and Wireshark allow for ordinary link types).
pub const MAX_ORDINARY_CAPLEN: u32 = 262_144;

/// No record or block may be longer than this, whatever the snapshot length
/// says; it bounds the memory a corrupt length field can make the reader use.
pub const MAX_RECORD_LEN: u32 = 256 << 20;

/// Byte order of a file (or of one pcapng section).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// Least significant byte first (x86, most ARM).
    Little,
    /// Most significant byte first.
    Big,
}

impl ByteOrder {
    /// The byte order of the machine running this code.
    pub const fn host() -> Self {
        if cfg!(target_endian = "big") {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        }
    }

    #[inline]
    fn u16(self, b: &[u8], at: usize) -> u16 {
        let v = [b[at], b[at + 1]];
        match self {
            ByteOrder::Little => u16::from_le_bytes(v),
            ByteOrder::Big => u16::from_be_bytes(v),
        }
    }

    #[inline]
    fn u32(self, b: &[u8], at: usize) -> u32 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        match self {
            ByteOrder::Little => u32::from_le_bytes(v),
            ByteOrder::Big => u32::from_be_bytes(v),
        }
    }

    #[inline]
    fn u64(self, b: &[u8], at: usize) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[at..at + 8]);
        match self {
            ByteOrder::Little => u64::from_le_bytes(v),
            ByteOrder::Big => u64::from_be_bytes(v),
        }
    }
}

/// What kind of file a [`Reader`] is reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// Classic pcap.
    Pcap {
        /// Micro- or nanosecond timestamps (from the magic number).
        resolution: TsResolution,
        /// The byte order the file was written in.
        byte_order: ByteOrder,
    },
    /// pcapng (each section may have its own byte order).
    Pcapng,
    /// ringcap's compressed format (crate `ringcap-compress`).
    Compressed {
        /// Micro- or nanosecond timestamps (from the file header).
        resolution: TsResolution,
    },
}

/// The unit of an interface's timestamps, from pcapng's `if_tsresol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsUnit {
    /// 10^-n seconds (`if_tsresol` with the top bit clear); 6 = µs, 9 = ns.
    Pow10(u8),
    /// 2^-n seconds (`if_tsresol` with the top bit set).
    Pow2(u8),
}

impl TsUnit {
    /// The unit an `if_tsresol` option byte describes.
    pub fn from_tsresol(byte: u8) -> Self {
        if byte & 0x80 == 0 {
            TsUnit::Pow10(byte)
        } else {
            TsUnit::Pow2(byte & 0x7f)
        }
    }

    /// Converts a timestamp in this unit to nanoseconds, rounding down
    /// (saturating at `u64::MAX`).
    pub fn to_ns(self, ticks: u64) -> u64 {
        let ns: u128 = match self {
            TsUnit::Pow10(e) if e <= 9 => ticks as u128 * 10u128.pow(9 - e as u32),
            TsUnit::Pow10(e) => match 10u128.checked_pow(e as u32 - 9) {
                Some(div) => ticks as u128 / div,
                None => 0,
            },
            TsUnit::Pow2(e) => (ticks as u128 * 1_000_000_000) >> e,
        };
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// One capture interface: the pcap file header, or one pcapng IDB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Link-layer type (LINKTYPE_*, e.g. 1 for Ethernet). For pcap, the FCS bits
    /// of the link-type field are removed.
    pub linktype: u32,
    /// Snapshot length (0 means no limit was recorded).
    pub snaplen: u32,
    /// `if_name`, if the IDB has one.
    pub name: Option<String>,
    /// `if_description`, if the IDB has one.
    pub description: Option<String>,
    /// `if_filter` when it is a libpcap filter string.
    pub filter: Option<String>,
    /// Unit of the timestamps (`if_tsresol`; pcapng's default is µs).
    pub ts_unit: TsUnit,
    /// `if_tsoffset`: seconds added to every timestamp.
    pub ts_offset_s: i64,
    /// Index of the pcapng section the interface belongs to (0 for pcap).
    pub section: usize,
}

impl Interface {
    /// A packet timestamp of this interface in nanoseconds since the epoch.
    pub fn ts_to_ns(&self, ticks: u64) -> u64 {
        let ns = self.ts_unit.to_ns(ticks) as i128 + self.ts_offset_s as i128 * 1_000_000_000;
        ns.clamp(0, u64::MAX as i128) as u64
    }
}

/// One packet read from a file. `data` borrows the reader's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Index into [`Reader::interfaces`] (across all sections of a pcapng file).
    pub interface: usize,
    /// Timestamp, nanoseconds since the epoch (0 for pcapng simple packet blocks,
    /// which have none).
    pub ts_ns: u64,
    /// Length of the packet on the wire.
    pub wire_len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
}

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
    fn new(offset: u64, kind: FormatErrorKind) -> Self {
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

/// Per-format reading state.
#[derive(Debug, Clone, Copy)]
enum State {
    Pcap {
        order: ByteOrder,
        nano: bool,
        snaplen: u32,
    },
    Pcapng {
        order: ByteOrder,
        /// Index in `interfaces` of the current section's first interface.
        section_first: usize,
        section: usize,
    },
    Compressed {
        nano: bool,
    },
}

/// A compressed file's block being read: its records are decoded from a
/// copy, and the reader's offset stays at the block's start until the last
/// one is read (a block is whole or not at all).
struct CompressedState {
    blocks: ringcap_compress::BlockReader,
    /// Length of the block being read, added to the offset at its end.
    pending: u64,
}

fn compressed_error(e: ringcap_compress::DecodeError) -> FormatError {
    match e.kind {
        ringcap_compress::ErrorKind::Io(kind, msg) => {
            FormatError::new(e.offset, FormatErrorKind::Io(io::Error::new(kind, msg)))
        }
        kind => FormatError::new(e.offset, FormatErrorKind::Compressed(kind)),
    }
}

/// Reads packets from a pcap or pcapng stream. See the [module docs](self).
pub struct Reader<R: Read> {
    inner: R,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    eof: bool,
    /// File offset of `buf[start]`.
    pos: u64,
    format: FileFormat,
    state: State,
    interfaces: Vec<Interface>,
    strict: bool,
    compressed: Option<Box<CompressedState>>,
    /// [`Reader::next_packet_ahead`]'s cursor: its `k`, the offset the
    /// reader stood at after that call, and the offset of the record after
    /// the one it showed (so the next call takes that one without walking).
    ahead: Option<(usize, u64, u64)>,
}

impl<R: Read> fmt::Debug for Reader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("format", &self.format)
            .field("offset", &self.pos)
            .field("interfaces", &self.interfaces)
            .finish_non_exhaustive()
    }
}

fn truncated(offset: u64, what: &'static str, have: usize, need: usize) -> FormatError {
    FormatError::new(
        offset,
        FormatErrorKind::Truncated {
            what,
            have: have as u64,
            need: need as u64,
        },
    )
}

fn malformed(offset: u64, msg: String) -> FormatError {
    FormatError::new(offset, FormatErrorKind::Malformed(msg))
}

/// The limit on a captured length for a snapshot length.
fn caplen_limit(snaplen: u32) -> u32 {
    snaplen.clamp(MAX_ORDINARY_CAPLEN, MAX_RECORD_LEN)
}

fn check_caplen(offset: u64, caplen: u32, snaplen: u32) -> Result<(), FormatError> {
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

/// A string option value: UTF-8 (lossily), without trailing NULs.
fn option_string(v: &[u8]) -> String {
    let end = v.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// What one pcapng block turned out to be.
enum Block {
    /// Clean end of the stream (no block).
    End,
    /// A packet.
    Packet(Found),
    /// Any other block (already handled).
    Other,
}

/// Where the packet found by one step of the reader lies.
struct Found {
    interface: usize,
    ts_ns: u64,
    wire_len: u32,
    data_start: usize,
    data_len: usize,
}

impl<R: Read> Reader<R> {
    /// Reads and checks the file header (for pcapng, the first section header
    /// block). Fails if the stream is neither pcap (micro- or nanosecond magic,
    /// either byte order) nor pcapng.
    pub fn new(r: R) -> Result<Self, FormatError> {
        Self::with_strictness(r, false)
    }

    /// Like [`Reader::new`]; with `strict`, pcap record headers of all zeros are
    /// errors (used when checking files for repair).
    pub(crate) fn with_strictness(r: R, strict: bool) -> Result<Self, FormatError> {
        let mut rd = Reader {
            inner: r,
            buf: vec![0; BUF_SIZE],
            start: 0,
            end: 0,
            eof: false,
            pos: 0,
            ahead: None,
            format: FileFormat::Pcapng,
            state: State::Pcapng {
                order: ByteOrder::host(),
                section_first: 0,
                section: 0,
            },
            interfaces: Vec::new(),
            strict,
            compressed: None,
        };
        let avail = rd
            .fill(4)
            .map_err(|e| FormatError::new(0, FormatErrorKind::Io(e)))?;
        if avail == 0 {
            return Err(FormatError::new(0, FormatErrorKind::Empty));
        }
        let head = &rd.buf[rd.start..rd.start + avail.min(4)];
        let magic = if head.len() == 4 {
            Some((
                u32::from_le_bytes([head[0], head[1], head[2], head[3]]),
                u32::from_be_bytes([head[0], head[1], head[2], head[3]]),
            ))
        } else {
            None
        };
        match magic {
            _ if ringcap_compress::is_compressed(head) => rd.read_compressed_header()?,
            Some((m, _)) if m == BT_SHB => {
                // A pcapng section header: parsed like any later one.
                rd.read_block()?;
            }
            Some((le, be)) => {
                let (order, magic) = if le == MAGIC_MICRO || le == MAGIC_NANO {
                    (ByteOrder::Little, le)
                } else if be == MAGIC_MICRO || be == MAGIC_NANO {
                    (ByteOrder::Big, be)
                } else {
                    let first_bytes = head.to_vec();
                    return Err(FormatError::new(
                        0,
                        FormatErrorKind::NotCapture { first_bytes },
                    ));
                };
                rd.read_pcap_header(order, magic == MAGIC_NANO)?;
            }
            None => {
                let first_bytes = head.to_vec();
                return Err(FormatError::new(
                    0,
                    FormatErrorKind::NotCapture { first_bytes },
                ));
            }
        }
        Ok(rd)
    }

    fn read_compressed_header(&mut self) -> Result<(), FormatError> {
        let n = ringcap_compress::FILE_HEADER_LEN;
        let avail = self
            .fill(n)
            .map_err(|e| FormatError::new(0, FormatErrorKind::Io(e)))?;
        let h =
            ringcap_compress::FileHeader::parse(&self.buf[self.start..self.start + avail.min(n)])
                .map_err(compressed_error)?;
        let nano = h.resolution == ringcap_compress::Resolution::Nano;
        self.format = FileFormat::Compressed {
            resolution: if nano {
                TsResolution::Nano
            } else {
                TsResolution::Micro
            },
        };
        self.state = State::Compressed { nano };
        self.interfaces.push(Interface {
            linktype: h.linktype,
            snaplen: h.snaplen,
            name: None,
            description: None,
            filter: None,
            ts_unit: TsUnit::Pow10(if nano { 9 } else { 6 }),
            ts_offset_s: 0,
            section: 0,
        });
        self.compressed = Some(Box::new(CompressedState {
            blocks: ringcap_compress::BlockReader::new(&h),
            pending: 0,
        }));
        self.consume(n);
        Ok(())
    }

    /// The next record of a compressed file.
    fn next_compressed(&mut self, nano: bool) -> Result<Option<Packet<'_>>, FormatError> {
        // Blocks with no records (no encoder writes them) are passed over.
        while self
            .compressed
            .as_ref()
            .is_some_and(|c| c.blocks.remaining() == 0)
        {
            let off = self.pos;
            let io_err = |e| FormatError::new(off, FormatErrorKind::Io(e));
            let head = ringcap_compress::BLOCK_HEADER_LEN;
            let avail = self.fill(head).map_err(io_err)?;
            if avail == 0 {
                return Ok(None);
            }
            if avail < head {
                return Err(truncated(off, "block header", avail, head));
            }
            let len = ringcap_compress::BlockReader::block_len(
                &self.buf[self.start..self.start + head],
                off,
            )
            .map_err(compressed_error)?;
            let avail = self.fill(len).map_err(io_err)?;
            if avail < len {
                return Err(truncated(off, "block", avail, len));
            }
            let Some(c) = self.compressed.as_mut() else {
                return Ok(None);
            };
            c.blocks
                .load(&self.buf[self.start..self.start + len], off)
                .map_err(compressed_error)?;
            c.pending = len as u64;
            self.start += len;
            if c.blocks.remaining() == 0 {
                self.pos += std::mem::take(&mut c.pending);
            }
        }
        let Some(c) = self.compressed.as_mut() else {
            return Ok(None);
        };
        // The offset moves past the block with its last record (and back
        // if that record turns out bad).
        let pending = c.pending;
        if c.blocks.remaining() <= 1 {
            self.pos += std::mem::take(&mut c.pending);
        }
        let rec = match c.blocks.next_record() {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(e) => {
                if c.pending == 0 {
                    self.pos -= pending;
                }
                return Err(compressed_error(e));
            }
        };
        let ts_ns = if nano {
            rec.ts
        } else {
            rec.ts.saturating_mul(1_000)
        };
        Ok(Some(Packet {
            interface: 0,
            ts_ns,
            wire_len: rec.wire_len,
            data: rec.data,
        }))
    }

    fn read_pcap_header(&mut self, order: ByteOrder, nano: bool) -> Result<(), FormatError> {
        let avail = self
            .fill(FILE_HEADER_LEN)
            .map_err(|e| FormatError::new(0, FormatErrorKind::Io(e)))?;
        if avail < FILE_HEADER_LEN {
            return Err(truncated(0, "file header", avail, FILE_HEADER_LEN));
        }
        let h = &self.buf[self.start..self.start + FILE_HEADER_LEN];
        let major = order.u16(h, 4);
        let minor = order.u16(h, 6);
        if major != 2 {
            return Err(FormatError::new(
                0,
                FormatErrorKind::UnsupportedVersion { major, minor },
            ));
        }
        let snaplen = order.u32(h, 16);
        // The top bits of the link-type field carry FCS information.
        let linktype = order.u32(h, 20) & 0x03FF_FFFF;
        let resolution = if nano {
            TsResolution::Nano
        } else {
            TsResolution::Micro
        };
        self.format = FileFormat::Pcap {
            resolution,
            byte_order: order,
        };
        self.state = State::Pcap {
            order,
            nano,
            snaplen,
        };
        self.interfaces.push(Interface {
            linktype,
            snaplen,
            name: None,
            description: None,
            filter: None,
            ts_unit: TsUnit::Pow10(if nano { 9 } else { 6 }),
            ts_offset_s: 0,
            section: 0,
        });
        self.consume(FILE_HEADER_LEN);
        Ok(())
    }

    /// The next packet, or `None` at a clean end of the file (at a record
    /// boundary).
    ///
    /// pcapng blocks other than packets are handled on the way: an IDB adds an
    /// interface, an SHB starts a new section (whose interfaces are appended to
    /// [`Reader::interfaces`]; [`Packet::interface`] is an index into that whole
    /// list), everything else (ISB, NRB, DSB, custom and unknown blocks) is
    /// skipped. Enhanced, simple and obsolete packet blocks yield packets.
    ///
    /// After an error the reader stays at the bad record: calling again reports
    /// the same error.
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, FormatError> {
        if let State::Compressed { nano } = self.state {
            return self.next_compressed(nano);
        }
        match self.step()? {
            None => Ok(None),
            Some(f) => Ok(Some(Packet {
                interface: f.interface,
                ts_ns: f.ts_ns,
                wire_len: f.wire_len,
                data: &self.buf[f.data_start..f.data_start + f.data_len],
            })),
        }
    }

    /// [`next_packet`](Self::next_packet), with the captured bytes of the
    /// packet `k` records after it when they are already in the reader's
    /// buffer (pcap files; otherwise empty). A hint for look-ahead work
    /// (prefetching what that packet will need): those bytes are not checked
    /// the way `next_packet` will check them when their turn comes.
    pub fn next_packet_ahead(
        &mut self,
        k: usize,
    ) -> Result<Option<(Packet<'_>, &[u8])>, FormatError> {
        let State::Pcap { order, .. } = self.state else {
            return Ok(self.next_packet()?.map(|p| (p, &[][..])));
        };
        // The record after the one shown last time, if this call follows
        // that one directly (no seek, no other read in between).
        let follow = self
            .ahead
            .take()
            .filter(|&(kk, stood, _)| kk == k && stood == self.pos)
            .map(|c| c.2);
        let Some(f) = self.step()? else {
            return Ok(None);
        };
        // The buffered records after this one: `(data, end)` of the one at `at`.
        let rest = &self.buf[self.start..self.end];
        let record = |at: usize| {
            let h = rest.get(at..at.checked_add(RECORD_HEADER_LEN)?)?;
            let data = at + RECORD_HEADER_LEN;
            let end = data.checked_add(order.u32(h, 8) as usize)?;
            (end <= rest.len()).then_some((data, end))
        };
        let start = match follow {
            Some(at) if at >= self.pos => usize::try_from(at - self.pos).ok(),
            // Walk over the k - 1 records before it.
            _ => (1..k).try_fold(0, |at, _| record(at).map(|(_, end)| end)),
        };
        let mut ahead = &[][..];
        if let Some((data, end)) = start.filter(|_| k > 0).and_then(record) {
            ahead = &rest[data..end];
            self.ahead = Some((k, self.pos, self.pos + end as u64));
        }
        Ok(Some((
            Packet {
                interface: f.interface,
                ts_ns: f.ts_ns,
                wire_len: f.wire_len,
                data: &self.buf[f.data_start..f.data_start + f.data_len],
            },
            ahead,
        )))
    }

    /// The interfaces met so far: for pcap the one the file header describes, for
    /// pcapng one per IDB read so far, across all sections.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// The kind of file.
    pub fn format(&self) -> FileFormat {
        self.format
    }

    /// Byte offset in the stream of the next record to be read (after an error,
    /// of the record that could not be read).
    pub fn offset(&self) -> u64 {
        self.pos
    }

    /// Number of pcapng sections seen so far (1 for pcap).
    pub fn sections(&self) -> usize {
        match self.state {
            State::Pcap { .. } | State::Compressed { .. } => 1,
            State::Pcapng { section, .. } => section,
        }
    }

    /// Makes at least `need` unconsumed bytes available unless the stream ends
    /// first; returns how many are available.
    fn fill(&mut self, need: usize) -> io::Result<usize> {
        while self.end - self.start < need && !self.eof {
            if self.end == self.buf.len() {
                if self.start > 0 {
                    self.buf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                } else {
                    let new_len = self.buf.len().saturating_mul(2).max(BUF_SIZE);
                    self.buf.resize(new_len, 0);
                }
            }
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.end - self.start)
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.pos += n as u64;
    }

    /// Reads records up to and including the next packet; leaves `start` after
    /// it. On error, `start`/`pos` stay at the bad record.
    fn step(&mut self) -> Result<Option<Found>, FormatError> {
        match self.state {
            State::Pcap {
                order,
                nano,
                snaplen,
            } => self.step_pcap(order, nano, snaplen),
            State::Pcapng { .. } => self.step_pcapng(),
            State::Compressed { .. } => Ok(None),
        }
    }

    fn step_pcap(
        &mut self,
        order: ByteOrder,
        nano: bool,
        snaplen: u32,
    ) -> Result<Option<Found>, FormatError> {
        let off = self.pos;
        let io_err = |e| FormatError::new(off, FormatErrorKind::Io(e));
        let avail = self.fill(RECORD_HEADER_LEN).map_err(io_err)?;
        if avail == 0 {
            return Ok(None);
        }
        if avail < RECORD_HEADER_LEN {
            return Err(truncated(off, "record header", avail, RECORD_HEADER_LEN));
        }
        let h = &self.buf[self.start..self.start + RECORD_HEADER_LEN];
        if self.strict && h.iter().all(|&b| b == 0) {
            return Err(FormatError::new(off, FormatErrorKind::ZeroRecord));
        }
        let secs = order.u32(h, 0) as u64;
        let frac = order.u32(h, 4) as u64;
        let caplen = order.u32(h, 8);
        let wire_len = order.u32(h, 12);
        check_caplen(off, caplen, snaplen)?;
        let total = RECORD_HEADER_LEN + caplen as usize;
        let avail = self.fill(total).map_err(io_err)?;
        if avail < total {
            return Err(truncated(off, "record", avail, total));
        }
        let ts_ns = secs * 1_000_000_000 + if nano { frac } else { frac * 1_000 };
        let data_start = self.start + RECORD_HEADER_LEN;
        self.consume(total);
        Ok(Some(Found {
            interface: 0,
            ts_ns,
            wire_len,
            data_start,
            data_len: caplen as usize,
        }))
    }

    fn step_pcapng(&mut self) -> Result<Option<Found>, FormatError> {
        loop {
            match self.read_block()? {
                Block::End => return Ok(None),
                Block::Packet(found) => return Ok(Some(found)),
                Block::Other => {}
            }
        }
    }

    /// Reads one pcapng block.
    fn read_block(&mut self) -> Result<Block, FormatError> {
        let off = self.pos;
        let io_err = |e| FormatError::new(off, FormatErrorKind::Io(e));
        let avail = self.fill(12).map_err(io_err)?;
        if avail == 0 {
            return Ok(Block::End);
        }
        if avail < 8 {
            return Err(truncated(off, "block header", avail, 8));
        }
        let b = &self.buf[self.start..self.end];
        let is_shb = b[0..4] == BT_SHB.to_le_bytes();
        let order = if is_shb {
            if avail < 12 {
                return Err(truncated(off, "block header", avail, 12));
            }
            let bom = [b[8], b[9], b[10], b[11]];
            if bom == BYTE_ORDER_MAGIC.to_le_bytes() {
                ByteOrder::Little
            } else if bom == BYTE_ORDER_MAGIC.to_be_bytes() {
                ByteOrder::Big
            } else {
                return Err(FormatError::new(
                    off,
                    FormatErrorKind::BadByteOrderMagic { bytes: bom },
                ));
            }
        } else {
            match self.state {
                State::Pcapng { order, .. } => order,
                State::Pcap { order, .. } => order,
                State::Compressed { .. } => ByteOrder::host(),
            }
        };
        let block_type = order.u32(b, 0);
        let len = order.u32(b, 4);
        let min_len = if is_shb { 28 } else { 12 };
        if len < min_len || len % 4 != 0 || len > MAX_RECORD_LEN {
            return Err(FormatError::new(
                off,
                FormatErrorKind::BadBlockLength { len },
            ));
        }
        let len = len as usize;
        let avail = self.fill(len).map_err(io_err)?;
        if avail < len {
            return Err(truncated(off, "block", avail, len));
        }
        let block = &self.buf[self.start..self.start + len];
        let trailing = order.u32(block, len - 4);
        if trailing as usize != len {
            return Err(FormatError::new(
                off,
                FormatErrorKind::LengthMismatch {
                    leading: len as u32,
                    trailing,
                },
            ));
        }
        let (section_first, section) = match self.state {
            State::Pcapng {
                section_first,
                section,
                ..
            } => (section_first, section),
            State::Pcap { .. } | State::Compressed { .. } => (0, 0),
        };
        let section_ifaces = self.interfaces.len() - section_first;
        // The block body, between the length fields.
        let body = &block[8..len - 4];
        let found = match block_type {
            BT_SHB => {
                let major = order.u16(body, 4);
                let minor = order.u16(body, 6);
                if major != 1 {
                    return Err(FormatError::new(
                        off,
                        FormatErrorKind::UnsupportedVersion { major, minor },
                    ));
                }
                self.state = State::Pcapng {
                    order,
                    section_first: self.interfaces.len(),
                    section: section + 1,
                };
                None
            }
            _ if section == 0 => {
                return Err(malformed(
                    off,
                    "pcapng block before the first section header block".into(),
                ));
            }
            BT_IDB => {
                if body.len() < 8 {
                    return Err(malformed(
                        off,
                        format!(
                            "interface description block of {len} bytes is too short (at least 20)"
                        ),
                    ));
                }
                let mut iface = Interface {
                    linktype: order.u16(body, 0) as u32,
                    snaplen: order.u32(body, 4),
                    name: None,
                    description: None,
                    filter: None,
                    ts_unit: TsUnit::Pow10(6),
                    ts_offset_s: 0,
                    section: section - 1,
                };
                parse_idb_options(off, order, &body[8..], &mut iface)?;
                self.interfaces.push(iface);
                None
            }
            BT_EPB | BT_PB => {
                let name = if block_type == BT_EPB {
                    "enhanced packet block"
                } else {
                    "packet block"
                };
                if body.len() < 20 {
                    return Err(malformed(
                        off,
                        format!("{name} of {len} bytes is too short (at least 32)"),
                    ));
                }
                let id = if block_type == BT_EPB {
                    order.u32(body, 0)
                } else {
                    order.u16(body, 0) as u32
                };
                if id as usize >= section_ifaces {
                    return Err(FormatError::new(
                        off,
                        FormatErrorKind::UnknownInterface {
                            id,
                            count: section_ifaces,
                        },
                    ));
                }
                let iface = &self.interfaces[section_first + id as usize];
                let ticks = (order.u32(body, 4) as u64) << 32 | order.u32(body, 8) as u64;
                let caplen = order.u32(body, 12);
                let wire_len = order.u32(body, 16);
                check_caplen(off, caplen, iface.snaplen)?;
                if caplen as usize > body.len() - 20 {
                    return Err(malformed(
                        off,
                        format!(
                            "{name} claims {caplen} bytes of packet data but the block has room for only {}",
                            body.len() - 20
                        ),
                    ));
                }
                Some(Found {
                    interface: section_first + id as usize,
                    ts_ns: iface.ts_to_ns(ticks),
                    wire_len,
                    data_start: self.start + 28,
                    data_len: caplen as usize,
                })
            }
            BT_SPB => {
                if body.len() < 4 {
                    return Err(malformed(
                        off,
                        format!("simple packet block of {len} bytes is too short (at least 16)"),
                    ));
                }
                if section_ifaces == 0 {
                    return Err(FormatError::new(
                        off,
                        FormatErrorKind::UnknownInterface { id: 0, count: 0 },
                    ));
                }
                let iface = &self.interfaces[section_first];
                let wire_len = order.u32(body, 0);
                // The captured length is implied: the original length cut
                // to the snapshot length and to the room in the block.
                let mut caplen = wire_len as usize;
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                caplen = caplen.min(body.len() - 4);
                Some(Found {
                    interface: section_first,
                    ts_ns: 0,
                    wire_len,
                    data_start: self.start + 12,
                    data_len: caplen,
                })
            }
            // ISB, NRB, DSB, custom and unknown blocks.
            _ => None,
        };
        self.consume(len);
        Ok(match found {
            Some(f) => Block::Packet(f),
            None => Block::Other,
        })
    }
}

/// Reads the options of an IDB into `iface`.
fn parse_idb_options(
    off: u64,
    order: ByteOrder,
    mut opts: &[u8],
    iface: &mut Interface,
) -> Result<(), FormatError> {
    while opts.len() >= 4 {
        let code = order.u16(opts, 0);
        let len = order.u16(opts, 2) as usize;
        if code == 0 {
            break;
        }
        if 4 + len > opts.len() {
            return Err(malformed(
                off,
                format!(
                    "interface description block option {code} claims {len} bytes but only {} remain in the block",
                    opts.len() - 4
                ),
            ));
        }
        let v = &opts[4..4 + len];
        match code {
            IF_NAME => iface.name = Some(option_string(v)),
            IF_DESCRIPTION => iface.description = Some(option_string(v)),
            IF_TSRESOL if !v.is_empty() => iface.ts_unit = TsUnit::from_tsresol(v[0]),
            IF_TSOFFSET if v.len() >= 8 => iface.ts_offset_s = order.u64(v, 0) as i64,
            IF_FILTER if v.first() == Some(&0) => iface.filter = Some(option_string(&v[1..])),
            _ => {}
        }
        let next = (4 + len + 3) & !3;
        opts = &opts[next.min(opts.len())..];
    }
    Ok(())
}

mod seek;

#[cfg(test)]
pub(crate) mod tests;
