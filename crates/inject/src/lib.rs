//! Injection: frames a client asks to send, held to its grant's shape
//! ([`guard`]: default deny, the one place the policy for an injected
//! frame's bytes is enforced), sent at the time asked for by a scheduler
//! that sleeps to just before it and spins the rest ([`sender`]), charged
//! against the grant's rate at the moment they leave, on the monotonic
//! clock ([`rate`]: the one place the rate is enforced), and reported with
//! the kernel's transmit timestamp.
//!
//! Used by ringcapd for its clients and by `ringcap inject` as root; the
//! reports are `ringcap_proto`'s, so both speak the same language.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod guard;
pub mod identity;
mod layers;
pub mod rate;
pub mod rewritten;
pub mod sender;

pub use guard::{Guard, Refusal, Rewritten};
pub use identity::Identity;
pub use layers::TUNNEL_PORTS;
pub use rate::{RateLimit, Rates};
pub use sender::{Job, Sender};

/// CLOCK_REALTIME now, in nanoseconds since the epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
