//! `ringcap index` and `ringcap query`, and the indexer that indexes each
//! file `ringcap capture` publishes (crate `ringcap-index` does the work).
//!
//! While capturing, a finished file is published first and its index
//! follows: a background thread at the lowest CPU priority (nice 19) reads
//! the published file back (usually from the page cache) and publishes
//! `.NAME.ringcap-index` next to it, so a file is queryable through its
//! index once that read is done; until then (or if the capture dies
//! first) a query scans it, and `ringcap repair`/`ringcap index` build what
//! is missing. At most 64 files wait (beyond, a file is left unindexed,
//! said once), and the end of a capture waits at most 5 s for them. Files
//! written with O_DIRECT (in place) are read back from the disk, not the
//! page cache: the cost of indexing after the fact rather than from the
//! packets as they are written.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use ringcap_index::background::{Indexer, RetireIndexes};
use ringcap_index::{
    build_index, load_checked_index, plan, query::Window, run, time::parse_time, OutFormat, Output,
    Query, Unusable,
};
use ringcap_sink::FileHook;

use crate::failure::{exit, Failure};

/// `ringcap index`.
#[derive(Debug, Args)]
pub struct IndexArgs {
    /// Rebuild indexes that are present and up to date too.
    #[arg(long)]
    pub force: bool,
    /// Capture files (pcap or pcapng, written by anything).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// `ringcap query`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ringcap query -d /srv/pcap --after 2026-11-26T14:00:00Z --before 1764166500 -w out.pcap 'host 198.18.0.1 and port 53'
  ringcap query -d /srv/pcap -w - 'vlan 100 and tcp' | tcpdump -r -
  ringcap query a.pcap b.pcapng --filter 'net 198.18.0.0/15'

The result is what `tcpdump -r` of each file in turn (in time order) writes with
the same filter, restricted to the window. Files with an index (`ringcap index`,
or written by `ringcap capture`) are read only where the index says a packet may
match; files without one are scanned (said on stderr).")]
pub struct QueryArgs {
    /// Query every capture file in DIR, the one being written included (up
    /// to its last whole record: packets are found as soon as the capture
    /// has flushed them); other hidden files, such as indexes, are skipped.
    /// Repeat for several.
    #[arg(short = 'd', long = "dir", value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Packets at or after T (RFC 3339, or seconds since the epoch; fractions allowed).
    #[arg(long, value_name = "T")]
    pub after: Option<String>,
    /// Packets before T (RFC 3339, or seconds since the epoch; fractions allowed).
    #[arg(long, value_name = "T")]
    pub before: Option<String>,
    /// Write to FILE, or - for standard output (the default when it is not a terminal).
    #[arg(short = 'w', long = "write", value_name = "FILE|-")]
    pub write: Option<String>,
    /// Output format.
    #[arg(long, value_name = "pcap|pcapng", default_value = "pcap")]
    pub format: String,
    /// The filter (tcpdump syntax), when the arguments are files.
    #[arg(long, value_name = "EXPR")]
    pub filter: Option<String>,
    /// Do not use indexes: scan every file.
    #[arg(long)]
    pub no_index: bool,
    /// Print what the query read to stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Ask the retrieval service of a sensor (`ringcap serve`) instead of
    /// local files: [NAME=]https://HOST:PORT; repeat for several, the answers
    /// are merged by time (pcapng: one interface per sensor, named after it).
    #[arg(long = "sensor", value_name = "URL")]
    pub sensors: Vec<String>,
    /// With --sensor: the keys directory (`ringcap serve-keys`).
    #[arg(long, value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// With --sensor: the client certificate's name in --certs.
    #[arg(long, value_name = "NAME", default_value = "client")]
    pub client: String,
    /// With --sensor: fail when a sensor sends nothing for this long (a
    /// sensor scanning files without an index sends nothing until a match).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub sensor_idle: u64,
    /// With --sensor: fail when the whole query takes longer (the default is
    /// just over `ringcap serve`'s own limit, --max-time 600).
    #[arg(long, value_name = "SECS", default_value_t = 660)]
    pub sensor_timeout: u64,
    /// With --sensor: a sensor that fails is left out (what it sent before
    /// stays; the failure is said) instead of failing the query.
    #[arg(long)]
    pub partial: bool,
    /// Ask ringcapd for the stored packets of an interface (-i), as an
    /// unprivileged user, with what its policy allows (the socket:
    /// --daemon=PATH, else $RINGCAP_DAEMON, else /run/ringcapd/ringcapd.sock).
    #[arg(
        long,
        value_name = "SOCKET",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = ""
    )]
    pub daemon: Option<String>,
    /// With --daemon: the interface whose stored packets are asked for.
    #[arg(
        short = 'i',
        long = "interface",
        value_name = "IF",
        requires = "daemon"
    )]
    pub interface: Option<String>,
    /// With --daemon: bytes of each packet to keep (the grant may cap it).
    #[arg(short = 's', long = "snaplen", value_name = "N", requires = "daemon")]
    pub snaplen: Option<u32>,
    /// With --daemon: most bytes of answer wanted (the grant may cap it).
    #[arg(long, value_name = "BYTES", requires = "daemon")]
    pub max_bytes: Option<u64>,
    /// With -d: the filter (tcpdump syntax). Without -d: the files.
    #[arg(value_name = "FILTER|FILES")]
    pub rest: Vec<String>,
}

/// `ringcap index`: builds the index of each file.
pub fn index(args: &IndexArgs) -> Result<i32, Failure> {
    let mut status = 0;
    for f in &args.files {
        if !args.force {
            if let Ok(idx) = load_checked_index(f) {
                println!(
                    "{}: index up to date ({} packets)",
                    f.display(),
                    idx.summary.packets
                );
                continue;
            }
        }
        let t = Instant::now();
        match build_index(f) {
            Ok(r) => println!(
                "{}: indexed {} packets in {} groups, {} keys; index {} bytes ({:.3}% of {} bytes) in {:.2} s",
                f.display(),
                r.packets,
                r.groups,
                r.keys,
                r.index_len,
                100.0 * r.index_len as f64 / r.capture_len.max(1) as f64,
                r.capture_len,
                t.elapsed().as_secs_f64()
            ),
            Err(e) => {
                // A file cut short (a copy in progress, a writer's crash):
                // what to do about it.
                let hint = match &e {
                    ringcap_index::BuildError::Format(_, fe)
                        if matches!(fe.kind, ringcap_format::FormatErrorKind::Truncated { .. }) =>
                    {
                        " (`ringcap repair FILE` cuts a capture after its last whole record; index it then)"
                    }
                    _ => "",
                };
                eprintln!("ringcap: {e}{hint}");
                status = exit::USAGE;
            }
        }
    }
    Ok(status)
}

/// `ringcap query`.
pub fn query(args: &QueryArgs) -> Result<i32, Failure> {
    if !args.sensors.is_empty() {
        return query_sensors(args);
    }
    if let Some(socket) = &args.daemon {
        return query_daemon(args, socket);
    }
    let (files, filter) = if args.dirs.is_empty() {
        if args.rest.is_empty() {
            return Err(Failure::usage(
                "query: give -d DIR and a filter, or files (and --filter EXPR)",
            ));
        }
        let files: Vec<PathBuf> = args.rest.iter().map(PathBuf::from).collect();
        // `ringcap query FILE udp`: the filter taken for a file.
        if args.filter.is_none() {
            if let Some(f) = files.iter().find(|f| !f.exists()) {
                return Err(Failure::usage(format!(
                    "query: {}: no such file (with files, the filter goes in --filter EXPR; \
                     with -d DIR, after the options)",
                    f.display()
                )));
            }
        }
        (files, args.filter.clone().unwrap_or_default())
    } else {
        if args.filter.is_some() && !args.rest.is_empty() {
            return Err(Failure::usage(
                "query: a filter both in --filter and as arguments",
            ));
        }
        let list = if args.no_index {
            ringcap_index::dir::capture_files
        } else {
            ringcap_index::dir::capture_files_ahead
        };
        let mut files = list(&args.dirs, &mut |f| {
            eprintln!("ringcap: {}: not a capture file, skipped", f.display())
        })
        .map_err(Failure::usage)?;
        // Not the output itself, if it is written into a queried directory.
        if let Some(out) = args.write.as_deref().filter(|w| *w != "-") {
            let out = fs::canonicalize(out).ok();
            files.retain(|f| out.is_none() || fs::canonicalize(f).ok() != out);
        }
        let filter = args.filter.clone().unwrap_or_else(|| args.rest.join(" "));
        (files, filter)
    };
    let t = |s: &Option<String>| s.as_deref().map(parse_time).transpose();
    let window = Window {
        after: t(&args.after).map_err(Failure::usage)?,
        before: t(&args.before).map_err(Failure::usage)?,
    };
    check_window(&window)?;
    let format = match args.format.as_str() {
        "pcap" => OutFormat::Pcap,
        "pcapng" => OutFormat::Pcapng,
        f => return Err(Failure::usage(format!("--format {f}: use pcap or pcapng"))),
    };
    // Written whole or not at all: a failure (a filter libpcap refuses, a
    // file that cannot be read) leaves -w FILE as it was.
    let (w, answer) = crate::answer::open(args.write.as_deref())?;
    let mut out = Output::new(w, format);
    let q = Query {
        filter: &filter,
        plan: plan(&filter),
        window,
        use_index: !args.no_index,
        stop: None,
        readers: ringcap_index::readers_here(),
    };
    let started = Instant::now();
    let stats = run(&q, &files, &mut out, &mut |m| eprintln!("ringcap: {m}"));
    drop(out);
    answer.finish(stats.is_ok())?;
    let stats = stats.map_err(|e| match e {
        // A bad filter, or an input file that is not a capture or is
        // malformed: bad input (exit 2, as `ringcap index` and `-r`).
        ringcap_index::QueryError::Filter(_) | ringcap_index::QueryError::File(..) => {
            Failure::usage(e.to_string())
        }
        ringcap_index::QueryError::Output(ref io) if io.kind() == io::ErrorKind::BrokenPipe => {
            Failure::output_closed()
        }
        _ => Failure::runtime(e.to_string()),
    })?;
    if args.verbose {
        eprintln!(
            "ringcap: query: {} packets from {} files ({} through their index, {} scanned, {} outside the window); \
             read {} of {} bytes, {} of {} indexed groups and {} packets at their listed positions, \
             filter run on {} packets, {:.3} s",
            stats.matched,
            stats.files,
            stats.indexed,
            stats.scanned,
            stats.skipped,
            stats.bytes_read,
            stats.file_bytes,
            stats.groups_read,
            stats.groups,
            stats.by_position,
            stats.examined,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(damage_said(&stats))
}

/// Says which files scanned whole ended in damage (their packets before it
/// were written, the query went on) and gives the exit status: 1 if any
/// did, as `tcpdump -r` of such a file exits 1 after its packets.
fn damage_said(stats: &ringcap_index::QueryStats) -> i32 {
    for d in &stats.damaged {
        eprintln!(
            "ringcap: warning: {d}: the packets before it were written, the rest of the file is skipped (`ringcap repair FILE` cuts a capture after its last whole record)"
        );
    }
    match stats.damaged.len() {
        0 => 0,
        n => {
            eprintln!(
                "ringcap: {n}{} damaged file{} read in part; the other files in full",
                if n >= ringcap_index::query::DAMAGE_SAID {
                    " or more"
                } else {
                    ""
                },
                if n == 1 { "" } else { "s" }
            );
            crate::failure::exit::RUNTIME
        }
    }
}

/// A window that holds no time (`--before` not after `--after`) is a
/// mistake, not an empty answer.
fn check_window(w: &Window) -> Result<(), Failure> {
    match (w.after, w.before) {
        (Some(a), Some(b)) if b <= a => Err(Failure::usage(
            "query: the time window is empty (--before must be later than --after)",
        )),
        _ => Ok(()),
    }
}

/// `ringcap query --sensor`.
fn query_sensors(args: &QueryArgs) -> Result<i32, Failure> {
    if !args.dirs.is_empty() || args.filter.is_some() || args.no_index {
        return Err(Failure::usage(
            "query: --sensor takes the filter as arguments (no -d, --filter, --no-index)",
        ));
    }
    let t = |s: &Option<String>| s.as_deref().map(parse_time).transpose();
    let window = Window {
        after: t(&args.after).map_err(Failure::usage)?,
        before: t(&args.before).map_err(Failure::usage)?,
    };
    check_window(&window)?;
    let format = match args.format.as_str() {
        "pcap" => OutFormat::Pcap,
        "pcapng" => OutFormat::Pcapng,
        f => return Err(Failure::usage(format!("--format {f}: use pcap or pcapng"))),
    };
    if args.sensor_idle == 0 || args.sensor_timeout == 0 {
        return Err(Failure::usage(
            "query: --sensor-idle and --sensor-timeout take seconds above 0",
        ));
    }
    let limits = ringcap_serve::client::Limits {
        idle: Duration::from_secs(args.sensor_idle),
        total: Duration::from_secs(args.sensor_timeout),
        partial: args.partial,
        ..Default::default()
    };
    crate::serve::query_sensors(
        &args.sensors,
        args.certs.as_ref(),
        &args.client,
        limits,
        &args.rest.join(" "),
        window,
        format,
        args.write.as_deref(),
    )
}

/// `ringcap query --daemon -i IF`: stored packets through ringcapd, held to
/// the caller's grant; the daemon's pcap stream is copied to -w as it comes.
fn query_daemon(args: &QueryArgs, socket: &str) -> Result<i32, Failure> {
    if !args.dirs.is_empty() || args.filter.is_some() || args.no_index || args.format != "pcap" {
        return Err(Failure::usage(
            "query: --daemon takes -i IF and the filter as arguments (no -d, --filter, --no-index; pcap out)",
        ));
    }
    let Some(interface) = args.interface.clone() else {
        return Err(Failure::usage("query: --daemon needs -i IF"));
    };
    let t = |s: &Option<String>| s.as_deref().map(parse_time).transpose();
    let req = ringcap_client::RetrieveRequest {
        interface,
        filter: args.rest.join(" "),
        snaplen: ringcap_client::Snap::Bytes(args.snaplen.unwrap_or(262_144).clamp(1, 262_144)),
        after_ns: t(&args.after).map_err(Failure::usage)?,
        before_ns: t(&args.before).map_err(Failure::usage)?,
        max_bytes: args.max_bytes,
    };
    check_window(&Window {
        after: req.after_ns,
        before: req.before_ns,
    })?;
    // Written whole or not at all (a refusal leaves -w FILE as it was); an
    // answer the daemon cut at a whole record is kept, and said so.
    let (mut w, answer) = crate::answer::open(args.write.as_deref())?;
    // (--daemon without a path: the default socket, as for captures.)
    let path = match socket {
        "" => ringcap_client::default_socket(),
        s => PathBuf::from(s),
    };
    let started = Instant::now();
    let result = (|| {
        let client = ringcap_client::Client::connect(&path).map_err(crate::failure::refusal)?;
        let mut r = client.retrieve(req).map_err(crate::failure::refusal)?;
        match io::copy(&mut r.stream, &mut w).and_then(|_| w.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Err(Failure::output_closed()),
            Err(e) => return Err(Failure::runtime(format!("writing the output: {e}"))),
        }
        r.finish().map_err(crate::failure::refusal)
    })();
    drop(w);
    answer.finish(result.is_ok())?;
    let done = result?;
    if args.verbose {
        eprintln!(
            "ringcap: query: {} packets, {} bytes from {} files through ringcapd, {:.3} s",
            done.packets,
            done.bytes,
            done.files,
            started.elapsed().as_secs_f64()
        );
    }
    match done.cut {
        None => Ok(0),
        Some(why) => Err(Failure::runtime(format!(
            "query: the answer was cut after {} packets: {why}",
            done.packets
        ))),
    }
}

/// A capture's per-file hook: with indexing on, the indexer (each
/// published file indexed in a background thread at the lowest CPU
/// priority, see [`ringcap_index::background`]), returned too so that the
/// end of the capture can wait for it; with `no_index`, an observer that
/// only deletes the index a deleted file may have.
pub fn file_hook(no_index: bool) -> (FileHook, Option<Arc<Indexer>>) {
    if no_index {
        return (FileHook(Arc::new(RetireIndexes)), None);
    }
    let ix = Arc::new(Indexer::start(|| {
        // The capture comes first: lowest priority; failing to lower it
        // only costs the capture a little more CPU.
        let _ = ringcap_source::sys::set_thread_nice(19);
    }));
    (FileHook(ix.clone()), Some(ix))
}

/// For `ringcap repair`: rebuilds the index of a repaired file if it has
/// none or one that no longer fits; returns what was done, if anything.
pub fn repair_index(file: &Path) -> Option<String> {
    let why = match load_checked_index(file) {
        Ok(_) => return None,
        Err(Unusable::Missing) => "missing".to_string(),
        Err(e) => e.to_string(),
    };
    Some(match build_index(file) {
        Ok(r) => format!("index rebuilt ({why}): {} packets", r.packets),
        Err(ringcap_index::BuildError::Compressed(_)) => return None,
        Err(e) => format!("index not rebuilt ({why}): {e}"),
    })
}
