//! Injection: frames a client asks to send, checked against its grant
//! ([`guard`]: the one place the policy for injected frames is enforced),
//! rate-limited (`ringcap_stages::Limits`, on the frames' requested send
//! times), sent at the time asked for by a scheduler that sleeps to just
//! before it and spins the rest ([`sender`]), and reported
//! with the kernel's transmit timestamp.
//!
//! Used by ringcapd for its clients and by `ringcap inject` as root; the
//! reports are `ringcap_proto`'s, so both speak the same language.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod guard;
pub mod sender;

pub use guard::{Guard, Refusal};
pub use sender::{Job, Sender};

/// CLOCK_REALTIME now, in nanoseconds since the epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
