//! Starting a live capture through an XDP or netfilter program (`--hook
//! xdp|netfilter`; cargo feature `hook`).

use super::setup::*;
use super::*;
use crate::source::hook::HookSource;
use crate::spec::LiveSpec;
use crate::worker::Worker;
use crossbeam_channel::Sender;
use ringcap_hook::{HookCapture, HookError};
use ringcap_sink::Encoder;
use ringcap_source::TimestampSource;
use ringcap_stages::filter::Target;
use ringcap_stages::{CheckedProgram, UserSampler};

impl From<HookError> for EngineError {
    fn from(e: HookError) -> EngineError {
        match e.kind {
            ringcap_hook::ErrorKind::System => EngineError::system(e.message),
            ringcap_hook::ErrorKind::Runtime => EngineError::runtime(e.message),
        }
    }
}

/// A live capture through an XDP or netfilter program (`live.hook`): one
/// program, ring buffer and capture thread per interface; the filter and
/// sampling run in the thread's stages (see `source::hook`).
pub(super) fn start(
    spec: &CaptureSpec,
    live: &LiveSpec,
    events: &Sender<Event>,
    bells: &Bells,
    budget: &Option<Arc<AtomicU64>>,
) -> Result<Launch, EngineError> {
    let stop = &bells.stop;
    let hook = live.hook;
    if live.threads != 1 {
        return Err(EngineError::because(
            ErrorKind::Usage,
            Reason::HookThreads(hook),
        ));
    }
    if live.tstamp == TimestampSource::Adapter {
        return Err(EngineError::because(
            ErrorKind::Usage,
            Reason::HookClock(hook),
        ));
    }
    let interfaces = open_interfaces(&live.interfaces)?;
    let linktypes: Vec<u32> = interfaces
        .iter()
        .map(|i| hook.linktype(i.linktype().unwrap_or(1)))
        .collect();
    one_linktype_for_pcap(spec, &linktypes, false)?;
    // The filter runs on the copied bytes as on a file's (VLAN tags, if
    // any, are in the bytes at these hooks).
    let mut filters = Vec::new();
    let mut copy_lens = Vec::new();
    for lt in &linktypes {
        let program = compile(spec, *lt, Target::Offline)?;
        let reach = ringcap_hook::filter_reach(program.instructions.iter().map(|i| (i.code, i.k)));
        copy_lens.push(ringcap_hook::copy_len(spec.snap.kernel_snaplen(), reach));
        filters.push(CheckedProgram::new(program).ok_or_else(|| {
            EngineError::usage("libpcap compiled a filter program it does not accept")
        })?);
    }
    let board = board_of(&interfaces, 1);
    let producers: Vec<usize> = (0..interfaces.len()).collect();
    let sink_ifaces = sink_interfaces(spec, &interfaces, &linktypes);
    let SinkSetup {
        writer,
        full,
        pools,
    } = start_sink(
        &spec.sink,
        sink_ifaces,
        &producers,
        spec.sink.writer_buffer_bytes,
        board.clone(),
        true,
        WriterLinks {
            rings: None,
            notify: Some(bells.attention.clone()),
        },
    )?;
    // The program stamps with the host clock: no adapter timestamps.
    let leases = leases_of(&interfaces, live.fix_offloads, false, events)?;
    let mut captures = Vec::new();
    for (i, iface) in interfaces.iter().enumerate() {
        captures.push(HookCapture::open(
            hook,
            &iface.name,
            iface.index,
            copy_lens[i],
            live.ring_bytes,
        )?);
    }
    let mut handles = Vec::new();
    for (i, ((capture, filter), free)) in captures.into_iter().zip(filters).zip(pools).enumerate() {
        let stages = stages_for(
            spec,
            budget,
            Some(vec![filter]),
            UserSampler::offline(spec.sampling, 0x9e37_79b9_7f4a_7c15 ^ i as u64),
            // Netfilter sees IP packets: no link-layer header.
            match hook {
                Hook::Netfilter => interfaces[i].mtu,
                _ => interfaces[i].max_frame_len(),
            },
            vec![linktypes[i]],
            None,
        );
        let mut encoder = Encoder::new(spec.sink.format, i as u32, free, full.clone());
        encoder.set_placement(writer.placement.clone(), i);
        let worker = Worker {
            source: HookSource::new(capture),
            stages,
            encoder,
            board: board.clone(),
            slot: (i, 0),
            stop: stop.clone(),
            flush_interval: spec.sink.flush_interval,
            observer: observer_for(spec, true, i, 0),
        };
        let name = format!("ringcap-{hook}-{}", interfaces[i].name);
        handles.push(spawn(name, stop, move || worker.run())?);
    }
    let started = Started {
        inputs: interfaces.iter().map(|i| i.name.clone()).collect(),
        linktype: linktypes[0],
        snap: spec.snap,
        threads: 1,
        ring_bytes: u64::from(ringcap_hook::ring_size(live.ring_bytes)),
        live: true,
    };
    Ok(Launch {
        board,
        live: None,
        started,
        running: Running {
            threads: handles,
            leases,
            writer,
            full,
        },
    })
}
