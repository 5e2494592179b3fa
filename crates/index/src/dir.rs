//! The capture files of directories of rotated files, as `ringcap query -d`,
//! the retrieval service and ringcapd take them: regular files that start
//! like a pcap or pcapng file, and the hidden partial file of a capture
//! being written (`.NAME.ringcap-partial`, read up to its last whole record:
//! [`crate::query::is_growing`]), so packets are queryable as soon as they
//! are flushed; other hidden files (indexes) are not looked at. A file met
//! twice (renamed from its partial name while the directory was read) is
//! taken once.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Whether `path` starts like a capture file ringcap reads; `buf` is the
/// reader's buffer, handed from one file to the next (zeroing a fresh MiB
/// for each of a directory's files was ~1 % of a selective query in
/// perf).
fn is_capture(path: &Path, buf: &mut Vec<u8>) -> bool {
    let Ok(f) = fs::File::open(path) else {
        return false;
    };
    // Its header is enough (the reader would otherwise read ahead a MiB).
    match ringcap_format::Reader::with_buffer(io::Read::take(f, 64 << 10), std::mem::take(buf)) {
        Ok(r) => {
            *buf = r.into_buffer();
            true
        }
        Err(_) => false,
    }
}

/// The capture files of `dirs`, sorted by name within each directory;
/// `skipped` hears of each visible regular file that is not one.
pub fn capture_files(
    dirs: &[PathBuf],
    skipped: &mut dyn FnMut(&Path),
) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut buf = Vec::new();
    for dir in dirs {
        let rd = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut v = Vec::new();
        let mut growing = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for e in rd.flatten() {
            // Not followed: a symbolic link is not a regular file here.
            let Ok(m) = e.metadata() else { continue };
            if !m.is_file() || !seen.insert((m.dev(), m.ino())) {
                continue;
            }
            let path = e.path();
            if crate::query::is_growing(&path) {
                growing.push(path);
            } else if !e.file_name().to_string_lossy().starts_with('.') {
                v.push(path);
            }
        }
        v.sort();
        for f in v {
            if is_capture(&f, &mut buf) {
                files.push(f);
            } else {
                skipped(&f);
            }
        }
        // Being written: quietly passed over until it holds a header.
        growing.sort();
        files.extend(growing.into_iter().filter(|f| is_capture(f, &mut buf)));
    }
    Ok(files)
}
