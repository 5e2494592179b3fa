//! The Python interpreter of the test oracles that come from PyPI (e.g.
//! `yacryptopan`), installed by `scripts/setup` into a virtual environment
//! so Debian's system Python stays untouched.

use std::path::{Path, PathBuf};
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

/// The privacy transforms' oracle (`oracles/privacy_oracle.py`): tshark's
/// dissection and PyPI's yacryptopan judge a rewritten capture against its
/// original, sharing no code with ringcap.
pub struct PrivacyOracle {
    python: PathBuf,
}

impl PrivacyOracle {
    /// The oracle, or why it cannot run here (no tshark, no yacryptopan).
    pub fn find() -> Result<PrivacyOracle, String> {
        if !crate::netns::have_program("tshark") {
            return Err("tshark is not installed (scripts/setup installs it)".into());
        }
        Ok(PrivacyOracle {
            python: oracle_python("yacryptopan")?,
        })
    }

    /// Judges `rewritten` against `original` (the same packets, in order)
    /// for the fields `anonymize`d under `key` and the `mask`ed ones
    /// (comma-separated names); panics with the oracle's findings if any
    /// check fails, else returns its summary (counts of what it checked).
    pub fn judge(
        &self,
        original: &Path,
        rewritten: &Path,
        key: &Path,
        anonymize: &str,
        mask: &str,
    ) -> serde_json::Value {
        let out = Command::new(&self.python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/oracles/privacy_oracle.py"
            ))
            .arg(original)
            .arg(rewritten)
            .arg("--key")
            .arg(key)
            .args(["--anonymize", anonymize, "--mask", mask])
            .output()
            .expect("run the privacy oracle");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "privacy oracle: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("privacy oracle summary {stdout:?}: {e}"))
    }
}
