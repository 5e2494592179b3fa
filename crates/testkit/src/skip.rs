//! Skipping a test that cannot run here, or failing it when the run must not skip.
//!
//! Tests that need root, network namespaces, mounts, new users or an external
//! tool call [`skip`] and return when they cannot have them. Normally that
//! prints `SKIP: <reason>` and the test passes. With the environment variable
//! [`REQUIRE_ENV`] (`RINGCAP_REQUIRE_PRIVILEGED_TESTS`) set to `1` (any value but
//! empty or `0`), as `.ci/run` does, it panics with the reason instead, so a CI
//! run that silently tested less than it claims fails.

use std::ffi::OsStr;
use std::fmt::Display;

/// The environment variable that turns every skip into a failure.
pub const REQUIRE_ENV: &str = "RINGCAP_REQUIRE_PRIVILEGED_TESTS";

/// What a test that cannot run should do, given the value of [`REQUIRE_ENV`]
/// (`None` when unset) and why it cannot run: `Ok(line to print)` to skip, or
/// `Err(panic message)` to fail.
pub fn skip_outcome(require: Option<&OsStr>, reason: &str) -> Result<String, String> {
    match require {
        Some(v) if !v.is_empty() && v != "0" => Err(format!(
            "this test would skip, but {REQUIRE_ENV}={} requires it to run: {reason}",
            v.to_string_lossy()
        )),
        _ => Ok(format!("SKIP: {reason}")),
    }
}

/// Skips the calling test (prints `SKIP: <reason>`; the caller then returns), or
/// panics with the reason when [`REQUIRE_ENV`] requires every test to run.
#[track_caller]
pub fn skip(reason: impl Display) {
    let reason = reason.to_string();
    match skip_outcome(std::env::var_os(REQUIRE_ENV).as_deref(), &reason) {
        Ok(line) => println!("{line}"),
        Err(msg) => panic!("{msg}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_unless_required() {
        for unset in [None, Some(""), Some("0")] {
            assert_eq!(
                skip_outcome(unset.map(OsStr::new), "not root"),
                Ok("SKIP: not root".to_string()),
                "{unset:?}"
            );
        }
    }

    #[test]
    fn fails_with_the_reason_when_required() {
        for set in ["1", "yes"] {
            let e = skip_outcome(Some(OsStr::new(set)), "not root").unwrap_err();
            assert!(e.contains("not root"), "{e}");
            assert!(e.contains(&format!("{REQUIRE_ENV}={set}")), "{e}");
        }
    }
}
