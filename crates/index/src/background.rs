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
//! [`RetireIndexes`] only does the second, for captures that do not index
//! (an index a past run left beside a file goes with the file).

use ringcap_sink::FileObserver;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::build::build_index;

/// Files waiting for the indexer at most: beyond, a file is left without
/// an index (said once; queries scan it, `ringcap index` builds it) rather
/// than letting the indexer fall further and further behind.
const QUEUE: usize = 64;

/// How long the end of a capture waits for the files still queued.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// Indexes the files a capture publishes, one at a time, in the background.
pub struct Indexer {
    /// `None` once finished (or if the thread could not start).
    tx: Mutex<Option<mpsc::SyncSender<PathBuf>>>,
    done: Mutex<mpsc::Receiver<()>>,
    pending: Arc<AtomicUsize>,
    behind: AtomicBool,
}

impl Indexer {
    /// Starts the indexing thread; `lower_priority` runs first on it (the
    /// capture lowers it to nice 19: the capture comes first).
    pub fn start(lower_priority: fn()) -> Indexer {
        let (tx, rx) = mpsc::sync_channel::<PathBuf>(QUEUE);
        let (done_tx, done) = mpsc::channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let left = pending.clone();
        let spawned = std::thread::Builder::new()
            .name("ringcap-index".into())
            .spawn(move || {
                lower_priority();
                for path in rx {
                    if let Err(e) = build_index(&path) {
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
            tx: Mutex::new(spawned.then_some(tx)),
            done: Mutex::new(done),
            pending,
            behind: AtomicBool::new(false),
        }
    }

    /// Queues a published file.
    pub fn published(&self, path: &Path) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = tx.as_ref() else {
            return;
        };
        self.pending.fetch_add(1, Ordering::Relaxed);
        if tx.try_send(path.to_path_buf()).is_err() {
            self.pending.fetch_sub(1, Ordering::Relaxed);
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
