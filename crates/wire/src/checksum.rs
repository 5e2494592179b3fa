//! The Internet checksum (RFC 1071): sums, and incremental updates (RFC
//! 1624) that correct a checksum from the old and new bytes alone.
//!
//! An incremental update carries whatever the input checksum held into the
//! result: if that was not right for the input (a checksum-offload partial
//! sum, a wrong value), the result is a function of the old bytes too. The
//! privacy rewrite therefore never uses it on fields it hides; it
//! recomputes with [`sum`] (see `ringcap_privacy`'s crate docs).

/// One's-complement sum of `bytes` as big-endian 16-bit words, the first
/// byte a high byte (an odd tail is padded with zero), folded to 16 bits.
///
/// Summed 4 bytes at a time in the machine's byte order and swapped at the
/// end: the one's-complement sum does not depend on byte order but for
/// that swap (RFC 1071, 2.B). Privacy rewrites recompute whole segments'
/// checksums with it.
#[inline]
pub fn sum(bytes: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut words = bytes.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u64::from(u16::from_ne_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(u16::from_ne_bytes([*last, 0]));
    }
    let folded = fold(acc);
    if cfg!(target_endian = "little") {
        folded.swap_bytes()
    } else {
        folded
    }
}

/// Folds a wide one's-complement accumulator to 16 bits.
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// One's-complement addition.
#[inline]
pub fn add(a: u16, b: u16) -> u16 {
    fold(u64::from(a) + u64::from(b))
}

/// The difference `new - old` of two sums, as a one's-complement value.
#[inline]
pub fn delta(old: u16, new: u16) -> u16 {
    add(new, !old)
}

/// A checksum field value after the bytes it covers changed by `d`
/// (RFC 1624, eqn. 3: HC' = ~(~HC + m' - m)).
#[inline]
pub fn update(check: u16, d: u16) -> u16 {
    !add(!check, d)
}

/// The sum of a TCP, UDP or ICMPv6 pseudo-header (RFC 793, RFC 768,
/// RFC 8200 section 8.1): the two addresses (4 or 16 bytes each), the
/// protocol and the upper-layer length; not complemented.
pub fn pseudo_header(src: &[u8], dst: &[u8], proto: u8, len: u32) -> u16 {
    let s = add(add(sum(src), sum(dst)), u16::from(proto));
    add(s, add((len >> 16) as u16, len as u16))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full recomputation, for comparison.
    fn full(bytes: &[u8], field: usize) -> u16 {
        let mut b = bytes.to_vec();
        b[field] = 0;
        b[field + 1] = 0;
        !sum(&b)
    }

    #[test]
    fn incremental_equals_full_recomputation() {
        // An IPv4 header (RFC 1071's example style), checksum at 10.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0x00,
            0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let c = full(&h, 10);
        assert_eq!(c, 0xb861);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        // Change the source address and the odd-aligned TTL byte.
        let old = sum(&h[12..16]);
        h[12..16].copy_from_slice(&[198, 18, 7, 9]);
        let mut d = delta(old, sum(&h[12..16]));
        let old_ttl = sum(&[h[8], 0]);
        h[8] = 0;
        d = add(d, delta(old_ttl, sum(&[h[8], 0])));
        let c2 = update(c, d);
        assert_eq!(c2, full(&h, 10));
        h[10..12].copy_from_slice(&c2.to_be_bytes());
        assert_eq!(sum(&h), 0xffff);
    }

    /// The straightforward big-endian word sum.
    fn slow_sum(bytes: &[u8]) -> u16 {
        let mut acc = 0u64;
        for c in bytes.chunks(2) {
            acc += u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0));
        }
        fold(acc)
    }

    #[test]
    fn sum_equals_the_word_by_word_sum() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut buf = vec![0u8; 1600];
        for round in 0..3000 {
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = if round % 3 == 0 { 0xff } else { x as u8 };
            }
            let n = (x % 1600) as usize;
            let start = (x >> 20) as usize % 4;
            let b = &buf[start..n.max(start)];
            assert_eq!(sum(b), slow_sum(b), "len {} start {start}", b.len());
        }
        assert_eq!(sum(&[]), 0);
        assert_eq!(sum(&[0xff; 64]), 0xffff);
    }

    #[test]
    fn odd_offset_is_the_byte_swapped_delta() {
        let a = [0x12u8, 0x34, 0x56];
        let b = [0x9au8, 0xbc, 0xde];
        let even = delta(sum(&a), sum(&b));
        // The same change one byte later (preceded by a byte that does not change).
        let odd = delta(sum(&[0, 0x12, 0x34, 0x56]), sum(&[0, 0x9a, 0xbc, 0xde]));
        assert_eq!(odd, even.swap_bytes());
    }
}
