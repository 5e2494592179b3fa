//! The capture files of directories of rotated files, as `ringcap query -d`
//! and the retrieval service take them: regular files that start like a
//! pcap or pcapng file; hidden files (partial files being written, indexes)
//! are not looked at.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Whether `path` starts like a capture file ringcap reads.
pub fn is_capture(path: &Path) -> bool {
    // Its header is enough (the reader would otherwise read ahead a MiB).
    fs::File::open(path)
        .ok()
        .and_then(|f| ringcap_format::Reader::new(io::Read::take(f, 64 << 10)).ok())
        .is_some()
}

/// The capture files of `dirs`, sorted by name within each directory;
/// `skipped` hears of each visible regular file that is not one.
pub fn capture_files(
    dirs: &[PathBuf],
    skipped: &mut dyn FnMut(&Path),
) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for dir in dirs {
        let rd = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut v = Vec::new();
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_file()) {
                v.push(e.path());
            }
        }
        v.sort();
        for f in v {
            if is_capture(&f) {
                files.push(f);
            } else {
                skipped(&f);
            }
        }
    }
    Ok(files)
}
