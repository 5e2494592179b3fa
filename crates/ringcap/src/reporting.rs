//! What a running capture shows while it runs and when it ends, for both
//! ways `ringcap capture` runs (its own engine capture, `session`, or a
//! session of ringcapd, `daemon_client`): signals as flags, the status
//! line, JSON counters, the final report, the failure message.

use crossbeam_channel::Receiver;
use ringcap_engine::Counters;
use ringcap_stats::report;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Signals as flags: SIGINT/SIGTERM stop, SIGHUP rotates; SIGUSR1 asks
/// for the counters now, as it does of tcpdump (whose users send it), and
/// SIGUSR2 (tcpdump: flush the output) is taken and does nothing more, the
/// writer flushing every 50-200 ms on its own. Left to their default
/// action, both killed the capture at once: no drain, packets in the ring
/// and the writer's buffer lost, the file left to `ringcap repair`.
pub struct Signals {
    /// Stop requested.
    pub stop: Arc<AtomicBool>,
    /// Rotation requested.
    pub hup: Arc<AtomicBool>,
    /// One message per SIGUSR1 (several pending may come as one), from a
    /// thread that waits for it: a loop that blocks can wait on this too.
    pub info: Receiver<()>,
}

impl Signals {
    /// Installs the handlers.
    pub fn install() -> Signals {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
        let stop = Arc::new(AtomicBool::new(false));
        let hup = Arc::new(AtomicBool::new(false));
        for sig in [SIGINT, SIGTERM] {
            let _ = signal_hook::flag::register(sig, stop.clone());
        }
        let _ = signal_hook::flag::register(SIGHUP, hup.clone());
        let (tx, info) = crossbeam_channel::bounded(1);
        if let Ok(mut usr) = signal_hook::iterator::Signals::new([SIGUSR1, SIGUSR2]) {
            let _ = std::thread::Builder::new()
                .name("ringcap-signals".into())
                .spawn(move || {
                    for sig in usr.forever() {
                        if sig == SIGUSR1 {
                            let _ = tx.try_send(());
                        }
                    }
                });
        }
        Signals { stop, hup, info }
    }

    /// True (once) if SIGUSR1 came since the last call.
    pub fn info_asked(&self) -> bool {
        self.info.try_recv().is_ok()
    }
}

/// The counters now, for SIGUSR1: the final report's words, on stderr.
///
/// Written with one `write` so that a reader of the log (and a message of
/// another thread) never finds half of it: `eprint!` wrote the heading and
/// the report in separate writes.
pub fn print_now(per: &[(String, Counters)], total: &Counters, seconds: f64, kept: bool) {
    let mut text = format!(
        "ringcap: counters now (SIGUSR1):\n{}",
        report::final_report(per, total, seconds, kept)
    );
    // A capture thread hands a partly filled batch to the writer after
    // --flush-interval at the latest: until then "written" lags
    // "delivered" (at the end they add up).
    let on_the_way = total
        .packets_delivered
        .saturating_sub(total.packets_written + total.packets_dropped_writer);
    if on_the_way > 0 {
        text.push_str(&format!(
            "ringcap: {on_the_way} packets delivered are on their way to the writer (handed over within --flush-interval)\n"
        ));
    }
    // Nothing to do if stderr is gone: the capture goes on.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
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

    /// The final JSON record and report; `kept`: the packets had somewhere
    /// to go (see [`report::final_report`]).
    pub fn finish(
        mut self,
        per: &[(String, Counters)],
        total: &Counters,
        seconds: f64,
        kept: bool,
    ) {
        if self.tty {
            eprintln!();
        }
        self.write_json(per, total, true, None);
        eprint!("{}", report::final_report(per, total, seconds, kept));
    }
}

/// Prints why the capture failed and how many packets did not make it.
pub fn report_failure(message: &str, total: &Counters, kept: bool) {
    eprintln!("ringcap: error: {message}");
    if !kept {
        // Nothing was to be written.
    } else if total.packets_dropped_writer > 0 {
        eprintln!(
            "ringcap: {} packets could not be written ({} were)",
            total.packets_dropped_writer, total.packets_written
        );
    } else {
        eprintln!(
            "ringcap: the {} packets before it were written",
            total.packets_written
        );
    }
}
