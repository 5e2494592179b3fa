//! The one packet record: [`Record`], a kept packet on its way from the
//! capture stages to a sink, and [`Header`], the 16-byte header in front of
//! a record's bytes wherever records are stored — four 32-bit words:
//! seconds, fraction of a second, captured length, length on the wire (the
//! layout of a pcap record header).
//!
//! Two byte orders use that one layout: a pcap file's records are in the
//! writer's host order with micro- or nanoseconds, as libpcap writes them
//! ([`Endian::Host`], see [`crate::pcap`]); the records ringcapd puts into
//! its clients' rings, and that sinks take in bulk, are little endian with
//! nanoseconds ([`Endian::Little`], [`write_ring_record`],
//! [`read_ring_record`]). Nothing else in the workspace spells the layout
//! out: every reader and writer of record headers goes through here.

use crate::TsResolution;

/// Bytes of a record header.
pub const HEADER_LEN: usize = 16;

/// A kept packet as the stages hand it to a sink: `caplen` bytes of `data`
/// (with `tag`, a VLAN tag the kernel stripped, put back after the MAC
/// addresses), captured at `ts_ns` (ns since the epoch), `wire_len` bytes
/// long on the wire.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Capture time, ns since the epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub wire_len: u32,
    /// The bytes the source has (at least what `caplen` keeps, tag aside).
    pub data: &'a [u8],
    /// A VLAN tag to put back after the MAC addresses.
    pub tag: Option<[u8; 4]>,
    /// Bytes to keep (tag included).
    pub caplen: usize,
}

impl<'a> Record<'a> {
    /// A record of all of `data`, no tag.
    pub fn whole(ts_ns: u64, wire_len: u32, data: &'a [u8]) -> Record<'a> {
        Record {
            ts_ns,
            wire_len,
            data,
            tag: None,
            caplen: data.len(),
        }
    }
}

/// Byte order of a stored [`Header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    /// Little endian: ringcapd's client rings and bulk hand-over.
    Little,
    /// The host's order: pcap files written here.
    Host,
}

/// A record header's four words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Seconds since the epoch.
    pub secs: u32,
    /// Fraction of the second, in the resolution of the store.
    pub frac: u32,
    /// Captured bytes that follow the header.
    pub caplen: u32,
    /// Length on the wire.
    pub wire_len: u32,
}

impl Header {
    /// The header of a packet captured at `ts_ns`, in `resolution`.
    #[inline]
    pub fn new(ts_ns: u64, caplen: u32, wire_len: u32, resolution: TsResolution) -> Header {
        let ns = (ts_ns % 1_000_000_000) as u32;
        Header {
            secs: (ts_ns / 1_000_000_000) as u32,
            frac: match resolution {
                TsResolution::Micro => ns / 1_000,
                TsResolution::Nano => ns,
            },
            caplen,
            wire_len,
        }
    }

    /// The timestamp in ns, the fraction being nanoseconds.
    #[inline]
    pub fn ts_ns(&self) -> u64 {
        u64::from(self.secs) * 1_000_000_000 + u64::from(self.frac)
    }

    /// Writes the header into `dst[..16]` (panics if `dst` is shorter).
    #[inline]
    pub fn write(&self, dst: &mut [u8], endian: Endian) {
        let h = &mut dst[..HEADER_LEN];
        for (i, w) in [self.secs, self.frac, self.caplen, self.wire_len]
            .into_iter()
            .enumerate()
        {
            h[i * 4..i * 4 + 4].copy_from_slice(&match endian {
                Endian::Little => w.to_le_bytes(),
                Endian::Host => w.to_ne_bytes(),
            });
        }
    }

    /// The header at the start of `src`, if 16 bytes are there.
    #[inline]
    pub fn read(src: &[u8], endian: Endian) -> Option<Header> {
        let h = src.get(..HEADER_LEN)?;
        let word = |i: usize| {
            let b = [h[i], h[i + 1], h[i + 2], h[i + 3]];
            match endian {
                Endian::Little => u32::from_le_bytes(b),
                Endian::Host => u32::from_ne_bytes(b),
            }
        };
        Some(Header {
            secs: word(0),
            frac: word(4),
            caplen: word(8),
            wire_len: word(12),
        })
    }
}

/// Writes `rec` as a ring record (little endian, nanoseconds) at the start
/// of `dst`, which holds at least [`HEADER_LEN`] + `rec.caplen` bytes.
#[inline]
pub fn write_ring_record(dst: &mut [u8], rec: &Record<'_>) {
    Header::new(
        rec.ts_ns,
        rec.caplen as u32,
        rec.wire_len,
        TsResolution::Nano,
    )
    .write(dst, Endian::Little);
    copy_with_tag(&mut dst[HEADER_LEN..], rec.data, rec.tag, rec.caplen);
}

/// The ring record at the start of `bytes`, if it is whole: the record (no
/// tag: it is in the bytes) and its length in `bytes`.
#[inline]
pub fn read_ring_record(bytes: &[u8]) -> Option<(Record<'_>, usize)> {
    let h = Header::read(bytes, Endian::Little)?;
    let end = HEADER_LEN.checked_add(h.caplen as usize)?;
    let data = bytes.get(HEADER_LEN..end)?;
    Some((Record::whole(h.ts_ns(), h.wire_len, data), end))
}

/// Copies `caplen` bytes of a packet into `dst[..caplen]`, putting `tag` (a
/// VLAN tag the kernel stripped) back after the two MAC addresses. Bytes
/// `data` does not have are zeros (a caller bug, not a panic); `dst` must
/// hold `caplen` bytes.
#[inline]
pub fn copy_with_tag(dst: &mut [u8], data: &[u8], tag: Option<[u8; 4]>, caplen: usize) {
    let dst = &mut dst[..caplen];
    let from = match tag {
        Some(tag) if data.len() >= 12 && caplen >= 12 => {
            dst[..12].copy_from_slice(&data[..12]);
            let tag_len = (caplen - 12).min(4);
            dst[12..12 + tag_len].copy_from_slice(&tag[..tag_len]);
            let rest = (caplen - 12 - tag_len).min(data.len() - 12);
            dst[12 + tag_len..12 + tag_len + rest].copy_from_slice(&data[12..12 + rest]);
            12 + tag_len + rest
        }
        _ => {
            let n = caplen.min(data.len());
            copy_bytes(&mut dst[..n], &data[..n]);
            n
        }
    };
    if from < dst.len() {
        dst[from..].fill(0);
    }
}

/// `dst.copy_from_slice(src)`, with short copies (a header trace's records)
/// done as 16-byte moves rather than a call to `memcpy`, whose set-up costs
/// more than the copy at these lengths.
#[inline(always)]
fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if !(16..=128).contains(&n) || dst.len() != n {
        dst.copy_from_slice(src);
        return;
    }
    for (d, s) in dst.chunks_exact_mut(16).zip(src.chunks_exact(16)) {
        d.copy_from_slice(s);
    }
    // The last 16 bytes again, overlapping what the loop copied.
    dst[n - 16..].copy_from_slice(&src[n - 16..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_bytes_copies_every_length() {
        let src: Vec<u8> = (0..200u8).collect();
        for n in 0..200 {
            let mut dst = vec![0xee; n];
            copy_bytes(&mut dst, &src[..n]);
            assert_eq!(dst, &src[..n], "length {n}");
        }
    }

    #[test]
    fn ring_record_round_trip_and_bytes() {
        let data = [1u8, 2, 3, 4, 5];
        let rec = Record {
            ts_ns: 1_700_000_000_123_456_789,
            wire_len: 60,
            data: &data,
            tag: None,
            caplen: 4,
        };
        let mut buf = vec![0u8; HEADER_LEN + 4 + 3];
        write_ring_record(&mut buf, &rec);
        assert_eq!(&buf[0..4], &1_700_000_000u32.to_le_bytes());
        assert_eq!(&buf[4..8], &123_456_789u32.to_le_bytes());
        assert_eq!(&buf[8..12], &4u32.to_le_bytes());
        assert_eq!(&buf[12..16], &60u32.to_le_bytes());
        let (back, len) = read_ring_record(&buf).unwrap();
        assert_eq!(len, HEADER_LEN + 4);
        assert_eq!(
            (back.ts_ns, back.wire_len, back.data),
            (rec.ts_ns, 60, &data[..4])
        );
        // Cut short: not whole.
        assert!(read_ring_record(&buf[..HEADER_LEN + 3]).is_none());
    }

    #[test]
    fn micro_header_in_host_order() {
        let mut b = [0u8; 16];
        Header::new(1_700_000_000_123_456_789, 60, 1514, TsResolution::Micro)
            .write(&mut b, Endian::Host);
        let h = Header::read(&b, Endian::Host).unwrap();
        assert_eq!(
            (h.secs, h.frac, h.caplen, h.wire_len),
            (1_700_000_000, 123_456, 60, 1514)
        );
        assert_eq!(&b[0..4], &1_700_000_000u32.to_ne_bytes());
    }
}
