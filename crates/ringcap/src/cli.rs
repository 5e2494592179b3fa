//! The command line.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

const EXIT_STATUSES: &str = "\
Exit status:
  0  success (stopped by -c, --duration, SIGINT or SIGTERM after draining; SIGHUP
     ends the current file of a series at the signal and does not stop; SIGUSR1
     prints the counters so far and does not stop)
  1  failure while running: an output file could not be written (disk full, I/O error),
     a capture socket failed, or ringcapd ended the session otherwise than asked (its
     policy reloaded, the dump quota, the daemon stopping; its grant's max_duration is 0)
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
    /// Make capture files cut short by a crash valid again: cut at the last complete record (and rebuild a missing or stale index).
    Repair(RepairArgs),
    /// Build the index of capture files (pcap/pcapng written by anything), for `ringcap query`.
    Index(crate::query::IndexArgs),
    /// Find packets in capture files by tcpdump filter and time window, through their indexes.
    Query(Box<crate::query::QueryArgs>),
    /// Serve stored packets over HTTPS with client certificates: stenographer's POST /query (stenoread works unchanged) and a tcpdump-filter endpoint.
    Serve(crate::serve::ServeArgs),
    /// Make the keys of `ringcap serve` (CA, server and client certificates, stenographer's layout and config).
    ServeKeys(crate::serve::ServeKeysArgs),
    /// Make a pair of network namespaces, send traffic between them, capture it, and show the result.
    Demo(DemoArgs),
    /// Make a fresh Crypto-PAn key for --anonymize: into FILE (created mode 0600), or onto standard output redirected to a file.
    AnonymizeKey(AnonymizeKeyArgs),
    /// Send the frames of a capture file at their relative times (root, or through ringcapd as the grant allows), with a report per frame.
    Inject(InjectArgs),
    /// Show what ringcapd is capturing (your sessions; root sees all).
    Stats(StatsArgs),
    /// Your ringcapd dump files: list, fetch NAME [-o FILE], delete NAME.
    Dumps(DumpsArgs),
    /// Run an unmodified libpcap tool (tcpdump, tshark...) unprivileged, its captures served by ringcapd: ringcap run -- TOOL ARGS...
    Run(crate::run::RunArgs),
    /// Wireshark's extcap protocol over ringcapd (run by Wireshark/tshark
    /// through the wrapper scripts/setup installs in its extcap directory).
    #[command(disable_help_flag = true)]
    Extcap {
        /// --extcap-interfaces, --extcap-dlts, --extcap-config, --capture ...
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// `ringcap capture`.
#[derive(Debug, Args, Clone)]
pub struct CaptureArgs {
    /// Interface to capture on (repeat for several).
    #[arg(
        short = 'i',
        long = "interface",
        value_name = "IFACE",
        help_heading = "Input"
    )]
    pub interfaces: Vec<String>,

    /// Read packets from capture files instead of interfaces (pcap or pcapng; repeat for several).
    #[arg(
        short = 'r',
        long = "read",
        value_name = "FILE",
        conflicts_with = "interfaces",
        help_heading = "Input"
    )]
    pub read: Vec<PathBuf>,

    /// Capture through ringcapd, as an unprivileged user, with what its
    /// policy allows (the socket: --daemon=PATH, else $RINGCAP_DAEMON, else
    /// /run/ringcapd/ringcapd.sock). Without CAP_NET_RAW, ringcap uses the
    /// daemon by itself when the default socket exists.
    #[arg(
        long,
        value_name = "SOCKET",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        help_heading = "Input"
    )]
    pub daemon: Option<String>,

    /// With --daemon: have ringcapd write the packets to files of its own
    /// naming in your dump directory (rotated by -G, -C or --rotate-packets,
    /// oldest deleted beyond your quota) and print each name as it is
    /// published; see `ringcap dumps`.
    #[arg(
        long,
        requires = "daemon",
        conflicts_with = "write",
        help_heading = "Input"
    )]
    pub dump: bool,

    /// Through ringcapd: have the daemon compress the stream it hands this
    /// client (per-flow header compression, a few bytes a packet in the
    /// shared ring instead of the whole record); the packets written are
    /// the same. With --format compressed --tstamp-precision nano the
    /// daemon's blocks go into the file as they are, not decoded here.
    #[arg(long, conflicts_with = "dump", help_heading = "Input")]
    pub compress: bool,

    /// Write packets to PATH: a file, a directory (ending in /) for a series of files, or - for a pcap stream on stdout. Without -w packets are only counted.
    #[arg(
        short = 'w',
        long = "write",
        value_name = "PATH",
        help_heading = "Output"
    )]
    pub write: Option<String>,

    /// Read the filter expression from FILE, as tcpdump's -F: `#` starts a
    /// comment to the end of its line. A filter on the command line as well
    /// is refused.
    #[arg(short = 'F', value_name = "FILE", help_heading = "What to keep")]
    pub filter_file: Option<PathBuf>,

    /// Bytes to keep of each packet, or "headers" for exactly the protocol headers.
    #[arg(
        allow_negative_numbers = true,
        short = 's',
        long = "snaplen",
        value_name = "SNAPLEN|headers",
        default_value = "262144",
        help_heading = "What to keep"
    )]
    pub snaplen: String,

    /// Upper bound on the bytes kept with -s headers.
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "BYTES",
        default_value_t = 256,
        help_heading = "What to keep"
    )]
    pub headers_max: u32,

    /// Stop after writing COUNT packets.
    #[arg(
        allow_negative_numbers = true,
        short = 'c',
        long,
        value_name = "COUNT",
        help_heading = "When to stop"
    )]
    pub count: Option<u64>,

    /// Stop after SECS seconds.
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "SECS",
        help_heading = "When to stop"
    )]
    pub duration: Option<f64>,

    /// Kernel ring size per interface, in KiB as tcpdump's -B (262144 = 256 MiB),
    /// or with a unit: 512M, 1G. Split over the threads. Default: enough for a
    /// one-second stall at ~0.65 Mpps, 256 MiB when the snap length is at most
    /// 512 bytes, else 1 GiB; plus the --writer-buffer size per thread when
    /// the ring blocks are written in place (which uses no writer buffer).
    #[arg(
        allow_hyphen_values = true,
        short = 'B',
        long = "buffer",
        value_name = "KIB|SIZE",
        help_heading = "Capture"
    )]
    pub buffer: Option<String>,

    /// Where in the kernel to take packets: packet (AF_PACKET, every frame
    /// both ways), xdp (an XDP program at the driver: received frames, before
    /// the stack) or netfilter (IPv4/IPv6 pre-routing: IP packets the host
    /// takes in, recorded as raw IP). xdp and netfilter copy into a BPF ring
    /// buffer and take one thread per interface; xdp runs the filter in the
    /// XDP program (netfilter in user space). Both leave every packet to the
    /// host unless --monitor.
    #[arg(
        long,
        value_name = "HOOK",
        default_value = "packet",
        value_parser = ["packet", "xdp", "netfilter"],
        help_heading = "Capture"
    )]
    pub hook: String,

    /// With --hook xdp: the interface is a monitor port whose traffic is
    /// only captured. Every frame it receives is dropped at the driver
    /// (XDP_DROP) after its copy, matched by the filter or not: the host
    /// no longer sees any traffic of this interface (no ARP, no pings, no
    /// connections). Never implied; refused with the other hooks.
    #[arg(long, help_heading = "Capture")]
    pub monitor: bool,

    /// Capture threads per interface, joined by a PACKET_FANOUT flow-hash group.
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Capture"
    )]
    pub threads: u32,

    /// Keep one packet in N (random, or every Nth with --sample-mode count).
    #[arg(
        allow_hyphen_values = true,
        long,
        value_name = "1:N",
        help_heading = "What to keep"
    )]
    pub sample: Option<String>,

    /// How --sample picks: random or count.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "random",
        value_parser = ["random", "count"],
        help_heading = "What to keep"
    )]
    pub sample_mode: String,

    /// Keep one flow in N, both directions (symmetric 5-tuple hash).
    #[arg(
        allow_hyphen_values = true,
        long,
        value_name = "1:N",
        conflicts_with = "sample",
        help_heading = "What to keep"
    )]
    pub sample_flows: Option<String>,

    /// Append one JSON object of counters per interval to FILE, and a final one with "final": true.
    #[arg(long, value_name = "FILE", help_heading = "Reporting")]
    pub stats_json: Option<PathBuf>,

    /// Seconds between status lines and JSON records.
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "SECS",
        default_value_t = 1.0,
        help_heading = "Reporting"
    )]
    pub stats_interval: f64,

    /// Drop privileges to USER once sockets and the first output file are open.
    #[arg(
        short = 'Z',
        long = "user",
        value_name = "USER",
        help_heading = "Output"
    )]
    pub user: Option<String>,

    /// Timestamp source: host (kernel clock) or adapter (NIC hardware clock).
    #[arg(
        long,
        value_name = "SOURCE",
        default_value = "host",
        value_parser = ["host", "adapter"],
        help_heading = "Capture"
    )]
    pub tstamp: String,

    /// Turn off receive offloads that merge packets (GRO/LRO) for the capture; restore them on exit.
    #[arg(long, help_heading = "Capture")]
    pub fix_offloads: bool,

    /// Do not put the interfaces in promiscuous mode.
    #[arg(short = 'p', long = "no-promiscuous", help_heading = "Capture")]
    pub no_promiscuous: bool,

    /// Anonymize addresses with Crypto-PAn (prefix-preserving) under the key in KEYFILE (see `ringcap anonymize-key`).
    #[arg(long, value_name = "KEYFILE", help_heading = "Privacy")]
    pub anonymize: Option<PathBuf>,

    /// Fields --anonymize rewrites: ip.addr, eth.addr.
    #[arg(
        long,
        value_name = "FIELD,...",
        default_value = "ip.addr",
        requires = "anonymize",
        help_heading = "Privacy"
    )]
    pub anonymize_fields: String,

    /// Zero these fields in every packet, checksums kept right (eth.addr ip.addr ip.tos ip.id ip.ttl ipv6.flow tcp.port udp.port tcp.seq tcp.window tcp.options icmp.echo payload).
    #[arg(long, value_name = "FIELD,...", help_heading = "Privacy")]
    pub mask: Option<String>,

    /// Output format: pcap, pcapng, or compressed (ringcap's lossless header compression, a few bytes per packet of -s headers traces; read back with -r; timestamps at --tstamp-precision). Default: by the -w name's extension (.pcap, .pcapng, .rcz); pcapng for a directory or a name without one (as dumpcap); pcap for -w -.
    #[arg(
        long,
        value_name = "FORMAT",
        value_parser = ["pcap", "pcapng", "compressed"],
        help_heading = "Output"
    )]
    pub format: Option<String>,

    /// pcap timestamp precision: nano or micro (pcapng is always nanoseconds).
    #[arg(
        long,
        value_name = "PRECISION",
        default_value = "nano",
        value_parser = ["nano", "micro"],
        help_heading = "Output"
    )]
    pub tstamp_precision: String,

    /// Start a new file before one would exceed MB million bytes.
    #[arg(
        allow_negative_numbers = true,
        short = 'C',
        value_name = "MB",
        help_heading = "Files: rotation and retention"
    )]
    pub rotate_mb: Option<f64>,

    /// Start a new file every SECS seconds.
    #[arg(
        allow_negative_numbers = true,
        short = 'G',
        value_name = "SECS",
        help_heading = "Files: rotation and retention"
    )]
    pub rotate_seconds: Option<u64>,

    /// Align -G rotation to multiples of SECS of wall-clock time.
    #[arg(long, help_heading = "Files: rotation and retention")]
    pub align: bool,

    /// Start a new file every N packets.
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "N",
        help_heading = "Files: rotation and retention"
    )]
    pub rotate_packets: Option<u64>,

    /// Keep a ring of N files, deleting the oldest (with -G too: unlike tcpdump,
    /// which stops after N files there).
    #[arg(
        allow_negative_numbers = true,
        short = 'W',
        value_name = "N",
        help_heading = "Files: rotation and retention"
    )]
    pub max_files: Option<usize>,

    /// Delete the oldest files when the series exceeds SIZE (e.g. 500M, 20G).
    #[arg(
        allow_hyphen_values = true,
        long,
        value_name = "SIZE",
        help_heading = "Files: rotation and retention"
    )]
    pub max_total: Option<String>,

    /// Delete the oldest files while the filesystem has less than PERCENT free.
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "PERCENT",
        help_heading = "Files: rotation and retention"
    )]
    pub min_free: Option<f64>,

    /// Run CMD on each completed file (the path is the last argument), in the background.
    #[arg(
        long,
        value_name = "CMD",
        help_heading = "Files: rotation and retention"
    )]
    pub post_rotate: Option<String>,

    /// Seconds between pushes of written data towards the disk (bounds loss on a crash).
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "SECS",
        default_value_t = 1.0,
        help_heading = "Output"
    )]
    pub flush_interval: f64,

    /// How files are written: direct (O_DIRECT write()), uring (O_DIRECT
    /// through io_uring, several writes in flight) or buffered (page cache).
    #[arg(
        long,
        value_name = "MODE",
        default_value = "direct",
        value_parser = ["direct", "uring", "buffered"],
        help_heading = "Output"
    )]
    pub write_mode: String,

    /// Write the kernel's ring blocks to the file as they are, each turned
    /// into pcapng where it lies (no copy per packet): auto (live pcapng
    /// captures to files with nothing to do per packet in user space), on
    /// (refused where it cannot be done, saying why) or off.
    #[arg(
        long,
        value_name = "WHEN",
        default_value = "auto",
        value_parser = ["auto", "on", "off"],
        help_heading = "Output"
    )]
    pub zero_copy: String,

    /// Replace an existing output file.
    #[arg(long, help_heading = "Output")]
    pub overwrite: bool,

    /// Do not index the files written (by default each published file gets
    /// `.NAME.ringcap-index` beside it, for `ringcap query`).
    #[arg(long, help_heading = "Output")]
    pub no_index: bool,

    /// Output buffer per capture thread in MiB (packets are dropped, and counted, when it is full) [default: 256; through ringcapd 32, as the session's shared ring buffers before it].
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "MIB",
        help_heading = "Output"
    )]
    pub writer_buffer: Option<u32>,

    /// Flow records (--flows URL, timeouts, table size): see `crate::flows`.
    #[command(flatten)]
    pub flow: crate::flows::FlowArgs,

    /// Filter expression (tcpdump syntax), after the options as in tcpdump.
    /// Options may also follow it; put `--` before an expression that starts
    /// with `-`.
    #[arg(value_name = "FILTER")]
    pub filter: Vec<String>,
}

/// `ringcap stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The daemon's socket (--daemon=PATH; default $RINGCAP_DAEMON, else
    /// /run/ringcapd/ringcapd.sock).
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub daemon: Option<String>,
    /// One JSON object per session instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `ringcap dumps`.
#[derive(Debug, Args)]
pub struct DumpsArgs {
    /// The daemon's socket (--daemon=PATH; default $RINGCAP_DAEMON, else
    /// /run/ringcapd/ringcapd.sock); before or after the action.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true, default_missing_value = "", global = true)]
    pub daemon: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub action: DumpAction,
}

/// `ringcap dumps` actions.
#[derive(Debug, Subcommand)]
pub enum DumpAction {
    /// Your dump files, oldest first (name, bytes, modified).
    List,
    /// Copy one to FILE (default: its name in the current directory; - for stdout).
    Fetch {
        /// The file's name, as `list` shows it.
        name: String,
        /// Where to copy it.
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Delete one.
    Delete {
        /// The file's name, as `list` shows it.
        name: String,
    },
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

/// Parses `-B`: a plain number is KiB, as tcpdump's `-B`; with a unit
/// (K, M, G, T) it is that size. Returns bytes.
pub fn parse_buffer(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return match t.parse::<u64>() {
            Ok(k) if k > 0 => k
                .checked_mul(1024)
                .ok_or_else(|| format!("-B {s}: too large")),
            _ => Err(format!("-B {s}: must be a positive number of KiB")),
        };
    }
    parse_size(t).map_err(|e| format!("-B: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_sizes_are_kib_like_tcpdump() {
        assert_eq!(parse_buffer("262144"), Ok(256 << 20));
        assert_eq!(parse_buffer("512M"), Ok(512 << 20));
        assert_eq!(parse_buffer("1G"), Ok(1 << 30));
        assert_eq!(parse_buffer("64k"), Ok(64 << 10));
        assert!(parse_buffer("0").is_err());
        assert!(parse_buffer("lots").is_err());
    }

    #[test]
    fn unknown_options_are_not_filter_words() {
        let e = Cli::try_parse_from([
            "ringcap",
            "capture",
            "-r",
            "in.pcap",
            "--anonymise",
            "KEY",
            "-w",
            "out.pcap",
        ])
        .unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{e}");
        // A filter still follows the options, and options may follow it.
        let c = Cli::try_parse_from([
            "ringcap", "capture", "-i", "eth0", "not", "port", "22", "-c", "5",
        ])
        .unwrap();
        let Command::Capture(a) = c.command else {
            panic!("not capture")
        };
        assert_eq!(a.filter.join(" "), "not port 22");
        assert_eq!(a.count, Some(5));
    }

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

/// `ringcap anonymize-key`.
#[derive(Debug, Args)]
pub struct AnonymizeKeyArgs {
    /// The key file to create (it must not exist). Without it the key goes
    /// to standard output, which must be a file (it is made mode 0600).
    pub file: Option<PathBuf>,
}

/// `ringcap inject`.
#[derive(Debug, Args)]
pub struct InjectArgs {
    /// Interface to send on.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    pub interface: String,

    /// The frames to send (pcap or pcapng), at their timestamps relative to the first.
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    pub read: PathBuf,

    /// When the first frame goes: +SECS from now (default +0.1), or seconds since the epoch.
    #[arg(long, value_name = "+SECS|TIME", default_value = "+0.1")]
    pub start: String,

    /// How late a frame may still be sent, in milliseconds; later ones are reported missed.
    #[arg(long, value_name = "MS", default_value_t = 1.0)]
    pub tolerance: f64,

    /// Write one JSON report per frame ({tag, requested_ns, sent_ns, status, reason}) to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Send through ringcapd (--daemon=PATH; default $RINGCAP_DAEMON, else /run/ringcapd/ringcapd.sock).
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub daemon: Option<String>,
}
