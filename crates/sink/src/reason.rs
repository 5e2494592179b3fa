//! Why the sink refused or failed, typed, for the failures a setting of the
//! front end can fix. The sink says what happened in its own words
//! (`Display`); it does not know the front end's flags or request fields, so
//! the front end that set the knob (the CLI, the daemon) names it when it
//! turns a [`SinkReason`] into words.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A sink failure a front end may explain with one of its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkReason {
    /// The output's final name exists and replacing it was not allowed.
    OutputExists(PathBuf),
    /// The disk filled while writing `file`; the file was closed valid.
    DiskFull {
        /// The file being written (its final name).
        file: String,
        /// The system's error.
        error: String,
    },
}

impl fmt::Display for SinkReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SinkReason::OutputExists(p) => write!(
                f,
                "{} already exists, and replacing it was not asked for",
                p.display()
            ),
            SinkReason::DiskFull { file, error } => write!(
                f,
                "writing {file}: the disk is full ({error}); the file was closed valid. Free space, or limit the files' total size or the space they leave free so old files are deleted"
            ),
        }
    }
}

impl std::error::Error for SinkReason {}

impl SinkReason {
    /// As an I/O error (its kind kept), so it travels through `io::Result`
    /// and [`of_io`](Self::of_io) finds it again.
    pub fn into_io(self) -> io::Error {
        let kind = match self {
            SinkReason::OutputExists(_) => io::ErrorKind::AlreadyExists,
            SinkReason::DiskFull { .. } => io::ErrorKind::StorageFull,
        };
        io::Error::new(kind, self)
    }

    /// The reason an I/O error made by [`into_io`](Self::into_io) carries.
    pub fn of_io(e: &io::Error) -> Option<&SinkReason> {
        e.get_ref()?.downcast_ref::<SinkReason>()
    }
}

/// Why the writer stopped: the message, and the typed reason when there is
/// one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    /// What went wrong, in the sink's words.
    pub message: String,
    /// The typed reason, when a front end's setting can fix it.
    pub reason: Option<SinkReason>,
}

impl WriteFailure {
    /// A failure with no typed reason.
    pub fn other(message: String) -> WriteFailure {
        WriteFailure {
            message,
            reason: None,
        }
    }
}

impl WriteFailure {
    /// `doing: e`, keeping the reason `e` carries (see [`SinkReason::into_io`]).
    pub fn io(doing: &str, e: &io::Error) -> WriteFailure {
        WriteFailure {
            message: format!("{doing}: {e}"),
            reason: SinkReason::of_io(e).cloned(),
        }
    }
}

impl From<SinkReason> for WriteFailure {
    fn from(r: SinkReason) -> WriteFailure {
        WriteFailure {
            message: r.to_string(),
            reason: Some(r),
        }
    }
}

impl fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_survives_an_io_error() {
        let e = SinkReason::OutputExists("/x/y".into()).into_io();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            SinkReason::of_io(&e),
            Some(&SinkReason::OutputExists("/x/y".into()))
        );
        assert!(SinkReason::of_io(&io::Error::other("x")).is_none());
    }

    #[test]
    fn the_sink_names_no_flag() {
        for r in [
            SinkReason::OutputExists("/a".into()),
            SinkReason::DiskFull {
                file: "f".into(),
                error: "e".into(),
            },
        ] {
            assert!(!r.to_string().contains("--"), "{r}");
        }
    }
}
