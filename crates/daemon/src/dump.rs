//! Daemon dump mode (pktd's): the daemon writes a session's packets to files
//! it names itself, under a directory per user (`dump_dir/<uid>/`), rotating
//! them as the client asked (seconds, packets, bytes, or on `Checkpoint`) and
//! deleting that user's oldest files beyond the grant's quota. A client can
//! list, fetch (as a read-only descriptor) and delete only its own files, by
//! names it cannot steer anywhere else: no `/`, no leading `.`, and the file
//! opened with O_NOFOLLOW must be a regular file in that directory.
//!
//! **The directories are checked, not trusted.** `dump_dir` must be a real
//! directory (no symlink anywhere in its path), owned by root or the
//! daemon's user and writable by no one else, as are its parents unless
//! sticky ([`check_dump_dir`], the rule of [`crate::trust`], also run
//! at start so that the daemon says why it will not serve dumps); each
//! user's directory is made and opened relative to it with `O_NOFOLLOW`
//! and must be the daemon's own, private ([`user_dir`]). Since nobody else
//! can write `dump_dir`, the checked per-user directory cannot be swapped
//! afterwards, and the writer may use its path.
//!
//! **The quota counts the file being written.** The engine's retention
//! deletes completed files only, so a dump that never rotates would grow
//! past any quota. Every file is therefore cut at half the quota
//! ([`file_cap`]: the client's own rotation applies when smaller), and
//! completed files are kept to the other half: the user's files,
//! the one being written included, stay within the quota. As a backstop
//! (several dumps of one user at once), the connection measures the
//! directory ([`bytes_held`]) and ends a dump that finds it over the quota,
//! telling the client why.

use ringcap_engine::{
    Board, Encoder, FileSink, OutputPlan, RecordFormat, Retention, Rotation, SinkInterface,
    SinkSpec, WriteMode, WriterHandle,
};
use ringcap_format::TsResolution;
use ringcap_proto::{validate::is_dump_name, DumpFile, DumpRequest, OutputFormat};
use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// A running dump: the writer thread of its files.
pub struct Dump {
    writer: Option<WriterHandle>,
    /// What the writer publishes (outlives the writer's handle).
    shared: Arc<ringcap_engine::WriterShared>,
    published: usize,
    /// The user's dump directory.
    pub dir: PathBuf,
}

fn untrusted(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, msg)
}

/// Opens `dump_dir` (made, mode 0750, if missing) after checking that it
/// can be trusted ([`crate::trust`]: an absolute path without symlinks, a
/// directory owned by root or the daemon's user, writable by neither group
/// nor others, and parents no other user can change).
pub fn check_dump_dir(dump_dir: &Path) -> io::Result<std::os::fd::OwnedFd> {
    check_dump_dir_as(dump_dir, true)
}

/// [`check_dump_dir`] for `ringcapd --check`: a missing directory is not
/// made (the daemon makes it), `Ok(None)`.
pub fn check_dump_dir_only(dump_dir: &Path) -> io::Result<Option<std::os::fd::OwnedFd>> {
    if dump_dir.is_absolute() && std::fs::symlink_metadata(dump_dir).is_err() {
        return Ok(None);
    }
    check_dump_dir_as(dump_dir, false).map(Some)
}

fn check_dump_dir_as(dump_dir: &Path, make: bool) -> io::Result<std::os::fd::OwnedFd> {
    if make && dump_dir.is_absolute() && std::fs::symlink_metadata(dump_dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dump_dir)?;
    }
    crate::trust::open_trusted(dump_dir, crate::trust::DUMP_DIR)
}

/// `dump_dir/<uid>`: made (mode 0700) relative to the checked `dump_dir`
/// if missing, opened without following a symlink, and used only if it is
/// the daemon's own directory, private to it.
pub fn user_dir(dump_dir: &Path, uid: u32) -> io::Result<PathBuf> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{mkdirat, Mode};
    let parent = check_dump_dir(dump_dir)?;
    let name = uid.to_string();
    match mkdirat(&parent, name.as_str(), Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = openat(
        &parent,
        name.as_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        untrusted(format!(
            "{}/{name} is not a directory the daemon may use: {e}",
            dump_dir.display()
        ))
    })?;
    let st = nix::sys::stat::fstat(&fd).map_err(io::Error::from)?;
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != me || st.st_mode & 0o077 != 0 {
        return Err(untrusted(format!(
            "{}/{name} is owned by uid {} with mode {:o}: not the daemon's private directory, \
             not using it",
            dump_dir.display(),
            st.st_uid,
            st.st_mode & 0o7777
        )));
    }
    Ok(dump_dir.join(name))
}

/// The largest file a dump with `quota` writes: half the quota, so that
/// the file being written and the completed files kept (the other half)
/// stay within it together.
pub fn file_cap(quota: u64) -> u64 {
    (quota / 2).max(1)
}

/// Bytes of the regular files in `dir`, hidden ones (files being written)
/// included.
pub fn bytes_held(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::symlink_metadata(e.path()).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

impl Dump {
    /// Starts the writer for a session's dump; returns it and the sink the
    /// session's packets go to.
    pub fn open(
        dir: PathBuf,
        req: &DumpRequest,
        format: OutputFormat,
        snaplen: u32,
        quota: u64,
        filter: Option<String>,
        interface: &str,
    ) -> Result<(Dump, Encoder), String> {
        let (format, ext) = match format {
            OutputFormat::Pcap => (RecordFormat::Pcap(TsResolution::Nano), "pcap"),
            OutputFormat::Pcapng => (RecordFormat::Pcapng, "pcapng"),
        };
        let cap = file_cap(quota);
        let sink = SinkSpec {
            rotation: Rotation {
                packets: req.rotate_packets,
                bytes: Some(req.rotate_bytes.map_or(cap, |b| b.min(cap))),
                seconds: req.rotate_seconds,
                align: false,
            },
            retention: Retention {
                max_total: Some(quota.saturating_sub(cap)),
                // A client holds descriptors of its files (FetchDump): a
                // file retention deletes must not stay on disk through them.
                empty_first: true,
                ..Retention::default()
            },
            // The page cache: dumps are small next to a sensor's own capture,
            // and O_DIRECT wants a filesystem that supports it.
            write_mode: WriteMode::Buffered,
            flush_interval: Duration::from_secs(1),
            writer_buffer_bytes: 8 << 20,
            file_mode: 0o600,
            comment: "ringcapd dump".into(),
            // Each published file gets its index (`.NAME.ringcap-index`,
            // issue 27), as with `ringcap capture`: the writer tells the
            // indexer (a background thread at nice 19) of each file it
            // publishes and deletes, and an index goes with its file. Its
            // bytes count toward the user's quota like the files'
            // ([`bytes_held`]).
            files: Some(ringcap_engine::FileHook(Arc::new(
                ringcap_index::background::Indexer::start(|| {
                    let _ = ringcap_source::sys::set_thread_nice(19);
                }),
            ))),
            ..SinkSpec::new(
                OutputPlan::Series {
                    dir: dir.clone(),
                    template: format!("dump-%Y%m%d-%H%M%S-{{seq}}.{ext}"),
                },
                format,
            )
        };
        let board = Arc::new(Board::new(&[(interface.to_string(), 1)]));
        let FileSink { writer, encoder } = FileSink::open(
            &sink,
            vec![SinkInterface {
                name: interface.to_string(),
                linktype: 1,
                snaplen,
                filter,
                stats: Some(0),
            }],
            board,
        )
        .map_err(|e| e.message)?;
        Ok((
            Dump {
                shared: writer.shared.clone(),
                writer: Some(writer),
                published: 0,
                dir,
            },
            encoder,
        ))
    }

    /// Names of the files completed since the last call.
    pub fn take_published(&mut self) -> Vec<String> {
        let Ok(done) = self.shared.completed.lock() else {
            return Vec::new();
        };
        let new: Vec<String> = done
            .iter()
            .skip(self.published)
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        self.published = done.len();
        new
    }

    /// True once its writer has failed (the session then ends).
    pub fn failed(&self) -> bool {
        self.shared.failure.lock().map_or(true, |f| f.is_some())
    }

    /// Starts a new file now.
    pub fn checkpoint(&self) {
        if let Some(w) = &self.writer {
            w.shared.request_rotation();
        }
    }

    /// Waits for the writer (after the session's sink was closed) and says
    /// why it failed, if it did.
    pub fn finish(&mut self) -> Option<String> {
        let w = self.writer.take()?;
        let shared = w.join();
        let failure = shared.failure.lock().ok().and_then(|f| f.clone());
        failure.map(|f| f.message)
    }
}

/// The user's completed dump files, oldest first.
pub fn list(dir: &Path) -> Vec<DumpFile> {
    let mut files: Vec<DumpFile> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let m = e.metadata().ok()?;
            (is_dump_name(&name) && m.is_file()).then(|| DumpFile {
                name,
                bytes: m.len(),
                modified_s: m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
            })
        })
        .collect();
    files.sort_by(|a, b| (a.modified_s, &a.name).cmp(&(b.modified_s, &b.name)));
    files
}

fn checked(dir: &Path, name: &str) -> io::Result<PathBuf> {
    if !is_dump_name(name) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a dump name (letters, digits, '.', '_', '-'; not starting with '.')",
        ));
    }
    Ok(dir.join(name))
}

/// One of the user's files, opened read-only (never through a symlink).
pub fn open(dir: &Path, name: &str) -> io::Result<File> {
    let path = checked(dir, name)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("no dump named {name}: {e}")))?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name} is not a dump file"),
        ));
    }
    Ok(f)
}

/// Deletes one of the user's files, and its index (whose bytes count
/// toward the quota too, and which the user cannot name).
pub fn delete(dir: &Path, name: &str) -> io::Result<()> {
    let path = checked(dir, name)?;
    let m = std::fs::symlink_metadata(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("no dump named {name}: {e}")))?;
    if !m.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name} is not a dump file"),
        ));
    }
    // Emptied first: a descriptor the user fetched must not keep the
    // deleted file's blocks on disk, beyond the quota.
    ringcap_engine::remove_releasing(&path)?;
    match std::fs::remove_file(ringcap_format::sidecar::index_path(&path)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_dump_takes_its_index_along() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("dump-20261128-031953-000001.pcap");
        std::fs::write(&f, b"x").unwrap();
        std::fs::write(ringcap_format::sidecar::index_path(&f), b"idx").unwrap();
        delete(d.path(), "dump-20261128-031953-000001.pcap").unwrap();
        assert_eq!(bytes_held(d.path()), 0, "the index is gone too");
        let g = d.path().join("dump-20261128-031953-000002.pcap");
        std::fs::write(&g, b"x").unwrap();
        delete(d.path(), "dump-20261128-031953-000002.pcap").expect("no index: fine");
    }

    #[test]
    fn names_cannot_leave_the_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.pcap"), b"x").unwrap();
        std::fs::write(d.path().join(".hidden"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("link.pcap")).unwrap();
        for bad in ["../a.pcap", "/etc/passwd", "a/b", ".hidden", "", "..", "."] {
            assert!(open(d.path(), bad).is_err(), "{bad}");
            assert!(delete(d.path(), bad).is_err(), "{bad}");
        }
        assert!(open(d.path(), "link.pcap").is_err(), "followed a symlink");
        assert!(delete(d.path(), "link.pcap").is_err(), "deleted a symlink");
        assert!(std::path::Path::new("/etc/passwd").exists());
        let names: Vec<String> = list(d.path()).into_iter().map(|f| f.name).collect();
        assert_eq!(names, vec!["a.pcap".to_string()]);
        assert!(open(d.path(), "a.pcap").is_ok());
        delete(d.path(), "a.pcap").unwrap();
        assert!(list(d.path()).is_empty());
    }
}
