//! Round trips of realistic and random records, bytes per packet of the
//! synthetic traces, and the decoder over many mutated inputs (what the
//! fuzz target does, on stable and in CI).

#![allow(clippy::vec_init_then_push)]

mod common;
use common::*;
use proptest::prelude::*;
use ringcap_compress::{find_block, valid_prefix, ErrorKind, Resolution, FILE_HEADER_LEN, VERSION};

fn check(recs: &[Rec], res: Resolution) -> Vec<u8> {
    let file = encode(recs, res, |_| false);
    let back = decode(&file).expect("decodes");
    assert_eq!(back.len(), recs.len());
    for (i, (a, b)) in recs.iter().zip(&back).enumerate() {
        assert_eq!(a, b, "record {i}");
    }
    file
}

#[test]
fn synthetic_traces_round_trip_small() {
    for (name, unit, goal) in [
        ("tcp", 1000, 8.0),
        ("udp", 1000, 5.0),
        ("mix", 1000, 30.0),
        ("tcp", 1, 10.0),
        ("udp", 1, 7.0),
    ] {
        let mut rng = Rng(0x1234_5678);
        let recs = match name {
            "tcp" => tcp_bulk(&mut rng, 20_000, unit),
            "udp" => udp_fragments(&mut rng, 20_000, unit),
            _ => many_flows(&mut rng, 20_000, unit),
        };
        let res = if unit == 1 {
            Resolution::Nano
        } else {
            Resolution::Micro
        };
        let file = check(&recs, res);
        let bpp = file.len() as f64 / recs.len() as f64;
        println!("{name} unit {unit} ns: {bpp:.2} bytes/packet");
        assert!(bpp <= goal, "{name}: {bpp:.2} bytes/packet, goal {goal}");
    }
}

#[test]
fn every_block_stands_alone() {
    let mut rng = Rng(99);
    let recs = tcp_bulk(&mut rng, 3000, 1000);
    let file = encode(&recs, Resolution::Micro, |i| i % 500 == 499);
    // Decoding from each block alone gives that block's records.
    let mut at = FILE_HEADER_LEN;
    let mut got = Vec::new();
    while at < file.len() {
        at = ringcap_compress::decode_block(&file, at, |r| {
            got.push(Rec {
                ts: r.ts,
                wire: r.wire_len,
                data: r.data.to_vec(),
            })
        })
        .unwrap();
    }
    assert_eq!(got, recs);
    // Damage the second block: the reader stops there with its offset, and
    // the blocks after it are found and decode.
    let second = find_block(&file, FILE_HEADER_LEN + 1).unwrap();
    let mut bad = file.clone();
    bad[second + 40] ^= 0x55;
    let err = decode(&bad).unwrap_err();
    assert_eq!(err.offset, second as u64);
    let third = find_block(&bad, second + 1).unwrap();
    let mut rest = Vec::new();
    let mut at = third;
    while at < bad.len() {
        at = ringcap_compress::decode_block(&bad, at, |r| {
            rest.push(Rec {
                ts: r.ts,
                wire: r.wire_len,
                data: r.data.to_vec(),
            })
        })
        .unwrap();
    }
    assert_eq!(rest, recs[1000..]);
    // A file cut anywhere is whole up to its last whole block.
    for cut in [file.len() - 1, second + 3, FILE_HEADER_LEN + 5] {
        let p = valid_prefix(&file[..cut]);
        assert!(p.valid_len as usize <= cut);
        let back = decode(&file[..p.valid_len as usize]).unwrap();
        assert_eq!(back.len() as u64, p.records);
        assert_eq!(back[..], recs[..back.len()]);
    }
}

#[test]
fn truncated_input_errors_with_offset() {
    let mut rng = Rng(5);
    let recs = udp_fragments(&mut rng, 200, 1000);
    let file = encode(&recs, Resolution::Micro, |i| i == 100);
    for cut in 0..file.len() {
        match decode(&file[..cut]) {
            Ok(v) => assert!(
                v.len() < recs.len()
                    && (cut == FILE_HEADER_LEN
                        || valid_prefix(&file[..cut]).valid_len == cut as u64)
            ),
            Err(e) => assert!(
                e.offset <= cut as u64,
                "offset {} past the end {cut}",
                e.offset
            ),
        }
    }
}

/// The decoder over many mutations of valid files: bit flips, byte
/// changes, insertions, deletions, cuts — with the block checksums fixed up
/// so the record decoder itself sees the damage. It must return, never panic.
#[test]
fn mutated_inputs_never_panic() {
    let mut rng = Rng(0xdead_beef);
    let mut seeds = Vec::new();
    seeds.push(encode(
        &tcp_bulk(&mut rng, 300, 1000),
        Resolution::Micro,
        |i| i % 100 == 99,
    ));
    seeds.push(encode(
        &udp_fragments(&mut rng, 300, 1),
        Resolution::Nano,
        |_| false,
    ));
    seeds.push(encode(
        &many_flows(&mut rng, 300, 1000),
        Resolution::Micro,
        |i| i % 77 == 0,
    ));
    let mut errors = 0;
    for round in 0..20_000 {
        let mut f = seeds[round % seeds.len()].clone();
        for _ in 0..1 + rng.below(4) {
            let i = FILE_HEADER_LEN + rng.below((f.len() - FILE_HEADER_LEN) as u64) as usize;
            match rng.below(5) {
                0 => f[i] ^= 1 << rng.below(8),
                1 => f[i] = rng.next() as u8,
                2 => f.insert(i, rng.next() as u8),
                3 => {
                    f.remove(i);
                }
                _ => f.truncate(i),
            }
            if f.len() <= FILE_HEADER_LEN {
                break;
            }
        }
        fix_checksums(&mut f);
        if decode(&f).is_err() {
            errors += 1;
        }
    }
    assert!(errors > 1000, "mutations should mostly be caught: {errors}");
}

/// Recomputes each block's checksum (walking by the lengths as found).
pub fn fix_checksums(f: &mut [u8]) {
    let mut at = FILE_HEADER_LEN;
    while at + 24 <= f.len() {
        let len = u32::from_le_bytes(f[at + 4..at + 8].try_into().unwrap()) as usize;
        let end = at + 24 + len;
        if end > f.len() {
            break;
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&f[at + 4..at + 20]);
        h.update(&f[at + 24..end]);
        let c = h.finalize();
        f[at + 20..at + 24].copy_from_slice(&c.to_le_bytes());
        at = end;
    }
}

fn arb_record() -> impl Strategy<Value = Rec> {
    (
        any::<u64>(),
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(ts, wire, data)| Rec { ts, wire, data })
}

/// A realistic packet with a few random changes.
fn arb_mutated_real() -> impl Strategy<Value = Vec<Rec>> {
    (
        any::<u64>(),
        1usize..200,
        prop::collection::vec((any::<u16>(), any::<u8>()), 0..6),
    )
        .prop_map(|(seed, n, edits)| {
            let mut rng = Rng(seed | 1);
            let mut recs = match seed % 4 {
                0 => tcp_bulk(&mut rng, n, 1000),
                1 => udp_fragments(&mut rng, n, 1),
                3 => new_flows(&mut rng, n, 1000),
                _ => many_flows(&mut rng, n, 1000),
            };
            for (k, (pos, val)) in edits.iter().enumerate() {
                let r = &mut recs[k * 7 % n];
                if !r.data.is_empty() {
                    let i = *pos as usize % r.data.len();
                    r.data[i] = *val;
                }
                if k % 3 == 2 {
                    let cut = *pos as usize % (r.data.len() + 1);
                    r.data.truncate(cut);
                }
            }
            recs
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_records_round_trip(recs in prop::collection::vec(arb_record(), 0..40), cuts in any::<u64>()) {
        let file = encode(&recs, Resolution::Nano, |i| cuts >> (i % 64) & 1 == 1);
        prop_assert_eq!(decode(&file).unwrap(), recs);
    }

    #[test]
    fn realistic_records_round_trip(recs in arb_mutated_real(), cuts in any::<u64>()) {
        let file = encode(&recs, Resolution::Micro, |i| cuts >> (i % 64) & 1 == 1 && i % 5 == 0);
        prop_assert_eq!(decode(&file).unwrap(), recs);
    }

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..600)) {
        let mut f = ringcap_compress::FileHeader { version: VERSION, resolution: Resolution::Micro, linktype: 1, snaplen: 65535 }.to_bytes().to_vec();
        f.extend_from_slice(b"RCZB");
        f.extend_from_slice(&(body.len() as u32).to_le_bytes());
        f.extend_from_slice(&(body.len() as u32 / 3).to_le_bytes());
        f.extend_from_slice(&[0; 12]);
        f.extend_from_slice(&body);
        fix_checksums(&mut f);
        let _ = decode(&f);
    }
}

#[test]
fn other_versions_are_refused_with_a_clear_message() {
    let mut rng = Rng(7);
    let recs = udp_fragments(&mut rng, 100, 1000);
    let file = encode(&recs, Resolution::Micro, |_| false);
    assert_eq!(u16::from_le_bytes([file[8], file[9]]), VERSION);
    for v in [0u16, 1, VERSION + 1, 0xffff] {
        let mut f = file.clone();
        f[8..10].copy_from_slice(&v.to_le_bytes());
        let e = decode(&f).unwrap_err();
        assert_eq!(e.offset, 8);
        assert_eq!(e.kind, ErrorKind::Version(v));
        let msg = e.to_string();
        assert!(msg.contains(&format!("version {v}")), "{msg}");
        assert!(
            msg.contains(&format!("this reader knows versions 2 to {VERSION}")),
            "{msg}"
        );
    }
}

#[test]
fn check_block_takes_exactly_one_whole_block_with_its_checksum() {
    let mut enc = ringcap_compress::Encoder::new(1);
    for i in 0..50u64 {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 46, 0, i as u8, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[
            198, 18, 0, 1, 198, 18, 0, 2, 0x9c, 0x40, 0x9c, 0x41, 0, 26, 0, 0,
        ]);
        f.resize(60, i as u8);
        enc.push(1_000_000 + i * 10, 60, &f);
    }
    let mut block = Vec::new();
    enc.finish_block(&mut block);
    let info = ringcap_compress::check_block(&block, 0).expect("a whole block");
    assert_eq!(
        (info.len, info.records, info.first_ts),
        (block.len(), 50, 1_000_000)
    );
    assert_eq!(
        ringcap_compress::peek_block(&block, 0).expect("header"),
        info
    );
    let kind = |b: &[u8]| {
        ringcap_compress::check_block(b, 0)
            .expect_err("refused")
            .kind
    };
    assert_eq!(kind(&block[..block.len() - 1]), ErrorKind::Truncated);
    let mut longer = block.clone();
    longer.push(0);
    assert_eq!(kind(&longer), ErrorKind::TrailingBytes);
    for at in [30, block.len() - 1] {
        let mut bad = block.clone();
        bad[at] ^= 0x10;
        assert_eq!(kind(&bad), ErrorKind::BadChecksum, "byte {at} changed");
    }
    let mut bad = block.clone();
    bad[0] = b'X';
    assert_eq!(kind(&bad), ErrorKind::BadBlockMagic);
}

/// A file ringcap wrote in format version 2 (before version 3 coded the
/// integers' low bits, the allowed flags and the run bytes differently):
/// still read, record for record, and written again as version 3.
#[test]
fn version_2_files_still_decode() {
    let v2 = include_bytes!("data/v2-synthetic.rcz");
    assert_eq!(u16::from_le_bytes([v2[8], v2[9]]), 2);
    // What it was made from (the generators are deterministic).
    let mut rng = Rng(0x5eed_0002);
    let mut recs = tcp_bulk(&mut rng, 400, 1000);
    recs.extend(udp_fragments(&mut rng, 300, 1000));
    recs.extend(many_flows(&mut rng, 400, 1000));
    let back = decode(v2).expect("a version 2 file decodes");
    assert_eq!(back.len(), recs.len());
    for (i, (a, b)) in recs.iter().zip(&back).enumerate() {
        assert_eq!(a, b, "record {i}");
    }
    let v3 = check(&back, Resolution::Micro);
    assert_eq!(u16::from_le_bytes([v3[8], v3[9]]), VERSION);
    // Version 3 reading version 2's bytes (or the reverse) goes wrong
    // somewhere: the version in the header matters.
    let mut lie = v2.to_vec();
    lie[8..10].copy_from_slice(&VERSION.to_le_bytes());
    assert_ne!(decode(&lie).ok(), Some(recs));
}

/// A file written in format version 3 (before version 4 modelled the byte
/// runs of records that open a context): still read, record for record.
#[test]
fn version_3_files_still_decode() {
    let v3 = include_bytes!("data/v3-synthetic.rcz");
    assert_eq!(u16::from_le_bytes([v3[8], v3[9]]), 3);
    let mut rng = Rng(0x5eed_0003);
    let mut recs = tcp_bulk(&mut rng, 300, 1000);
    recs.extend(many_flows(&mut rng, 300, 1000));
    recs.extend(new_flows(&mut rng, 400, 1000));
    let back = decode(v3).expect("a version 3 file decodes");
    assert_eq!(back, recs);
    let v4 = check(&back, Resolution::Micro);
    assert_eq!(u16::from_le_bytes([v4[8], v4[9]]), VERSION);
    assert!(v4.len() < v3.len(), "{} >= {}", v4.len(), v3.len());
    let mut lie = v3.to_vec();
    lie[8..10].copy_from_slice(&VERSION.to_le_bytes());
    assert_ne!(decode(&lie).ok(), Some(recs));
}

/// Traffic with no flow reuse (every packet a new UDP flow with random
/// ports) round-trips, and its runs cost less than the direct bytes of
/// format version 3 (20.8 bytes/packet on this trace).
#[test]
fn new_flow_per_packet_traffic_round_trips_smaller() {
    let mut rng = Rng(7);
    let recs = new_flows(&mut rng, 20_000, 1000);
    let file = check(&recs, Resolution::Micro);
    let bpp = file.len() as f64 / recs.len() as f64;
    println!("new flows: {bpp:.2} bytes/packet");
    assert!(bpp < 18.5, "{bpp:.2} bytes/packet");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// New flows whose headers are random in the places a new flow
    /// changes (addresses, ports, IDs, checksums, TTL), in blocks cut
    /// anywhere: the modelled runs decode exactly.
    #[test]
    fn new_flow_records_round_trip(seed in any::<u64>(), n in 1usize..300, flips in prop::collection::vec((0usize..80, any::<u8>()), 0..30), cuts in any::<u64>()) {
        let mut rng = Rng(seed | 1);
        let mut recs = new_flows(&mut rng, n, 1000);
        for (k, (pos, val)) in flips.iter().enumerate() {
            let r = &mut recs[k * 13 % n];
            if *pos < r.data.len() && !(12..14).contains(pos) {
                r.data[*pos] = *val;
            }
        }
        let file = encode(&recs, Resolution::Micro, |i| cuts >> (i % 64) & 1 == 1);
        prop_assert_eq!(decode(&file).unwrap(), recs);
    }
}
