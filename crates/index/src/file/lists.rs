//! How a posting list is coded: Elias-Fano, byte-aligned per list.
//!
//! A list is `n` distinct, increasing group numbers below `universe` (the
//! file's group count). Each number is split into `low` bits (the
//! [`low_bits`] of `n` and `universe`) kept as they are, one after another,
//! and the rest, `high`, coded in unary: bit `high + i` of a second bit
//! string is set for the `i`th number. So a list takes
//! `n × low + n + (universe − 1) >> low` bits, rounded up to whole bytes,
//! about `2 + log2(universe / n)` bits a number — within a bit of the
//! entropy of `n` random groups among `universe` — and its length follows
//! from `n` and `universe` alone: a reader walking a key block skips a list
//! it does not want without decoding it, and the file needs no length per
//! list.
//!
//! Why not LEB128 gaps (index format 4): a typical address of a busy file
//! is in ~10 of ~21,000 groups, gaps of ~2,000 that take 2 bytes each and a
//! length byte besides (16 + 8 bits against ~13 here), and the lists of
//! common keys (a port in every group) take a byte a group against ~2 bits.
//! Why by hand: a library's Elias-Fano (sucds, vers) keeps its own
//! word-aligned layout with a header per sequence, more than the whole list
//! costs here, for ~200,000 lists of ~10 numbers in each file.
//!
//! Bits are numbered from the least significant bit of the first byte. A
//! list is refused (never a panic) when its bits do not decode to exactly
//! `n` increasing numbers below `universe` with every bit after the last
//! one clear, so a damaged or forged list is found, not misread.

/// Low bits of each number of a list of `n` numbers below `universe`:
/// ⌊log2(universe / n)⌋, 0 when `n` ≥ `universe`.
pub(crate) fn low_bits(n: u64, universe: u64) -> u32 {
    match universe.checked_div(n) {
        Some(q) if q > 1 => 63 - q.leading_zeros(),
        _ => 0,
    }
}

/// Bytes a list of `n` numbers below `universe` takes (0 for none); `None`
/// if that is more than a file could hold.
pub(crate) fn coded_len(n: u64, universe: u64) -> Option<usize> {
    if n == 0 {
        return Some(0);
    }
    let l = low_bits(n, universe);
    let bits = n
        .checked_mul(l as u64 + 1)?
        .checked_add(universe.saturating_sub(1) >> l)?;
    usize::try_from(bits.div_ceil(8)).ok()
}

/// Appends the list `groups` (increasing, each below `universe`).
pub(crate) fn encode(groups: &[u32], universe: u32, out: &mut Vec<u8>) {
    encode_with(
        groups.len(),
        universe as u64,
        groups.iter().map(|&g| g as u64),
        out,
    )
}

/// [`encode`] of `n` wider numbers (packet positions in a capture file,
/// `file/exact.rs`): increasing, each below `universe`.
pub(crate) fn encode_with(
    n: usize,
    universe: u64,
    numbers: impl Iterator<Item = u64>,
    out: &mut Vec<u8>,
) {
    let Some(len) = coded_len(n as u64, universe) else {
        return;
    };
    let l = low_bits(n as u64, universe);
    if l > 56 {
        return;
    }
    let start = out.len();
    out.resize(start + len, 0);
    let b = &mut out[start..];
    let high_at = n * l as usize;
    let mut prev = None;
    for (i, g) in numbers.take(n).enumerate() {
        debug_assert!(g < universe && prev.is_none_or(|p| g > p));
        prev = Some(g);
        set_bits(b, i * l as usize, g & low_mask(l), l);
        set_bits(b, high_at + (g >> l) as usize + i, 1, 1);
    }
}

/// Calls `each` with every number of the list of `n` numbers below
/// `universe` coded in `b` (exactly [`coded_len`] bytes), in order.
pub(crate) fn decode(
    b: &[u8],
    n: u64,
    universe: u64,
    mut each: impl FnMut(u32),
) -> Result<(), &'static str> {
    if universe > u32::MAX as u64 + 1 {
        return Err("posting list of more groups than a file holds");
    }
    decode_wide(b, n, universe, |v| each(v as u32))
}

/// [`decode`] of wider numbers (below a `universe` whose low bits fit the
/// reads of 56 bits: any file size up to 2^56 bytes).
pub(crate) fn decode_wide(
    b: &[u8],
    n: u64,
    universe: u64,
    mut each: impl FnMut(u64),
) -> Result<(), &'static str> {
    if coded_len(n, universe) != Some(b.len()) {
        return Err("posting list of the wrong length");
    }
    if n == 0 {
        return Ok(());
    }
    let l = low_bits(n, universe);
    if l > 56 {
        return Err("posting list of numbers too wide");
    }
    let high_at = n as usize * l as usize;
    let total = b.len() * 8;
    let (mut pos, mut i, mut prev) = (high_at, 0usize, None);
    while i < n as usize {
        if pos >= total {
            return Err("posting list cut short");
        }
        let w = (total - pos).min(56) as u32;
        let word = get_bits(b, pos, w);
        if word == 0 {
            pos += w as usize;
            continue;
        }
        pos += word.trailing_zeros() as usize;
        let high = (pos - high_at - i) as u64;
        let v = high << l | get_bits(b, i * l as usize, l);
        if v >= universe || prev.is_some_and(|p| v <= p) {
            return Err("posting out of order or past the last group");
        }
        each(v);
        prev = Some(v);
        pos += 1;
        i += 1;
    }
    // Nothing may follow the last number: a list has one coding.
    while pos < total {
        let w = (total - pos).min(56) as u32;
        if get_bits(b, pos, w) != 0 {
            return Err("posting list has bits past its last group");
        }
        pos += w as usize;
    }
    Ok(())
}

fn low_mask(l: u32) -> u64 {
    (1u64 << l) - 1
}

/// ORs the `w` (≤ 56) low bits of `v` into `b` from bit `at` (in range).
fn set_bits(b: &mut [u8], at: usize, v: u64, w: u32) {
    if w == 0 {
        return;
    }
    let mut x = v << (at % 8);
    for byte in &mut b[at / 8..] {
        *byte |= x as u8;
        x >>= 8;
        if x == 0 {
            break;
        }
    }
}

/// The `w` (≤ 56) bits of `b` from bit `at`; bits past its end read 0.
fn get_bits(b: &[u8], at: usize, w: u32) -> u64 {
    if w == 0 {
        return 0;
    }
    let mut v = [0u8; 8];
    let from = (at / 8).min(b.len());
    let to = (from + 8).min(b.len());
    v[..to - from].copy_from_slice(&b[from..to]);
    (u64::from_le_bytes(v) >> (at % 8)) & low_mask(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(groups: &[u32], universe: u32) -> Vec<u8> {
        let mut b = vec![0xAA];
        encode(groups, universe, &mut b);
        let b = b.split_off(1);
        assert_eq!(
            b.len(),
            coded_len(groups.len() as u64, universe as u64).unwrap()
        );
        let mut got = Vec::new();
        decode(&b, groups.len() as u64, universe as u64, |g| got.push(g)).unwrap();
        assert_eq!(got, groups);
        b
    }

    /// A small xorshift, so the cases are the same every run.
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn random_lists_round_trip_and_any_bit_flip_is_refused_or_still_a_list() {
        let mut s = 0x2545_f491_4f6c_dd1d;
        for _ in 0..3000 {
            let universe = 1 + (rng(&mut s) % 50_000) as u32;
            let want = 1 + rng(&mut s) % (universe as u64).min(300);
            let mut g: Vec<u32> = (0..want)
                .map(|_| (rng(&mut s) % universe as u64) as u32)
                .collect();
            g.sort_unstable();
            g.dedup();
            let b = round_trip(&g, universe);
            // A flipped bit gives an error or another valid list of n
            // numbers below the universe: never a panic or a number past it.
            let mut bad = b.clone();
            let bit = (rng(&mut s) % (b.len() as u64 * 8)) as usize;
            bad[bit / 8] ^= 1 << (bit % 8);
            let mut got = Vec::new();
            if decode(&bad, g.len() as u64, universe as u64, |x| got.push(x)).is_ok() {
                assert_eq!(got.len(), g.len());
                assert!(got.windows(2).all(|w| w[0] < w[1]));
                assert!(got.iter().all(|&x| x < universe));
            }
        }
    }

    #[test]
    fn edges_round_trip() {
        round_trip(&[0], 1);
        round_trip(&[5], 6);
        round_trip(&(0..1000).collect::<Vec<_>>(), 1000);
        round_trip(&[0, u32::MAX - 1], u32::MAX);
        round_trip(&[u32::MAX - 1], u32::MAX);
        round_trip(&[], 7);
    }

    #[test]
    fn sizes_are_near_two_bits_plus_the_log_of_the_gap() {
        // ~10 groups of 21,120: 11 low bits, 130 bits, 17 bytes (LEB128
        // gaps took ~20 and a length byte).
        assert_eq!(coded_len(10, 21_120), Some(17));
        // Every group: two bits each.
        assert_eq!(coded_len(21_120, 21_120), Some(5_280));
    }

    #[test]
    fn wrong_lengths_counts_and_trailing_bits_are_refused() {
        let b = round_trip(&[3, 9, 200], 1000);
        assert!(decode(&b[..b.len() - 1], 3, 1000, |_| ()).is_err());
        assert!(decode(&b, 2, 1000, |_| ()).is_err());
        let mut extra = b.clone();
        *extra.last_mut().unwrap() |= 0x80;
        assert!(decode(&extra, 3, 1000, |_| ()).is_err());
        // More numbers than the universe holds.
        assert!(decode(&[0xff; 4], 20, 10, |_| ()).is_err());
    }
}
