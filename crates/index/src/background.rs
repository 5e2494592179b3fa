//! Indexing published capture files in the background: `ringcap capture`
//! and ringcapd's dumps publish a finished file first and its index
//! follows. A thread reads the published file back (usually from the page
//! cache) and publishes `.NAME.ringcap-index` next to it, so a file is
//! queryable through its index once that read is done; until then (or if
//! the process dies first) a query scans it, and `ringcap repair`/`ringcap
//! index` build what is missing. At most 64 files wait (beyond, a file is
//! left unindexed, said once). Dropping the [`Indexer`] without
//! [`Indexer::finish`] lets the thread finish the queued files on its own.
//!
//! The indexer is the capture's [`FileObserver`] (the sink's per-file hook):
//! the writer tells it of each file published, and of each file retention
//! deletes, whose index it deletes too. The sink knows nothing of indexes.
//! It also taps each file as it is written ([`crate::stream`]): the keys
//! are taken from the bytes on their way to the disk, and the thread only
//! sorts them and writes the index; a file the tap could not follow is
//! read back.
//! [`RetireIndexes`] only does the second, for captures that do not index
//! (an index a past run left beside a file goes with the file).

use ringcap_sink::{FileObserver, FileTap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::build::{build_index, head_of, modified, publish_index};
use crate::postings::Spare;
use crate::stream::Stream;
use crate::BuildError;

/// Taps closed whose file is not published yet, at most (a file closed
/// and never published, after a failed rename, leaves its tap here until
/// it is pushed out).
const CLOSED: usize = 8;

/// Files waiting with what their taps gathered, at most: each holds its
/// file's keys in memory (8 bytes per distinct key and group). Beyond, a
/// file waits by name only and is read back when its turn comes, so an
/// indexer that falls behind holds a bounded amount of memory.
pub const GATHERED: usize = 4;

/// A file to index, with what its tap gathered if it had one, whether that
/// was set aside (more than [`GATHERED`] files waiting), and the file's
/// modification time when it was published (its index takes that time:
/// a change after publication makes the index stale, see
/// `build::publish_index`).
type Job = (PathBuf, Option<Stream>, bool, Option<std::time::SystemTime>);

/// Files the indexer read back instead of taking their keys from their tap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadBack {
    /// Their tap could not follow them: recovered from an earlier run, or
    /// cut after a failed write.
    pub untapped: usize,
    /// Their tap's keys were set aside because more than [`GATHERED`]
    /// files waited (files published faster than they were indexed).
    pub set_aside: usize,
}

/// Files waiting for the indexer at most: beyond, a file is left without
/// an index (said once; queries scan it, `ringcap index` builds it) rather
/// than letting the indexer fall further and further behind.
const QUEUE: usize = 64;

/// How long the end of a capture waits for the files still queued.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// Indexes the files a capture publishes, one at a time, in the background.
pub struct Indexer {
    /// The arrays of the last file indexed, for the next file's tap.
    spare: Arc<Mutex<Option<Spare>>>,
    /// `None` once finished (or if the thread could not start).
    tx: Mutex<Option<mpsc::SyncSender<Job>>>,
    /// Taps of files closed, waiting for `published`.
    closed: Arc<Mutex<Vec<Job>>>,
    done: Mutex<mpsc::Receiver<()>>,
    pending: Arc<AtomicUsize>,
    /// Files indexed by reading them back: their tap could not follow, or
    /// its keys were set aside.
    read_back: Arc<[AtomicUsize; 2]>,
    /// Jobs queued with what their tap gathered.
    gathered: Arc<AtomicUsize>,
    behind: AtomicBool,
}

impl Indexer {
    /// Starts the indexing thread; `lower_priority` runs first on it (the
    /// capture lowers it to nice 19: the capture comes first).
    pub fn start(lower_priority: fn()) -> Indexer {
        let (tx, rx) = mpsc::sync_channel::<Job>(QUEUE);
        let (done_tx, done) = mpsc::channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let left = pending.clone();
        let read_back: Arc<[AtomicUsize; 2]> = Arc::default();
        let reread = read_back.clone();
        let gathered = Arc::new(AtomicUsize::new(0));
        let held = gathered.clone();
        let spare: Arc<Mutex<Option<Spare>>> = Arc::default();
        let given = spare.clone();
        let spawned = std::thread::Builder::new()
            .name("ringcap-index".into())
            .spawn(move || {
                lower_priority();
                for (path, stream, set_aside, mtime) in rx {
                    if stream.is_some() {
                        held.fetch_sub(1, Ordering::Relaxed);
                    }
                    let mut left_over = Spare::default();
                    let r = index_one(&path, stream, mtime, &mut left_over);
                    // One set of arrays is kept for the next tap.
                    given
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(left_over);
                    if matches!(r, Ok(true)) {
                        reread[usize::from(set_aside)].fetch_add(1, Ordering::Relaxed);
                    }
                    if let Err(e) = r {
                        // Deleted by retention before its turn, or a
                        // compressed file (scanned by queries): nothing to say.
                        if path.exists() && !matches!(e, crate::BuildError::Compressed(_)) {
                            eprintln!("ringcap: warning: indexing {e}");
                        }
                    }
                    // Retention may have deleted the file (and looked for
                    // its index) while the index was being built.
                    if !path.exists() {
                        remove_index_of(&path);
                    }
                    left.fetch_sub(1, Ordering::Relaxed);
                }
                let _ = done_tx.send(());
            })
            .is_ok();
        Indexer {
            spare,
            tx: Mutex::new(spawned.then_some(tx)),
            closed: Arc::default(),
            done: Mutex::new(done),
            pending,
            read_back,
            gathered,
            behind: AtomicBool::new(false),
        }
    }

    /// Queues a published file.
    pub fn published(&self, path: &Path) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = tx.as_ref() else {
            return;
        };
        let stream = {
            let mut closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
            let at = closed.iter().position(|(p, ..)| p == path);
            at.and_then(|i| closed.remove(i).1)
        };
        let tapped = stream.is_some();
        let stream = stream.filter(|_| {
            self.gathered
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < GATHERED).then_some(n + 1)
                })
                .is_ok()
        });
        let had_stream = stream.is_some();
        self.pending.fetch_add(1, Ordering::Relaxed);
        let set_aside = tapped && !had_stream;
        let mtime = modified(path).ok();
        if tx
            .try_send((path.to_path_buf(), stream, set_aside, mtime))
            .is_err()
        {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            if had_stream {
                self.gathered.fetch_sub(1, Ordering::Relaxed);
            }
            if !self.behind.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "ringcap: warning: indexing falls behind the capture: {} and later files \
                     beyond {QUEUE} waiting are left without an index (queries scan them; \
                     `ringcap index FILES` builds them)",
                    path.display()
                );
            }
        }
    }

    /// Files that had to be read back to be indexed, by why: normally
    /// none, every file is tapped.
    pub fn read_back(&self) -> ReadBack {
        ReadBack {
            untapped: self.read_back[0].load(Ordering::Relaxed),
            set_aside: self.read_back[1].load(Ordering::Relaxed),
        }
    }

    /// Waits (up to a few seconds) for the queued files to be indexed; says
    /// how many are left without an index if that is not enough.
    pub fn finish(&self) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if tx.is_none() {
            return;
        }
        drop(tx);
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        if done.recv_timeout(FINISH_WAIT).is_err() {
            let n = self.pending.load(Ordering::Relaxed);
            if n > 0 {
                eprintln!(
                    "ringcap: warning: {n} file{} left without an index at exit \
                     (queries scan them; `ringcap index FILES` builds them)",
                    if n == 1 { "" } else { "s" }
                );
            }
        }
    }
}

impl FileObserver for Indexer {
    fn published(&self, path: &Path) {
        Indexer::published(self, path);
    }

    fn removed(&self, path: &Path) {
        remove_index_of(path);
    }

    fn tap(&self, path: &Path) -> Option<Box<dyn FileTap>> {
        // No tap once finished: nothing would take what it gathers.
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).as_ref()?;
        Some(Box::new(Tap {
            path: path.to_path_buf(),
            stream: Some(Stream::with_spare(
                self.spare
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .unwrap_or_default(),
            )),
            closed: self.closed.clone(),
        }))
    }
}

/// The tap on one file: gathers its index while it is written and leaves
/// it for the indexer when the file is closed.
struct Tap {
    path: PathBuf,
    stream: Option<Stream>,
    closed: Arc<Mutex<Vec<Job>>>,
}

impl FileTap for Tap {
    fn wrote(&mut self, offset: u64, bytes: &[u8]) {
        if let Some(s) = self.stream.as_mut() {
            s.wrote(offset, bytes);
        }
    }

    fn truncated(&mut self, len: u64) {
        if let Some(s) = self.stream.as_mut() {
            s.truncated(len);
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let mut closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        if closed.len() >= CLOSED {
            closed.remove(0);
        }
        closed.push((
            std::mem::take(&mut self.path),
            self.stream.take(),
            false,
            None,
        ));
    }
}

/// Indexes `path` from what its tap gathered, or by reading it (then
/// true); the tap's arrays are left in `spare`.
fn index_one(
    path: &Path,
    stream: Option<Stream>,
    published: Option<std::time::SystemTime>,
    spare: &mut Spare,
) -> Result<bool, BuildError> {
    if let Some(s) = stream {
        let io_err = |e| BuildError::Io(path.to_path_buf(), e);
        let mtime = match published {
            Some(t) => t,
            None => modified(path).map_err(io_err)?,
        };
        let (crc, len) = head_of(path).map_err(io_err)?;
        if let Some(c) = s.finish(len, crc, spare) {
            return publish_index(path, c, mtime).map(|_| false);
        }
    }
    build_index(path).map(|_| true)
}

/// The file observer of a capture that does not index: the index a file
/// may have (from an earlier run, or `ringcap index`) goes with the file.
pub struct RetireIndexes;

impl FileObserver for RetireIndexes {
    fn removed(&self, path: &Path) {
        remove_index_of(path);
    }
}

/// Deletes the index kept beside a deleted capture file, if there is one.
fn remove_index_of(capture: &Path) {
    let _ = std::fs::remove_file(ringcap_format::sidecar::index_path(capture));
}
