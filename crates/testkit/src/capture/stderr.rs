//! A child's stderr ([`wait_for_stderr_line`], [`StderrLog`]): waiting for
//! its "ready" line, then collecting the rest in a background thread.
//! Apart from the tools that use it (tcpdump, ringcap) because it is the
//! one part with threads and channels.

use std::io::{self, BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Handle to a child's stderr as collected by a background thread (see
/// [`wait_for_stderr_line`]). Cloneable; all clones see the same text.
#[derive(Debug, Clone)]
pub struct StderrLog {
    text: Arc<Mutex<String>>,
    done: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl StderrLog {
    /// Everything read so far (complete lines, each ending in `\n`).
    pub fn text(&self) -> String {
        self.text.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// True when the collected text contains `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.text().contains(needle)
    }

    /// Waits up to `limit` for `found` to find what it looks for in the
    /// text read so far (lines arrive one by one from the background
    /// thread, so a message of many lines may be half read for a moment).
    pub fn wait_for<T>(&self, limit: Duration, found: impl Fn(&str) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = found(&self.text()) {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `limit` for stderr to reach end of file (normally after the child
    /// exited), then returns the whole text; returns what there is on timeout.
    pub fn wait_eof(&self, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let finished = {
                let g = self.done.lock().unwrap_or_else(|e| e.into_inner());
                !matches!(g.as_ref(), Some(h) if !h.is_finished())
            };
            if finished || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut g = self.done.lock().unwrap_or_else(|e| e.into_inner());
        if g.as_ref().is_some_and(|h| h.is_finished()) {
            if let Some(h) = g.take() {
                let _ = h.join();
            }
        }
        drop(g);
        self.text()
    }
}

/// Reads the child's stderr (which must be `Stdio::piped()`) until a line starts
/// with `prefix`, and returns that line (without the newline) and a [`StderrLog`]
/// that keeps collecting the rest of stderr in a background thread (the matching
/// line and the ones before it are in it too).
///
/// Errors with `TimedOut` after `timeout`, or `UnexpectedEof` if stderr closes
/// first (the child died); the message includes everything read.
pub fn wait_for_stderr_line(
    child: &mut Child,
    prefix: &str,
    timeout: Duration,
) -> io::Result<(String, StderrLog)> {
    wait_for_stderr_match(child, |l| l.starts_with(prefix), timeout)
}

/// Like [`wait_for_stderr_line`] with any predicate on the line.
pub fn wait_for_stderr_match(
    child: &mut Child,
    mut pred: impl FnMut(&str) -> bool,
    timeout: Duration,
) -> io::Result<(String, StderrLog)> {
    let stderr = child.stderr.take().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "child stderr not piped (or already taken)",
        )
    })?;
    let text = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel::<String>();
    let t2 = Arc::clone(&text);
    let handle = std::thread::spawn(move || {
        let mut r = BufReader::new(stderr);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    let line = line.trim_end_matches(['\n', '\r']).to_string();
                    {
                        let mut t = t2.lock().unwrap_or_else(|e| e.into_inner());
                        t.push_str(&line);
                        t.push('\n');
                    }
                    // The receiver may be gone; keep collecting anyway.
                    let _ = tx.send(line);
                }
            }
        }
    });
    let log = StderrLog {
        text,
        done: Arc::new(Mutex::new(Some(handle))),
    };
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if pred(&line) {
                    return Ok((line, log));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no matching stderr line within {timeout:?}; stderr so far:\n{}",
                        log.text()
                    ),
                ))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "stderr closed before a matching line; stderr:\n{}",
                        log.text()
                    ),
                ))
            }
        }
    }
}
