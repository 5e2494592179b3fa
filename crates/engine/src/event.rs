//! What a running capture reports, as values: the front end decides how to
//! show them (the CLI prints them to stderr, the daemon sends them to its
//! client and its audit log).

use std::path::PathBuf;

/// Something a capture reports while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Something the user should fix.
    Warning(String),
    /// Something the user should fix with a setting (e.g. offloads that
    /// merge packets): the front end says which, in its words.
    Advice(crate::Reason),
    /// Something done on the user's behalf (a partial file recovered, an old
    /// file deleted by retention, offloads turned off and restored).
    Notice(String),
    /// A file was completed and published under its final name.
    FileCompleted(PathBuf),
    /// The capture failed while running and is stopping (the reason; the
    /// final outcome says it again).
    Error(crate::EngineError),
    /// The capture has ended; nothing follows.
    Finished,
}
