//! Where a query's packets go: a pcap (nanosecond) or pcapng stream.
//!
//! pcap holds one link type: the header is written with the first packet
//! (or at the end with the first file's link type when nothing matched, as
//! `tcpdump -w` writes a header for an empty result), and a packet of
//! another link type is an error that names `--format pcapng`. pcapng gets
//! one interface block per interface met (its link type and `if_name`, the
//! name it had in the files queried; packets of unnamed interfaces share
//! one block per link type), written just before its first packet.

use std::io::{self, Write};

use ringcap_format::pcapng::{self, InterfaceDescription};
use ringcap_format::{pcap, TsResolution};

/// Snapshot length written in headers: the largest ordinary one.
const SNAPLEN: u32 = 262_144;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutFormat {
    /// pcap with nanosecond timestamps.
    Pcap,
    /// pcapng (nanosecond `if_tsresol`).
    Pcapng,
}

/// A query's output stream.
pub struct Output {
    w: Box<dyn Write>,
    format: OutFormat,
    started: bool,
    /// pcap: the file's link type; pcapng: the link type and name of each
    /// IDB.
    interfaces: Vec<(u32, Option<String>)>,
    buf: Vec<u8>,
    /// Packets written.
    pub packets: u64,
    /// Bytes written (headers and records).
    pub bytes: u64,
    /// Most packets and bytes to write (see [`Output::limit`]).
    max_packets: u64,
    max_bytes: u64,
    /// Set when a packet was refused by the limits.
    pub limited: bool,
    /// Snapshot length written in headers.
    snaplen: u32,
}

/// The error [`Output::packet`] returns once a limit is reached.
pub const LIMIT_REACHED: &str = "output limit reached";

impl Output {
    /// Output to `w` in `format`.
    pub fn new(w: Box<dyn Write>, format: OutFormat) -> Output {
        Output {
            w,
            format,
            started: false,
            interfaces: Vec::new(),
            buf: Vec::with_capacity(1 << 16),
            packets: 0,
            bytes: 0,
            max_packets: u64::MAX,
            max_bytes: u64::MAX,
            limited: false,
            snaplen: SNAPLEN,
        }
    }

    /// Writes `snaplen` as the snapshot length in headers (when no record
    /// is longer: ringcapd's answers under a grant's snap cap).
    pub fn with_snaplen(mut self, snaplen: u32) -> Output {
        self.snaplen = snaplen;
        self
    }

    /// Stops the output before the packet that would make it hold more
    /// than `packets` packets or `bytes` bytes: that packet's
    /// [`Output::packet`] fails (with [`LIMIT_REACHED`]) and sets
    /// `limited`; what was written is whole records.
    pub fn limit(&mut self, packets: Option<u64>, bytes: Option<u64>) {
        self.max_packets = packets.unwrap_or(u64::MAX);
        self.max_bytes = bytes.unwrap_or(u64::MAX);
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.bytes += b.len() as u64;
        self.w.write_all(b)
    }

    fn start(&mut self, linktype: u32) -> io::Result<()> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        match self.format {
            OutFormat::Pcap => {
                self.interfaces.push((linktype, None));
                self.put(&pcap::file_header(
                    linktype,
                    self.snaplen,
                    TsResolution::Nano,
                ))
            }
            OutFormat::Pcapng => self.put(&pcapng::section_header(
                std::env::consts::OS,
                concat!("ringcap query ", env!("CARGO_PKG_VERSION")),
                None,
            )),
        }
    }

    /// Writes one packet (of an interface without a name).
    pub fn packet(
        &mut self,
        linktype: u32,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
    ) -> io::Result<()> {
        self.packet_of(None, linktype, ts_ns, wire_len, data)
    }

    /// Writes one packet of the interface named `name` (pcapng: in that
    /// interface's block).
    pub fn packet_of(
        &mut self,
        name: Option<&str>,
        linktype: u32,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
    ) -> io::Result<()> {
        self.start(linktype)?;
        let caplen = data.len() as u32;
        let rec = match self.format {
            OutFormat::Pcap => pcap::RECORD_HEADER_LEN + data.len(),
            OutFormat::Pcapng => pcapng::epb_len(data.len()),
        } as u64;
        if self.packets >= self.max_packets || self.bytes + rec > self.max_bytes {
            self.limited = true;
            return Err(io::Error::other(LIMIT_REACHED));
        }
        match self.format {
            OutFormat::Pcap => {
                if self.interfaces[0].0 != linktype {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "packets of link types {} and {linktype}: a pcap file holds one; \
                             use --format pcapng",
                            self.interfaces[0].0
                        ),
                    ));
                }
                let mut h = [0u8; pcap::RECORD_HEADER_LEN];
                pcap::write_record_header(&mut h, ts_ns, caplen, wire_len, TsResolution::Nano);
                self.put(&h)?;
                self.put(data)?;
            }
            OutFormat::Pcapng => {
                let id = match self
                    .interfaces
                    .iter()
                    .position(|(l, n)| *l == linktype && n.as_deref() == name)
                {
                    Some(i) => i,
                    None => {
                        let lt = u16::try_from(linktype).map_err(|_| {
                            io::Error::new(io::ErrorKind::InvalidData, "link type above 65535")
                        })?;
                        let idb = pcapng::interface_description(&InterfaceDescription {
                            linktype: lt,
                            snaplen: self.snaplen,
                            name: name.unwrap_or(""),
                            filter: None,
                            description: None,
                        });
                        self.put(&idb)?;
                        self.interfaces.push((linktype, name.map(str::to_string)));
                        self.interfaces.len() - 1
                    }
                };
                let len = pcapng::epb_len(data.len());
                self.buf.clear();
                self.buf.resize(len, 0);
                pcapng::write_epb_header(&mut self.buf, id as u32, ts_ns, caplen, wire_len);
                self.buf[pcapng::EPB_DATA_OFFSET..pcapng::EPB_DATA_OFFSET + data.len()]
                    .copy_from_slice(data);
                pcapng::write_epb_trailer(&mut self.buf, caplen);
                self.bytes += self.buf.len() as u64;
                self.w.write_all(&self.buf)?;
            }
        }
        self.packets += 1;
        Ok(())
    }

    /// Ends the stream: a header if nothing was written (pcap: with
    /// `linktype`), then a flush.
    pub fn finish(&mut self, linktype: u32) -> io::Result<()> {
        self.start(linktype)?;
        self.w.flush()
    }
}
