//! `ringcap run -- TOOL ARGS...`: runs an unmodified libpcap tool (tcpdump,
//! tshark, softflowd...) unprivileged, its live captures served by ringcapd
//! under the administrator's policy. It preloads `libringcap_pcap.so`
//! (crates/pcapshim), which answers libpcap's live-capture calls through
//! the daemon and leaves everything else to the system's libpcap; then it
//! replaces itself with the tool (exec). No capability, no setuid: the
//! tool gets nothing this process does not have, and the daemon decides
//! what it may see.
//!
//! The library is looked for in this order: `$RINGCAP_PCAP_LIB`; next to the
//! `ringcap` executable (a cargo build puts both in target/<profile>/); then
//! where an installation puts it: `../lib/ringcap/` relative to the
//! executable (`/usr/local/bin/ringcap` → `/usr/local/lib/ringcap/`),
//! `/usr/local/lib/ringcap/`, `/usr/lib/ringcap/`.

use crate::failure::Failure;
use clap::Args;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The library's file name.
pub const LIBRARY: &str = "libringcap_pcap.so";

/// `ringcap run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// The daemon's socket (--daemon=PATH; default $RINGCAP_DAEMON, else
    /// /run/ringcapd/ringcapd.sock); passed to the tool as $RINGCAP_DAEMON.
    #[arg(long, value_name = "PATH", require_equals = true)]
    pub daemon: Option<String>,
    /// Print the library's path and exit.
    #[arg(long)]
    pub print_library: bool,
    /// The tool and its arguments (after `--`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "TOOL"
    )]
    pub command: Vec<OsString>,
}

/// Where the library is (see the module's documentation).
pub fn library() -> Result<PathBuf, Failure> {
    if let Some(p) = std::env::var_os("RINGCAP_PCAP_LIB").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(Failure::usage(format!(
                "RINGCAP_PCAP_LIB={}: no such file",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().ok();
    let dir = exe.as_deref().and_then(Path::parent);
    let mut places: Vec<PathBuf> = Vec::new();
    if let Some(d) = dir {
        places.push(d.join(LIBRARY));
        places.push(d.join("../lib/ringcap").join(LIBRARY));
    }
    places.push(Path::new("/usr/local/lib/ringcap").join(LIBRARY));
    places.push(Path::new("/usr/lib/ringcap").join(LIBRARY));
    places
        .iter()
        .find(|p| p.is_file())
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .ok_or_else(|| {
            Failure::system(format!(
                "{LIBRARY} not found (looked in {}); build it with `cargo build -p \
                 ringcap-pcapshim` or set RINGCAP_PCAP_LIB",
                places
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// Runs the tool with the library preloaded; returns only on failure.
pub fn run(args: &RunArgs) -> Result<i32, Failure> {
    let lib = library()?;
    if args.print_library {
        println!("{}", lib.display());
        return Ok(0);
    }
    let Some((tool, rest)) = args.command.split_first() else {
        return Err(Failure::usage(
            "usage: ringcap run [--daemon=PATH] -- TOOL [ARGS...]",
        ));
    };
    // The library first; whatever the caller preloaded stays, after it.
    let mut preload = OsString::from(lib.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = std::process::Command::new(tool);
    cmd.args(rest).env("LD_PRELOAD", preload);
    if let Some(d) = &args.daemon {
        cmd.env("RINGCAP_DAEMON", d);
    }
    let e = cmd.exec();
    Err(Failure::system(format!(
        "cannot run {}: {e}",
        Path::new(tool).display()
    )))
}
