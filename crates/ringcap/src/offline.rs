//! Re-processing capture files (`-r`) through the same stages and sink.
//!
//! Every stage runs in user space here: the filter in libpcap's interpreter
//! (the same program the kernel would run), sampling and truncation as live.
//! The source waits for the writer instead of dropping: nothing read is lost.

use crate::config::Plan;
use crate::failure::{exit, Failure};
use crate::session::{Reporter, Signals, SinkSetup};
use ringcap_format::read::Reader;
use ringcap_sink::{Encoder, SinkInterface};
use ringcap_stages::filter::Target;
use ringcap_stages::UserSampler;
use ringcap_stats::{Board, CaptureCounts};
use std::fs::File;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Output buffer per input file in offline mode, in MiB.
const OFFLINE_BUFFER_MIB: u32 = 32;

fn open(path: &Path) -> Result<Reader<File>, Failure> {
    let f = File::open(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    Reader::new(f).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

/// The link type of a file's first packet's interface (Ethernet if it has none).
fn first_linktype(path: &Path) -> Result<u32, Failure> {
    let mut r = open(path)?;
    if let ringcap_format::read::FileFormat::Pcap { .. } = r.format() {
        return Ok(r.interfaces().first().map(|i| i.linktype).unwrap_or(1));
    }
    let iface = match r.next_packet() {
        Ok(Some(p)) => Some(p.interface),
        _ => None,
    };
    Ok(iface
        .and_then(|i| r.interfaces().get(i))
        .or_else(|| r.interfaces().first())
        .map(|i| i.linktype)
        .unwrap_or(1))
}

/// Runs an offline capture; returns the exit status.
pub fn run(
    args: &crate::cli::CaptureArgs,
    plan: &Plan,
    command_line: String,
    signals: &Signals,
) -> Result<i32, Failure> {
    let mut linktypes = Vec::new();
    for path in &args.read {
        linktypes.push(first_linktype(path)?);
    }
    if matches!(plan.format, ringcap_sink::RecordFormat::Pcap(_))
        && linktypes.iter().any(|l| *l != linktypes[0])
    {
        return Err(Failure::usage("the input files have different link types, which one pcap file cannot hold: use --format pcapng"));
    }
    let snaplen = plan.snap.kernel_snaplen();
    let mut programs = Vec::new();
    for lt in &linktypes {
        programs.push(
            ringcap_stages::compile(&plan.filter, *lt as i32, snaplen, Target::Offline)
                .map_err(|e| Failure::usage(e.to_string()))?,
        );
    }
    let names: Vec<String> = args.read.iter().map(|p| p.display().to_string()).collect();
    let board = Arc::new(Board::new(
        &names.iter().map(|n| (n.clone(), 1)).collect::<Vec<_>>(),
    ));
    let sink_ifaces = names
        .iter()
        .zip(&linktypes)
        .map(|(n, lt)| SinkInterface {
            name: n.clone(),
            linktype: *lt,
            snaplen: plan.snap.snaplen(),
            filter: (!plan.filter.is_empty()).then(|| plan.filter.clone()),
        })
        .collect();
    let producers: Vec<usize> = (0..names.len()).collect();
    let SinkSetup {
        writer,
        full,
        pools,
    } = SinkSetup::start(
        // Reading a file waits for free buffers instead of dropping, so a
        // few batches are enough; a big pool only costs time to set up.
        &Plan {
            writer_buffer_mib: plan.writer_buffer_mib.min(OFFLINE_BUFFER_MIB),
            ..plan.clone()
        },
        sink_ifaces,
        &producers,
        command_line,
        board.clone(),
        None,
        false,
    )?;
    let mut reporter = Reporter::new(
        board.clone(),
        args.stats_json.as_deref(),
        plan.stats_interval,
    )?;
    let mut budget = plan.count.unwrap_or(u64::MAX);
    let mut input_error = None;
    for (i, (path, free)) in args.read.iter().zip(pools).enumerate() {
        let mut encoder = Encoder::new(plan.format, i as u32, free, full.clone());
        encoder.set_blocking(true);
        encoder.set_placement(writer.placement.clone(), i);
        let mut sampler = UserSampler::offline(plan.sampling, 0x5eed ^ i as u64);
        let program = &programs[i];
        let mut counts = CaptureCounts::default();
        let mut seen = 0u64;
        let mut reader = open(path)?;
        loop {
            let p = match reader.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => {
                    input_error = Some(format!("{}: {e}", path.display()));
                    break;
                }
            };
            seen += 1;
            let keep = program.run(p.data, p.wire_len) as usize;
            if keep > 0 {
                counts.ring_accepted += 1;
                if !sampler.keep(p.data) {
                    counts.sampled_out += 1;
                } else {
                    let caplen = plan.snap.keep_len(p.data, 0);
                    counts.delivered += 1;
                    counts.bytes_on_wire += u64::from(p.wire_len);
                    encoder.push(p.ts_ns, p.wire_len, p.data, None, caplen);
                    budget -= 1;
                }
            }
            if seen.is_multiple_of(8192) {
                publish(&board, i, seen, &counts, &encoder);
                reporter.tick(None);
                if signals.stop.load(Ordering::Relaxed) || writer.failure().is_some() {
                    break;
                }
            }
            if budget == 0 {
                break;
            }
        }
        encoder.close();
        publish(&board, i, seen, &counts, &encoder);
        if input_error.is_some()
            || budget == 0
            || signals.stop.load(Ordering::Relaxed)
            || writer.failure().is_some()
        {
            break;
        }
    }
    drop(full);
    let shared = writer.join();
    if let Ok(mut l) = shared.log.lock() {
        for m in l.drain(..) {
            eprintln!("ringcap: {m}");
        }
    }
    let total = reporter.finish();
    if let Some(f) = shared.failure.lock().ok().and_then(|f| f.clone()) {
        crate::session::report_failure(&f, &total);
        return Ok(exit::RUNTIME);
    }
    if let Some(e) = input_error {
        eprintln!("ringcap: error: {e} (the packets before it were written)");
        return Ok(exit::USAGE);
    }
    Ok(0)
}

fn publish(board: &Board, i: usize, seen: u64, counts: &CaptureCounts, encoder: &Encoder) {
    let mut c = *counts;
    c.dropped_writer = encoder.dropped;
    board.interfaces[i].threads[0].publish(&c);
    board.set_interface_now(i, seen, 0);
}
