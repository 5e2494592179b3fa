//! Starting an offline capture of files (`-r`).

use super::setup::*;
use super::*;
use crate::source::file::{self, FileSource};
use crate::source::SourceError;
use crate::worker::Worker;
use ringcap_sink::{Encoder, SinkInterface};
use ringcap_stages::filter::Target;
use ringcap_stages::{CheckedProgram, Program, UserSampler};
use std::path::PathBuf;

/// An offline capture: the files one after another on one thread, each
/// with its own interfaces and filter programs (one per link type).
pub(super) fn start(
    spec: &CaptureSpec,
    paths: &[PathBuf],
    bells: &Bells,
    budget: &Option<Arc<AtomicU64>>,
) -> Result<Launch, EngineError> {
    let stop = &bells.stop;
    if paths.is_empty() {
        return Err(EngineError::usage("give capture files to read"));
    }
    // Every input's interfaces, before anything is written: each gets its
    // own output interface (pcapng) and its own compiled filter.
    let mut inputs = Vec::new();
    for path in paths {
        let ifaces = file::interfaces(path).map_err(EngineError::usage)?;
        inputs.push(ifaces);
    }
    let all_linktypes: Vec<u32> = inputs.iter().flatten().map(|i| i.linktype).collect();
    let first = all_linktypes.first().copied().unwrap_or(1);
    one_linktype_for_pcap(spec, &all_linktypes, true)?;
    // One program per link type, shared by the interfaces that have it.
    let mut compiled: Vec<(u32, Program)> = Vec::new();
    for lt in &all_linktypes {
        if !compiled.iter().any(|(l, _)| l == lt) {
            compiled.push((*lt, compile(spec, *lt, Target::Offline)?));
        }
    }
    let program_for = |lt: u32| {
        compiled
            .iter()
            .find(|(l, _)| *l == lt)
            .map(|(_, p)| p.clone())
    };
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let board = Arc::new(Board::new(
        &names.iter().map(|n| (n.clone(), 1)).collect::<Vec<_>>(),
    ));
    let mut sink_ifaces = Vec::new();
    let mut bases = Vec::new();
    for (f, ifaces) in inputs.iter().enumerate() {
        bases.push(sink_ifaces.len() as u32);
        if ifaces.is_empty() {
            // A file with no interface (no packets): still one entry, so
            // the output describes it.
            sink_ifaces.push(SinkInterface {
                name: names[f].clone(),
                linktype: first,
                snaplen: spec.snap.snaplen(),
                filter: filter_text(spec),
                stats: Some(f),
            });
        }
        for (k, i) in ifaces.iter().enumerate() {
            let name = match (&i.name, ifaces.len()) {
                (Some(n), _) => format!("{}:{n}", names[f]),
                (None, 1) => names[f].clone(),
                (None, _) => format!("{}#{k}", names[f]),
            };
            sink_ifaces.push(SinkInterface {
                name,
                linktype: i.linktype,
                snaplen: spec.snap.snaplen(),
                filter: filter_text(spec),
                stats: (k == 0).then_some(f),
            });
        }
    }
    let producers: Vec<usize> = (0..paths.len()).collect();
    let SinkSetup {
        writer,
        full,
        pools,
    } = start_sink(
        &spec.sink,
        sink_ifaces,
        &producers,
        spec.sink.writer_buffer_bytes.min(FILE_BUFFER_BYTES),
        board.clone(),
        false,
        WriterLinks {
            rings: None,
            notify: Some(bells.attention.clone()),
        },
    )?;
    let mut workers = Vec::new();
    for (i, (path, free)) in paths.iter().zip(pools).enumerate() {
        let linktypes: Vec<u32> = inputs[i].iter().map(|x| x.linktype).collect();
        let programs: Vec<Program> = if linktypes.is_empty() {
            vec![compile(spec, first, Target::Offline)?]
        } else {
            linktypes.iter().filter_map(|lt| program_for(*lt)).collect()
        };
        let filters = programs
            .into_iter()
            .map(|p| {
                CheckedProgram::new(p).ok_or_else(|| {
                    EngineError::usage("libpcap compiled a filter program it does not accept")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut encoder = Encoder::new(spec.sink.format, bases[i], free, full.clone());
        encoder.set_blocking(true);
        encoder.set_placement(writer.placement.clone(), i);
        workers.push((
            path.clone(),
            stages_for(
                spec,
                budget,
                Some(filters),
                UserSampler::offline(spec.sampling, 0x5eed ^ i as u64),
                u32::MAX,
                linktypes,
                Some(bases[i]),
            ),
            encoder,
        ));
    }
    let board2 = board.clone();
    let stop2 = stop.clone();
    let writer_shared = writer.shared.clone();
    let flush_interval = spec.sink.flush_interval;
    // One observer for all the files: their packets' time goes on from one
    // to the next.
    let mut observer = observer_for(spec, false, 0, 0);
    // The files one after another on one thread, so the output holds them
    // in order.
    let handle = spawn("ringcap-read".into(), stop, move || {
        let mut result = Ok(());
        for (i, (path, stages, encoder)) in workers.into_iter().enumerate() {
            let quit = stop2.requested() || writer_shared.failure.lock().is_ok_and(|f| f.is_some());
            if quit || stages.count_reached() {
                break;
            }
            let source = match FileSource::open(&path) {
                Ok(s) => s,
                Err(e) => {
                    result = Err(SourceError::Input(e));
                    break;
                }
            };
            let worker = Worker {
                source,
                stages,
                encoder,
                board: board2.clone(),
                slot: (i, 0),
                stop: stop2.clone(),
                flush_interval,
                observer: observer.take(),
            };
            let (r, back) = worker.run_keep();
            observer = back;
            if r.is_err() {
                result = r;
                break;
            }
        }
        if let Some(mut o) = observer {
            o.finish();
        }
        result
    })?;
    let started = Started {
        inputs: names,
        linktype: first,
        snap: spec.snap,
        threads: 1,
        ring_bytes: 0,
        live: false,
    };
    Ok(Launch {
        board,
        live: None,
        started,
        running: Running {
            threads: vec![handle],
            leases: Vec::new(),
            writer,
            full,
        },
    })
}
