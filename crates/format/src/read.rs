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

use crate::pcap::{MAGIC_MICRO, MAGIC_NANO, RECORD_HEADER_LEN};
use crate::pcapng::BT_SHB;

// The parts of the reader, each in a file of its own so one format can be
// read without the others: `meta` (what a file says about itself: byte
// order, format, interfaces), `error` (what can be wrong, at which
// offset), then one file per format: `pcap`, `pcapng` and `compressed`.
// This file keeps the Reader itself: its buffer, and the steps shared by
// all formats.
mod compressed;
mod error;
mod meta;
mod pcap;
mod pcapng;

use compressed::CompressedState;
pub use error::{FormatError, FormatErrorKind};
pub use meta::{ByteOrder, FileFormat, Interface, TsUnit};

/// Initial size of the read buffer. It grows (doubling) only for records larger
/// than itself.
const BUF_SIZE: usize = 1 << 20;

/// Captured lengths up to this are always accepted, whatever the snapshot length
/// says (it is what libpcap and Wireshark allow for ordinary link types).
pub const MAX_ORDINARY_CAPLEN: u32 = 262_144;

/// No record or block may be longer than this, whatever the snapshot length
/// says; it bounds the memory a corrupt length field can make the reader use.
pub const MAX_RECORD_LEN: u32 = 256 << 20;

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
    /// Interface blocks accepted at most ([`Reader::limit_interfaces`]).
    max_interfaces: usize,
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
        Self::with_parts(r, strict, Vec::new())
    }

    /// [`Reader::new`] reading into `buf`, the buffer of a reader done with
    /// ([`Reader::into_buffer`]): a query that reads a little of many files
    /// does not zero a new megabyte for each (8 % of a selective query's
    /// time over 40 files).
    pub fn with_buffer(r: R, buf: Vec<u8>) -> Result<Self, FormatError> {
        Self::with_parts(r, false, buf)
    }

    /// The reader's buffer, for [`Reader::with_buffer`].
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    fn with_parts(r: R, strict: bool, mut buf: Vec<u8>) -> Result<Self, FormatError> {
        // Bytes past `end` are never read before they are written: what an
        // earlier reader left there does not matter.
        if buf.len() < BUF_SIZE {
            buf.resize(BUF_SIZE, 0);
        }
        let mut rd = Reader {
            inner: r,
            buf,
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
            max_interfaces: usize::MAX,
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

    /// Accept at most `n` interfaces (pcapng interface blocks, over all
    /// sections): one more is an error, so a stream of interface blocks
    /// from an untrusted source is not gathered without bound.
    pub fn limit_interfaces(&mut self, n: usize) {
        self.max_interfaces = n;
    }

    /// The source being read.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The source being read (reading from it directly skips what the
    /// reader has not consumed yet).
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
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
}

mod seek;

#[cfg(test)]
pub(crate) mod tests;
