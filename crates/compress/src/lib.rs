//! Lossless header compression of packet records: ringcap's compressed
//! capture format (`.rcz`), a few bytes per packet for header traces.
//!
//! A pcap record costs 16 bytes of record header plus the packet's headers
//! (54–80 bytes for TCP/IP); consecutive packets of one flow differ in a few
//! predictable fields. Like CSLIP (RFC 1144), each packet is coded as the
//! difference from the previous packet *of the same flow*, here with the
//! record's timestamp and lengths included, and losslessly: decoding gives
//! back exactly the records that went in (timestamp at the file's
//! resolution, original length, captured bytes). It is hand-written because
//! no library codes pcap records per flow this way; general-purpose
//! compressors (zstd, xz) see the bytes but not the flows, and cannot predict
//! sequence numbers, IP IDs or checksums.
//!
//! # Format, version 4
//!
//! All multi-byte integers of the framing are little-endian.
//!
//! **File header** (20 bytes): magic `89 52 43 5a 0d 0a 1a 0a` (`\x89RCZ\r\n\x1a\n`),
//! version u16 = 4, flags u16 (bit 0: timestamps in nanoseconds, else
//! microseconds; other bits zero), pcap LINKTYPE u32, snap length u32.
//! Readers read versions 2 to 4 and refuse others with
//! [`ErrorKind::Version`]. Version 3 differs from 4 only in the byte runs
//! of records that open a context (flag 10), noted below. Version 2 differs from 3 in three places, noted
//! below (each made version 3 code fewer decisions: 12 % faster encoding
//! of a many-flow trace for 5–20 % more bytes). Version 1 (byte-aligned
//! records, no entropy stage; ringcap before format 2) is not read any
//! more: convert such files to pcap with the ringcap that wrote them.
//!
//! **Blocks** follow, each standing alone: magic `RCZB`, payload length
//! u32, record count u32, first timestamp u64 (in the file's unit), CRC-32
//! (IEEE, as zlib) u32 of the 16 bytes after the magic and of the payload;
//! then the payload. Every block starts with empty flow contexts and fresh
//! probabilities, so a reader can start at any block ([`find_block`]), a
//! damaged block loses only its own records, and a file cut short is valid
//! up to its last whole block ([`valid_prefix`]). Writers end a block every
//! [`BLOCK_TARGET`] bytes of payload or sooner (ringcap: at least once per
//! write to the file).
//!
//! **Payload**: the length `n` (u32) of the coded stream, the coded stream
//! (`n` bytes), then the raw bytes: the captured bytes of literal records
//! and the captured bytes past the predicted headers, record after record.
//! Both parts must be used up exactly by the block's records.
//!
//! **Coded stream**: a binary range coder (the design of LZMA's, written
//! from its description): state `low` (33 bits) and `range` (32 bits, from
//! 2³²−1); the stream starts with a 0 byte, each byte shifted out of `low`
//! is appended and a carry out of `low` is added to the bytes before it
//! (the same bytes as LZMA's way of holding back one byte and a run of
//! 0xff bytes until the carry is known), and the encoder ends the stream
//! by shifting `low` out 4 times. A *decision* with probability `p` (11 bits, of a 0) splits
//! `bound = (range >> 11) * p`: 0 keeps `[low, low+bound)`, 1 the rest; `p`
//! then moves 1/16 of the way to what was coded (`p += (2048−p) >> 4` or
//! `p −= p >> 4`); while `range < 2²⁴` a byte is shifted out. Every
//! probability starts at 1024 at each block. *Direct* bits go 8 (or fewer)
//! at a time without a probability: `range >>= k; low += v * range`. Upon
//! this: a *bit tree* of `k` levels codes a `k`-bit value high bit first,
//! each decision with the probability of the bits above it; an *integer*
//! (unsigned, to 64 bits; signed ones zig-zag coded: 0, −1, 1, −2 …) is its
//! bit length `n` by a 4-level tree (15: `n` ≥ 15, then `n`−15 by a 3-level
//! tree, where 7 means `n` ≥ 22 and `n`−22 follows in 6 direct bits), then
//! the bits below the leading one direct (version 2: the two highest of them
//! by a 2-level tree for each length, the rest direct). Each field has its
//! own integer model. `dts` below is the
//! timestamp minus the previous record's (the first record's is relative to
//! the block's first timestamp), signed.
//!
//! **Records**, each starting with its *kind*: one decision "not the kind
//! that followed the previous record's kind the last time" (in the context
//! of the previous kind; at a block's start the previous kind and every
//! follower are 0), and if so the kind by a 3-level tree (same context):
//! 0, 1, 2 compressed with the most, second, third most recently used slot
//! as reference, 3 compressed with a numbered slot, 4 literal, 5 literal
//! opening a context (6 and 7 are errors).
//!
//! - *Literal* (4) and *opening literal* (5): `dts` (literal model), original
//!   length, captured length; the captured bytes are the next ones of the
//!   raw part. Literals are what the codec does not model (non-IP, link
//!   types other than Ethernet and raw IP, truncated headers); an opening
//!   literal's packet becomes the context of the next slot. New contexts
//!   take the slots round-robin (0, 1, … [`SLOTS`]−1, 0 …, from 0 at each
//!   block), so no slot number is ever sent for them.
//! - *Compressed* (0–3): the packet is predicted from the reference's
//!   context. Kind 3 sends the slot number: its top 4 bits by a tree, the
//!   low 8 direct. Then the flags (below): one decision "not the flags of
//!   the reference's last compressed record" (context: the kind, whether
//!   the previous compressed record's flags were its reference's last ones,
//!   and the new-context flag of those last flags); if so, one decision per
//!   flag the reference's headers can have (*allowed*: 4, 9, 10, 11 always;
//!   5, 6, 12 for IPv4; 0 for TCP and UDP; 1, 7, 8 for TCP; 2, 3 for TCP
//!   with the timestamp option), lowest first, each in the context of its
//!   index and its value in the last flags; the others are clear (version
//!   2: a decision for each of the 13, a set one not allowed is an error). Then `dts` (a model for continuing flows, one for new
//!   contexts), then for each set flag, in order, the field's value:
//!
//!   | flag | field | prediction | coded as |
//!   |---|---|---|---|
//!   | 0 | TCP/UDP checksum | the reference's plus its last change (ones' complement; no change when it did not change) | a decision "large", then the zig-zag difference (below 256) as an integer, or the checksum in 16 direct bits |
//!   | 1 | TCP ack | reference ack + its last ack change | signed integer of the difference (mod 2³²) |
//!   | 2, 3 | TCP timestamp option TSval, TSecr | the reference's | signed integer (mod 2³²) |
//!   | 4 | original length | the reference's; in a fragment stream, the full or the last fragment's length as the offset says | signed integer |
//!   | 5 | IPv4 ID | same while the reference had more fragments (and was not a first fragment), or was 0, or had its predecessor's ID (whole datagrams); else +1. See also the host counter below. | signed integer (mod 2¹⁶) |
//!   | 6 | IPv4 flags + fragment offset | the next fragment's offset (the last one where the previous datagram's last one was); after a last fragment, a new datagram's (a context of later fragments restarts where they restarted last, or where it opened) | integer of the value |
//!   | 7 | TCP seq | reference seq + its payload length (+1 for SYN/FIN); 0 after 0 (masked) | signed integer (mod 2³²) |
//!   | 8 | TCP window | the reference's | signed integer (mod 2¹⁶) |
//!   | 9 | captured length | the original length, or the reference's if that was cut short | integer |
//!   | 10 | *new context* (no value) | — | the packet opens a context in the next slot instead of updating the reference |
//!   | 11 | byte runs | — | count, then per run: gap since the previous run's end, length − 1 (integers), the bytes in 8 direct bits each (version 2: one 8-level tree for all). With flag 10 set (version 4): the gap and the length each by an 8-level tree (255: 255 or more, the excess follows as an integer), each byte by an 8-level tree of its header offset modulo 16 |
//!   | 12 | IPv4 header checksum | computed from the header | integer of the value (only when the packet's is not the computed one) |
//!
//!   *Host counter*: both sides keep, per IPv4 (source, destination,
//!   protocol), hashed into 256 entries, the last ID seen (Linux numbers
//!   the packets of unconnected sockets from counters shared by
//!   destination, so one flow's packet often follows another's). For a
//!   record that continues its flow (flag 10 clear) with an IPv4 ID
//!   predicted to count, whose headers' entry is known and predicts
//!   another ID (its ID + 1, or 0 after 0), one decision (context: whether
//!   the flow's previous record took the host counter) says which of the
//!   two predictions flag 5 refers to; it comes at flag 5's place, whether
//!   flag 5 is set or not.
//!
//!   The IP length fields are predicted to change with the original length;
//!   every other byte is predicted equal to the reference's, over the first
//!   min(captured length, reference's captured length, 160) bytes (the
//!   headers, and what follows them: an ICMP error's quoted headers, say).
//!   The decoder starts from the reference's bytes, writes the fields,
//!   applies the byte runs (which carry whatever the fields did not: TTL,
//!   TCP flags, addresses of a new flow, a length that was not as predicted)
//!   and computes the IPv4 header checksum; the captured bytes past those
//!   160 (or past the reference's) are the next ones of the raw part.
//!
//! A compressed record is only used when the packet's headers have the same
//! shape as the reference's (link header, IP version and header length,
//! transport protocol and header length, timestamp option position): a
//! change of options or of fragment kind opens a new context, predicted from
//! a recent packet of that shape or stored literally. The modelled headers
//! are Ethernet (up to two VLAN tags) or raw IP, IPv4 or IPv6 (no extension
//! headers), then TCP or UDP; IPv4 fragments other than the first have a
//! context of their own (no ports).
//!
//! Which context a flow continues is the encoder's choice alone (ringcap: a
//! table from a hash of addresses, protocol, ports and VLAN tags to slots);
//! the decoder follows the references it is given, so both stay in step
//! without sharing a hash.
//!
//! Why version 4 models a new context's runs: on traffic with no flow
//! reuse (every packet a new UDP flow with random ports) nearly every
//! record is a new context whose ports (and often addresses) differ from
//! its reference's; sent as direct bytes they cost more than `xz -9` pays
//! (5.03 against 4.83 bytes/packet on one host pair with ephemeral source
//! ports), while a tree per offset learns the ranges (ephemeral ports,
//! well-known ports, address prefixes) and the constant gaps. Continuing
//! records keep the direct bytes, so the common path is as fast as before.
//!
//! Why an entropy stage: version 1's byte-aligned records cost at least a
//! tag byte and a timestamp byte per packet, where `xz` found less on
//! regular traffic; the adaptive coder makes a decision that keeps its
//! outcome cost a small fraction of a bit, and needs no table per block
//! (traces of a few thousand packets would pay more for tables than they
//! save). It is hand-written because the symbols are the codec's own
//! (kinds, flags, field deltas in per-field contexts), not a byte stream
//! that a general-purpose compressor crate could take.

//! # Use
//!
//! [`Encoder`] codes records into blocks without allocating per packet;
//! [`Reader`] reads a file (any [`std::io::Read`]) record by record. Decoding
//! never panics: corrupt or truncated input gives a [`DecodeError`] with the
//! byte offset where it was found.

//!
//! # Not built yet: ringcapd → client streams (`--compress`)
//!
//! The format is ready for it; the plumbing is not. How it fits:
//! - `ringcap-proto`: an optional `compress: bool` in the open request,
//!   echoed in the accepted reply (old daemons ignore it and send pcap
//!   records, so the client must look at the reply, not at its request).
//! - `crates/daemon/src/ring_sink.rs`: each capture thread's sink keeps an
//!   [`Encoder`] (linktype of the interface, nanoseconds) and fills a chunk
//!   with one block ([`Encoder::finish_block`] when the chunk reaches
//!   `CHUNK_TARGET` of *compressed* bytes, or at the flush interval), so one
//!   ring chunk is one block. A chunk dropped whole because the client is
//!   slow is then a whole block: the next one starts with empty contexts and
//!   decodes. The VLAN tag the kernel stripped must be put back before
//!   [`Encoder::push`] (copy the first 160 bytes with `copy_with_tag` into a
//!   scratch buffer, the rest as is: push takes one slice today, so add a
//!   push that takes the header copy and the tail separately to avoid a
//!   whole-packet copy).
//! - `crates/client/src/lib.rs` `Session::packets`: for a compressed session,
//!   feed each chunk payload to [`BlockReader::load`] (offset = the chunk's
//!   position) and hand out its records; a [`DecodeError`] becomes
//!   `ClientError::Protocol` with the offset (the chunk comes from the
//!   daemon, but the client still never panics on it).
//! - `ringcap capture --daemon --compress`, and the daemon bench phase run
//!   with it: lost packets per client, daemon and client CPU, and bytes
//!   copied into the rings per delivered packet (the memory-traffic claim).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod codec;
mod layout;
mod rc;
mod varint;

use std::fmt;
use std::io::{self, Read};

/// Magic number at the start of a compressed file.
pub const MAGIC: [u8; 8] = *b"\x89RCZ\r\n\x1a\n";
/// Format version this crate writes.
pub const VERSION: u16 = 4;
/// Oldest format version this crate reads.
pub const OLDEST_VERSION: u16 = 2;
/// Length of the file header.
pub const FILE_HEADER_LEN: usize = 20;
/// Magic number at the start of every block.
pub const BLOCK_MAGIC: [u8; 4] = *b"RCZB";
/// Length of a block's header.
pub const BLOCK_HEADER_LEN: usize = 24;
/// Number of flow-context slots.
pub const SLOTS: usize = 4096;
/// Payload bytes after which [`Encoder::push`] asks for the block to end.
pub const BLOCK_TARGET: usize = 1 << 20;
/// Largest block payload a reader accepts.
pub const MAX_BLOCK: usize = 64 << 20;
/// Largest captured length of a record.
pub const MAX_CAPLEN: u32 = 1 << 20;

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
    /// [`Encoder`] writes; [`FileHeader::parse`] gives the file's.
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

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One packet record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Timestamp in the file's unit since the epoch.
    pub ts: u64,
    /// Original length on the wire.
    pub wire_len: u32,
    /// Captured bytes.
    pub data: &'a [u8],
}

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
    /// A length out of range (captured length over [`MAX_CAPLEN`] or
    /// shorter than the predicted headers).
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

/// Codes records into blocks.
pub struct Encoder {
    inner: codec::BlockEncoder,
    payload: Vec<u8>,
}

impl Encoder {
    /// An encoder for packets of `linktype` (pcap LINKTYPE).
    pub fn new(linktype: u32) -> Encoder {
        Encoder {
            inner: codec::BlockEncoder::new(linktype),
            payload: Vec::new(),
        }
    }

    /// Adds a record to the current block: timestamp `ts` in the file's
    /// unit, original length `wire_len`, captured bytes `data` (at most
    /// [`MAX_CAPLEN`]; longer data is cut, as no reader would accept it).
    /// Returns true once the block has reached [`BLOCK_TARGET`] bytes:
    /// time to [`finish_block`](Self::finish_block).
    #[inline]
    pub fn push(&mut self, ts: u64, wire_len: u32, data: &[u8]) -> bool {
        let data = &data[..data.len().min(MAX_CAPLEN as usize)];
        self.inner.push(ts, wire_len, data);
        self.inner.len() >= BLOCK_TARGET || self.inner.count == u32::MAX
    }

    /// Bytes written per part of the record so far (feature `stats`, for
    /// study: see examples/rcz-stats).
    #[cfg(feature = "stats")]
    pub fn stats(&self) -> [u64; 24] {
        self.inner.stats
    }

    /// Records in the current block.
    pub fn records(&self) -> u32 {
        self.inner.count
    }

    /// Payload bytes of the current block so far.
    pub fn pending_bytes(&self) -> usize {
        self.inner.len()
    }

    /// Appends the current block (if it has records) to `out` and starts a
    /// new one with every context forgotten.
    pub fn finish_block(&mut self, out: &mut Vec<u8>) {
        if self.inner.count == 0 {
            return;
        }
        self.payload.clear();
        self.inner.finish(&mut self.payload);
        let p = &self.payload;
        let mut h = [0u8; BLOCK_HEADER_LEN];
        h[..4].copy_from_slice(&BLOCK_MAGIC);
        h[4..8].copy_from_slice(&(p.len() as u32).to_le_bytes());
        h[8..12].copy_from_slice(&self.inner.count.to_le_bytes());
        h[12..20].copy_from_slice(&self.inner.base_ts.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&h[4..20]);
        crc.update(p);
        h[20..24].copy_from_slice(&crc.finalize().to_le_bytes());
        out.reserve(BLOCK_HEADER_LEN + p.len());
        out.extend_from_slice(&h);
        out.extend_from_slice(p);
        self.inner.reset();
    }
}

/// A block header, checked.
struct BlockHeader {
    len: usize,
    count: u32,
    base_ts: u64,
    crc: u32,
}

fn block_header(h: &[u8], offset: u64) -> Result<BlockHeader, DecodeError> {
    if h.len() < BLOCK_HEADER_LEN {
        return Err(DecodeError {
            offset: offset + h.len() as u64,
            kind: ErrorKind::Truncated,
        });
    }
    if h[..4] != BLOCK_MAGIC {
        return Err(DecodeError {
            offset,
            kind: ErrorKind::BadBlockMagic,
        });
    }
    let len = le32(h, 4);
    if len as usize > MAX_BLOCK {
        return Err(DecodeError {
            offset: offset + 4,
            kind: ErrorKind::BlockTooLarge(len),
        });
    }
    Ok(BlockHeader {
        len: len as usize,
        count: le32(h, 8),
        base_ts: u64::from_le_bytes(h[12..20].try_into().unwrap_or_default()),
        crc: le32(h, 20),
    })
}

fn crc_ok(h: &[u8], payload: &[u8], want: u32) -> bool {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h[4..20]);
    crc.update(payload);
    crc.finalize() == want
}

/// What a block's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// Bytes of the whole block, header included.
    pub len: usize,
    /// Records in it.
    pub records: u32,
    /// Timestamp of its first record, in the file's unit.
    pub first_ts: u64,
}

/// The header of the block at the start of `head` (found at file offset
/// `offset`), without checking its payload; see [`check_block`].
pub fn peek_block(head: &[u8], offset: u64) -> Result<BlockInfo, DecodeError> {
    let h = block_header(head, offset)?;
    Ok(BlockInfo {
        len: BLOCK_HEADER_LEN + h.len,
        records: h.count,
        first_ts: h.base_ts,
    })
}

/// Checks that `block` is exactly one whole block (found at file offset
/// `offset`) whose checksum is right, without decoding it: for a writer
/// that stores blocks coded elsewhere as they are.
pub fn check_block(block: &[u8], offset: u64) -> Result<BlockInfo, DecodeError> {
    let info = peek_block(block, offset)?;
    if block.len() != info.len {
        return Err(DecodeError {
            offset: offset + block.len().min(info.len) as u64,
            kind: if block.len() < info.len {
                ErrorKind::Truncated
            } else {
                ErrorKind::TrailingBytes
            },
        });
    }
    let h = block_header(block, offset)?;
    if !crc_ok(block, &block[BLOCK_HEADER_LEN..], h.crc) {
        return Err(DecodeError {
            offset,
            kind: ErrorKind::BadChecksum,
        });
    }
    Ok(info)
}

/// Decodes blocks one at a time, for readers that do their own buffering
/// (ringcap-format's reader): [`block_len`](Self::block_len) says how many
/// bytes the block at hand needs, [`load`](Self::load) takes them,
/// [`next_record`](Self::next_record) gives its records.
pub struct BlockReader {
    dec: codec::BlockDecoder,
    block: Vec<u8>,
    left: u32,
    /// File offset of the loaded block's payload.
    base: u64,
}

impl BlockReader {
    /// A reader of blocks of a file with `header`.
    pub fn new(header: &FileHeader) -> BlockReader {
        BlockReader {
            dec: codec::BlockDecoder::new(header.linktype, header.version),
            block: Vec::new(),
            left: 0,
            base: 0,
        }
    }

    /// Total length (header and payload) of the block whose header is at
    /// the start of `head` (at least [`BLOCK_HEADER_LEN`] bytes), found at
    /// file offset `offset`.
    pub fn block_len(head: &[u8], offset: u64) -> Result<usize, DecodeError> {
        Ok(BLOCK_HEADER_LEN + block_header(head, offset)?.len)
    }

    /// Takes the whole block `block` found at file offset `offset` (its
    /// checksum is checked here) in place of the previous one, whose
    /// records must all have been read.
    pub fn load(&mut self, block: &[u8], offset: u64) -> Result<(), DecodeError> {
        if self.left != 0 {
            return Err(DecodeError {
                offset: self.base,
                kind: ErrorKind::TrailingBytes,
            });
        }
        let bh = block_header(block, offset)?;
        let payload = block
            .get(BLOCK_HEADER_LEN..BLOCK_HEADER_LEN + bh.len)
            .ok_or(DecodeError {
                offset: offset + block.len() as u64,
                kind: ErrorKind::Truncated,
            })?;
        if !crc_ok(block, payload, bh.crc) {
            return Err(DecodeError {
                offset,
                kind: ErrorKind::BadChecksum,
            });
        }
        self.block.clear();
        self.block.extend_from_slice(payload);
        self.base = offset + BLOCK_HEADER_LEN as u64;
        self.left = 0;
        if bh.count == 0 {
            return Ok(());
        }
        self.dec.reset(&self.block, self.base, bh.base_ts)?;
        self.left = bh.count;
        Ok(())
    }

    /// Records of the loaded block not read yet.
    pub fn remaining(&self) -> u32 {
        self.left
    }

    /// The loaded block's next record, `None` when all are read.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, DecodeError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        if self.left == 0 {
            // The last record: the block must hold nothing after it.
            let end = self
                .dec
                .next(&self.block, self.base)
                .map(|r| (r.ts, r.wire_len));
            let end = match end {
                Ok(r) => self.dec.finished(&self.block, self.base).map(|_| r),
                Err(e) => Err(e),
            };
            return match end {
                Ok((ts, wire_len)) => Ok(Some(Record {
                    ts,
                    wire_len,
                    data: self.dec.data(),
                })),
                Err(e) => Err(e),
            };
        }
        match self.dec.next(&self.block, self.base) {
            Ok(rec) => Ok(Some(rec)),
            Err(e) => {
                // A damaged block is not read further.
                self.left = 0;
                Err(e)
            }
        }
    }
}

/// Reads a compressed file record by record.
pub struct Reader<R: Read> {
    r: R,
    header: FileHeader,
    blocks: BlockReader,
    buf: Vec<u8>,
    /// File offset of the next block.
    next: u64,
}

impl<R: Read> Reader<R> {
    /// Reads the file header.
    pub fn new(mut r: R) -> Result<Reader<R>, DecodeError> {
        let mut h = [0u8; FILE_HEADER_LEN];
        let n = read_full(&mut r, &mut h, 0)?;
        let header = FileHeader::parse(&h[..n])?;
        Ok(Reader {
            r,
            blocks: BlockReader::new(&header),
            header,
            buf: Vec::new(),
            next: FILE_HEADER_LEN as u64,
        })
    }

    /// The file header.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// Bytes of the file read so far (whole blocks).
    pub fn offset(&self) -> u64 {
        self.next
    }

    /// The next record, `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, DecodeError> {
        while self.blocks.remaining() == 0 {
            let at = self.next;
            self.buf.resize(BLOCK_HEADER_LEN, 0);
            let n = read_full(&mut self.r, &mut self.buf, at)?;
            if n == 0 {
                return Ok(None);
            }
            let len = BlockReader::block_len(&self.buf[..n], at)?;
            let got = (&mut self.r)
                .take((len - BLOCK_HEADER_LEN) as u64)
                .read_to_end(&mut self.buf)
                .map_err(|e| io_err(e, at))?;
            if BLOCK_HEADER_LEN + got < len {
                return Err(DecodeError {
                    offset: at + (BLOCK_HEADER_LEN + got) as u64,
                    kind: ErrorKind::Truncated,
                });
            }
            self.blocks.load(&self.buf, at)?;
            self.next = at + len as u64;
        }
        self.blocks.next_record()
    }
}

fn io_err(e: io::Error, offset: u64) -> DecodeError {
    DecodeError {
        offset,
        kind: ErrorKind::Io(e.kind(), e.to_string()),
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8], offset: u64) -> Result<usize, DecodeError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e, offset + n as u64)),
        }
    }
    Ok(n)
}

/// Decodes every record of a whole file held in memory, calling `f` for
/// each; stops at the first error.
pub fn decode(file: &[u8], mut f: impl FnMut(Record<'_>)) -> Result<FileHeader, DecodeError> {
    let mut r = Reader::new(file)?;
    while let Some(rec) = r.next_record()? {
        f(rec);
    }
    Ok(r.header)
}

/// The start of the next whole, undamaged block at or after `from` in a
/// file held in memory (magic, length and checksum right), to resume
/// reading after a damaged one.
pub fn find_block(file: &[u8], from: usize) -> Option<usize> {
    let mut i = from.max(FILE_HEADER_LEN);
    while i + BLOCK_HEADER_LEN <= file.len() {
        let k = file[i..].windows(4).position(|w| w == BLOCK_MAGIC)?;
        i += k;
        if let Ok(bh) = block_header(&file[i..], i as u64) {
            let start = i + BLOCK_HEADER_LEN;
            if let Some(p) = file.get(start..start + bh.len) {
                if crc_ok(&file[i..], p, bh.crc) {
                    return Some(i);
                }
            }
        }
        i += 1;
    }
    None
}

/// Decodes the block at `at` of a file held in memory on its own (every
/// block stands alone), calling `f` for each record; returns the offset of
/// the next block.
pub fn decode_block(
    file: &[u8],
    at: usize,
    mut f: impl FnMut(Record<'_>),
) -> Result<usize, DecodeError> {
    let header = FileHeader::parse(file)?;
    let bh = block_header(file.get(at..).unwrap_or_default(), at as u64)?;
    let start = at + BLOCK_HEADER_LEN;
    let payload = file.get(start..start + bh.len).ok_or(DecodeError {
        offset: file.len() as u64,
        kind: ErrorKind::Truncated,
    })?;
    if !crc_ok(&file[at..], payload, bh.crc) {
        return Err(DecodeError {
            offset: at as u64,
            kind: ErrorKind::BadChecksum,
        });
    }
    if bh.count > 0 {
        let mut dec = codec::BlockDecoder::new(header.linktype, header.version);
        dec.reset(payload, start as u64, bh.base_ts)?;
        for _ in 0..bh.count {
            f(dec.next(payload, start as u64)?);
        }
        dec.finished(payload, start as u64)?;
    }
    Ok(start + bh.len)
}

/// How much of a (possibly cut-short) file is whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Bytes up to the end of the last whole, undamaged block (0 if not
    /// even the file header is whole).
    pub valid_len: u64,
    /// Whole blocks.
    pub blocks: u64,
    /// Records in them.
    pub records: u64,
}

/// The whole blocks at the start of `file` (checked by length and checksum,
/// not decoded): where to cut a file a crash left partly written.
pub fn valid_prefix(file: &[u8]) -> Prefix {
    let mut p = Prefix {
        valid_len: 0,
        blocks: 0,
        records: 0,
    };
    if FileHeader::parse(file).is_err() {
        return p;
    }
    let mut at = FILE_HEADER_LEN;
    p.valid_len = at as u64;
    while let Ok(bh) = block_header(&file[at..], at as u64) {
        let start = at + BLOCK_HEADER_LEN;
        match file.get(start..start + bh.len) {
            Some(payload) if crc_ok(&file[at..], payload, bh.crc) => {}
            _ => break,
        }
        at = start + bh.len;
        p.valid_len = at as u64;
        p.blocks += 1;
        p.records += bh.count as u64;
    }
    p
}

#[cfg(test)]
mod tests;
