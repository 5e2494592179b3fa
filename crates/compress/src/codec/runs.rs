//! The encoder's byte runs: which header bytes differ from the prediction
//! (compared a word at a time, outside the coded fields), and how the runs
//! are written. Separate from the encoder's record logic because it is
//! bit arithmetic with its own tests.

use super::model::{put_small, Models, M_GAP, M_RUNLEN, M_RUNS};
use crate::layout::{Layout, MAXH};
use crate::rc;

/// 8-byte words of a header, the bits outside the coded fields set.
type Mask = [u64; MAXH / 8];

/// The masks of the last few layouts seen (the encoder's; a trace has few
/// header shapes).
#[derive(Default)]
pub(super) struct Masks {
    layouts: [Option<Layout>; 4],
    masks: [Mask; 4],
    next: usize,
}

impl Masks {
    #[inline]
    pub(super) fn get(&mut self, l: &Layout) -> &Mask {
        let i = match self.layouts.iter().position(|k| k.as_ref() == Some(l)) {
            Some(i) => i,
            None => {
                let i = self.next;
                self.next = (i + 1) % self.layouts.len();
                self.layouts[i] = Some(*l);
                self.masks[i] = field_mask(l);
                i
            }
        };
        &self.masks[i]
    }
}

/// Which header bytes of layout `l` are outside the fields
/// [`put_fields`](super::predict::put_fields) writes and the IPv4 header
/// checksum.
fn field_mask(l: &Layout) -> Mask {
    let mut b = [0xffu8; MAXH];
    let mut clear = |at: usize, n: usize| b[at..at + n].fill(0);
    clear(l.ip_len_at(), 2);
    if l.v4() {
        // ID, flags and fragment offset, header checksum.
        clear(l.l3 as usize + 4, 4);
        clear(l.l3 as usize + 10, 2);
    }
    if l.tcp() || l.udp() {
        clear(l.l4_csum_at(), 2);
    }
    if l.udp() {
        clear(l.l4 as usize + 4, 2);
    }
    if l.tcp() {
        // Sequence and acknowledgement numbers, window.
        clear(l.l4 as usize + 4, 8);
        clear(l.l4 as usize + 14, 2);
        if l.ts_opt != 0 {
            clear(l.ts_opt as usize, 8);
        }
    }
    let mut m = [0u64; MAXH / 8];
    for (w, c) in m.iter_mut().zip(b.chunks_exact(8)) {
        *w = u64::from_ne_bytes(c.try_into().unwrap_or_default());
    }
    m
}

/// Whether `a` (at most [`MAXH`] bytes) differs from the start of `b`
/// in a byte that `mask` keeps.
#[inline]
pub(super) fn differs(a: &[u8], b: &[u8; MAXH], mask: &Mask) -> bool {
    let n = a.len().min(MAXH);
    let a = &a[..n];
    let mut x = 0u64;
    let mut i = 0;
    while i + 8 <= n {
        let wa = u64::from_ne_bytes(a[i..i + 8].try_into().unwrap_or_default());
        let wb = u64::from_ne_bytes(b[i..i + 8].try_into().unwrap_or_default());
        x |= (wa ^ wb) & mask[i / 8];
        i += 8;
    }
    if i < n {
        let m = mask[i / 8].to_ne_bytes();
        for (k, (p, q)) in a[i..].iter().zip(&b[i..n]).enumerate() {
            x |= ((p ^ q) & m[k & 7]) as u64;
        }
    }
    x != 0
}

/// Bit `i` set where byte `i` of `p` and `a` (at most [`MAXH`] bytes, as
/// long as each other) differ: eight bytes compared at a time.
fn diff_bits(p: &[u8], a: &[u8]) -> [u64; MAXH.div_ceil(64)] {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut bits = [0u64; MAXH.div_ceil(64)];
    let n = a.len().min(p.len()).min(MAXH);
    let mut i = 0;
    while i + 8 <= n {
        let word = |s: &[u8]| u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or_default());
        let x = word(a) ^ word(p);
        // The top bit of each byte of `x` that is not zero, then those
        // eight bits gathered into the low byte.
        let top = (((x & LOW7) + LOW7) | x) & !LOW7;
        let mask = (top >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
        bits[i / 64] |= mask << (i % 64);
        i += 8;
    }
    while i < n {
        bits[i / 64] |= u64::from(a[i] != p[i]) << (i % 64);
        i += 1;
    }
    bits
}

/// The first position at or after `i` (below `n`) whose bit in `bits` is
/// `set`, or `n`.
fn next_bit(bits: &[u64], mut i: usize, n: usize, set: bool) -> usize {
    while i < n {
        let Some(&word) = bits.get(i / 64) else {
            return n;
        };
        let w = if set { word } else { !word } >> (i % 64);
        if w != 0 {
            return (i + w.trailing_zeros() as usize).min(n);
        }
        i = (i / 64 + 1) * 64;
    }
    n
}

/// How many runs of set bits `bits` holds: a run starts where a set bit
/// follows a clear one.
fn count_runs(bits: &[u64]) -> u64 {
    let mut runs = 0u64;
    let mut carry = 0u64;
    for &w in bits {
        runs += u64::from((w & !(w << 1 | carry)).count_ones());
        carry = w >> 63;
    }
    runs
}

/// The first run of set bits of `bits` at or after `from` (below `n`):
/// (start, end).
fn run_from(bits: &[u64], from: usize, n: usize) -> Option<(usize, usize)> {
    let start = next_bit(bits, from, n, true);
    (start < n).then(|| (start, next_bit(bits, start, n, false)))
}

/// Byte runs where `p` (the prediction) and `a` (the packet) differ: their
/// number, then for each the gap since the previous run's end, its length
/// less one, and its bytes.
///
/// `new`: the record opens a context (format version 4 models its runs,
/// see [`Models::new_byte`]).
pub(super) fn write_runs(e: &mut rc::Encoder, m: &mut Models, p: &[u8], a: &[u8], new: bool) {
    // The headers and what follows them, at most MAXH (see `push`).
    debug_assert!(a.len() <= MAXH && p.len() == a.len());
    let n = a.len();
    let bits = diff_bits(p, a);
    e.uint(&mut m.field[M_RUNS], count_runs(&bits));
    let mut last = 0;
    while let Some((start, end)) = run_from(&bits, last, n) {
        if new {
            put_small(
                e,
                &mut m.new_gap,
                &mut m.field[M_GAP],
                (start - last) as u64,
            );
            put_small(
                e,
                &mut m.new_len,
                &mut m.field[M_RUNLEN],
                (end - start - 1) as u64,
            );
            for (i, &b) in a[start..end].iter().enumerate() {
                e.tree(&mut m.new_byte[(start + i) & 15], b as u32);
            }
        } else {
            e.uint(&mut m.field[M_GAP], (start - last) as u64);
            e.uint(&mut m.field[M_RUNLEN], (end - start - 1) as u64);
            for &b in &a[start..end] {
                e.direct(b as u32, 8);
            }
        }
        last = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (start, end) of each run of differing bytes, byte by byte.
    fn runs_bytewise(p: &[u8], a: &[u8]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < a.len() {
            if p[i] == a[i] {
                i += 1;
                continue;
            }
            let s = i;
            while i < a.len() && p[i] != a[i] {
                i += 1;
            }
            out.push((s, i));
        }
        out
    }

    /// The runs and their count as `write_runs` finds them.
    fn runs_by_bits(p: &[u8], a: &[u8]) -> (Vec<(usize, usize)>, u64) {
        let bits = diff_bits(p, a);
        let mut out = Vec::new();
        let mut last = 0;
        while let Some((s, e)) = run_from(&bits, last, a.len()) {
            out.push((s, e));
            last = e;
        }
        (out, count_runs(&bits))
    }

    proptest! {
        #[test]
        fn runs_found_word_by_word_are_the_bytewise_ones(
            len in 0usize..=MAXH,
            seed in any::<u64>(),
            flips in proptest::collection::vec((0usize..MAXH, 1u8..=255), 0..40),
        ) {
            let p: Vec<u8> = (0..len).map(|i| (seed >> (i % 57)) as u8 ^ i as u8).collect();
            let mut a = p.clone();
            for (at, x) in flips {
                if at < len {
                    a[at] ^= x;
                }
            }
            let want = runs_bytewise(&p, &a);
            let (got, counted) = runs_by_bits(&p, &a);
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(counted, want.len() as u64);
        }
    }

    #[test]
    fn runs_across_word_and_bit_word_boundaries() {
        for (len, diffs) in [
            (160, vec![63, 64, 127, 128, 159]),
            (160, (60..70).collect::<Vec<_>>()),
            (130, (0..130).collect()),
            (7, vec![6]),
            (64, vec![7, 8]),
        ] {
            let p = vec![0u8; len];
            let mut a = p.clone();
            for d in diffs {
                a[d] = 1;
            }
            let (got, counted) = runs_by_bits(&p, &a);
            assert_eq!(got, runs_bytewise(&p, &a), "len {len}");
            assert_eq!(counted, got.len() as u64, "len {len}");
        }
    }
}
