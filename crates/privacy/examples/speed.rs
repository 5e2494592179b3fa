//! Per-packet cost of the privacy rewrite in-process (no I/O), for
//! profiling: `cargo run --release -p ringcap-privacy --example speed`.
//! The benchmark of record is bench/run's privacy phase.

use ringcap_privacy::fields::FieldSet;
use ringcap_privacy::{Key, Privacy};
use std::time::Instant;

/// An Ethernet/IPv4/UDP frame of `len` bytes (64: no UDP checksum, as
/// bench/run's privacy phase; longer: a right one, which the rewrite must
/// recompute over the whole datagram).
fn frame(i: u32, x: u64, len: usize) -> Vec<u8> {
    let mut f = vec![2, 0x52, 0x43, 0, 0, 2, 2, 0x52, 0x43, 0, 0, 1, 8, 0];
    let src = [198, 18, (x >> 8) as u8, x as u8];
    let dst = [198, 19, (x >> 24) as u8, (x >> 16) as u8];
    let tl = (len - 14) as u16;
    let mut ip = vec![
        0x45,
        0,
        (tl >> 8) as u8,
        tl as u8,
        (i >> 8) as u8,
        i as u8,
        0,
        0,
        64,
        17,
        0,
        0,
    ];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let s: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    let c = !(((s & 0xffff) + (s >> 16)) as u16);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let ul = tl - 20;
    f.extend_from_slice(&[0x27, 0x10, 0, 53, (ul >> 8) as u8, ul as u8, 0, 0]);
    f.resize(len, b'B');
    if len > 64 {
        let mut acc = 17 + u32::from(ul);
        for c in f[26..34].chunks(2).chain(f[34..].chunks(2)) {
            acc += u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        f[40..42].copy_from_slice(&(!(acc as u16)).to_be_bytes());
    }
    f
}

fn main() {
    for len in [64usize, 1514] {
        run(len);
    }
}

fn run(len: usize) {
    let flows = 16384u32;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let frames: Vec<Vec<u8>> = (0..flows)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            frame(i, x, len)
        })
        .collect();
    let order: Vec<usize> = (0..2_000_000u64 * 64 / len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) % u64::from(flows)) as usize)
        .collect();
    for (mask, anon) in [
        ("", "ip.addr"),
        ("ip.ttl,ip.id,udp.port", ""),
        ("ip.ttl,ip.id,udp.port", "ip.addr"),
    ] {
        let p = Privacy::new(
            FieldSet::parse(mask).unwrap(),
            (!anon.is_empty()).then(|| (Key::from_bytes([9; 32]), FieldSet::parse(anon).unwrap())),
        )
        .unwrap();
        let mut t = p.transform();
        let mut buf = vec![0u8; len];
        for pass in 0..2 {
            let t0 = Instant::now();
            for &i in &order {
                buf.copy_from_slice(&frames[i]);
                t.rewrite_ethernet(&mut buf);
            }
            let ns = t0.elapsed().as_nanos() as f64 / order.len() as f64;
            println!("{len} B, mask {mask:?} anonymize {anon:?} pass {pass}: {ns:.1} ns/packet");
        }
    }
}
