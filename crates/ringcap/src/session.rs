//! `ringcap capture`: runs one engine capture and shows it the way tcpdump
//! users expect — a `capturing on` line, warnings, a status line on a
//! terminal, JSON counters on request, the final report and an exit status.
//! Signals stop (SIGINT, SIGTERM) or rotate (SIGHUP) the capture.

use crate::config::{self, Plan};
use crate::failure::{exit, Failure};
use crate::privileges;
use crate::reporting::{report_failure, Reporter, Signals};
use crossbeam_channel::Select;
use ringcap_engine::{Capture, ErrorKind, Event, OutputPlan, Started};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn print_event(e: &Event) {
    match e {
        Event::Warning(m) => eprintln!("ringcap: warning: {m}"),
        Event::Advice(r) => eprintln!("ringcap: warning: {}", crate::words::reason(r)),
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
        // Checked before any file is made: without the right to change
        // user, the drop failed after the first file was opened, and left
        // it hidden.
        Some(u) if !crate::daemon_client::may_setuid() => {
            return Err(Failure::usage(format!(
                "-Z {u}: becoming another user needs root (CAP_SETUID); run without -Z"
            )))
        }
        Some(u) => Some(privileges::lookup(u).map_err(Failure::usage)?),
        None => None,
    };
    spec.sink.owner = owner.map(|o| (o.uid, o.gid));
    // Each published file gets its index (crate ringcap-index) in the
    // background; the writer tells the indexer of each file it publishes
    // and deletes (the sink's per-file hook).
    let (files, indexer) = crate::query::file_hook(args.no_index);
    spec.sink.files = Some(files);
    let signals = Signals::install();
    if let Some(socket) = crate::daemon_client::socket_for(args, &spec) {
        if args.hook != "packet" {
            return Err(Failure::usage(format!(
                "--hook {} loads a BPF program, which needs root (CAP_BPF and CAP_NET_ADMIN); ringcapd captures with the packet hook only",
                args.hook
            )));
        }
        crate::daemon_client::refuse_unsupported(args)?;
        if args.writer_buffer.is_none() {
            spec.sink.writer_buffer_bytes =
                u64::from(crate::config::DAEMON_WRITER_BUFFER_MIB) << 20;
        }
        let ended = crate::daemon_client::capture(
            spec,
            socket,
            args.dump,
            args.compress,
            json,
            stats_interval,
            &signals,
            &args.flow,
        );
        if let Some(ix) = indexer {
            ix.finish();
        }
        return ended;
    }
    if args.compress {
        return Err(Failure::usage(
            "--compress asks ringcapd to compress the stream it sends: use it with --daemon",
        ));
    }
    // Flow records: the exporter starts first (its sockets and files are
    // opened before privileges are dropped), the stage goes into the spec.
    let flows = crate::flows::start(&args.flow, &mut spec)?;
    config::ring_takes_unused_writer_buffer(&mut spec, args);
    let kept = spec.sink.output != OutputPlan::Discard;
    let capture = Capture::start(spec).map_err(Failure::from)?;
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
    let began = std::time::Instant::now();
    let mut stopping = false;
    loop {
        // This thread waits for the capture's events, and for the next
        // interval record when there is somewhere to put it. Stops and
        // rotations reach the capture without it (above); the Finished
        // event ends the wait as soon as the capture is done.
        // SIGUSR1 wakes it too, for the counters now.
        let mut sel = Select::new();
        let events = sel.recv(capture.events());
        let info = sel.recv(&signals.info);
        let ready = if stopping || !reporter.active() {
            Some(sel.select())
        } else {
            sel.select_timeout(reporter.until_due().max(Duration::from_millis(1)))
                .ok()
        };
        match ready {
            Some(op) if op.index() == events => match op.recv(capture.events()) {
                Ok(Event::Finished) | Err(_) => break,
                Ok(e) => print_event(&e),
            },
            Some(op) if op.index() == info => {
                if op.recv(&signals.info).is_ok() {
                    let (per, total) = capture.counters();
                    let seconds = began.elapsed().as_secs_f64();
                    crate::reporting::print_now(&per, &total, seconds, kept);
                }
            }
            Some(_) | None => {}
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
        let read = ix.read_back();
        let files = |n: usize| match n {
            1 => "1 file was".to_string(),
            n => format!("{n} files were"),
        };
        if read.untapped > 0 {
            eprintln!(
                "ringcap: note: {} read back to be indexed (recovered from an earlier run, or cut after a failed write)",
                files(read.untapped)
            );
        }
        if read.set_aside > 0 {
            eprintln!(
                "ringcap: note: {} read back to be indexed (published faster than the indexer took them: the keys taken while they were written are kept for a few waiting files only)",
                files(read.set_aside)
            );
        }
    }
    // Every capture thread has ended: the flows they left are queued, and
    // exported before the final record counts them.
    let flows_failed = crate::flows::finish(flows);
    reporter.finish(&outcome.per_input, &outcome.total, outcome.seconds, kept);
    match outcome.error {
        None if flows_failed => Ok(exit::RUNTIME),
        None => Ok(0),
        Some(e) if e.kind == ErrorKind::Usage => {
            eprintln!("ringcap: error: {}", crate::words::error(&e));
            Ok(exit::USAGE)
        }
        Some(e) => {
            report_failure(&crate::words::error(&e), &outcome.total, kept);
            Ok(exit::RUNTIME)
        }
    }
}

/// The tcpdump name of a link type.
pub fn linktype_name(lt: u32) -> &'static str {
    match lt {
        1 => "EN10MB (Ethernet)",
        101 => "RAW (raw IP)",
        _ => "other",
    }
}
