//! Dropping root privileges (`-Z USER`) once sockets and files are open.

use nix::unistd::{Gid, Uid, User};

/// A user's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

/// Looks up a user by name (or numeric uid).
pub fn lookup(user: &str) -> Result<UserIds, String> {
    match User::from_name(user) {
        Ok(Some(u)) => {
            return Ok(UserIds {
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
            })
        }
        Ok(None) => {}
        Err(e) => return Err(format!("looking up user '{user}' for -Z: {e}")),
    }
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(UserIds { uid, gid: uid });
    }
    Err(format!("no such user '{user}' for -Z"))
}

/// Switches the whole process to `ids`: supplementary groups, gid, then uid.
/// All threads change together (glibc's setuid is process-wide).
pub fn drop_to(ids: UserIds) -> Result<(), String> {
    let gid = Gid::from_raw(ids.gid);
    nix::unistd::setgroups(&[gid]).map_err(|e| format!("setgroups: {e}"))?;
    nix::unistd::setgid(gid).map_err(|e| format!("setgid({}): {e}", ids.gid))?;
    nix::unistd::setuid(Uid::from_raw(ids.uid)).map_err(|e| format!("setuid({}): {e}", ids.uid))?;
    Ok(())
}
