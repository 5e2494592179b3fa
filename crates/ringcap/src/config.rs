//! Turning command-line arguments into a checked capture plan.

use crate::cli::{parse_size, CaptureArgs};
use crate::failure::Failure;
use ringcap_format::TsResolution;
use ringcap_sink::files::{OutputPlan, Retention, Rotation};
use ringcap_sink::{RecordFormat, WriteMode};
use ringcap_source::TimestampSource;
use ringcap_stages::{SampleMode, Sampling, Snap};
use std::time::Duration;

/// Everything a capture needs, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The filter expression ("" = everything).
    pub filter: String,
    /// How much of each packet to keep.
    pub snap: Snap,
    /// Sampling.
    pub sampling: Sampling,
    /// Output record format.
    pub format: RecordFormat,
    /// Output plan.
    pub output: OutputPlan,
    /// Rotation triggers.
    pub rotation: Rotation,
    /// Retention limits.
    pub retention: Retention,
    /// Write strategy.
    pub write_mode: WriteMode,
    /// Stop after this many written packets.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Status/JSON interval.
    pub stats_interval: Duration,
    /// Flush interval.
    pub flush_interval: Duration,
    /// Timestamp source.
    pub tstamp: TimestampSource,
    /// Threads per interface.
    pub threads: u32,
    /// Ring MiB per interface.
    pub buffer_mib: u32,
    /// Writer buffer MiB per capture thread.
    pub writer_buffer_mib: u32,
    /// Command run on each completed file.
    pub post_rotate: Option<String>,
    /// Replace existing output files.
    pub overwrite: bool,
}

/// Checks the arguments.
pub fn plan(a: &CaptureArgs) -> Result<Plan, Failure> {
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
    let (format, ext) = match a.format.as_str() {
        "pcap" => (RecordFormat::Pcap(resolution), "pcap"),
        "pcapng" => (RecordFormat::Pcapng, "pcapng"),
        f => {
            return Err(Failure::usage(format!(
                "--format '{f}' must be pcap or pcapng"
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
        None => {
            if rotation.any() || retention.any() {
                return Err(Failure::usage("rotation and retention options need -w"));
            }
            OutputPlan::Discard
        }
        Some(p) => {
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
    let buffer_mib = a.buffer_mib.unwrap_or(default_ring_mib(snap));
    if buffer_mib == 0 || buffer_mib > 65536 {
        return Err(Failure::usage(format!(
            "-B {buffer_mib} must be from 1 to 65536 MiB"
        )));
    }
    if a.writer_buffer < 2 || a.writer_buffer > 65536 {
        return Err(Failure::usage(format!(
            "--writer-buffer {} must be from 2 to 65536 MiB",
            a.writer_buffer
        )));
    }
    if a.count == Some(0) {
        return Err(Failure::usage("-c must be at least 1"));
    }
    Ok(Plan {
        filter: a.filter.join(" "),
        snap,
        sampling,
        format,
        output,
        rotation,
        retention,
        write_mode,
        count: a.count,
        duration: a.duration.map(|d| secs("--duration", d)).transpose()?,
        stats_interval: secs("--stats-interval", a.stats_interval)?,
        flush_interval: secs("--flush-interval", a.flush_interval)?,
        tstamp,
        threads: a.threads,
        buffer_mib,
        writer_buffer_mib: a.writer_buffer,
        post_rotate: a.post_rotate.clone(),
        overwrite: a.overwrite,
    })
}

/// The default kernel ring per interface, MiB: room for a one-second stall
/// at the testbed's top rates (~0.65 Mpps of short packets take ~150 bytes
/// of ring each, ~95 MB/s; whole 1500-byte frames at ~0.45 Mpps, ~720 MB/s).
fn default_ring_mib(snap: Snap) -> u32 {
    if snap.kernel_snaplen() <= 512 {
        256
    } else {
        1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ring_follows_the_snap_length() {
        assert_eq!(default_ring_mib(Snap::Bytes(64)), 256);
        assert_eq!(default_ring_mib(Snap::Headers { max: 256 }), 256);
        assert_eq!(default_ring_mib(Snap::Bytes(513)), 1024);
        assert_eq!(default_ring_mib(Snap::Bytes(262_144)), 1024);
    }
}
