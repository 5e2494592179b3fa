//! `ringcapd`: the capture daemon (see the crate docs and README).

use clap::Parser;
use ringcap_daemon::server::{self, Shared};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Shares capture devices with unprivileged local clients, each held to the
/// administrator's policy.
#[derive(Debug, Parser)]
#[command(name = "ringcapd", version)]
struct Args {
    /// The policy file (TOML).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/ringcapd/ringcapd.toml"
    )]
    config: PathBuf,
    /// Check the policy, print each grant as the daemon understands it, and exit
    /// (0 if it is valid, 2 with the line and reason if not).
    #[arg(long)]
    check: bool,
    /// Listen here instead of the policy's `socket`.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Serve every session's counters as Prometheus text on this loopback
    /// address (e.g. 127.0.0.1:9911).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<std::net::SocketAddr>,
    /// Started as root: once the socket is bound, become USER and keep only
    /// CAP_NET_RAW and CAP_NET_ADMIN (the systemd unit does this itself).
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// Close a connection that has no session after this many seconds
    /// without a request.
    #[arg(long, value_name = "SECONDS", default_value_t = server::IDLE_TIMEOUT.as_secs_f64())]
    idle_timeout: f64,
}

fn main() {
    let args = Args::parse();
    let (policy, key) = match ringcap_daemon::load_policy(&args.config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ringcapd: {e}");
            std::process::exit(2);
        }
    };
    if args.check {
        print!("{}", policy.describe());
        // What the daemon would refuse at its start, or at a client's
        // request, is said now (the unit runs --check before starting).
        if let Err(e) = ringcap_daemon::dump::check_dump_dir_only(&policy.dump_dir) {
            if serves_dumps(&policy) {
                eprintln!("ringcapd: not serving dumps: {e}");
                std::process::exit(2);
            }
            eprintln!("ringcapd: warning: {e} (no grant allows dumps, so none is written)");
        }
        for s in &policy.stores {
            if let Err(e) = ringcap_daemon::retrieve::check_store(&s.dir) {
                eprintln!(
                    "ringcapd: warning: line {}: {e}: retrievals from {} will be refused",
                    s.line, s.interface
                );
            }
        }
        return;
    }
    let path = args.socket.clone().unwrap_or_else(|| policy.socket.clone());
    let listener = match server::listen(&path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ringcapd: cannot listen on {}: {e}", path.display());
            std::process::exit(1);
        }
    };
    if let Some(user) = &args.user {
        if let Err(e) = ringcap_daemon::privilege::drop_to(user) {
            eprintln!("ringcapd: cannot drop privileges: {e}");
            let _ = std::fs::remove_file(&path);
            std::process::exit(1);
        }
        eprintln!(
            "ringcapd: running as {user} with {}",
            ringcap_daemon::privilege::effective().join(", ")
        );
    }
    // Checked as the user that will write there: a dump directory the
    // daemon cannot trust is refused now, with the reason, not at the
    // first dump.
    // ... and one it cannot write is refused too (a root-owned 0755
    // directory under --user: every dump failed at its start).
    if let Err(e) = usable_dump_dir(&policy.dump_dir) {
        if serves_dumps(&policy) {
            eprintln!("ringcapd: not serving dumps: {e}");
            let _ = std::fs::remove_file(&path);
            std::process::exit(2);
        }
        eprintln!("ringcapd: warning: {e} (no grant allows dumps, so none is written)");
    }
    let shared = Shared::new(policy, key);
    if !(args.idle_timeout.is_finite() && args.idle_timeout > 0.0) {
        eprintln!("ringcapd: --idle-timeout must be a positive number of seconds");
        let _ = std::fs::remove_file(&path);
        std::process::exit(2);
    }
    shared.idle_timeout_ms.store(
        (args.idle_timeout * 1000.0).min(u64::MAX as f64) as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    if let Some(addr) = args.metrics {
        if let Err(e) = ringcap_daemon::metrics::start(addr, shared.clone()) {
            eprintln!("ringcapd: {e}");
            let _ = std::fs::remove_file(&path);
            std::process::exit(2);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    let _ = signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone());
    {
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("ringcapd-accept".into())
            .spawn(move || server::serve(listener, s));
        if let Err(e) = spawned {
            eprintln!("ringcapd: cannot start: {e}");
            std::process::exit(1);
        }
    }
    eprintln!("ringcapd: listening on {}", path.display());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if hup.swap(false, Ordering::Relaxed) {
            match ringcap_daemon::load_policy(&args.config) {
                Ok((p, key)) => {
                    let (old, _) = shared.policy();
                    // The dump directory is checked as at the start: a
                    // reload cannot bring in one the daemon would refuse.
                    if let (true, Err(e)) = (serves_dumps(&p), usable_dump_dir(&p.dump_dir)) {
                        eprintln!(
                            "ringcapd: policy not reloaded, the old one stays: {}: not serving dumps: {e}",
                            args.config.display()
                        );
                        continue;
                    }
                    if p.socket != old.socket && args.socket.is_none() {
                        eprintln!(
                            "ringcapd: warning: the socket is still {} (a new `socket` takes a restart)",
                            path.display()
                        );
                    }
                    shared.replace_policy(p, key);
                    eprintln!("ringcapd: policy reloaded from {}", args.config.display());
                }
                Err(e) => eprintln!("ringcapd: policy not reloaded, the old one stays: {e}"),
            }
        }
    }
    shared.stopping.store(true, Ordering::Relaxed);
    let _ = std::fs::remove_file(&path);
    // Connections notice within a tick and end their sessions.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline
        && shared
            .sessions
            .lock()
            .map(|m| !m.is_empty())
            .unwrap_or(false)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("ringcapd: stopped");
}

/// True if some grant allows dumps (then an unusable `dump_dir` is refused,
/// else only warned of).
fn serves_dumps(p: &ringcap_policy::Policy) -> bool {
    p.grants.iter().any(|g| g.dump_quota > 0)
}

/// The start's and a reload's check of `dump_dir`, as the user that will
/// write there: trusted ([`ringcap_daemon::dump::check_dump_dir`]) and
/// writable (a root-owned 0755 directory under --user: every dump failed).
fn usable_dump_dir(dir: &std::path::Path) -> std::io::Result<()> {
    ringcap_daemon::dump::check_dump_dir(dir)?;
    use nix::unistd::{access, AccessFlags};
    access(dir, AccessFlags::W_OK | AccessFlags::X_OK).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "dump_dir {}: ringcapd's user cannot write there: {e}",
                dir.display()
            ),
        )
    })
}
