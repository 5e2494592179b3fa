//! What libpcap may look up while it compiles a filter.
//!
//! libpcap resolves the names a filter holds: `host NAME` and a bare name go
//! to getaddrinfo, `net NAME` to getnetbyname, port, protocol and Ethernet
//! names to local files. A service compiling other machines' filters (the
//! retrieval server) would thus send a DNS query for any name a client
//! writes — to a resolver and domain of the client's choosing, on the
//! query's thread, holding its slot for the resolver's timeout (10 s with
//! Debian's defaults, measured) where no deadline reaches.
//! [`resolve_names_locally`] limits this process's host and network lookups
//! to the local files (/etc/hosts, /etc/networks): a name found there still
//! works, any other is an "unknown host" at once.
//!
//! How: glibc's `__nss_configure_lookup`, which sets a lookup database's
//! sources for the calling process as a line of nsswitch.conf would (glibc
//! keeps it over later reloads of the file). No other library lets a process
//! turn DNS off for its own lookups; other C libraries lack the call, and
//! there this says so.

use std::ffi::CStr;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    fn __nss_configure_lookup(
        dbname: *const std::ffi::c_char,
        service_line: *const std::ffi::c_char,
    ) -> std::ffi::c_int;
}

/// Host and network name lookups of this process (libpcap's included) use
/// local files only, never DNS. Call it before other threads look names up.
pub fn resolve_names_locally() -> Result<(), String> {
    for db in [c"hosts", c"networks"] {
        configure(db, c"files")?;
    }
    Ok(())
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn configure(db: &CStr, line: &CStr) -> Result<(), String> {
    // SAFETY: both are valid NUL-terminated strings that outlive the call;
    // glibc copies what it keeps. The call takes glibc's NSS lock itself.
    let r = unsafe { __nss_configure_lookup(db.as_ptr(), line.as_ptr()) };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "cannot limit {} lookups to local files (__nss_configure_lookup: {r})",
            db.to_string_lossy()
        ))
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn configure(db: &CStr, _line: &CStr) -> Result<(), String> {
    Err(format!(
        "cannot limit {} lookups to local files on this C library",
        db.to_string_lossy()
    ))
}
