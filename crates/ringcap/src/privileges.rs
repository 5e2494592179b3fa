//! Dropping root privileges (`-Z USER`) once sockets and files are open.

use std::ffi::CString;

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
    let name = CString::new(user).map_err(|_| format!("user name '{user}' contains a NUL byte"))?;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: passwd is plain data; getpwnam_r writes into `pwd` and `buf`
    // (whose length we pass) and sets `result` to &pwd or null.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc == 0 && !result.is_null() {
        return Ok(UserIds {
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
        });
    }
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(UserIds { uid, gid: uid });
    }
    Err(format!("no such user '{user}' for -Z"))
}

/// Switches the whole process to `ids`: supplementary groups, gid, then uid.
/// All threads change together (glibc's setuid is process-wide).
pub fn drop_to(ids: UserIds) -> Result<(), String> {
    // SAFETY: plain system calls with valid arguments; the group list has one entry.
    unsafe {
        let groups = [ids.gid];
        if libc::setgroups(1, groups.as_ptr()) != 0 {
            return Err(format!("setgroups: {}", std::io::Error::last_os_error()));
        }
        if libc::setgid(ids.gid) != 0 {
            return Err(format!(
                "setgid({}): {}",
                ids.gid,
                std::io::Error::last_os_error()
            ));
        }
        if libc::setuid(ids.uid) != 0 {
            return Err(format!(
                "setuid({}): {}",
                ids.uid,
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}
