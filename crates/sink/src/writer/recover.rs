//! Hidden partial files an interrupted capture left: cut after the last
//! whole record and published, or removed when empty.

use super::*;

/// Recovers the hidden partial files an interrupted capture with `plan`
/// left in `dir`: each is cut after its last whole record and published
/// under its final name, or removed if it is empty (it holds nothing).
/// Partial files of names the plan does not make are other captures' and
/// stay as they are (`ringcap repair` recovers them). Returns the messages
/// for the operator, one per file acted on or left alone (files another
/// capture is writing are skipped silently).
pub(super) fn recover_leftovers(dir: &Path, plan: &files::OutputPlan) -> Vec<String> {
    let mut log = Vec::new();
    // The single file the capture is about to write is no name to recover to.
    let taken = match plan {
        files::OutputPlan::Single(p) => Some(p.as_path()),
        _ => None,
    };
    for partial in files::leftover_partials(dir) {
        let Some(final_path) = files::final_path_of_partial(&partial) else {
            continue;
        };
        let ours = final_path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| plan.could_name(n));
        if !ours {
            continue;
        }
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
        match publish_partial(&partial, &final_path, taken) {
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
/// publishes it under `final_path`, or, when that name is taken (a file
/// exists, or it is `taken`: the name the starting capture is about to
/// write), under the first free `NAME.recovered.EXT`, `NAME.recovered-2.EXT`,
/// ...: the file and what was cut, `None` when another capture is writing
/// it, or why it was left alone. Never replaces a file: what a crash left
/// is not lost to a restart or a second crash.
pub fn publish_partial(
    partial: &Path,
    final_path: &Path,
    taken: Option<&Path>,
) -> Result<Option<(PathBuf, ringcap_format::repair::RepairReport)>, String> {
    let report = match ringcap_format::repair::repair(partial) {
        Ok(report) => report,
        Err(ringcap_format::repair::RepairError::InUse) => return Ok(None),
        Err(e) => return Err(format!("left {} alone: {e}", partial.display())),
    };
    let could_not =
        |e: io::Error| format!("could not publish recovered {}: {e}", partial.display());
    for n in 0..RECOVERED_NAMES {
        let target = recovered_name(final_path, n);
        // (Both in the same directory: the names say it.)
        if taken.is_some_and(|t| t.file_name() == target.file_name()) {
            continue;
        }
        // A plain rename would replace a file of that name.
        match crate::sys::rename_noreplace(partial, &target) {
            Ok(()) => return Ok(Some((target, report))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            // A filesystem without RENAME_NOREPLACE: look, then rename (a
            // name made between the two by someone else is replaced).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                if std::fs::symlink_metadata(&target).is_ok() {
                    continue;
                }
                std::fs::rename(partial, &target).map_err(could_not)?;
                return Ok(Some((target, report)));
            }
            Err(e) => return Err(could_not(e)),
        }
    }
    Err(could_not(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} and {RECOVERED_NAMES} recovered names beside it exist",
            final_path.display()
        ),
    )))
}

/// Names [`publish_partial`] tries at most.
const RECOVERED_NAMES: u32 = 1000;

/// `final_path` (0), `NAME.recovered.EXT` (1), `NAME.recovered-N.EXT`.
fn recovered_name(final_path: &Path, n: u32) -> PathBuf {
    let ext = final_path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("pcap");
    match n {
        0 => final_path.to_path_buf(),
        1 => final_path.with_extension(format!("recovered.{ext}")),
        n => final_path.with_extension(format!("recovered-{n}.{ext}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// The plan of `-w D/x.pcap` with rotation: `x-{seq}.pcap`.
    fn series(d: &Path) -> files::OutputPlan {
        files::OutputPlan::from_path(&d.join("x.pcap").to_string_lossy(), true, "pcap")
    }

    /// A pcap file of one 60-byte record and half of a second.
    fn cut_pcap() -> Vec<u8> {
        let mut b = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(&4u16.to_le_bytes());
        for v in [0u32, 0, 65535, 1] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for _ in 0..2 {
            for v in [1_700_000_000u32, 0, 60, 60] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&[7u8; 60]);
        }
        b.truncate(b.len() - 30);
        b
    }

    #[test]
    fn recovery_never_replaces_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let single =
            files::OutputPlan::from_path(&d.join("x.pcap").to_string_lossy(), false, "pcap");
        // A crash of `-w x.pcap`, restarted with `-w x.pcap --overwrite`:
        // the crash's packets must not go under the name about to be
        // replaced.
        let partial = files::partial_path(&d.join("x.pcap"));
        fs::write(&partial, cut_pcap()).unwrap();
        let log = recover_leftovers(d, &single);
        assert!(!d.join("x.pcap").exists(), "{log:?}");
        let first = d.join("x.recovered.pcap");
        assert_eq!(fs::read(&first).unwrap(), cut_pcap()[..24 + 76], "{log:?}");
        // A second crash: neither recovered file is replaced.
        fs::write(&partial, cut_pcap()).unwrap();
        fs::write(d.join("x.pcap"), b"the earlier capture").unwrap();
        recover_leftovers(d, &single);
        assert!(d.join("x.recovered-2.pcap").exists());
        assert_eq!(fs::read(d.join("x.pcap")).unwrap(), b"the earlier capture");
        assert_eq!(fs::read(&first).unwrap(), cut_pcap()[..24 + 76]);
        assert!(!partial.exists());
        // A series' leftover goes under its own name when it is free.
        let p = files::partial_path(&d.join("x-000001.pcap"));
        fs::write(&p, cut_pcap()).unwrap();
        recover_leftovers(d, &series(d));
        assert!(d.join("x-000001.pcap").exists() && !p.exists());
    }

    #[test]
    fn other_captures_leftovers_are_not_touched() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Empty leftovers: of this series, of another series, and of
        // another single file, in a shared directory.
        let ours = files::partial_path(&d.join("x-000007.pcap"));
        let theirs = [
            files::partial_path(&d.join("y-000001.pcap")),
            files::partial_path(&d.join("x.pcap")),
            files::partial_path(&d.join("x-7.pcap")),
        ];
        for p in std::iter::once(&ours).chain(&theirs) {
            fs::write(p, b"").unwrap();
        }
        let log = recover_leftovers(d, &series(d));
        assert!(!ours.exists(), "{log:?}");
        for p in &theirs {
            assert!(p.exists(), "{} touched; {log:?}", p.display());
        }
        assert_eq!(log.len(), 1, "{log:?}");
        // A single file's plan recovers its own name only.
        let single =
            files::OutputPlan::from_path(&d.join("x.pcap").to_string_lossy(), false, "pcap");
        recover_leftovers(d, &single);
        assert!(!theirs[1].exists());
        assert!(theirs[0].exists() && theirs[2].exists());
    }

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
        let log = recover_leftovers(d, &series(d));
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
        let log = recover_leftovers(d, &series(d));
        assert_eq!(log.len(), 1, "{log:?}");
        assert!(garbage.exists());
    }

    #[test]
    fn empty_partial_being_written_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let partial = files::partial_path(&dir.path().join("x-000001.pcap"));
        // A running capture that has created the file and holds its lock.
        let writing = files::create_exclusive(&partial, 0o600, false).unwrap();
        let log = recover_leftovers(dir.path(), &series(dir.path()));
        assert!(partial.exists());
        assert!(log.is_empty(), "{log:?}");
        drop(writing);
        // Once that capture is gone, the file is a leftover.
        recover_leftovers(dir.path(), &series(dir.path()));
        assert!(!partial.exists());
    }

    #[test]
    fn partial_symlink_to_an_empty_file_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::write(&target, b"").unwrap();
        let partial = files::partial_path(&dir.path().join("x-000001.pcap"));
        std::os::unix::fs::symlink(&target, &partial).unwrap();
        let log = recover_leftovers(dir.path(), &series(dir.path()));
        assert!(fs::symlink_metadata(&partial).is_ok());
        assert!(target.exists());
        assert_eq!(log.len(), 1, "{log:?}");
        assert_eq!(
            files::remove_if_empty_partial(&partial).unwrap(),
            files::EmptyPartial::Kept
        );
    }
}
