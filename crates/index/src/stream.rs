//! Indexing a file while it is written: the writer shows the bytes of each
//! file as it writes them ([`ringcap_sink::FileTap`]) and the keys are
//! taken from memory the capture has just touched. Reading the published
//! file back cost more than taking the keys: at 1500 bytes a packet the
//! files are written with O_DIRECT and are not in the page cache, so the
//! read went to the disk (about 3 µs of CPU a packet in all, against
//! ~0.2 µs for the capture itself).
//!
//! The bytes are the writer's own layout: a pcap or pcapng header first
//! (read with the format crate's reader, so the interfaces and their time
//! units are exactly what a reader of the file sees), then whole records
//! or blocks in the machine's byte order. Anything else — bytes out of
//! order, a cut, a section or interface block after the header, a block
//! that does not fit — marks the stream as not usable and the file is
//! read back instead, as any file is ([`crate::build::collect`]). The
//! groups, their reader states and the keys are those the file reader
//! would find: a test checks that both give the same index.

use std::io::Cursor;

use ringcap_format::pcapng::{
    BT_EPB, BT_IDB, BT_PB, BT_SHB, BT_SPB, BYTE_ORDER_MAGIC, EPB_DATA_OFFSET,
};
use ringcap_format::read::{ByteOrder, Interface};
use ringcap_format::{record_at, FileFormat, Reader, RecordFormat};

use crate::build::Collector;
use crate::file::Contents;
use crate::postings::Spare;

/// What follows the header.
enum Layout {
    Pcap { format: RecordFormat, linktype: u32 },
    Pcapng { interfaces: Vec<Interface> },
}

/// The index of one file being written, gathered from its bytes.
pub struct Stream {
    col: Collector,
    /// Where the next bytes must start.
    next: u64,
    layout: Option<Layout>,
    /// Where a reader of the file stands before the next packet, and its
    /// (sections, interfaces) there.
    at: u64,
    epoch: (u32, u32),
    usable: bool,
}

impl Default for Stream {
    fn default() -> Stream {
        Stream::with_spare(Spare::default())
    }
}

impl Stream {
    /// Gathers into the arrays a finished file left (see [`Spare`]).
    pub(crate) fn with_spare(spare: Spare) -> Stream {
        Stream {
            col: Collector::with_spare(spare),
            next: 0,
            layout: None,
            at: 0,
            epoch: (0, 0),
            usable: true,
        }
    }
}

/// Starts loading the first two cache lines of the record at `at` (its
/// block header and the packet's headers) while the keys of the one before
/// are taken. The bytes of a capture's ring block were written by the
/// kernel and are no longer in this core's caches; 1500-byte records are
/// too far apart for the hardware's own prefetch, and waiting on each
/// record cost ~50 ns a packet of live capture at 1500 B (A/B, 5 runs each
/// of 2 M packets: 430 -> 380 ns/packet; no change at 64 B).
#[inline(always)]
fn ahead(bytes: &[u8], at: usize) {
    if let Some(next) = bytes.get(at..) {
        ringcap_source::sys::prefetch(&next[..next.len().min(128)]);
    }
}

fn ne32(b: &[u8], at: usize) -> u32 {
    // One bounds check and one load (indexing byte by byte checks each).
    let mut w = [0; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

impl Stream {
    /// `bytes` were written at `offset`.
    pub fn wrote(&mut self, offset: u64, bytes: &[u8]) {
        if !self.usable {
            return;
        }
        if offset != self.next {
            self.usable = false;
            return;
        }
        self.next += bytes.len() as u64;
        self.usable = match self.layout {
            None => self.header(bytes),
            Some(_) => self.units(offset, bytes),
        };
    }

    /// The file was cut back to `len` bytes: what was taken from the bytes
    /// cut off cannot be taken back, so the file will be read instead
    /// (unless nothing was cut).
    pub fn truncated(&mut self, len: u64) {
        if len != self.next {
            self.usable = false;
        }
    }

    /// The index of the file, if the stream saw all of its `capture_len`
    /// bytes (and could keep what it gathered: else the file is read back);
    /// the big arrays are then left in `spare` for the next file.
    pub(crate) fn finish(
        self,
        capture_len: u64,
        head_crc: u32,
        spare: &mut Spare,
    ) -> Option<Contents> {
        (self.usable && self.layout.is_some() && self.next == capture_len)
            .then(|| self.col.finish(capture_len, head_crc, spare).ok())
            .flatten()
    }

    fn header(&mut self, bytes: &[u8]) -> bool {
        let Ok(mut rd) = Reader::new(Cursor::new(bytes)) else {
            return false;
        };
        self.at = rd.offset();
        self.epoch = (rd.sections() as u32, rd.interfaces().len() as u32);
        // The rest of the header: interface blocks, no packets.
        if !matches!(rd.next_packet(), Ok(None)) || rd.offset() != bytes.len() as u64 {
            return false;
        }
        self.layout = match rd.format() {
            FileFormat::Pcap {
                resolution,
                byte_order,
            } if byte_order == ByteOrder::host() => Some(Layout::Pcap {
                format: RecordFormat::Pcap(resolution),
                linktype: rd.interfaces().first().map_or(u32::MAX, |i| i.linktype),
            }),
            // The reader took a whole section header: its byte-order magic is there.
            FileFormat::Pcapng if ne32(bytes, 8) == BYTE_ORDER_MAGIC => Some(Layout::Pcapng {
                interfaces: rd.interfaces().to_vec(),
            }),
            _ => None,
        };
        self.layout.is_some()
    }

    fn units(&mut self, offset: u64, bytes: &[u8]) -> bool {
        let Some(layout) = &self.layout else {
            return false;
        };
        let mut p = 0;
        while p < bytes.len() {
            match layout {
                Layout::Pcap { format, linktype } => {
                    let Some((len, Some(ts))) = record_at(*format, bytes, p) else {
                        return false;
                    };
                    ahead(bytes, p + len);
                    let data = &bytes[p + 16..p + len];
                    self.col.packet(self.at, self.epoch, *linktype, ts, data);
                    p += len;
                    self.at = offset + p as u64;
                }
                Layout::Pcapng { interfaces } => {
                    let Some((len, _)) = record_at(RecordFormat::Pcapng, bytes, p) else {
                        return false;
                    };
                    ahead(bytes, p + len);
                    match ne32(bytes, p) {
                        BT_EPB => {
                            if len < EPB_DATA_OFFSET + 4 {
                                return false;
                            }
                            let Some(iface) = interfaces.get(ne32(bytes, p + 8) as usize) else {
                                return false;
                            };
                            let ticks =
                                (ne32(bytes, p + 12) as u64) << 32 | ne32(bytes, p + 16) as u64;
                            let caplen = ne32(bytes, p + 20) as usize;
                            if caplen > len - EPB_DATA_OFFSET - 4 {
                                return false;
                            }
                            let data = &bytes[p + EPB_DATA_OFFSET..p + EPB_DATA_OFFSET + caplen];
                            self.col.packet(
                                self.at,
                                self.epoch,
                                iface.linktype,
                                iface.ts_to_ns(ticks),
                                data,
                            );
                            self.epoch.1 = interfaces.len() as u32;
                            p += len;
                            self.at = offset + p as u64;
                        }
                        // Blocks the writer writes only in the header, or
                        // never: the file reader will do.
                        BT_SHB | BT_IDB | BT_PB | BT_SPB => return false,
                        // Padding, statistics: a reader steps over them.
                        _ => p += len,
                    }
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{collect, head_of};
    use proptest::prelude::*;
    use ringcap_format::pcap::{file_header, write_record_header};
    use ringcap_format::pcapng::{self, epb_len, write_epb_header, write_epb_trailer};
    use ringcap_format::TsResolution;
    use ringcap_testkit::TempDir;

    /// A frame: Ethernet, maybe a VLAN tag, IPv4 or IPv6 or ARP or junk,
    /// UDP/TCP ports, cut to `cut` bytes.
    fn frame(kind: u8, a: u32, b: u32, ports: u32, cut: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        if kind & 8 != 0 {
            f.extend_from_slice(&[0x81, 0x00, (a >> 8) as u8 & 0x0f, a as u8]);
        }
        match kind % 4 {
            0 | 1 => {
                f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0, 0, 64]);
                f.push(if kind.is_multiple_of(4) { 17 } else { 6 });
                f.extend_from_slice(&[0, 0]);
                f.extend_from_slice(&(0xc612_0000 | (a & 0x1ffff)).to_be_bytes());
                f.extend_from_slice(&(0xc612_0000 | (b & 0x1ffff)).to_be_bytes());
                f.extend_from_slice(&ports.to_be_bytes());
            }
            2 => {
                f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
                for x in [a, b] {
                    f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
                    f.extend_from_slice(&[0; 8]);
                    f.extend_from_slice(&x.to_be_bytes());
                }
                f.extend_from_slice(&ports.to_be_bytes());
            }
            _ => f.extend_from_slice(&a.to_be_bytes()),
        }
        f.extend_from_slice(&[0; 8]);
        f.truncate(cut.max(1));
        f
    }

    fn record(pcapng: bool, res: TsResolution, ts: u64, data: &[u8]) -> Vec<u8> {
        if pcapng {
            let mut r = vec![0u8; epb_len(data.len())];
            write_epb_header(&mut r, 0, ts, data.len() as u32, data.len() as u32 + 4);
            r[28..28 + data.len()].copy_from_slice(data);
            write_epb_trailer(&mut r, data.len() as u32);
            r
        } else {
            let mut r = vec![0u8; 16];
            write_record_header(&mut r, ts, data.len() as u32, data.len() as u32, res);
            r.extend_from_slice(data);
            r
        }
    }

    fn header(pcapng: bool, res: TsResolution) -> Vec<u8> {
        if pcapng {
            let mut h = pcapng::section_header("Linux", "ringcap test", None);
            h.extend(pcapng::interface_description(
                &pcapng::InterfaceDescription {
                    linktype: 1,
                    snaplen: 65535,
                    name: "veth0",
                    filter: None,
                    description: None,
                },
            ));
            h
        } else {
            file_header(1, 65535, res).to_vec()
        }
    }

    /// Feeds `chunks` to a stream and writes them to a file; returns the
    /// stream's index and the file reader's.
    fn both(chunks: &[Vec<u8>], cut_after: Option<u64>) -> (Option<Contents>, Contents) {
        let d = TempDir::new("stream");
        let path = d.join("f.pcap");
        let mut s = Stream::default();
        let mut all = Vec::new();
        for c in chunks {
            s.wrote(all.len() as u64, c);
            all.extend_from_slice(c);
        }
        if let Some(len) = cut_after {
            all.truncate(len as usize);
            s.truncated(len);
        }
        std::fs::write(&path, &all).unwrap();
        let (crc, len) = head_of(&path).unwrap();
        (
            s.finish(len, crc, &mut Spare::default()),
            collect(&path).unwrap(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// For any packets written in any batches (pcapng with padding and
        /// statistics blocks between them), the index taken from the bytes
        /// is the index the file reader takes from the file.
        #[test]
        fn same_index_as_reading_the_file(
            pcapng in any::<bool>(),
            nano in any::<bool>(),
            pkts in proptest::collection::vec(
                (any::<u8>(), any::<u32>(), any::<u32>(), any::<u32>(), 0usize..120, 0u64..3_000_000),
                0..300,
            ),
            cuts in proptest::collection::vec(1usize..80, 1..20),
            pads in proptest::collection::vec(any::<bool>(), 1..20),
        ) {
            let res = if nano { TsResolution::Nano } else { TsResolution::Micro };
            let mut chunks = vec![header(pcapng, res)];
            let mut ts = 1_700_000_000_000_000_000u64;
            let mut batch = Vec::new();
            let mut len = chunks[0].len() as u64;
            let mut n = 0;
            for (i, (kind, a, b, ports, cut, dt)) in pkts.iter().enumerate() {
                ts += dt * 1000;
                batch.extend(record(pcapng, res, ts, &frame(*kind, *a, *b, *ports, *cut)));
                n += 1;
                if n >= cuts[i % cuts.len()] || i + 1 == pkts.len() {
                    n = 0;
                    if pcapng && pads[i % pads.len()] {
                        let pad = pcapng::pad_to(len, 4096);
                        len += pad.len() as u64;
                        chunks.push(pad);
                    }
                    len += batch.len() as u64;
                    chunks.push(std::mem::take(&mut batch));
                }
            }
            if pcapng {
                chunks.push(pcapng::interface_statistics(&pcapng::InterfaceStatistics {
                    ts_ns: ts,
                    ..Default::default()
                }));
            }
            let (got, want) = both(&chunks, None);
            // The same index file, byte for byte.
            prop_assert_eq!(got.map(|c| crate::file::encode(&c)), Some(crate::file::encode(&want)));
        }
    }

    #[test]
    fn bytes_out_of_order_or_cut_leave_the_file_to_the_reader() {
        let res = TsResolution::Nano;
        let f = frame(0, 1, 2, 3, 60);
        let recs = [record(false, res, 5, &f), record(false, res, 6, &f)];
        let good = vec![header(false, res), recs[0].clone(), recs[1].clone()];
        assert!(both(&good, None).0.is_some());
        // Cut back after a failed write: the stream cannot take keys back.
        let (got, _) = both(&good, Some(24 + recs[0].len() as u64));
        assert!(got.is_none());
        // A gap.
        let mut s = Stream::default();
        s.wrote(0, &good[0]);
        s.wrote(100, &good[1]);
        assert!(s.finish(0, 0, &mut Spare::default()).is_none());
        // A record split over two writes.
        let split = vec![
            header(false, res),
            recs[0][..10].to_vec(),
            recs[0][10..].to_vec(),
        ];
        assert!(both(&split, None).0.is_none());
    }
}
