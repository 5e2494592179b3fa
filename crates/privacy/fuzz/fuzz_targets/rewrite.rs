//! The header walk and the privacy rewrite on arbitrary bytes. The first
//! byte picks the fields hidden (a mask from the vocabulary, and whether
//! addresses are anonymized instead); the rest is the frame. Nothing may
//! panic or index out of bounds, the walk stays inside the frame, and the
//! rewrite keeps the frame's length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringcap_privacy::fields::{FieldSet, ALL};
use ringcap_privacy::{Key, Privacy};
use ringcap_wire::header_len;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let h = header_len(frame, usize::MAX);
    assert!(h <= frame.len());
    assert_eq!(header_len(frame, 20), h.min(20));
    // Bits of `sel` choose fields: all of them cycle through the vocabulary.
    let picked: Vec<_> = ALL
        .iter()
        .enumerate()
        .filter(|(i, _)| sel >> (i % 7) & 1 == 1)
        .map(|(_, f)| *f)
        .collect();
    let mask = FieldSet::of(&picked);
    let anon = (sel & 0x80 != 0).then(|| {
        (
            Key::from_bytes([sel; 32]),
            FieldSet::parse("ip.addr,eth.addr").unwrap(),
        )
    });
    let Ok(p) = Privacy::new(mask.minus(FieldSet::parse("ip.addr,eth.addr").unwrap()), anon)
    else {
        return;
    };
    let mut f = frame.to_vec();
    p.transform().rewrite_ethernet(&mut f);
    assert_eq!(f.len(), frame.len());
    if let Ok(p) = Privacy::new(mask, None) {
        let mut g = frame.to_vec();
        p.transform().rewrite_ethernet(&mut g);
        assert_eq!(g.len(), frame.len());
    }
});
