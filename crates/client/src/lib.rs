//! The Rust client of `ringcapd` (the successor of pktd's libwire): connect
//! to the daemon's Unix socket, open a capture session that the daemon holds
//! to its policy, read the packets it delivers through the session's
//! shared-memory ring, ask for counters, replace the filter, close. The
//! command line (`ringcap capture --daemon`) and the C and Python bindings
//! sit on this crate.
//!
//! ```no_run
//! use ringcap_client::{Client, OpenRequest};
//! let mut session = Client::connect_default()?.open(OpenRequest::new("eth0", "udp"))?;
//! loop {
//!     session.wait(std::time::Duration::from_millis(100))?;
//!     session.packets(|p| println!("{} bytes at {}", p.wire_len, p.ts_ns))?;
//!     if session.ended().is_some() { break; }
//! }
//! # Ok::<(), ringcap_client::ClientError>(())
//! ```

mod held;
mod pump;
pub use held::Held;
pub use pump::{Batch, End, EndedBy, Pump, Stop, Tally, BUSY_NAP};
pub use ringcap_proto::validate::MAX_INJECT_BATCH;
use ringcap_proto::{
    decode_response, encode_request, transport, Effective, FilterProgram, Request, Response,
    SampleRequest, SessionInfo, SnapRequest, MAX_DATAGRAM,
};
use ringcap_stages::filter::Target;

/// Link type the daemon's interfaces are compiled for (Ethernet).
const ETHERNET: i32 = 1;
/// Accepting returns of a client program: the daemon sets the real snap.
const PROGRAM_SNAPLEN: u32 = 262_144;
use ringcap_format::record::{Endian, Header, HEADER_LEN};
pub use ringcap_proto::{InjectFrame, InjectReport, InjectStatus};
use ringcap_shm::RingReader;
use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use ringcap_proto::{
    DumpFile, DumpRequest, FlowEntry, FlowRequest, FlowSettings, OutputFormat,
    SampleRequest as Sample, SessionCounters, SnapRequest as Snap,
};

/// Flow records a session keeps for [`Session::flows`] while packets are
/// read; beyond this (a client that never asks for them) they are counted
/// and let go ([`Session::flows_lost`]).
pub const MAX_HELD_FLOWS: usize = 1 << 20;

/// Where the daemon listens unless `RINGCAP_DAEMON` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/ringcapd/ringcapd.sock";

/// The daemon's socket: `$RINGCAP_DAEMON`, else [`DEFAULT_SOCKET`].
pub fn default_socket() -> PathBuf {
    std::env::var_os("RINGCAP_DAEMON")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// Bytes of a record header in the ring (pcap, nanosecond, little endian).
const RECORD_HEADER: usize = HEADER_LEN;

/// Why a call failed.
#[derive(Debug)]
pub enum ClientError {
    /// The socket or the ring failed.
    Io(io::Error),
    /// The daemon's policy refused the request.
    Refused {
        /// The grant whose rule refused it (`None`: no grant matched).
        grant: Option<u32>,
        /// Which rule.
        rule: String,
        /// Why, in words.
        reason: String,
    },
    /// The daemon answered with an error.
    Daemon(String),
    /// The daemon's answer did not make sense.
    Protocol(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "{e}"),
            ClientError::Refused {
                grant,
                rule,
                reason,
            } => match grant {
                // Texts count grants from 1, in file order, like `ringcapd --check`.
                Some(g) => write!(
                    f,
                    "refused by grant {}, rule {rule}: {reason}",
                    u64::from(*g) + 1
                ),
                None => write!(f, "refused ({rule}): {reason}"),
            },
            ClientError::Daemon(m) => write!(f, "ringcapd: {m}"),
            ClientError::Protocol(m) => write!(f, "unexpected answer from ringcapd: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::Io(e)
    }
}

/// Compiles `filter` here, in the client's process (libpcap, Ethernet, for
/// frames as in a file): the daemon takes programs, never filter text, so no
/// client's text reaches a C parser in the privileged process. `None` for an
/// empty filter. A filter that does not compile is refused with libpcap's
/// message under the rule `filter`, as the daemon would.
pub fn compile_filter(filter: &str) -> Result<Option<FilterProgram>, ClientError> {
    if filter.trim().is_empty() {
        return Ok(None);
    }
    let refuse = |reason: String| ClientError::Refused {
        grant: None,
        rule: "filter".into(),
        reason,
    };
    let p = ringcap_stages::compile(filter, ETHERNET, PROGRAM_SNAPLEN, Target::Offline)
        .map_err(|e| refuse(format!("libpcap: {}", e.message)))?;
    if p.instructions.len() > ringcap_proto::validate::MAX_CLIENT_INSTRUCTIONS {
        return Err(refuse(format!(
            "the filter compiles to {} instructions; at most {} are taken",
            p.instructions.len(),
            ringcap_proto::validate::MAX_CLIENT_INSTRUCTIONS
        )));
    }
    let insns: Vec<_> = p
        .instructions
        .iter()
        .map(|i| (i.code, i.jt, i.jf, i.k))
        .collect();
    Ok(Some(FilterProgram::encode(
        &insns,
        ringcap_stages::filter::mentions_vlan(filter),
    )))
}

/// A capture request.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenRequest {
    /// Interfaces to capture on.
    pub interfaces: Vec<String>,
    /// Filter (tcpdump syntax; the daemon ANDs it with the grant's).
    pub filter: String,
    /// Snap length (the daemon caps it).
    pub snaplen: SnapRequest,
    /// Sampling (the daemon may force stricter).
    pub sample: Option<SampleRequest>,
    /// Stop after this long (the daemon may cap it).
    pub duration: Option<Duration>,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Have the daemon write the packets to files of its own naming under
    /// this user's dump directory, rotated as asked, instead of delivering
    /// them (`None`: deliver them here).
    pub dump: Option<DumpRequest>,
    /// Format of dump files.
    pub format: OutputFormat,
    /// Only inject: capture nothing into the ring.
    pub inject_only: bool,
    /// Have the daemon compress the stream (a few bytes a packet in the
    /// shared ring instead of whole records); the session decodes it, so
    /// packets come out the same either way.
    pub compress: bool,
    /// Flow records of what the session keeps (the grant must allow them;
    /// with `packets: false`, flow records only). Read them with
    /// [`Session::flows`].
    pub flows: Option<FlowRequest>,
}

impl OpenRequest {
    /// Whole packets on `interface` matching `filter`.
    pub fn new(interface: &str, filter: &str) -> OpenRequest {
        OpenRequest {
            interfaces: vec![interface.to_string()],
            filter: filter.to_string(),
            snaplen: SnapRequest::Bytes(262_144),
            sample: None,
            duration: None,
            count: None,
            dump: None,
            format: OutputFormat::Pcap,
            inject_only: false,
            compress: false,
            flows: None,
        }
    }

    /// A session that only injects on `interface` (captures nothing).
    pub fn inject_only(interface: &str) -> OpenRequest {
        OpenRequest {
            inject_only: true,
            ..OpenRequest::new(interface, "")
        }
    }
}

/// A connection to the daemon.
pub struct Client {
    conn: OwnedFd,
    buf: Box<[u8; MAX_DATAGRAM]>,
    /// An `Ended` that arrived while waiting for another answer.
    ended: Option<(String, SessionCounters)>,
    /// Dump files the daemon said it completed, not yet taken.
    published: Vec<String>,
}

impl Client {
    /// Connects to the daemon at `path`.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let conn = transport::connect(path).map_err(|e| {
            ClientError::Io(io::Error::new(
                e.kind(),
                format!("cannot reach ringcapd at {}: {e}", path.display()),
            ))
        })?;
        Ok(Client {
            conn,
            buf: Box::new([0u8; MAX_DATAGRAM]),
            ended: None,
            published: Vec::new(),
        })
    }

    /// Connects to the daemon at [`default_socket`].
    pub fn connect_default() -> Result<Client, ClientError> {
        Client::connect(&default_socket())
    }

    fn send(&mut self, req: &Request) -> Result<(), ClientError> {
        transport::send(&self.conn, &encode_request(req), &[])?;
        Ok(())
    }

    /// The next message from the daemon, whatever it is.
    fn message(&mut self) -> Result<(Response, Vec<OwnedFd>), ClientError> {
        let Some((len, fds)) = transport::recv(&self.conn, &mut self.buf)? else {
            return Err(ClientError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "ringcapd closed the connection",
            )));
        };
        let r =
            decode_response(&self.buf[..len]).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok((r, fds))
    }

    /// The next answer that is not an `Ended` notice (those are kept).
    fn answer(&mut self) -> Result<(Response, Vec<OwnedFd>), ClientError> {
        loop {
            let (r, fds) = self.message()?;
            match r {
                Response::Ended { reason, counters } => self.ended = Some((reason, counters)),
                Response::DumpPublished { name } => self.published.push(name),
                Response::Error { message } => return Err(ClientError::Daemon(message)),
                Response::Refused {
                    grant,
                    rule,
                    reason,
                } => {
                    return Err(ClientError::Refused {
                        grant,
                        rule,
                        reason,
                    })
                }
                other => return Ok((other, fds)),
            }
        }
    }

    /// Opens a capture session.
    pub fn open(mut self, req: OpenRequest) -> Result<Session, ClientError> {
        let program = compile_filter(&req.filter)?;
        self.send(&Request::Open {
            interfaces: req.interfaces,
            filter: req.filter,
            program,
            snaplen: req.snaplen,
            sample: req.sample,
            format: req.format,
            dump: req.dump,
            duration_s: req.duration.map(|d| d.as_secs_f64()),
            count: req.count,
            compress: req.compress,
            inject_only: req.inject_only,
            flows: req.flows,
        })?;
        let (r, fds) = self.answer()?;
        let Response::Accepted {
            session, effective, ..
        } = r
        else {
            return Err(ClientError::Protocol(format!("{r:?} instead of Accepted")));
        };
        let [data, consumer, event] = transport::expect_fds::<3>(fds)?;
        let ring = RingReader::map(data, consumer, event)?;
        let unpack = match (effective.compress, effective.compress_format) {
            (false, _) => None,
            // Daemons from before version 3 did not say: theirs was 2.
            (true, v) => Some(Unpack::new(v.unwrap_or(2))?),
        };
        Ok(Session {
            client: self,
            ring,
            id: session,
            effective,
            unpack,
            held_flows: Vec::new(),
            flows_lost: 0,
        })
    }

    /// This user's dump files, oldest first.
    pub fn list_dumps(&mut self) -> Result<Vec<DumpFile>, ClientError> {
        self.send(&Request::ListDumps)?;
        match self.answer()? {
            (Response::Dumps { files }, _) => Ok(files),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Dumps"))),
        }
    }

    /// One of this user's dump files, as a read-only file, and its size.
    pub fn fetch_dump(&mut self, name: &str) -> Result<(std::fs::File, u64), ClientError> {
        self.send(&Request::FetchDump {
            name: name.to_string(),
        })?;
        match self.answer()? {
            (Response::Dump { bytes, .. }, fds) => {
                let [fd] = transport::expect_fds::<1>(fds)?;
                Ok((std::fs::File::from(fd), bytes))
            }
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Dump"))),
        }
    }

    /// Deletes one of this user's dump files.
    pub fn delete_dump(&mut self, name: &str) -> Result<(), ClientError> {
        self.send(&Request::DeleteDump {
            name: name.to_string(),
        })?;
        match self.answer()? {
            (Response::Ok, _) => Ok(()),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// The daemon's sessions (a user sees their own; root sees all).
    pub fn sessions(&mut self) -> Result<Vec<SessionInfo>, ClientError> {
        self.send(&Request::Sessions)?;
        match self.answer()? {
            (Response::Sessions { sessions, .. }, _) => Ok(sessions),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Sessions"))),
        }
    }
}

/// A retrieval of stored packets ([`Client::retrieve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrieveRequest {
    /// The interface whose stored packets are asked for.
    pub interface: String,
    /// The filter (tcpdump syntax), compiled here like a session's.
    pub filter: String,
    /// How much of each packet to keep (the grant may cap it).
    pub snaplen: Snap,
    /// Packets at or after this time, ns since the epoch.
    pub after_ns: Option<u64>,
    /// Packets before this time, ns since the epoch (absent: now).
    pub before_ns: Option<u64>,
    /// Most bytes of answer wanted (the grant may cap it).
    pub max_bytes: Option<u64>,
}

/// An admitted retrieval: read [`Retrieval::stream`] (a pcap stream) to
/// its end, then [`Retrieval::finish`] says whether it is whole.
pub struct Retrieval {
    client: Client,
    /// The answer: a pcap stream (nanosecond timestamps) on a pipe.
    pub stream: std::fs::File,
    /// What the policy made of the request.
    pub effective: Effective,
    /// The window in force (ns): packets at or after `after_ns`...
    pub after_ns: u64,
    /// ... and before `before_ns`.
    pub before_ns: u64,
    /// Most bytes the answer may hold.
    pub max_bytes: u64,
}

/// How a retrieval ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retrieved {
    /// Packets in the answer.
    pub packets: u64,
    /// Bytes of the answer.
    pub bytes: u64,
    /// Files the daemon looked at.
    pub files: u64,
    /// Why the answer was cut short, if it was.
    pub cut: Option<String>,
}

impl Client {
    /// Asks for stored packets: refused, or a [`Retrieval`] whose stream
    /// carries the answer. The filter is compiled here (the daemon never
    /// compiles client text) and sent with its text.
    pub fn retrieve(mut self, req: RetrieveRequest) -> Result<Retrieval, ClientError> {
        let program = compile_filter(&req.filter)?;
        self.send(&Request::Retrieve {
            interface: req.interface,
            filter: req.filter,
            program,
            snaplen: req.snaplen,
            after_ns: req.after_ns,
            before_ns: req.before_ns,
            max_bytes: req.max_bytes,
        })?;
        match self.answer()? {
            (
                Response::Retrieving {
                    effective,
                    after_ns,
                    before_ns,
                    max_bytes,
                },
                fds,
            ) => {
                let [fd] = transport::expect_fds::<1>(fds)?;
                Ok(Retrieval {
                    client: self,
                    stream: std::fs::File::from(fd),
                    effective,
                    after_ns,
                    before_ns,
                    max_bytes,
                })
            }
            (r, _) => Err(ClientError::Protocol(format!(
                "{r:?} instead of Retrieving"
            ))),
        }
    }
}

impl Retrieval {
    /// After the stream's end: how the retrieval ended.
    pub fn finish(mut self) -> Result<Retrieved, ClientError> {
        drop(self.stream);
        match self.client.answer()? {
            (
                Response::Retrieved {
                    packets,
                    bytes,
                    files,
                    cut,
                },
                _,
            ) => Ok(Retrieved {
                packets,
                bytes,
                files,
                cut,
            }),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Retrieved"))),
        }
    }
}

/// One packet delivered by the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Capture time, ns since the epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub wire_len: u32,
    /// The bytes the policy lets this client have.
    pub data: &'a [u8],
}

/// The packet records of one chunk, checked: pcap records with 16-byte
/// little-endian headers (seconds, nanoseconds, captured length, length on
/// the wire), then the captured bytes, back to back, none running past the
/// end.
#[derive(Debug, Clone, Copy)]
pub struct Records<'a> {
    /// The records' bytes.
    pub bytes: &'a [u8],
    /// How many records.
    pub count: u64,
    /// The sum of their lengths on the wire.
    pub wire_bytes: u64,
}

/// The record header's words at `p[..16]` (the caller checked the length):
/// seconds, nanoseconds, captured length, length on the wire.
#[inline]
fn record_header(p: &[u8]) -> (u32, u32, u32, u32) {
    let h = Header::read(p, Endian::Little).unwrap_or(Header {
        secs: 0,
        frac: 0,
        caplen: 0,
        wire_len: 0,
    });
    (h.secs, h.frac, h.caplen, h.wire_len)
}

impl<'a> Records<'a> {
    /// Checks that `bytes` is whole records.
    fn check(bytes: &'a [u8]) -> Result<Records<'a>, ClientError> {
        let (mut count, mut wire_bytes) = (0u64, 0u64);
        let mut p = bytes;
        while !p.is_empty() {
            if p.len() < RECORD_HEADER {
                return Err(ClientError::Protocol(format!(
                    "{} stray bytes after the last record of a chunk",
                    p.len()
                )));
            }
            let (_, _, caplen, wire_len) = record_header(p);
            let end = RECORD_HEADER + caplen as usize;
            if end > p.len() {
                return Err(ClientError::Protocol(format!(
                    "a record of {caplen} bytes runs past its chunk"
                )));
            }
            count += 1;
            wire_bytes += u64::from(wire_len);
            p = &p[end..];
        }
        Ok(Records {
            bytes,
            count,
            wire_bytes,
        })
    }

    /// The first `n` records, and how many come after them.
    pub fn split(self, n: u64) -> (Records<'a>, u64) {
        if n >= self.count {
            return (self, 0);
        }
        let (mut end, mut wire_bytes) = (0usize, 0u64);
        for _ in 0..n {
            // Checked in `check`: every record lies inside the chunk.
            let (_, _, caplen, wire_len) = record_header(&self.bytes[end..]);
            end += RECORD_HEADER + caplen as usize;
            wire_bytes += u64::from(wire_len);
        }
        let head = Records {
            bytes: &self.bytes[..end],
            count: n,
            wire_bytes,
        };
        (head, self.count - n)
    }

    /// The packets, in order.
    pub fn packets(&self) -> impl Iterator<Item = Packet<'a>> + 'a {
        let mut p = self.bytes;
        std::iter::from_fn(move || {
            if p.len() < RECORD_HEADER {
                return None;
            }
            let (sec, nsec, caplen, wire_len) = record_header(p);
            let end = (RECORD_HEADER + caplen as usize).min(p.len());
            let packet = Packet {
                ts_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
                wire_len,
                data: &p[RECORD_HEADER..end],
            };
            p = &p[end..];
            Some(packet)
        })
    }
}

/// A running capture session.
pub struct Session {
    client: Client,
    ring: RingReader,
    /// The daemon's number for it.
    pub id: u64,
    /// What the policy allowed.
    pub effective: Effective,
    /// For a compressed stream: the decoder of its chunks.
    unpack: Option<Unpack>,
    /// Flow records met while reading packets, for [`Session::flows`].
    held_flows: Vec<FlowEntry>,
    /// Flow records let go because `held_flows` was full.
    flows_lost: u64,
}

/// A flow chunk's records (a chunk of 0 packets, see
/// `ringcap_proto::flows`) into `held`, at most [`MAX_HELD_FLOWS`]; the rest
/// counted in `lost`.
fn hold_flows(
    payload: &[u8],
    held: &mut Vec<FlowEntry>,
    lost: &mut u64,
) -> Result<(), ClientError> {
    ringcap_proto::decode_flow_chunk(payload, |e| {
        if held.len() < MAX_HELD_FLOWS {
            held.push(e);
        } else {
            *lost += 1;
        }
    })
    .map(|_| ())
    .map_err(ClientError::Protocol)
}

/// Turns the compressed blocks of a compressed stream back into records.
struct Unpack {
    /// Format version of the blocks.
    version: u16,
    reader: ringcap_compress::BlockReader,
    records: Vec<u8>,
}

impl Unpack {
    fn new(version: u16) -> Result<Unpack, ClientError> {
        if !(ringcap_compress::OLDEST_VERSION..=ringcap_compress::VERSION).contains(&version) {
            return Err(ClientError::Protocol(format!(
                "the daemon sends compressed format version {version}; this client reads \
                 versions {} to {}",
                ringcap_compress::OLDEST_VERSION,
                ringcap_compress::VERSION
            )));
        }
        Ok(Unpack {
            version,
            reader: ringcap_compress::BlockReader::new(&ringcap_compress::FileHeader {
                version,
                resolution: ringcap_compress::Resolution::Nano,
                linktype: 1,
                snaplen: 262_144,
            }),
            records: Vec::new(),
        })
    }

    /// The records of `block` (one chunk's payload), as the daemon would
    /// have written them uncompressed.
    fn records(&mut self, block: &[u8]) -> Result<&[u8], ClientError> {
        let bad = |e: ringcap_compress::DecodeError| {
            ClientError::Protocol(format!("a compressed chunk does not decode: {e}"))
        };
        self.records.clear();
        self.reader.load(block, 0).map_err(bad)?;
        while let Some(r) = self.reader.next_record().map_err(bad)? {
            let mut h = [0u8; RECORD_HEADER];
            Header {
                secs: u32::try_from(r.ts / 1_000_000_000).unwrap_or(u32::MAX),
                frac: (r.ts % 1_000_000_000) as u32,
                caplen: r.data.len() as u32,
                wire_len: r.wire_len,
            }
            .write(&mut h, Endian::Little);
            self.records.extend_from_slice(&h);
            self.records.extend_from_slice(r.data);
        }
        Ok(&self.records)
    }
}

/// Hands every chunk in `ring` now to `f`, which says how many packets it
/// held, then gives the space back to the daemon; returns the packets.
fn drain(
    ring: &mut RingReader,
    mut f: impl FnMut(ringcap_shm::Chunk<'_>) -> Result<u64, ClientError>,
) -> Result<u64, ClientError> {
    let mut n = 0u64;
    while let Some(chunk) = ring
        .next_chunk()
        .map_err(|e| ClientError::Protocol(e.to_string()))?
    {
        n += f(chunk)?;
    }
    ring.release();
    Ok(n)
}

impl Session {
    /// Waits up to `timeout` for packets (or the end); true if woken.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, ClientError> {
        Ok(self.ring.wait(timeout)?)
    }

    /// Hands every packet in the ring now to `f`, then gives the space back
    /// to the daemon; returns how many there were.
    pub fn packets(&mut self, mut f: impl FnMut(Packet<'_>)) -> Result<u64, ClientError> {
        self.chunks(|chunk| {
            for p in chunk.packets() {
                f(p);
            }
        })
    }

    /// Hands every chunk of packets in the ring now to `f` (whole, for a
    /// consumer that copies records in bulk), then gives the space back to
    /// the daemon; returns how many packets there were. Every record of a
    /// chunk is checked to lie inside it before `f` sees it.
    pub fn chunks(&mut self, mut f: impl FnMut(Records<'_>)) -> Result<u64, ClientError> {
        let unpack = &mut self.unpack;
        let (held, lost) = (&mut self.held_flows, &mut self.flows_lost);
        drain(&mut self.ring, |chunk| {
            if chunk.packets == 0 {
                hold_flows(chunk.payload, held, lost)?;
                return Ok(0);
            }
            let bytes = match unpack {
                Some(u) => u.records(chunk.payload)?,
                None => chunk.payload,
            };
            let records = Records::check(bytes)?;
            let n = records.count;
            f(records);
            Ok(n)
        })
    }

    /// The ringcap-compress format version of a compressed stream's blocks
    /// (`None`: the stream is not compressed).
    pub fn compress_format(&self) -> Option<u16> {
        self.unpack.as_ref().map(|u| u.version)
    }

    /// For a compressed stream (`effective.compress`): hands every block in
    /// the ring now to `f` as the daemon coded it — one whole
    /// ringcap-compress block of format [`compress_format`](Self::compress_format)
    /// (nanosecond timestamps, link type Ethernet)
    /// and what its header says, its checksum checked — then gives the
    /// space back; returns how many packets there were. For a consumer that
    /// keeps the blocks as they are (a compressed file) instead of decoding
    /// them; an error for a stream that is not compressed.
    pub fn blocks(
        &mut self,
        mut f: impl FnMut(&[u8], ringcap_compress::BlockInfo),
    ) -> Result<u64, ClientError> {
        if self.unpack.is_none() {
            return Err(ClientError::Protocol(
                "blocks of a stream that is not compressed".into(),
            ));
        }
        let (held, lost) = (&mut self.held_flows, &mut self.flows_lost);
        drain(&mut self.ring, |chunk| {
            if chunk.packets == 0 {
                hold_flows(chunk.payload, held, lost)?;
                return Ok(0);
            }
            let info = ringcap_compress::check_block(chunk.payload, 0).map_err(|e| {
                ClientError::Protocol(format!("a compressed chunk is not a whole block: {e}"))
            })?;
            if info.records != chunk.packets {
                return Err(ClientError::Protocol(format!(
                    "a compressed chunk of {} packets holds a block of {} records",
                    chunk.packets, info.records
                )));
            }
            f(chunk.payload, info);
            Ok(u64::from(info.records))
        })
    }

    /// Hands every flow record the daemon has delivered so far to `f`, in
    /// order: those met while packets were read ([`Session::packets`],
    /// [`Session::chunks`], [`Session::blocks`] keep them), then, for a
    /// session of flow records only, every flow chunk in the ring now (the
    /// space given back). In a session with packets, read packets first:
    /// flow records arrive in the same ring. Returns how many there were.
    pub fn flows(&mut self, mut f: impl FnMut(&FlowEntry)) -> Result<u64, ClientError> {
        let mut n = self.held_flows.len() as u64;
        for e in self.held_flows.drain(..) {
            f(&e);
        }
        if self.effective.flows.is_some_and(|s| !s.packets) {
            drain(&mut self.ring, |chunk| {
                if chunk.packets != 0 {
                    return Err(ClientError::Protocol(
                        "packets in a session of flow records only".into(),
                    ));
                }
                n += ringcap_proto::decode_flow_chunk(chunk.payload, |e| f(&e))
                    .map_err(ClientError::Protocol)?;
                Ok(0)
            })?;
        }
        Ok(n)
    }

    /// Flow records let go on this side because the session held
    /// [`MAX_HELD_FLOWS`] unread (packets were read, flows were not).
    pub fn flows_lost(&self) -> u64 {
        self.flows_lost
    }

    /// Packets the daemon dropped because this ring was full, and the ring's
    /// other counters.
    pub fn ring_counters(&self) -> ringcap_shm::RingCounters {
        self.ring.counters()
    }

    /// Bytes the session's ring holds: how much may wait unread before the
    /// daemon drops.
    pub fn ring_capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// The session's counters (asks the daemon).
    pub fn stats(&mut self) -> Result<SessionCounters, ClientError> {
        self.client.send(&Request::Stats)?;
        match self.client.answer()? {
            (Response::Stats { counters }, _) => Ok(counters),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Stats"))),
        }
    }

    /// Starts a new dump file now (dump sessions).
    pub fn checkpoint(&mut self) -> Result<(), ClientError> {
        self.client.send(&Request::Checkpoint)?;
        match self.client.answer()? {
            (Response::Ok, _) => Ok(()),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// Asks the daemon to push out whatever it holds for this session
    /// (pktd's `wire_flush`). The daemon hands partial chunks over at least
    /// every 50 ms by itself, so this is a round trip that returns once the
    /// daemon has seen every earlier request.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        self.client.send(&Request::Flush)?;
        match self.client.answer()? {
            (Response::Ok, _) => Ok(()),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// Dump files the daemon completed since the last call (dump sessions).
    pub fn published(&mut self) -> Vec<String> {
        if self.client.ended.is_none() {
            self.poll_notices();
        }
        std::mem::take(&mut self.client.published)
    }

    /// Queues frames to send on the session's interface at their times
    /// (at most [`MAX_INJECT_BATCH`]
    /// per call); each gets exactly one report (see [`Session::inject_reports`]),
    /// refused ones too. Fails only if the batch as a whole is refused (the
    /// grant has no injection rights, say).
    pub fn inject(&mut self, frames: Vec<InjectFrame>) -> Result<(), ClientError> {
        self.client.send(&Request::Inject { frames })?;
        match self.client.answer()? {
            (Response::Ok, _) => Ok(()),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// The transmit reports ready so far (up to 256 per call).
    pub fn inject_reports(&mut self) -> Result<Vec<InjectReport>, ClientError> {
        self.client.send(&Request::InjectReports)?;
        match self.client.answer()? {
            (Response::InjectReports { reports }, _) => Ok(reports),
            (r, _) => Err(ClientError::Protocol(format!(
                "{r:?} instead of InjectReports"
            ))),
        }
    }

    /// Replaces the filter (still ANDed with the grant's).
    pub fn set_filter(&mut self, filter: &str) -> Result<(), ClientError> {
        let program = compile_filter(filter)?;
        self.client.send(&Request::SetFilter {
            filter: filter.to_string(),
            program,
        })?;
        match self.client.answer()? {
            (Response::Ok, _) => {
                self.effective.filter = filter.to_string();
                Ok(())
            }
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// If the daemon has ended the session: why, and the final counters.
    /// Does not block.
    pub fn ended(&mut self) -> Option<(String, SessionCounters)> {
        if self.client.ended.is_none() {
            self.poll_notices();
        }
        self.client.ended.clone()
    }

    fn poll_notices(&mut self) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.client.conn, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0) {
            // Only notices come unasked (Ended, DumpPublished); a closed
            // connection means the session is over.
            match self.client.message() {
                Ok((Response::Ended { reason, counters }, _)) => {
                    self.client.ended = Some((reason, counters))
                }
                Ok((Response::DumpPublished { name }, _)) => self.client.published.push(name),
                Ok(_) => {}
                Err(e) => {
                    self.client.ended = Some((
                        format!("the connection to ringcapd ended: {e}"),
                        SessionCounters::default(),
                    ))
                }
            }
        }
    }

    /// Asks the daemon to end the session and waits until it has: returns
    /// why and the final counters. The ring stays mapped and holds every
    /// packet the daemon delivered before the end that was not read yet
    /// (the counters count them as delivered): read them with
    /// [`Session::packets`].
    pub fn stop(&mut self) -> Result<(String, SessionCounters), ClientError> {
        if let Some(e) = self.client.ended.clone() {
            return Ok(e);
        }
        self.client.send(&Request::Close)?;
        loop {
            match self.client.message()? {
                (Response::Ended { reason, counters }, _) => {
                    self.client.ended = Some((reason.clone(), counters));
                    return Ok((reason, counters));
                }
                (Response::Error { message }, _) => return Err(ClientError::Daemon(message)),
                (Response::DumpPublished { name }, _) => self.client.published.push(name),
                // Answers to earlier requests: nothing to do with them now.
                _ => {}
            }
        }
    }

    /// Ends the session; returns the final counters. Packets still in the
    /// ring are discarded: use [`Session::stop`] and [`Session::packets`] to
    /// keep them.
    pub fn close(mut self) -> Result<(String, SessionCounters), ClientError> {
        self.stop()
    }
}
