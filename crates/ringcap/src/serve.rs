//! `ringcap serve`, `ringcap serve-keys` and `ringcap query --sensor`: thin
//! wrappers over `ringcap-serve` (the retrieval service, its keys, and the
//! many-sensor client).

use std::io::{self, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use ringcap_index::{query::Window, OutFormat};
use ringcap_serve::server::{Limits, Service};

use crate::failure::Failure;
use crate::privileges;

/// `ringcap serve`.
#[derive(Debug, Args)]
#[command(after_help = "\
Answers POST /query (stenographer's query language: stenoread and stenocurl work
unchanged, given the `config` that `ringcap serve-keys` writes) and
POST /tcpdump?after=T&before=T (a tcpdump filter) with a pcap stream of the
matching packets of the files in DIR, in time order. A client certificate signed
by the CA of --certs is required.

Example:
  ringcap serve-keys --certs /etc/ringcap/certs --host sensor1.example
  ringcap serve -d /srv/pcap --certs /etc/ringcap/certs --listen 0.0.0.0:1234 -Z ringcap
  STENOGRAPHER_CONFIG=/etc/ringcap/certs/config stenoread 'host 198.18.0.1 and after 1h ago' -w out.pcap")]
pub struct ServeArgs {
    /// Directory of capture files to answer from (repeat for several).
    #[arg(short = 'd', long = "dir", value_name = "DIR", required = true)]
    pub dirs: Vec<PathBuf>,
    /// Directory of keys made by `ringcap serve-keys`.
    #[arg(long, value_name = "DIR")]
    pub certs: PathBuf,
    /// Address to listen on.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:1234")]
    pub listen: SocketAddr,
    /// Queries running at once (beyond: 503, try again).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub max_queries: usize,
    /// Bytes of one answer (beyond: 413 before anything is sent).
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 30)]
    pub max_bytes: u64,
    /// Seconds one query may take (beyond: its stream is cut).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub max_time: u64,
    /// Become USER once the address is bound and the keys are read: the
    /// filters clients send are then parsed (by libpcap) and the files read
    /// without root. USER must be able to read the directories and files.
    #[arg(short = 'Z', long = "user", value_name = "USER")]
    pub user: Option<String>,
}

/// `ringcap serve-keys`.
#[derive(Debug, Args)]
pub struct ServeKeysArgs {
    /// Directory for the keys (created; existing keys are never overwritten).
    #[arg(long, value_name = "DIR")]
    pub certs: PathBuf,
    /// The server's name or address, as clients reach it.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port written into the stenographer-style `config`.
    #[arg(long, default_value_t = 1234)]
    pub port: u16,
    /// Only issue another client certificate, NAME_cert.pem and NAME_key.pem.
    #[arg(long, value_name = "NAME", conflicts_with = "sensor")]
    pub client: Option<String>,
    /// Only issue a server certificate for another sensor, named NAME (as
    /// clients dial it), into --out: copy that directory to the sensor and
    /// run `ringcap serve --certs` on it (it holds no CA key).
    #[arg(long, value_name = "NAME", requires = "out")]
    pub sensor: Option<String>,
    /// With --sensor: the directory for that sensor's keys.
    #[arg(long, value_name = "DIR", requires = "sensor")]
    pub out: Option<PathBuf>,
}

/// `ringcap serve-keys`.
pub fn serve_keys(args: &ServeKeysArgs) -> Result<i32, Failure> {
    match (&args.client, &args.sensor, &args.out) {
        (Some(n), _, _) => {
            ringcap_serve::tls::add_client(&args.certs, n).map_err(Failure::usage)?
        }
        (None, Some(name), Some(out)) => {
            ringcap_serve::tls::add_sensor(&args.certs, name, out).map_err(Failure::usage)?;
            println!("keys of sensor {name} in {}", out.display());
            return Ok(0);
        }
        _ => ringcap_serve::tls::make_keys(&args.certs, &args.host, args.port)
            .map_err(Failure::usage)?,
    }
    println!("keys in {}", args.certs.display());
    Ok(0)
}

/// `ringcap serve`: runs until killed.
pub fn serve(args: &ServeArgs) -> Result<i32, Failure> {
    for d in &args.dirs {
        if !d.is_dir() {
            return Err(Failure::usage(format!("{}: not a directory", d.display())));
        }
    }
    if args.max_queries == 0 {
        return Err(Failure::usage("--max-queries: at least 1"));
    }
    let tls = ringcap_serve::tls::server_config(&args.certs).map_err(Failure::usage)?;
    let svc = Service {
        dirs: args.dirs.clone(),
        limits: Limits {
            queries: args.max_queries,
            bytes: args.max_bytes,
            time: Duration::from_secs(args.max_time),
            ..Limits::default()
        },
        log: Arc::new(|m| eprintln!("ringcap serve: {m}")),
    };
    let user = match &args.user {
        Some(u) => Some(privileges::lookup(u).map_err(Failure::usage)?),
        None => None,
    };
    let dirs = args.dirs.clone();
    ringcap_serve::run(args.listen, tls, svc, move |a| {
        match user {
            Some(ids) => {
                privileges::drop_to(ids)?;
                // Said now rather than as every query's failure.
                for d in &dirs {
                    std::fs::read_dir(d).map_err(|e| {
                        format!("{}: not readable as uid {}: {e}", d.display(), ids.uid)
                    })?;
                }
            }
            None if nix::unistd::geteuid().is_root() => eprintln!(
                "ringcap serve: running as root: clients' filters are parsed by libpcap in \
                 this process; -Z USER serves as an unprivileged user"
            ),
            None => {}
        }
        eprintln!("ringcap serve: listening on {a}");
        Ok(())
    })
    .map_err(Failure::runtime)?;
    Ok(0)
}

/// `ringcap query --sensor URL...`: the query goes to the sensors, their
/// answers are merged by time. A file given to -w is written under a
/// hidden name beside it and renamed when the merge is whole: a failed
/// query leaves no file that looks like an answer (on standard output, the
/// stream just ends, and the exit status says it failed).
#[allow(clippy::too_many_arguments)]
pub fn query_sensors(
    sensors: &[String],
    certs: Option<&PathBuf>,
    client: &str,
    limits: ringcap_serve::client::Limits,
    filter: &str,
    window: Window,
    format: OutFormat,
    write: Option<&str>,
) -> Result<i32, Failure> {
    let certs = certs.ok_or_else(|| {
        Failure::usage("--sensor needs --certs DIR (the keys `ringcap serve-keys` made)")
    })?;
    let sensors = sensors
        .iter()
        .map(|s| ringcap_serve::client::parse_sensor(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::usage)?;
    let tls = ringcap_serve::tls::client_config(certs, client).map_err(Failure::usage)?;
    let run = |w: &mut dyn Write| {
        ringcap_serve::client::query_sensors(&sensors, tls, limits, filter, window, format, w)
    };
    // Whether -w FILE is written under a hidden name and renamed.
    let mut renamed = false;
    let result = match write {
        Some("-") | None => {
            if write.is_none() && io::stdout().is_terminal() {
                return Err(Failure::usage(
                    "query: standard output is a terminal; give -w FILE (or -w - to force)",
                ));
            }
            run(&mut io::BufWriter::with_capacity(
                1 << 20,
                io::stdout().lock(),
            ))
        }
        // A FIFO or a device (`-w /dev/stdout`) is written as it is.
        Some(path) if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Failure::usage(format!("{path}: {e}")))?;
            run(&mut io::BufWriter::with_capacity(1 << 20, f))
        }
        Some(path) => {
            renamed = true;
            let path = Path::new(path);
            let tmp = hidden_beside(path);
            // Made new (O_EXCL: a name planted in a shared directory, a
            // symbolic link to elsewhere, is refused, not written through).
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| Failure::usage(format!("{}: {e}", tmp.display())))?;
            // A signal that ends the query takes the hidden file with it.
            let _cleanup = RemoveOnSignal::start(&tmp);
            let mut w = io::BufWriter::with_capacity(1 << 20, f);
            let r = run(&mut w);
            let kept = r.is_ok()
                && w.into_inner()
                    .map_err(|e| e.into_error())
                    .and_then(|f| f.sync_all())
                    .and_then(|()| std::fs::rename(&tmp, path))
                    .map_err(|e| eprintln!("ringcap: {}: {e}", path.display()))
                    .is_ok();
            if !kept {
                let _ = std::fs::remove_file(&tmp);
                if r.is_ok() {
                    return Err(Failure::runtime(format!("{}: not written", path.display())));
                }
            }
            r
        }
    };
    let (merged, waited) = match &result {
        Ok(m) => (m, None),
        Err(f) => (&f.merged, Some(&f.merged.waited)),
    };
    for (i, s) in sensors.iter().enumerate() {
        let n = merged.per_sensor[i];
        if let Some(why) = &merged.failed[i] {
            eprintln!("ringcap: {why}; left out after {n} packets (its later packets are missing)");
            continue;
        }
        match waited.and_then(|w| w.get(i)) {
            Some(w) => eprintln!(
                "ringcap: sensor {} ({}): {n} packets before the failure; waited {w} s for its data",
                s.name, s.url
            ),
            None => eprintln!("ringcap: sensor {} ({}): {n} packets", s.name, s.url),
        }
    }
    match result {
        Ok(_) => Ok(0),
        Err(f) => Err(Failure::runtime(match (write, renamed) {
            (Some(p), true) => format!("{}; {p} not written", f.message),
            _ => format!("{}; the output is not a whole answer", f.message),
        })),
    }
}

/// A hidden name beside `path` for writing it whole before it appears (not
/// one another user could guess and take first in a shared directory).
fn hidden_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "query".into(), |n| n.to_string_lossy());
    let mut r = [0u8; 8];
    let salt = match std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut r)
    }) {
        Ok(()) => u64::from_ne_bytes(r),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    path.with_file_name(format!(
        ".{name}.{}-{salt:016x}.incomplete",
        std::process::id()
    ))
}

/// While alive, SIGINT, SIGTERM or SIGHUP remove `path` and end the
/// process (status 128 + the signal), as the signal would have.
struct RemoveOnSignal(Option<signal_hook::iterator::Handle>);

impl RemoveOnSignal {
    fn start(path: &Path) -> RemoveOnSignal {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return RemoveOnSignal(None);
        };
        let handle = signals.handle();
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let _ = std::fs::remove_file(&path);
                std::process::exit(128 + sig);
            }
        });
        RemoveOnSignal(Some(handle))
    }
}

impl Drop for RemoveOnSignal {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.close();
        }
    }
}
