//! Names of the files ringcap keeps next to a capture file.
//!
//! The index of a capture file (crate `ringcap-index`) lives beside it under
//! a hidden name, so that `tcpdump -r DIR/*`, a glob of the capture files or
//! the series' retention never mistake it for a capture. The name is defined
//! here, in the crate every side depends on, so that the writer's retention
//! (crate `ringcap-sink`), which deletes an index with its file, and the
//! indexer agree on it.

use std::path::{Path, PathBuf};

/// Suffix of an index file: `.NAME.ringcap-index` indexes `NAME`.
pub const INDEX_SUFFIX: &str = ".ringcap-index";

/// The index file of the capture file `capture`: `DIR/.NAME.ringcap-index`.
pub fn index_path(capture: &Path) -> PathBuf {
    let name = capture
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    capture.with_file_name(format!(".{name}{INDEX_SUFFIX}"))
}

/// True if `path` is named as an index file (of any capture).
pub fn is_index_path(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') && n.ends_with(INDEX_SUFFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_names() {
        let p = index_path(Path::new("/d/ringcap-1-000001.pcap"));
        assert_eq!(p, Path::new("/d/.ringcap-1-000001.pcap.ringcap-index"));
        assert!(is_index_path(&p));
        assert!(!is_index_path(Path::new("/d/a.pcap")));
        assert_eq!(
            index_path(Path::new("a.pcap")),
            Path::new(".a.pcap.ringcap-index")
        );
    }
}
