//! [`FileObserver`]: told about each file of a capture's output as it is
//! published (complete, under its final name) and as it is removed
//! (retention, or room made on a full disk) — the per-file hook of the
//! observer slot, so that sidecars (an index, say) are written and retired
//! with their files. The writer thread calls it once per file event, after
//! the rename or the removal: nothing per packet, and nothing at all when
//! no observer is set. Every kind of file the writer makes goes through
//! it: copied records, ring blocks written in place (pcapng), compressed
//! files, ringcapd's dumps (written by the same writer).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// What happens to the files of a capture's output.
pub trait FileObserver: Send + Sync {
    /// `path` was published: complete, synced, under its final name.
    fn published(&self, path: &Path) {
        let _ = path;
    }
    /// `path`, published earlier, was deleted (retention, or room on a
    /// full disk).
    fn removed(&self, path: &Path) {
        let _ = path;
    }
}

/// A capture's file observer, shared (a writer config is cloned).
#[derive(Clone)]
pub struct FileHook(pub Arc<dyn FileObserver>);

impl fmt::Debug for FileHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FileHook")
    }
}
