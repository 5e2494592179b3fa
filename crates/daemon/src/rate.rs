//! Token buckets for a session's rate limits (packets/s and bits/s), fed by
//! the packets' own capture timestamps: no clock read per packet. Excess is
//! counted, never queued.

/// One bucket: `rate` tokens per second, at most `burst` banked.
#[derive(Debug, Clone)]
pub struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last_ns: u64,
}

impl Bucket {
    /// A full bucket of `rate` per second holding up to one second's worth.
    pub fn new(rate: u64) -> Bucket {
        let rate = rate as f64;
        Bucket {
            rate,
            burst: rate.max(1.0),
            tokens: rate.max(1.0),
            last_ns: 0,
        }
    }

    /// Adds the tokens earned up to `now_ns`.
    #[inline]
    fn refill(&mut self, now_ns: u64) {
        if now_ns > self.last_ns {
            if self.last_ns != 0 {
                let dt = (now_ns - self.last_ns) as f64 * 1e-9;
                self.tokens = (self.tokens + dt * self.rate).min(self.burst);
            }
            self.last_ns = now_ns;
        }
    }
}

/// A session's limits: packets and bits per second, either or both.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    packets: Option<Bucket>,
    bits: Option<Bucket>,
}

impl Limits {
    /// Limits of `pps` packets and `bps` bits per second.
    pub fn new(pps: Option<u64>, bps: Option<u64>) -> Limits {
        Limits {
            packets: pps.map(Bucket::new),
            bits: bps.map(Bucket::new),
        }
    }

    /// True when there is no limit.
    pub fn unlimited(&self) -> bool {
        self.packets.is_none() && self.bits.is_none()
    }

    /// True if a packet of `wire_len` bytes at `ts_ns` is within the limits
    /// (and takes its tokens); a refused packet takes none.
    #[inline]
    pub fn admit(&mut self, ts_ns: u64, wire_len: u32) -> bool {
        let bits = f64::from(wire_len) * 8.0;
        let mut ok = true;
        if let Some(b) = &mut self.packets {
            b.refill(ts_ns);
            ok &= b.tokens >= 1.0;
        }
        if let Some(b) = &mut self.bits {
            b.refill(ts_ns);
            ok &= b.tokens >= bits;
        }
        if ok {
            if let Some(b) = &mut self.packets {
                b.tokens -= 1.0;
            }
            if let Some(b) = &mut self.bits {
                b.tokens -= bits;
            }
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_per_second_over_ten_seconds() {
        let mut l = Limits::new(Some(1000), None);
        // 10 000 packets/s offered for 10 s: a burst of 1000, then 1000/s.
        let mut kept = 0;
        for i in 0..100_000u64 {
            if l.admit(1_000_000_000 + i * 100_000, 100) {
                kept += 1;
            }
        }
        assert!((10_900..=11_100).contains(&kept), "{kept}");
    }

    #[test]
    fn bits_per_second() {
        let mut l = Limits::new(None, Some(8_000_000)); // 1 MB/s
        let mut bytes = 0u64;
        for i in 0..20_000u64 {
            // 1500-byte packets every 100 µs: 15 MB/s offered for 2 s.
            if l.admit(1_000_000_000 + i * 100_000, 1500) {
                bytes += 1500;
            }
        }
        // One second of burst plus two seconds at 1 MB/s.
        assert!((2_900_000..=3_100_000).contains(&bytes), "{bytes}");
    }

    #[test]
    fn unlimited_admits_everything() {
        let mut l = Limits::default();
        assert!(l.unlimited());
        assert!((0..1000).all(|i| l.admit(i, 1500)));
    }
}
