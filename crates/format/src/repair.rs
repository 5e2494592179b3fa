//! Recovering capture files cut short by a crash or a full disk.
//!
//! [`check`] reads a file with the same validation as [`Reader`] and reports how
//! much of it is made of complete, valid records; [`repair`] then truncates the
//! file after the last of them (in place, with `ftruncate`, then `fsync`), which
//! leaves a file every reader accepts. Both stream through the file, so they work
//! on files of any size.
//!
//! Besides the reader's checks, a pcap record header of all zeros counts as the
//! end of the valid data: it is what a file system leaves in blocks a crash kept
//! from being written.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

use crate::read::{FileFormat, FormatError, FormatErrorKind, Reader};

/// What [`check`] or [`repair`] found.
#[derive(Debug)]
pub struct RepairReport {
    /// The kind of file.
    pub format: FileFormat,
    /// Complete packets in the valid part of the file.
    pub packets: u64,
    /// Length of the valid part: the file's length after repair.
    pub valid_len: u64,
    /// Length of the file before repair.
    pub original_len: u64,
    /// Why the valid part ends before the end of the file (`None` if the whole
    /// file is valid).
    pub problem: Option<FormatError>,
}

impl RepairReport {
    /// Bytes cut (or, for [`check`], that a repair would cut).
    pub fn cut_len(&self) -> u64 {
        self.original_len - self.valid_len
    }

    /// True if the whole file is valid and nothing needs cutting.
    pub fn is_intact(&self) -> bool {
        self.valid_len == self.original_len
    }
}

/// Why a file could not be checked or repaired. The file is left untouched in
/// every case except a failure of the final truncate or sync (see
/// [`RepairError::Io`]).
#[derive(Debug)]
pub enum RepairError {
    /// Opening, reading, truncating or syncing the file failed.
    Io(io::Error),
    /// The file does not start with a pcap or pcapng header this crate
    /// understands, so it is not touched.
    NotCapture(FormatError),
    /// The file is a capture file, but it ends (or is damaged) inside its headers:
    /// the pcap file header, or for pcapng before the end of the first interface
    /// description block. No valid file can be cut from it.
    HeaderIncomplete(FormatError),
    /// Another process holds the file's lock: a capture is still writing it.
    InUse,
}

impl fmt::Display for RepairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairError::Io(e) => write!(f, "{e}"),
            RepairError::NotCapture(e) => write!(
                f,
                "not a capture file this tool understands, left untouched: {e}"
            ),
            RepairError::HeaderIncomplete(e) => write!(
                f,
                "the file's headers are incomplete or damaged, so no valid capture file can be cut from it; left untouched: {e}"
            ),
            RepairError::InUse => write!(
                f,
                "a running capture is still writing it (it holds the file's lock); left untouched"
            ),
        }
    }
}

impl std::error::Error for RepairError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RepairError::Io(e) => Some(e),
            RepairError::NotCapture(e) | RepairError::HeaderIncomplete(e) => Some(e),
            RepairError::InUse => None,
        }
    }
}

impl From<io::Error> for RepairError {
    fn from(e: io::Error) -> Self {
        RepairError::Io(e)
    }
}

/// Validates the file open as `file`, of length `original_len`.
fn scan(file: &File, original_len: u64) -> Result<RepairReport, RepairError> {
    let mut reader = match Reader::with_strictness(file, true) {
        Ok(r) => r,
        Err(e) => {
            return Err(match e.kind {
                FormatErrorKind::Io(io) => RepairError::Io(io),
                FormatErrorKind::Empty | FormatErrorKind::NotCapture { .. } => {
                    RepairError::NotCapture(e)
                }
                FormatErrorKind::UnsupportedVersion { .. } => RepairError::NotCapture(e),
                _ => RepairError::HeaderIncomplete(e),
            })
        }
    };
    let mut packets = 0u64;
    let problem = loop {
        match reader.next_packet() {
            Ok(Some(_)) => packets += 1,
            Ok(None) => break None,
            Err(e) => {
                if let FormatErrorKind::Io(io) = e.kind {
                    return Err(RepairError::Io(io));
                }
                break Some(e);
            }
        }
    };
    let format = reader.format();
    if let Some(e) = problem {
        if format == FileFormat::Pcapng && reader.interfaces().is_empty() {
            return Err(RepairError::HeaderIncomplete(e));
        }
        return Ok(RepairReport {
            format,
            packets,
            valid_len: reader.offset(),
            original_len,
            problem: Some(e),
        });
    }
    Ok(RepairReport {
        format,
        packets,
        valid_len: reader.offset(),
        original_len: original_len.max(reader.offset()),
        problem: None,
    })
}

/// Checks a capture file without changing it: how many complete packets it
/// holds and where its valid part ends.
///
/// Fails (see [`RepairError`]) if the file is not a capture file, or is one whose
/// headers are incomplete.
pub fn check(path: &Path) -> Result<RepairReport, RepairError> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    scan(&file, len)
}

/// Checks a capture file and truncates it after the last complete, valid record,
/// then syncs it to disk. A file that is entirely valid is not written to.
///
/// Refuses, leaving the file untouched, a file that does not start with a pcap or
/// pcapng header this crate understands, and a file whose headers are cut short
/// (the pcap file header; for pcapng everything up to the end of the first
/// interface description block), since no valid file can be made from it.
///
/// Symbolic links are not followed (the open fails): a file recovered on
/// ringcap's behalf in a directory another user can write to must not lead
/// it to truncate a file elsewhere.
pub fn repair(path: &Path) -> Result<RepairReport, RepairError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        // A file that cannot be written (a read-only filesystem, its mode)
        // needs no writing when it is intact: say so rather than fail.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EROFS | libc::EACCES | libc::EPERM)
            ) =>
        {
            let report = check(path)?;
            return if report.valid_len == report.original_len {
                Ok(report)
            } else {
                Err(RepairError::Io(e))
            };
        }
        Err(e) => return Err(e.into()),
    };
    // ringcap's writer holds an exclusive flock on the files it writes.
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Err(RepairError::InUse),
        Err(std::fs::TryLockError::Error(e)) => return Err(RepairError::Io(e)),
    }
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(RepairError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    let len = meta.len();
    let report = scan(&file, len)?;
    if report.valid_len < len {
        file.set_len(report.valid_len)?;
        file.sync_all()?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::tests::{pcap_file, pcapng_file, read_all};
    use crate::TsResolution;
    use ringcap_testkit::TempFile;

    /// A temporary file holding `contents`, removed when dropped.
    fn temp_file(contents: &[u8]) -> TempFile {
        let t = TempFile::new("repair", "pcap").unwrap();
        std::fs::write(t.path(), contents).unwrap();
        t
    }

    fn contents(t: &TempFile) -> Vec<u8> {
        std::fs::read(t.path()).unwrap()
    }

    /// Repairs every prefix of `f` and checks the result.
    /// Prefixes shorter than `header_end` are refused, except one of length
    /// `also_ok` (a pcapng file holding just its section header).
    fn repair_every_prefix(
        f: &[u8],
        header_end: usize,
        also_ok: Option<usize>,
        starts: &[usize],
        packets_before: &[usize],
    ) {
        for cut in 0..=f.len() {
            let t = temp_file(&f[..cut]);
            let checked = check(t.path());
            let repaired = repair(t.path());
            let after = contents(&t);
            match repaired {
                Err(e) => {
                    assert!(cut < header_end, "cut {cut}: {e}");
                    assert!(checked.is_err());
                    assert_eq!(after, &f[..cut], "refused file must be untouched");
                    if cut < 4 {
                        assert!(matches!(e, RepairError::NotCapture(_)));
                    } else {
                        assert!(
                            matches!(e, RepairError::HeaderIncomplete(_)),
                            "cut {cut}: {e}"
                        );
                    }
                }
                Ok(rep) => {
                    assert!(cut >= header_end || Some(cut) == also_ok, "cut {cut}");
                    let c = checked.unwrap();
                    assert_eq!(
                        (c.valid_len, c.packets, c.original_len),
                        (rep.valid_len, rep.packets, rep.original_len)
                    );
                    let boundary = starts
                        .iter()
                        .chain([&f.len()])
                        .copied()
                        .filter(|&s| s <= cut)
                        .max()
                        .unwrap();
                    assert_eq!(rep.valid_len, boundary as u64, "cut {cut}");
                    assert_eq!(rep.original_len, cut as u64);
                    assert_eq!(rep.problem.is_none(), boundary == cut);
                    assert_eq!(after, &f[..boundary]);
                    let (got, end, _) = read_all(&after).unwrap();
                    end.unwrap();
                    let want = packets_before[starts
                        .iter()
                        .position(|&s| s == boundary)
                        .unwrap_or(starts.len())];
                    assert_eq!(got.len(), want, "cut {cut}");
                    assert_eq!(rep.packets, want as u64);
                }
            }
        }
    }

    #[test]
    fn repair_pcap_cut_anywhere() {
        for res in [TsResolution::Micro, TsResolution::Nano] {
            let (f, starts, _) = pcap_file(res, 5);
            // Packets before each record start (and before the end).
            let before: Vec<usize> = (0..=starts.len()).collect();
            repair_every_prefix(&f, 24, None, &starts, &before);
        }
    }

    #[test]
    fn repair_pcapng_cut_anywhere() {
        let (f, starts, _) = pcapng_file(5);
        // starts: IDB0, IDB1, 5 EPBs, ISB. Valid from the end of the first IDB.
        let before = vec![0, 0, 0, 1, 2, 3, 4, 5, 5];
        repair_every_prefix(&f, starts[1], Some(starts[0]), &starts, &before);
    }

    #[test]
    fn locked_file_is_left_alone() {
        let (mut f, _, _) = pcap_file(TsResolution::Micro, 3);
        f.extend_from_slice(&[0xaa; 7]);
        let t = temp_file(&f);
        let writer = std::fs::File::open(t.path()).unwrap();
        writer.lock().unwrap();
        assert!(matches!(repair(t.path()), Err(RepairError::InUse)));
        assert_eq!(contents(&t), f);
        drop(writer);
        assert_eq!(repair(t.path()).unwrap().packets, 3);
    }

    #[test]
    fn zero_tail_is_cut() {
        let (mut f, _, _) = pcap_file(TsResolution::Micro, 3);
        let good = f.len();
        f.extend_from_slice(&[0; 4096]);
        let t = temp_file(&f);
        let rep = repair(t.path()).unwrap();
        assert_eq!(rep.valid_len, good as u64);
        assert_eq!(rep.cut_len(), 4096);
        assert_eq!(rep.packets, 3);
        assert!(matches!(
            rep.problem.as_ref().unwrap().kind,
            FormatErrorKind::ZeroRecord
        ));
        assert_eq!(contents(&t).len(), good);

        let (mut f, _, _) = pcapng_file(3);
        let good = f.len();
        f.extend_from_slice(&[0; 4096]);
        let t = temp_file(&f);
        let rep = repair(t.path()).unwrap();
        assert_eq!(rep.valid_len, good as u64);
        assert_eq!(rep.packets, 3);
        assert_eq!(contents(&t).len(), good);
        // An intact file is reported intact and not touched.
        let rep = repair(t.path()).unwrap();
        assert!(rep.is_intact());
        assert!(rep.problem.is_none());
    }

    #[test]
    fn refuses_other_files() {
        let t = temp_file(b"\x7fELF and more bytes");
        let e = check(t.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not a capture file this tool understands, left untouched: byte 0: not a pcap or pcapng file (starts with 7f 45 4c 46)"
        );
        assert!(repair(t.path()).is_err());
        assert_eq!(contents(&t), b"\x7fELF and more bytes");
        let missing = std::env::temp_dir().join("ringcap-format-no-such-file");
        assert!(matches!(check(&missing), Err(RepairError::Io(_))));
    }
}
