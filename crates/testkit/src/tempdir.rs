//! Temporary directories and files for tests: thin wrappers over the `tempfile`
//! crate that put them under cargo's `target/tmp` (the same disk as the target
//! directory, where O_DIRECT works; /tmp may be tmpfs) and remove them on drop.

use std::io;
use std::path::{Path, PathBuf};

/// `target/tmp` of the running test binary (`target/<profile>/deps/<bin>`),
/// or the system temporary directory if that cannot be found.
fn base() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("tmp")))
        .unwrap_or_else(std::env::temp_dir)
}

/// A fresh `tempfile` directory named `ringcap-test-<tag>-<random>` under [`base`],
/// mode 0755 like `create_dir` makes (not tempfile's 0700), so that tests that
/// drop privileges can still reach what they make inside.
fn create(tag: &str) -> io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let base = base();
    std::fs::create_dir_all(&base)?;
    tempfile::Builder::new()
        .prefix(&format!("ringcap-test-{tag}-"))
        .permissions(std::fs::Permissions::from_mode(0o755))
        .tempdir_in(&base)
}

/// A fresh directory, removed with its contents when dropped.
#[derive(Debug)]
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A fresh directory named after `tag` (unique per call). Panics if it
    /// cannot be created.
    pub fn new(tag: &str) -> TempDir {
        TempDir(create(tag).expect("create temp dir"))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// `DIR/name`.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path().join(name)
    }

    /// `DIR/name` as a string, for command-line arguments.
    pub fn file(&self, name: &str) -> String {
        self.join(name).to_string_lossy().into_owned()
    }
}

/// A path `<fresh temp dir>/<tag>.<ext>`, not yet created; the file and its
/// directory are removed when dropped.
#[derive(Debug)]
pub struct TempFile {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TempFile {
    /// A fresh, not yet created path ending in `<tag>.<ext>`.
    pub fn new(tag: &str, ext: &str) -> io::Result<TempFile> {
        let dir = create(tag)?;
        Ok(TempFile {
            path: dir.path().join(format!("{tag}.{ext}")),
            _dir: dir,
        })
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirs_are_fresh_distinct_and_removed_on_drop() {
        let a = TempDir::new("unit");
        let b = TempDir::new("unit");
        assert_ne!(a.path(), b.path());
        assert!(a.path().is_dir());
        // The mode `create_dir` gives (0755 under the usual umask), not 0700.
        let plain = b.join("plain");
        std::fs::create_dir(&plain).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions();
        assert_eq!(mode(a.path()), mode(&plain));
        assert_eq!(a.path().parent(), Some(base().as_path()));
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("ringcap-test-unit-"), "{name}");
        std::fs::write(a.join("f"), b"x").unwrap();
        assert_eq!(a.file("f"), a.path().join("f").to_string_lossy());
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
    }

    #[test]
    fn files_start_absent_and_are_removed_on_drop() {
        let t = TempFile::new("unit", "pcap").unwrap();
        assert!(!t.path().exists());
        assert!(t.path().ends_with("unit.pcap"));
        std::fs::write(t.path(), b"x").unwrap();
        let p = t.path().to_path_buf();
        drop(t);
        assert!(!p.exists());
        assert!(!p.parent().unwrap().exists());
    }
}
