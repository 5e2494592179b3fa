//! The capture file reader ([`read_pcap`], [`read_capture`],
//! [`parse_capture`]): pcap and pcapng written independently of
//! `ringcap-format`, so tests do not trust ringcap's own reader. Apart
//! because it is pure parsing, with no process in it.

use std::io;
use std::path::Path;

/// One packet read from a capture file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedPacket {
    /// Timestamp in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length of the packet on the wire (may exceed `data.len()` when cut by snaplen).
    pub wire_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Format of a capture file as detected by [`read_capture`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap, microsecond timestamps.
    PcapMicro,
    /// Classic pcap, nanosecond timestamps.
    PcapNano,
    /// pcapng.
    PcapNg,
}

/// A whole capture file: format, link types and packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureFile {
    /// Detected format.
    pub format: CaptureFormat,
    /// True when the file (first section, for pcapng) is big-endian.
    pub big_endian: bool,
    /// Link type of the file (pcap) or of every interface in order (pcapng).
    pub linktypes: Vec<u16>,
    /// Snap length of the file (pcap) or of the first interface (pcapng; 0 = none).
    pub snaplen: u32,
    /// The packets in file order.
    pub packets: Vec<CapturedPacket>,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads every packet of a pcap (µs or ns, either byte order) or pcapng (EPB, SPB
/// and obsolete PB; any number of sections and interfaces; `if_tsresol` and
/// `if_tsoffset` honoured) file.
pub fn read_pcap(path: impl AsRef<Path>) -> io::Result<Vec<CapturedPacket>> {
    Ok(read_capture(path)?.packets)
}

/// Like [`read_pcap`], also returning the format and link types.
pub fn read_capture(path: impl AsRef<Path>) -> io::Result<CaptureFile> {
    let path = path.as_ref();
    let bytes = std::fs::read(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    parse_capture(&bytes).map_err(|e| bad(format!("{}: {e}", path.display())))
}

/// Parses a capture file held in memory (see [`read_pcap`]).
pub fn parse_capture(b: &[u8]) -> io::Result<CaptureFile> {
    if b.len() < 4 {
        return Err(bad("file shorter than a magic number"));
    }
    let m = [b[0], b[1], b[2], b[3]];
    match m {
        [0x0a, 0x0d, 0x0d, 0x0a] => parse_pcapng(b),
        _ => parse_pcap(b),
    }
}

#[derive(Clone, Copy)]
struct Endian(bool); // true = big

impl Endian {
    fn u16(self, b: &[u8], off: usize) -> io::Result<u16> {
        let s: [u8; 2] = b
            .get(off..off + 2)
            .ok_or_else(|| bad(format!("truncated at {off}")))?
            .try_into()
            .expect("2 bytes");
        Ok(if self.0 {
            u16::from_be_bytes(s)
        } else {
            u16::from_le_bytes(s)
        })
    }

    fn u32(self, b: &[u8], off: usize) -> io::Result<u32> {
        let s: [u8; 4] = b
            .get(off..off + 4)
            .ok_or_else(|| bad(format!("truncated at {off}")))?
            .try_into()
            .expect("4 bytes");
        Ok(if self.0 {
            u32::from_be_bytes(s)
        } else {
            u32::from_le_bytes(s)
        })
    }
}

fn parse_pcap(b: &[u8]) -> io::Result<CaptureFile> {
    if b.len() < 24 {
        return Err(bad("pcap file header truncated"));
    }
    let le = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let be = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let (e, nano) = match (le, be) {
        (0xa1b2_c3d4, _) => (Endian(false), false),
        (0xa1b2_3c4d, _) => (Endian(false), true),
        (_, 0xa1b2_c3d4) => (Endian(true), false),
        (_, 0xa1b2_3c4d) => (Endian(true), true),
        _ => return Err(bad(format!("unknown magic {le:#010x}"))),
    };
    let snaplen = e.u32(b, 16)?;
    let linktype = (e.u32(b, 20)? & 0xffff) as u16;
    let mut packets = Vec::new();
    let mut off = 24;
    while off < b.len() {
        if b.len() - off < 16 {
            return Err(bad(format!("record header truncated at {off}")));
        }
        let secs = u64::from(e.u32(b, off)?);
        let frac = u64::from(e.u32(b, off + 4)?);
        let caplen = e.u32(b, off + 8)? as usize;
        let wire_len = e.u32(b, off + 12)?;
        let data = b
            .get(off + 16..off + 16 + caplen)
            .ok_or_else(|| bad(format!("record data truncated at {off}")))?;
        let ts_ns = secs * 1_000_000_000 + if nano { frac } else { frac * 1000 };
        packets.push(CapturedPacket {
            ts_ns,
            wire_len,
            data: data.to_vec(),
        });
        off += 16 + caplen;
    }
    Ok(CaptureFile {
        format: if nano {
            CaptureFormat::PcapNano
        } else {
            CaptureFormat::PcapMicro
        },
        big_endian: e.0,
        linktypes: vec![linktype],
        snaplen,
        packets,
    })
}

struct Iface {
    snaplen: u32,
    /// Timestamp units per second.
    units: u128,
    offset_s: i64,
}

fn parse_pcapng(b: &[u8]) -> io::Result<CaptureFile> {
    let mut e = Endian(false);
    let mut first_be = None;
    let mut all_linktypes = Vec::new();
    let mut first_snaplen = None;
    let mut ifaces: Vec<Iface> = Vec::new();
    let mut packets = Vec::new();
    let mut off = 0;
    while off < b.len() {
        if b.len() - off < 12 {
            return Err(bad(format!("block header truncated at {off}")));
        }
        let raw_type = u32::from_le_bytes(b[off..off + 4].try_into().expect("4"));
        if raw_type == 0x0a0d_0d0a {
            // Section header: byte order from the byte-order magic.
            let bom = &b
                .get(off + 8..off + 12)
                .ok_or_else(|| bad("SHB truncated"))?;
            e = match bom {
                [0x1a, 0x2b, 0x3c, 0x4d] => Endian(true),
                [0x4d, 0x3c, 0x2b, 0x1a] => Endian(false),
                _ => return Err(bad(format!("bad byte-order magic at {off}"))),
            };
            first_be.get_or_insert(e.0);
            ifaces.clear();
        }
        let btype = e.u32(b, off)?;
        let blen = e.u32(b, off + 4)? as usize;
        if blen < 12 || blen & 3 != 0 || off + blen > b.len() {
            return Err(bad(format!("bad block length {blen} at {off}")));
        }
        if e.u32(b, off + blen - 4)? as usize != blen {
            return Err(bad(format!("trailing block length mismatch at {off}")));
        }
        let body = &b[off + 8..off + blen - 4];
        match btype {
            0x0a0d_0d0a => {}
            1 => {
                // Interface description.
                let linktype = e.u16(body, 0)?;
                let snaplen = e.u32(body, 4)?;
                let mut iface = Iface {
                    snaplen,
                    units: 1_000_000,
                    offset_s: 0,
                };
                let mut o = 8;
                while o + 4 <= body.len() {
                    let code = e.u16(body, o)?;
                    let len = usize::from(e.u16(body, o + 2)?);
                    let val = body
                        .get(o + 4..o + 4 + len)
                        .ok_or_else(|| bad(format!("IDB option truncated at {off}")))?;
                    match code {
                        0 => break,
                        9 if len >= 1 => {
                            let r = val[0];
                            let exp = u32::from(r & 0x7f);
                            iface.units = if r & 0x80 != 0 {
                                1u128.checked_shl(exp).unwrap_or(0)
                            } else {
                                10u128.checked_pow(exp).unwrap_or(0)
                            };
                            if iface.units == 0 {
                                return Err(bad(format!("unusable if_tsresol {r:#x}")));
                            }
                        }
                        14 if len >= 8 => {
                            let lo = e.u32(val, 0)?;
                            let hi = e.u32(val, 4)?;
                            iface.offset_s = if e.0 {
                                ((u64::from(lo) << 32) | u64::from(hi)) as i64
                            } else {
                                ((u64::from(hi) << 32) | u64::from(lo)) as i64
                            };
                        }
                        _ => {}
                    }
                    o += 4 + len.div_ceil(4) * 4;
                }
                all_linktypes.push(linktype);
                first_snaplen.get_or_insert(snaplen);
                ifaces.push(iface);
            }
            6 | 2 => {
                // Enhanced packet block, or the obsolete packet block (whose interface
                // id is 16 bits followed by a drops count).
                let ifid = if btype == 6 {
                    e.u32(body, 0)? as usize
                } else {
                    usize::from(e.u16(body, 0)?)
                };
                let iface = ifaces
                    .get(ifid)
                    .ok_or_else(|| bad(format!("packet for unknown interface {ifid} at {off}")))?;
                let ts = (u64::from(e.u32(body, 4)?) << 32) | u64::from(e.u32(body, 8)?);
                let caplen = e.u32(body, 12)? as usize;
                let wire_len = e.u32(body, 16)?;
                let data = body
                    .get(20..20 + caplen)
                    .ok_or_else(|| bad(format!("packet data truncated at {off}")))?;
                let ns = u128::from(ts) * 1_000_000_000 / iface.units;
                let ts_ns = (ns as i128 + i128::from(iface.offset_s) * 1_000_000_000) as u64;
                packets.push(CapturedPacket {
                    ts_ns,
                    wire_len,
                    data: data.to_vec(),
                });
            }
            3 => {
                // Simple packet block: interface 0, no timestamp.
                let iface = ifaces
                    .first()
                    .ok_or_else(|| bad(format!("SPB without interface at {off}")))?;
                let wire_len = e.u32(body, 0)?;
                let mut caplen = wire_len as usize;
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                caplen = caplen.min(body.len() - 4);
                packets.push(CapturedPacket {
                    ts_ns: 0,
                    wire_len,
                    data: body[4..4 + caplen].to_vec(),
                });
            }
            _ => {}
        }
        off += blen;
    }
    Ok(CaptureFile {
        format: CaptureFormat::PcapNg,
        big_endian: first_be.unwrap_or(false),
        linktypes: all_linktypes,
        snaplen: first_snaplen.unwrap_or(0),
        packets,
    })
}
