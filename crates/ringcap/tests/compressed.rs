//! `--format compressed` on real kernel traffic over veth (issue 10): a TCP
//! bulk transfer (kernel TCP with timestamps and SACK), a constant-rate
//! stream of 8000-byte UDP datagrams fragmented at the 1500 MTU, and a
//! many-flow mix, captured with `-s headers` at micro- and nanosecond
//! precision. Each capture is compressed offline and decoded back: the
//! pcap must be identical (`cmp`), and the sizes are printed next to
//! `zstd -19` and `xz -9` of the same headers-only pcap. Traffic comes from
//! a small Python script (scripts/setup installs python3) run in the
//! testbed's namespaces, bounded in bytes and time.

mod common;

use common::*;
use ringcap_testkit::netns::have_program;
use ringcap_testkit::{skip, skip_unless_netns, Testbed};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const TRAFFIC: &str = r#"
import socket, sys, time, threading
mode, role, ip = sys.argv[1], sys.argv[2], sys.argv[3]
def tcp_server(port, conns):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port)); s.listen(64); s.settimeout(20)
    for _ in range(conns):
        c, _ = s.accept(); c.settimeout(20)
        while c.recv(1 << 16): pass
        c.close()
def udp_sink(ports):
    socks = []
    for p in ports:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((ip, p)); socks.append(u)
    time.sleep(15)
if role == "server":
    if mode == "tcp": tcp_server(5201, 1)
    elif mode == "udp": udp_sink([9000])
    else:
        threading.Thread(target=udp_sink, args=(range(7000, 7100),), daemon=True).start()
        tcp_server(5202, 20)
    sys.exit(0)
def connect(port):
    # The server may still be starting on a loaded machine: retry (bounded).
    for _ in range(100):
        try: return socket.create_connection((ip, port))
        except ConnectionRefusedError: time.sleep(0.1)
    return socket.create_connection((ip, port))
if mode == "tcp":
    c = connect(5201); buf = b"x" * 65536
    for _ in range(200): c.sendall(buf)
    c.close()
elif mode == "udp":
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); t = time.time()
    for i in range(600):
        u.sendto(b"d" * 8000, (ip, 9000)); t += 0.001
        time.sleep(max(0, t - time.time()))
else:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for r in range(20):
        c = connect(5202)
        for i in range(100):
            u.sendto(b"q" * (20 + i % 50), (ip, 7000 + (i * 7 + r) % 100))
            if i % 10 == 0: c.sendall(b"r" * 3000)
            time.sleep(0.0005)
        c.close()
"#;

/// Runs one traffic `mode` between the namespaces while ringcap captures
/// headers to `out` at `precision`.
fn capture(tb: &Testbed, dir: &TempDir, mode: &str, precision: &str, out: &str) {
    let script = dir.join("traffic.py");
    std::fs::write(&script, TRAFFIC).unwrap();
    let ip = tb.capture_ip.to_string();
    let run = start(
        tb,
        &["-s", "headers", "--tstamp-precision", precision, "-w", out],
    );
    let mut server = ringcap_testkit::capture::ChildGuard::spawn(
        tb.in_capture_ns("timeout")
            .args(["30", "python3"])
            .arg(&script)
            .args([mode, "server", &ip])
            .stdout(Stdio::null()),
    )
    .expect("server");
    std::thread::sleep(Duration::from_millis(400));
    let client = tb
        .in_peer_ns("timeout")
        .args(["30", "python3"])
        .arg(&script)
        .args([mode, "client", &ip])
        .status()
        .expect("client");
    assert!(client.success(), "{mode} client failed: {client}");
    if mode != "udp" {
        let _ = server.wait_timeout(Duration::from_secs(20));
    }
    drop(server);
    let fin = run.stop();
    fin.assert_ok(mode);
}

fn ringcap(args: &[&str]) {
    let out = Command::new(bin())
        .arg("capture")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ringcap capture {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn packets(pcap: &Path) -> u64 {
    ringcap_testkit::capture::read_pcap(pcap).unwrap().len() as u64
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

/// Bytes of `tool -N -c` over `file`, if the tool is installed.
fn external(tool: &str, level: &str, file: &Path) -> Option<u64> {
    if !have_program(tool) {
        return None;
    }
    let out = Command::new(tool)
        .args([level, "-c"])
        .arg(file)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout.len() as u64)
}

/// Compresses `pcap` offline (with `extra` options), decodes it back, checks
/// the round trip, prints and returns bytes per packet; with `beat`, checks
/// it is smaller than zstd -19 and xz -9 of the same pcap.
fn round_trip(
    dir: &TempDir,
    name: &str,
    pcap: &Path,
    precision: &str,
    extra: &[&str],
    beat: bool,
) -> f64 {
    let p = pcap.to_str().unwrap();
    let base = ["-s", "headers", "--tstamp-precision", precision];
    // The reference: the same options to pcap (masking is then in both).
    let want = dir.file(&format!("{name}.want.pcap"));
    ringcap(&[&["-r", p, "-w", &want][..], &base, extra].concat());
    let rcz = dir.file(&format!("{name}.rcz"));
    ringcap(
        &[
            &["-r", p, "--format", "compressed", "-w", &rcz][..],
            &base,
            extra,
        ]
        .concat(),
    );
    let back = dir.file(&format!("{name}.back.pcap"));
    ringcap(&[&["-r", &rcz, "-w", &back][..], &base].concat());
    let same = Command::new("cmp").args([&want, &back]).status().unwrap();
    assert!(
        same.success(),
        "{name}: decoded pcap differs from the direct one"
    );
    // RINGCAP_COMPRESSED_KEEP=DIR keeps the traces for study.
    if let Some(keep) = std::env::var_os("RINGCAP_COMPRESSED_KEEP") {
        let _ = std::fs::copy(&want, Path::new(&keep).join(format!("{name}.pcap")));
    }
    let n = packets(Path::new(&want));
    assert!(n > 100, "{name}: only {n} packets");
    let bpp = size(Path::new(&rcz)) as f64 / n as f64;
    let zstd = external("zstd", "-19", Path::new(&want)).map(|b| b as f64 / n as f64);
    let xz = external("xz", "-9", Path::new(&want)).map(|b| b as f64 / n as f64);
    println!(
        "{name}: {n} packets, pcap {:.1} B/packet, ringcap compressed {bpp:.2}, zstd -19 {}, xz -9 {}",
        size(Path::new(&want)) as f64 / n as f64,
        zstd.map_or("-".into(), |v| format!("{v:.2}")),
        xz.map_or("-".into(), |v| format!("{v:.2}")),
    );
    for (tool, v) in [("zstd -19", zstd), ("xz -9", xz)] {
        if let Some(v) = v.filter(|_| beat) {
            assert!(
                bpp < v,
                "{name}: {bpp:.2} B/packet, not smaller than {tool} ({v:.2})"
            );
        }
    }
    bpp
}

const MASK: &str = "ip.id,tcp.seq";

#[test]
fn compressed_round_trips_real_traffic_and_beats_zstd_and_xz() {
    skip_unless_netns!();
    if !have_program("python3") || !have_program("timeout") || !have_program("cmp") {
        return skip("python3, timeout and cmp are needed (scripts/setup installs python3)");
    }
    if !have_program("zstd") || !have_program("xz") {
        return skip("zstd and xz are the yardsticks (scripts/setup installs zstd and xz-utils)");
    }
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("compressed");
    // (mode, goal at us, goal at ns, masked goal at us): the issue's goals,
    // and loose bounds above what was measured for the mix. Format version
    // 2 measured (bench/README.md), B/packet at us / ns / us masked: UDP
    // 0.77 / 2.00 / 0.77, TCP 0.47 / 1.87 / 0.45, mix 5.05 / 6.35 / 4.55;
    // xz -9 of the same pcaps 3.66 / 4.63 / 2.11, 4.74 / 5.63 / 3.05,
    // 8.70 / 10.07 / 5.55. Every trace, masked or not, must be smaller
    // than zstd -19 and xz -9.
    for (mode, goal_us, goal_ns, goal_masked) in [
        ("udp", 5.0, 6.5, 3.0),
        ("tcp", 8.0, 10.0, 5.0),
        ("mix", 8.0, 10.0, 8.0),
    ] {
        for precision in ["micro", "nano"] {
            let pcap = dir.file(&format!("{mode}-{precision}.pcap"));
            capture(&tb, &dir, mode, precision, &pcap);
            let name = format!("{mode}-{precision}");
            let bpp = round_trip(&dir, &name, Path::new(&pcap), precision, &[], true);
            let goal = if precision == "micro" {
                goal_us
            } else {
                goal_ns
            };
            assert!(bpp <= goal, "{name}: {bpp:.2} B/packet, goal {goal}");
            if precision == "micro" {
                let masked = round_trip(
                    &dir,
                    &format!("{name}-masked"),
                    Path::new(&pcap),
                    precision,
                    &["--mask", MASK],
                    true,
                );
                assert!(
                    masked <= goal_masked,
                    "{name} masked: {masked:.2} B/packet, goal {goal_masked}"
                );
            }
        }
    }
}

#[test]
fn corrupt_compressed_input_exits_2_with_offset() {
    let dir = TempDir::new("compressed-corrupt");
    let frames: Vec<Vec<u8>> = (0..200u16)
        .map(|i| {
            let mut f = vec![0u8; 60];
            f[12] = 8;
            f[14] = 0x45;
            f[16..18].copy_from_slice(&46u16.to_be_bytes());
            f[18..20].copy_from_slice(&i.to_be_bytes());
            f[22] = 64;
            f[23] = 17;
            f[26..30].copy_from_slice(&[198, 18, 0, 1]);
            f[30..34].copy_from_slice(&[198, 18, 0, 2]);
            f
        })
        .collect();
    let pcap = dir.join("in.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &frames).unwrap();
    let rcz = dir.file("x.rcz");
    ringcap(&[
        "-r",
        pcap.to_str().unwrap(),
        "--format",
        "compressed",
        "-w",
        &rcz,
    ]);
    let good = std::fs::read(&rcz).unwrap();
    // A flipped byte inside the block, and a file cut short.
    let mut bad = good.clone();
    bad[good.len() - 10] ^= 0xff;
    for (name, bytes) in [
        ("flipped.rcz", bad),
        ("cut.rcz", good[..good.len() - 7].to_vec()),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let out = Command::new(bin())
            .args([
                "capture",
                "-r",
                p.to_str().unwrap(),
                "-w",
                &dir.file("o.pcap"),
                "--overwrite",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains("byte 20"), "{name}: no offset in: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

/// Rotation and crash repair as for pcap: `--rotate-packets` gives whole
/// compressed files that together hold every packet in order, and a file
/// cut mid-block (as a crash leaves it) is cut back by `ringcap repair` to
/// its last whole block, which reads.
#[test]
fn compressed_files_rotate_and_repair() {
    let dir = TempDir::new("compressed-rotate");
    let frames: Vec<Vec<u8>> = (0..5000u32)
        .map(|i| {
            let mut f = vec![0u8; 54];
            f[12] = 8;
            f[14] = 0x45;
            f[16..18].copy_from_slice(&40u16.to_be_bytes());
            f[18..20].copy_from_slice(&(i as u16).to_be_bytes());
            f[22] = 64;
            f[23] = 6;
            f[26..30].copy_from_slice(&[198, 18, 0, 1]);
            f[30..34].copy_from_slice(&[198, 18, (i % 7) as u8, 2]);
            f[38..42].copy_from_slice(&(i * 1448).to_be_bytes());
            f[46] = 5 << 4;
            f
        })
        .collect();
    let pcap = dir.join("in.pcap");
    ringcap_testkit::netns::write_pcap(&pcap, &frames).unwrap();
    let pcap = pcap.to_str().unwrap();
    let out = dir.join("series");
    let series = format!("{}/", out.display());
    ringcap(&[
        "-r",
        pcap,
        "--format",
        "compressed",
        "--rotate-packets",
        "1200",
        "-w",
        &series,
    ]);
    let mut files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "{files:?}");
    let mut total = 0;
    for f in &files {
        assert_eq!(f.extension().and_then(|e| e.to_str()), Some("rcz"), "{f:?}");
        let back = dir.file("back.pcap");
        ringcap(&["-r", f.to_str().unwrap(), "-w", &back, "--overwrite"]);
        total += packets(Path::new(&back));
    }
    assert_eq!(total, 5000);
    // A crash mid-write: the last file cut inside its block.
    let whole = dir.file("whole.rcz");
    ringcap(&["-r", pcap, "--format", "compressed", "-w", &whole]);
    let bytes = std::fs::read(&whole).unwrap();
    let cut = dir.join("cut.rcz");
    // Two files concatenated minus the header of the second: two blocks,
    // the second cut short.
    let mut two = bytes.clone();
    two.extend_from_slice(&bytes[20..bytes.len() - 100]);
    std::fs::write(&cut, &two).unwrap();
    let rep = Command::new(bin())
        .args(["repair", cut.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    assert_eq!(
        size(&cut),
        bytes.len() as u64,
        "cut back to the first block"
    );
    let back = dir.file("repaired.pcap");
    ringcap(&["-r", cut.to_str().unwrap(), "-w", &back]);
    assert_eq!(packets(Path::new(&back)), 5000);
}
