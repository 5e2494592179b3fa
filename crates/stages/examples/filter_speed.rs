//! Time per packet of libpcap's interpreter and of `bpf::interp` on the same
//! filters and frames: `cargo run --release -p ringcap-stages --example
//! filter_speed [EXPRESSION ...]`.

use ringcap_stages::filter::Target;
use ringcap_stages::{compile, CheckedProgram};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    // ONLY=libpcap, ONLY=interp or ONLY=grouped runs just that one (for
    // `perf stat`).
    let only = std::env::var("ONLY").unwrap_or_default();
    let mut exprs: Vec<String> = std::env::args().skip(1).collect();
    if exprs.is_empty() {
        exprs = vec![
            "udp and not dst port 60001".into(),
            "tcp port 22 or udp port 53".into(),
            "net 198.18.0.0/15 and not host 198.18.0.2 and udp".into(),
        ];
    }
    // A 64-byte IPv4/UDP frame, as the daemon benchmark sends.
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    frame.extend_from_slice(&[0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0]);
    frame.extend_from_slice(&[
        198, 18, 0, 1, 198, 18, 0, 2, 0x9c, 0x40, 0xea, 0x61, 0, 26, 0, 0,
    ]);
    frame.resize(64, 0xab);
    const N: u32 = 5_000_000;
    for e in &exprs {
        let program = compile(e, 1, 262_144, Target::Offline).expect("filter compiles");
        let checked = CheckedProgram::new(program.clone()).expect("valid");
        let libpcap = program.validated().expect("valid");
        let mut kept = 0u64;
        let t = Instant::now();
        for _ in 0..N {
            if only == "interp" || only == "grouped" {
                break;
            }
            kept += u64::from(libpcap.run(black_box(&frame), 64) > 0);
        }
        let a = t.elapsed().as_nanos() as f64 / f64::from(N);
        let t = Instant::now();
        for _ in 0..N {
            if only == "libpcap" || only == "grouped" {
                break;
            }
            kept += u64::from(checked.run(black_box(&frame), 64) > 0);
        }
        let b = t.elapsed().as_nanos() as f64 / f64::from(N);
        let mut paths = Default::default();
        let group: Vec<&[u8]> = vec![&frame[..]; 64];
        let lens = [64u32; 64];
        let mut out = [0u32; 64];
        let t = Instant::now();
        for _ in 0..N / 64 {
            if only == "libpcap" || only == "interp" {
                break;
            }
            checked.run_group(&mut paths, black_box(&group), &lens, &mut out);
            kept += out.iter().filter(|&&v| v > 0).count() as u64;
        }
        let c = t.elapsed().as_nanos() as f64 / f64::from(N / 64 * 64);
        println!(
            "{e:55} {} insns: libpcap {a:5.1} ns, interp {b:5.1} ns ({:.2}x), grouped {c:5.1} ns ({:.2}x) [{kept}]",
            program.instructions.len(),
            a / b,
            a / c
        );
    }
}
