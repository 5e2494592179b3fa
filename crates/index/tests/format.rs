//! The index file is refused, clearly and without a panic, when it is not
//! an index, of another version, damaged, or stale; and no mutation of a
//! valid file (checksums fixed up) makes the reader or a lookup panic.

mod mixed;

use mixed::Rng;
use ringcap_index::file::{reseal, Index, IndexError};
use ringcap_index::keys::Kind;
use ringcap_index::{build_index, index_path, load_index, Unusable};
use ringcap_testkit::TempDir;

/// Opens `raw` and looks up every key of every kind: the reader checks a
/// key block only when a lookup reads it.
fn open_and_read_all(raw: Vec<u8>) -> Result<Index, IndexError> {
    let i = Index::parse(raw)?;
    i.all_groups()?;
    let mut v = vec![false; i.group_count()];
    for kind in Kind::ALL {
        i.mark(kind, 0, u128::MAX, &mut v)?;
    }
    let mut at = Vec::new();
    for key in i.keys_with_positions() {
        i.positions(key, &mut at)?;
    }
    Ok(i)
}

#[test]
fn refusals_and_no_panics() {
    let dir = TempDir::new("index-format");
    let mut rng = Rng(3);
    let files = mixed::write_series(dir.path(), &mut rng, 1, 500, 1_764_000_000_000_000_000);
    build_index(&files[0]).unwrap();
    let raw = std::fs::read(index_path(&files[0])).unwrap();
    let idx = Index::parse(raw.clone()).unwrap();
    assert_eq!(idx.summary.packets, 500);
    assert!(idx.key_count(Kind::V4) > 50);

    let mut bad = raw.clone();
    bad[0] = b'X';
    assert_eq!(Index::parse(bad).unwrap_err(), IndexError::NotIndex);
    // Versions 2 (a whole-file checksum), 3 (fixed-width key tables), 4
    // (LEB128 posting lists) and 5 (no packet positions), and one from the
    // future.
    for v in [2, 3, 4, 5, 7] {
        let mut bad = raw.clone();
        bad[8] = v;
        let e = Index::parse(bad).unwrap_err();
        assert_eq!(e, IndexError::Version(v as u16));
        assert!(
            e.to_string().contains(&format!("version {v}")) && e.to_string().contains("--force")
        );
    }
    // Every single flipped byte and every cut is refused (checksums,
    // lengths): a byte of a key block when a lookup reads the block.
    assert!(open_and_read_all(raw.clone()).is_ok());
    let mut resealed = raw.clone();
    assert!(reseal(&mut resealed));
    assert_eq!(resealed, raw, "reseal recomputes the same checksums");
    for i in 0..raw.len() {
        let mut bad = raw.clone();
        bad[i] ^= 0x20;
        assert!(open_and_read_all(bad).is_err(), "byte {i} flipped");
    }
    for n in 0..raw.len() {
        assert!(Index::parse(raw[..n].to_vec()).is_err(), "cut at {n}");
    }
    // Forged files with a right checksum: refused or parsed, never a panic,
    // and lookups on what parses do not panic either.
    let mut parsed = 0;
    for _ in 0..20_000 {
        let mut bad = raw.clone();
        for _ in 0..1 + rng.below(4) {
            let at = 12 + rng.below(bad.len() as u64 - 16) as usize;
            bad[at] = rng.next() as u8;
        }
        if rng.chance(20) {
            let cut = 72 + rng.below(bad.len() as u64 - 76) as usize;
            bad.drain(cut..bad.len() - 4);
        }
        let body = (bad.len() - 72 - 4) as u64;
        if rng.chance(50) {
            // Or the head's length told to cover the cut file.
            bad[64..72].copy_from_slice(&body.to_le_bytes());
        }
        reseal(&mut bad);
        if let Ok(i) = Index::parse(bad) {
            parsed += 1;
            let _ = i.all_groups();
            let mut v = vec![false; i.group_count()];
            for kind in Kind::ALL {
                let _ = i.mark(kind, 0, u128::MAX, &mut v);
            }
            for g in 0..i.group_count() {
                let _ = i.epoch_of(g);
            }
        }
    }
    println!("{parsed} of 20000 forged files parsed");

    // Stale: the capture changed since.
    assert!(load_index(&files[0]).is_ok());
    let mut cap = std::fs::read(&files[0]).unwrap();
    cap.extend_from_slice(&[0; 16]);
    std::fs::write(&files[0], cap).unwrap();
    assert!(matches!(load_index(&files[0]), Err(Unusable::Stale)));
    std::fs::remove_file(index_path(&files[0])).unwrap();
    assert!(matches!(load_index(&files[0]), Err(Unusable::Missing)));
}

/// Groups in several pages (a fence and a checked page of 256 each) come
/// back as written, whatever their times (out of order too); every flipped
/// byte of such an index is refused when it and its pages are read.
#[test]
fn pages_of_groups() {
    use ringcap_index::file::{encode, Contents, Epoch, Group, Summary};
    let mut rng = Rng(11);
    for n in [0usize, 1, 255, 256, 257, 1000] {
        let (mut off, mut ts) = (24u64, 1_764_000_000_000_000_000u64);
        let groups: Vec<Group> = (0..n)
            .map(|_| {
                off += 1 + rng.below(40_000);
                ts = ts.wrapping_add(rng.below(1 << 30)).wrapping_sub(1 << 29);
                let span = rng.below(1 << 20);
                Group {
                    offset: off,
                    min_ts: ts,
                    max_ts: ts + span,
                    records: 1 + rng.below(32) as u32,
                }
            })
            .collect();
        let c = Contents {
            summary: Some(Summary {
                capture_len: off + 100,
                head_crc: 7,
                packets: groups.iter().map(|g| g.records as u64).sum(),
                first_ts: groups.first().map_or(0, |g| g.min_ts),
                min_ts: groups.iter().map(|g| g.min_ts).min().unwrap_or(0),
                max_ts: groups.iter().map(|g| g.max_ts).max().unwrap_or(0),
            }),
            epochs: if n == 0 {
                Vec::new()
            } else {
                vec![Epoch {
                    group: 0,
                    sections: 1,
                    interfaces: 1,
                }]
            },
            groups: groups.clone(),
            postings: Default::default(),
            positions: Vec::new(),
        };
        let raw = encode(&c);
        let i = Index::parse(raw.clone()).unwrap();
        assert_eq!(i.group_count(), n);
        assert_eq!(i.pages(), n.div_ceil(256));
        assert_eq!(i.all_groups().unwrap(), groups);
        for p in 0..i.pages() {
            let page = i.page(p);
            let gs = &groups[page.groups.clone()];
            assert_eq!(page.offset, gs[0].offset);
            assert_eq!(page.min_ts, gs.iter().map(|g| g.min_ts).min().unwrap());
            assert_eq!(page.max_ts, gs.iter().map(|g| g.max_ts).max().unwrap());
            let end = groups.get(page.groups.end).map_or(off + 100, |g| g.offset);
            assert_eq!(i.page_end(p), end);
        }
        if n == 1000 {
            for at in 0..raw.len() {
                let mut bad = raw.clone();
                bad[at] ^= 0x04;
                assert!(
                    Index::parse(bad).and_then(|i| i.all_groups()).is_err(),
                    "byte {at} flipped"
                );
            }
        }
    }
}

/// Packet positions (format 6) come back as written, a key without them
/// has none, and every flipped byte of an index holding them is refused
/// when they are read; forged ones (checksums fixed up) never panic.
#[test]
fn positions_round_trip_and_refusals() {
    use ringcap_index::file::{encode, Contents, Epoch, Group, Summary};
    use ringcap_index::keys::Key;
    let mut rng = Rng(29);
    let capture_len = 5_000_000u64;
    let groups: Vec<Group> = (0..300)
        .map(|i| Group {
            offset: 24 + i * 16_000,
            min_ts: i,
            max_ts: i,
            records: 32,
        })
        .collect();
    let mut positions = Vec::new();
    for (kind, value, n) in [
        (Kind::V4, 0xc612_0001u128, 1usize),
        (Kind::V6, 0x2001_0db8 << 96 | 5, 70),
        (Kind::Port, 3306, 400),
    ] {
        let mut at: Vec<u64> = (0..n).map(|_| 24 + rng.below(capture_len - 24)).collect();
        at.sort_unstable();
        at.dedup();
        positions.push((Key { kind, value }, at));
    }
    let c = Contents {
        summary: Some(Summary {
            capture_len,
            head_crc: 0,
            packets: 9600,
            first_ts: 0,
            min_ts: 0,
            max_ts: 299,
        }),
        groups,
        epochs: vec![Epoch {
            group: 0,
            sections: 1,
            interfaces: 1,
        }],
        postings: Default::default(),
        positions: positions.clone(),
    };
    let raw = encode(&c);
    let i = open_and_read_all(raw.clone()).unwrap();
    let keys: Vec<Key> = positions.iter().map(|(k, _)| *k).collect();
    assert_eq!(i.keys_with_positions(), keys);
    let mut at = Vec::new();
    for (k, want) in &positions {
        assert!(i.positions(*k, &mut at).unwrap());
        assert_eq!(&at, want);
        assert_eq!(i.positions_count(*k), Some(want.len() as u64));
    }
    let other = Key {
        kind: Kind::Port,
        value: 3307,
    };
    assert!(!i.positions(other, &mut at).unwrap() && at.is_empty());
    let mut resealed = raw.clone();
    assert!(reseal(&mut resealed));
    assert_eq!(resealed, raw);
    for b in 0..raw.len() {
        let mut bad = raw.clone();
        bad[b] ^= 0x04;
        assert!(open_and_read_all(bad).is_err(), "byte {b} flipped");
    }
    for _ in 0..20_000 {
        let mut bad = raw.clone();
        for _ in 0..1 + rng.below(3) {
            let at = 12 + rng.below(bad.len() as u64 - 16) as usize;
            bad[at] = rng.next() as u8;
        }
        reseal(&mut bad);
        if let Ok(i) = Index::parse(bad) {
            for k in i.keys_with_positions() {
                let _ = i.positions(k, &mut at);
                let len = i.summary.capture_len;
                assert!(at.windows(2).all(|w| w[0] < w[1]) && at.iter().all(|&p| p < len));
            }
        }
    }
}
