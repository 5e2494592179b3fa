//! One capture from start to report: sets up source, stages and sink, runs
//! the threads, reports counters while they run, and stops them cleanly.

use crate::config::{self, Plan};
use crate::failure::{exit, Failure};
use crate::live::CaptureThread;
use crate::offline;
use crate::offloads::OffloadGuard;
use crate::privileges;
use crossbeam_channel::{Receiver, Sender};
use ringcap_sink::{
    Batch, Encoder, RecordFormat, SinkInterface, Writer, WriterConfig, WriterHandle,
};
use ringcap_source::{CaptureSocket, Interface, RingGeometry, SocketOptions};
use ringcap_stages::filter::Target;
use ringcap_stages::{Program, Sampling, UserSampler};
use ringcap_stats::{report, Board, Counters};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bytes per ring block (rings smaller than 32 MiB get smaller blocks, so
/// they still have eight; see `RingGeometry::with_total`). Measured on the
/// testbed (4 M x 64-byte frames at ~0.5 Mpps, snaplen 64, to disk, CPU of
/// the capture process per packet):
/// 128 KiB 170 ns, 1 MiB 85-110 ns, 4 MiB 67-72 ns, 16 MiB 67-70 ns. Larger
/// blocks mean fewer hand-overs and wake-ups; beyond 4 MiB nothing is gained
/// and a ring of a few blocks holds packets back longer.
pub const BLOCK_SIZE: u32 = 4 << 20;
/// Block retire timeout: the longest a packet waits in a partly filled block
/// at low rates (at high rates blocks fill long before it).
pub const RETIRE_TIMEOUT_MS: u32 = 50;
/// Size of one output batch.
pub const BATCH_SIZE: usize = 4 << 20;

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

fn sock_filter(p: &Program) -> Vec<libc::sock_filter> {
    p.instructions
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// Writer setup shared by live and offline captures: the batch pools (one per
/// producer thread), the channel to the writer, and the writer itself.
pub struct SinkSetup {
    /// The writer.
    pub writer: WriterHandle,
    /// Where encoders send full batches.
    pub full: Sender<Batch>,
    /// Free batches, one receiver per producer.
    pub pools: Vec<Receiver<Batch>>,
}

impl SinkSetup {
    /// Builds pools of `writer_buffer_mib` per producer and starts the writer;
    /// `live` when packets come from interfaces now (not from files).
    pub fn start(
        plan: &Plan,
        interfaces: Vec<SinkInterface>,
        producers: &[usize],
        comment: String,
        board: Arc<Board>,
        owner: Option<(u32, u32)>,
        live: bool,
    ) -> Result<SinkSetup, Failure> {
        let per_pool = ((plan.writer_buffer_mib as usize) << 20) / BATCH_SIZE;
        let per_pool = per_pool.max(2);
        let mut senders = Vec::new();
        let mut pools = Vec::new();
        for (pool, iface) in producers.iter().enumerate() {
            let (tx, rx) = crossbeam_channel::unbounded();
            for _ in 0..per_pool {
                let _ = tx.send(Batch::new(BATCH_SIZE, *iface, pool));
            }
            senders.push(tx);
            pools.push(rx);
        }
        let (full, full_rx) = crossbeam_channel::unbounded();
        let cfg = WriterConfig {
            plan: plan.output.clone(),
            format: plan.format,
            interfaces,
            comment,
            rotation: plan.rotation,
            retention: plan.retention,
            mode: plan.write_mode,
            flush_interval: plan.flush_interval,
            isb_interval: Duration::from_secs(60).min(
                plan.rotation
                    .seconds
                    .map(Duration::from_secs)
                    .unwrap_or(Duration::MAX),
            ),
            post_rotate: plan.post_rotate.clone(),
            overwrite: plan.overwrite,
            file_mode: 0o640,
            owner,
            wall_clock: live,
        };
        let writer = Writer::spawn(cfg, board, full_rx, senders).map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::AlreadyExists {
                exit::USAGE
            } else {
                exit::RUNTIME
            };
            Failure {
                code,
                message: format!("cannot write the output: {e}"),
            }
        })?;
        Ok(SinkSetup {
            writer,
            full,
            pools,
        })
    }
}

/// Reporting while the capture runs.
pub struct Reporter {
    board: Arc<Board>,
    started: Instant,
    last: Instant,
    last_total: Counters,
    json: Option<std::fs::File>,
    tty: bool,
    interval: Duration,
}

impl Reporter {
    /// A reporter; `json` is opened for appending.
    pub fn new(
        board: Arc<Board>,
        json: Option<&std::path::Path>,
        interval: Duration,
    ) -> Result<Reporter, Failure> {
        let json = json
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
        Ok(Reporter {
            board,
            started: Instant::now(),
            last: Instant::now(),
            last_total: Counters::default(),
            json,
            tty: std::io::stderr().is_terminal(),
            interval,
        })
    }

    /// True when the next interval record is due.
    pub fn due(&self) -> bool {
        self.last.elapsed() >= self.interval
    }

    /// Time until the next interval record is due.
    pub fn until_due(&self) -> Duration {
        self.interval.saturating_sub(self.last.elapsed())
    }

    /// Emits an interval record if one is due.
    pub fn tick(&mut self, file: Option<String>) {
        if !self.due() {
            return;
        }
        let (per, total) = self.board.snapshot();
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
            let line = report::json_line(
                now,
                self.started.elapsed().as_secs_f64(),
                is_final,
                per,
                total,
                file,
            );
            let _ = writeln!(f, "{line}");
        }
    }

    /// The final JSON record and report; returns the totals.
    pub fn finish(mut self) -> Counters {
        let (per, total) = self.board.snapshot();
        if self.tty {
            eprintln!();
        }
        self.write_json(&per, &total, true, None);
        eprint!(
            "{}",
            report::final_report(&per, &total, self.started.elapsed().as_secs_f64())
        );
        total
    }
}

fn print_log(writer: &WriterHandle) {
    if let Ok(mut l) = writer.shared.log.lock() {
        for m in l.drain(..) {
            eprintln!("ringcap: {m}");
        }
    }
}

/// `ringcap capture`: returns the exit status.
pub fn capture(args: &crate::cli::CaptureArgs, command_line: String) -> Result<i32, Failure> {
    let plan = config::plan(args)?;
    let signals = Signals::install();
    if !args.read.is_empty() {
        return offline::run(args, &plan, command_line, &signals);
    }
    if args.interfaces.is_empty() {
        return Err(Failure::usage(
            "give an interface with -i IFACE (or files with -r FILE)",
        ));
    }
    let mut interfaces = Vec::new();
    for name in &args.interfaces {
        if interfaces.iter().any(|i: &Interface| &i.name == name) {
            return Err(Failure::usage(format!("interface '{name}' given twice")));
        }
        interfaces.push(Interface::open(name)?);
    }
    let linktypes: Vec<u32> = interfaces
        .iter()
        .map(|i| i.linktype().unwrap_or(1))
        .collect();
    if matches!(plan.format, RecordFormat::Pcap(_)) && linktypes.iter().any(|l| *l != linktypes[0])
    {
        return Err(Failure::usage("these interfaces have different link types, which one pcap file cannot hold: use --format pcapng"));
    }
    let owner = match &args.user {
        Some(u) => Some(privileges::lookup(u).map_err(Failure::usage)?),
        None => None,
    };

    // Kernel programs: filter + snap length + sampler; a filter-only program
    // for counting when the sampler runs in the kernel.
    let kernel_snap = plan.snap.kernel_snaplen();
    let mut programs = Vec::new();
    let mut counting_programs = Vec::new();
    for (iface, lt) in interfaces.iter().zip(&linktypes) {
        let base = ringcap_stages::compile(
            &plan.filter,
            *lt as i32,
            kernel_snap,
            Target::Kernel {
                interface: &iface.name,
            },
        )
        .map_err(|e| Failure::usage(e.to_string()))?;
        let mut p = base.clone();
        p.add_sampler(plan.sampling).map_err(Failure::usage)?;
        let kernel_sampling = p != base;
        programs.push(p);
        counting_programs.push(kernel_sampling.then_some(base));
    }

    let offload_guard =
        OffloadGuard::check(&interfaces, args.fix_offloads).map_err(Failure::system)?;

    let threads = plan.threads as usize;
    let board = Arc::new(Board::new(
        &interfaces
            .iter()
            .map(|i| (i.name.clone(), threads))
            .collect::<Vec<_>>(),
    ));
    let producers: Vec<usize> = (0..interfaces.len())
        .flat_map(|i| std::iter::repeat_n(i, threads))
        .collect();
    let sink_ifaces: Vec<SinkInterface> = interfaces
        .iter()
        .zip(&linktypes)
        .map(|(i, lt)| SinkInterface {
            name: i.name.clone(),
            linktype: *lt,
            snaplen: plan.snap.snaplen(),
            filter: (!plan.filter.is_empty()).then(|| plan.filter.clone()),
        })
        .collect();
    let SinkSetup {
        writer,
        full,
        pools,
    } = SinkSetup::start(
        &plan,
        sink_ifaces,
        &producers,
        command_line,
        board.clone(),
        owner.map(|o| (o.uid, o.gid)),
        true,
    )?;

    // Sockets: counting sockets first (so the filter-only count is never
    // behind), then the capture sockets of each interface's fanout group.
    let mut counting = Vec::new();
    for (iface, prog) in interfaces.iter().zip(&counting_programs) {
        counting.push(match prog {
            Some(p) => Some(ringcap_source::socket::CountingSocket::open(
                iface,
                &sock_filter(p),
            )?),
            None => None,
        });
    }
    // -B is per interface, shared by its threads' rings.
    let geometry = RingGeometry::with_total(
        (u64::from(plan.buffer_mib) << 20) / u64::from(plan.threads),
        BLOCK_SIZE,
        RETIRE_TIMEOUT_MS,
    );
    let mut sockets = Vec::new();
    for (i, iface) in interfaces.iter().enumerate() {
        let mut fanout_id = None;
        for _ in 0..threads {
            let s = CaptureSocket::open(
                iface,
                &SocketOptions {
                    program: sock_filter(&programs[i]),
                    geometry,
                    fanout_id,
                    promiscuous: !args.no_promiscuous,
                    timestamps: plan.tstamp,
                },
            )?;
            fanout_id = Some(s.fanout_id());
            sockets.push((i, s));
        }
    }
    for (i, iface) in interfaces.iter().enumerate() {
        let c = iface.counters();
        board.set_interface_base(i, c.packets, c.dropped);
    }
    if let Some(ids) = owner {
        privileges::drop_to(ids).map_err(|e| {
            Failure::system(format!(
                "dropping privileges to {}: {e}",
                args.user.as_deref().unwrap_or("")
            ))
        })?;
    }

    let budget = plan.count.map(|c| Arc::new(AtomicU64::new(c)));
    let stop = signals.stop.clone();
    let mut handles = Vec::new();
    let mut per_iface_thread = vec![0usize; interfaces.len()];
    for (producer, ((i, socket), free)) in sockets.into_iter().zip(pools).enumerate() {
        let t = per_iface_thread[i];
        per_iface_thread[i] += 1;
        let mut encoder = Encoder::new(plan.format, i as u32, free, full.clone());
        encoder.set_placement(writer.placement.clone(), producer);
        let job = CaptureThread {
            socket,
            encoder,
            sampler: UserSampler::live(plan.sampling),
            snap: plan.snap,
            max_frame_len: interfaces[i].max_frame_len(),
            board: board.clone(),
            interface: i,
            thread: t,
            stop: stop.clone(),
            budget: budget.clone(),
            flush_interval: plan.flush_interval,
            retire_timeout: Duration::from_millis(RETIRE_TIMEOUT_MS as u64),
        };
        let name = format!("ringcap-{}-{t}", interfaces[i].name);
        handles.push(
            std::thread::Builder::new()
                .name(name)
                .spawn(move || job.run())
                .map_err(|e| Failure::runtime(format!("starting a capture thread: {e}")))?,
        );
    }
    drop(full);

    let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
    eprintln!(
        "capturing on {} (link-type {}, snaplen {}, {} thread{} per interface, ring {} MiB per interface)",
        names.join(", "),
        linktype_name(linktypes[0]),
        match plan.snap {
            ringcap_stages::Snap::Bytes(n) => n.to_string(),
            ringcap_stages::Snap::Headers { max } => format!("headers (max {max})"),
        },
        threads,
        if threads == 1 { "" } else { "s" },
        (geometry.total_bytes() * threads) >> 20
    );

    let mut reporter = Reporter::new(
        board.clone(),
        args.stats_json.as_deref(),
        plan.stats_interval,
    )?;
    let started = Instant::now();
    let mut failure: Option<String> = None;
    let refresh = |board: &Board| {
        for (i, iface) in interfaces.iter().enumerate() {
            let c = iface.counters();
            board.set_interface_now(i, c.packets, c.dropped);
        }
        for (i, c) in counting.iter().enumerate() {
            if let Some(c) = c {
                if let Ok(n) = c.accepted() {
                    board.set_filter_count(i, n);
                }
            }
        }
    };
    loop {
        // Capture threads see SIGINT/SIGTERM themselves; this thread only
        // needs to be on time for reports and --duration. Every wake-up
        // costs tens of microseconds in a VM, so it sleeps as long as it may.
        let mut nap = Duration::from_millis(250).min(reporter.until_due());
        if let Some(d) = plan.duration {
            nap = nap.min(d.saturating_sub(started.elapsed()));
        }
        std::thread::sleep(nap.max(Duration::from_millis(1)));
        if signals.hup.swap(false, Ordering::Relaxed) {
            writer.shared.rotate_now.store(true, Ordering::Relaxed);
        }
        if plan.duration.is_some_and(|d| started.elapsed() >= d) {
            stop.store(true, Ordering::Relaxed);
        }
        if let Some(f) = writer.failure() {
            failure = Some(f);
            stop.store(true, Ordering::Relaxed);
        }
        print_log(&writer);
        if handles.iter().any(|h| h.is_finished()) {
            stop.store(true, Ordering::Relaxed);
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if reporter.due() {
            refresh(&board);
            let file = writer.shared.current.lock().ok().and_then(|c| c.clone());
            reporter.tick(file);
        }
    }
    // Stop intake for counting first, then drain the rings.
    refresh(&board);
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(_) => failure = failure.or(Some("a capture thread panicked".into())),
        }
    }
    let shared = writer.join();
    for (i, iface) in interfaces.iter().enumerate() {
        let c = iface.counters();
        board.set_interface_now(i, c.packets, c.dropped);
    }
    if let Ok(mut l) = shared.log.lock() {
        for m in l.drain(..) {
            eprintln!("ringcap: {m}");
        }
    }
    if let Some(f) = shared.failure.lock().ok().and_then(|f| f.clone()) {
        failure = failure.or(Some(f));
    }
    let total = reporter.finish();
    drop(offload_guard);
    if let Some(f) = failure {
        eprintln!("ringcap: error: {f}");
        if total.packets_dropped_writer > 0 {
            eprintln!(
                "ringcap: {} packets could not be written",
                total.packets_dropped_writer
            );
        }
        return Ok(exit::RUNTIME);
    }
    Ok(0)
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

/// Sampling in a sentence, for logs.
pub fn describe_sampling(s: Sampling) -> String {
    match s {
        Sampling::All => "all packets".into(),
        Sampling::Packets { n, mode } => format!("1 in {n} packets ({mode:?})"),
        Sampling::Flows { n } => format!("1 in {n} flows"),
    }
}
