//! Fuzz target: arbitrary bytes as an index file for ringcap-index's
//! reader, as they are and with every checksum recomputed (`reseal`: the
//! checksums catch damage, the bounds checks must catch everything else,
//! and random bytes rarely get past a CRC). What parses is read the way a
//! query reads it: every page of groups, every kind's key blocks over a few
//! ranges, the lists of packet positions, the epochs. Nothing may panic, hang or allocate beyond what the
//! input justifies.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ringcap_index::file::{reseal, Index};
use ringcap_index::keys::Kind;

fuzz_target!(|data: &[u8]| {
    read(data.to_vec(), data);
    let mut sealed = data.to_vec();
    if reseal(&mut sealed) && sealed != data {
        read(sealed, data);
    }
});

fn read(raw: Vec<u8>, data: &[u8]) {
    let len = raw.len();
    let index = match Index::parse(raw) {
        Ok(i) => i,
        Err(e) => return check_error_text(&e.to_string()),
    };
    let groups = index.group_count();
    assert!(groups <= len / 4, "{groups} groups in {len} bytes");
    let mut page = Vec::new();
    let mut read_pages = 0;
    for i in 0..index.pages() {
        let p = index.page(i);
        let end = index.page_end(i);
        index.will_need_page(i);
        match index.read_page(i, &mut page) {
            Ok(()) => {
                read_pages += 1;
                assert_eq!(page.len(), p.groups.len());
                for g in &page {
                    assert!(g.offset >= p.offset && g.offset <= end);
                    assert!(g.min_ts <= g.max_ts);
                }
            }
            Err(e) => check_error_text(&e.to_string()),
        }
    }
    match index.all_groups() {
        Ok(all) => {
            assert_eq!(read_pages, index.pages());
            assert_eq!(all.len(), groups);
        }
        Err(e) => check_error_text(&e.to_string()),
    }
    // A few ranges: everything, nothing, single values, an inverted one,
    // and one taken from the input's last bytes.
    let mut tail = [0u8; 32];
    let n = data.len().min(32);
    tail[..n].copy_from_slice(&data[data.len() - n..]);
    let a = u128::from_le_bytes(tail[..16].try_into().unwrap());
    let b = u128::from_le_bytes(tail[16..].try_into().unwrap());
    let ranges = [
        (0, u128::MAX),
        (0, 0),
        (53, 53),
        (0xC612_0000, 0xC613_FFFF),
        (u128::MAX, u128::MAX),
        (10, 5),
        (a.min(b), a.max(b)),
    ];
    let mut out = vec![false; groups];
    for kind in Kind::ALL {
        let _ = index.key_count(kind);
        for (lo, hi) in ranges {
            let _ = index.blocks_in(kind, lo, hi);
            index.will_need_keys(kind, lo, hi);
            out.fill(false);
            if let Err(e) = index.mark(kind, lo, hi, &mut out) {
                check_error_text(&e.to_string());
            }
        }
    }
    let mut at = Vec::new();
    for key in index.keys_with_positions() {
        let _ = index.positions_count(key);
        match index.positions(key, &mut at) {
            Ok(listed) => {
                assert!(listed);
                let len = index.summary.capture_len;
                assert!(at.windows(2).all(|w| w[0] < w[1]) && at.iter().all(|&p| p < len));
            }
            Err(e) => check_error_text(&e.to_string()),
        }
    }
    if groups > 0 {
        for g in [0, groups / 2, groups - 1] {
            let e = index.epoch_of(g);
            assert!(e.group as usize <= g);
        }
    }
    let _ = index.into_raw();
}

fn check_error_text(text: &str) {
    assert!(text.len() < 4096, "error text of {} bytes", text.len());
}
