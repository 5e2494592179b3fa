//! Reading pcapng: one block at a time, in each section's byte order;
//! section headers and interface descriptions are taken in on the way,
//! packet blocks give packets, the other blocks are passed over.

use std::io::Read;

use super::error::{check_caplen, malformed, truncated, FormatError, FormatErrorKind};
use super::meta::{ByteOrder, Interface, TsUnit};
use super::{Found, Reader, State, MAX_RECORD_LEN};
use crate::pcapng::{
    BT_EPB, BT_IDB, BT_PB, BT_SHB, BT_SPB, BYTE_ORDER_MAGIC, IF_DESCRIPTION, IF_FILTER, IF_NAME,
    IF_TSOFFSET, IF_TSRESOL,
};

/// A string option value: UTF-8 (lossily), without trailing NULs.
fn option_string(v: &[u8]) -> String {
    let end = v.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// What one pcapng block turned out to be.
pub(super) enum Block {
    /// Clean end of the stream (no block).
    End,
    /// A packet.
    Packet(Found),
    /// Any other block (already handled).
    Other,
}

impl<R: Read> Reader<R> {
    pub(super) fn step_pcapng(&mut self) -> Result<Option<Found>, FormatError> {
        loop {
            match self.read_block()? {
                Block::End => return Ok(None),
                Block::Packet(found) => return Ok(Some(found)),
                Block::Other => {}
            }
        }
    }

    /// Reads one pcapng block.
    pub(super) fn read_block(&mut self) -> Result<Block, FormatError> {
        let off = self.pos;
        let io_err = |e| FormatError::new(off, FormatErrorKind::Io(e));
        let avail = self.fill(12).map_err(io_err)?;
        if avail == 0 {
            return Ok(Block::End);
        }
        if avail < 8 {
            return Err(truncated(off, "block header", avail, 8));
        }
        let b = &self.buf[self.start..self.end];
        let is_shb = b[0..4] == BT_SHB.to_le_bytes();
        let order = if is_shb {
            if avail < 12 {
                return Err(truncated(off, "block header", avail, 12));
            }
            let bom = [b[8], b[9], b[10], b[11]];
            if bom == BYTE_ORDER_MAGIC.to_le_bytes() {
                ByteOrder::Little
            } else if bom == BYTE_ORDER_MAGIC.to_be_bytes() {
                ByteOrder::Big
            } else {
                return Err(FormatError::new(
                    off,
                    FormatErrorKind::BadByteOrderMagic { bytes: bom },
                ));
            }
        } else {
            match self.state {
                State::Pcapng { order, .. } => order,
                State::Pcap { order, .. } => order,
                State::Compressed { .. } => ByteOrder::host(),
            }
        };
        let block_type = order.u32(b, 0);
        let len = order.u32(b, 4);
        let min_len = if is_shb { 28 } else { 12 };
        if len < min_len || len % 4 != 0 || len > MAX_RECORD_LEN {
            return Err(FormatError::new(
                off,
                FormatErrorKind::BadBlockLength { len },
            ));
        }
        let len = len as usize;
        let avail = self.fill(len).map_err(io_err)?;
        if avail < len {
            return Err(truncated(off, "block", avail, len));
        }
        let block = &self.buf[self.start..self.start + len];
        let trailing = order.u32(block, len - 4);
        if trailing as usize != len {
            return Err(FormatError::new(
                off,
                FormatErrorKind::LengthMismatch {
                    leading: len as u32,
                    trailing,
                },
            ));
        }
        let (section_first, section) = match self.state {
            State::Pcapng {
                section_first,
                section,
                ..
            } => (section_first, section),
            State::Pcap { .. } | State::Compressed { .. } => (0, 0),
        };
        let section_ifaces = self.interfaces.len() - section_first;
        // The block body, between the length fields.
        let body = &block[8..len - 4];
        let found = match block_type {
            BT_SHB => {
                let major = order.u16(body, 4);
                let minor = order.u16(body, 6);
                if major != 1 {
                    return Err(FormatError::new(
                        off,
                        FormatErrorKind::UnsupportedVersion { major, minor },
                    ));
                }
                self.state = State::Pcapng {
                    order,
                    section_first: self.interfaces.len(),
                    section: section + 1,
                };
                None
            }
            _ if section == 0 => {
                return Err(malformed(
                    off,
                    "pcapng block before the first section header block".into(),
                ));
            }
            BT_IDB => {
                if self.interfaces.len() >= self.max_interfaces {
                    return Err(malformed(
                        off,
                        format!("more than {} interfaces", self.max_interfaces),
                    ));
                }
                if body.len() < 8 {
                    return Err(malformed(
                        off,
                        format!(
                            "interface description block of {len} bytes is too short (at least 20)"
                        ),
                    ));
                }
                let mut iface = Interface {
                    linktype: order.u16(body, 0) as u32,
                    snaplen: order.u32(body, 4),
                    name: None,
                    description: None,
                    filter: None,
                    ts_unit: TsUnit::Pow10(6),
                    ts_offset_s: 0,
                    section: section - 1,
                };
                parse_idb_options(off, order, &body[8..], &mut iface)?;
                self.interfaces.push(iface);
                None
            }
            BT_EPB | BT_PB => {
                let name = if block_type == BT_EPB {
                    "enhanced packet block"
                } else {
                    "packet block"
                };
                if body.len() < 20 {
                    return Err(malformed(
                        off,
                        format!("{name} of {len} bytes is too short (at least 32)"),
                    ));
                }
                let id = if block_type == BT_EPB {
                    order.u32(body, 0)
                } else {
                    order.u16(body, 0) as u32
                };
                if id as usize >= section_ifaces {
                    return Err(FormatError::new(
                        off,
                        FormatErrorKind::UnknownInterface {
                            id,
                            count: section_ifaces,
                        },
                    ));
                }
                let iface = &self.interfaces[section_first + id as usize];
                let ticks = (order.u32(body, 4) as u64) << 32 | order.u32(body, 8) as u64;
                let caplen = order.u32(body, 12);
                let wire_len = order.u32(body, 16);
                check_caplen(off, caplen, iface.snaplen)?;
                if caplen as usize > body.len() - 20 {
                    return Err(malformed(
                        off,
                        format!(
                            "{name} claims {caplen} bytes of packet data but the block has room for only {}",
                            body.len() - 20
                        ),
                    ));
                }
                Some(Found {
                    interface: section_first + id as usize,
                    ts_ns: iface.ts_to_ns(ticks),
                    wire_len,
                    data_start: self.start + 28,
                    data_len: caplen as usize,
                })
            }
            BT_SPB => {
                if body.len() < 4 {
                    return Err(malformed(
                        off,
                        format!("simple packet block of {len} bytes is too short (at least 16)"),
                    ));
                }
                if section_ifaces == 0 {
                    return Err(FormatError::new(
                        off,
                        FormatErrorKind::UnknownInterface { id: 0, count: 0 },
                    ));
                }
                let iface = &self.interfaces[section_first];
                let wire_len = order.u32(body, 0);
                // The captured length is implied: the original length cut
                // to the snapshot length and to the room in the block.
                let mut caplen = wire_len as usize;
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                caplen = caplen.min(body.len() - 4);
                Some(Found {
                    interface: section_first,
                    ts_ns: 0,
                    wire_len,
                    data_start: self.start + 12,
                    data_len: caplen,
                })
            }
            // ISB, NRB, DSB, custom and unknown blocks.
            _ => None,
        };
        self.consume(len);
        Ok(match found {
            Some(f) => Block::Packet(f),
            None => Block::Other,
        })
    }
}

/// Reads the options of an IDB into `iface`.
fn parse_idb_options(
    off: u64,
    order: ByteOrder,
    mut opts: &[u8],
    iface: &mut Interface,
) -> Result<(), FormatError> {
    while opts.len() >= 4 {
        let code = order.u16(opts, 0);
        let len = order.u16(opts, 2) as usize;
        if code == 0 {
            break;
        }
        if 4 + len > opts.len() {
            return Err(malformed(
                off,
                format!(
                    "interface description block option {code} claims {len} bytes but only {} remain in the block",
                    opts.len() - 4
                ),
            ));
        }
        let v = &opts[4..4 + len];
        match code {
            IF_NAME => iface.name = Some(option_string(v)),
            IF_DESCRIPTION => iface.description = Some(option_string(v)),
            IF_TSRESOL if !v.is_empty() => iface.ts_unit = TsUnit::from_tsresol(v[0]),
            IF_TSOFFSET if v.len() >= 8 => iface.ts_offset_s = order.u64(v, 0) as i64,
            IF_FILTER if v.first() == Some(&0) => iface.filter = Some(option_string(&v[1..])),
            _ => {}
        }
        let next = (4 + len + 3) & !3;
        opts = &opts[next.min(opts.len())..];
    }
    Ok(())
}
