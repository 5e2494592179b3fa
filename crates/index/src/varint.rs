//! Unsigned LEB128 numbers: 7 bits a byte, low bits first.
//!
//! The 64-bit loops are the common case (every group number of every
//! posting list, written and read once more when big files are merged in
//! runs): in 128-bit arithmetic they cost ~2x as much (`perf`, indexing 2 M
//! packets), so the wide forms use them whenever the number fits.

/// Appends `v`.
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes [`put`] takes for `v`.
pub fn len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads a number at `*p`, moving `*p` past it; `None` if cut short or
/// longer than 64 bits (`*p` is then left where it was).
pub fn get(b: &[u8], p: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for (i, &byte) in b.get(*p..)?.iter().take(10).enumerate() {
        let bits = (byte & 0x7f) as u64;
        if i == 9 && bits > 1 {
            return None;
        }
        v |= bits << (7 * i);
        if byte & 0x80 == 0 {
            *p += i + 1;
            return Some(v);
        }
    }
    None
}

/// Appends a 128-bit `v` (an address delta of the key tables).
pub fn put_wide(out: &mut Vec<u8>, v: u128) {
    if let Ok(v) = u64::try_from(v) {
        return put(out, v);
    }
    let mut v = v;
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a number [`put_wide`] wrote; `None` if cut short or longer than
/// 128 bits.
pub fn get_wide(b: &[u8], p: &mut usize) -> Option<u128> {
    let mut v = 0u128;
    for shift in (0..128).step_by(7) {
        let byte = *b.get(*p)?;
        *p += 1;
        let bits = (byte & 0x7f) as u128;
        if shift == 126 && bits > 3 {
            return None;
        }
        v |= bits << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            let mut p = 0;
            assert_eq!(get(&b, &mut p), Some(v));
            assert_eq!(p, b.len());
        }
        for v in [0, 1, 300, u64::MAX as u128 + 1, u128::MAX] {
            let mut b = Vec::new();
            put_wide(&mut b, v);
            let mut p = 0;
            assert_eq!(get_wide(&b, &mut p), Some(v));
            assert_eq!(p, b.len());
        }
        assert_eq!(get_wide(&[0xff; 19], &mut 0), None);
        let mut over = vec![0xff; 18];
        over.push(0x04);
        assert_eq!(get_wide(&over, &mut 0), None);
        assert_eq!(get(&[0x80], &mut 0), None);
        assert_eq!(get(&[0xff; 11], &mut 0), None);
    }
}
