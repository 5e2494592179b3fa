//! `ringcap capture`: runs one engine capture and shows it the way tcpdump
//! users expect — a `capturing on` line, warnings, a status line on a
//! terminal, JSON counters on request, the final report and an exit status.
//! Signals stop (SIGINT, SIGTERM) or rotate (SIGHUP) the capture.

use crate::config::{self, Plan};
use crate::failure::{exit, Failure};
use crate::privileges;
use crossbeam_channel::RecvTimeoutError;
use ringcap_engine::{Capture, Counters, ErrorKind, Event, Started};
use ringcap_stats::report;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Signals as flags: SIGINT/SIGTERM stop, SIGHUP rotates.
pub struct Signals {
    /// Stop requested.
    pub stop: Arc<AtomicBool>,
    /// Rotation requested.
    pub hup: Arc<AtomicBool>,
}

impl Signals {
    /// Installs the handlers.
    pub fn install() -> Signals {
        let stop = Arc::new(AtomicBool::new(false));
        let hup = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register(sig, stop.clone());
        }
        let _ = signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone());
        Signals { stop, hup }
    }
}

/// Reporting while the capture runs.
pub struct Reporter {
    started: Instant,
    last: Instant,
    last_total: Counters,
    json: Option<File>,
    tty: bool,
    interval: Duration,
    /// The flow stage's counters (`--flows`), in every JSON record.
    flows: Option<std::sync::Arc<ringcap_flow::FlowStats>>,
}

impl Reporter {
    /// A reporter writing JSON records to `json` (already open).
    pub fn new(json: Option<File>, interval: Duration) -> Reporter {
        Reporter {
            started: Instant::now(),
            last: Instant::now(),
            last_total: Counters::default(),
            json,
            tty: std::io::stderr().is_terminal(),
            interval,
            flows: None,
        }
    }

    /// Adds the flow stage's counters to the JSON records (`"flows"`).
    pub fn with_flows(mut self, s: Option<std::sync::Arc<ringcap_flow::FlowStats>>) -> Reporter {
        self.flows = s;
        self
    }

    /// Time until the next interval record is due.
    pub fn until_due(&self) -> Duration {
        self.interval.saturating_sub(self.last.elapsed())
    }

    /// True when interval records go somewhere (a status line on a
    /// terminal, `--stats-json`): otherwise nothing needs the counters
    /// before the end.
    pub fn active(&self) -> bool {
        self.tty || self.json.is_some()
    }

    /// Emits an interval record if one is due (and goes somewhere), with
    /// the counters `now` gives.
    pub fn tick(
        &mut self,
        now: impl FnOnce() -> (Vec<(String, Counters)>, Counters, Option<String>),
    ) {
        if !self.active() || !self.until_due().is_zero() {
            return;
        }
        let (per, total, file) = now();
        if self.tty {
            let line = report::status_line(
                &total,
                &self.last_total,
                self.last.elapsed().as_secs_f64(),
                file.as_deref(),
            );
            eprint!("\r\x1b[K{line}");
        }
        self.write_json(&per, &total, false, file.as_deref());
        self.last = Instant::now();
        self.last_total = total;
    }

    fn write_json(
        &mut self,
        per: &[(String, Counters)],
        total: &Counters,
        is_final: bool,
        file: Option<&str>,
    ) {
        if let Some(f) = self.json.as_mut() {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            let mut line = report::json_line(
                now,
                self.started.elapsed().as_secs_f64(),
                is_final,
                per,
                total,
                file,
            );
            if let Some(s) = &self.flows {
                crate::flows::add_json(&mut line, s);
            }
            let _ = writeln!(f, "{line}");
        }
    }

    /// The final JSON record and report.
    pub fn finish(mut self, per: &[(String, Counters)], total: &Counters, seconds: f64) {
        if self.tty {
            eprintln!();
        }
        self.write_json(per, total, true, None);
        eprint!("{}", report::final_report(per, total, seconds));
    }
}

fn print_event(e: &Event) {
    match e {
        Event::Warning(m) => eprintln!("ringcap: warning: {m}"),
        Event::Notice(m) => eprintln!("ringcap: {m}"),
        // Said once, with the counts, when the capture has ended.
        Event::Error(_) | Event::FileCompleted(_) | Event::Finished => {}
    }
}

fn capturing_on(s: &Started) -> String {
    format!(
        "capturing on {} (link-type {}, snaplen {}, {} thread{} per interface, ring {} MiB per interface)",
        s.inputs.join(", "),
        linktype_name(s.linktype),
        match s.snap {
            ringcap_engine::Snap::Bytes(n) => n.to_string(),
            ringcap_engine::Snap::Headers { max } => format!("headers (max {max})"),
        },
        s.threads,
        if s.threads == 1 { "" } else { "s" },
        s.ring_bytes >> 20
    )
}

/// `ringcap capture`: returns the exit status.
pub fn capture(args: &crate::cli::CaptureArgs, command_line: String) -> Result<i32, Failure> {
    let Plan {
        mut spec,
        stats_json,
        stats_interval,
        user,
    } = config::plan(args, command_line)?;
    // Every output is opened, and every name checked, before anything starts
    // (and before privileges are dropped).
    let json = stats_json
        .as_deref()
        .map(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| {
                    Failure::usage(format!("cannot open --stats-json {}: {e}", p.display()))
                })
        })
        .transpose()?;
    let owner = match &user {
        Some(u) => Some(privileges::lookup(u).map_err(Failure::usage)?),
        None => None,
    };
    spec.sink.owner = owner.map(|o| (o.uid, o.gid));
    let signals = Signals::install();
    if let Some(socket) = crate::daemon_client::socket_for(args, &spec) {
        if !args.flow.flows.is_empty() {
            return Err(Failure::usage(
                "--flows is not available through ringcapd yet: capture as root (or with CAP_NET_RAW), or read files with -r",
            ));
        }
        if args.hook != "packet" {
            return Err(Failure::usage(format!(
                "--hook {} loads a BPF program, which needs root (CAP_BPF and CAP_NET_ADMIN); ringcapd captures with the packet hook only",
                args.hook
            )));
        }
        if args.writer_buffer.is_none() {
            spec.sink.writer_buffer_bytes =
                u64::from(crate::config::DAEMON_WRITER_BUFFER_MIB) << 20;
        }
        return crate::daemon_client::capture(
            spec,
            socket,
            args.dump,
            args.compress,
            json,
            stats_interval,
            &signals,
        );
    }
    if args.compress {
        return Err(Failure::usage(
            "--compress asks ringcapd to compress the stream it sends: use it with --daemon",
        ));
    }
    // Flow records: the exporter starts first (its sockets and files are
    // opened before privileges are dropped), the stage goes into the spec.
    let flows = crate::flows::start(&args.flow, &mut spec)?;
    let capture = Capture::start(spec).map_err(Failure::from)?;
    // Each published file gets its index (crate ringcap-index) in the background.
    let indexer = (!args.no_index).then(crate::query::Indexer::start);
    let published = |e: &Event| {
        if let (Some(ix), Event::FileCompleted(p)) = (&indexer, e) {
            ix.published(p);
        }
    };
    // From now on the signals reach the capture directly: a stop sets the
    // flag its threads look at between ring blocks and rings the bell that
    // wakes whichever of them waits (nothing in the capture, nor this
    // thread, wakes on a timer to look at flags), and SIGHUP rings the
    // capture's rotation bell.
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, capture.stop_flag());
        if let Ok(fd) = capture.stop_fd() {
            let _ = signal_hook::low_level::pipe::register(sig, fd);
        }
    }
    if let Ok(fd) = capture.rotate_fd() {
        let _ = signal_hook::low_level::pipe::register(signal_hook::consts::SIGHUP, fd);
    }
    // Signals that came before.
    if signals.stop.load(Ordering::Relaxed) {
        capture.stop();
    }
    if signals.hup.swap(false, Ordering::Relaxed) {
        capture.rotate_now();
    }
    for e in capture.events().try_iter() {
        published(&e);
        print_event(&e);
    }
    if let Some(ids) = owner {
        if let Err(e) = privileges::drop_to(ids) {
            capture.stop();
            let _ = capture.join();
            return Err(Failure::system(format!(
                "dropping privileges to {}: {e}",
                user.as_deref().unwrap_or("")
            )));
        }
    }
    if capture.started().live {
        eprintln!("{}", capturing_on(capture.started()));
    }
    let mut reporter =
        Reporter::new(json, stats_interval).with_flows(flows.as_ref().map(|e| e.stats()));
    let mut stopping = false;
    loop {
        // This thread waits for the capture's events, and for the next
        // interval record when there is somewhere to put it. Stops and
        // rotations reach the capture without it (above); the Finished
        // event ends the wait as soon as the capture is done.
        let event = if stopping || !reporter.active() {
            capture
                .events()
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            capture
                .events()
                .recv_timeout(reporter.until_due().max(Duration::from_millis(1)))
        };
        match event {
            Ok(Event::Finished) | Err(RecvTimeoutError::Disconnected) => break,
            Ok(e) => {
                published(&e);
                print_event(&e)
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if !stopping && signals.stop.load(Ordering::Relaxed) {
            // No interval records while the capture drains.
            stopping = true;
            capture.stop();
        }
        if !stopping {
            reporter.tick(|| {
                let (per, total) = capture.counters();
                (per, total, capture.current_file())
            });
        }
    }
    let outcome = capture.join();
    if let Some(ix) = indexer {
        ix.finish();
    }
    // Every capture thread has ended: the flows they left are queued, and
    // exported before the final record counts them.
    crate::flows::finish(flows);
    reporter.finish(&outcome.per_input, &outcome.total, outcome.seconds);
    match outcome.error {
        None => Ok(0),
        Some(e) if e.kind == ErrorKind::Usage => {
            eprintln!("ringcap: error: {e}");
            Ok(exit::USAGE)
        }
        Some(e) => {
            report_failure(&e.message, &outcome.total);
            Ok(exit::RUNTIME)
        }
    }
}

/// Prints why the capture failed and how many packets did not make it.
pub fn report_failure(message: &str, total: &Counters) {
    eprintln!("ringcap: error: {message}");
    eprintln!(
        "ringcap: {} packets could not be written ({} were)",
        total.packets_dropped_writer, total.packets_written
    );
}

/// The tcpdump name of a link type.
pub fn linktype_name(lt: u32) -> &'static str {
    match lt {
        1 => "EN10MB (Ethernet)",
        101 => "RAW (raw IP)",
        _ => "other",
    }
}
