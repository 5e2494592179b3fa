//! Tests of [`to_pcapng`](super::to_pcapng) on blocks laid out as the kernel
//! does: the fast and the general path together (and against each other),
//! so they are here rather than with either part.

use super::*;
use ringcap_format::pcapng::BT_EPB;
use ringcap_format::walk::{record_at, RecordFormat};

/// A frame for [`kernel_block`]: bytes, original length, VLAN tag
/// (tpid, tci) the kernel took out.
type Frame = (Vec<u8>, u32, Option<(u16, u16)>);

/// A block as the kernel lays it out: descriptor, then packets with
/// `tp_mac` = `mac` (84 for Ethernet with RESERVE).
fn kernel_block(size: usize, mac: usize, pkts: &[Frame]) -> Vec<u8> {
    let mut b = vec![0xeeu8; size];
    put32(&mut b, 0, 3);
    put32(&mut b, 4, 0);
    put32(&mut b, BLOCK_STATUS, libc::TP_STATUS_USER);
    put32(&mut b, BLOCK_NUM_PKTS, pkts.len() as u32);
    put32(&mut b, BLOCK_FIRST_PKT, 48);
    let mut at = 48;
    for (i, (data, len, tag)) in pkts.iter().enumerate() {
        // The kernel's TOTAL_PKT_LEN_INCL_ALIGN: 8-byte steps.
        let next = (mac + data.len()).div_ceil(8) * 8;
        b[at..at + 68].fill(0x11);
        put32(
            &mut b,
            at + NEXT_OFFSET,
            if i + 1 == pkts.len() { 0 } else { next as u32 },
        );
        put32(&mut b, at + SEC, 1_700_000_000 + i as u32);
        put32(&mut b, at + NSEC, 123 + i as u32);
        put32(&mut b, at + SNAPLEN, data.len() as u32);
        put32(&mut b, at + LEN, *len);
        let mut status = libc::TP_STATUS_USER;
        if let Some((tpid, tci)) = tag {
            status |= libc::TP_STATUS_VLAN_VALID | libc::TP_STATUS_VLAN_TPID_VALID;
            put32(&mut b, at + VLAN_TCI, u32::from(*tci));
            b[at + VLAN_TPID..at + VLAN_TPID + 2].copy_from_slice(&tpid.to_ne_bytes());
        }
        put32(&mut b, at + STATUS, status);
        b[at + MAC..at + MAC + 2].copy_from_slice(&(mac as u16).to_ne_bytes());
        b[at + mac..at + mac + data.len()].copy_from_slice(data);
        at += next;
    }
    put32(&mut b, 20, at as u32);
    b
}

/// (ts, caplen, wire, data) of every EPB, checking that the region is
/// a run of whole blocks of known types.
fn epbs(region: &[u8]) -> Vec<(u64, u32, u32, Vec<u8>)> {
    let mut v = Vec::new();
    let mut p = 0;
    while p < region.len() {
        let (len, ts) = record_at(RecordFormat::Pcapng, region, p).expect("whole block");
        let t = u32_at(region, p);
        assert!(t == BT_EPB || t == BT_PAD, "block type {t:#x} at {p}");
        assert_eq!(u32_at(region, p + len - 4) as usize, len);
        if t == BT_EPB {
            let cap = u32_at(region, p + 20);
            let wire = u32_at(region, p + 24);
            assert!(28 + (cap as usize).div_ceil(4) * 4 + 4 <= len);
            let tail = &region[p + 28 + cap as usize..p + 28 + (cap as usize).div_ceil(4) * 4];
            assert!(
                tail.iter().all(|&b| b == 0),
                "padding after the frame at {p}"
            );
            let d = region[p + 28..p + 28 + cap as usize].to_vec();
            v.push((ts.unwrap(), cap, wire, d));
        }
        p += len;
    }
    assert_eq!(p, region.len());
    v
}

/// Numbers below `n` from a xorshift generator started at `seed`.
fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

fn frame(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add(i as u8)).collect()
}

const OPTS: InPlace = InPlace {
    interface_id: 0,
    snaplen: 262_144,
    max_frame_len: 1514,
};

#[test]
fn ethernet_frames_become_epbs_without_moving() {
    let pkts: Vec<_> = [60usize, 61, 62, 63, 64, 1514, 1500, 97]
        .iter()
        .enumerate()
        .map(|(i, n)| (frame(*n, i as u8), *n as u32, None))
        .collect();
    let mut b = kernel_block(1 << 16, 84, &pkts);
    let c = to_pcapng(&mut b, &OPTS);
    assert_eq!(c.packets, pkts.len() as u64);
    assert_eq!(c.moved, 0);
    assert_eq!(c.malformed, 0);
    assert_eq!(c.len % PAGE, 0);
    assert_eq!(
        u32_at(&b, BLOCK_STATUS),
        libc::TP_STATUS_USER,
        "status word written"
    );
    let got = epbs(&b[..c.len]);
    for (i, (ts, cap, wire, data)) in got.iter().enumerate() {
        assert_eq!(
            *ts,
            (1_700_000_000 + i as u64) * 1_000_000_000 + 123 + i as u64
        );
        assert_eq!(*cap as usize, pkts[i].0.len());
        assert_eq!(*wire, pkts[i].1);
        assert_eq!(data, &pkts[i].0);
    }
    assert_eq!((c.first_ts, c.last_ts), (got[0].0, got[7].0));
    assert_eq!(c.merged_by_offload, 0);
}

#[test]
fn misaligned_frames_move_and_tags_go_back() {
    // tp_mac 82: Ethernet without PACKET_RESERVE (2 bytes off); 96: no
    // link header room of 14 (raw IP).
    for mac in [82usize, 84, 83, 96, 81] {
        let pkts = vec![
            (frame(60, 1), 60u32, None),
            (frame(100, 2), 100, Some((0x8100u16, 0x0064u16))),
            (frame(8, 3), 8, Some((0x88a8, 5))), // too short for a tag
            (frame(1514, 4), 3000, None),        // merged by an offload
        ];
        let mut b = kernel_block(1 << 16, mac, &pkts);
        let c = to_pcapng(&mut b, &OPTS);
        assert_eq!(c.packets, 4, "mac {mac}");
        let got = epbs(&b[..c.len]);
        assert_eq!(got[0].3, pkts[0].0);
        let mut tagged = pkts[1].0[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        tagged.extend_from_slice(&pkts[1].0[12..]);
        assert_eq!(got[1].3, tagged);
        assert_eq!((got[1].1, got[1].2), (104, 104));
        assert_eq!(got[2].3, pkts[2].0);
        assert_eq!(got[3].2, 3000);
        assert_eq!(c.merged_by_offload, 1);
        assert_eq!(c.bytes_on_wire, 60 + 104 + 8 + 3000);
        assert_eq!(u32_at(&b, BLOCK_STATUS), libc::TP_STATUS_USER);
    }
}

#[test]
fn snap_length_counts_the_tag() {
    let pkts = vec![(frame(64, 9), 1000u32, Some((0x8100u16, 7u16)))];
    let mut b = kernel_block(1 << 14, 84, &pkts);
    let c = to_pcapng(
        &mut b,
        &InPlace {
            snaplen: 64,
            ..OPTS
        },
    );
    let got = epbs(&b[..c.len]);
    assert_eq!((got[0].1, got[0].2), (64, 1004));
    assert_eq!(&got[0].3[12..16], &[0x81, 0, 0, 7]);
    assert_eq!(&got[0].3[16..], &pkts[0].0[12..60]);
}

/// The last packet ending 4, 8 or 12+ bytes before a page boundary,
/// and exactly on it.
#[test]
fn every_tail_reaches_a_page_boundary() {
    for n in 3900..4100usize {
        let pkts = vec![(frame(n, 1), n as u32, None)];
        let mut b = kernel_block(3 * PAGE, 84, &pkts);
        let c = to_pcapng(&mut b, &OPTS);
        assert_eq!(c.packets, 1, "{n}");
        assert_eq!(c.len % PAGE, 0);
        let got = epbs(&b[..c.len]);
        assert_eq!(got[0].3, pkts[0].0);
    }
}

/// Blocks of random frames (lengths, tags, link header room, snap
/// lengths) and random damage: never a panic, never a write to the
/// status word, always whole blocks, and every packet converted when
/// nothing was damaged.
#[test]
fn random_blocks_convert_or_cut_cleanly() {
    let mut rnd = xorshift(0x2545_f491_4f6c_dd1d);
    for round in 0..2000 {
        let mac = [84usize, 84, 84, 82, 83, 96][rnd(6) as usize];
        let n = 1 + rnd(40) as usize;
        let pkts: Vec<Frame> = (0..n)
            .map(|i| {
                let len = [60usize, 61, 62, 63, 64, 65, 66, 67, 128, 1514][rnd(10) as usize];
                let tag = (rnd(8) == 0).then_some((0x8100u16, rnd(4096) as u16));
                (frame(len, i as u8), len as u32 + rnd(3) as u32, tag)
            })
            .collect();
        let snaplen = [64u32, 65, 96, 262_144][rnd(4) as usize];
        let opts = InPlace { snaplen, ..OPTS };
        let mut b = kernel_block(1 << 16, mac, &pkts);
        let damaged = rnd(4) == 0;
        if damaged {
            let at = rnd(2048) as usize;
            b[at] = rnd(256) as u8;
        }
        let c = to_pcapng(&mut b, &opts);
        assert_eq!(
            u32_at(&b, BLOCK_STATUS),
            libc::TP_STATUS_USER,
            "round {round}"
        );
        let got = epbs(&b[..c.len]);
        assert_eq!(got.len() as u64, c.packets, "round {round}");
        if !damaged {
            assert_eq!(c.packets, n as u64, "round {round}");
            for (i, (_, cap, _, data)) in got.iter().enumerate() {
                let (f, _, tag) = &pkts[i];
                let mut want = f.clone();
                if let (Some((p, t)), true) = (tag, f.len() >= 12) {
                    let mut v = f[..12].to_vec();
                    v.extend_from_slice(&p.to_be_bytes());
                    v.extend_from_slice(&t.to_be_bytes());
                    v.extend_from_slice(&f[12..]);
                    want = v;
                }
                want.truncate(snaplen as usize);
                assert_eq!(*cap as usize, want.len(), "round {round} packet {i}");
                assert_eq!(data, &want, "round {round} packet {i}");
            }
        }
    }
}

#[test]
fn runs_of_one_layout_convert_as_packet_by_packet() {
    // Blocks made of runs of packets that share a layout (the case
    // uniform_run takes), broken by tags, other lengths, frames at
    // other offsets and damage: the result must be byte for byte what
    // the packet-by-packet path makes of the same block.
    let mut rnd = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut run_packets = 0u64;
    for round in 0..1500 {
        let mac = [84usize, 84, 84, 88, 82][rnd(5) as usize];
        let mut pkts: Vec<Frame> = Vec::new();
        while pkts.len() < 300 {
            let len = [60usize, 61, 62, 63, 64, 65, 66, 67, 68, 100, 1514][rnd(11) as usize];
            let tag = (rnd(10) == 0).then_some((0x8100u16, rnd(4096) as u16));
            for _ in 0..1 + rnd(40) {
                let i = pkts.len();
                pkts.push((frame(len, i as u8), len as u32 + rnd(2) as u32, tag));
            }
        }
        let snaplen = [64u32, 66, 262_144][rnd(3) as usize];
        let opts = InPlace { snaplen, ..OPTS };
        let need: usize = 48
            + pkts
                .iter()
                .map(|p| (mac + p.0.len()).div_ceil(8) * 8)
                .sum::<usize>();
        let mut b = kernel_block((need + 64).div_ceil(PAGE) * PAGE, mac, &pkts);
        if rnd(3) == 0 {
            for _ in 0..1 + rnd(3) {
                let at = rnd(b.len() as u64) as usize;
                b[at] = rnd(256) as u8;
            }
        }
        let mut reference = b.clone();
        let want = convert(&mut reference, &opts, false);
        let got = convert(&mut b, &opts, true);
        assert_eq!(got, want, "round {round}");
        assert!(b == reference, "round {round}: blocks differ");
        assert_eq!(
            epbs(&b[..got.len]).len() as u64,
            got.packets,
            "round {round}"
        );
        run_packets += got.packets;
    }
    assert!(run_packets > 100_000, "{run_packets}");
}

#[test]
fn bad_layouts_are_cut_not_followed() {
    let pkts: Vec<_> = (0..5).map(|i| (frame(200, i), 200u32, None)).collect();
    let good = kernel_block(1 << 14, 84, &pkts);
    // A next offset pointing past the block, or backwards; a snap
    // length past the end; a tp_mac of 0; more packets than there are.
    let mut cases = Vec::new();
    let second = 48 + (84 + 200usize).div_ceil(8) * 8;
    let mut b = good.clone();
    put32(&mut b, second + NEXT_OFFSET, 1 << 30);
    cases.push((b, 2));
    let mut b = good.clone();
    put32(&mut b, second + SNAPLEN, 1 << 20);
    cases.push((b, 1));
    let mut b = good.clone();
    b[second + MAC..second + MAC + 2].copy_from_slice(&0u16.to_ne_bytes());
    cases.push((b, 1));
    let mut b = good.clone();
    put32(&mut b, BLOCK_NUM_PKTS, 1000);
    cases.push((b, 5));
    let mut b = good.clone();
    put32(&mut b, BLOCK_FIRST_PKT, 1 << 20);
    cases.push((b, 0));
    for (i, (mut b, want)) in cases.into_iter().enumerate() {
        let c = to_pcapng(&mut b, &OPTS);
        assert_eq!(c.packets, want, "case {i}");
        if want > 0 {
            assert_eq!(epbs(&b[..c.len]).len(), want as usize);
        } else {
            assert_eq!(c.len, 0);
        }
    }
    // Tiny and empty blocks.
    assert_eq!(to_pcapng(&mut [0u8; 10], &OPTS), Converted::default());
    let mut empty = kernel_block(PAGE, 84, &[]);
    assert_eq!(to_pcapng(&mut empty, &OPTS).len, 0);
}
