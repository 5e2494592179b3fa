//! The capture files of directories of rotated files, as `ringcap query -d`,
//! the retrieval service and ringcapd take them: regular files that start
//! like a pcap or pcapng file, and the hidden partial file of a capture
//! being written (`.NAME.ringcap-partial`, read up to its last whole record:
//! [`crate::query::is_growing`]), so packets are queryable as soon as they
//! are flushed; other hidden files (indexes) are not looked at. A file met
//! twice (renamed from its partial name while the directory was read) is
//! taken once.
//!
//! Each file's first bytes are read to tell whether it is a capture. From a
//! cold page cache each such read waits for the disk two or three times
//! (the inode, the extent tree, the bytes: ~0.5-1 ms each on the VM of
//! bench/): one after another over 40 files that was ~25 ms of a 0.1 s
//! query. [`capture_files_ahead`], for a query that will read the files'
//! indexes, has cold files looked at by several threads at once, each also
//! asking for the head of the file's index, which the query reads next.
//! [`capture_files`] looks at them one after another on the calling thread
//! (ringcapd: one thread a retrieval, and no index opened that a grant
//! does not use).

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::thread;

use crate::readahead::{head_cached, head_now, open_regular};

/// Threads that look at files at once when they are not in the page cache.
const LOOKERS: usize = 8;

/// Whether `path` starts like a capture file ringcap reads; `buf` is the
/// reader's buffer, handed from one file to the next (zeroing a fresh MiB
/// for each of a directory's files was ~1 % of a selective query in
/// perf).
fn is_capture(path: &Path, buf: &mut Vec<u8>) -> bool {
    let Some(f) = open_regular(path) else {
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

/// Whether each of `files` is a capture ([`is_capture`]), by up to
/// `threads` threads: one (this one) if the first file's head is in the
/// page cache (a warm directory: threads would cost more than they save).
fn captures(files: &[PathBuf], buf: &mut Vec<u8>, threads: usize) -> Vec<bool> {
    let warm = threads < 2 || files.first().is_some_and(|f| head_cached(f));
    look(files, buf, if warm { 1 } else { threads })
}

/// [`captures`] by `threads` threads (one: this one, nothing asked ahead),
/// each on a share of the files in order, also asking for the head of each
/// file and of its index.
fn look(files: &[PathBuf], buf: &mut Vec<u8>, threads: usize) -> Vec<bool> {
    if threads < 2 || files.len() < 2 {
        return files.iter().map(|f| is_capture(f, buf)).collect();
    }
    let share = files.len().div_ceil(threads);
    thread::scope(|s| {
        let mut lookers = Vec::new();
        for part in files.chunks(share) {
            let looker = move || {
                let mut buf = Vec::new();
                part.iter()
                    .map(|f| {
                        head_now(f);
                        is_capture(f, &mut buf)
                    })
                    .collect::<Vec<bool>>()
            };
            let spawned = thread::Builder::new()
                .name("ringcap-looker".into())
                .spawn_scoped(s, looker);
            // No thread: this share is looked at here, in its turn.
            lookers.push(spawned.map_err(|_| part));
        }
        lookers
            .into_iter()
            .flat_map(|l| match l {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(part) => part.iter().map(|f| is_capture(f, buf)).collect(),
            })
            .collect()
    })
}

/// The capture files of `dirs`, sorted by name within each directory;
/// `skipped` hears of each visible regular file that is not one. Looked at
/// one after another on this thread.
pub fn capture_files(
    dirs: &[PathBuf],
    skipped: &mut dyn FnMut(&Path),
) -> Result<Vec<PathBuf>, String> {
    list(dirs, 1, skipped)
}

/// [`capture_files`] for a query that reads their indexes next: cold, by
/// [`LOOKERS`] threads that also ask for the indexes' heads.
pub fn capture_files_ahead(
    dirs: &[PathBuf],
    skipped: &mut dyn FnMut(&Path),
) -> Result<Vec<PathBuf>, String> {
    list(dirs, LOOKERS, skipped)
}

fn list(
    dirs: &[PathBuf],
    threads: usize,
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
        let known = captures(&v, &mut buf, threads);
        for (f, yes) in v.into_iter().zip(known) {
            if yes {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ringcap_format::pcap::file_header;
    use ringcap_format::TsResolution;
    use ringcap_testkit::TempDir;

    /// Looked at by any number of threads, the files get the same answers
    /// in the same order: captures (pcap headers, with or without
    /// packets) told from other files (empty, short, text, missing).
    #[test]
    fn threads_tell_the_same_captures_in_order() {
        let d = TempDir::new("dir-look");
        let header = file_header(1, 65535, TsResolution::Nano);
        let mut files = Vec::new();
        let mut want = Vec::new();
        for i in 0..37 {
            let path = d.join(format!("f{i:02}"));
            let (bytes, yes): (Vec<u8>, bool) = match i % 5 {
                0 => (header.to_vec(), true),
                1 => ([&header[..], &[0u8; 100][..]].concat(), true),
                2 => (header[..10].to_vec(), false),
                3 => (b"not a capture at all, but long enough".to_vec(), false),
                _ => (Vec::new(), false),
            };
            match i {
                // Missing; a symbolic link to a capture and a FIFO, neither
                // of which is read.
                11 => {}
                19 => std::os::unix::fs::symlink(&files[0], &path).unwrap(),
                24 => rustix::fs::mknodat(
                    rustix::fs::CWD,
                    &path,
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o600),
                    0,
                )
                .unwrap(),
                _ => std::fs::write(&path, bytes).unwrap(),
            }
            files.push(path);
            want.push(yes && i != 11);
        }
        for threads in [1, 2, 3, 8, 40] {
            let mut buf = Vec::new();
            assert_eq!(look(&files, &mut buf, threads), want, "{threads} threads");
        }
        assert_eq!(captures(&files, &mut Vec::new(), LOOKERS), want);
        assert_eq!(
            capture_files(&[d.path().to_path_buf()], &mut |_| {}).unwrap(),
            files
                .iter()
                .zip(&want)
                .filter(|(_, y)| **y)
                .map(|(f, _)| f.clone())
                .collect::<Vec<_>>()
        );
    }
}
