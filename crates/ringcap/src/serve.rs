//! `ringcap serve`, `ringcap serve-keys` and `ringcap query --sensor`: thin
//! wrappers over `ringcap-serve` (the retrieval service, its keys, and the
//! many-sensor client).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
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
    let (mut w, answer) = crate::answer::open(write)?;
    let renamed = answer.is_whole_file();
    let result =
        ringcap_serve::client::query_sensors(&sensors, tls, limits, filter, window, format, &mut w);
    let result = match result {
        Ok(m) => match w
            .flush()
            .map_err(|e| Failure::runtime(format!("writing the output: {e}")))
        {
            Ok(()) => {
                drop(w);
                answer.finish(true)?;
                Ok(m)
            }
            Err(f) => {
                drop(w);
                answer.finish(false)?;
                return Err(f);
            }
        },
        Err(f) => {
            drop(w);
            answer.finish(false)?;
            Err(f)
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
        // As a local query: the reader took what it wanted (`| head`).
        Err(f) if f.output_closed => Err(Failure::output_closed()),
        Err(f) => Err(Failure::runtime(match (write, renamed) {
            (Some(p), true) => format!("{}; {p} not written", f.message),
            _ => format!("{}; the output is not a whole answer", f.message),
        })),
    }
}
