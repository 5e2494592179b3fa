//! Errors in a policy file, each at a line and column of that file, so that
//! `ringcapd --check` can point at the mistake.

use std::fmt;
use std::ops::Range;

/// Why a policy file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// 1-based line of the offending key or value; 0 when the error is about
    /// the file as a whole (it cannot be read).
    pub line: usize,
    /// 1-based column (in characters) on that line; 0 with `line` 0.
    pub column: usize,
    /// What is wrong, starting with the key ("max_snaplen: expected …").
    pub reason: String,
}

impl PolicyError {
    /// An error at byte range `span` of `text`.
    pub(crate) fn at(text: &str, span: Range<usize>, reason: impl Into<String>) -> PolicyError {
        let start = span.start.min(text.len());
        // toml's spans are byte offsets on char boundaries; be safe anyway.
        let before = text.get(..start).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        PolicyError {
            line,
            column: before[line_start..].chars().count() + 1,
            reason: reason.into(),
        }
    }

    /// An error about the whole file.
    pub(crate) fn file(reason: impl Into<String>) -> PolicyError {
        PolicyError {
            line: 0,
            column: 0,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.reason)
        } else {
            write!(
                f,
                "line {}, column {}: {}",
                self.line, self.column, self.reason
            )
        }
    }
}

impl std::error::Error for PolicyError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based() {
        let text = "a = 1\nbé = \"x\"\n";
        let e = PolicyError::at(text, 12..15, "bad");
        assert_eq!((e.line, e.column), (2, 6));
        assert_eq!(e.to_string(), "line 2, column 6: bad");
        assert_eq!(PolicyError::at(text, 0..1, "x").line, 1);
        assert_eq!(PolicyError::file("cannot read").to_string(), "cannot read");
    }
}
