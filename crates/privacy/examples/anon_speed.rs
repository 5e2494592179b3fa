//! Times the privacy transform alone over a pcap's Ethernet frames:
//! `cargo run --release -p ringcap-privacy --example anon_speed -- FILE [FIELDS] [MASK]`
//! (the key is fixed: this measures speed, not secrecy). Prints the best
//! of three passes in ns of the thread's CPU time per packet (the machine
//! may be shared); each pass starts with empty caches. With `AHEAD=K` in
//! the environment, each frame is shown to the transform's `prepare` K
//! frames before it is rewritten (as the engine's file source does).

use ringcap_privacy::{fields::FieldSet, Key, Privacy};

fn thread_cpu_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: anon_speed FILE [ANON_FIELDS] [MASK]")?;
    let anon = FieldSet::parse(args.get(2).map_or("ip.addr", String::as_str))?;
    let mask = FieldSet::parse(args.get(3).map_or("", String::as_str))?;
    let data = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if data.len() < 24 || data[..4] != [0xd4, 0xc3, 0xb2, 0xa1] {
        return Err("a little-endian pcap file, please".into());
    }
    let mut frames = Vec::new();
    let mut i = 24;
    while i + 16 <= data.len() {
        let caplen = u32::from_le_bytes(data[i + 8..i + 12].try_into().unwrap()) as usize;
        let end = (i + 16 + caplen).min(data.len());
        frames.push((i + 16, end));
        i = end;
    }
    let p = Privacy::new(mask, Some((Key::from_bytes([0x5a; 32]), anon)))?;
    let ahead: usize = std::env::var("AHEAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut best = f64::MAX;
    for _ in 0..3 {
        let mut buf = data.clone();
        let mut t = p.transform();
        let t0 = thread_cpu_ns();
        for (i, &(s, e)) in frames.iter().enumerate() {
            if ahead > 0 {
                if let Some(&(s2, e2)) = frames.get(i + ahead) {
                    t.prepare_ethernet(&buf[s2..e2]);
                }
            }
            t.rewrite_ethernet(&mut buf[s..e]);
        }
        let ns = (thread_cpu_ns() - t0) as f64 / frames.len() as f64;
        best = best.min(ns);
        std::hint::black_box(&buf);
    }
    println!(
        "{} packets, best of 3: {best:.1} ns of CPU per packet",
        frames.len()
    );
    Ok(())
}
