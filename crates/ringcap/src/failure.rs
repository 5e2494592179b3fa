//! Errors that end the program, with the exit status they map to.

use std::fmt;

/// Exit statuses (documented in `--help`).
pub mod exit {
    /// Failure while running (I/O error, disk full).
    pub const RUNTIME: i32 = 1;
    /// Bad usage: options, filter expression, input files.
    pub const USAGE: i32 = 2;
    /// The system refused: interface missing or down, missing capability.
    pub const SYSTEM: i32 = 3;
}

/// An error that ends the program.
#[derive(Debug)]
pub struct Failure {
    /// Exit status.
    pub code: i32,
    /// What went wrong and what to do about it.
    pub message: String,
}

impl Failure {
    /// A usage error (exit 2).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::USAGE,
            message: message.into(),
        }
    }

    /// A system refusal (exit 3).
    pub fn system(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::SYSTEM,
            message: message.into(),
        }
    }

    /// A runtime failure (exit 1).
    pub fn runtime(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::RUNTIME,
            message: message.into(),
        }
    }

    /// The output's reader closed it (`| head`): said, but no failure
    /// (exit 0), as a reader taking what it wanted.
    pub fn output_closed() -> Failure {
        Failure {
            code: 0,
            message: "output closed".into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<ringcap_engine::EngineError> for Failure {
    fn from(e: ringcap_engine::EngineError) -> Failure {
        let code = match e.kind {
            ringcap_engine::ErrorKind::Usage => exit::USAGE,
            ringcap_engine::ErrorKind::System => exit::SYSTEM,
            ringcap_engine::ErrorKind::Runtime => exit::RUNTIME,
        };
        Failure {
            code,
            message: crate::words::error(&e),
        }
    }
}

/// What ringcapd (or the way to it) said, as an exit: a refused filter is
/// the user's to fix (usage), any other refusal or a connection failure the
/// system's.
pub fn refusal(e: ringcap_client::ClientError) -> Failure {
    use ringcap_client::ClientError;
    match e {
        ClientError::Refused { ref rule, .. } if rule == "filter" => Failure::usage(e.to_string()),
        ClientError::Refused { .. } => Failure::system(e.to_string()),
        ClientError::Io(_) => Failure::system(e.to_string()),
        _ => Failure::runtime(e.to_string()),
    }
}

impl From<ringcap_source::OpenError> for Failure {
    fn from(e: ringcap_source::OpenError) -> Failure {
        ringcap_engine::EngineError::from(e).into()
    }
}
