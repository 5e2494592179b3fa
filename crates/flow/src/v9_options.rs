//! NetFlow v9's options template and record of the sampling parameters
//! (RFC 3954 section 6.1 and 6.2), sent with the data templates when
//! sampling is on, so a v9 collector can scale counts as IPFIX collectors
//! do from the PSAMP options record.
//!
//! Scope: the system (scope type 1), its value the source ID. Fields: the
//! v9 SAMPLING_INTERVAL (34: one packet in N) and SAMPLING_ALGORITHM (35:
//! 1 deterministic, 2 random), the pair Cisco's and nfdump's readers take
//! for exporter-wide sampling. Version 9 has no code for hash-based flow
//! selection (`--sample-flows`): it is reported as random, which is what
//! it looks like to a collector (an unbiased 1-in-N of the flows, not of
//! the packets within one). Both sets are padded to four bytes, as the
//! RFC says they should be.

use crate::sampling::SamplingReport;

/// Options template ID (v9 template IDs are per dialect; IPFIX's sampling
/// template has the same number).
pub const TEMPLATE_V9_SAMPLING: u16 = 258;
/// Scope type System (RFC 3954 section 6.1).
const SCOPE_SYSTEM: u16 = 1;
/// SAMPLING_INTERVAL.
pub const SAMPLING_INTERVAL: u16 = 34;
/// SAMPLING_ALGORITHM.
pub const SAMPLING_ALGORITHM: u16 = 35;

/// The v9 SAMPLING_ALGORITHM of `s`: 1 deterministic (count-based), 2
/// random (everything else).
pub fn algorithm(s: &SamplingReport) -> u8 {
    if s.algorithm == 1 {
        1
    } else {
        2
    }
}

/// N of "one packet in N".
pub fn interval(s: &SamplingReport) -> u32 {
    s.interval.saturating_add(s.space).max(1)
}

fn pad4(b: &mut Vec<u8>, at: usize) {
    while !(b.len() - at).is_multiple_of(4) {
        b.push(0);
    }
}

fn close(b: &mut [u8], at: usize) {
    let len = (b.len() - at) as u16;
    b[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
}

/// Appends the options template flowset and its one data record for `s`
/// in source ID `domain`; returns the records written (for the header's
/// count: the template and the data record).
pub fn write(b: &mut Vec<u8>, domain: u32, s: &SamplingReport) -> u32 {
    // Options template flowset (ID 1).
    let at = b.len();
    b.extend_from_slice(&1u16.to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&TEMPLATE_V9_SAMPLING.to_be_bytes());
    b.extend_from_slice(&4u16.to_be_bytes()); // option scope length
    b.extend_from_slice(&8u16.to_be_bytes()); // option length
    for (t, l) in [
        (SCOPE_SYSTEM, 4u16),
        (SAMPLING_INTERVAL, 4),
        (SAMPLING_ALGORITHM, 1),
    ] {
        b.extend_from_slice(&t.to_be_bytes());
        b.extend_from_slice(&l.to_be_bytes());
    }
    pad4(b, at);
    close(b, at);
    // Its data flowset.
    let at = b.len();
    b.extend_from_slice(&TEMPLATE_V9_SAMPLING.to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&domain.to_be_bytes());
    b.extend_from_slice(&interval(s).to_be_bytes());
    b.push(algorithm(s));
    pad4(b, at);
    close(b, at);
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sets_byte_for_byte() {
        let mut b = vec![0xee];
        let n = write(&mut b, 0x0102_0304, &SamplingReport::count(100));
        assert_eq!(n, 2);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0xee,
            // Options template flowset: ID 1, 24 bytes (22 + 2 padding).
            0, 1, 0, 24,
            1, 2, // template 258
            0, 4, 0, 8, // scope 4 bytes, options 8 bytes
            0, 1, 0, 4, // System, 4
            0, 34, 0, 4, // SAMPLING_INTERVAL, 4
            0, 35, 0, 1, // SAMPLING_ALGORITHM, 1
            0, 0,
            // Data flowset of template 258: 13 bytes + 3 padding.
            1, 2, 0, 16,
            1, 2, 3, 4, // system: the source ID
            0, 0, 0, 100, // 1 in 100
            1, // deterministic
            0, 0, 0,
        ];
        assert_eq!(b, want);
    }

    #[test]
    fn algorithms_and_intervals() {
        for (s, a, n) in [
            (SamplingReport::count(4), 1, 4),
            (SamplingReport::random(8), 2, 8),
            (SamplingReport::flows(16), 2, 16),
            (SamplingReport::count(1), 1, 1),
        ] {
            assert_eq!((algorithm(&s), interval(&s)), (a, n), "{s:?}");
        }
    }
}
