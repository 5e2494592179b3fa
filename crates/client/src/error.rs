//! The one error type of every call ([`ClientError`]): apart so each part of
//! the client names it without depending on the others.

use std::fmt;
use std::io;

/// Why a call failed.
#[derive(Debug)]
pub enum ClientError {
    /// The socket or the ring failed.
    Io(io::Error),
    /// The daemon's policy refused the request.
    Refused {
        /// The grant whose rule refused it (`None`: no grant matched).
        grant: Option<u32>,
        /// Which rule.
        rule: String,
        /// Why, in words.
        reason: String,
    },
    /// The daemon answered with an error.
    Daemon(String),
    /// The daemon's answer did not make sense.
    Protocol(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "{e}"),
            ClientError::Refused {
                grant,
                rule,
                reason,
            } => match grant {
                // Texts count grants from 1, in file order, like `ringcapd --check`.
                Some(g) => write!(
                    f,
                    "refused by grant {}, rule {rule}: {reason}",
                    u64::from(*g) + 1
                ),
                None => write!(f, "refused ({rule}): {reason}"),
            },
            ClientError::Daemon(m) => write!(f, "ringcapd: {m}"),
            ClientError::Protocol(m) => write!(f, "unexpected answer from ringcapd: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::Io(e)
    }
}
