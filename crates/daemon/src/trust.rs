//! The one rule for a directory ringcapd trusts: the socket's directory,
//! `dump_dir` and each retrieval store. Another user who could write such a
//! directory, or rename it, could put their own socket, file or link where
//! the daemon looks, so a directory is trusted only if
//!
//! - its path is absolute and its own canonical path (no symbolic link on
//!   the way: the policy names the real directory);
//! - it is a directory owned by root or the daemon's user, writable by
//!   neither group nor others (for the socket's directory, sticky is
//!   enough, as /run and /tmp are: nobody can rename another's entry);
//! - every parent is owned by root or the daemon's user and writable by
//!   no one else unless sticky (else someone could rename the directory
//!   and put another in its place).
//!
//! [`open_trusted`] checks the directory it opened (`O_NOFOLLOW`), so what
//! is checked is what the caller then uses.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// What a trusted directory is for, as said in messages ("dump_dir",
/// "store", "the socket's directory").
#[derive(Debug, Clone, Copy)]
pub struct Role {
    pub name: &'static str,
    /// Writable by others is accepted if the directory is sticky.
    pub sticky_ok: bool,
}

pub const SOCKET_DIR: Role = Role {
    name: "the socket's directory",
    sticky_ok: true,
};
pub const DUMP_DIR: Role = Role {
    name: "dump_dir",
    sticky_ok: false,
};
pub const STORE: Role = Role {
    name: "store",
    sticky_ok: false,
};

fn refused(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, msg)
}

/// Opens `dir` and checks it against the rule of the module docs.
pub fn open_trusted(dir: &Path, role: Role) -> io::Result<OwnedFd> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::Mode;
    let name = role.name;
    let shown = dir.display();
    if !dir.is_absolute() {
        return Err(refused(format!("{name} {shown} is not an absolute path")));
    }
    let real = std::fs::canonicalize(dir).map_err(|e| refused(format!("{name} {shown}: {e}")))?;
    if real != dir {
        return Err(refused(format!(
            "{name} {shown} goes through a symbolic link (it is {}): name the real directory",
            real.display()
        )));
    }
    let fd = open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| refused(format!("{name} {shown}: {e}")))?;
    let st = nix::sys::stat::fstat(&fd).map_err(io::Error::from)?;
    check(st.st_uid, st.st_mode, role.sticky_ok)
        .map_err(|why| refused(format!("{name} {shown} {why}")))?;
    for parent in dir.ancestors().skip(1) {
        let p = nix::sys::stat::lstat(parent)
            .map_err(|e| refused(format!("{name} {shown}: {}: {e}", parent.display())))?;
        check(p.st_uid, p.st_mode, true).map_err(|why| {
            refused(format!(
                "{name} {shown}: its parent {} {why}: another user could put another \
                 directory in its place",
                parent.display()
            ))
        })?;
    }
    Ok(fd)
}

/// The rule for one directory's owner and mode: `Err` says why not.
fn check(uid: u32, mode: u32, sticky_ok: bool) -> Result<(), String> {
    let me = nix::unistd::geteuid().as_raw();
    if uid != 0 && uid != me {
        return Err(format!(
            "is owned by uid {uid}, not root or ringcapd's user (uid {me})"
        ));
    }
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !(sticky_ok && sticky) {
        return Err(format!(
            "is writable by its group or others{} (mode {:o})",
            if sticky_ok {
                " without the sticky bit"
            } else {
                ""
            },
            mode & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Sets `p`'s mode (tests of the directories the daemon trusts).
    pub(crate) fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    /// Each way a directory can be another user's to change is refused,
    /// with its reason, for every role; a sticky directory only where the
    /// role allows it.
    #[test]
    fn every_way_another_user_could_change_the_directory_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(t.path()).unwrap();
        let dir = base.join("d");
        std::fs::create_dir(&dir).unwrap();
        mode(&dir, 0o755);
        for role in [SOCKET_DIR, DUMP_DIR, STORE] {
            let err = |p: &Path| open_trusted(p, role).unwrap_err().to_string();
            assert!(open_trusted(&dir, role).is_ok(), "{}", role.name);
            assert!(err(Path::new("rel")).contains("not an absolute path"));
            let link = base.join("link");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&dir, &link).unwrap();
            assert!(err(&link).contains("goes through a symbolic link"));
            assert!(err(&link.join(".")).contains("goes through a symbolic link"));
            mode(&dir, 0o775);
            assert!(err(&dir).contains("writable by its group or others"));
            mode(&dir, 0o1777);
            assert_eq!(open_trusted(&dir, role).is_ok(), role.sticky_ok);
            mode(&dir, 0o755);
            let inner = dir.join("inner");
            let _ = std::fs::create_dir(&inner);
            mode(&dir, 0o777);
            assert!(err(&inner).contains("its parent"), "{}", err(&inner));
            mode(&dir, 0o1777);
            assert!(open_trusted(&inner, role).is_ok(), "sticky parent");
            mode(&dir, 0o755);
            if nix::unistd::geteuid().is_root() {
                std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
                assert!(err(&dir).contains("owned by uid 65534"));
                assert!(err(&inner).contains("its parent"));
                std::os::unix::fs::chown(&dir, Some(0), None).unwrap();
            }
            assert!(err(&base.join("missing")).contains("missing"));
        }
    }
}
