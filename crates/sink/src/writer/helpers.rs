//! The writer's small pure parts: units of output in a batch, records
//! compressed into blocks, disk-full errors, ownership checks, names.

use super::*;
use ringcap_format::record::{Endian, Header};

/// The unit of output at `bytes[p..]` in `format`, if whole: (length,
/// timestamp in ns, packets). A unit is a record (a packet if it has a
/// timestamp: a converted ring block's padding blocks are not), or with
/// `coded` a compressed block coded elsewhere (see [`Batch::coded`]).
pub(super) fn unit_at(
    format: RecordFormat,
    coded: bool,
    bytes: &[u8],
    p: usize,
) -> Option<(usize, Option<u64>, u64)> {
    if !coded {
        let (len, ts) = record_at(format, bytes, p)?;
        return Some((len, ts, u64::from(ts.is_some())));
    }
    let rest = bytes.get(p..)?;
    let b = ringcap_compress::peek_block(rest, 0).ok()?;
    let ns = match format {
        RecordFormat::Pcap(ringcap_format::TsResolution::Micro) => b.first_ts * 1_000,
        _ => b.first_ts,
    };
    (b.len <= rest.len()).then_some((b.len, Some(ns), u64::from(b.records)))
}

/// Codes the pcap records `bytes[from..to]` (in `format`, which is pcap)
/// into compressed blocks appended to `out`, ending a block after every
/// `per_block` records and at the end. Returns the records coded.
pub fn compress_records(
    enc: &mut ringcap_compress::Encoder,
    format: RecordFormat,
    bytes: &[u8],
    from: usize,
    to: usize,
    per_block: usize,
    out: &mut Vec<u8>,
) -> u64 {
    let RecordFormat::Pcap(res) = format else {
        return 0;
    };
    let mut p = from;
    let mut n = 0u64;
    while p + pcap::RECORD_HEADER_LEN <= to {
        let Some(h) = Header::read(&bytes[p..], Endian::Host) else {
            break;
        };
        let (secs, frac, caplen, wire) = (
            u64::from(h.secs),
            u64::from(h.frac),
            h.caplen as usize,
            h.wire_len,
        );
        let ts = match res {
            ringcap_format::TsResolution::Micro => secs * 1_000_000 + frac,
            ringcap_format::TsResolution::Nano => secs * 1_000_000_000 + frac,
        };
        let start = p + pcap::RECORD_HEADER_LEN;
        let Some(data) = bytes
            .get(start..start + caplen)
            .filter(|_| start + caplen <= to)
        else {
            break;
        };
        n += 1;
        if enc.push(ts, wire, data) || (n as usize).is_multiple_of(per_block) {
            enc.finish_block(out);
        }
        p = start + caplen;
    }
    enc.finish_block(out);
    n
}

/// Timestamp of the first packet (EPB) at or after `off` in pcapng blocks.
pub(super) fn first_packet_ts(bytes: &[u8], mut off: usize) -> Option<u64> {
    while let Some((len, ts)) = record_at(RecordFormat::Pcapng, bytes, off) {
        if ts.is_some() {
            return ts;
        }
        off += len;
    }
    None
}

/// ENOSPC or EDQUOT.
pub(super) fn is_disk_full(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Makes and removes a hidden file in `dir`: an error says why no capture
/// file could be made there.
pub(super) fn probe_dir(dir: &Path) -> io::Result<()> {
    let probe = dir.join(format!(".ringcap-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => std::fs::remove_file(&probe),
        // Ours from an earlier run of this pid, or a name someone planted:
        // either way the directory takes new files.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot make files in {}: {e}", dir.display()),
        )),
    }
}

/// With `-Z`, files are created and renamed after privileges are dropped
/// (tcpdump's -Z breaks rotation this way): refuse up front a directory the
/// user cannot write to.
pub(super) fn check_writable_by(dir: &Path, uid: u32, gid: u32) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir)?;
    let mode = m.mode();
    let ok = (m.uid() == uid && mode & 0o300 == 0o300)
        || (m.gid() == gid && mode & 0o030 == 0o030)
        || mode & 0o003 == 0o003;
    if ok {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} is not writable by uid {uid}, which -Z switches to before files are renamed and rotated: make it writable (chown {uid}:{gid} {}) or name a directory that does not exist yet (ringcap then creates it for that user)",
            dir.display(),
            dir.display()
        ),
    ))
}

pub(super) fn display(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "standard output".into())
}

pub(super) fn os_name() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("Linux {}", release.trim())
}

/// Runs `cmd FILE` through the shell in the background; a thread reaps it so
/// capture never waits for it.
pub(super) fn run_post_rotate(cmd: &str, file: &Path) {
    let child = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{cmd} \"$1\""))
        .arg("ringcap-post-rotate")
        .arg(file)
        .stdin(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = child {
        std::thread::spawn(move || {
            let _ = child.wait();
        });
    }
}

/// How long after the end of a time-rotated file's period a live packet of
/// that period can still reach the writer: the kernel retires a ring block
/// within a flush interval (or 50 ms), a capture thread ships a partial
/// batch within a flush interval, and scheduling adds a little. Closing
/// sooner would open a second file for the same period when one comes.
pub(super) fn late_ns(flush_interval: Duration) -> u64 {
    let f = flush_interval.as_nanos() as u64;
    2 * f + 100_000_000
}

pub(super) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
