//! [`ChildGuard`]: a spawned child that is killed (SIGTERM, then SIGKILL
//! after a timeout) and reaped on drop, so a failing test leaves no process
//! behind. Used by the capture helpers and by the testbed's servers.

use std::io::{self, Read};
use std::ops::{Deref, DerefMut};
use std::process::{Child, ExitStatus, Output};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default time [`ChildGuard`] waits after SIGTERM before SIGKILL.
pub const DEFAULT_TERM_TIMEOUT: Duration = Duration::from_secs(5);

/// Owns a spawned child and kills it on drop: SIGTERM, then SIGKILL if it has not
/// exited within the term timeout; always reaped. Derefs to [`Child`].
///
/// A child spawned with `ip netns exec NS prog` *is* `prog` (ip execs it), so the
/// signals reach the program itself.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
    term_timeout: Duration,
}

impl ChildGuard {
    /// Guards `child` with [`DEFAULT_TERM_TIMEOUT`].
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard {
            child: Some(child),
            term_timeout: DEFAULT_TERM_TIMEOUT,
        }
    }

    /// Spawns `cmd` and guards the child.
    pub fn spawn(cmd: &mut std::process::Command) -> io::Result<ChildGuard> {
        Ok(ChildGuard::new(cmd.spawn()?))
    }

    /// Sets how long to wait after SIGTERM before SIGKILL.
    pub fn with_term_timeout(mut self, t: Duration) -> ChildGuard {
        self.term_timeout = t;
        self
    }

    fn c(&mut self) -> &mut Child {
        self.child.as_mut().expect("child present until drop")
    }

    /// Sends `signal` (e.g. `libc::SIGINT`) to the child if it is still running.
    pub fn signal(&mut self, signal: i32) -> io::Result<()> {
        if self.c().try_wait()?.is_some() {
            return Ok(());
        }
        let pid = self.c().id() as libc::pid_t;
        // SAFETY: kill(2) on our own un-reaped child's pid.
        if unsafe { libc::kill(pid, signal) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Waits up to `limit` for the child to exit; `None` if it is still running.
    pub fn wait_timeout(&mut self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.c().try_wait()? {
                return Ok(Some(s));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, wait up to the term timeout, then SIGKILL; returns the exit status.
    pub fn terminate(&mut self) -> io::Result<ExitStatus> {
        self.signal(libc::SIGTERM)?;
        if let Some(s) = self.wait_timeout(self.term_timeout)? {
            return Ok(s);
        }
        let _ = self.c().kill();
        self.c().wait()
    }

    /// Collects stdout and stderr (both must be piped, or are empty) until the child
    /// exits, killing it (SIGTERM then SIGKILL) if that takes longer than `limit`.
    pub fn wait_output(mut self, limit: Duration) -> io::Result<Output> {
        let out_t = self.c().stdout.take().map(drain_thread);
        let err_t = self.c().stderr.take().map(drain_thread);
        let status = match self.wait_timeout(limit)? {
            Some(s) => s,
            None => {
                let _ = self.terminate();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("child did not finish within {limit:?}; killed"),
                ));
            }
        };
        let join = |t: Option<JoinHandle<Vec<u8>>>| t.map(|t| t.join().unwrap_or_default());
        Ok(Output {
            status,
            stdout: join(out_t).unwrap_or_default(),
            stderr: join(err_t).unwrap_or_default(),
        })
    }

    /// Gives the child back without killing it.
    pub fn into_inner(mut self) -> Child {
        self.child.take().expect("child present until drop")
    }
}

fn drain_thread<R: Read + Send + 'static>(mut r: R) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

impl Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.child.as_ref().expect("child present until drop")
    }
}

impl DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        self.c()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.terminate();
        }
    }
}
