//! The ring's memory format: offsets, sizes and chunk headers, shared by the
//! writer and the reader (pure arithmetic, no memory access).
//!
//! Every multi-byte field is little-endian, whatever the host: stores go
//! through `to_le`, loads through `from_le` (free on the little-endian machines
//! this runs on, correct on the others).
//!
//! # Data region (one memfd: header page, then the data area)
//!
//! | offset | size | field                | written                                     |
//! |-------:|-----:|----------------------|---------------------------------------------|
//! |      0 |    8 | magic `b"RCRING01"`  | once, before the client gets the fd         |
//! |      8 |    4 | version = 1          | once                                        |
//! |     12 |    4 | header size = 4096   | once (the data area starts here)            |
//! |     16 |    8 | capacity             | once (bytes in the data area, power of two) |
//! |     24 |    4 | flags                | once: bit 0 = pooled (see below)            |
//! |     28 |   36 | reserved, zero       |                                             |
//! |     64 |    8 | write position       | Release, after each append                  |
//! |     72 |    8 | chunks written       | Relaxed, before the write position          |
//! |     80 |    8 | packets written      | Relaxed, before the write position          |
//! |     88 |    8 | bytes written        | Relaxed (payload bytes, without headers)    |
//! |     96 |    8 | packets dropped      | Relaxed ("dropped in the client's ring")    |
//! |    104 |    8 | bytes dropped        | Relaxed                                     |
//! |    112 |    4 | state                | Release: 0 running, 1 ended                 |
//! |    116 | 3980 | reserved, zero       |                                             |
//! |   4096 |  cap | data area            | chunks                                      |
//!
//! The fields that change sit on their own cache line (64..128), away from the
//! constant ones, so the client's reads of the constants never miss because
//! the daemon appended.
//!
//! Positions are monotonic byte counts (they never wrap in practice: 2^64
//! bytes at 100 Gbit/s is 46 years); the offset in the data area is
//! `position & (capacity - 1)`.
//!
//! # Chunks
//!
//! At an 8-byte-aligned offset: an 8-byte header, read and written as one
//! little-endian `u64` (one atomic access): bits 0..32 = payload length `len`,
//! bits 32..64 = number of packets in it. Then `len` payload bytes, then zero
//! padding to the next multiple of 8. A chunk never wraps: when it does not fit
//! before the end of the data area, the writer puts a *padding marker* (a
//! header with `len == u32::MAX`) at the current offset and the chunk starts at
//! offset 0; the bytes from the marker to the end count as used.
//!
//! # Consumer region (a second memfd of 4096 bytes, client-written)
//!
//! | offset | size | field                                                          |
//! |-------:|-----:|----------------------------------------------------------------|
//! |      0 |    8 | read position: the client is done with everything before it  |
//! |     64 |    4 | waiting: non-zero while the client sleeps and wants a wake-up |
//!
//! Both are untrusted on the daemon's side (see [`crate::writer`]).
//!
//! # Pooled rings (flag bit 0)
//!
//! A ring the daemon reuses for the same user's next session
//! ([`crate::RingWriter::create_pooled`]): its consumer region is sealed
//! `SHRINK | GROW | SEAL` by the daemon, so no reader can claim it with
//! `FUTURE_WRITE` (which would lock the next session's reader out), and
//! on reuse the daemon sets the read position to the write position, so the
//! next reader starts after everything the previous session wrote.

/// The first 8 bytes of the header.
pub const MAGIC: [u8; 8] = *b"RCRING01";
/// The format version this crate writes and reads.
pub const VERSION: u32 = 1;
/// Size of the header page; the data area starts at this offset.
pub const HEADER_SIZE: usize = 4096;
/// Smallest capacity of the data area.
pub const MIN_CAPACITY: usize = 64 << 10;
/// Largest capacity of the data area: chunk lengths are `u32`.
pub const MAX_CAPACITY: u64 = 4 << 30;
/// Size of the consumer region.
pub const CONSUMER_SIZE: usize = 4096;

/// Header offsets.
pub mod hdr {
    /// `[u8; 8]` magic.
    pub const MAGIC: usize = 0;
    /// `u32` version.
    pub const VERSION: usize = 8;
    /// `u32` header size.
    pub const HEADER_SIZE: usize = 12;
    /// `u64` capacity.
    pub const CAPACITY: usize = 16;
    /// `u32` flags ([`super::FLAG_POOLED`]).
    pub const FLAGS: usize = 24;
    /// `u64` write position.
    pub const WRITE_POSITION: usize = 64;
    /// `u64` chunks written.
    pub const CHUNKS_WRITTEN: usize = 72;
    /// `u64` packets written.
    pub const PACKETS_WRITTEN: usize = 80;
    /// `u64` payload bytes written.
    pub const BYTES_WRITTEN: usize = 88;
    /// `u64` packets dropped because the ring was full.
    pub const PACKETS_DROPPED: usize = 96;
    /// `u64` bytes dropped because the ring was full.
    pub const BYTES_DROPPED: usize = 104;
    /// `u32` state.
    pub const STATE: usize = 112;
}

/// Consumer region offsets.
pub mod consumer {
    /// `u64` read position.
    pub const READ_POSITION: usize = 0;
    /// `u32` waiting flag.
    pub const WAITING: usize = 64;
}

/// `flags` bit: the ring is reused across sessions of one user (see
/// "Pooled rings" above).
pub const FLAG_POOLED: u32 = 1;

/// `state`: the daemon is still appending.
pub const STATE_RUNNING: u32 = 0;
/// `state`: the daemon has appended its last chunk.
pub const STATE_ENDED: u32 = 1;

/// Size of a chunk header.
pub const CHUNK_HEADER: u64 = 8;
/// Chunk `len` value of the padding marker.
pub const PADDING_LEN: u32 = u32::MAX;

/// Bytes a chunk with `len` payload bytes takes in the data area.
pub fn chunk_size(len: u32) -> u64 {
    CHUNK_HEADER + u64::from(len).div_ceil(8) * 8
}

/// A chunk header as the `u64` stored in the ring (host order; the caller
/// converts with `to_le`).
pub fn encode_chunk_header(len: u32, packets: u32) -> u64 {
    u64::from(len) | (u64::from(packets) << 32)
}

/// `(len, packets)` from a chunk header (host order).
pub fn decode_chunk_header(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

/// Whether `capacity` is an accepted data-area size.
pub fn valid_capacity(capacity: u64) -> bool {
    capacity.is_power_of_two() && capacity >= MIN_CAPACITY as u64 && capacity <= MAX_CAPACITY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_padded_to_eight() {
        assert_eq!(chunk_size(0), 8);
        assert_eq!(chunk_size(1), 16);
        assert_eq!(chunk_size(8), 16);
        assert_eq!(chunk_size(9), 24);
        assert_eq!(chunk_size(u32::MAX), 8 + (1 << 32));
    }

    #[test]
    fn headers_round_trip() {
        for (len, packets) in [(0, 0), (1, 2), (u32::MAX, 0), (7, u32::MAX)] {
            assert_eq!(
                decode_chunk_header(encode_chunk_header(len, packets)),
                (len, packets)
            );
        }
    }

    #[test]
    fn capacities() {
        assert!(valid_capacity(64 << 10));
        assert!(valid_capacity(4 << 30));
        assert!(!valid_capacity(0));
        assert!(!valid_capacity(32 << 10));
        assert!(!valid_capacity(8 << 30));
        assert!(!valid_capacity((64 << 10) + 8));
    }
}
