//! Index size as a share of the capture's bytes, printed (and bounded, so
//! that a format change that bloats it fails here): whole packets of mixed
//! sizes over many flows, and the same traffic cut to headers (snap 96).

mod mixed;

use mixed::Rng;
use ringcap_index::build_index;
use ringcap_testkit::frames::{self, Endpoints};
use ringcap_testkit::TempDir;
use std::net::Ipv4Addr;

/// `packets` frames over `flows` TCP/UDP flows between 1,000 hosts; sizes
/// 40% small (ACK-like), 20% 576 B, 40% 1500 B; each flow sends runs of
/// `burst` packets on average, interleaved with the others.
fn traffic(
    rng: &mut Rng,
    packets: usize,
    flows: usize,
    burst: u64,
    snap: usize,
) -> Vec<mixed::Rec> {
    let flow: Vec<(Ipv4Addr, Ipv4Addr, u16, u16, bool)> = (0..flows)
        .map(|_| {
            let h = |r: &mut Rng| {
                let x = r.below(1000);
                Ipv4Addr::new(198, 18, (x / 250) as u8, (x % 250 + 1) as u8)
            };
            (
                h(rng),
                h(rng),
                1024 + rng.below(60000) as u16,
                *rng.pick(&[80u16, 443, 53, 22, 8080]),
                rng.chance(70),
            )
        })
        .collect();
    let mut v = Vec::with_capacity(packets);
    let mut ts = 1_764_000_000_000_000_000u64;
    let mut cur = 0;
    for seq in 0..packets as u32 {
        if rng.below(burst) == 0 {
            cur = rng.below(flows as u64) as usize;
        }
        let (a, b, sp, dp, tcp) = flow[cur];
        let ep = Endpoints::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).with_ipv4(a, b);
        let len = match rng.below(10) {
            0..=3 => 8,
            4..=5 => 522,
            _ => 1440,
        };
        let mut f = if tcp {
            frames::tcp4_with_options(&ep, seq, sp, dp, len)
        } else {
            frames::udp4(&ep, seq, sp, dp, len)
        };
        let wire = f.len() as u32;
        f.truncate(snap);
        ts += 2_000;
        v.push((ts, wire, f));
    }
    v
}

#[test]
fn index_is_small() {
    let dir = TempDir::new("index-size");
    let mut rng = Rng(7);
    let mut worst_whole = 0.0f64;
    for (flows, burst) in [(100, 8), (2000, 8), (2000, 1), (20000, 1)] {
        for snap in [usize::MAX, 96] {
            let recs = traffic(&mut rng, 30_000, flows, burst, snap);
            let p = dir.join("t.pcap");
            mixed::write_file(&p, mixed::Kind::PcapNano, &recs);
            let r = build_index(&p).unwrap();
            let pct = 100.0 * r.index_len as f64 / r.capture_len as f64;
            println!(
                "{flows:>6} flows, runs of ~{burst} packets, {}: {} packets, {} B of pcap, index {} B = {pct:.3}% ({:.1} B/packet, {} keys)",
                if snap == usize::MAX { "whole packets" } else { "snap 96" },
                r.packets,
                r.capture_len,
                r.index_len,
                r.index_len as f64 / r.packets as f64,
                r.keys
            );
            if snap == usize::MAX {
                worst_whole = worst_whole.max(pct);
            }
        }
    }
    assert!(
        worst_whole <= 1.0,
        "index is {worst_whole:.3}% of whole-packet pcap"
    );
}
