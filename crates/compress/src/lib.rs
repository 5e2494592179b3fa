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

// The public items below live in files of their own (the file header, the
// errors, the encoder, blocks, whole files) and are re-exported here, so
// the crate's paths stay what they were.
mod block;
mod encoder;
mod error;
mod file;
mod header;

pub use block::{check_block, peek_block, BlockInfo, BlockReader};
pub use encoder::Encoder;
pub use error::{DecodeError, ErrorKind};
pub use file::{decode, decode_block, find_block, valid_prefix, Prefix, Reader};
pub use header::{is_compressed, FileHeader, Resolution};

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

#[cfg(test)]
mod tests;
