//! Starting a live capture through AF_PACKET rings (`--hook packet`).

use super::setup::*;
use super::*;
use crate::source::live::LiveSource;
use crate::spec::LiveSpec;
use crate::worker::{InPlaceWorker, Worker};
use crossbeam_channel::Sender;
use ringcap_sink::Encoder;
use ringcap_source::{
    CaptureSocket, Fanout, Interface, RingGeometry, SocketOptions, TimestampSource,
};
use ringcap_stages::filter::Target;
use ringcap_stages::UserSampler;

/// A live capture through AF_PACKET (`--hook packet`): a TPACKET_V3 ring
/// per (interface, fanout member), filter, sampling and snap length in the
/// kernel, one capture thread per ring; `in_place`: the ring blocks are
/// written to the file as they are (zero copy).
pub(super) fn start(
    spec: &CaptureSpec,
    live: &LiveSpec,
    in_place: bool,
    events: &Sender<Event>,
    bells: &Bells,
    budget: &Option<Arc<AtomicU64>>,
) -> Result<Launch, EngineError> {
    let stop = &bells.stop;
    let interfaces = open_interfaces(&live.interfaces)?;
    let linktypes: Vec<u32> = interfaces
        .iter()
        .map(|i| i.linktype().unwrap_or(1))
        .collect();
    one_linktype_for_pcap(spec, &linktypes, false)?;

    // Kernel programs: filter + snap length + sampler; a filter-only program
    // for counting when the sampler runs in the kernel.
    let mut programs = Vec::new();
    let mut counting_programs = Vec::new();
    for (iface, lt) in interfaces.iter().zip(&linktypes) {
        let base = compile(
            spec,
            *lt,
            Target::Kernel {
                interface: &iface.name,
            },
        )?;
        let mut p = base.clone();
        p.add_sampler(spec.sampling).map_err(EngineError::usage)?;
        let kernel_sampling = p != base;
        programs.push(p);
        counting_programs.push(kernel_sampling.then_some(base));
    }

    let threads = live.threads as usize;
    let board = board_of(&interfaces, threads);
    let producers: Vec<usize> = (0..interfaces.len())
        .flat_map(|i| std::iter::repeat_n(i, threads))
        .collect();
    let sink_ifaces = sink_interfaces(spec, &interfaces, &linktypes);
    let (ring_tx, ring_rx) = if in_place {
        let (tx, rx) = crossbeam_channel::unbounded();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let SinkSetup {
        writer,
        full,
        pools,
    } = start_sink(
        &spec.sink,
        sink_ifaces,
        if in_place { &[] } else { &producers },
        spec.sink.writer_buffer_bytes,
        board.clone(),
        true,
        WriterLinks {
            rings: ring_rx,
            notify: Some(bells.attention.clone()),
        },
    )?;
    let mut pools = pools.into_iter();

    let leases = leases_of(
        &interfaces,
        live.fix_offloads,
        live.tstamp == TimestampSource::Adapter,
        events,
    )?;

    // Sockets: counting sockets first (so the filter-only count is never
    // behind), then the capture sockets of each interface's fanout group.
    let mut counting = Vec::new();
    for (iface, prog) in interfaces.iter().zip(&counting_programs) {
        counting.push(match prog {
            Some(p) => Some(CountingSocket::open(iface, &sock_filter(p))?),
            None => None,
        });
    }
    let retire_ms = if in_place {
        let flush_ms = spec
            .sink
            .flush_interval
            .as_millis()
            .min(u128::from(u32::MAX)) as u32;
        flush_ms.clamp(RETIRE_TIMEOUT_MS, IN_PLACE_RETIRE_TIMEOUT_MS)
    } else {
        RETIRE_TIMEOUT_MS
    };
    let geometry = RingGeometry::with_total(
        live.ring_bytes / u64::from(live.threads),
        BLOCK_SIZE,
        retire_ms,
    );
    let mut sockets = Vec::new();
    for (i, iface) in interfaces.iter().enumerate() {
        // One thread alone needs no group: the kernel would hash every
        // packet's flow to pick the only member.
        let mut fanout = if threads > 1 {
            Fanout::New
        } else {
            Fanout::Off
        };
        for _ in 0..threads {
            let s = CaptureSocket::open(
                iface,
                &SocketOptions {
                    program: sock_filter(&programs[i]),
                    geometry,
                    fanout,
                    promiscuous: live.promiscuous,
                    timestamps: live.tstamp,
                    reserve: if in_place {
                        ringcap_source::inplace::RESERVE
                    } else {
                        0
                    },
                    lock_filter: true,
                },
            )?;
            if let Some(id) = s.fanout_id() {
                fanout = Fanout::Join(id);
            }
            sockets.push((i, s));
        }
    }
    for (i, iface) in interfaces.iter().enumerate() {
        let c = iface.counters();
        board.set_interface_base(i, c.packets, c.dropped);
    }
    if in_place && spec.sink.write_mode != ringcap_sink::WriteMode::Buffered {
        // Blocks go to the disk from the rings' memory registered once,
        // not pinned page by page at every write (pwrite remains where
        // io_uring cannot register it). Done now, before privileges are
        // dropped: as root the pages count against no memlock limit.
        let memory = sockets.iter_mut().map(|(_, s)| s.ring().memory()).collect();
        if let Ok(f) = ringcap_sink::FixedWrites::register(memory) {
            writer.offer_fixed(f);
        }
    }

    let mut handles = Vec::new();
    let mut per_iface_thread = vec![0usize; interfaces.len()];
    let retire = Duration::from_millis(u64::from(retire_ms));
    for (producer, (i, socket)) in sockets.into_iter().enumerate() {
        let t = per_iface_thread[i];
        per_iface_thread[i] += 1;
        let stages = stages_for(
            spec,
            budget,
            None,
            UserSampler::live(spec.sampling),
            interfaces[i].max_frame_len(),
            vec![linktypes[i]],
            None,
        );
        let source = LiveSource::new(socket, retire);
        let name = format!("ringcap-{}-{t}", interfaces[i].name);
        let (board, stop) = (board.clone(), stop.clone());
        let flush_interval = spec.sink.flush_interval;
        let handle = match &ring_tx {
            Some(rings) => {
                let worker = InPlaceWorker {
                    source,
                    opts: ringcap_source::inplace::InPlace {
                        interface_id: i as u32,
                        snaplen: spec.snap.snaplen(),
                        max_frame_len: interfaces[i].max_frame_len(),
                    },
                    rings: rings.clone(),
                    board,
                    slot: (i, t),
                    stop,
                };
                drop(stages);
                spawn(name, &bells.stop, move || worker.run())?
            }
            None => {
                let free = pools.next().ok_or_else(|| {
                    EngineError::runtime("no output buffers for a capture thread")
                })?;
                let mut encoder = Encoder::new(spec.sink.format, i as u32, free, full.clone());
                encoder.set_placement(writer.placement.clone(), producer);
                let worker = Worker {
                    source,
                    stages,
                    encoder,
                    board,
                    slot: (i, t),
                    stop,
                    flush_interval,
                    observer: observer_for(spec, true, i, t),
                };
                spawn(name, &bells.stop, move || worker.run())?
            }
        };
        handles.push(handle);
    }
    let started = Started {
        inputs: interfaces.iter().map(|i| i.name.clone()).collect(),
        linktype: linktypes[0],
        snap: spec.snap,
        threads: live.threads,
        ring_bytes: (geometry.total_bytes() * threads) as u64,
        live: true,
    };
    Ok(Launch {
        board,
        live: Some(LiveState {
            counter_files: interfaces.iter().map(Interface::counter_files).collect(),
            counting: Mutex::new(counting),
        }),
        started,
        running: Running {
            threads: handles,
            leases,
            writer,
            full,
        },
    })
}
