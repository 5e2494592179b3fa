//! Unsigned LEB128 numbers: 7 bits a byte, low bits first.

/// Appends `v`.
pub fn put(out: &mut Vec<u8>, v: u64) {
    put_wide(out, v as u128)
}

/// Reads a number at `*p`, moving `*p` past it; `None` if cut short or
/// longer than 64 bits.
pub fn get(b: &[u8], p: &mut usize) -> Option<u64> {
    let at = *p;
    let v = get_wide(b, p).and_then(|v| u64::try_from(v).ok());
    if v.is_none() {
        *p = at;
    }
    v
}

/// Appends a 128-bit `v` (an address delta of the key tables; [`put`] is
/// this for 64 bits).
pub fn put_wide(out: &mut Vec<u8>, mut v: u128) {
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
