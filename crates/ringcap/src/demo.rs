//! `ringcap demo` (a first capture on any machine) and `ringcap repair`.
//!
//! The demo makes two network namespaces joined by a veth pair (made-up MACs,
//! 198.18.0.0/15 addresses), captures on one end while the other sends a
//! bounded number of numbered frames, and prints what was captured. The
//! namespaces are removed on every exit path.

use crate::cli::{DemoArgs, RepairArgs};
use crate::failure::Failure;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `ringcap repair`.
pub fn repair(args: &RepairArgs) -> Result<i32, Failure> {
    let mut status = 0;
    for f in &args.files {
        if !f.exists() {
            eprintln!("ringcap: {}: no such file", f.display());
            status = crate::failure::exit::USAGE;
            continue;
        }
        // A crash's hidden `.NAME.ringcap-partial`: cut and published as
        // NAME, as the next capture into its directory would, and indexed.
        if let (false, Some(final_path)) =
            (args.check, ringcap_sink::files::final_path_of_partial(f))
        {
            match ringcap_sink::writer::publish_partial(f, &final_path, None) {
                Ok(Some((target, rep))) => {
                    println!(
                        "{}: cut {} bytes after the last complete record; {} packets published as {}",
                        f.display(),
                        rep.original_len - rep.valid_len,
                        rep.packets,
                        target.display()
                    );
                    if let Some(m) = crate::query::repair_index(&target) {
                        println!("{}: {m}", target.display());
                    }
                }
                Ok(None) => eprintln!(
                    "ringcap: {}: a capture is writing it (left as it is)",
                    f.display()
                ),
                Err(e) => {
                    eprintln!("ringcap: {e}");
                    status = crate::failure::exit::USAGE;
                }
            }
            continue;
        }
        let r = if args.check {
            ringcap_format::repair::check(f)
        } else {
            ringcap_format::repair::repair(f)
        };
        let indexable = r.is_ok() && !args.check;
        match r {
            Ok(rep) if rep.original_len == rep.valid_len => {
                println!("{}: intact, {} packets", f.display(), rep.packets)
            }
            Ok(rep) => println!(
                "{}: {} {} bytes after the last complete record; {} packets {}",
                f.display(),
                if args.check { "would cut" } else { "cut" },
                rep.original_len - rep.valid_len,
                rep.packets,
                if args.check { "would remain" } else { "remain" }
            ),
            Err(e) => {
                let e = e.to_string();
                // The message may say so already ("left untouched: ...").
                let untouched = if e.contains("untouched") {
                    ""
                } else {
                    " (file left untouched)"
                };
                eprintln!("ringcap: {}: {e}{untouched}", f.display());
                status = crate::failure::exit::USAGE;
            }
        }
        if indexable {
            if let Some(m) = crate::query::repair_index(f) {
                println!("{}: {m}", f.display());
            }
        }
    }
    Ok(status)
}

struct Namespaces {
    names: [String; 2],
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn ip(args: &[&str]) -> Result<(), Failure> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Failure::system(format!("running ip: {e} (install iproute2)")))?;
    if !out.status.success() {
        return Err(Failure::system(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// `ringcap demo`.
pub fn demo(args: &DemoArgs) -> Result<i32, Failure> {
    if args.count == 0 || args.count > 100_000 {
        return Err(Failure::usage("--count must be from 1 to 100000"));
    }
    let tag = format!(
        "{:x}",
        std::process::id() ^ (Instant::now().elapsed().as_nanos() as u32)
    );
    let ns = Namespaces {
        names: [format!("rcdemo-{tag}-cap"), format!("rcdemo-{tag}-peer")],
    };
    let (cap_if, peer_if) = (format!("rcd{tag}c"), format!("rcd{tag}p"));
    let (cap_if, peer_if) = (
        &cap_if[..cap_if.len().min(15)],
        &peer_if[..peer_if.len().min(15)],
    );
    ip(&["netns", "add", &ns.names[0]])?;
    ip(&["netns", "add", &ns.names[1]])?;
    ip(&[
        "link",
        "add",
        cap_if,
        "netns",
        &ns.names[0],
        "address",
        "02:52:43:00:00:01",
        "type",
        "veth",
        "peer",
        "name",
        peer_if,
        "netns",
        &ns.names[1],
        "address",
        "02:52:43:00:00:02",
    ])?;
    for (n, i) in [(&ns.names[0], cap_if), (&ns.names[1], peer_if)] {
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                n,
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{i}.disable_ipv6=1"),
            ])
            .stderr(Stdio::null())
            .status();
        ip(&["-n", n, "link", "set", i, "up"])?;
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::runtime(format!("finding ringcap itself: {e}")))?;
    let out = std::path::absolute(&args.output).unwrap_or(args.output.clone());
    let _ = std::fs::remove_file(&out);
    eprintln!(
        "demo: capturing on {cap_if} in namespace {} while {peer_if} sends {} frames",
        ns.names[0], args.count
    );
    let mut capture = Command::new("ip")
        .args(["netns", "exec", &ns.names[0]])
        .arg(&exe)
        .args([
            "capture",
            "-i",
            cap_if,
            "-B",
            "8M",
            "-c",
            &args.count.to_string(),
            "--duration",
            "30",
            "-w",
        ])
        .arg(&out)
        .args(["--overwrite", "udp"])
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::runtime(format!("starting the capture: {e}")))?;
    // Wait for "capturing on" before sending.
    let stderr = capture.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut log = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(l) => {
                let ready = l.starts_with("capturing on ");
                log.push(l);
                if ready {
                    break;
                }
            }
            Err(_) if Instant::now() > deadline => {
                let _ = capture.kill();
                return Err(Failure::runtime(format!(
                    "the capture did not start: {}",
                    log.join("\n")
                )));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let _ = capture.wait();
                return Err(Failure::runtime(format!(
                    "the capture ended early: {}",
                    log.join("\n")
                )));
            }
            Err(_) => {}
        }
    }
    // The peer sends with `ringcap inject` (frames 1/64 ms apart; a late
    // one is still sent), from a file made for it.
    let frames = std::env::temp_dir().join(format!("ringcap-demo-{tag}.pcap"));
    let sent = write_frames(&frames, args.count).and_then(|_| {
        Command::new("ip")
            .args(["netns", "exec", &ns.names[1]])
            .arg(&exe)
            .args(["inject", "-i", peer_if, "--tolerance", "60000", "-r"])
            .arg(&frames)
            .stdout(Stdio::null())
            .output()
    });
    let _ = std::fs::remove_file(&frames);
    match sent {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let _ = capture.kill();
            return Err(Failure::runtime(format!(
                "sending the demo traffic failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        Err(e) => {
            let _ = capture.kill();
            return Err(Failure::runtime(format!(
                "sending the demo traffic failed: {e}"
            )));
        }
    }
    let status = capture
        .wait()
        .map_err(|e| Failure::runtime(e.to_string()))?;
    for l in rx.try_iter().chain(std::iter::from_fn(|| {
        rx.recv_timeout(Duration::from_millis(200)).ok()
    })) {
        log.push(l);
    }
    for l in &log {
        eprintln!("  | {l}");
    }
    let mut reader = ringcap_format::read::Reader::new(
        std::fs::File::open(&out)
            .map_err(|e| Failure::runtime(format!("{}: {e}", out.display())))?,
    )
    .map_err(|e| Failure::runtime(e.to_string()))?;
    let mut n = 0u32;
    let mut in_order = true;
    while let Ok(Some(p)) = reader.next_packet() {
        let seq = p
            .data
            .get(42..46)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        in_order &= seq == Some(n);
        n += 1;
    }
    println!(
        "demo: sent {}, captured {} into {} ({}), capture exit status {}",
        args.count,
        n,
        out.display(),
        if in_order && n == args.count {
            "every frame, in order"
        } else {
            "MISSING OR OUT OF ORDER"
        },
        status.code().unwrap_or(-1)
    );
    Ok(if n == args.count && in_order && status.success() {
        0
    } else {
        1
    })
}

/// The demo's traffic as a pcap file for `ringcap inject`: `count`
/// numbered UDP frames (198.18.0.2 -> 198.18.0.3, port 40000 -> 9, the
/// sequence number as payload), 64 a millisecond.
fn write_frames(path: &std::path::Path, count: u32) -> std::io::Result<()> {
    use ringcap_format::{pcap, TsResolution};
    let mut out = pcap::file_header(1, 65535, TsResolution::Nano).to_vec();
    for seq in 0..count.min(100_000) {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&[0x02, 0x52, 0x43, 0, 0, 1]);
        f[6..12].copy_from_slice(&[0x02, 0x52, 0x43, 0, 0, 2]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = [
            0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 2, 198, 18, 0, 3,
        ];
        f[14..34].copy_from_slice(&ip);
        let csum = !ringcap_wire::ip::ones_complement_sum(&f[14..34]);
        f[24..26].copy_from_slice(&csum.to_be_bytes());
        f[34..42].copy_from_slice(&[0x9c, 0x40, 0, 9, 0, 26, 0, 0]);
        f[42..46].copy_from_slice(&seq.to_be_bytes());
        let ts = 1_700_000_000_000_000_000 + u64::from(seq) * 15_625;
        let mut h = [0u8; pcap::RECORD_HEADER_LEN];
        pcap::write_record_header(&mut h, ts, 60, 60, TsResolution::Nano);
        out.extend_from_slice(&h);
        out.extend_from_slice(&f);
    }
    std::fs::write(path, out)
}
