//! Building the index of a capture file, publishing it, and finding it again.
//!
//! The index is `DIR/.NAME.ringcap-index` next to `DIR/NAME`
//! ([`ringcap_format::sidecar::index_path`]): hidden, so globs and other
//! tools see only the captures. It is written under a temporary hidden name,
//! fsync'd, and renamed over the final name, so a reader sees a whole index
//! or none. It records the capture's length and a checksum of its first
//! bytes, and takes the capture's modification time as seen before it was
//! read: an index whose file has changed since (other length, other first
//! bytes, or modified later: an edit in place past the first bytes) is
//! *stale* and not used.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use ringcap_format::sidecar::index_path;
use ringcap_format::{FormatError, Reader};

use crate::file::{self, Contents, Epoch, Group, Index, IndexError, Summary};
use crate::keys::packet_keys;
use crate::postings::{Postings, Spare};

/// A group ends after this many records...
pub const GROUP_RECORDS: u32 = 32;
/// ...or once it spans this many bytes of the file.
pub const GROUP_BYTES: u64 = 64 << 10;
/// Bytes at the start of a capture whose checksum an index records.
const HEAD_LEN: usize = 4096;

/// Why an index could not be built or used.
#[derive(Debug)]
pub enum BuildError {
    /// Reading or writing failed.
    Io(PathBuf, io::Error),
    /// The capture file cannot be read (cut short, not a capture, ...).
    Format(PathBuf, FormatError),
    /// ringcap's compressed format: its records are coded in blocks a
    /// query cannot jump into, so it is not indexed (a query scans it).
    Compressed(PathBuf),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            BuildError::Format(p, e) => write!(f, "{}: {e}", p.display()),
            BuildError::Compressed(p) => write!(
                f,
                "{}: compressed files are not indexed (a query scans them)",
                p.display()
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// What building one index did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildReport {
    /// The index file written.
    pub index: PathBuf,
    /// Packets indexed.
    pub packets: u64,
    /// Groups.
    pub groups: usize,
    /// Distinct keys.
    pub keys: usize,
    /// Bytes of the capture file.
    pub capture_len: u64,
    /// Bytes of the index file.
    pub index_len: u64,
}

/// CRC-32 of the first [`HEAD_LEN`] bytes of `path` and its length.
pub(crate) fn head_of(path: &Path) -> io::Result<(u32, u64)> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    let mut head = Vec::with_capacity(HEAD_LEN);
    (&mut f).take(HEAD_LEN as u64).read_to_end(&mut head)?;
    Ok((crc32fast::hash(&head), len))
}

/// Gathers the index of one file from its packets, in file order: the
/// groups, the reader states they start in, the keys and the summary. The
/// file reader ([`collect`]) and the tap on a file being written
/// ([`crate::stream`]) both feed it, so both give the same index.
pub(crate) struct Collector {
    c: Contents,
    postings: Postings,
    packets: u64,
    first_ts: u64,
    min_ts: u64,
    max_ts: u64,
}

impl Default for Collector {
    fn default() -> Collector {
        Collector::with_spare(Spare::default())
    }
}

impl Collector {
    /// Gathers into the arrays a finished file left (see [`Spare`]).
    pub(crate) fn with_spare(spare: Spare) -> Collector {
        Collector {
            c: Contents::default(),
            postings: Postings::with_spare(spare),
            packets: 0,
            first_ts: 0,
            min_ts: u64::MAX,
            max_ts: 0,
        }
    }
}

impl Collector {
    /// One packet: `off` is where a reader stood before reading it (any
    /// blocks before the packet included), `epoch` the reader's (sections,
    /// interfaces) there.
    pub(crate) fn packet(
        &mut self,
        off: u64,
        epoch: (u32, u32),
        linktype: u32,
        ts: u64,
        data: &[u8],
    ) {
        self.add(off, epoch, ts);
        self.keys(linktype, data);
    }

    /// The keys of the packet [`Collector::add`] recorded last.
    fn keys(&mut self, linktype: u32, data: &[u8]) {
        let g = self.c.groups.len() as u32 - 1;
        packet_keys(linktype, data, &mut self.postings.in_group(g));
    }

    /// Records a packet (its group, time and place); its keys follow.
    fn add(&mut self, off: u64, epoch: (u32, u32), ts: u64) {
        let c = &mut self.c;
        let new_group = c
            .groups
            .last()
            .is_none_or(|g: &Group| g.records >= GROUP_RECORDS || off - g.offset >= GROUP_BYTES);
        if new_group {
            let n = c.groups.len() as u32;
            if c.epochs.last().map(|e| (e.sections, e.interfaces)) != Some(epoch) {
                c.epochs.push(Epoch {
                    group: n,
                    sections: epoch.0,
                    interfaces: epoch.1,
                });
            }
            c.groups.push(Group {
                offset: off,
                min_ts: ts,
                max_ts: ts,
                records: 0,
            });
        }
        if let Some(g) = c.groups.last_mut() {
            g.records += 1;
            g.min_ts = g.min_ts.min(ts);
            g.max_ts = g.max_ts.max(ts);
        }
        if self.packets == 0 {
            self.first_ts = ts;
        }
        self.packets += 1;
        self.min_ts = self.min_ts.min(ts);
        self.max_ts = self.max_ts.max(ts);
    }

    /// The index of a file of `capture_len` bytes whose head has checksum
    /// `head_crc`; the big arrays are left in `spare` for the next file.
    /// Fails if the runs of a big file could not be kept ([`crate::runs`]).
    pub(crate) fn finish(
        self,
        capture_len: u64,
        head_crc: u32,
        spare: &mut Spare,
    ) -> io::Result<Contents> {
        let mut c = self.c;
        c.summary = Some(Summary {
            capture_len,
            head_crc,
            packets: self.packets,
            first_ts: self.first_ts,
            min_ts: if self.packets == 0 { 0 } else { self.min_ts },
            max_ts: self.max_ts,
        });
        c.postings = self.postings.finish(c.groups.len() as u32, spare)?;
        Ok(c)
    }
}

/// Reads the capture file at `path` and collects its index.
pub fn collect(path: &Path) -> Result<Contents, BuildError> {
    let io_err = |e| BuildError::Io(path.to_path_buf(), e);
    let (head_crc, capture_len) = head_of(path).map_err(io_err)?;
    let f = File::open(path).map_err(io_err)?;
    let mut rd = Reader::new(f).map_err(|e| BuildError::Format(path.to_path_buf(), e))?;
    if matches!(rd.format(), ringcap_format::FileFormat::Compressed { .. }) {
        return Err(BuildError::Compressed(path.to_path_buf()));
    }
    let mut col = Collector::default();
    let mut data = Vec::new();
    let mut linktypes: Vec<u32> = rd.interfaces().iter().map(|i| i.linktype).collect();
    loop {
        let off = rd.offset();
        let epoch = (rd.sections() as u32, rd.interfaces().len() as u32);
        // The keys are taken while the packet is borrowed from the reader
        // (no copy), unless its interface was announced by a block read
        // just now (then the copy waits for the reader to tell its link type).
        let iface = match rd.next_packet() {
            Ok(Some(p)) => {
                col.add(off, epoch, p.ts_ns);
                match linktypes.get(p.interface) {
                    Some(&lt) => {
                        col.keys(lt, p.data);
                        continue;
                    }
                    None => {
                        data.clear();
                        data.extend_from_slice(p.data);
                        p.interface
                    }
                }
            }
            Ok(None) => break,
            Err(e) => return Err(BuildError::Format(path.to_path_buf(), e)),
        };
        linktypes = rd.interfaces().iter().map(|i| i.linktype).collect();
        let lt = linktypes.get(iface).copied().unwrap_or(u32::MAX);
        col.keys(lt, &data);
    }
    col.finish(capture_len, head_crc, &mut Spare::default())
        .map_err(io_err)
}

/// Writes `bytes` to `path` atomically: a hidden temporary file in the same
/// directory, fsync'd, renamed over `path`, and the directory fsync'd.
fn publish(path: &Path, bytes: &[u8], mtime: std::time::SystemTime) -> io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!("{name}.tmp{}", std::process::id()));
    let r = (|| {
        // A new file only (O_EXCL): in a directory others can write, a name
        // planted before us (a symlink to some file of root's) is refused,
        // never followed and written through.
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        // The capture's time as it was read: a later change makes the
        // capture newer than its index.
        f.set_modified(mtime)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = &r {
        // Only a file this call made is removed (not one already there).
        if e.kind() != io::ErrorKind::AlreadyExists {
            let _ = fs::remove_file(&tmp);
        }
    }
    r?;
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = File::open(d) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Builds the index of the capture file `capture` and publishes it next to
/// it. If the capture is deleted meanwhile (retention), so is the index.
pub fn build_index(capture: &Path) -> Result<BuildReport, BuildError> {
    let mtime = modified(capture).map_err(|e| BuildError::Io(capture.to_path_buf(), e))?;
    let c = collect(capture)?;
    publish_index(capture, c, mtime)
}

/// The modification time of `path`, taken before its bytes are read for
/// its index (see [`publish_index`]).
pub(crate) fn modified(path: &Path) -> io::Result<std::time::SystemTime> {
    fs::metadata(path)?.modified()
}

/// Publishes the index `c` of `capture` next to it, with the capture's
/// modification time `mtime` as seen before its bytes were read: the index
/// is stale once the capture is newer.
pub(crate) fn publish_index(
    capture: &Path,
    mut c: Contents,
    mtime: std::time::SystemTime,
) -> Result<BuildReport, BuildError> {
    c.positions = crate::positions::find(capture, &c);
    let bytes = file::encode(&c);
    let index = index_path(capture);
    publish(&index, &bytes, mtime).map_err(|e| BuildError::Io(index.clone(), e))?;
    if !capture.exists() {
        let _ = fs::remove_file(&index);
    }
    Ok(BuildReport {
        index,
        packets: c.summary.as_ref().map_or(0, |s| s.packets),
        groups: c.groups.len(),
        keys: c.postings.len(),
        capture_len: c.summary.as_ref().map_or(0, |s| s.capture_len),
        index_len: bytes.len() as u64,
    })
}

/// Why the index of a file is not used.
#[derive(Debug)]
pub enum Unusable {
    /// There is none.
    Missing,
    /// It cannot be read or understood.
    Bad(String),
    /// The capture file changed since it was built.
    Stale,
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unusable::Missing => write!(f, "no index"),
            Unusable::Bad(m) => write!(f, "index not usable: {m}"),
            Unusable::Stale => write!(f, "index is stale (the file changed since it was built)"),
        }
    }
}

/// Loads the index of `capture`, checking that it describes the file as it
/// is now.
pub fn load_index(capture: &Path) -> Result<Index, Unusable> {
    load_index_into(capture, Vec::new())
}

/// [`load_index`], and every block of the index checked (a query checks
/// only the blocks it reads): for tools that say an index is good.
pub fn load_checked_index(capture: &Path) -> Result<Index, Unusable> {
    let idx = load_index(capture)?;
    idx.verify()
        .map_err(|e| Unusable::Bad(format!("{}: {e}", index_path(capture).display())))?;
    Ok(idx)
}

/// [`load_index`], reading into `buf` (a buffer an earlier index gave back
/// with [`Index::into_raw`]: a query over many files reuses one).
pub fn load_index_into(capture: &Path, buf: Vec<u8>) -> Result<Index, Unusable> {
    let path = index_path(capture);
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Unusable::Missing),
        Err(e) => return Err(Unusable::Bad(format!("{}: {e}", path.display()))),
    };
    let built = f
        .metadata()
        .and_then(|m| m.modified())
        .map_err(|e| Unusable::Bad(format!("{}: {e}", path.display())))?;
    let idx = Index::open(f, buf)
        .map_err(|e: IndexError| Unusable::Bad(format!("{}: {e}", path.display())))?;
    let (crc, len) = head_of(capture).map_err(|e| Unusable::Bad(e.to_string()))?;
    let changed = modified(capture).map_err(|e| Unusable::Bad(e.to_string()))?;
    if idx.summary.capture_len != len || idx.summary.head_crc != crc || changed > built {
        return Err(Unusable::Stale);
    }
    Ok(idx)
}
