//! The command line.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

const EXIT_STATUSES: &str = "\
Exit status:
  0  success (stopped by -c, --duration, SIGINT or SIGTERM after draining)
  1  failure while running: an output file could not be written (disk full, I/O error),
     or a capture socket failed
  2  bad usage: an unknown or invalid option value, a bad filter expression, an
     unreadable or malformed input file (-r)
  3  the system refused: no such interface, interface down, a missing capability
     (CAP_NET_RAW / CAP_NET_ADMIN), no hardware timestamps";

/// High-speed passive packet capture for Linux.
#[derive(Debug, Parser)]
#[command(name = "ringcap", version, about, after_help = EXIT_STATUSES)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Capture packets from interfaces (or re-process files with -r) into pcap/pcapng files.
    #[command(after_help = EXIT_STATUSES)]
    Capture(Box<CaptureArgs>),
    /// Make capture files cut short by a crash valid again: cut at the last complete record.
    Repair(RepairArgs),
    /// Make a pair of network namespaces, send traffic between them, capture it, and show the result.
    Demo(DemoArgs),
    /// Storage-only benchmark: synthetic packets straight into the sink, to
    /// measure the writer without a capture in front of it.
    BenchSink(BenchSinkArgs),
    /// (used by `demo`) send numbered test frames on an interface.
    #[command(hide = true)]
    DemoSend {
        /// Interface.
        interface: String,
        /// Number of frames.
        count: u32,
    },
}

/// `ringcap capture`.
#[derive(Debug, Args, Clone)]
pub struct CaptureArgs {
    /// Interface to capture on (repeat for several).
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    pub interfaces: Vec<String>,

    /// Read packets from capture files instead of interfaces (pcap or pcapng; repeat for several).
    #[arg(
        short = 'r',
        long = "read",
        value_name = "FILE",
        conflicts_with = "interfaces"
    )]
    pub read: Vec<PathBuf>,

    /// Write packets to PATH: a file, a directory (ending in /) for a series of files, or - for a pcap stream on stdout. Without -w packets are only counted.
    #[arg(short = 'w', long = "write", value_name = "PATH")]
    pub write: Option<String>,

    /// Bytes to keep of each packet, or "headers" for exactly the protocol headers.
    #[arg(
        short = 's',
        long = "snaplen",
        value_name = "SNAPLEN|headers",
        default_value = "262144"
    )]
    pub snaplen: String,

    /// Upper bound on the bytes kept with -s headers.
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    pub headers_max: u32,

    /// Stop after writing COUNT packets.
    #[arg(short = 'c', long, value_name = "COUNT")]
    pub count: Option<u64>,

    /// Stop after SECS seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,

    /// Kernel ring size per interface in MiB (split over the threads).
    /// Default: enough for a one-second stall at ~0.65 Mpps, 256 when the
    /// snap length is at most 512 bytes, else 1024.
    #[arg(short = 'B', long = "buffer", value_name = "MIB")]
    pub buffer_mib: Option<u32>,

    /// Capture threads per interface, joined by a PACKET_FANOUT flow-hash group.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub threads: u32,

    /// Keep one packet in N (random, or every Nth with --sample-mode count).
    #[arg(long, value_name = "1:N")]
    pub sample: Option<String>,

    /// How --sample picks: random or count.
    #[arg(long, value_name = "MODE", default_value = "random")]
    pub sample_mode: String,

    /// Keep one flow in N, both directions (symmetric 5-tuple hash).
    #[arg(long, value_name = "1:N", conflicts_with = "sample")]
    pub sample_flows: Option<String>,

    /// Append one JSON object of counters per interval to FILE, and a final one with "final": true.
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,

    /// Seconds between status lines and JSON records.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub stats_interval: f64,

    /// Drop privileges to USER once sockets and the first output file are open.
    #[arg(short = 'Z', long = "user", value_name = "USER")]
    pub user: Option<String>,

    /// Timestamp source: host (kernel clock) or adapter (NIC hardware clock).
    #[arg(long, value_name = "SOURCE", default_value = "host")]
    pub tstamp: String,

    /// Turn off receive offloads that merge packets (GRO/LRO) for the capture; restore them on exit.
    #[arg(long)]
    pub fix_offloads: bool,

    /// Do not put the interfaces in promiscuous mode.
    #[arg(short = 'p', long = "no-promiscuous")]
    pub no_promiscuous: bool,

    /// Output format: pcap or pcapng.
    #[arg(long, value_name = "FORMAT", default_value = "pcap")]
    pub format: String,

    /// pcap timestamp precision: nano or micro (pcapng is always nanoseconds).
    #[arg(long, value_name = "PRECISION", default_value = "nano")]
    pub tstamp_precision: String,

    /// Start a new file before one would exceed MB million bytes.
    #[arg(short = 'C', value_name = "MB")]
    pub rotate_mb: Option<f64>,

    /// Start a new file every SECS seconds.
    #[arg(short = 'G', value_name = "SECS")]
    pub rotate_seconds: Option<u64>,

    /// Align -G rotation to multiples of SECS of wall-clock time.
    #[arg(long)]
    pub align: bool,

    /// Start a new file every N packets.
    #[arg(long, value_name = "N")]
    pub rotate_packets: Option<u64>,

    /// Keep a ring of N files, deleting the oldest.
    #[arg(short = 'W', value_name = "N")]
    pub max_files: Option<usize>,

    /// Delete the oldest files when the series exceeds SIZE (e.g. 500M, 20G).
    #[arg(long, value_name = "SIZE")]
    pub max_total: Option<String>,

    /// Delete the oldest files while the filesystem has less than PERCENT free.
    #[arg(long, value_name = "PERCENT")]
    pub min_free: Option<f64>,

    /// Run CMD on each completed file (the path is the last argument), in the background.
    #[arg(long, value_name = "CMD")]
    pub post_rotate: Option<String>,

    /// Seconds between pushes of written data towards the disk (bounds loss on a crash).
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub flush_interval: f64,

    /// How files are written: direct (O_DIRECT write()), uring (O_DIRECT
    /// through io_uring, several writes in flight) or buffered (page cache).
    #[arg(long, value_name = "MODE", default_value = "direct")]
    pub write_mode: String,

    /// Replace an existing output file.
    #[arg(long)]
    pub overwrite: bool,

    /// Output buffer per capture thread in MiB (packets are dropped, and counted, when it is full).
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub writer_buffer: u32,

    /// Filter expression (tcpdump syntax).
    #[arg(
        value_name = "FILTER",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub filter: Vec<String>,
}

/// `ringcap bench-sink`.
#[derive(Debug, Args)]
pub struct BenchSinkArgs {
    /// Where to write (a file; removed afterwards unless --keep).
    #[arg(short = 'w', long = "write", value_name = "PATH")]
    pub write: PathBuf,
    /// Packets to write.
    #[arg(long, default_value_t = 1_000_000)]
    pub packets: u64,
    /// Bytes per packet.
    #[arg(long, default_value_t = 1500)]
    pub size: u32,
    /// How files are written: direct, uring or buffered.
    #[arg(long, value_name = "MODE", default_value = "direct")]
    pub write_mode: String,
    /// Output format: pcap or pcapng.
    #[arg(long, default_value = "pcap")]
    pub format: String,
    /// Keep the file.
    #[arg(long)]
    pub keep: bool,
}

/// `ringcap repair`.
#[derive(Debug, Args)]
pub struct RepairArgs {
    /// Only report what would be cut.
    #[arg(long)]
    pub check: bool,
    /// Files to repair.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// `ringcap demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Frames to send.
    #[arg(long, default_value_t = 1000)]
    pub count: u32,
    /// Where to write the capture.
    #[arg(long, default_value = "ringcap-demo.pcap")]
    pub output: PathBuf,
}

/// Parses a size like 500M, 20G, 1024 (bytes) or 1.5T.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("size '{s}': unknown unit '{c}' (use K, M, G or T)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    match num.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok((v * mult as f64) as u64),
        _ => Err(format!(
            "size '{s}' is not a positive number with an optional K/M/G/T unit"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("1.5K"), Ok(1536));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("10X").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
