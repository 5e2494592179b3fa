//! `ringcap inject`: sends the frames of a capture file at their relative
//! times — directly as root (`ringcap_inject`'s scheduler), or through
//! ringcapd, which holds each frame to the user's grant — and reports what
//! became of each: one JSON line per frame with `--report`, and a summary
//! (sent / refused by rule / missed / failed, which fields ringcapd's
//! guard rewrote, and how far from the asked time the frames left:
//! median, p99, max).

use crate::cli::InjectArgs;
use crate::daemon_client::{refusal, socket_path};
use crate::failure::{exit, Failure};
use ringcap_client::{Client, OpenRequest};
use ringcap_inject::{now_ns, Job, Sender};
use ringcap_proto::validate::MAX_INJECT_BATCH;
use ringcap_proto::{InjectFrame, InjectReport, InjectStatus};
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

/// Frames submitted but not yet reported, at most (the daemon queues 4096).
const IN_FLIGHT: usize = 2048;

/// `ringcap inject`.
pub fn run(a: &InjectArgs) -> Result<i32, Failure> {
    let frames = read_frames(a)?;
    if frames.is_empty() {
        return Err(Failure::usage(format!(
            "{} holds no frames",
            a.read.display()
        )));
    }
    let mut report_file = match &a.report {
        Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p).map_err(
            |e| Failure::system(format!("cannot create {}: {e}", p.display())),
        )?)),
        None => None,
    };
    let mut reports: Vec<InjectReport> = Vec::with_capacity(frames.len());
    let mut on_report = |r: InjectReport| -> Result<(), Failure> {
        if let Some(f) = &mut report_file {
            let line = serde_json::to_string(&r).map_err(|e| Failure::runtime(e.to_string()))?;
            writeln!(f, "{line}").map_err(|e| Failure::system(format!("report: {e}")))?;
        }
        reports.push(r);
        Ok(())
    };
    match &a.daemon {
        Some(sock) => via_daemon(a, &socket_path(sock), frames, &mut on_report)?,
        None => local(a, frames, &mut on_report)?,
    }
    if let Some(f) = &mut report_file {
        f.flush()
            .map_err(|e| Failure::system(format!("report: {e}")))?;
    }
    eprintln!("{}", summary(&reports));
    let all_sent = reports.iter().all(|r| r.status == InjectStatus::Sent);
    Ok(if all_sent { 0 } else { exit::RUNTIME })
}

/// The file's frames as requests: tag = index, times relative to the first
/// frame's, from `--start`.
fn read_frames(a: &InjectArgs) -> Result<Vec<InjectFrame>, Failure> {
    let file = std::fs::File::open(&a.read)
        .map_err(|e| Failure::usage(format!("cannot open {}: {e}", a.read.display())))?;
    let mut reader = ringcap_format::read::Reader::new(std::io::BufReader::new(file))
        .map_err(|e| Failure::usage(format!("{}: {e}", a.read.display())))?;
    let start = start_ns(&a.start)?;
    if !(0.0..=60_000.0).contains(&a.tolerance) {
        return Err(Failure::usage("--tolerance: 0 to 60000 milliseconds"));
    }
    let tolerance_ns = (a.tolerance * 1e6) as u64;
    let mut out = Vec::new();
    let mut first: Option<u64> = None;
    while let Some(p) = reader
        .next_packet()
        .map_err(|e| Failure::usage(format!("{}: {e}", a.read.display())))?
    {
        let t0 = *first.get_or_insert(p.ts_ns);
        out.push(InjectFrame {
            tag: out.len() as u64,
            at_ns: start + p.ts_ns.saturating_sub(t0),
            tolerance_ns,
            data: p.data.to_vec(),
        });
    }
    Ok(out)
}

fn start_ns(s: &str) -> Result<u64, Failure> {
    let bad = || {
        Failure::usage(format!(
            "--start {s:?}: give +SECONDS from now or seconds since the epoch"
        ))
    };
    if let Some(rel) = s.strip_prefix('+') {
        let secs: f64 = rel.parse().map_err(|_| bad())?;
        if !(0.0..=86_400.0).contains(&secs) {
            return Err(bad());
        }
        Ok(now_ns() + (secs * 1e9) as u64)
    } else {
        let secs: f64 = s.parse().map_err(|_| bad())?;
        if !(1.0..=1e10).contains(&secs) {
            return Err(bad());
        }
        Ok((secs * 1e9) as u64)
    }
}

/// As root: our own scheduler on the interface.
fn local(
    a: &InjectArgs,
    frames: Vec<InjectFrame>,
    on_report: &mut dyn FnMut(InjectReport) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let sender = Sender::start(&a.interface, IN_FLIGHT).map_err(Failure::system)?;
    let n = frames.len();
    let mut got = 0;
    let mut pending = frames.into_iter().peekable();
    while got < n {
        while let Some(f) = pending.peek() {
            let job = Job {
                tag: f.tag,
                at_ns: f.at_ns,
                tolerance_ns: f.tolerance_ns,
                frame: f.data.clone(),
                // As root nothing holds the frame to a grant.
                rewritten: Default::default(),
            };
            if sender.submit(job).is_err() {
                break;
            }
            pending.next();
        }
        let rs = sender.take_reports(usize::MAX);
        if rs.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
        for r in rs {
            got += 1;
            on_report(r)?;
        }
    }
    Ok(())
}

/// Through ringcapd: an inject-only session; the grant decides.
fn via_daemon(
    a: &InjectArgs,
    socket: &std::path::Path,
    frames: Vec<InjectFrame>,
    on_report: &mut dyn FnMut(InjectReport) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let client = Client::connect(socket).map_err(refusal)?;
    let mut session = client
        .open(OpenRequest::inject_only(&a.interface))
        .map_err(refusal)?;
    let n = frames.len();
    let (mut sent, mut got) = (0usize, 0usize);
    let mut pending = frames.into_iter();
    while got < n {
        // Keep the daemon's queue fed, never beyond IN_FLIGHT frames.
        while sent < n && sent - got < IN_FLIGHT {
            let batch: Vec<InjectFrame> = pending
                .by_ref()
                .take(MAX_INJECT_BATCH.min(IN_FLIGHT - (sent - got)))
                .collect();
            sent += batch.len();
            session.inject(batch).map_err(refusal)?;
        }
        let rs = session.inject_reports().map_err(refusal)?;
        if rs.is_empty() {
            if let Some((reason, _)) = session.ended() {
                return Err(Failure::runtime(format!(
                    "the daemon ended the session: {reason}"
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for r in rs {
            got += 1;
            on_report(r)?;
        }
    }
    let _ = session.close();
    Ok(())
}

/// "N sent, ..., send-time error median/p99/max".
fn summary(reports: &[InjectReport]) -> String {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    let mut errors: Vec<i64> = Vec::new();
    for r in reports {
        let key = match r.status {
            InjectStatus::Sent => "sent".to_string(),
            InjectStatus::Missed => "missed".to_string(),
            InjectStatus::Failed => "failed".to_string(),
            InjectStatus::Refused => {
                let rule = r
                    .reason
                    .as_deref()
                    .and_then(|t| t.split(':').next())
                    .unwrap_or("?");
                format!("refused ({rule})")
            }
        };
        *by.entry(key).or_default() += 1;
        if let Some(s) = r.sent_ns {
            errors.push(s as i64 - r.requested_ns as i64);
        }
    }
    let counts: Vec<String> = by.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let mut line = format!("{} frames: {}", reports.len(), counts.join(", "));
    // Frames the grant changed: how many, and which fields.
    let changed = reports.iter().filter(|r| !r.rewritten.is_empty()).count();
    if changed > 0 {
        let fields: std::collections::BTreeSet<&str> = reports
            .iter()
            .flat_map(|r| r.rewritten.iter().map(String::as_str))
            .collect();
        let names: Vec<&str> = fields.into_iter().collect();
        line.push_str(&format!(
            "; {changed} rewritten by the grant ({}: not settable)",
            names.join(", ")
        ));
    }
    if !errors.is_empty() {
        errors.sort_unstable();
        let q = |p: f64| errors[((errors.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
        line.push_str(&format!(
            "; sent - requested: min {:.1} µs, median {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            q(0.0),
            q(0.5),
            q(0.99),
            q(1.0)
        ));
    }
    line
}
