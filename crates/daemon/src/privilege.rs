//! Least privilege when started as root without systemd (`--user NAME`):
//! after the socket is bound, become NAME and keep only CAP_NET_RAW (packet
//! sockets) and CAP_NET_ADMIN (offloads, hardware timestamps) — in the
//! effective and permitted sets, none inheritable, no ambient ones, and the
//! bounding set cut to those two, so nothing the daemon runs can regain more.
//! Under the shipped systemd unit the service manager does the same.

use caps::{CapSet, Capability, CapsHashSet};
use nix::unistd::User;

/// The capabilities ringcapd keeps.
pub const KEPT: [Capability; 2] = [Capability::CAP_NET_RAW, Capability::CAP_NET_ADMIN];

/// Becomes `user`, keeping only [`KEPT`].
pub fn drop_to(user: &str) -> Result<(), String> {
    let u = User::from_name(user)
        .map_err(|e| format!("looking up user {user}: {e}"))?
        .ok_or_else(|| format!("no such user {user}"))?;
    if u.uid.is_root() {
        return Err(format!(
            "--user {user} is root: give the daemon a user of its own"
        ));
    }
    let keep: CapsHashSet = KEPT.into_iter().collect();
    // Keep the permitted set across setuid, then cut everything down.
    nix::sys::prctl::set_keepcaps(true).map_err(|e| format!("PR_SET_KEEPCAPS: {e}"))?;
    for c in caps::all() {
        if !keep.contains(&c) {
            caps::drop(None, CapSet::Bounding, c)
                .map_err(|e| format!("dropping {c} from the bounding set: {e}"))?;
        }
    }
    nix::unistd::setgroups(&[u.gid]).map_err(|e| format!("setgroups: {e}"))?;
    nix::unistd::setgid(u.gid).map_err(|e| format!("setgid: {e}"))?;
    nix::unistd::setuid(u.uid).map_err(|e| format!("setuid: {e}"))?;
    caps::set(None, CapSet::Permitted, &keep).map_err(|e| format!("permitted set: {e}"))?;
    caps::set(None, CapSet::Effective, &keep).map_err(|e| format!("effective set: {e}"))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| format!("inheritable set: {e}"))?;
    let _ = caps::clear(None, CapSet::Ambient);
    nix::sys::prctl::set_keepcaps(false).map_err(|e| format!("PR_SET_KEEPCAPS: {e}"))?;
    Ok(())
}

/// The effective capabilities now (for the log and tests).
pub fn effective() -> Vec<String> {
    let mut v: Vec<String> = caps::read(None, CapSet::Effective)
        .map(|s| s.into_iter().map(|c| c.to_string()).collect())
        .unwrap_or_default();
    v.sort();
    v
}
