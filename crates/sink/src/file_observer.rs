//! [`FileObserver`]: told about each file of a capture's output as it is
//! published (complete, under its final name) and as it is removed
//! (retention, or room made on a full disk) — the per-file hook of the
//! observer slot, so that sidecars (an index, say) are written and retired
//! with their files. The writer thread calls it once per file event, after
//! the rename or the removal: nothing per packet, and nothing at all when
//! no observer is set. Every kind of file the writer makes goes through
//! it: copied records, ring blocks written in place (pcapng), compressed
//! files, ringcapd's dumps (written by the same writer).
//!
//! An observer that builds something from a file's contents (the index)
//! may also [`tap`](FileObserver::tap) each file it is told of: the writer
//! then shows it the bytes it writes, as it writes them ([`FileTap`]), so
//! the file need not be read back once published. The bytes are those of
//! the file in the format it has on disk (pcap or pcapng; compressed files
//! are not tapped), whole records and blocks, from the file header on.

use crate::strategy::Output;
use crate::sys::FixedWrites;
use crate::Batch;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

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
    /// A file that will be published as `path` is being created: what
    /// should see its bytes as they are written, if anything. The tap is
    /// dropped when the file is closed, before [`published`](Self::published).
    fn tap(&self, path: &Path) -> Option<Box<dyn FileTap>> {
        let _ = path;
        None
    }
}

/// Sees the bytes of one file as the writer writes them.
pub trait FileTap: Send {
    /// `bytes` were written at `offset`: whole records or blocks, in file
    /// order from offset 0 (the file header).
    fn wrote(&mut self, offset: u64, bytes: &[u8]);
    /// The file was cut back to `len` bytes (after a failed write).
    fn truncated(&mut self, len: u64);
}

/// An output whose successful writes a [`FileTap`] sees.
pub(crate) struct Tapped {
    pub(crate) inner: Box<dyn Output>,
    pub(crate) tap: Box<dyn FileTap>,
}

impl Tapped {
    /// The tap sees the bytes before they are written (an io_uring write
    /// takes the batch's memory away), and is told to forget them if the
    /// write fails.
    fn after(&mut self, before: u64, r: io::Result<()>) -> io::Result<()> {
        if r.is_err() {
            self.tap.truncated(before);
        }
        r
    }
}

impl Output for Tapped {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let before = self.inner.len();
        self.tap.wrote(before, bytes);
        let r = self.inner.write(bytes);
        self.after(before, r)
    }
    fn tick(&mut self) -> io::Result<()> {
        self.inner.tick()
    }
    fn finish(&mut self) -> io::Result<()> {
        self.inner.finish()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let r = self.inner.truncate(len);
        self.tap.truncated(len);
        r
    }
    fn write_batch(&mut self, batch: &mut Batch, from: usize, to: usize) -> io::Result<()> {
        let before = self.inner.len();
        self.tap.wrote(before, &batch.bytes()[from..to]);
        let r = self.inner.write_batch(batch, from, to);
        self.after(before, r)
    }
    fn write_pages(&mut self, bytes: &[u8]) -> io::Result<()> {
        let before = self.inner.len();
        self.tap.wrote(before, bytes);
        let r = self.inner.write_pages(bytes);
        self.after(before, r)
    }
    fn use_fixed(&mut self, fixed: Arc<Mutex<FixedWrites>>) {
        self.inner.use_fixed(fixed)
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
