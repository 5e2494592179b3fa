//! The injection rate limit: token buckets charged on the wire clock.
//!
//! Why not on the requested send times: a client chooses those. Frames
//! back-dated within their tolerance went out at once, every one of them
//! "in time" for a bucket that believed the client's clock (280 frames in
//! 4 ms under 5 frames/s, burst 1). So the bucket is charged in exactly one
//! place, [`RateLimit::charge`], called by the sender right before a frame
//! is handed to the kernel, with the monotonic clock read there; a frame
//! that finds no tokens is refused then and there, never queued.
//!
//! Why shared: a user's rate is the grant's, whatever number of sessions it
//! opens. The daemon keeps one [`RateLimit`] per (uid, interface) and hands
//! the same `Arc` to every session of that user on that interface; a new
//! session finds the bucket as the last one left it (not full), and a
//! reload retunes it ([`RateLimit::retune`]) without refilling it.
//!
//! Over any window of T nanoseconds, the frames that leave number at most
//! `burst + rate × T / 1e9` (and their bits likewise): integer arithmetic
//! in units of 1e-9 token, so no rounding ever gives a token away.

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

const NS: u128 = 1_000_000_000;

/// The monotonic clock, in nanoseconds since the first call in this
/// process (never goes back, unaffected by changes to the real-time clock).
pub fn monotonic_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One token bucket: `rate` tokens per second, at most `burst` banked.
#[derive(Debug, Clone)]
struct Bucket {
    rate: u64,
    burst: u64,
    /// Tokens × 1e9.
    level: u128,
    /// The clock at the last refill.
    last_ns: u64,
}

impl Bucket {
    fn new(rate: u64, burst: u64, now_ns: u64) -> Bucket {
        let burst = burst.max(1);
        Bucket {
            rate: rate.max(1),
            burst,
            level: u128::from(burst) * NS,
            last_ns: now_ns,
        }
    }

    fn refill(&mut self, now_ns: u64) {
        if now_ns > self.last_ns {
            let earned = u128::from(now_ns - self.last_ns) * u128::from(self.rate);
            self.level = (self.level + earned).min(u128::from(self.burst) * NS);
            self.last_ns = now_ns;
        }
    }

    fn has(&self, cost: u64) -> bool {
        self.level >= u128::from(cost) * NS
    }

    fn spend(&mut self, cost: u64) {
        self.level -= u128::from(cost) * NS;
    }

    /// New rate and depth; what is banked stays, cut to the new depth (a
    /// reload never refills a bucket).
    fn retune(&mut self, rate: u64, burst: u64, now_ns: u64) {
        self.refill(now_ns);
        self.rate = rate.max(1);
        self.burst = burst.max(1);
        self.level = self.level.min(u128::from(self.burst) * NS);
    }

    fn full(&self) -> bool {
        self.level >= u128::from(self.burst) * NS
    }
}

/// What a grant allows: frames per second, optionally bits per second, and
/// the depth in frames (the bit bucket holds `burst` frames of `max_len`
/// bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    /// Frames per second (at least 1).
    pub packets_per_second: u64,
    /// Bits per second, if limited.
    pub bits_per_second: Option<u64>,
    /// Depth in frames (at least 1).
    pub burst: u64,
    /// The largest frame on the interface, bytes (sizes the bit bucket).
    pub max_len: u64,
}

impl Rates {
    /// What `grant` allows on an interface whose frames are at most
    /// `max_len` bytes.
    pub fn of(grant: &ringcap_policy::InjectGrant, max_len: usize) -> Rates {
        Rates {
            packets_per_second: grant.max_packets_per_second,
            bits_per_second: grant.max_bits_per_second,
            burst: u64::from(grant.burst),
            max_len: max_len as u64,
        }
    }
}

/// Which limit refused a frame: the rule named in its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Over {
    /// `max_packets_per_second` or `max_bits_per_second` (the policy's key).
    pub rule: &'static str,
    /// In words, with the numbers.
    pub reason: String,
}

#[derive(Debug)]
struct State {
    rates: Rates,
    packets: Bucket,
    bits: Option<Bucket>,
}

/// The buckets of one (user, interface), shared by its sessions' senders.
#[derive(Debug)]
pub struct RateLimit {
    state: Mutex<State>,
}

impl RateLimit {
    /// Full buckets for `rates` (a user's first session on an interface).
    pub fn new(rates: Rates) -> RateLimit {
        let now = monotonic_ns();
        RateLimit {
            state: Mutex::new(State {
                rates,
                packets: Bucket::new(rates.packets_per_second, rates.burst, now),
                bits: rates
                    .bits_per_second
                    .map(|b| Bucket::new(b, rates.burst * rates.max_len * 8, now)),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the tokens of one frame of `len` bytes leaving at `now_ns`
    /// (the monotonic clock, [`monotonic_ns`]), or says which limit it is
    /// over, taking none. The one place injected frames are counted against
    /// the rate.
    pub fn charge(&self, now_ns: u64, len: usize) -> Result<(), Over> {
        let mut s = self.lock();
        let bits = len as u64 * 8;
        s.packets.refill(now_ns);
        if let Some(b) = &mut s.bits {
            b.refill(now_ns);
        }
        if !s.packets.has(1) {
            let r = s.rates;
            return Err(Over {
                rule: "max_packets_per_second",
                reason: format!(
                    "over the grant's {} frames per second (burst {} frames), counted when the frame was to leave",
                    r.packets_per_second, r.burst
                ),
            });
        }
        if let Some(b) = &s.bits {
            if !b.has(bits) {
                return Err(Over {
                    rule: "max_bits_per_second",
                    reason: format!(
                        "over the grant's {} bits per second (burst {} bits), counted when the frame was to leave",
                        b.rate, b.burst
                    ),
                });
            }
        }
        s.packets.spend(1);
        if let Some(b) = &mut s.bits {
            b.spend(bits);
        }
        Ok(())
    }

    /// Holds the buckets to new `rates` (a reloaded policy) from now on,
    /// without refilling them.
    pub fn retune(&self, rates: Rates) {
        let now = monotonic_ns();
        let mut s = self.lock();
        if s.rates == rates {
            return;
        }
        s.packets.retune(rates.packets_per_second, rates.burst, now);
        let bit_burst = rates.burst * rates.max_len * 8;
        s.bits = match (s.bits.take(), rates.bits_per_second) {
            (_, None) => None,
            (Some(mut b), Some(bps)) => {
                b.retune(bps, bit_burst, now);
                Some(b)
            }
            // A bit limit where there was none starts empty of nothing the
            // frame limit would not already hold back: at most a burst.
            (None, Some(bps)) => Some(Bucket::new(bps, bit_burst, now)),
        };
        s.rates = rates;
    }

    /// The rates in force.
    pub fn rates(&self) -> Rates {
        self.lock().rates
    }

    /// True when both buckets have refilled to their depth at `now_ns`: a
    /// fresh bucket would give nothing more, so it may be forgotten.
    pub fn idle(&self, now_ns: u64) -> bool {
        let mut s = self.lock();
        s.packets.refill(now_ns);
        if let Some(b) = &mut s.bits {
            b.refill(now_ns);
        }
        s.packets.full() && s.bits.as_ref().is_none_or(Bucket::full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(pps: u64, bps: Option<u64>, burst: u64) -> Rates {
        Rates {
            packets_per_second: pps,
            bits_per_second: bps,
            burst,
            max_len: 1514,
        }
    }

    /// A small deterministic generator, so a failure repeats.
    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn every_window_holds_burst_plus_rate_times_t() {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..50 {
            let pps = 1 + xorshift(&mut x) % 2000;
            let burst = 1 + xorshift(&mut x) % 20;
            let l = RateLimit::new(rates(pps, None, burst));
            let mut t = monotonic_ns();
            let mut sent = Vec::new();
            for _ in 0..2000 {
                t += match xorshift(&mut x) % 3 {
                    0 => 0,
                    1 => xorshift(&mut x) % 100_000,
                    _ => xorshift(&mut x) % 10_000_000,
                };
                if l.charge(t, 100).is_ok() {
                    sent.push(t);
                }
            }
            for i in 0..sent.len() {
                for (k, tj) in sent[i..].iter().enumerate().take(300) {
                    let allowed =
                        u128::from(burst) * NS + u128::from(pps) * u128::from(tj - sent[i]);
                    assert!((k as u128 + 1) * NS <= allowed, "pps {pps} burst {burst}");
                }
            }
        }
    }

    #[test]
    fn a_refusal_names_its_rule_and_takes_nothing() {
        let l = RateLimit::new(rates(10, Some(8000), 2));
        let t = monotonic_ns();
        // 1000-byte frames: the bit bucket (2 × 1514 × 8 bits) has room for 3.
        assert!(l.charge(t, 1000).is_ok());
        assert!(l.charge(t, 1000).is_ok());
        let o = l.charge(t, 1000).unwrap_err();
        assert_eq!(o.rule, "max_packets_per_second");
        assert!(o.reason.contains("10 frames per second"), "{}", o.reason);
        // 100 ms later one frame token is back; bits: 24224 - 16000 + 800 left.
        assert!(l.charge(t + 100_000_000, 1000).is_ok());
        let o = l.charge(t + 300_000_000, 1000).unwrap_err();
        assert_eq!(o.rule, "max_bits_per_second");
        assert!(o.reason.contains("8000 bits per second"), "{}", o.reason);
    }

    #[test]
    fn a_retune_never_refills() {
        let l = RateLimit::new(rates(100, None, 10));
        let t = monotonic_ns();
        for _ in 0..10 {
            assert!(l.charge(t, 60).is_ok());
        }
        assert!(l.charge(t, 60).is_err());
        l.retune(rates(1, None, 50));
        // Empty, and now earning one token a second.
        assert!(l.charge(monotonic_ns(), 60).is_err());
        assert!(!l.idle(monotonic_ns()));
        assert_eq!(l.rates().burst, 50);
    }
}
