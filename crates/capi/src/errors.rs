//! Errors and strings at the C boundary: `Fail` (a code and a message),
//! `guard` (which every entry point runs under, so no error or panic unwinds
//! into C), the text helpers that copy messages out and read C strings in,
//! and the two static-string entry points. Separate because every other
//! part leans on it and it leans on none of them.

use crate::{
    RINGCAP_ERR_ARG, RINGCAP_ERR_BUSY, RINGCAP_ERR_DAEMON, RINGCAP_ERR_ENDED, RINGCAP_ERR_INTERNAL,
    RINGCAP_ERR_IO, RINGCAP_ERR_PROTOCOL, RINGCAP_ERR_REFUSED, RINGCAP_ERR_TOO_SMALL, RINGCAP_OK,
};
use ringcap_client::ClientError;
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A failure: a code and a message.
pub(crate) struct Fail {
    code: c_int,
    pub(crate) msg: String,
}

impl Fail {
    pub(crate) fn new(code: c_int, msg: impl Into<String>) -> Fail {
        Fail {
            code,
            msg: msg.into(),
        }
    }
}

impl From<ClientError> for Fail {
    fn from(e: ClientError) -> Fail {
        let code = match &e {
            ClientError::Io(_) => RINGCAP_ERR_IO,
            ClientError::Refused { .. } => RINGCAP_ERR_REFUSED,
            ClientError::Daemon(_) => RINGCAP_ERR_DAEMON,
            ClientError::Protocol(_) => RINGCAP_ERR_PROTOCOL,
        };
        Fail::new(code, e.to_string())
    }
}

/// Copies `msg` into the caller's buffer (truncated at a character
/// boundary, NUL-terminated); nothing if it is NULL or empty.
pub(crate) fn write_text(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let mut n = msg.len().min(len - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller promises `buf` points to `len` writable bytes
    // (documented for every errbuf/len pair in ringcap.h); we write n < len
    // bytes and a NUL at index n < len. `msg` cannot overlap a C buffer the
    // caller owns.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// Runs `f`, turning an error into its code plus message and a panic into
/// `RINGCAP_ERR_INTERNAL`: nothing unwinds into C.
pub(crate) fn guard(
    errbuf: *mut c_char,
    errlen: usize,
    f: impl FnOnce() -> Result<c_int, Fail>,
) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            write_text(errbuf, errlen, &e.msg);
            e.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            write_text(
                errbuf,
                errlen,
                &format!("internal error in libringcap (please report): {what}"),
            );
            RINGCAP_ERR_INTERNAL
        }
    }
}

/// A C string argument as UTF-8 (`None` for NULL).
pub(crate) fn text<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes NULL (handled above) or a NUL-terminated
    // string that stays valid for the call (ringcap.h says so for every
    // `const char *` argument).
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map(Some)
        .map_err(|_| Fail::new(RINGCAP_ERR_ARG, format!("{what} is not UTF-8")))
}

/// The library's version (the crate's, e.g. "0.1.0"), a static string.
#[no_mangle]
pub extern "C" fn ringcap_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// A static description of an error code.
#[no_mangle]
pub extern "C" fn ringcap_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        RINGCAP_OK => c"success",
        RINGCAP_ERR_ARG => c"bad argument",
        RINGCAP_ERR_IO => c"socket or ring failure",
        RINGCAP_ERR_REFUSED => c"refused by the daemon's policy",
        RINGCAP_ERR_DAEMON => c"the daemon answered with an error",
        RINGCAP_ERR_PROTOCOL => c"unexpected answer from the daemon",
        RINGCAP_ERR_ENDED => c"the session has ended",
        RINGCAP_ERR_INTERNAL => c"internal error in libringcap",
        RINGCAP_ERR_TOO_SMALL => c"buffer too small for the next packet",
        RINGCAP_ERR_BUSY => c"another call on this session is running",
        _ => c"unknown error code",
    };
    s.as_ptr()
}
