//! Why a capture could not start or did not finish: typed, with a message a
//! user can act on. Front ends map the kind to what they need (the CLI to an
//! exit status, the daemon to a refusal).

use std::fmt;

/// What kind of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The specification is wrong: a bad filter, an unreadable or malformed
    /// input file, an output that exists, mixed link types for pcap.
    Usage,
    /// The system refused: no such interface, interface down, a missing
    /// capability, no hardware timestamps.
    System,
    /// Failure while running: a write failed (disk full, I/O error), a socket
    /// failed, a thread could not start.
    Runtime,
}

/// A capture error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineError {
    /// What kind.
    pub kind: ErrorKind,
    /// What went wrong and what to do about it.
    pub message: String,
}

impl EngineError {
    /// A usage error.
    pub fn usage(message: impl Into<String>) -> EngineError {
        EngineError {
            kind: ErrorKind::Usage,
            message: message.into(),
        }
    }

    /// A system refusal.
    pub fn system(message: impl Into<String>) -> EngineError {
        EngineError {
            kind: ErrorKind::System,
            message: message.into(),
        }
    }

    /// A runtime failure.
    pub fn runtime(message: impl Into<String>) -> EngineError {
        EngineError {
            kind: ErrorKind::Runtime,
            message: message.into(),
        }
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EngineError {}

impl From<ringcap_source::OpenError> for EngineError {
    fn from(e: ringcap_source::OpenError) -> EngineError {
        match e {
            ringcap_source::OpenError::Os { .. } => EngineError::runtime(e.to_string()),
            _ => EngineError::system(e.to_string()),
        }
    }
}
