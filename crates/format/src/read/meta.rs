//! What a file says about itself: its byte order, its format, and its
//! capture interfaces with their timestamp units. Plain descriptions,
//! apart from the reading, so callers can name them without the reader.

use crate::TsResolution;

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
    pub(super) fn u16(self, b: &[u8], at: usize) -> u16 {
        let v = [b[at], b[at + 1]];
        match self {
            ByteOrder::Little => u16::from_le_bytes(v),
            ByteOrder::Big => u16::from_be_bytes(v),
        }
    }

    #[inline]
    pub(super) fn u32(self, b: &[u8], at: usize) -> u32 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        match self {
            ByteOrder::Little => u32::from_le_bytes(v),
            ByteOrder::Big => u32::from_be_bytes(v),
        }
    }

    #[inline]
    pub(super) fn u64(self, b: &[u8], at: usize) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[at..at + 8]);
        match self {
            ByteOrder::Little => u64::from_le_bytes(v),
            ByteOrder::Big => u64::from_be_bytes(v),
        }
    }
}

/// What kind of file a [`Reader`](super::Reader) is reading.
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
