//! Helpers of the libringcap_pcap.so tests (pcapshim.rs, pcapshim_tools.rs,
//! pcapshim_scapy.rs).

// Each test binary uses a part of these.
#![allow(dead_code)]

use crate::common::*;
use ringcap_testkit::{TempDir, Testbed};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The grant's framework filter in these tests.
pub const FRAMEWORK: &str = "not port 20001";
/// The grant's snap cap in these tests.
pub const CAP: u32 = 128;

/// libringcap_pcap.so next to the `ringcap` binary (where `ringcap run`
/// finds it), checked to be newer than its sources.
pub fn shim() -> PathBuf {
    let lib = ringcap_bin()
        .parent()
        .expect("target/<profile>")
        .join("libringcap_pcap.so");
    let meta = std::fs::metadata(&lib).unwrap_or_else(|_| {
        panic!(
            "{} is missing: run `cargo build -p ringcap-pcapshim` first",
            lib.display()
        )
    });
    if std::env::var_os("RINGCAP_ALLOW_STALE_BIN").is_some_and(|v| v == "1") {
        return lib;
    }
    let built = meta.modified().expect("mtime");
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for src in [
        "pcapshim/src",
        "pcapshim/src/calls",
        "client/src",
        "shm/src",
    ] {
        for e in std::fs::read_dir(crates.join(src))
            .expect("sources")
            .flatten()
        {
            let t = e.metadata().and_then(|m| m.modified()).expect("mtime");
            assert!(
                t <= built,
                "{} is older than {}: run `cargo build -p ringcap-pcapshim`",
                lib.display(),
                e.path().display()
            );
        }
    }
    lib
}

/// `ringcap run --daemon=SOCKET -- ARGS...` as nobody (no capabilities).
pub fn run_as_nobody(tb: &Testbed, d: &Daemon, args: &[&str]) -> Command {
    let mut c = as_user(tb, NOBODY, &ringcap_bin());
    c.arg("run")
        .arg(format!("--daemon={}", d.socket.display()))
        .arg("--");
    c.args(args);
    c
}

/// Waits up to 10 s until ringcapd holds no session.
pub fn assert_idle(tb: &Testbed, d: &Daemon, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let sessions = stats_json(tb, d, None);
        if sessions.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: ringcapd still holds sessions: {sessions:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Compiles `crates/pcapshim/tests/NAME.c` against libpcap into `dir`.
pub fn compile_c(dir: &TempDir, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write C");
    let exe = dir.join(name);
    let (st, log) = run_limited(
        Command::new("cc")
            .arg("-O1")
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .arg("-lpcap"),
        Duration::from_secs(60),
    );
    assert!(st.success(), "cc {name}.c: {log}");
    exe
}

/// The lines a sender printed for the frames of `binding_inject_frames`
/// ("I sent" / "I refused MESSAGE") against what the peer captured: every
/// tenth frame (port 40000) refused by the filter rule and absent, every
/// other frame sent and seen (by its IP ID).
pub fn check_sent_lines(stdout: &str, n: u16, peer: &[ringcap_testkit::CapturedPacket]) {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), usize::from(n), "{stdout}");
    let arrived: std::collections::BTreeSet<u16> = peer
        .iter()
        .filter(|p| p.data.len() >= 42 && p.data[23] == 17)
        .map(|p| u16::from_be_bytes([p.data[18], p.data[19]]))
        .collect();
    for (i, line) in lines.iter().enumerate() {
        let i = i as u16;
        if i % 10 == 9 {
            assert!(
                line.starts_with(&format!("{i} refused")) && line.contains("filter"),
                "frame {i}: {line}"
            );
            assert!(!arrived.contains(&i), "refused frame {i} arrived");
        } else {
            assert_eq!(*line, format!("{i} sent"), "frame {i}");
            assert!(arrived.contains(&i), "frame {i} never arrived");
        }
    }
    assert_eq!(arrived.len(), usize::from(n - n / 10), "{arrived:?}");
}
