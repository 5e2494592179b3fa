//! Output files: names, rotation triggers, retention, and crash-safe publishing.
//!
//! A file is written under a hidden name (`.NAME.ringcap-partial`) in its final
//! directory and renamed to NAME only when complete (flushed and fsync'd), so a
//! program watching the directory never sees a partial file. Hidden partial
//! files left by a crash are recovered on the next start in that directory
//! (empty ones, which hold nothing, are removed).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Suffix of files being written.
pub const PARTIAL_SUFFIX: &str = ".ringcap-partial";

/// Where the output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputPlan {
    /// Nothing is written (capture and count only).
    Discard,
    /// A pcap stream on standard output (`-w -`).
    Stdout,
    /// A stream to an existing character device (`-w /dev/null`), opened for
    /// writing as it is: never created, renamed or truncated.
    Device(PathBuf),
    /// One file.
    Single(PathBuf),
    /// A series of files in `dir` named by `template` (strftime fields and `{seq}`).
    Series {
        /// Directory.
        dir: PathBuf,
        /// File name template.
        template: String,
    },
}

/// When to start a new file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotation {
    /// After this many packets (`--rotate-packets`).
    pub packets: Option<u64>,
    /// Before a file would exceed this many bytes (`-C`, in units of 1,000,000 bytes as tcpdump).
    pub bytes: Option<u64>,
    /// Every this many seconds (`-G`).
    pub seconds: Option<u64>,
    /// Align time rotation to multiples of `seconds` of wall-clock time.
    pub align: bool,
}

impl Rotation {
    /// True if any trigger is set.
    pub fn any(&self) -> bool {
        self.packets.is_some() || self.bytes.is_some() || self.seconds.is_some()
    }
}

/// Which completed files to delete.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Retention {
    /// Keep at most this many files (`-W`).
    pub max_files: Option<usize>,
    /// Keep at most this many bytes of files (`--max-total`).
    pub max_total: Option<u64>,
    /// Keep at least this percentage of the filesystem free (`--min-free`).
    pub min_free_pct: Option<f64>,
    /// Empty each file before deleting it ([`remove_releasing`]): for files
    /// whose readers must not keep them on disk after their deletion.
    pub empty_first: bool,
}

impl Retention {
    /// True if any limit is set.
    pub fn any(&self) -> bool {
        self.max_files.is_some() || self.max_total.is_some() || self.min_free_pct.is_some()
    }
}

impl OutputPlan {
    /// Decides the plan from `-w PATH` and whether rotation is asked for:
    /// `-` is stdout; a path ending in `/` or naming a directory is a series
    /// with the default template; a plain path with rotation becomes a series
    /// named after it (`NAME-{seq}.EXT`); otherwise one file.
    pub fn from_path(path: &str, rotating: bool, extension: &str) -> OutputPlan {
        if path == "-" {
            return OutputPlan::Stdout;
        }
        let p = PathBuf::from(path);
        if path.ends_with('/') || p.is_dir() {
            return OutputPlan::Series {
                dir: p,
                template: format!("ringcap-%Y%m%d-%H%M%S-{{seq}}.{extension}"),
            };
        }
        let has_fields = path.contains('%') || path.contains("{seq}");
        if !rotating && !has_fields {
            return OutputPlan::Single(p);
        }
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let template = if has_fields {
            name
        } else {
            match name.rsplit_once('.') {
                Some((stem, ext)) if !stem.is_empty() => format!("{stem}-{{seq}}.{ext}"),
                _ => format!("{name}-{{seq}}"),
            }
        };
        OutputPlan::Series { dir, template }
    }

    /// True if this plan could name a file `name` (in its directory): the
    /// single file's name, or a name its series' template makes. A
    /// capture's start recovers only its own leftovers: in a directory
    /// shared with other captures (/tmp), theirs are not its to touch.
    pub fn could_name(&self, name: &str) -> bool {
        match self {
            OutputPlan::Single(p) => p.file_name().is_some_and(|n| n == name),
            OutputPlan::Series { template, .. } => matches_template(template, name),
            _ => false,
        }
    }

    /// The directory files are written in.
    pub fn dir(&self) -> Option<PathBuf> {
        match self {
            OutputPlan::Single(p) => Some(
                p.parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from(".")),
            ),
            OutputPlan::Series { dir, .. } => Some(dir.clone()),
            _ => None,
        }
    }
}

/// Expands a template: strftime fields for `time` (local time) and `{seq}` as
/// a six-digit sequence number.
pub fn expand_template(template: &str, time: SystemTime, seq: u64) -> String {
    let t: chrono::DateTime<chrono::Local> = time.into();
    let mut out = String::new();
    use std::fmt::Write;
    // chrono panics on invalid format strings only through Display; write! with
    // an error falls back to the template text.
    if write!(out, "{}", t.format(template)).is_err() {
        out = template.to_string();
    }
    out.replace("{seq}", &format!("{seq:06}"))
}

/// True if `name` could have been produced by `template`: literal parts match
/// exactly, `{seq}` matches six or more digits, numeric strftime fields match
/// exactly the digits they produce (`%Y` four, `%m` two, ...), and other
/// fields a run of letters and digits. Retention only ever deletes files that
/// match, so a user's own files beside the series are safe.
pub fn matches_template(template: &str, name: &str) -> bool {
    #[derive(Clone, Copy)]
    enum Tok {
        Lit(char),
        Digits { min: usize, max: usize },
        Word,
    }
    let mut pattern = Vec::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("{seq}") {
            pattern.push(Tok::Digits { min: 6, max: 20 });
            rest = after;
            continue;
        }
        rest = &rest[c.len_utf8()..];
        if c != '%' {
            pattern.push(Tok::Lit(c));
            continue;
        }
        let Some(f) = rest.chars().next() else {
            pattern.push(Tok::Lit('%'));
            break;
        };
        rest = &rest[f.len_utf8()..];
        pattern.push(match f {
            '%' => Tok::Lit('%'),
            'Y' | 'G' => Tok::Digits { min: 4, max: 4 },
            'm' | 'd' | 'H' | 'M' | 'S' | 'y' | 'C' | 'I' | 'U' | 'W' | 'V' | 'g' => {
                Tok::Digits { min: 2, max: 2 }
            }
            'j' => Tok::Digits { min: 3, max: 3 },
            'u' | 'w' => Tok::Digits { min: 1, max: 1 },
            's' => Tok::Digits { min: 1, max: 20 },
            _ => Tok::Word,
        });
    }
    fn go(p: &[Tok], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some(Tok::Lit(c)) => s.first() == Some(c) && go(&p[1..], &s[1..]),
            Some(Tok::Digits { min, max }) => {
                let run = s
                    .iter()
                    .take(*max)
                    .take_while(|c| c.is_ascii_digit())
                    .count();
                (*min..=run).rev().any(|n| go(&p[1..], &s[n..]))
            }
            Some(Tok::Word) => {
                let run = s.iter().take_while(|c| c.is_ascii_alphanumeric()).count();
                (1..=run).rev().any(|n| go(&p[1..], &s[n..]))
            }
        }
    }
    let s: Vec<char> = name.chars().collect();
    !name.starts_with('.') && go(&pattern, &s)
}

/// The hidden name a file is written under until it is complete.
pub fn partial_path(final_path: &Path) -> PathBuf {
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    final_path.with_file_name(format!(".{name}{PARTIAL_SUFFIX}"))
}

/// The final name of a hidden partial file, if `path` is one.
pub fn final_path_of_partial(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let inner = name.strip_prefix('.')?.strip_suffix(PARTIAL_SUFFIX)?;
    if inner.is_empty() {
        return None;
    }
    Some(path.with_file_name(inner))
}

/// Creates a new file for writing without following symlinks and without
/// replacing an existing file, with permissions `mode`, and takes an
/// exclusive flock on it for as long as it is open: crash recovery in
/// another process skips locked partial files (they are being written).
///
/// Between the creation and the lock, the file is empty and unlocked, and
/// crash recovery in another process may remove it as an empty leftover
/// ([`remove_if_empty_partial`]): once locked, the file is checked to still
/// be the one at `path`, and created again if not.
pub fn create_exclusive(path: &Path, mode: u32, direct: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true).mode(mode);
    let mut flags = libc::O_NOFOLLOW | libc::O_CLOEXEC;
    if direct {
        flags |= libc::O_DIRECT;
    }
    o.custom_flags(flags);
    for _ in 0..8 {
        let f = o.open(path)?;
        f.lock()?;
        match fs::symlink_metadata(path) {
            Ok(named) if same_file(&f.metadata()?, &named) => return Ok(f),
            // Removed (or removed and replaced: the next create fails).
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "{} was removed again and again while being created",
        path.display()
    )))
}

/// True if both describe the same file (device and inode).
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// What [`remove_if_empty_partial`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmptyPartial {
    /// It was an empty hidden partial file no capture was writing: removed.
    Removed,
    /// Left alone: not named as a hidden partial file, not a regular file
    /// (a symbolic link, say), or not empty.
    Kept,
    /// Left alone: a running capture holds its lock (it is writing it).
    InUse,
}

/// Removes `path` if it is a hidden partial file of ringcap's naming
/// ([`final_path_of_partial`]), a regular file, empty, and not locked by a
/// running capture. Such a file is left by a capture killed before it wrote
/// anything (a file's header can still be in its write buffer): it holds
/// nothing to recover. Any other file is left untouched.
///
/// The file is removed while this function holds its lock, once it has
/// checked, under the lock, that the file is still empty and still the one
/// named `path`. A capture that created it but had not locked it yet finds
/// out when it does, and creates it again ([`create_exclusive`]).
pub fn remove_if_empty_partial(path: &Path) -> io::Result<EmptyPartial> {
    if final_path_of_partial(path).is_none() {
        return Ok(EmptyPartial::Kept);
    }
    // Read-only is enough to lock; O_NONBLOCK so that a FIFO of that name
    // does not block the open.
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        // A symbolic link.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(EmptyPartial::Kept),
        Err(e) => return Err(e),
    };
    let m = file.metadata()?;
    if !m.is_file() || m.len() != 0 {
        return Ok(EmptyPartial::Kept);
    }
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Ok(EmptyPartial::InUse),
        Err(fs::TryLockError::Error(e)) => return Err(e),
    }
    let m = file.metadata()?;
    let named = fs::symlink_metadata(path)?;
    if m.len() != 0 || !same_file(&m, &named) {
        return Ok(EmptyPartial::Kept);
    }
    fs::remove_file(path)?;
    Ok(EmptyPartial::Removed)
}

/// Checks that the final name is free (or may be replaced) before writing.
pub fn check_target(final_path: &Path, overwrite: bool) -> io::Result<()> {
    match fs::symlink_metadata(final_path) {
        Ok(m) if m.file_type().is_symlink() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} is a symbolic link; ringcap does not write through links",
                final_path.display()
            ),
        )),
        Ok(m) if !m.is_file() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a regular file", final_path.display()),
        )),
        Ok(_) if !overwrite => {
            Err(crate::SinkReason::OutputExists(final_path.to_path_buf()).into_io())
        }
        _ => Ok(()),
    }
}

/// Completed files of a series, oldest first (by modification time, then name).
pub fn completed_files(dir: &Path, template: &str) -> Vec<(PathBuf, u64)> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(SystemTime, String, PathBuf, u64)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            if !matches_template(template, &name) {
                return None;
            }
            let m = e.metadata().ok()?;
            if !m.is_file() {
                return None;
            }
            Some((m.modified().ok()?, name, e.path(), m.len()))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, _, p, l)| (p, l)).collect()
}

/// Free space of the filesystem holding `dir`, in percent.
pub fn free_pct(dir: &Path) -> Option<f64> {
    let (available, total) = crate::sys::filesystem_space(dir)?;
    (total > 0).then(|| 100.0 * available as f64 / total as f64)
}

/// Deletes `path`, a regular file, after emptying it: a descriptor of it
/// that someone else holds would otherwise keep its blocks in use after
/// the unlink, and the space counted as freed would not be. (ringcapd hands
/// its users descriptors of their dump files; one kept open per file pinned
/// each file deleted by the user or by retention, beyond the user's quota.)
/// Never follows a symlink; refuses anything but a regular file.
pub fn remove_releasing(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    f.set_len(0)?;
    fs::remove_file(path)
}

/// Deletes a completed file as `r` says ([`Retention::empty_first`]).
pub fn remove_completed(path: &Path, r: &Retention) -> io::Result<()> {
    if r.empty_first {
        remove_releasing(path)
    } else {
        fs::remove_file(path)
    }
}

/// Deletes the oldest completed files of a series until the limits hold,
/// but never the newest one: it holds the packets just captured, and a
/// limit that only deleting it could meet (a disk already too full for
/// --min-free, one file larger than --max-total) is not worth losing them.
/// `extra` is the size of the file being written (counted, never deleted).
/// Returns the deleted paths; each deletion should be logged by the caller.
pub fn enforce_retention(dir: &Path, template: &str, r: &Retention, extra: u64) -> Vec<PathBuf> {
    let mut deleted = Vec::new();
    if !r.any() {
        return deleted;
    }
    let mut files = completed_files(dir, template);
    loop {
        let total: u64 = files.iter().map(|(_, l)| l).sum::<u64>() + extra;
        let too_many = r.max_files.is_some_and(|m| files.len() > m);
        let too_big = r.max_total.is_some_and(|m| total > m);
        let too_full = r
            .min_free_pct
            .is_some_and(|m| free_pct(dir).is_some_and(|f| f < m));
        if !(too_many || too_big || too_full) || files.len() <= 1 {
            break;
        }
        let (oldest, _) = files.remove(0);
        if remove_completed(&oldest, r).is_ok() {
            deleted.push(oldest);
        }
    }
    deleted
}

/// Hidden partial files in `dir`, left by a process that did not finish.
pub fn leftover_partials(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| final_path_of_partial(p).is_some())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        assert_eq!(
            OutputPlan::from_path("-", false, "pcap"),
            OutputPlan::Stdout
        );
        assert_eq!(
            OutputPlan::from_path("x.pcap", false, "pcap"),
            OutputPlan::Single("x.pcap".into())
        );
        assert_eq!(
            OutputPlan::from_path("d/x.pcap", true, "pcap"),
            OutputPlan::Series {
                dir: "d".into(),
                template: "x-{seq}.pcap".into()
            }
        );
        assert_eq!(
            OutputPlan::from_path("out/", false, "pcapng"),
            OutputPlan::Series {
                dir: "out/".into(),
                template: "ringcap-%Y%m%d-%H%M%S-{seq}.pcapng".into()
            }
        );
    }

    #[test]
    fn templates_expand_and_match() {
        let t = "ringcap-%Y%m%d-%H%M%S-{seq}.pcapng";
        let name = expand_template(t, SystemTime::now(), 42);
        assert!(name.ends_with("-000042.pcapng"), "{name}");
        assert!(matches_template(t, &name));
        assert!(!matches_template(t, "important.pcapng"));
        assert!(!matches_template(t, &format!(".{name}{PARTIAL_SUFFIX}")));
        assert!(matches_template("x-{seq}.pcap", "x-000001.pcap"));
        assert!(!matches_template("x-{seq}.pcap", "y-000001.pcap"));
        assert!(!matches_template("x-{seq}.pcap", "x-000001.pcap.bak"));
        for own in [
            "x-1.pcap",
            "x-important.pcap",
            "x-2021-01-01.pcap",
            "x-keep-forever.pcap",
        ] {
            assert!(!matches_template("x-{seq}.pcap", own), "{own}");
        }
        assert!(matches_template("x-{seq}.pcap", "x-1000000.pcap"));
        assert!(!matches_template(t, "ringcap-2026112-101010-000001.pcapng"));
        assert!(matches_template("%b-{seq}", "Nov-000001"));
    }

    #[test]
    fn partial_names_round_trip() {
        let p = Path::new("/d/a.pcap");
        let h = partial_path(p);
        assert_eq!(h, Path::new("/d/.a.pcap.ringcap-partial"));
        assert_eq!(final_path_of_partial(&h).unwrap(), p);
        assert_eq!(final_path_of_partial(Path::new("/d/a.pcap")), None);
    }

    #[test]
    fn exclusive_create_refuses_links_and_existing() {
        let dir = std::env::temp_dir().join(format!("ringcap-files-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let target = dir.join("t.pcap");
        let _ = fs::remove_file(&target);
        create_exclusive(&target, 0o640, false).unwrap();
        assert!(create_exclusive(&target, 0o640, false).is_err());
        assert!(check_target(&target, false).is_err());
        assert!(check_target(&target, true).is_ok());
        let link = dir.join("l.pcap");
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        assert!(check_target(&link, true).is_err());
        assert!(create_exclusive(&link, 0o640, false).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A file removed while someone holds it open holds no bytes through
    /// that descriptor; a symlink is refused, and its target left whole.
    #[test]
    fn remove_releasing_empties_what_others_hold() {
        let d = tempfile::tempdir().unwrap();
        let d = d.path();
        let p = d.join("f.pcap");
        fs::write(&p, vec![7u8; 8192]).unwrap();
        let held = fs::File::open(&p).unwrap();
        remove_releasing(&p).unwrap();
        assert!(!p.exists());
        assert_eq!(held.metadata().unwrap().len(), 0);
        let target = d.join("t");
        fs::write(&target, b"keep").unwrap();
        let link = d.join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(remove_releasing(&link).is_err());
        assert_eq!(fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn retention_deletes_oldest_matching_only() {
        let dir = std::env::temp_dir().join(format!("ringcap-ret-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for i in 0..5 {
            fs::write(dir.join(format!("x-{i:06}.pcap")), vec![0u8; 100]).unwrap();
            let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + i);
            File::options()
                .write(true)
                .open(dir.join(format!("x-{i:06}.pcap")))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        fs::write(dir.join("keep.pcap"), vec![0u8; 1000]).unwrap();
        // Sidecars (an index) are no files of the series, and retention
        // leaves them to the file observer (see FileObserver).
        let idx = |i: u64| ringcap_format::sidecar::index_path(&dir.join(format!("x-{i:06}.pcap")));
        for i in 0..5 {
            fs::write(idx(i), b"index").unwrap();
        }
        let deleted = enforce_retention(
            &dir,
            "x-{seq}.pcap",
            &Retention {
                max_files: Some(3),
                ..Default::default()
            },
            0,
        );
        assert_eq!(deleted.len(), 2);
        assert!(!dir.join("x-000000.pcap").exists());
        assert!(dir.join("x-000002.pcap").exists());
        assert!(
            idx(0).exists() && idx(4).exists(),
            "the sink leaves sidecars alone"
        );
        assert!(idx(2).exists() && idx(4).exists());
        let deleted = enforce_retention(
            &dir,
            "x-{seq}.pcap",
            &Retention {
                max_total: Some(150),
                ..Default::default()
            },
            0,
        );
        assert_eq!(deleted.len(), 2);
        assert!(dir.join("x-000004.pcap").exists());
        assert!(dir.join("keep.pcap").exists());
        // A limit only deleting the newest file could meet: it stays.
        let deleted = enforce_retention(
            &dir,
            "x-{seq}.pcap",
            &Retention {
                max_total: Some(10),
                min_free_pct: Some(100.0),
                ..Default::default()
            },
            0,
        );
        assert!(deleted.is_empty(), "{deleted:?}");
        assert!(dir.join("x-000004.pcap").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
