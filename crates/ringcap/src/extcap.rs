//! `ringcap extcap`: Wireshark's extcap protocol over ringcapd, so an
//! unprivileged user sees "ringcapd: IF" interfaces in Wireshark and tshark
//! and captures exactly what their grant allows.
//!
//! Wireshark runs the program in its extcap directory (scripts/setup
//! installs a wrapper there that execs `ringcap extcap "$@"`) with:
//! - `--extcap-interfaces`: the interfaces this user may capture on: every
//!   interface of this network namespace for which the daemon admits a
//!   probe session (opened with a filter that matches nothing, closed at
//!   once; the protocol has no "which interfaces may I use" request);
//! - `--extcap-dlts --extcap-interface X`: Ethernet;
//! - `--extcap-config --extcap-interface X`: snap length, headers only;
//! - `--capture --extcap-interface X --fifo PATH [--extcap-capture-filter F]`:
//!   a session on X whose packets are written to PATH as pcap (nanosecond
//!   timestamps) until Wireshark closes the fifo or sends SIGTERM, or the
//!   daemon ends the session.
//!
//! Unknown arguments (Wireshark adds some, e.g. `--extcap-version=4.0`) are
//! ignored.

use crate::failure::Failure;
use ringcap_client::{default_socket, Client, OpenRequest, Snap};
use ringcap_format::record::{Endian, Header, HEADER_LEN};
use ringcap_format::TsResolution;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Interface values are this prefix and the interface's name.
const PREFIX: &str = "ringcapd-";

#[derive(Debug, Default)]
struct Args {
    interfaces: bool,
    dlts: bool,
    config: bool,
    capture: bool,
    interface: Option<String>,
    fifo: Option<PathBuf>,
    filter: Option<String>,
    snaplen: u32,
    headers: bool,
}

fn parse(argv: &[String]) -> Result<Args, Failure> {
    let mut a = Args::default();
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value = |what: &str| -> Result<String, Failure> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| Failure::usage(format!("extcap: {what} needs a value")))
        };
        match name {
            "--extcap-interfaces" => a.interfaces = true,
            "--extcap-dlts" => a.dlts = true,
            "--extcap-config" => a.config = true,
            "--capture" => a.capture = true,
            "--extcap-interface" => a.interface = Some(value(name)?),
            "--fifo" => a.fifo = Some(PathBuf::from(value(name)?)),
            "--extcap-capture-filter" => a.filter = Some(value(name)?),
            "--snaplen" => {
                let v = value(name)?;
                a.snaplen = v
                    .parse()
                    .map_err(|_| Failure::usage(format!("extcap: --snaplen {v}: not a number")))?
            }
            "--headers" => {
                // A boolflag: present means true (Wireshark may add "=true").
                a.headers = inline.as_deref().is_none_or(|v| v != "false")
            }
            _ => {}
        }
    }
    Ok(a)
}

fn device(a: &Args) -> Result<String, Failure> {
    let v = a
        .interface
        .as_deref()
        .ok_or_else(|| Failure::usage("extcap: --extcap-interface is missing"))?;
    v.strip_prefix(PREFIX)
        .map(str::to_string)
        .ok_or_else(|| Failure::usage(format!("extcap: {v} is not a ringcapd interface")))
}

/// Interfaces of this network namespace, sorted.
fn local_interfaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether the daemon admits this user on `interface` (a probe session that
/// matches nothing, closed at once).
fn allowed(socket: &std::path::Path, interface: &str) -> bool {
    let Ok(client) = Client::connect(socket) else {
        return false;
    };
    let mut req = OpenRequest::new(interface, "less 1");
    req.snaplen = Snap::Bytes(64);
    match client.open(req) {
        Ok(s) => {
            let _ = s.close();
            true
        }
        Err(_) => false,
    }
}

/// `ringcap extcap ARGS...`.
pub fn run(argv: &[String]) -> Result<i32, Failure> {
    let a = parse(argv)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    let w = |e: std::io::Error| Failure::runtime(format!("extcap: stdout: {e}"));
    if a.interfaces {
        writeln!(
            out,
            "extcap {{version={}}}{{display=ringcapd: capture as an unprivileged user}}",
            env!("CARGO_PKG_VERSION")
        )
        .map_err(w)?;
        let socket = default_socket();
        if socket.exists() {
            for i in local_interfaces() {
                if allowed(&socket, &i) {
                    writeln!(
                        out,
                        "interface {{value={PREFIX}{i}}}{{display=ringcapd: {i}}}"
                    )
                    .map_err(w)?;
                }
            }
        }
        return Ok(0);
    }
    if a.dlts {
        device(&a)?;
        writeln!(out, "dlt {{number=1}}{{name=EN10MB}}{{display=Ethernet}}").map_err(w)?;
        return Ok(0);
    }
    if a.config {
        device(&a)?;
        writeln!(
            out,
            "arg {{number=0}}{{call=--snaplen}}{{display=Snap length}}{{type=integer}}{{range=0,262144}}{{default=0}}{{tooltip=Bytes to keep of each packet (0: whole packets; your grant may cap it)}}"
        )
        .map_err(w)?;
        writeln!(
            out,
            "arg {{number=1}}{{call=--headers}}{{display=Headers only}}{{type=boolflag}}{{default=false}}{{tooltip=Keep exactly the protocol headers}}"
        )
        .map_err(w)?;
        return Ok(0);
    }
    if a.capture {
        return capture(&a);
    }
    Err(Failure::usage(
        "extcap: one of --extcap-interfaces, --extcap-dlts, --extcap-config, --capture",
    ))
}

fn capture(a: &Args) -> Result<i32, Failure> {
    let dev = device(a)?;
    let fifo = a
        .fifo
        .as_ref()
        .ok_or_else(|| Failure::usage("extcap: --capture needs --fifo"))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| Failure::runtime(format!("extcap: signal: {e}")))?;
    }
    let mut req = OpenRequest::new(&dev, a.filter.as_deref().unwrap_or(""));
    req.snaplen = match (a.headers, a.snaplen) {
        (true, 0) => Snap::Headers { max: 65_535 },
        (true, n) => Snap::Headers { max: n.min(65_535) },
        (false, 0) => Snap::Bytes(262_144),
        (false, n) => Snap::Bytes(n.min(262_144)),
    };
    let fail = |e: ringcap_client::ClientError| Failure::runtime(format!("extcap: {e}"));
    let mut session = Client::connect_default()
        .map_err(fail)?
        .open(req)
        .map_err(fail)?;
    let snap = match session.effective.snaplen {
        Snap::Bytes(n) => n,
        Snap::Headers { max } => max,
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(fifo)
        .map_err(|e| Failure::runtime(format!("extcap: {}: {e}", fifo.display())))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut header = Vec::with_capacity(24);
    header.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    header.extend_from_slice(&2u16.to_le_bytes());
    header.extend_from_slice(&4u16.to_le_bytes());
    header.extend_from_slice(&[0; 8]);
    header.extend_from_slice(&snap.to_le_bytes());
    header.extend_from_slice(&1u32.to_le_bytes());
    // Wireshark closing the fifo (EPIPE: Rust ignores SIGPIPE) ends the capture.
    let closed = |_| Ok::<i32, Failure>(0);
    if let Err(e) = out.write_all(&header).and_then(|_| out.flush()) {
        return closed(e);
    }
    let mut err = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        session.wait(Duration::from_millis(100)).map_err(fail)?;
        let ended = session.ended().is_some();
        session
            .packets(|p| {
                if err.is_some() {
                    return;
                }
                let mut rec = [0u8; HEADER_LEN];
                Header::new(p.ts_ns, p.data.len() as u32, p.wire_len, TsResolution::Nano)
                    .write(&mut rec, Endian::Little);
                if let Err(e) = out.write_all(&rec).and_then(|_| out.write_all(p.data)) {
                    err = Some(e);
                }
            })
            .map_err(fail)?;
        if let Some(e) = err.take() {
            let _ = session.close();
            return closed(e);
        }
        if let Err(e) = out.flush() {
            let _ = session.close();
            return closed(e);
        }
        if ended {
            return Ok(0);
        }
    }
    let _ = session.close();
    let _ = out.flush();
    Ok(0)
}
