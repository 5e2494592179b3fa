//! ringcapd: one privileged daemon owns the capture devices; unprivileged
//! local clients get exactly what the administrator's policy allows.
//!
//! - [`server`]: the Unix socket, one thread per connection, identity from
//!   the kernel, requests decoded in one place (`ringcap_proto`);
//! - [`session`]: a request held to the policy (`ringcap_policy`) and run
//!   as an engine capture (`ringcap_engine`) — the one place a session's
//!   settings are decided;
//! - [`ring_sink`]: the session's sink, the client's shared-memory ring
//!   (`ringcap_shm`), with its rate limits ([`rate`]);
//! - [`flows`]: a session's flow tables (grants with `flows = true`), fed
//!   after the policy's transforms, their records in the session's ring;
//! - [`budget`]: what each user holds (connections, sessions, pooled
//!   rings), reserved when decided and given back when gone;
//! - [`retrieve`]: stored packets for local users, held to the same
//!   decision as a live session, answered on a pipe;
//! - [`audit`]: a line per session start, change, end and refusal;
//! - [`trust`]: the one rule for the directories the daemon trusts (its
//!   socket's, `dump_dir`, the retrieval stores);
//! - [`sys`]: the one socket option read without a safe wrapper (the
//!   daemon's only `unsafe`).
//!
//! No client ever receives a packet socket: only its control connection,
//! its ring (read-only, sealed) and its read-position page.

pub mod audit;
pub mod budget;
pub mod dump;
pub mod flows;
pub mod inject;
pub mod listing;
pub mod metrics;
pub mod privilege;
pub mod retrieve;
pub mod ring_sink;
pub mod server;
pub mod session;
pub mod sys;
pub mod trust;

/// Reads the policy at `path` and the anonymization key it names (checked
/// like `ringcap capture --anonymize` checks one: private to its owner, the
/// right size). A key that cannot be read is an error of the policy: the
/// daemon never serves an anonymizing grant without it. The error starts
/// with the policy file's path, named once.
pub fn load_policy(
    path: &std::path::Path,
) -> Result<(ringcap_policy::Policy, Option<ringcap_privacy::Key>), String> {
    let in_file = |e: String| format!("{}: {e}", path.display());
    let policy = ringcap_policy::Policy::load(path).map_err(|e| in_file(e.to_string()))?;
    let key = match &policy.anonymization_key {
        Some(k) => Some(
            ringcap_privacy::Key::load(k)
                .map_err(|e| in_file(format!("anonymization_key: {e}")))?,
        ),
        None => None,
    };
    Ok((policy, key))
}
