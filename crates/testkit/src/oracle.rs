//! The Python interpreter of the test oracles that come from PyPI (e.g.
//! `yacryptopan`), installed by `scripts/setup` into a virtual environment
//! so Debian's system Python stays untouched.

use std::path::PathBuf;
use std::process::Command;

/// The oracle interpreter: `$RINGCAP_ORACLE_PYTHON`, or the workspace's
/// `target/oracle-venv/bin/python`; `Err(reason)` when it is missing or
/// cannot import `module`.
pub fn oracle_python(module: &str) -> Result<PathBuf, String> {
    let python = match std::env::var_os("RINGCAP_ORACLE_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/oracle-venv/bin/python")
        }
    };
    if !python.exists() {
        return Err(format!(
            "no oracle Python at {} (scripts/setup makes it)",
            python.display()
        ));
    }
    let ok = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(python)
    } else {
        Err(format!(
            "{} cannot import {module} (scripts/setup installs it)",
            python.display()
        ))
    }
}
