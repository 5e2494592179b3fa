//! The entropy stage of the compressed format: an adaptive binary range coder
//! (LZMA's coder, written here from its published description; the
//! encoder propagates carries into the bytes already written instead of
//! holding them back, which gives the same bytes) and the few ways the
//! codec binarizes its symbols over it.
//!
//! Every decision is coded with an 11-bit probability that adapts by 1/16
//! of the error after each use, so a field that keeps its value costs a
//! small fraction of a bit and nothing has to be stored per block (the
//! traces the codec sees are often only a few thousand packets long, where
//! a static table per block would cost more than it saves). Probabilities
//! stay within [15, 2033], so the coder's interval never becomes empty.
//!
//! The decoder reads zeros past the end of its input and counts them; the
//! caller turns a record that needed them into a truncation error, so
//! corrupt input never panics and never reads out of bounds.

/// An adaptive probability (of a zero bit), 11 bits.
pub(crate) type Prob = u16;

const BITS: u32 = 11;
const ONE: u16 = 1 << BITS;
/// Initial probability: one half.
pub(crate) const HALF: Prob = ONE / 2;
const SHIFT: u32 = 4;
const TOP: u32 = 1 << 24;

/// Range encoder writing into a byte vector.
///
/// A carry out of `low` is added to the bytes already written (the stream
/// starts with a 0 byte that absorbs it, as the value is below 1): the
/// same bytes as LZMA's encoder, which holds back a byte and a run of 0xff
/// bytes instead.
pub(crate) struct Encoder {
    /// 32 bits and a carry.
    low: u64,
    range: u32,
    /// The stream is `buf[..pos]`; the rest is room, at least
    /// [`RECORD_ROOM`] bytes at the start of each record.
    buf: Vec<u8>,
    pos: usize,
}

/// Room for the coded bytes of any one record: at most 13 flags, 12
/// fields of 64 bits, 160 run bytes of 8 decisions and their gaps and
/// lengths, each decision costing at most 7.1 bits (probabilities stay
/// within [15, 2033] of 2048), stays under 4 KiB.
const RECORD_ROOM: usize = 8 << 10;

impl Encoder {
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(1 << 20);
        buf.resize(2 * RECORD_ROOM, 0);
        let mut e = Encoder {
            low: 0,
            range: u32::MAX,
            buf,
            pos: 0,
        };
        e.reset();
        e
    }

    pub fn reset(&mut self) {
        self.low = 0;
        self.range = u32::MAX;
        self.buf[0] = 0;
        self.pos = 1;
    }

    /// Makes room for one more record's bytes (a few pages at a time:
    /// the capacity grows as a vector's does, but only what is about to
    /// be written is touched).
    #[inline]
    pub fn room(&mut self) {
        if self.buf.len() - self.pos < RECORD_ROOM {
            self.buf.resize(self.pos + 4 * RECORD_ROOM, 0);
        }
    }

    /// The coded stream so far (all of it after [`finish`](Self::finish)).
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.pos]
    }

    /// Bytes the stream will have once flushed (at most 4 more than now).
    pub fn len(&self) -> usize {
        self.pos + 4
    }

    /// Renormalises: if `range` is below 2^24, moves the top byte of
    /// `low` out (adding its carry to the bytes before) and shifts `low`
    /// and `range` up by a byte.
    #[inline(always)]
    fn norm(&mut self, low: &mut u64, range: &mut u32) {
        if *range < TOP {
            if *low >> 32 != 0 {
                self.carry();
            }
            self.buf[self.pos] = (*low >> 24) as u8;
            self.pos += 1;
            *low = (*low & 0x00ff_ffff) << 8;
            *range <<= 8;
        }
    }

    #[cold]
    #[inline(never)]
    fn carry(&mut self) {
        for b in self.buf[..self.pos].iter_mut().rev() {
            *b = b.wrapping_add(1);
            if *b != 0 {
                break;
            }
        }
    }

    /// Codes `bit` with probability `p` on the coder state held in
    /// locals (`low`, `range`: kept in registers over a run of bits).
    #[inline(always)]
    fn step(&mut self, low: &mut u64, range: &mut u32, p: &mut Prob, bit: bool) {
        let q = *p as u32;
        let bound = (*range >> BITS) * q;
        // Without branches on `bit`: slot numbers and checksums are
        // unpredictable, and a mispredicted branch costs more than this.
        let mask = (bit as u32).wrapping_neg();
        *low += (bound & mask) as u64;
        *range = (bound & !mask) | (range.wrapping_sub(bound) & mask);
        let up = q + ((ONE as u32 - q) >> SHIFT);
        let down = q - (q >> SHIFT);
        *p = ((up & !mask) | (down & mask)) as Prob;
        // Probabilities within [15, 2033] leave at least 2^16 of a range of
        // 2^24 or more: one byte out brings it back.
        self.norm(low, range);
    }

    #[inline(always)]
    pub fn bit(&mut self, p: &mut Prob, bit: bool) {
        let (mut low, mut range) = (self.low, self.range);
        self.step(&mut low, &mut range, p, bit);
        self.low = low;
        self.range = range;
    }

    /// `n` (at most 32) bits of `v` with probability one half each, high
    /// first, up to 8 at a time.
    #[inline]
    pub fn direct(&mut self, v: u32, n: u32) {
        let (mut low, mut range) = (self.low, self.range);
        let mut left = n;
        while left > 0 {
            let k = left.min(8);
            left -= k;
            let sym = (v >> left) & ((1 << k) - 1);
            range >>= k;
            low += sym as u64 * range as u64;
            self.norm(&mut low, &mut range);
        }
        self.low = low;
        self.range = range;
    }

    /// Ends the stream: the bytes that pin the final interval.
    pub fn finish(&mut self) {
        self.room();
        let (mut low, mut range) = (self.low, 0);
        for _ in 0..4 {
            self.norm(&mut low, &mut range);
        }
        self.low = low;
    }
}

/// Where a [`Decoder`] is, to resume it later over the same bytes.
#[derive(Clone, Copy, Default)]
pub(crate) struct State {
    pub pos: usize,
    range: u32,
    code: u32,
    v2: bool,
}

/// Range decoder over a byte slice.
pub(crate) struct Decoder<'a> {
    buf: &'a [u8],
    pub pos: usize,
    range: u32,
    code: u32,
    /// Bytes wanted past the end of `buf` (read as zeros).
    pub over: usize,
    /// Integers as format version 2 coded them (see [`UInt`]).
    v2: bool,
}

impl<'a> Decoder<'a> {
    /// A decoder of `buf`; `v2`: a block of format version 2.
    pub fn new(buf: &'a [u8], v2: bool) -> Self {
        let mut d = Decoder {
            buf,
            pos: 0,
            range: u32::MAX,
            code: 0,
            over: 0,
            v2,
        };
        for _ in 0..5 {
            d.code = (d.code << 8) | d.next() as u32;
        }
        d
    }

    /// Continues where `s` was, over the same `buf`.
    pub fn resume(buf: &'a [u8], s: State) -> Self {
        Decoder {
            buf,
            pos: s.pos,
            range: s.range,
            code: s.code,
            over: 0,
            v2: s.v2,
        }
    }

    pub fn state(&self) -> State {
        State {
            pos: self.pos,
            range: self.range,
            code: self.code,
            v2: self.v2,
        }
    }

    #[inline]
    fn next(&mut self) -> u8 {
        match self.buf.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => {
                self.over += 1;
                0
            }
        }
    }

    #[inline(always)]
    pub fn bit(&mut self, p: &mut Prob) -> bool {
        let q = *p as u32;
        let bound = (self.range >> BITS) * q;
        let bit = if self.code < bound {
            self.range = bound;
            *p = (q + ((ONE as u32 - q) >> SHIFT)) as Prob;
            false
        } else {
            self.code -= bound;
            self.range -= bound;
            *p = (q - (q >> SHIFT)) as Prob;
            true
        };
        if self.range < TOP {
            self.range <<= 8;
            self.code = (self.code << 8) | self.next() as u32;
        }
        bit
    }

    #[inline]
    pub fn direct(&mut self, n: u32) -> u32 {
        let mut v = 0;
        let mut left = n;
        while left > 0 {
            let k = left.min(8);
            left -= k;
            self.range >>= k;
            // Below 2^k for what an encoder wrote; clamped for the rest.
            let sym = (self.code / self.range).min((1 << k) - 1);
            self.code -= sym * self.range;
            v = (v << k) | sym;
            if self.range < TOP {
                self.range <<= 8;
                self.code = (self.code << 8) | self.next() as u32;
            }
        }
        v
    }
}

/// A model for unsigned integers up to 64 bits: the bit length by a
/// 4-level bit tree (0–14; 15 says 15 or more, then the excess by a 3-level
/// tree, 0–6, where 7 says 22 or more and the excess over 22 follows in 6
/// direct bits), then the bits below the leading one direct. (Format
/// version 2 modelled the two bits below the leading one by bit length:
/// `low`, for reading such files; version 3 codes them direct, two
/// decisions fewer per integer for about 10 % more bytes.)
#[derive(Clone)]
pub(crate) struct UInt {
    len: [Prob; 16],
    more: [Prob; 8],
    low: [[Prob; 4]; 65],
}

impl UInt {
    pub const fn new() -> Self {
        UInt {
            len: [HALF; 16],
            more: [HALF; 8],
            low: [[HALF; 4]; 65],
        }
    }
}

/// A model for a symbol of `N` - 1 bits... by bit tree: `N` probabilities.
#[derive(Clone)]
pub(crate) struct Tree<const N: usize>(pub [Prob; N]);

impl<const N: usize> Tree<N> {
    pub const fn new() -> Self {
        Tree([HALF; N])
    }
}

impl Encoder {
    /// `v` (below `N`, a power of two) by the bit tree `t`.
    #[inline(always)]
    pub fn tree<const N: usize>(&mut self, t: &mut Tree<N>, v: u32) {
        let bits = N.trailing_zeros();
        let (mut low, mut range) = (self.low, self.range);
        let mut m = 1usize;
        for i in (0..bits).rev() {
            let b = (v >> i) & 1 != 0;
            self.step(&mut low, &mut range, &mut t.0[m & (N - 1)], b);
            m = (m << 1) | b as usize;
        }
        self.low = low;
        self.range = range;
    }

    #[inline]
    pub fn uint(&mut self, u: &mut UInt, v: u64) {
        let n = 64 - v.leading_zeros();
        let (mut low, mut range) = (self.low, self.range);
        let mut m = 1usize;
        let sym = n.min(15);
        for i in (0..4).rev() {
            let b = (sym >> i) & 1 != 0;
            self.step(&mut low, &mut range, &mut u.len[m & 15], b);
            m = (m << 1) | b as usize;
        }
        if sym == 15 {
            let x = (n - 15).min(7);
            let mut m = 1usize;
            for i in (0..3).rev() {
                let b = (x >> i) & 1 != 0;
                self.step(&mut low, &mut range, &mut u.more[m & 7], b);
                m = (m << 1) | b as usize;
            }
            if x == 7 {
                self.low = low;
                self.range = range;
                self.direct(n - 22, 6);
                (low, range) = (self.low, self.range);
            }
        }
        self.low = low;
        self.range = range;
        if n <= 1 {
            return;
        }
        // The bits below the leading one, direct.
        let d = n - 1;
        if d > 32 {
            self.direct((v >> 32) as u32 & ((1 << (d - 32)) - 1), d - 32);
            self.direct(v as u32, 32);
        } else if d > 0 {
            self.direct(v as u32 & (((1u64 << d) - 1) as u32), d);
        }
    }
}

impl Decoder<'_> {
    #[inline]
    pub fn tree<const N: usize>(&mut self, t: &mut Tree<N>) -> u32 {
        let bits = N.trailing_zeros();
        let mut m = 1usize;
        for _ in 0..bits {
            m = (m << 1) | self.bit(&mut t.0[m]) as usize;
        }
        (m - N) as u32
    }

    /// An integer as [`Encoder::uint`] codes it, or as format version 2
    /// did (two modelled bits below the leading one).
    #[inline]
    pub fn uint(&mut self, u: &mut UInt) -> Option<u64> {
        let mut m = 1usize;
        for _ in 0..4 {
            m = (m << 1) | self.bit(&mut u.len[m]) as usize;
        }
        let mut n = (m - 16) as u32;
        if n == 15 {
            let mut t = 1usize;
            for _ in 0..3 {
                t = (t << 1) | self.bit(&mut u.more[t & 7]) as usize;
            }
            n += (t - 8) as u32;
            if n == 22 {
                n += self.direct(6);
            }
        }
        if n > 64 {
            return None;
        }
        if n <= 1 {
            return Some(n as u64);
        }
        let rest = n - 1;
        let hi = if self.v2 { rest.min(2) } else { 0 };
        let mut t = 1usize;
        for _ in 0..hi {
            t = (t << 1) | self.bit(&mut u.low[n as usize][t]) as usize;
        }
        let mut v = 1u64 << hi | (t as u64 - (1 << hi));
        let d = rest - hi;
        if d > 32 {
            v = v << (d - 32) | self.direct(d - 32) as u64;
            v = v << 32 | self.direct(32) as u64;
        } else if d > 0 {
            v = v << d | self.direct(d) as u64;
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut e = Encoder::new();
        let mut u = UInt::new();
        let mut t = Tree::<256>::new();
        let mut p = HALF;
        let vals = [0u64, 1, 2, 3, 7, 600, 65535, 1 << 40, u64::MAX, 5, 5, 5];
        for (i, &v) in vals.iter().enumerate() {
            e.uint(&mut u, v);
            e.tree(&mut t, (v & 255) as u32);
            e.bit(&mut p, i % 3 == 0);
            e.direct(v as u32 & 0xffff, 16);
        }
        e.finish();
        let mut d = Decoder::new(e.bytes(), false);
        let (mut u, mut t, mut p) = (UInt::new(), Tree::<256>::new(), HALF);
        for (i, &v) in vals.iter().enumerate() {
            assert_eq!(d.uint(&mut u), Some(v));
            assert_eq!(d.tree(&mut t), (v & 255) as u32);
            assert_eq!(d.bit(&mut p), i % 3 == 0);
            assert_eq!(d.direct(16), v as u32 & 0xffff);
        }
        assert_eq!(d.over, 0);
        assert!(e.len() >= e.bytes().len());
    }
}
