//! Walking the records of files ringcap itself writes, to split output batches at
//! record boundaries (file rotation, per-packet timestamps for time-based
//! rotation) without a full reader.
//!
//! Only the layout ringcap writes is understood: host byte order, and for pcapng
//! nanosecond timestamps (`if_tsresol` = 9) in enhanced packet blocks. The pcap
//! file header is not a record; callers start walking after it.

use crate::pcap::RECORD_HEADER_LEN;
use crate::pcapng::BT_EPB;
use crate::TsResolution;

/// Which kind of records a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFormat {
    /// pcap records (16-byte header then the packet) with the given resolution.
    Pcap(TsResolution),
    /// pcapng blocks of any type.
    Pcapng,
}

#[inline]
fn ne_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// The record starting at `buf[off..]`: its total length in bytes and its
/// timestamp in nanoseconds since the epoch (`None` for pcapng blocks other than
/// enhanced packet blocks).
///
/// Returns `None` if `buf[off..]` does not hold the whole record, and also for a
/// pcapng block whose length field is impossible (less than 12 or not a multiple
/// of 4), which ringcap never writes.
#[inline]
pub fn record_at(format: RecordFormat, buf: &[u8], off: usize) -> Option<(usize, Option<u64>)> {
    match format {
        RecordFormat::Pcap(res) => {
            let secs = ne_u32(buf, off)? as u64;
            let frac = ne_u32(buf, off.checked_add(4)?)? as u64;
            let caplen = ne_u32(buf, off.checked_add(8)?)? as usize;
            let len = RECORD_HEADER_LEN.checked_add(caplen)?;
            if buf.len().checked_sub(off)? < len {
                return None;
            }
            let frac_ns = match res {
                TsResolution::Micro => frac * 1_000,
                TsResolution::Nano => frac,
            };
            Some((len, Some(secs * 1_000_000_000 + frac_ns)))
        }
        RecordFormat::Pcapng => {
            let block_type = ne_u32(buf, off)?;
            let len = ne_u32(buf, off.checked_add(4)?)? as usize;
            if len < 12 || !len.is_multiple_of(4) || buf.len().checked_sub(off)? < len {
                return None;
            }
            let ts = if block_type == BT_EPB && len >= 32 {
                let hi = ne_u32(buf, off + 12)? as u64;
                let lo = ne_u32(buf, off + 16)? as u64;
                Some(hi << 32 | lo)
            } else {
                None
            };
            Some((len, ts))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap::write_record_header;
    use crate::pcapng::{self, epb_len, write_epb_header, write_epb_trailer};

    #[test]
    fn pcap_records() {
        for res in [TsResolution::Micro, TsResolution::Nano] {
            let mut buf = Vec::new();
            let ts = [1_700_000_000_123_456_789u64, 1_700_000_001_000_001_000];
            for (i, &t) in ts.iter().enumerate() {
                let caplen = 10 + i;
                let mut h = [0u8; 16];
                write_record_header(&mut h, t, caplen as u32, 100, res);
                buf.extend_from_slice(&h);
                buf.extend(std::iter::repeat_n(0xab, caplen));
            }
            let (l0, t0) = record_at(RecordFormat::Pcap(res), &buf, 0).unwrap();
            assert_eq!(l0, 26);
            let want0 = match res {
                TsResolution::Micro => 1_700_000_000_123_456_000,
                TsResolution::Nano => 1_700_000_000_123_456_789,
            };
            assert_eq!(t0, Some(want0));
            let (l1, t1) = record_at(RecordFormat::Pcap(res), &buf, l0).unwrap();
            assert_eq!((l1, t1), (27, Some(ts[1])));
            assert_eq!(l0 + l1, buf.len());
            // Every shorter view of the second record is incomplete.
            for end in l0..buf.len() {
                assert_eq!(record_at(RecordFormat::Pcap(res), &buf[..end], l0), None);
            }
            assert_eq!(record_at(RecordFormat::Pcap(res), &buf, buf.len()), None);
            assert_eq!(record_at(RecordFormat::Pcap(res), &buf, usize::MAX), None);
        }
    }

    #[test]
    fn pcapng_blocks() {
        let mut buf = pcapng::section_header("Linux", "ringcap", None);
        let shb_len = buf.len();
        let ts = 1_700_000_000_123_456_789u64;
        let start = buf.len();
        buf.resize(start + epb_len(7), 0);
        write_epb_header(&mut buf[start..], 0, ts, 7, 60);
        write_epb_trailer(&mut buf[start..], 7);
        assert_eq!(
            record_at(RecordFormat::Pcapng, &buf, 0),
            Some((shb_len, None))
        );
        assert_eq!(
            record_at(RecordFormat::Pcapng, &buf, start),
            Some((epb_len(7), Some(ts)))
        );
        for end in start..buf.len() {
            assert_eq!(record_at(RecordFormat::Pcapng, &buf[..end], start), None);
        }
        // Impossible lengths.
        let mut bad = buf[start..].to_vec();
        bad[4..8].copy_from_slice(&10u32.to_ne_bytes());
        assert_eq!(record_at(RecordFormat::Pcapng, &bad, 0), None);
        bad[4..8].copy_from_slice(&37u32.to_ne_bytes());
        assert_eq!(record_at(RecordFormat::Pcapng, &bad, 0), None);
        bad[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(record_at(RecordFormat::Pcapng, &bad, 0), None);
    }
}
