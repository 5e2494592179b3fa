//! `ringcap capture --daemon`: the same capture, asked of ringcapd by an
//! unprivileged user. The daemon holds the request to its policy and
//! delivers packets through a shared-memory ring; this side writes them
//! with the same sink as a local capture (files, rotation, `-w -`, pcapng),
//! and reports the daemon's counters with its own. Also `ringcap stats`.

use crate::cli::StatsArgs;
use crate::failure::{exit, Failure};
use crate::reporting::{print_now, Reporter, Signals};
use ringcap_client::{
    default_socket, Client, DumpRequest, OpenRequest, OutputFormat, Pump, Sample,
    Snap as SnapRequest, Stop, Tally,
};
use ringcap_engine::{
    Board, CaptureSpec, Counters, FileSink, Sampling, SinkInterface, Snap, SourceSpec,
};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// CAP_NET_RAW's bit in /proc/self/status's CapEff.
const CAP_NET_RAW: u32 = 13;
const CAP_SETUID: u32 = 7;

/// True if the process has capability `cap` (or cannot tell).
pub(crate) fn has_cap(cap: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return true;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_none_or(|caps| caps & (1 << cap) != 0)
}

fn has_net_raw() -> bool {
    has_cap(CAP_NET_RAW)
}

/// True if the process may change its user (-Z).
pub(crate) fn may_setuid() -> bool {
    has_cap(CAP_SETUID)
}

pub(crate) fn socket_path(arg: &str) -> PathBuf {
    if arg.is_empty() {
        default_socket()
    } else {
        PathBuf::from(arg)
    }
}

/// The daemon's socket if this capture goes through ringcapd: asked for
/// with --daemon, or a live capture by a user without CAP_NET_RAW when the
/// default socket exists (said in one line).
pub fn socket_for(args: &crate::cli::CaptureArgs, spec: &CaptureSpec) -> Option<PathBuf> {
    if let Some(d) = &args.daemon {
        return Some(socket_path(d));
    }
    if matches!(spec.source, SourceSpec::Live(_)) && !has_net_raw() {
        let s = default_socket();
        if s.exists() {
            eprintln!(
                "ringcap: no CAP_NET_RAW here: capturing through ringcapd at {}",
                s.display()
            );
            return Some(s);
        }
    }
    None
}

fn counters(c: &ringcap_client::SessionCounters, board: &Board, read: &Tally) -> Counters {
    let local = board.interface(0);
    Counters {
        packets_seen_by_interface: c.packets_seen_by_interface,
        packets_filter_accepted: c.packets_filter_accepted,
        packets_sampled_out: c.packets_sampled_out,
        packets_rate_limited: c.packets_rate_limited,
        packets_dropped_client: c.packets_dropped_client,
        packets_dropped_ring: c.packets_dropped_ring,
        packets_delivered: c.packets_delivered,
        packets_after_count: read.after_count,
        packets_written: local.packets_written,
        packets_dropped_writer: local.packets_dropped_writer,
        bytes_written: local.bytes_written,
        bytes_on_wire: read.wire_bytes,
        ..Counters::default()
    }
}

pub(crate) use crate::failure::refusal;

/// What the client does with the packets its session's loop
/// (`ringcap_client::Pump`) hands over: writes them (the loop keeps the
/// `-c` count), applying --anonymize/--mask here to what the daemon
/// delivered (its policy's own masks were applied before).
fn write_batch(
    batch: ringcap_client::Batch<'_>,
    encoder: &mut ringcap_engine::Encoder,
    transforms: &mut [Box<dyn ringcap_engine::Transform>],
) {
    match batch {
        // The daemon's compressed blocks go into the (compressed,
        // nanosecond) file as they are, neither decoded nor coded again.
        ringcap_client::Batch::Block(block, info) => {
            encoder.push_coded_block(block, info.records, info.first_ts);
        }
        // Nothing to do per packet here: records go to the file in runs.
        ringcap_client::Batch::Records(records) if transforms.is_empty() => {
            encoder.push_pcap_records(records.bytes);
        }
        ringcap_client::Batch::Records(records) => {
            for p in records.packets() {
                let kept = encoder.push(ringcap_engine::Record::whole(p.ts_ns, p.wire_len, p.data));
                if let Some(bytes) = kept {
                    // Sessions are Ethernet interfaces (LINKTYPE_ETHERNET).
                    ringcap_stages::transform::apply_all(transforms, 1, bytes, p.wire_len);
                }
            }
        }
    }
}

/// Runs a capture through the daemon at `socket`; returns the exit status.
#[allow(clippy::too_many_arguments)] // the capture's parts, each its own
pub fn capture(
    spec: CaptureSpec,
    socket: PathBuf,
    dump: bool,
    compress: bool,
    json: Option<File>,
    stats_interval: Duration,
    signals: &Signals,
    flow_args: &crate::flows::FlowArgs,
) -> Result<i32, Failure> {
    let SourceSpec::Live(live) = &spec.source else {
        return Err(Failure::usage(
            "--daemon captures interfaces; files (-r) are read without it",
        ));
    };
    let request = OpenRequest {
        interfaces: live.interfaces.clone(),
        filter: spec.filter.clone(),
        snaplen: match spec.snap {
            Snap::Bytes(n) => SnapRequest::Bytes(n),
            Snap::Headers { max } => SnapRequest::Headers { max },
        },
        sample: match spec.sampling {
            Sampling::All => None,
            Sampling::Packets { n, .. } => Some(Sample::Packets(n)),
            Sampling::Flows { n } => Some(Sample::Flows(n)),
        },
        duration: spec.duration,
        // The count is kept where packets are written: here, or by the
        // daemon for a dump.
        count: if dump { spec.count } else { None },
        dump: dump.then_some(DumpRequest {
            rotate_seconds: spec.sink.rotation.seconds,
            rotate_packets: spec.sink.rotation.packets,
            rotate_bytes: spec.sink.rotation.bytes,
        }),
        format: match spec.sink.format {
            ringcap_engine::RecordFormat::Pcapng => OutputFormat::Pcapng,
            _ => OutputFormat::Pcap,
        },
        inject_only: false,
        compress,
        // Packets too only when they are written (-w).
        flows: crate::daemon_flows::request(flow_args, &spec.sink.output)?,
    };
    if dump && request.flows.is_some() {
        return Err(Failure::usage(
            "--flows with --dump: flow records come to this process, dumps stay with ringcapd; \
             give one",
        ));
    }
    if dump && !spec.transforms.is_empty() {
        return Err(Failure::usage(
            "--anonymize/--mask with --dump: the daemon writes dump files, so hiding fields there is its policy's job; \
             capture to a file of your own (-w) to apply them here",
        ));
    }
    let client = Client::connect(&socket).map_err(refusal)?;
    let mut session = client.open(request).map_err(refusal)?;
    if dump {
        return run_dump(
            session,
            &live.interfaces,
            &spec.snap,
            json,
            stats_interval,
            signals,
        );
    }
    // The output once the daemon has said what it allows: the file's snap
    // length is the effective one (the daemon's cap), not the one asked for,
    // so the header says what the records are. A bad path ends the session
    // (dropping it closes the connection).
    let snaplen = match session.effective.snaplen {
        SnapRequest::Bytes(n) => n,
        SnapRequest::Headers { max } => max,
    };
    let name = format!("ringcapd:{}", live.interfaces.join(","));
    let board = Arc::new(Board::new(&[(name.clone(), 1)]));
    let FileSink {
        writer,
        mut encoder,
    } = FileSink::open(
        &spec.sink,
        vec![SinkInterface {
            name: name.clone(),
            linktype: 1,
            snaplen,
            filter: (!spec.filter.is_empty()).then(|| spec.filter.clone()),
            stats: Some(0),
        }],
        board.clone(),
    )
    .map_err(Failure::from)?;
    let e = session.effective.clone();
    eprintln!(
        "capturing on {} through ringcapd (session {}, grant {}, snaplen {}, sampling {}, framework filter {}){}",
        e.interfaces.join(", "),
        session.id,
        // Counted from 1, in file order, like `ringcapd --check`.
        u64::from(e.grant) + 1,
        snap_words(&e.snaplen, &spec.snap),
        sample_words(e.sample.as_ref()),
        if e.framework_filter.is_empty() {
            "none".to_string()
        } else {
            format!("\"{}\"", e.framework_filter)
        },
        if e.compress { ", compressed stream" } else { "" }
    );
    let flows = crate::daemon_flows::DaemonFlows::start(flow_args, &session)?;
    let began = Instant::now();
    let kept = spec.sink.output != ringcap_engine::OutputPlan::Discard;
    let mut reporter = Reporter::new(json, stats_interval);
    let mut transforms: Vec<_> = spec.transforms.iter().map(|f| f()).collect();
    let mut pump = Pump::new(spec.count);
    // The stream's blocks are what a compressed file with nanosecond
    // timestamps holds, when nothing is done here per packet and the
    // daemon codes the format version this ringcap writes.
    if session.compress_format() == Some(ringcap_compress::VERSION)
        && spec.sink.compress
        && spec.sink.format
            == ringcap_engine::RecordFormat::Pcap(ringcap_format::TsResolution::Nano)
        && transforms.is_empty()
        && spec.count.is_none()
    {
        pump = pump.blocks();
    }
    let flush = spec.sink.flush_interval;
    let end = loop {
        let write = |b: ringcap_client::Batch<'_>| write_batch(b, &mut encoder, &mut transforms);
        if let Some(end) = pump
            .turn(&mut session, Duration::from_millis(100), write)
            .map_err(refusal)?
        {
            break end;
        }
        // Flow records the loop met in the ring (and, for a session of flow
        // records only, the ring's flow chunks) go to the exporters.
        if let Some(f) = &flows {
            f.pump(&mut session)?;
        }
        if encoder.oldest().is_some_and(|t| t.elapsed() >= flush) {
            encoder.flush();
        }
        if signals.stop.load(Ordering::Relaxed) {
            pump.stop(Stop::Interrupted);
        }
        if let Some(f) = writer.failure() {
            pump.stop(Stop::Output(crate::words::write_failure(&f)));
        }
        if signals.hup.swap(false, Ordering::Relaxed) {
            writer.shared.request_rotation();
        }
        let (asked, every) = stats_due(signals, stats_interval);
        if let Some(c) = pump.poll_stats(&mut session, every) {
            let total = counters(&c, &board, &pump.tally);
            if asked {
                let now = [(name.clone(), total)];
                print_now(&now, &total, began.elapsed().as_secs_f64(), kept);
            }
            reporter.tick(|| {
                (
                    vec![(name.clone(), total)],
                    total,
                    writer.shared.current.lock().ok().and_then(|c| c.clone()),
                )
            });
        }
    };
    let flows_failed = match flows {
        Some(f) => f.finish(&mut session, &end.counters)?,
        None => false,
    };
    encoder.close();
    drop(encoder);
    let shared = writer.join();
    let total = counters(&end.counters, &board, &pump.tally);
    let seconds = began.elapsed().as_secs_f64();
    reporter.finish(&[(name, total)], &total, seconds, kept);
    eprintln!("ringcap: ringcapd ended the session: {}", end.reason);
    if let Some(f) = shared.failure.lock().ok().and_then(|f| f.clone()) {
        crate::reporting::report_failure(&crate::words::write_failure(&f), &total, kept);
        return Ok(exit::RUNTIME);
    }
    match end_status(&end) {
        0 if flows_failed => Ok(exit::RUNTIME),
        status => Ok(status),
    }
}

/// Whether SIGUSR1 asked for the counters (then they are asked of the
/// daemon at once, fresh), and how old the daemon's counters may be.
fn stats_due(signals: &Signals, interval: Duration) -> (bool, Duration) {
    if signals.info_asked() {
        (true, Duration::ZERO)
    } else {
        (false, interval.min(Duration::from_secs(1)))
    }
}

/// Exit status of a session's end: 0 as asked, else 1 (the reason was said).
fn end_status(end: &ringcap_client::End) -> i32 {
    if end.as_asked() {
        0
    } else {
        exit::RUNTIME
    }
}

/// The daemon's snap length in words, and whether the grant lowered the
/// one asked for (a cap is said, not left to be noticed in the file).
fn snap_words(given: &SnapRequest, asked: &Snap) -> String {
    let words = |s: &SnapRequest| match s {
        SnapRequest::Bytes(n) => format!("{n} bytes"),
        SnapRequest::Headers { max } => format!("headers (at most {max} bytes)"),
    };
    let capped = match (asked, given) {
        (Snap::Bytes(a), SnapRequest::Bytes(g)) => g < a,
        (Snap::Headers { max: a }, SnapRequest::Headers { max: g }) => g < a,
        (Snap::Headers { .. }, SnapRequest::Bytes(_)) => true,
        (Snap::Bytes(_), SnapRequest::Headers { .. }) => true,
    };
    if capped {
        format!("{}, the grant's cap", words(given))
    } else {
        words(given)
    }
}

/// The daemon's sampling in words.
fn sample_words(s: Option<&Sample>) -> String {
    match s {
        None => "none".into(),
        Some(Sample::Packets(n)) => format!("1 packet in {n}"),
        Some(Sample::Flows(n)) => format!("1 flow in {n}"),
    }
}

/// Options a capture through ringcapd cannot honour, refused with the
/// reason rather than ignored: the daemon owns the capture (its sockets,
/// rings, threads, timestamps, the interface's settings) and, for a dump,
/// the files (its quota decides what is kept). `--hook` is refused by the
/// caller (it needs root).
pub fn refuse_unsupported(args: &crate::cli::CaptureArgs) -> Result<(), Failure> {
    let mut no = Vec::new();
    if args.threads != 1 {
        no.push("--threads (ringcapd runs the capture's threads)");
    }
    if args.buffer.is_some() {
        no.push("-B (ringcapd sizes the kernel ring it shares)");
    }
    if args.tstamp != "host" {
        no.push("--tstamp adapter (ringcapd takes the kernel's timestamps)");
    }
    if args.fix_offloads {
        no.push("--fix-offloads (the interface's settings are the administrator's)");
    }
    if args.no_promiscuous {
        no.push("-p (the capture is shared: ringcapd sets the interface's mode)");
    }
    if args.zero_copy == "on" {
        no.push("--zero-copy on (the packets come through ringcapd's ring, not the kernel's)");
    }
    if args.sample.is_some() && args.sample_mode != "random" {
        no.push("--sample-mode count (ringcapd samples at random)");
    }
    if args.dump {
        let retention =
            args.max_files.is_some() || args.max_total.is_some() || args.min_free.is_some();
        if retention {
            no.push("-W/--max-total/--min-free with --dump (the grant's dump_quota decides what is kept)");
        }
        if args.post_rotate.is_some() {
            no.push("--post-rotate with --dump (ringcapd writes the files; fetch them with `ringcap dumps`)");
        }
        if args.align {
            no.push("--align with --dump");
        }
    }
    if no.is_empty() {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "through ringcapd these options cannot be honoured: {}; leave them out (or capture as root without --daemon)",
        no.join("; ")
    )))
}

/// `ringcap stats --daemon`: the daemon's sessions.
pub fn stats(args: &StatsArgs) -> Result<i32, Failure> {
    let socket = socket_path(args.daemon.as_deref().unwrap_or(""));
    let mut client = Client::connect(&socket).map_err(refusal)?;
    let sessions = client.sessions().map_err(refusal)?;
    if args.json {
        for s in &sessions {
            println!(
                "{}",
                serde_json::json!({
                    "session": s.session, "uid": s.uid, "interfaces": s.interfaces,
                    "filter": s.filter, "started_s": s.started_s,
                    "counters": {
                        "packets_seen_by_interface": s.counters.packets_seen_by_interface,
                        "packets_filter_accepted": s.counters.packets_filter_accepted,
                        "packets_sampled_out": s.counters.packets_sampled_out,
                        "packets_rate_limited": s.counters.packets_rate_limited,
                        "packets_dropped_ring": s.counters.packets_dropped_ring,
                        "packets_dropped_client": s.counters.packets_dropped_client,
                        "packets_delivered": s.counters.packets_delivered,
                        "bytes_delivered": s.counters.bytes_delivered,
                        "flows_delivered": s.counters.flows_delivered,
                        "flows_evicted": s.counters.flows_evicted,
                        "flows_dropped_client": s.counters.flows_dropped_client,
                        "packets_to_flows": s.counters.packets_to_flows,
                    }
                })
            );
        }
    } else {
        println!(
            "{:>8} {:>6} {:<16} {:>12} {:>12} {:>10} {:>10}  filter",
            "session", "uid", "interfaces", "accepted", "delivered", "drop ring", "drop cli"
        );
        for s in &sessions {
            let c = &s.counters;
            println!(
                "{:>8} {:>6} {:<16} {:>12} {:>12} {:>10} {:>10}  {}",
                s.session,
                s.uid,
                s.interfaces.join(","),
                c.packets_filter_accepted,
                c.packets_delivered,
                c.packets_dropped_ring,
                c.packets_dropped_client,
                s.filter
            );
        }
    }
    Ok(0)
}

fn session_counters(c: &ringcap_client::SessionCounters) -> Counters {
    Counters {
        packets_seen_by_interface: c.packets_seen_by_interface,
        packets_filter_accepted: c.packets_filter_accepted,
        packets_sampled_out: c.packets_sampled_out,
        packets_rate_limited: c.packets_rate_limited,
        packets_dropped_ring: c.packets_dropped_ring,
        packets_delivered: c.packets_delivered + c.packets_dropped_client,
        packets_written: c.packets_delivered,
        packets_dropped_writer: c.packets_dropped_client,
        bytes_on_wire: c.bytes_delivered,
        ..Counters::default()
    }
}

/// A daemon dump: ringcapd writes the files; this side prints their names
/// as they are published and the counters at the end.
fn run_dump(
    mut session: ringcap_client::Session,
    interfaces: &[String],
    asked: &Snap,
    json: Option<File>,
    stats_interval: Duration,
    signals: &Signals,
) -> Result<i32, Failure> {
    eprintln!(
        "capturing on {} through ringcapd into daemon dump files (session {}, grant {}, snaplen {})",
        interfaces.join(", "),
        session.id,
        u64::from(session.effective.grant) + 1,
        snap_words(&session.effective.snaplen, asked)
    );
    let name = format!("ringcapd:{}", interfaces.join(","));
    let began = Instant::now();
    let mut reporter = Reporter::new(json, stats_interval);
    // The ring carries nothing: the loop only watches for the end.
    let mut pump = Pump::new(None);
    let end = loop {
        std::thread::sleep(Duration::from_millis(100));
        for f in session.published() {
            println!("{f}");
        }
        if signals.stop.load(Ordering::Relaxed) {
            pump.stop(Stop::Interrupted);
        }
        if let Some(end) = pump.finish(&mut session, |_| {}).map_err(refusal)? {
            break end;
        }
        if signals.hup.swap(false, Ordering::Relaxed) {
            session.checkpoint().map_err(refusal)?;
        }
        let (asked, every) = stats_due(signals, stats_interval);
        if let Some(c) = pump.poll_stats(&mut session, every) {
            let total = session_counters(&c);
            if asked {
                let now = [(name.clone(), total)];
                print_now(&now, &total, began.elapsed().as_secs_f64(), true);
            }
            reporter.tick(|| (vec![(name.clone(), total)], total, None));
        }
    };
    for f in session.published() {
        println!("{f}");
    }
    let total = session_counters(&end.counters);
    // The daemon writes the dump's files.
    let seconds = began.elapsed().as_secs_f64();
    reporter.finish(&[(name, total)], &total, seconds, true);
    eprintln!("ringcap: ringcapd ended the session: {}", end.reason);
    Ok(end_status(&end))
}

/// `ringcap dumps`: list, fetch or delete your daemon dump files.
pub fn dumps(args: &crate::cli::DumpsArgs) -> Result<i32, Failure> {
    use crate::cli::DumpAction;
    let socket = socket_path(args.daemon.as_deref().unwrap_or(""));
    let mut client = Client::connect(&socket).map_err(refusal)?;
    match &args.action {
        DumpAction::List => {
            for f in client.list_dumps().map_err(refusal)? {
                println!("{}\t{}\t{}", f.name, f.bytes, f.modified_s);
            }
        }
        DumpAction::Fetch { name, output } => {
            let (mut file, bytes) = client.fetch_dump(name).map_err(refusal)?;
            let copied = match output.as_deref() {
                Some(p) if p == std::path::Path::new("-") => {
                    std::io::copy(&mut file, &mut std::io::stdout().lock())
                }
                other => {
                    let path = other
                        .map(std::path::Path::to_path_buf)
                        .unwrap_or_else(|| PathBuf::from(name));
                    let mut out = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(|e| {
                            Failure::usage(format!("cannot create {}: {e}", path.display()))
                        })?;
                    std::io::copy(&mut file, &mut out)
                }
            }
            .map_err(|e| Failure::runtime(format!("copying {name}: {e}")))?;
            if copied != bytes {
                eprintln!(
                    "ringcap: {name}: copied {copied} bytes of {bytes} (it changed meanwhile)"
                );
            }
        }
        DumpAction::Delete { name } => client.delete_dump(name).map_err(refusal)?,
    }
    Ok(0)
}
