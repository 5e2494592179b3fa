//! Time of `inplace::to_pcapng` per packet on a synthetic kernel block of
//! short frames (64 B, `tp_mac` 84), the block copied in fresh before each
//! conversion: `inplace_speed [BLOCK_KIB] [ROUNDS]`.
use ringcap_source::inplace::{to_pcapng, InPlace};
use std::time::Instant;

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4096);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let size = kib << 10;
    let (mac, caplen) = (84usize, 64usize);
    let next = (mac + caplen).div_ceil(8) * 8;
    let mut template = vec![0u8; size];
    let mut at = 48;
    let mut n = 0u32;
    while at + next <= size {
        put32(&mut template, at, next as u32);
        put32(&mut template, at + 4, 1_700_000_000);
        put32(&mut template, at + 8, n * 1000);
        put32(&mut template, at + 12, caplen as u32);
        put32(&mut template, at + 16, caplen as u32);
        put32(&mut template, at + 20, libc::TP_STATUS_USER);
        template[at + 24..at + 26].copy_from_slice(&(mac as u16).to_ne_bytes());
        template[at + mac..at + mac + caplen].fill(0x41);
        n += 1;
        at += next;
    }
    put32(&mut template, at - next, 0);
    put32(&mut template, 0, 3);
    put32(&mut template, 8, libc::TP_STATUS_USER);
    put32(&mut template, 12, n);
    put32(&mut template, 16, 48);
    put32(&mut template, 20, at as u32);
    let opts = InPlace {
        interface_id: 0,
        snaplen: 262144,
        max_frame_len: 65535,
    };
    let mut work = vec![0u8; size];
    let mut best = f64::MAX;
    let mut total = 0.0;
    for _ in 0..rounds {
        work.copy_from_slice(&template);
        let t = Instant::now();
        let c = to_pcapng(&mut work, &opts);
        let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
        assert_eq!(c.packets, u64::from(n));
        best = best.min(ns);
        total += ns;
    }
    println!(
        "{kib} KiB block, {n} packets: best {best:.2} ns/packet, mean {:.2}",
        total / rounds as f64
    );
}
