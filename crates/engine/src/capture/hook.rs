//! Starting a live capture through an XDP or netfilter program (`--hook
//! xdp|netfilter`; cargo feature `hook`).
//!
//! With XDP the capture filter runs in the XDP program: libpcap's program is
//! translated to eBPF (`ringcap_hook::cbpf`), only matching frames are
//! copied, cut to the filter's snap length, and with `--monitor` every frame
//! is dropped at the driver. A filter the translator refuses runs in user
//! space instead, on copies of every frame, with a warning. Netfilter
//! always filters in user space.

use super::setup::*;
use super::*;
use crate::source::hook::HookSource;
use crate::spec::LiveSpec;
use crate::worker::Worker;
use crossbeam_channel::Sender;
use ringcap_hook::cbpf::{self, Classic};
use ringcap_hook::{HookCapture, HookError, XdpOptions};
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
    // The filter runs on the bytes as on a file's (VLAN tags, if any, are
    // in the bytes at these hooks): in the XDP program when it translates
    // and the kernel takes it, else in user space on copies reaching as far
    // as it reads.
    let mut plans = Vec::new();
    for (lt, iface) in linktypes.iter().zip(&interfaces) {
        let program = compile(spec, *lt, Target::Offline)?;
        let classic: Vec<Classic> = program
            .instructions
            .iter()
            .map(|i| Classic {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        let in_kernel = match (hook, cbpf::translate(&classic, cbpf::Finish::Value)) {
            (Hook::Xdp, Ok(_)) => true,
            (Hook::Xdp, Err(e)) => {
                let _ = events.send(Event::Warning(format!(
                    "{}: the filter cannot run in the XDP program ({e}): every frame is copied and filtered in user space, which costs more per packet",
                    iface.name
                )));
                false
            }
            _ => false,
        };
        let reach = ringcap_hook::filter_reach(program.instructions.iter().map(|i| (i.code, i.k)));
        plans.push(FilterPlan {
            kernel: in_kernel.then_some(classic),
            user_copy_len: ringcap_hook::copy_len(spec.snap.kernel_snaplen(), reach),
            user: CheckedProgram::new(program).ok_or_else(|| {
                EngineError::usage("libpcap compiled a filter program it does not accept")
            })?,
        });
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
    let mut filters = Vec::new();
    for (iface, plan) in interfaces.iter().zip(plans) {
        let open = |copy_len, filter| {
            let options = XdpOptions {
                filter,
                monitor: live.monitor,
            };
            HookCapture::open(
                hook,
                &iface.name,
                iface.index,
                copy_len,
                live.ring_bytes,
                &options,
            )
        };
        let kernel_snap = spec.snap.kernel_snaplen().min(ringcap_hook::MAX_COPY);
        let capture = match plan.kernel {
            Some(classic) => match open(kernel_snap, Some(classic)) {
                // The kernel refused the translation (its verifier): the
                // filter can still run in user space.
                Err(e) if e.kind == ringcap_hook::ErrorKind::Runtime => {
                    let _ = events.send(Event::Warning(format!(
                        "{}: the filter cannot run in the XDP program ({e}): every frame is copied and filtered in user space, which costs more per packet",
                        iface.name
                    )));
                    open(plan.user_copy_len, None)?
                }
                other => other?,
            },
            None => open(plan.user_copy_len, None)?,
        };
        filters.push((!capture.kernel_filter()).then_some(plan.user));
        captures.push(capture);
    }
    let mut handles = Vec::new();
    for (i, ((capture, filter), free)) in captures.into_iter().zip(filters).zip(pools).enumerate() {
        let stages = stages_for(
            spec,
            budget,
            filter.map(|f| vec![f]),
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

/// Where one interface's filter can run.
struct FilterPlan {
    /// libpcap's program, when the translator takes it (XDP only).
    kernel: Option<Vec<Classic>>,
    /// The program for the capture thread, if it must run there.
    user: CheckedProgram,
    /// Bytes to copy of each frame when the filter runs in user space.
    user_copy_len: u32,
}
