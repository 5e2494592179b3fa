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

use std::io::{self, Read, Write};
use std::sync::Arc;

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use ringcap_format::pcapng::{self, InterfaceDescription};
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

type Chunks = mpsc::Receiver<Result<Bytes, String>>;

/// Reads a sensor's answer as it arrives.
struct ChanRead {
    rx: Chunks,
    cur: Bytes,
}

impl Read for ChanRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while !self.cur.has_remaining() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.remaining());
        self.cur.copy_to_slice(&mut buf[..n]);
        Ok(n)
    }
}

fn enc(s: &str) -> String {
    s.replace(':', "%3A").replace('+', "%2B")
}

async fn fetch(
    s: Sensor,
    tls: Arc<rustls::ClientConfig>,
    path: String,
    filter: String,
    tx: mpsc::Sender<Result<Bytes, String>>,
) {
    let r: Result<(), String> = async {
        let tcp = tokio::net::TcpStream::connect((s.host.as_str(), s.port))
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        let name = rustls::pki_types::ServerName::try_from(s.host.clone())
            .map_err(|e| format!("host: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
        tokio::spawn(conn);
        let req = Request::post(path)
            .header("host", format!("{}:{}", s.host, s.port))
            .body(Full::new(Bytes::from(filter)))
            .map_err(|e| e.to_string())?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            let b = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&b[..b.len().min(4096)]).trim()
            ));
        }
        while let Some(f) = body.frame().await {
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
        let _ = tx
            .send(Err(format!("sensor {} ({}): {e}", s.name, s.url)))
            .await;
    }
}

/// What a merge wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Merged {
    /// Packets from each sensor, in the order given.
    pub per_sensor: Vec<u64>,
}

struct Head {
    ts: u64,
    wire: u32,
    data: Vec<u8>,
    linktype: u32,
}

fn next(rd: &mut Reader<ChanRead>, name: &str) -> Result<Option<Head>, String> {
    let p = rd
        .next_packet()
        .map_err(|e| format!("sensor {name}: {e}"))?;
    Ok(p.map(|p| Head {
        ts: p.ts_ns,
        wire: p.wire_len,
        data: p.data.to_vec(),
        linktype: 0,
    })
    .map(|mut h| {
        let i = rd.interfaces();
        h.linktype = i.first().map_or(1, |i| i.linktype);
        h
    }))
}

/// Sends `filter` with `window` to every sensor and merges the answers
/// into `out`.
pub fn query_sensors(
    sensors: &[Sensor],
    tls: Arc<rustls::ClientConfig>,
    filter: &str,
    window: Window,
    format: OutFormat,
    out: &mut dyn Write,
) -> Result<Merged, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
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
            path.clone(),
            filter.to_string(),
            tx,
        ));
        rxs.push(rx);
    }
    let mut readers = Vec::new();
    for (rx, s) in rxs.into_iter().zip(sensors) {
        let rd = Reader::new(ChanRead {
            rx,
            cur: Bytes::new(),
        })
        .map_err(|e| format!("sensor {} ({}): {e}", s.name, s.url))?;
        readers.push(rd);
    }
    let mut heads = Vec::new();
    for (rd, s) in readers.iter_mut().zip(sensors) {
        heads.push(next(rd, &s.name)?);
    }
    let mut w = MergeOut::new(out, format, sensors).map_err(|e| format!("writing: {e}"))?;
    let mut merged = Merged {
        per_sensor: vec![0; sensors.len()],
    };
    // Ties keep the sensors' order: min_by_key returns the first minimum.
    while let Some(i) = (0..heads.len())
        .filter(|&i| heads[i].is_some())
        .min_by_key(|&i| heads[i].as_ref().map_or(u64::MAX, |h| h.ts))
    {
        let h = heads[i].take().expect("a head");
        w.packet(i, &h).map_err(|e| format!("writing: {e}"))?;
        merged.per_sensor[i] += 1;
        heads[i] = next(&mut readers[i], &sensors[i].name)?;
    }
    w.finish().map_err(|e| format!("writing: {e}"))?;
    Ok(merged)
}

/// The merged stream.
struct MergeOut<'a> {
    w: &'a mut dyn Write,
    format: OutFormat,
    names: Vec<(String, String)>,
    /// pcapng: (sensor, link type) of each IDB written; pcap: the one link type.
    idbs: Vec<(usize, u32)>,
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

    fn packet(&mut self, sensor: usize, h: &Head) -> io::Result<()> {
        let caplen = h.data.len() as u32;
        match self.format {
            OutFormat::Pcap => {
                match self.idbs.first() {
                    None => {
                        self.w.write_all(&pcap::file_header(
                            h.linktype,
                            262_144,
                            TsResolution::Nano,
                        ))?;
                        self.idbs.push((sensor, h.linktype));
                    }
                    Some(&(_, lt)) if lt != h.linktype => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "sensors answer different link types: use --format pcapng",
                        ))
                    }
                    Some(_) => {}
                }
                let mut r = [0u8; pcap::RECORD_HEADER_LEN];
                pcap::write_record_header(&mut r, h.ts, caplen, h.wire, TsResolution::Nano);
                self.w.write_all(&r)?;
                self.w.write_all(&h.data)
            }
            OutFormat::Pcapng => {
                let key = (sensor, h.linktype);
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
                                snaplen: 262_144,
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
                .write_all(&pcap::file_header(1, 262_144, TsResolution::Nano))?;
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
