//! A token bucket on the frames' own send times: `rate` frames per second,
//! at most `burst` at once. It runs on a clock the caller gives (the
//! requested send time of each frame, never going backwards), so a batch
//! submitted ahead of time is judged as it will be sent, and a test can
//! drive it with a fake clock.

/// Frames per second, with a burst.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u64,
    burst: u64,
    /// Tokens, in units of 1/rate-per-ns scaled: nanosecond-tokens
    /// (a frame costs 1e9 of them), so no precision is lost at any rate.
    level: u128,
    /// The clock at the last take.
    last_ns: u64,
}

const NS: u128 = 1_000_000_000;

impl TokenBucket {
    /// `rate` frames per second (at least 1), `burst` at once (at least 1);
    /// starts full at `now_ns`.
    pub fn new(rate: u64, burst: u32, now_ns: u64) -> TokenBucket {
        let burst = u64::from(burst.max(1));
        TokenBucket {
            rate: rate.max(1),
            burst,
            level: u128::from(burst) * NS,
            last_ns: now_ns,
        }
    }

    /// Takes one frame's token at time `at_ns` (earlier times count as the
    /// last one seen): true if there was one.
    pub fn take(&mut self, at_ns: u64) -> bool {
        let at = at_ns.max(self.last_ns);
        let elapsed = u128::from(at - self.last_ns);
        self.last_ns = at;
        let cap = u128::from(self.burst) * NS;
        self.level = (self.level + elapsed * u128::from(self.rate)).min(cap);
        if self.level >= NS {
            self.level -= NS;
            true
        } else {
            false
        }
    }

    /// The rate, frames per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The burst, frames.
    pub fn burst(&self) -> u64 {
        self.burst
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

    #[test]
    fn holds_over_every_window_on_a_fake_clock() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for case in 0..200 {
            let rate = 1 + rng.next() % 5000;
            let burst = 1 + (rng.next() % 50) as u32;
            let mut b = TokenBucket::new(rate, burst, 0);
            let mut t = 0u64;
            let mut sent: Vec<u64> = Vec::new();
            for _ in 0..3000 {
                // Bursty arrivals: often at once, sometimes after a gap.
                t += match rng.next() % 4 {
                    0 => 0,
                    1 => rng.next() % 1_000,
                    2 => rng.next() % 1_000_000,
                    _ => rng.next() % 50_000_000,
                };
                if b.take(t) {
                    sent.push(t);
                }
            }
            // Every window [sent[i], sent[j]]: j - i + 1 frames within
            // T = sent[j] - sent[i] ns must be <= burst + rate * T.
            for i in 0..sent.len() {
                for j in i..sent.len().min(i + 400) {
                    let n = (j - i + 1) as u128;
                    let span = u128::from(sent[j] - sent[i]);
                    let allowed = u128::from(burst) * NS + u128::from(rate) * span;
                    assert!(
                        n * NS <= allowed,
                        "case {case}: {n} frames in {span} ns, rate {rate} burst {burst}"
                    );
                }
            }
        }
    }

    #[test]
    fn long_run_rate_is_the_rate() {
        let mut b = TokenBucket::new(1000, 10, 0);
        // Offered 10x the rate for 10 s.
        let sent = (0..100_000u64).filter(|i| b.take(i * 100_000)).count();
        assert!((10_000..=10_010).contains(&sent), "{sent}");
    }
}
