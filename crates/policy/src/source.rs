//! The policy file's text and the readers of spanned TOML values that every
//! part of the policy uses (counts, sizes, rates, paths, interface names):
//! each error they give names the line of the value it refused. Kept apart
//! from policy.rs so that the parts of the policy parsed elsewhere (stores
//! and retrieval rights, flow rights) need not import the policy file's
//! module, which imports them.

use crate::error::PolicyError;
use crate::units;
use std::ops::Range;
use std::path::PathBuf;
use toml::{Spanned, Value};

/// The file's text, for turning spans into line numbers.
pub(crate) struct Source<'a>(pub(crate) &'a str);

impl Source<'_> {
    pub(crate) fn err(&self, span: Range<usize>, reason: impl Into<String>) -> PolicyError {
        PolicyError::at(self.0, span, reason)
    }

    pub(crate) fn path(
        &self,
        v: &Option<Spanned<String>>,
        key: &str,
    ) -> Result<Option<PathBuf>, PolicyError> {
        let Some(v) = v else { return Ok(None) };
        let p = PathBuf::from(v.get_ref());
        if !p.is_absolute() {
            return Err(self.err(v.span(), format!("{key}: must be an absolute path")));
        }
        Ok(Some(p))
    }

    /// A rate in bits per second: a number, or a string with k/M/G/T.
    pub(crate) fn bit_rate(&self, v: &Spanned<Value>, key: &str) -> Result<u64, PolicyError> {
        match v.get_ref() {
            Value::Integer(_) => self.count(v, key, 1),
            Value::String(s) => match units::parse_bit_rate(s) {
                Ok(n) if n >= 1 => Ok(n),
                Ok(_) => Err(self.err(v.span(), format!("{key}: must be at least 1"))),
                Err(e) => Err(self.err(v.span(), format!("{key}: {e}"))),
            },
            _ => Err(self.err(
                v.span(),
                format!("{key}: expected a number of bits/s or a string such as \"500M\""),
            )),
        }
    }

    /// A whole number from `min` up, for rates and counts.
    pub(crate) fn count(
        &self,
        v: &Spanned<Value>,
        key: &str,
        min: u64,
    ) -> Result<u64, PolicyError> {
        match v.get_ref() {
            Value::Integer(n) if *n >= 0 && *n as u64 >= min => Ok(*n as u64),
            _ => Err(self.err(
                v.span(),
                format!("{key}: expected a whole number from {min} up"),
            )),
        }
    }

    /// A size: a whole number of bytes or a string with a unit ("64M").
    pub(crate) fn size(&self, v: &Spanned<Value>, key: &str) -> Result<u64, PolicyError> {
        match v.get_ref() {
            Value::Integer(n) if *n >= 0 => Ok(*n as u64),
            Value::String(s) => {
                units::parse_size(s).map_err(|e| self.err(v.span(), format!("{key}: {e}")))
            }
            _ => Err(self.err(
                v.span(),
                format!("{key}: expected a size such as 512K, 64M or 10G, or a number of bytes"),
            )),
        }
    }
}

/// Linux's rule for interface names (`dev_valid_name`): 1 to 15 bytes, not
/// "." or "..", no '/', ':' or white space.
pub(crate) fn valid_interface_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace())
}
