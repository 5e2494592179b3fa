//! The classic pcap format: a 24-byte file header, then a 16-byte header before
//! every packet. Files are written in the host's byte order, as libpcap does.

use crate::record::{Endian, Header};
use crate::TsResolution;

/// Length of the file header.
pub const FILE_HEADER_LEN: usize = 24;
/// Length of the header in front of every packet record.
pub const RECORD_HEADER_LEN: usize = crate::record::HEADER_LEN;
/// Magic number of a microsecond file, in the writer's byte order.
pub const MAGIC_MICRO: u32 = 0xa1b2_c3d4;
/// Magic number of a nanosecond file, in the writer's byte order.
pub const MAGIC_NANO: u32 = 0xa1b2_3c4d;

/// The 24-byte file header for `linktype` (e.g. 1 for Ethernet) and `snaplen`.
pub fn file_header(linktype: u32, snaplen: u32, resolution: TsResolution) -> [u8; FILE_HEADER_LEN] {
    let magic = match resolution {
        TsResolution::Micro => MAGIC_MICRO,
        TsResolution::Nano => MAGIC_NANO,
    };
    let mut h = [0u8; FILE_HEADER_LEN];
    h[0..4].copy_from_slice(&magic.to_ne_bytes());
    h[4..6].copy_from_slice(&2u16.to_ne_bytes());
    h[6..8].copy_from_slice(&4u16.to_ne_bytes());
    // thiszone and sigfigs stay zero.
    h[16..20].copy_from_slice(&snaplen.to_ne_bytes());
    h[20..24].copy_from_slice(&linktype.to_ne_bytes());
    h
}

/// Writes the 16-byte record header for a packet into `dst[..16]`.
///
/// `ts_ns` is nanoseconds since the Unix epoch; it is cut to microseconds for a
/// microsecond file. Panics if `dst` is shorter than 16 bytes.
#[inline]
pub fn write_record_header(
    dst: &mut [u8],
    ts_ns: u64,
    caplen: u32,
    wire_len: u32,
    resolution: TsResolution,
) {
    Header::new(ts_ns, caplen, wire_len, resolution).write(dst, Endian::Host);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nano_header_bytes() {
        let h = file_header(1, 65535, TsResolution::Nano);
        #[cfg(target_endian = "little")]
        assert_eq!(
            h,
            [
                0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0,
                0, 0
            ]
        );
    }

    #[test]
    fn record_header_cuts_to_micro() {
        let mut b = [0u8; 16];
        write_record_header(
            &mut b,
            1_700_000_000_123_456_789,
            60,
            1514,
            TsResolution::Micro,
        );
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()),
            1_700_000_000
        );
        assert_eq!(u32::from_ne_bytes(b[4..8].try_into().unwrap()), 123_456);
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 60);
        assert_eq!(u32::from_ne_bytes(b[12..16].try_into().unwrap()), 1514);
    }
}
