//! `bench-sink`: the storage-only mode of the benchmark (bench/run's
//! storage phase runs it from target/release/examples). Synthetic packets go
//! through the same encoder, batches and writer as a capture, so the
//! writer's throughput and CPU per packet can be measured on their own. An
//! example, not a subcommand: the shipped `ringcap` carries no benchmark
//! machinery.
//!
//!     cargo build --release -p ringcap --example bench-sink
//!     target/release/examples/bench-sink -w /var/tmp/x.pcap --packets 1000000 --size 1500

use clap::Parser;
use ringcap_engine::BATCH_SIZE;
use ringcap_format::TsResolution;
use ringcap_sink::files::{OutputPlan, Retention, Rotation};
use ringcap_sink::{Batch, Encoder, RecordFormat, SinkInterface, WriteMode, Writer, WriterConfig};
use ringcap_stats::Board;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Storage-only benchmark: synthetic packets straight into the sink; one
/// JSON line with the result.
#[derive(Debug, Parser)]
#[command(name = "bench-sink")]
struct Args {
    /// Where to write (a file; removed afterwards unless --keep).
    #[arg(short = 'w', long = "write", value_name = "PATH")]
    write: PathBuf,
    /// Packets to write.
    #[arg(long, default_value_t = 1_000_000)]
    packets: u64,
    /// Bytes per packet.
    #[arg(long, default_value_t = 1500)]
    size: u32,
    /// How files are written: direct, uring or buffered.
    #[arg(long, value_name = "MODE", default_value = "direct")]
    write_mode: String,
    /// Output format: pcap or pcapng.
    #[arg(long, default_value = "pcap")]
    format: String,
    /// Keep the file.
    #[arg(long)]
    keep: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("bench-sink: {e}");
        std::process::exit(1);
    }
}

fn cpu_seconds() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(ru) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0.0;
    };
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    t(ru.user_time()) + t(ru.system_time())
}

/// Runs the storage benchmark and prints one JSON line with the result.
fn run(args: &Args) -> Result<(), String> {
    let mode = WriteMode::parse(&args.write_mode)?;
    let format = match args.format.as_str() {
        "pcap" => RecordFormat::Pcap(TsResolution::Nano),
        "pcapng" => RecordFormat::Pcapng,
        f => return Err(format!("--format '{f}' must be pcap or pcapng")),
    };
    if !(14..=65535).contains(&args.size) {
        return Err("--size must be from 14 to 65535".into());
    }
    let board = Arc::new(Board::new(&[("synthetic".into(), 1)]));
    let (pool_tx, pool_rx) = crossbeam_channel::unbounded();
    for _ in 0..(256usize << 20) / BATCH_SIZE {
        let _ = pool_tx.send(Batch::new(BATCH_SIZE, 0, 0));
    }
    let (full_tx, full_rx) = crossbeam_channel::unbounded();
    let cfg = WriterConfig {
        plan: OutputPlan::Single(args.write.clone()),
        format,
        interfaces: vec![SinkInterface {
            name: "synthetic".into(),
            linktype: 1,
            snaplen: 65535,
            filter: None,
            stats: Some(0),
        }],
        comment: "bench-sink".into(),
        rotation: Rotation::default(),
        retention: Retention::default(),
        mode,
        flush_interval: Duration::from_secs(1),
        isb_interval: Duration::from_secs(60),
        post_rotate: None,
        overwrite: false,
        file_mode: 0o640,
        owner: None,
        wall_clock: false,
        compress: false,
        files: None,
        notify: None,
    };
    let writer = Writer::spawn(cfg, board.clone(), full_rx, vec![pool_tx])
        .map_err(|e| format!("cannot write the output: {e}"))?;
    let mut encoder = Encoder::new(format, 0, pool_rx, full_tx);
    encoder.set_blocking(true);
    encoder.set_placement(writer.placement.clone(), 0);
    let frame: Vec<u8> = (0..args.size).map(|i| i as u8).collect();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    for i in 0..args.packets {
        encoder.push(ringcap_engine::Record::whole(i * 1000, args.size, &frame));
    }
    encoder.close();
    drop(encoder);
    let shared = writer.join();
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    if let Some(f) = shared.failure.lock().ok().and_then(|f| f.clone()) {
        return Err(f.message);
    }
    let bytes = std::fs::metadata(&args.write).map(|m| m.len()).unwrap_or(0);
    if !args.keep {
        let _ = std::fs::remove_file(&args.write);
    }
    println!(
        "{}",
        serde_json::json!({
            "mode": args.write_mode, "format": args.format, "packets": args.packets, "size": args.size,
            "bytes": bytes, "seconds": secs, "mb_per_s": bytes as f64 / secs / 1e6,
            "cpu_s": cpu, "cpu_ns_per_pkt": cpu * 1e9 / args.packets as f64,
        })
    );
    Ok(())
}
