//! Turning command-line arguments into a checked engine specification, plus
//! what only the command line does (reporting, dropping privileges).

use crate::cli::{parse_buffer, parse_size, CaptureArgs};
use crate::failure::Failure;
use ringcap_engine::{
    CaptureSpec, LiveSpec, OutputPlan, RecordFormat, Retention, Rotation, SampleMode, Sampling,
    SinkSpec, Snap, SourceSpec, TimestampSource, WriteMode,
};
use ringcap_format::TsResolution;
use std::path::PathBuf;
use std::time::Duration;

/// `--writer-buffer` when not given, in MiB (a local capture's).
pub const WRITER_BUFFER_MIB: u32 = 256;
/// The same through ringcapd: the session's shared ring (up to 64 MiB)
/// already holds what arrives while the file writer catches up, and a
/// client allocates (and faults in) its whole buffer at start.
pub const DAEMON_WRITER_BUFFER_MIB: u32 = 32;

/// A capture as the command line asked for it, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What the engine runs.
    pub spec: CaptureSpec,
    /// Append JSON counters here.
    pub stats_json: Option<PathBuf>,
    /// Status/JSON interval.
    pub stats_interval: Duration,
    /// Drop privileges to this user once the capture runs (-Z).
    pub user: Option<String>,
}

/// Checks the arguments.
pub fn plan(a: &CaptureArgs, command_line: String) -> Result<Plan, Failure> {
    let snap = if a.snaplen == "headers" {
        if !(14..=65535).contains(&a.headers_max) {
            return Err(Failure::usage(format!(
                "--headers-max {} must be between 14 and 65535",
                a.headers_max
            )));
        }
        Snap::Headers { max: a.headers_max }
    } else {
        match a.snaplen.parse::<u32>() {
            Ok(0) => Snap::Bytes(262144), // tcpdump: 0 means the default
            Ok(n) if n <= 262144 => Snap::Bytes(n),
            _ => {
                return Err(Failure::usage(format!(
                    "snaplen '{}' must be a number of bytes from 1 to 262144, or 'headers'",
                    a.snaplen
                )))
            }
        }
    };
    let mode = match a.sample_mode.as_str() {
        "random" => SampleMode::Random,
        "count" => SampleMode::Count,
        m => {
            return Err(Failure::usage(format!(
                "--sample-mode '{m}' must be random or count"
            )))
        }
    };
    let sampling = match (&a.sample, &a.sample_flows) {
        (Some(s), _) => Sampling::Packets {
            n: Sampling::parse_ratio(s).map_err(|e| Failure::usage(format!("--sample: {e}")))?,
            mode,
        },
        (None, Some(s)) => Sampling::Flows {
            n: Sampling::parse_ratio(s)
                .map_err(|e| Failure::usage(format!("--sample-flows: {e}")))?,
        },
        (None, None) => Sampling::All,
    };
    let resolution = match a.tstamp_precision.as_str() {
        "nano" => TsResolution::Nano,
        "micro" => TsResolution::Micro,
        p => {
            return Err(Failure::usage(format!(
                "--tstamp-precision '{p}' must be nano or micro"
            )))
        }
    };
    // Compressed files are coded from pcap records of the chosen precision.
    let chosen = a
        .format
        .as_deref()
        .unwrap_or_else(|| default_format(a.write.as_deref()));
    let (format, ext, compress) = match chosen {
        "pcap" => (RecordFormat::Pcap(resolution), "pcap", false),
        "pcapng" => (RecordFormat::Pcapng, "pcapng", false),
        "compressed" => (RecordFormat::Pcap(resolution), "rcz", true),
        f => {
            return Err(Failure::usage(format!(
                "--format '{f}' must be pcap, pcapng or compressed"
            )))
        }
    };
    let rotation = Rotation {
        packets: a.rotate_packets,
        bytes: match a.rotate_mb {
            Some(mb) if mb > 0.0 && mb.is_finite() => Some((mb * 1_000_000.0) as u64),
            Some(mb) => {
                return Err(Failure::usage(format!(
                    "-C {mb} must be a positive number of megabytes"
                )))
            }
            None => None,
        },
        seconds: a.rotate_seconds,
        align: a.align,
    };
    if rotation.packets == Some(0) || rotation.seconds == Some(0) {
        return Err(Failure::usage("--rotate-packets and -G must be at least 1"));
    }
    if a.align && rotation.seconds.is_none() {
        return Err(Failure::usage("--align needs -G SECS"));
    }
    let retention = Retention {
        max_files: a.max_files,
        max_total: a
            .max_total
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(|e| Failure::usage(format!("--max-total: {e}")))?,
        min_free_pct: a.min_free,
        // A reader of an old file (tshark on it) keeps it whole.
        empty_first: false,
    };
    if a.max_files == Some(0) {
        return Err(Failure::usage("-W must be at least 1"));
    }
    if let Some(p) = a.min_free {
        if !(0.0..100.0).contains(&p) {
            return Err(Failure::usage(format!(
                "--min-free {p} must be a percentage below 100"
            )));
        }
    }
    let output = match &a.write {
        // ringcapd writes a dump's files; rotation goes with the request.
        None if a.dump => OutputPlan::Discard,
        None => {
            if rotation.any() || retention.any() {
                return Err(Failure::usage("rotation and retention options need -w"));
            }
            OutputPlan::Discard
        }
        Some(p) if is_char_device(p) => {
            if rotation.any() || retention.any() {
                return Err(Failure::usage(format!(
                    "-w {p} is a device, which cannot rotate"
                )));
            }
            OutputPlan::Device(PathBuf::from(p))
        }
        Some(p) => {
            // As tcpdump's -W: deleting old files needs files that rotate.
            // (A directory series rotates on SIGHUP too.)
            let dir_form = p.ends_with('/') || std::path::Path::new(p).is_dir();
            if retention.any() && !rotation.any() && !dir_form {
                return Err(Failure::usage(
                    "-W, --max-total and --min-free delete the oldest files of a series: \
                     add -C, -G or --rotate-packets (or write into a directory, -w DIR/)",
                ));
            }
            let plan = OutputPlan::from_path(p, rotation.any() || retention.any(), ext);
            if plan == OutputPlan::Stdout && (rotation.any() || retention.any()) {
                return Err(Failure::usage("-w - (standard output) cannot rotate"));
            }
            if matches!(format, RecordFormat::Pcapng) && plan == OutputPlan::Stdout {
                // fine: pcapng streams too
            }
            plan
        }
    };
    let write_mode = WriteMode::parse(&a.write_mode).map_err(Failure::usage)?;
    let tstamp = match a.tstamp.as_str() {
        "host" => TimestampSource::Host,
        "adapter" => TimestampSource::Adapter,
        t => {
            return Err(Failure::usage(format!(
                "--tstamp '{t}' must be host or adapter"
            )))
        }
    };
    let secs = |name: &str, v: f64| -> Result<Duration, Failure> {
        if v > 0.0 && v.is_finite() && v < 1e9 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(Failure::usage(format!(
                "{name} {v} must be a positive number of seconds"
            )))
        }
    };
    if !(1..=64).contains(&a.threads) {
        return Err(Failure::usage(format!(
            "--threads {} must be from 1 to 64",
            a.threads
        )));
    }
    let ring_bytes = match &a.buffer {
        Some(b) => parse_buffer(b).map_err(Failure::usage)?,
        None => default_ring_mib(snap) << 20,
    };
    if !((1 << 20)..=(64 << 30)).contains(&ring_bytes) {
        return Err(Failure::usage(format!(
            "-B {}: the ring must be from 1 MiB to 64 GiB per interface",
            a.buffer.as_deref().unwrap_or("")
        )));
    }
    let writer_buffer = a.writer_buffer.unwrap_or(WRITER_BUFFER_MIB);
    if !(2..=65536).contains(&writer_buffer) {
        return Err(Failure::usage(format!(
            "--writer-buffer {writer_buffer} must be from 2 to 65536 MiB"
        )));
    }
    if a.count == Some(0) {
        return Err(Failure::usage("-c must be at least 1"));
    }
    let source = if !a.read.is_empty() {
        SourceSpec::Files(a.read.clone())
    } else if a.interfaces.is_empty() {
        return Err(Failure::usage(
            "give an interface with -i IFACE (or files with -r FILE)",
        ));
    } else if let Some(twice) = a
        .interfaces
        .iter()
        .enumerate()
        .find_map(|(i, x)| a.interfaces[..i].contains(x).then_some(x))
    {
        return Err(Failure::usage(format!("-i {twice} is given twice")));
    } else {
        SourceSpec::Live(LiveSpec {
            interfaces: a.interfaces.clone(),
            threads: a.threads,
            ring_bytes,
            promiscuous: !a.no_promiscuous,
            fix_offloads: a.fix_offloads,
            tstamp,
            hook: a.hook.parse().map_err(Failure::usage)?,
            monitor: a.monitor,
        })
    };
    let sink = SinkSpec {
        rotation,
        retention,
        write_mode,
        flush_interval: secs("--flush-interval", a.flush_interval)?,
        post_rotate: a.post_rotate.clone(),
        overwrite: a.overwrite,
        writer_buffer_bytes: u64::from(writer_buffer) << 20,
        comment: command_line,
        compress,
        zero_copy: ringcap_engine::ZeroCopy::parse(&a.zero_copy).map_err(Failure::usage)?,
        ..SinkSpec::new(output, format)
    };
    Ok(Plan {
        spec: CaptureSpec {
            source,
            filter: filter_of(a)?,
            snap,
            sampling,
            transforms: crate::privacy::transforms(a)?,
            sink,
            count: a.count,
            duration: a.duration.map(|d| secs("--duration", d)).transpose()?,
            observer: None,
        },
        stats_json: a.stats_json.clone(),
        stats_interval: secs("--stats-interval", a.stats_interval)?,
        user: a.user.clone(),
    })
}

/// True for a character device such as /dev/null: written as a stream.
fn is_char_device(path: &str) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// The default kernel ring per interface, MiB: room for a one-second stall
/// at the testbed's top rates (~0.65 Mpps of short packets take ~150 bytes
/// of ring each, ~95 MB/s; whole 1500-byte frames at ~0.45 Mpps, ~720 MB/s),
/// with the writer's buffer (or, in place, with the writer buffer's memory
/// added: [`ring_takes_unused_writer_buffer`]).
fn default_ring_mib(snap: Snap) -> u64 {
    if snap.kernel_snaplen() <= 512 {
        256
    } else {
        1024
    }
}

/// A capture that writes the ring blocks in place uses no writer buffers:
/// the default ring gets their memory too (one per capture thread of the
/// interface), so that a disk stall has the same room as on the copy path. With 1 GiB alone, a
/// one-second stall of whole packets at ~0.5 Mpps (~760 MB/s) filled 247 of
/// 256 blocks in place and lost a packet (tests/disk_stall.rs). Called on
/// the spec as it starts (a flow stage, added after [`plan`], keeps the
/// blocks from being written in place), unless `-B` gave the ring.
pub fn ring_takes_unused_writer_buffer(spec: &mut CaptureSpec, a: &CaptureArgs) {
    if a.buffer.is_some() {
        return;
    }
    // `--zero-copy on` that cannot be is the capture's error to report.
    let in_place = ringcap_engine::capture::in_place(spec).unwrap_or(false);
    let writer = spec.sink.writer_buffer_bytes;
    if let (true, SourceSpec::Live(l)) = (in_place, &mut spec.source) {
        // A writer buffer per capture thread; an interface's threads share
        // its ring.
        let extra = writer.saturating_mul(u64::from(l.threads));
        l.ring_bytes = l.ring_bytes.saturating_add(extra).min(64 << 30);
    }
}

/// The format when `--format` is not given: the output name's extension
/// says (as dumpcap and tshark read `-w x.pcapng`); a name that says
/// nothing (a directory, no extension) gets pcapng, as with dumpcap, so
/// that whole packets take the in-place path by default (issue 30:
/// stenotype's CPU or less with only `-i` and `-w`); standard output (`-w
/// -`) gets pcap, which every tool reading a pipe takes, and which the
/// in-place path could not serve anyway.
pub fn default_format(write: Option<&str>) -> &'static str {
    match write {
        None | Some("-") => "pcap",
        Some(w) => format_of_name(w).unwrap_or("pcapng"),
    }
}

/// The format an output file's extension names: `.pcap`, `.pcapng` (or
/// `.ntar`), `.rcz`; None for anything else (a directory, `-`, no extension).
pub fn format_of_name(path: &str) -> Option<&'static str> {
    if path.ends_with('/') {
        return None;
    }
    let ext = std::path::Path::new(path).extension()?.to_str()?;
    match ext.to_ascii_lowercase().as_str() {
        "pcap" | "cap" => Some("pcap"),
        "pcapng" | "ntar" => Some("pcapng"),
        "rcz" => Some("compressed"),
        _ => None,
    }
}

/// A filter file bigger than this is not a filter (libpcap's own programs
/// stop at 4096 instructions long before).
const FILTER_FILE_MAX: u64 = 1 << 20;

/// The filter expression: the words after the options, or `-F FILE`.
fn filter_of(a: &CaptureArgs) -> Result<String, Failure> {
    let Some(path) = &a.filter_file else {
        return Ok(a.filter.join(" "));
    };
    if !a.filter.is_empty() {
        return Err(Failure::usage(format!(
            "-F {} and a filter on the command line ({:?}): give one of them",
            path.display(),
            a.filter.join(" ")
        )));
    }
    let what = |e: &dyn std::fmt::Display| Failure::usage(format!("-F {}: {e}", path.display()));
    let f = std::fs::File::open(path).map_err(|e| what(&e))?;
    let mut text = String::new();
    use std::io::Read;
    f.take(FILTER_FILE_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| what(&e))?;
    if text.len() as u64 > FILTER_FILE_MAX {
        return Err(what(&format!(
            "larger than {FILTER_FILE_MAX} bytes: not a filter expression"
        )));
    }
    Ok(strip_comments(&text))
}

/// `text` with each `#` and the rest of its line blanked, as tcpdump reads
/// a -F file; the lines joined by spaces.
fn strip_comments(text: &str) -> String {
    let lines = text
        .lines()
        .map(|l| l.split_once('#').map_or(l, |(code, _)| code));
    lines.collect::<Vec<_>>().join(" ").trim().to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn filter_files_lose_their_comments() {
        let t = "# web and dns\nhost 198.18.0.1 # the server\n and (port 80 or\nport 53)\n";
        assert_eq!(
            super::strip_comments(t),
            "host 198.18.0.1   and (port 80 or port 53)"
        );
        assert_eq!(super::strip_comments("# nothing\n"), "");
    }

    use super::*;

    #[test]
    fn default_ring_follows_the_snap_length() {
        assert_eq!(default_ring_mib(Snap::Bytes(64)), 256);
        assert_eq!(default_ring_mib(Snap::Headers { max: 256 }), 256);
        assert_eq!(default_ring_mib(Snap::Bytes(513)), 1024);
        assert_eq!(default_ring_mib(Snap::Bytes(262_144)), 1024);
    }

    /// `ringcap capture ARGS` parsed.
    fn capture_args(args: &[&str]) -> crate::cli::CaptureArgs {
        use clap::Parser;
        let argv = ["ringcap", "capture"].iter().chain(args).copied();
        let crate::cli::Command::Capture(a) =
            crate::cli::Cli::try_parse_from(argv).unwrap().command
        else {
            panic!("not capture")
        };
        *a
    }

    /// As tcpdump: -W (and the other retention bounds) on one file that
    /// never rotates is refused; with rotation, or a directory, it is not.
    #[test]
    fn retention_needs_files_that_rotate() {
        let d = ringcap_testkit::TempDir::new("retention-rotate");
        let file = d.join("w.pcap").to_string_lossy().into_owned();
        let dir = format!("{}/", d.path().display());
        for extra in [
            &["-W", "3"][..],
            &["--max-total", "1G"],
            &["--min-free", "5"],
        ] {
            let mut args = vec!["-i", "eth0", "-w", &file];
            args.extend_from_slice(extra);
            let Err(e) = plan(&capture_args(&args), String::new()) else {
                panic!("{args:?}: not refused");
            };
            assert!(
                e.message.contains("add -C, -G or --rotate-packets"),
                "{}",
                e.message
            );
        }
        for ok in [
            vec!["-i", "eth0", "-w", &file, "-W", "3", "-C", "10"],
            vec!["-i", "eth0", "-w", &file, "-W", "3", "-G", "60"],
            vec!["-i", "eth0", "-w", &dir, "-W", "3"],
        ] {
            assert!(plan(&capture_args(&ok), String::new()).is_ok(), "{ok:?}");
        }
    }

    /// The ring of a live capture planned from `args` (after `ringcap capture`), MiB.
    fn ring_mib(args: &[&str]) -> u64 {
        let a = capture_args(args);
        let mut spec = plan(&a, String::new()).unwrap().spec;
        ring_takes_unused_writer_buffer(&mut spec, &a);
        match spec.source {
            SourceSpec::Live(l) => l.ring_bytes >> 20,
            SourceSpec::Files(_) => panic!("not live"),
        }
    }

    #[test]
    fn in_place_the_default_ring_takes_the_writer_buffer() {
        let d = ringcap_testkit::TempDir::new("ring-default");
        let out = |name: &str| d.join(name).to_string_lossy().into_owned();
        let (ng, pcap) = (out("x.pcapng"), out("x.pcap"));
        // Whole packets to pcapng: in place by default.
        assert_eq!(ring_mib(&["-i", "eth0", "-w", &ng]), 1024 + 256);
        assert_eq!(
            ring_mib(&["-i", "eth0", "-w", &ng, "--writer-buffer", "64"]),
            1024 + 64
        );
        // A writer buffer per capture thread.
        assert_eq!(
            ring_mib(&["-i", "eth0", "-w", &ng, "--threads", "2"]),
            1024 + 2 * 256
        );
        // Not in place: the writer buffer is used.
        assert_eq!(ring_mib(&["-i", "eth0", "-w", &pcap]), 1024);
        assert_eq!(
            ring_mib(&["-i", "eth0", "-w", &ng, "--zero-copy", "off"]),
            1024
        );
        assert_eq!(
            ring_mib(&["-i", "eth0", "-w", &ng, "--write-mode", "buffered"]),
            1024
        );
        // A packet count (or a flow stage, added by the session) keeps the
        // blocks from being written in place.
        assert_eq!(ring_mib(&["-i", "eth0", "-w", &ng, "-c", "5"]), 1024);
        // A ring given is the ring.
        assert_eq!(ring_mib(&["-i", "eth0", "-w", &ng, "-B", "1G"]), 1024);
        assert_eq!(ring_mib(&["-i", "eth0", "-w", &ng, "-s", "64"]), 256 + 256);
    }

    #[test]
    fn names_that_say_nothing_get_pcapng_and_stdout_pcap() {
        assert_eq!(default_format(Some("/srv/pcap/")), "pcapng");
        assert_eq!(default_format(Some("capture")), "pcapng");
        assert_eq!(default_format(Some("x.pcap")), "pcap");
        assert_eq!(default_format(Some("x.rcz")), "compressed");
        assert_eq!(default_format(Some("-")), "pcap");
        assert_eq!(default_format(None), "pcap");
    }

    #[test]
    fn the_output_name_says_the_format() {
        assert_eq!(format_of_name("x.pcapng"), Some("pcapng"));
        assert_eq!(format_of_name("/srv/a.b/X.PCAPNG"), Some("pcapng"));
        assert_eq!(format_of_name("x.pcap"), Some("pcap"));
        assert_eq!(format_of_name("h.rcz"), Some("compressed"));
        for other in [
            "-",
            "/srv/pcap/",
            "/srv/pcap",
            "x.txt",
            "x.pcapng/",
            ".pcapng",
        ] {
            let got = format_of_name(other);
            assert!(got.is_none(), "{other}: {got:?}");
        }
    }
}
