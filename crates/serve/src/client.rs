//! Many sensors: one tcpdump-filter query sent to several retrieval
//! services at once, their answers (each in time order) merged by time into
//! one stream: pcapng with one interface block per sensor interface, named
//! after the sensor (`if_name` the sensor's name, `if_description` its
//! URL), or pcap when every sensor answers the same link type and pcap is
//! asked for. Equal timestamps keep the order of the sensors as given.
//!
//! Each sensor's answer is read by a task of a small tokio runtime into a
//! bounded channel (8 chunks): a slow merge slows the sensors' streams
//! instead of piling their answers up in memory. A sensor that refuses
//! (4xx/5xx) or whose stream is cut makes the whole query fail, naming it.
//!
//! A sensor's answer is hostile until read (a sensor may be compromised, or
//! just broken), and one sensor must not make the client hang, run out of
//! memory, or write what `tcpdump -r` of the answers would not give
//! ([`Limits`]): connecting, the TLS handshake and the answer's head are
//! timed, so is each wait for its data ([`Limits::idle`]) and the whole
//! query ([`Limits::total`]); an error answer is read up to 4 KiB; a sensor
//! sends at most [`BETWEEN_PACKETS`] bytes between two packets (so neither a
//! huge record nor a flood of interface blocks is held), packets of at most
//! [`MAX_CAPLEN`] bytes, no captured length above its wire length, at most
//! [`MAX_INTERFACES`] interfaces, and only pcap or pcapng. Its text (an
//! error answer) is printed with control characters escaped. A failed merge
//! says what each sensor had sent ([`Failed`]).

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use ringcap_format::pcapng::{self, InterfaceDescription};
use ringcap_format::read::FileFormat;
use ringcap_format::{pcap, Reader, TsResolution};
use ringcap_index::query::Window;
use ringcap_index::OutFormat;
use tokio::sync::mpsc;

/// A sensor: a name and where its service listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sensor {
    /// Its name in the output (`NAME=` before the URL, or host:port).
    pub name: String,
    /// `https://HOST:PORT`.
    pub url: String,
    host: String,
    port: u16,
}

/// Parses `[NAME=]https://HOST[:PORT][/]` (port 1234, stenographer's, by default).
pub fn parse_sensor(s: &str) -> Result<Sensor, String> {
    let (name, url) = match s.split_once('=') {
        Some((n, u)) if !n.contains('/') => (Some(n.to_string()), u),
        _ => (None, s),
    };
    let bad = || format!("sensor '{s}': use [NAME=]https://HOST[:PORT]");
    let rest = url.strip_prefix("https://").ok_or_else(bad)?;
    let hostport = rest.strip_suffix('/').unwrap_or(rest);
    if hostport.is_empty() || hostport.contains('/') {
        return Err(bad());
    }
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        let (h, p) = h.split_once(']').ok_or_else(bad)?;
        (h.to_string(), p.strip_prefix(':').unwrap_or("1234"))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p),
            None => (hostport.to_string(), "1234"),
        }
    };
    let port: u16 = port.parse().map_err(|_| bad())?;
    Ok(Sensor {
        name: name.unwrap_or_else(|| format!("{host}:{port}")),
        url: format!("https://{hostport}"),
        host,
        port,
    })
}

/// How long a query waits for its sensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connecting to a sensor, the TLS handshake, and the head of its
    /// answer: each at most this.
    pub connect: Duration,
    /// A sensor that sends nothing for this long while its data is wanted
    /// fails the query (a sensor scanning files without an index sends
    /// nothing until it finds a match).
    pub idle: Duration,
    /// The whole query.
    pub total: Duration,
    /// A sensor that fails is left out (what it sent before stays in the
    /// answer) instead of failing the query; [`Merged::failed`] says why.
    pub partial: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connect: Duration::from_secs(30),
            idle: Duration::from_secs(120),
            // Just over `ringcap serve`'s own limit on a query (600 s).
            total: Duration::from_secs(660),
            partial: false,
        }
    }
}

/// Largest packet taken from a sensor: the snap length of the output.
pub const MAX_CAPLEN: usize = 262_144;
/// Bytes a sensor may send between two packets (its file header and
/// interface blocks, and the packet): more fails the query.
pub const BETWEEN_PACKETS: u64 = 8 << 20;
/// Interfaces a sensor's answer may declare.
pub const MAX_INTERFACES: usize = 256;
/// Bytes of an error answer read (and shown).
const ERROR_BODY: usize = 4096;

/// A sensor still answering at the query's deadline.
const PAST_DEADLINE: &str = "no whole answer within the query's time limit";

type Chunks = mpsc::Receiver<Result<Bytes, String>>;

/// Reads a sensor's answer as it arrives, within the query's deadline and
/// [`BETWEEN_PACKETS`] bytes of the last packet taken.
struct ChanRead {
    rx: Chunks,
    cur: Bytes,
    rt: tokio::runtime::Handle,
    deadline: tokio::time::Instant,
    /// Bytes read since the merge last took a packet of this sensor.
    since_packet: u64,
    /// Time spent waiting for this sensor's data.
    waited: Duration,
}

impl Read for ChanRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while !self.cur.has_remaining() {
            // Also when data is waiting: a sensor that never stops sending
            // is held to the deadline too.
            if tokio::time::Instant::now() >= self.deadline {
                return Err(io::Error::other(PAST_DEADLINE));
            }
            let t = Instant::now();
            // The timer is made inside the runtime (it needs its clock).
            let (deadline, rx) = (self.deadline, &mut self.rx);
            let got = self
                .rt
                .block_on(async { tokio::time::timeout_at(deadline, rx.recv()).await });
            self.waited += t.elapsed();
            match got {
                Err(_) => return Err(io::Error::other(PAST_DEADLINE)),
                Ok(Some(Ok(b))) => self.cur = b,
                Ok(Some(Err(e))) => return Err(io::Error::other(e)),
                Ok(None) => return Ok(0),
            }
        }
        if self.since_packet >= BETWEEN_PACKETS {
            return Err(io::Error::other(format!(
                "sent more than {} MiB without a packet",
                BETWEEN_PACKETS >> 20
            )));
        }
        let left = (BETWEEN_PACKETS - self.since_packet) as usize;
        let n = buf.len().min(self.cur.remaining()).min(left);
        self.cur.copy_to_slice(&mut buf[..n]);
        self.since_packet += n as u64;
        Ok(n)
    }
}

/// `s` with everything but printable ASCII escaped (a sensor's text on a
/// terminal: control characters, and Unicode's format and separator
/// characters, which reorder or hide what is shown).
fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c == ' ' || c.is_ascii_graphic()) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn enc(s: &str) -> String {
    s.replace(':', "%3A").replace('+', "%2B")
}

/// `fut`, or an error saying what took longer than `limit`.
async fn within<T>(
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, String> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("{what}: nothing within {} s", limit.as_secs()))
}

async fn fetch(
    s: Sensor,
    tls: Arc<rustls::ClientConfig>,
    limits: Limits,
    path: String,
    filter: String,
    tx: mpsc::Sender<Result<Bytes, String>>,
) {
    let r: Result<(), String> = async {
        let tcp = within(
            limits.connect,
            "connecting",
            tokio::net::TcpStream::connect((s.host.as_str(), s.port)),
        )
        .await?
        .map_err(|e| format!("connecting: {e}"))?;
        let name = rustls::pki_types::ServerName::try_from(s.host.clone())
            .map_err(|e| format!("host: {e}"))?;
        let connect = tokio_rustls::TlsConnector::from(tls).connect(name, tcp);
        let tls = within(limits.connect, "TLS handshake", connect)
            .await?
            .map_err(|e| format!("TLS: {e}"))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
        tokio::spawn(conn);
        let host = if s.host.contains(':') {
            format!("[{}]:{}", s.host, s.port)
        } else {
            format!("{}:{}", s.host, s.port)
        };
        let req = Request::post(path)
            .header("host", host)
            .body(Full::new(Bytes::from(filter)))
            .map_err(|e| e.to_string())?;
        let resp = within(limits.connect, "the answer's head", send.send_request(req))
            .await?
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            // The start of the reason only: an answer that does not end is
            // not waited for, nor held.
            let mut b = Vec::new();
            while b.len() < ERROR_BODY {
                match tokio::time::timeout(limits.idle, body.frame()).await {
                    Ok(Some(Ok(f))) => {
                        if let Ok(d) = f.into_data() {
                            b.extend_from_slice(&d[..d.len().min(ERROR_BODY - b.len())]);
                        }
                    }
                    _ => break,
                }
            }
            let why = printable(String::from_utf8_lossy(&b).trim());
            return Err(format!("{status}: {why}"));
        }
        loop {
            let f = tokio::time::timeout(limits.idle, body.frame())
                .await
                .map_err(|_| format!("sent nothing for {} s", limits.idle.as_secs()))?;
            let Some(f) = f else { break };
            let f = f.map_err(|e| format!("the answer was cut: {e}"))?;
            if let Ok(d) = f.into_data() {
                if tx.send(Ok(d)).await.is_err() {
                    return Ok(()); // The merge stopped reading.
                }
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = r {
        // Named by the merge, which reads it.
        let _ = tx.send(Err(e)).await;
    }
}

/// What a merge wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Merged {
    /// Packets from each sensor, in the order given.
    pub per_sensor: Vec<u64>,
    /// With [`Limits::partial`]: why each sensor that was left out failed
    /// (its packets after that are missing from the answer).
    pub failed: Vec<Option<String>>,
    /// Seconds the merge waited for each sensor's data: a sensor cut by
    /// its server for not being read (`ringcap serve` drops a client that
    /// reads nothing for 60 s) may have been waiting behind a slower one.
    pub waited: Vec<u64>,
}

/// A merge that failed: why, and what had been written (the output holds
/// those packets, and is not a whole answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// What went wrong, naming the sensor.
    pub message: String,
    /// Packets written from each sensor before, and the time waited for
    /// each.
    pub merged: Merged,
    /// The output was closed by its reader (a broken pipe: `| head`), not
    /// a failure of the query: what it took was whole.
    pub output_closed: bool,
}

struct Head {
    ts: u64,
    wire: u32,
    data: Vec<u8>,
    linktype: u32,
    /// The sensor's interface (its number in the sensor's answer).
    iface: usize,
}

fn next(rd: &mut Reader<ChanRead>) -> Result<Option<Head>, String> {
    let Some(p) = rd.next_packet().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    if p.data.len() > MAX_CAPLEN {
        return Err(format!(
            "a packet of {} bytes (more than {MAX_CAPLEN})",
            p.data.len()
        ));
    }
    if p.data.is_empty() || p.data.len() as u64 > p.wire_len as u64 {
        return Err(format!(
            "a packet of {} bytes captured of {} on the wire",
            p.data.len(),
            p.wire_len
        ));
    }
    let (ts, wire, data, i) = (p.ts_ns, p.wire_len, p.data.to_vec(), p.interface);
    if rd.interfaces().len() > MAX_INTERFACES {
        return Err(format!("more than {MAX_INTERFACES} interfaces"));
    }
    let linktype = rd.interfaces().get(i).map_or(1, |i| i.linktype);
    if linktype > 0xffff {
        // pcap's reserved bits: no reader takes them.
        return Err(format!("link type {linktype:#x}"));
    }
    let iface = i;
    rd.get_mut().since_packet = 0;
    Ok(Some(Head {
        ts,
        wire,
        data,
        linktype,
        iface,
    }))
}

/// Sends `filter` with `window` to every sensor and merges the answers
/// into `out`, within `limits`.
pub fn query_sensors(
    sensors: &[Sensor],
    tls: Arc<rustls::ClientConfig>,
    limits: Limits,
    filter: &str,
    window: Window,
    format: OutFormat,
    out: &mut dyn Write,
) -> Result<Merged, Failed> {
    let mut merged = Merged {
        per_sensor: vec![0; sensors.len()],
        failed: vec![None; sensors.len()],
        waited: vec![0; sensors.len()],
    };
    let mut readers = Vec::new();
    let r = merge(
        sensors,
        tls,
        limits,
        (filter, window, format),
        out,
        &mut merged,
        &mut readers,
    );
    for (i, rd) in readers.iter().enumerate() {
        if let Some(rd) = rd {
            merged.waited[i] = rd.get_ref().waited.as_secs();
        }
    }
    match r {
        Ok(()) => Ok(merged),
        Err(Stop::Failed(message)) => Err(Failed {
            message,
            merged,
            output_closed: false,
        }),
        Err(Stop::Closed) => Err(Failed {
            message: "output closed".into(),
            merged,
            output_closed: true,
        }),
    }
}

fn merge(
    sensors: &[Sensor],
    tls: Arc<rustls::ClientConfig>,
    limits: Limits,
    (filter, window, format): (&str, Window, OutFormat),
    out: &mut dyn Write,
    merged: &mut Merged,
    readers: &mut Vec<Option<Reader<ChanRead>>>,
) -> Result<(), Stop> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let deadline = tokio::time::Instant::now() + limits.total;
    let mut params = Vec::new();
    if let Some(a) = window.after {
        params.push(format!(
            "after={}.{:09}",
            a / 1_000_000_000,
            a % 1_000_000_000
        ));
    }
    if let Some(b) = window.before {
        params.push(format!(
            "before={}.{:09}",
            b / 1_000_000_000,
            b % 1_000_000_000
        ));
    }
    let path = format!("/tcpdump?{}", enc(&params.join("&")));
    let mut rxs = Vec::new();
    for s in sensors {
        let (tx, rx) = mpsc::channel(8);
        rt.spawn(fetch(
            s.clone(),
            tls.clone(),
            limits,
            path.clone(),
            filter.to_string(),
            tx,
        ));
        rxs.push(rx);
    }
    let named = |i: usize, e: &dyn std::fmt::Display| {
        format!("sensor {} ({}): {e}", sensors[i].name, sensors[i].url)
    };
    // A sensor's failure: the query's, or (partial) the sensor left out
    // (its reader, and what it holds, dropped; the time waited kept).
    let give_up =
        |i: usize, e: String, readers: &mut [Option<Reader<ChanRead>>], merged: &mut Merged| {
            if !limits.partial {
                return Err(e);
            }
            if let Some(rd) = readers.get_mut(i).and_then(Option::take) {
                merged.waited[i] = rd.get_ref().waited.as_secs();
            }
            merged.failed[i] = Some(e);
            if merged.failed.iter().all(Option::is_some) {
                return Err("every sensor failed".to_string());
            }
            Ok(())
        };
    // The next packet of sensor i; None once it ended or was left out.
    let advance = |i: usize, readers: &mut [Option<Reader<ChanRead>>], merged: &mut Merged| {
        let Some(rd) = readers[i].as_mut() else {
            return Ok(None);
        };
        match next(rd) {
            Ok(h) => Ok(h),
            Err(e) => give_up(i, named(i, &e), readers, merged).map(|()| None),
        }
    };
    for (i, rx) in rxs.into_iter().enumerate() {
        let mut rd = Reader::new(ChanRead {
            rx,
            cur: Bytes::new(),
            rt: rt.handle().clone(),
            deadline,
            since_packet: 0,
            waited: Duration::ZERO,
        })
        .map_err(|e| named(i, &e))
        .and_then(|rd| match rd.format() {
            FileFormat::Pcap { .. } | FileFormat::Pcapng => Ok(rd),
            _ => Err(named(i, &"its answer is neither pcap nor pcapng")),
        });
        if let Ok(rd) = &mut rd {
            rd.limit_interfaces(MAX_INTERFACES);
        }
        match rd {
            Ok(rd) => readers.push(Some(rd)),
            Err(e) => {
                readers.push(None);
                give_up(i, e, readers, merged)?;
            }
        }
    }
    let mut heads = Vec::new();
    for i in 0..readers.len() {
        heads.push(advance(i, readers, merged)?);
    }
    let mut w = MergeOut::new(out, format, sensors).map_err(writing)?;
    // Ties keep the sensors' order: min_by_key returns the first minimum.
    while let Some(i) = (0..heads.len())
        .filter(|&i| heads[i].is_some())
        .min_by_key(|&i| heads[i].as_ref().map_or(u64::MAX, |h| h.ts))
    {
        let h = heads[i].take().expect("a head");
        // What the output cannot hold is the sensor's failure, not the
        // query's (with --partial, the others go on).
        if let Err(e) = w.admits(&h) {
            give_up(i, named(i, &e), readers, merged)?;
            continue;
        }
        w.packet(i, &h).map_err(writing)?;
        merged.per_sensor[i] += 1;
        heads[i] = advance(i, readers, merged)?;
    }
    w.finish().map_err(writing)?;
    Ok(())
}

/// Why [`merge`] stopped before the end.
enum Stop {
    /// A failure, named.
    Failed(String),
    /// The output's reader closed it ([`Failed::output_closed`]).
    Closed,
}

impl From<String> for Stop {
    fn from(m: String) -> Stop {
        Stop::Failed(m)
    }
}

fn writing(e: io::Error) -> Stop {
    match e.kind() {
        io::ErrorKind::BrokenPipe => Stop::Closed,
        _ => Stop::Failed(format!("writing: {e}")),
    }
}

/// The merged stream.
struct MergeOut<'a> {
    w: &'a mut dyn Write,
    format: OutFormat,
    names: Vec<(String, String)>,
    /// pcapng: (sensor, its interface) of each IDB written; pcap: the
    /// first packet's, for its link type.
    idbs: Vec<(usize, usize, u32)>,
    buf: Vec<u8>,
}

impl<'a> MergeOut<'a> {
    fn new(w: &'a mut dyn Write, format: OutFormat, s: &[Sensor]) -> io::Result<MergeOut<'a>> {
        if format == OutFormat::Pcapng {
            w.write_all(&pcapng::section_header(
                std::env::consts::OS,
                concat!("ringcap query --sensor ", env!("CARGO_PKG_VERSION")),
                None,
            ))?;
        }
        Ok(MergeOut {
            w,
            format,
            names: s.iter().map(|s| (s.name.clone(), s.url.clone())).collect(),
            idbs: Vec::new(),
            buf: Vec::new(),
        })
    }

    /// Whether `h` can be written: pcap holds one link type and times up
    /// to 2106.
    fn admits(&self, h: &Head) -> Result<(), String> {
        if self.format != OutFormat::Pcap {
            return Ok(());
        }
        if h.ts / 1_000_000_000 > u32::MAX as u64 {
            return Err(
                "a timestamp after 2106, which pcap cannot hold: use --format pcapng".into(),
            );
        }
        match self.idbs.first() {
            Some(&(_, _, lt)) if lt != h.linktype => Err(format!(
                "link type {}, the answer so far {lt}: pcap holds one, use --format pcapng",
                h.linktype
            )),
            _ => Ok(()),
        }
    }

    /// Writes `h`, which [`MergeOut::admits`] admitted.
    fn packet(&mut self, sensor: usize, h: &Head) -> io::Result<()> {
        let caplen = h.data.len() as u32;
        match self.format {
            OutFormat::Pcap => {
                if self.idbs.is_empty() {
                    self.w.write_all(&pcap::file_header(
                        h.linktype,
                        MAX_CAPLEN as u32,
                        TsResolution::Nano,
                    ))?;
                    self.idbs.push((sensor, h.iface, h.linktype));
                }
                let mut r = [0u8; pcap::RECORD_HEADER_LEN];
                pcap::write_record_header(&mut r, h.ts, caplen, h.wire, TsResolution::Nano);
                self.w.write_all(&r)?;
                self.w.write_all(&h.data)
            }
            OutFormat::Pcapng => {
                let key = (sensor, h.iface, h.linktype);
                let id = match self.idbs.iter().position(|&k| k == key) {
                    Some(i) => i,
                    None => {
                        let lt = u16::try_from(h.linktype).map_err(|_| {
                            io::Error::new(io::ErrorKind::InvalidData, "link type above 65535")
                        })?;
                        let (name, url) = &self.names[sensor];
                        let d = format!("ringcap sensor {url}");
                        self.w.write_all(&pcapng::interface_description(
                            &InterfaceDescription {
                                linktype: lt,
                                snaplen: MAX_CAPLEN as u32,
                                name,
                                filter: None,
                                description: Some(&d),
                            },
                        ))?;
                        self.idbs.push(key);
                        self.idbs.len() - 1
                    }
                };
                self.buf.clear();
                self.buf.resize(pcapng::epb_len(h.data.len()), 0);
                pcapng::write_epb_header(&mut self.buf, id as u32, h.ts, caplen, h.wire);
                self.buf[pcapng::EPB_DATA_OFFSET..pcapng::EPB_DATA_OFFSET + h.data.len()]
                    .copy_from_slice(&h.data);
                pcapng::write_epb_trailer(&mut self.buf, caplen);
                self.w.write_all(&self.buf)
            }
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        if self.format == OutFormat::Pcap && self.idbs.is_empty() {
            self.w
                .write_all(&pcap::file_header(1, MAX_CAPLEN as u32, TsResolution::Nano))?;
        }
        self.w.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensors() {
        let s = parse_sensor("a=https://127.0.0.1:8443").unwrap();
        assert_eq!((s.name.as_str(), s.port), ("a", 8443));
        let s = parse_sensor("https://[::1]:9/").unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.name.as_str()),
            ("::1", 9, "::1:9")
        );
        assert_eq!(parse_sensor("https://h").unwrap().port, 1234);
        for bad in ["http://h:1", "https://", "https://h:x", "https://h:1/q"] {
            assert!(parse_sensor(bad).is_err(), "{bad}");
        }
    }
}
