//! Reading classic pcap: the file header and the 16-byte record headers,
//! in the byte order and timestamp unit the magic number gave.

use std::io::Read;

use super::error::{check_caplen, truncated, FormatError, FormatErrorKind};
use super::meta::{ByteOrder, FileFormat, Interface, TsUnit};
use super::{Found, Reader, State};
use crate::pcap::{FILE_HEADER_LEN, RECORD_HEADER_LEN};
use crate::TsResolution;

impl<R: Read> Reader<R> {
    pub(super) fn read_pcap_header(
        &mut self,
        order: ByteOrder,
        nano: bool,
    ) -> Result<(), FormatError> {
        let avail = self
            .fill(FILE_HEADER_LEN)
            .map_err(|e| FormatError::new(0, FormatErrorKind::Io(e)))?;
        if avail < FILE_HEADER_LEN {
            return Err(truncated(0, "file header", avail, FILE_HEADER_LEN));
        }
        let h = &self.buf[self.start..self.start + FILE_HEADER_LEN];
        let major = order.u16(h, 4);
        let minor = order.u16(h, 6);
        if major != 2 {
            return Err(FormatError::new(
                0,
                FormatErrorKind::UnsupportedVersion { major, minor },
            ));
        }
        let snaplen = order.u32(h, 16);
        // The top bits of the link-type field carry FCS information.
        let linktype = order.u32(h, 20) & 0x03FF_FFFF;
        let resolution = if nano {
            TsResolution::Nano
        } else {
            TsResolution::Micro
        };
        self.format = FileFormat::Pcap {
            resolution,
            byte_order: order,
        };
        self.state = State::Pcap {
            order,
            nano,
            snaplen,
        };
        self.interfaces.push(Interface {
            linktype,
            snaplen,
            name: None,
            description: None,
            filter: None,
            ts_unit: TsUnit::Pow10(if nano { 9 } else { 6 }),
            ts_offset_s: 0,
            section: 0,
        });
        self.consume(FILE_HEADER_LEN);
        Ok(())
    }

    pub(super) fn step_pcap(
        &mut self,
        order: ByteOrder,
        nano: bool,
        snaplen: u32,
    ) -> Result<Option<Found>, FormatError> {
        let off = self.pos;
        let io_err = |e| FormatError::new(off, FormatErrorKind::Io(e));
        let avail = self.fill(RECORD_HEADER_LEN).map_err(io_err)?;
        if avail == 0 {
            return Ok(None);
        }
        if avail < RECORD_HEADER_LEN {
            return Err(truncated(off, "record header", avail, RECORD_HEADER_LEN));
        }
        let h = &self.buf[self.start..self.start + RECORD_HEADER_LEN];
        if self.strict && h.iter().all(|&b| b == 0) {
            return Err(FormatError::new(off, FormatErrorKind::ZeroRecord));
        }
        let secs = order.u32(h, 0) as u64;
        let frac = order.u32(h, 4) as u64;
        let caplen = order.u32(h, 8);
        let wire_len = order.u32(h, 12);
        check_caplen(off, caplen, snaplen)?;
        let total = RECORD_HEADER_LEN + caplen as usize;
        let avail = self.fill(total).map_err(io_err)?;
        if avail < total {
            return Err(truncated(off, "record", avail, total));
        }
        let ts_ns = secs * 1_000_000_000 + if nano { frac } else { frac * 1_000 };
        let data_start = self.start + RECORD_HEADER_LEN;
        self.consume(total);
        // A record longer than the file's snapshot length is cut to it, as
        // libpcap reads it (so `tcpdump -r` and its filters see that much;
        // the rest is skipped). A snapshot length of 0 sets no limit.
        let kept = match snaplen {
            0 => caplen,
            s => caplen.min(s),
        };
        Ok(Some(Found {
            interface: 0,
            ts_ns,
            wire_len,
            data_start,
            data_len: kept as usize,
        }))
    }
}
