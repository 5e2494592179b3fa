//! Hidden partial files an interrupted capture left: cut after the last
//! whole record and published, or removed when empty.

use super::*;

/// Recovers the hidden partial files an interrupted capture left in `dir`:
/// each is cut after its last whole record and published under its final
/// name, or removed if it is empty (it holds nothing). Returns the messages for the operator, one per file acted on or
/// left alone (files another capture is writing are skipped silently).
pub(super) fn recover_leftovers(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    for partial in files::leftover_partials(dir) {
        let Some(final_path) = files::final_path_of_partial(&partial) else {
            continue;
        };
        if !std::fs::symlink_metadata(&partial).is_ok_and(|m| m.file_type().is_file()) {
            log.push(format!(
                "left {} alone: not a regular file",
                partial.display()
            ));
            continue;
        }
        // Killed before its first write: nothing to recover.
        match files::remove_if_empty_partial(&partial) {
            Ok(files::EmptyPartial::Removed) => {
                log.push(format!(
                    "removed {}: an empty partial file left by an interrupted capture",
                    partial.display()
                ));
                continue;
            }
            // Another capture has just created it.
            Ok(files::EmptyPartial::InUse) => continue,
            Ok(files::EmptyPartial::Kept) => {}
            Err(e) => {
                log.push(format!("left {} alone: {e}", partial.display()));
                continue;
            }
        }
        match publish_partial(&partial, &final_path) {
            Ok(Some((target, report))) => log.push(format!(
                "recovered {} from an interrupted capture: {} packets, {} bytes cut",
                target.display(),
                report.packets,
                report.original_len - report.valid_len
            )),
            // Another capture's file in progress: not a leftover.
            Ok(None) => {}
            Err(e) => log.push(e),
        }
    }
    log
}

/// Cuts the partial file `partial` after its last whole record and
/// publishes it under `final_path` (or `NAME.recovered.EXT` beside it when
/// that exists): the file and what was cut, `None` when another capture is
/// writing it, or why it was left alone.
pub fn publish_partial(
    partial: &Path,
    final_path: &Path,
) -> Result<Option<(PathBuf, ringcap_format::repair::RepairReport)>, String> {
    match ringcap_format::repair::repair(partial) {
        Ok(report) => {
            let target = if final_path.exists() {
                final_path.with_extension(format!(
                    "recovered.{}",
                    final_path
                        .extension()
                        .and_then(|e| e.to_str())
                        .unwrap_or("pcap")
                ))
            } else {
                final_path.to_path_buf()
            };
            match std::fs::rename(partial, &target) {
                Ok(()) => Ok(Some((target, report))),
                Err(e) => Err(format!(
                    "could not publish recovered {}: {e}",
                    partial.display()
                )),
            }
        }
        Err(ringcap_format::repair::RepairError::InUse) => Ok(None),
        Err(e) => Err(format!("left {} alone: {e}", partial.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn empty_leftover_partial_is_removed_and_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A capture killed before its first write: an empty partial file.
        let empty = files::partial_path(&d.join("x-000001.pcap"));
        fs::write(&empty, b"").unwrap();
        // A partial file of ringcap's naming that is not a capture file.
        let garbage = files::partial_path(&d.join("x-000002.pcap"));
        fs::write(&garbage, b"not a capture file at all").unwrap();
        // Empty files not of ringcap's partial naming.
        let unrelated = [
            ".x-000003.pcap",
            "x-000004.pcap",
            ".ringcap-partial",
            "notes",
        ];
        for name in unrelated {
            fs::write(d.join(name), b"").unwrap();
        }
        let log = recover_leftovers(d);
        assert!(!empty.exists(), "empty partial not removed; log: {log:?}");
        assert!(garbage.exists(), "garbage partial touched; log: {log:?}");
        assert_eq!(
            fs::read(&garbage).unwrap(),
            b"not a capture file at all",
            "garbage partial changed"
        );
        for name in unrelated {
            let p = d.join(name);
            assert!(p.exists(), "{name} removed");
            assert_eq!(fs::metadata(&p).unwrap().len(), 0, "{name} changed");
        }
        // Nothing published for either partial file.
        assert!(!d.join("x-000001.pcap").exists());
        assert!(!d.join("x-000002.pcap").exists());
        // Said so, as the other recovery messages do; the garbage is left alone.
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(
            log.iter()
                .any(|m| m.starts_with("removed ") && m.contains(&*empty.to_string_lossy())),
            "{log:?}"
        );
        assert!(
            log.iter().any(|m| m.starts_with("left ")
                && m.contains(&*garbage.to_string_lossy())
                && m.contains("not a capture file")),
            "{log:?}"
        );
        // A second start finds nothing new to say about the removed file.
        let log = recover_leftovers(d);
        assert_eq!(log.len(), 1, "{log:?}");
        assert!(garbage.exists());
    }

    #[test]
    fn empty_partial_being_written_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let partial = files::partial_path(&dir.path().join("x-000001.pcap"));
        // A running capture that has created the file and holds its lock.
        let writing = files::create_exclusive(&partial, 0o600, false).unwrap();
        let log = recover_leftovers(dir.path());
        assert!(partial.exists());
        assert!(log.is_empty(), "{log:?}");
        drop(writing);
        // Once that capture is gone, the file is a leftover.
        recover_leftovers(dir.path());
        assert!(!partial.exists());
    }

    #[test]
    fn partial_symlink_to_an_empty_file_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::write(&target, b"").unwrap();
        let partial = files::partial_path(&dir.path().join("x-000001.pcap"));
        std::os::unix::fs::symlink(&target, &partial).unwrap();
        let log = recover_leftovers(dir.path());
        assert!(fs::symlink_metadata(&partial).is_ok());
        assert!(target.exists());
        assert_eq!(log.len(), 1, "{log:?}");
        assert_eq!(
            files::remove_if_empty_partial(&partial).unwrap(),
            files::EmptyPartial::Kept
        );
    }
}
