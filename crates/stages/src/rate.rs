//! Rate limits: token buckets on the packets' own times (capture timestamps
//! for a client's capture, requested send times for injected frames), so no
//! clock is read per packet and a test can drive them with a fake clock.
//! Excess is refused, never queued. Integer arithmetic throughout: a bucket
//! holds exactly `burst + rate × T` over every window at any rate.

const NS: u128 = 1_000_000_000;

/// `rate` tokens per second, at most `burst` banked; starts full.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u64,
    burst: u64,
    /// Tokens × 1e9 (a token earned per `1e9 / rate` ns), so no precision is
    /// lost at any rate.
    level: u128,
    /// The clock at the last look; None until the first.
    last_ns: Option<u64>,
}

impl TokenBucket {
    /// `rate` tokens per second (at least 1), `burst` at once (at least 1).
    pub fn new(rate: u64, burst: u64) -> TokenBucket {
        let burst = burst.max(1);
        TokenBucket {
            rate: rate.max(1),
            burst,
            level: u128::from(burst) * NS,
            last_ns: None,
        }
    }

    /// Adds what was earned up to `at_ns` (earlier times count as the last
    /// one seen: the clock never goes back).
    #[inline]
    fn refill(&mut self, at_ns: u64) {
        let last = *self.last_ns.get_or_insert(at_ns);
        if at_ns > last {
            let cap = u128::from(self.burst) * NS;
            self.level = (self.level + u128::from(at_ns - last) * u128::from(self.rate)).min(cap);
            self.last_ns = Some(at_ns);
        }
    }

    /// True if `cost` tokens are there at `at_ns` (taking none).
    #[inline]
    fn has(&mut self, at_ns: u64, cost: u64) -> bool {
        self.refill(at_ns);
        self.level >= u128::from(cost) * NS
    }

    #[inline]
    fn spend(&mut self, cost: u64) {
        self.level -= u128::from(cost) * NS;
    }

    /// Takes `cost` tokens at `at_ns` if there are that many.
    pub fn take(&mut self, at_ns: u64, cost: u64) -> bool {
        let ok = self.has(at_ns, cost);
        if ok {
            self.spend(cost);
        }
        ok
    }

    /// Takes over `old`'s state (what it holds, when it last looked), held
    /// to this bucket's depth: a bucket that replaces another (new settings
    /// of the same session) does not start full.
    pub fn carry_from(&mut self, old: &TokenBucket) {
        self.level = old.level.min(u128::from(self.burst) * NS);
        self.last_ns = old.last_ns;
    }

    /// Tokens per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The most tokens banked.
    pub fn burst(&self) -> u64 {
        self.burst
    }
}

/// Packets per second and bits per second, either or both: a packet passes
/// only if both buckets have room, and a refused packet takes from neither.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    packets: Option<TokenBucket>,
    bits: Option<TokenBucket>,
}

/// Which limit refused a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// The packets-per-second bucket was empty.
    Packets,
    /// The bits-per-second bucket was short of the packet's bits.
    Bits,
}

impl Limits {
    /// No limit.
    pub fn none() -> Limits {
        Limits::default()
    }

    /// Adds a limit of `rate` packets per second, `burst` at once.
    pub fn packets(mut self, rate: u64, burst: u64) -> Limits {
        self.packets = Some(TokenBucket::new(rate, burst));
        self
    }

    /// Adds a limit of `rate` bits per second, `burst` bits at once.
    pub fn bits(mut self, rate: u64, burst: u64) -> Limits {
        self.bits = Some(TokenBucket::new(rate, burst));
        self
    }

    /// Each bucket takes over the state of `old`'s bucket of its kind
    /// ([`TokenBucket::carry_from`]); a kind `old` did not limit starts full.
    pub fn carry_from(&mut self, old: &Limits) {
        if let (Some(b), Some(o)) = (&mut self.packets, &old.packets) {
            b.carry_from(o);
        }
        if let (Some(b), Some(o)) = (&mut self.bits, &old.bits) {
            b.carry_from(o);
        }
    }

    /// True when there is no limit.
    pub fn unlimited(&self) -> bool {
        self.packets.is_none() && self.bits.is_none()
    }

    /// The packet bucket, if any.
    pub fn packet_bucket(&self) -> Option<&TokenBucket> {
        self.packets.as_ref()
    }

    /// The bit bucket, if any.
    pub fn bit_bucket(&self) -> Option<&TokenBucket> {
        self.bits.as_ref()
    }

    /// Admits a packet of `len` bytes at `at_ns` (taking its tokens), or
    /// says which limit it is over (taking none).
    #[inline]
    pub fn admit(&mut self, at_ns: u64, len: u32) -> Result<(), Over> {
        let bits = u64::from(len) * 8;
        if let Some(b) = &mut self.packets {
            if !b.has(at_ns, 1) {
                return Err(Over::Packets);
            }
        }
        if let Some(b) = &mut self.bits {
            if !b.has(at_ns, bits) {
                return Err(Over::Bits);
            }
            b.spend(bits);
        }
        if let Some(b) = &mut self.packets {
            b.spend(1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so a failure repeats.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Bursty arrival times: often at once, sometimes after a long gap.
    fn gap(rng: &mut Rng) -> u64 {
        match rng.next() % 4 {
            0 => 0,
            1 => rng.next() % 1_000,
            2 => rng.next() % 1_000_000,
            _ => rng.next() % 50_000_000,
        }
    }

    /// Every window [sent[i], sent[j]] holds at most burst + rate × T of
    /// cost; `sent` is (time, cost).
    fn holds(sent: &[(u64, u64)], rate: u64, burst: u64, what: &str) {
        for i in 0..sent.len() {
            let mut cost = 0u128;
            for (t, c) in &sent[i..sent.len().min(i + 400)] {
                cost += u128::from(*c);
                let span = u128::from(t - sent[i].0);
                let allowed = u128::from(burst) * NS + u128::from(rate) * span;
                assert!(
                    cost * NS <= allowed,
                    "{what}: {cost} in {span} ns, rate {rate} burst {burst}"
                );
            }
        }
    }

    #[test]
    fn packet_limit_holds_over_every_window_on_a_fake_clock() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for case in 0..200 {
            let rate = 1 + rng.next() % 5000;
            let burst = 1 + rng.next() % 50;
            let mut l = Limits::none().packets(rate, burst);
            let (mut t, mut sent) = (0u64, Vec::new());
            for _ in 0..3000 {
                t += gap(&mut rng);
                if l.admit(t, 100).is_ok() {
                    sent.push((t, 1));
                }
            }
            holds(&sent, rate, burst, &format!("case {case}"));
        }
    }

    /// Limits replaced by new ones that carry the old state (a session's
    /// new filter, every few packets) still hold burst + rate x T over
    /// every window: a replacement brings no tokens of its own.
    #[test]
    fn replaced_limits_that_carry_the_state_still_hold() {
        let mut rng = Rng(0x6a09_e667_f3bc_c908);
        for case in 0..200 {
            let rate = 1 + rng.next() % 5000;
            let burst = 1 + rng.next() % 50;
            let mut l = Limits::none().packets(rate, burst).bits(1 << 40, 1 << 40);
            let (mut t, mut sent) = (0u64, Vec::new());
            for _ in 0..3000 {
                if rng.next().is_multiple_of(8) {
                    let mut next = Limits::none().packets(rate, burst).bits(1 << 40, 1 << 40);
                    next.carry_from(&l);
                    l = next;
                }
                t += gap(&mut rng);
                if l.admit(t, 100).is_ok() {
                    sent.push((t, 1));
                }
            }
            holds(&sent, rate, burst, &format!("case {case}"));
        }
    }

    #[test]
    fn both_limits_hold_and_a_refusal_takes_nothing() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..200 {
            let (pps, pburst) = (1 + rng.next() % 5000, 1 + rng.next() % 50);
            let (bps, bburst) = (
                12_000 + rng.next() % 50_000_000,
                12_000 + rng.next() % 200_000,
            );
            let mut l = Limits::none().packets(pps, pburst).bits(bps, bburst);
            let (mut t, mut sent) = (0u64, Vec::new());
            let mut over = [0u32; 2];
            for _ in 0..3000 {
                t += gap(&mut rng);
                let len = 60 + (rng.next() % 1440) as u32;
                match l.admit(t, len) {
                    Ok(()) => sent.push((t, u64::from(len) * 8)),
                    Err(Over::Packets) => over[0] += 1,
                    Err(Over::Bits) => over[1] += 1,
                }
            }
            let packets: Vec<_> = sent.iter().map(|(t, _)| (*t, 1)).collect();
            holds(&packets, pps, pburst, &format!("case {case} packets"));
            holds(&sent, bps, bburst, &format!("case {case} bits"));
        }
    }

    #[test]
    fn long_run_rates_are_the_rates() {
        let mut l = Limits::none().packets(1000, 10);
        // Offered 10x the rate for 10 s: the burst, then 1000/s.
        let sent = (0..100_000u64)
            .filter(|i| l.admit(i * 100_000, 100).is_ok())
            .count();
        assert!((10_000..=10_010).contains(&sent), "{sent}");

        // 1 MB/s with a one-second burst; 1500-byte packets every 100 µs
        // (15 MB/s) for 2 s: one second of burst plus two at 1 MB/s.
        let mut l = Limits::none().bits(8_000_000, 8_000_000);
        let bytes: u64 = (0..20_000u64)
            .filter(|i| l.admit(1_000_000_000 + i * 100_000, 1500).is_ok())
            .map(|_| 1500)
            .sum();
        assert!((2_998_500..=3_001_500).contains(&bytes), "{bytes}");
    }

    #[test]
    fn unlimited_admits_everything_and_the_clock_never_goes_back() {
        let mut l = Limits::none();
        assert!(l.unlimited());
        assert!((0..1000).all(|i| l.admit(i, 1500).is_ok()));
        let mut b = TokenBucket::new(1, 1);
        assert!(b.take(1_000_000_000, 1));
        // An earlier time earns nothing.
        assert!(!b.take(0, 1));
        assert!(!b.take(1_500_000_000, 1));
        assert!(b.take(2_000_000_000, 1));
    }
}
