//! Why a capture could not start or did not finish: typed, with a message a
//! user can act on. Front ends map the kind to what they need (the CLI to an
//! exit status, the daemon to a refusal).

use crate::reason::Reason;
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
    /// What went wrong and what to do about it, in the engine's words.
    pub message: String,
    /// The typed reason, when a setting of the front end can fix it: the
    /// front end says it in its own words (see [`crate::reason`]).
    pub reason: Option<Reason>,
}

impl EngineError {
    /// A usage error.
    pub fn usage(message: impl Into<String>) -> EngineError {
        EngineError {
            kind: ErrorKind::Usage,
            message: message.into(),
            reason: None,
        }
    }

    /// A system refusal.
    pub fn system(message: impl Into<String>) -> EngineError {
        EngineError {
            kind: ErrorKind::System,
            message: message.into(),
            reason: None,
        }
    }

    /// A refusal or failure for a typed `reason`; the message is the
    /// reason's own words.
    pub fn because(kind: ErrorKind, reason: Reason) -> EngineError {
        EngineError {
            kind,
            message: reason.to_string(),
            reason: Some(reason),
        }
    }

    /// What the writer said when it failed, its reason kept.
    pub fn from_write(failure: ringcap_sink::WriteFailure) -> EngineError {
        match failure.reason {
            Some(r) => EngineError::because(ErrorKind::Runtime, Reason::Sink(r)),
            None => EngineError::runtime(failure.message),
        }
    }

    /// A runtime failure.
    pub fn runtime(message: impl Into<String>) -> EngineError {
        EngineError {
            kind: ErrorKind::Runtime,
            message: message.into(),
            reason: None,
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
            ringcap_source::OpenError::NoHardwareTimestamps { interface, error } => {
                EngineError::because(
                    ErrorKind::System,
                    Reason::NoHardwareTimestamps {
                        interface,
                        error: error.to_string(),
                    },
                )
            }
            ringcap_source::OpenError::MissingCapability { capability, action } => {
                EngineError::because(
                    ErrorKind::System,
                    Reason::MissingCapability { capability, action },
                )
            }
            _ => EngineError::system(e.to_string()),
        }
    }
}
