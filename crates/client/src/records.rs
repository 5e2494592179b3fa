//! The packet records of a chunk ([`Records`], [`Packet`]): checked to lie
//! inside their chunk before anyone reads them, then walked. Apart because
//! it is pure byte parsing, with nothing of the connection in it.

use crate::{ClientError, RECORD_HEADER};
use ringcap_format::record::{Endian, Header};

/// One packet delivered by the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Capture time, ns since the epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub wire_len: u32,
    /// The bytes the policy lets this client have.
    pub data: &'a [u8],
}

/// The packet records of one chunk, checked: pcap records with 16-byte
/// little-endian headers (seconds, nanoseconds, captured length, length on
/// the wire), then the captured bytes, back to back, none running past the
/// end.
#[derive(Debug, Clone, Copy)]
pub struct Records<'a> {
    /// The records' bytes.
    pub bytes: &'a [u8],
    /// How many records.
    pub count: u64,
    /// The sum of their lengths on the wire.
    pub wire_bytes: u64,
}

/// The record header's words at `p[..16]` (the caller checked the length):
/// seconds, nanoseconds, captured length, length on the wire.
#[inline]
fn record_header(p: &[u8]) -> (u32, u32, u32, u32) {
    let h = Header::read(p, Endian::Little).unwrap_or(Header {
        secs: 0,
        frac: 0,
        caplen: 0,
        wire_len: 0,
    });
    (h.secs, h.frac, h.caplen, h.wire_len)
}

impl<'a> Records<'a> {
    /// Checks that `bytes` is whole records.
    pub(super) fn check(bytes: &'a [u8]) -> Result<Records<'a>, ClientError> {
        let (mut count, mut wire_bytes) = (0u64, 0u64);
        let mut p = bytes;
        while !p.is_empty() {
            if p.len() < RECORD_HEADER {
                return Err(ClientError::Protocol(format!(
                    "{} stray bytes after the last record of a chunk",
                    p.len()
                )));
            }
            let (_, _, caplen, wire_len) = record_header(p);
            let end = RECORD_HEADER + caplen as usize;
            if end > p.len() {
                return Err(ClientError::Protocol(format!(
                    "a record of {caplen} bytes runs past its chunk"
                )));
            }
            count += 1;
            wire_bytes += u64::from(wire_len);
            p = &p[end..];
        }
        Ok(Records {
            bytes,
            count,
            wire_bytes,
        })
    }

    /// The first `n` records, and how many come after them.
    pub fn split(self, n: u64) -> (Records<'a>, u64) {
        if n >= self.count {
            return (self, 0);
        }
        let (mut end, mut wire_bytes) = (0usize, 0u64);
        for _ in 0..n {
            // Checked in `check`: every record lies inside the chunk.
            let (_, _, caplen, wire_len) = record_header(&self.bytes[end..]);
            end += RECORD_HEADER + caplen as usize;
            wire_bytes += u64::from(wire_len);
        }
        let head = Records {
            bytes: &self.bytes[..end],
            count: n,
            wire_bytes,
        };
        (head, self.count - n)
    }

    /// The packets, in order.
    pub fn packets(&self) -> impl Iterator<Item = Packet<'a>> + 'a {
        let mut p = self.bytes;
        std::iter::from_fn(move || {
            if p.len() < RECORD_HEADER {
                return None;
            }
            let (sec, nsec, caplen, wire_len) = record_header(p);
            let end = (RECORD_HEADER + caplen as usize).min(p.len());
            let packet = Packet {
                ts_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
                wire_len,
                data: &p[RECORD_HEADER..end],
            };
            p = &p[end..];
            Some(packet)
        })
    }
}
