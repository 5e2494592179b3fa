//! Where a query's answer is written (`-w`): standard output, a FIFO or a
//! device as it is, or a regular file written whole or not at all. A file
//! is written under a hidden name beside it and renamed over FILE only when
//! the answer is complete, so a query that fails (a bad filter, a sensor
//! gone, a file that cannot be read) or is interrupted leaves FILE as it
//! was, and a FILE that is also one of the query's inputs is read whole
//! before it is replaced (tcpdump's `-w` truncates first; `ringcap capture
//! -w` publishes the same way).
//!
//! The answer is not fsync'd before the rename, as tcpdump, tshark and
//! editcap do not sync theirs: it is a copy of packets that stay in the
//! capture files, made again by running the query again, and the fsync
//! of a 20 MB answer measured 30-45 ms on the development VM however early
//! its write-back was started (the host's cache flush): a third of a
//! selective query. Errors and signals still leave FILE as it was; after
//! a power loss, ext4 (data=ordered, auto_da_alloc, Debian's default)
//! writes a file renamed over another before the rename, other filesystems
//! may leave FILE empty.

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use crate::failure::Failure;

/// An answer's destination, opened by [`open`] and closed by
/// [`Answer::finish`].
pub(crate) struct Answer {
    whole: Option<Whole>,
}

/// A regular file written under a hidden name, renamed when whole.
struct Whole {
    tmp: PathBuf,
    path: PathBuf,
    _cleanup: RemoveOnSignal,
}

/// Buffer of a stream's writer (standard output, a FIFO): small, so that a
/// reader that stops reading holds the query back (ringcapd's retrieval,
/// `ringcap serve` and a slow pipe see the back-pressure), not a megabyte
/// of the answer taken ahead of it.
const STREAM_BUFFER: usize = 64 << 10;

/// The writer for `-w` (`None`: standard output, refused on a terminal)
/// and the handle that completes it.
pub(crate) fn open(write: Option<&str>) -> Result<(Box<dyn Write>, Answer), Failure> {
    let plain = |w: Box<dyn Write>| Ok((w, Answer { whole: None }));
    match write {
        Some("-") | None => {
            if write.is_none() && io::stdout().is_terminal() {
                return Err(Failure::usage(
                    "query: standard output is a terminal; give -w FILE (or -w - to force)",
                ));
            }
            plain(Box::new(io::BufWriter::with_capacity(
                STREAM_BUFFER,
                io::stdout(),
            )))
        }
        // A FIFO or a device (`-w /dev/stdout`) is written as it is.
        Some(path) if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Failure::usage(format!("{path}: {e}")))?;
            plain(Box::new(io::BufWriter::with_capacity(STREAM_BUFFER, f)))
        }
        Some(path) => {
            let path = Path::new(path);
            let tmp = hidden_beside(path);
            // Made new (O_EXCL: a name planted in a shared directory, a
            // symbolic link to elsewhere, is refused, not written through).
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
            // A signal that ends the query takes the hidden file with it.
            let cleanup = RemoveOnSignal::start(&tmp);
            Ok((
                Box::new(io::BufWriter::with_capacity(1 << 20, file)),
                Answer {
                    whole: Some(Whole {
                        tmp,
                        path: path.to_path_buf(),
                        _cleanup: cleanup,
                    }),
                },
            ))
        }
    }
}

impl Answer {
    /// True when a failed answer leaves nothing behind (a file written
    /// whole or not at all), false when what was written stays (standard
    /// output, a FIFO).
    pub(crate) fn is_whole_file(&self) -> bool {
        self.whole.is_some()
    }

    /// Completes the answer after its writer was flushed and dropped:
    /// `complete` renames the hidden file over FILE; otherwise the hidden
    /// file is removed and FILE left as it was.
    pub(crate) fn finish(self, complete: bool) -> Result<(), Failure> {
        let Some(w) = self.whole else {
            return Ok(());
        };
        let kept = complete
            && std::fs::rename(&w.tmp, &w.path)
                .map_err(|e| eprintln!("ringcap: {}: {e}", w.path.display()))
                .is_ok();
        if !kept {
            let _ = std::fs::remove_file(&w.tmp);
            if complete {
                return Err(Failure::runtime(format!(
                    "{}: not written",
                    w.path.display()
                )));
            }
        }
        Ok(())
    }
}

/// A hidden name beside `path` for writing it whole before it appears (not
/// one another user could guess and take first in a shared directory).
fn hidden_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "query".into(), |n| n.to_string_lossy());
    let mut r = [0u8; 8];
    let salt = match File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut r)
    }) {
        Ok(()) => u64::from_ne_bytes(r),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    path.with_file_name(format!(
        ".{name}.{}-{salt:016x}.incomplete",
        std::process::id()
    ))
}

/// While alive, SIGINT, SIGTERM or SIGHUP remove `path` and end the
/// process (status 128 + the signal), as the signal would have.
struct RemoveOnSignal(Option<signal_hook::iterator::Handle>);

impl RemoveOnSignal {
    fn start(path: &Path) -> RemoveOnSignal {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return RemoveOnSignal(None);
        };
        let handle = signals.handle();
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let _ = std::fs::remove_file(&path);
                std::process::exit(128 + sig);
            }
        });
        RemoveOnSignal(Some(handle))
    }
}

impl Drop for RemoveOnSignal {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.close();
        }
    }
}
