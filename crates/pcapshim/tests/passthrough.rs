//! Without a daemon or privileges: the preloaded library leaves everything
//! that is not live capture to the system's libpcap — tcpdump reading a file,
//! filtering it and writing another prints and writes exactly what it does
//! without the library — and takes every live open (which, with no daemon
//! to ask, fails with a message saying so, not with libpcap's permission
//! error).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// target/<profile>/libringcap_pcap.so (built with this package's tests).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let lib = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join("libringcap_pcap.so");
    assert!(lib.is_file(), "{} is missing", lib.display());
    lib
}

fn have_tcpdump() -> bool {
    Command::new("tcpdump").arg("--version").output().is_ok()
}

/// A pcap file (microseconds, Ethernet) of a few UDP and ARP frames.
fn sample(path: &Path) {
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        if v == 0x0004_0002 {
            b.extend_from_slice(&2u16.to_le_bytes());
            b.extend_from_slice(&4u16.to_le_bytes());
        } else {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    for i in 0u8..20 {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        if i % 4 == 3 {
            // ARP request
            f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
            f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 198, 18, 0, 1]);
            f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 198, 18, 0, 2]);
        } else {
            let payload = 8 + u16::from(i);
            let total = 20 + 8 + payload;
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0, i, 0, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
            f.extend_from_slice(&(5000 + u16::from(i)).to_be_bytes());
            f.extend_from_slice(&53u16.to_be_bytes());
            f.extend_from_slice(&(8 + payload).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
            f.extend(std::iter::repeat_n(i, usize::from(payload)));
        }
        let len = f.len() as u32;
        for w in [1_700_000_000 + u32::from(i), 1000 * u32::from(i), len, len] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&f);
    }
    std::fs::write(path, b).expect("write sample");
}

fn tcpdump(preload: bool, args: &[&str]) -> Output {
    let mut c = Command::new("tcpdump");
    c.args(args)
        .env("RINGCAP_DAEMON", "/nonexistent/ringcapd.sock");
    if preload {
        c.env("LD_PRELOAD", library());
    }
    c.output().expect("run tcpdump")
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("pcapshim-passthrough-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn files_filters_and_dumpers_are_libpcaps() {
    if !have_tcpdump() {
        println!("SKIP: tcpdump is not installed");
        return;
    }
    let d = dir();
    let input = d.join("in.pcap");
    sample(&input);
    let i = input.to_str().expect("path");
    let plain = tcpdump(false, &["-nn", "-v", "-r", i, "udp"]);
    let shim = tcpdump(true, &["-nn", "-v", "-r", i, "udp"]);
    assert!(plain.status.success(), "{plain:?}");
    assert_eq!(String::from_utf8_lossy(&plain.stdout).lines().count(), 30);
    assert_eq!(shim.stdout, plain.stdout, "printed lines");
    assert_eq!(shim.status.code(), plain.status.code());
    let (a, b) = (d.join("a.pcap"), d.join("b.pcap"));
    let out_a = tcpdump(false, &["-r", i, "-w", a.to_str().expect("p"), "arp"]);
    let out_b = tcpdump(true, &["-r", i, "-w", b.to_str().expect("p"), "arp"]);
    assert!(
        out_a.status.success() && out_b.status.success(),
        "{out_b:?}"
    );
    let (fa, fb) = (std::fs::read(&a).expect("a"), std::fs::read(&b).expect("b"));
    assert_eq!(fa.len(), 24 + 5 * (16 + 42), "five ARP frames");
    assert_eq!(fa, fb, "files written");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn live_opens_go_to_ringcapd() {
    if !have_tcpdump() {
        println!("SKIP: tcpdump is not installed");
        return;
    }
    let out = tcpdump(true, &["-i", "lo", "-c", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("tcpdump: lo: cannot reach ringcapd at /nonexistent/ringcapd.sock"),
        "{err}"
    );
}
