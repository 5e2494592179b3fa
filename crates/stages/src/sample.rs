//! Sampling: keep one packet in N, or one flow in N (both directions).
//!
//! Terms follow PSAMP (RFC 5475): random n-out-of-N selection, systematic
//! count-based selection, and hash-based (flow) selection.

/// How packets are selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// Every packet is kept.
    All,
    /// One packet in `n`.
    Packets {
        /// Keep one in this many.
        n: u32,
        /// Random or systematic selection.
        mode: SampleMode,
    },
    /// One flow in `n`, by a hash of the 5-tuple that is the same in both
    /// directions (through VLAN and MPLS); frames without IP by their MAC
    /// pair and EtherType (never all kept).
    Flows {
        /// Keep one in this many.
        n: u32,
    },
}

/// How `--sample 1:N` picks its packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleMode {
    /// Each packet independently with probability 1/N (done in the kernel).
    Random,
    /// Exactly every Nth packet (done in user space, per capture thread).
    Count,
}

impl Sampling {
    /// Parses "1:N" (or just "N").
    pub fn parse_ratio(s: &str) -> Result<u32, String> {
        let n = match s.split_once(':') {
            Some((one, n)) if one.trim() == "1" => n,
            Some(_) => return Err(format!("sampling ratio '{s}' must be 1:N")),
            None => s,
        };
        match n.trim().parse::<u32>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "sampling ratio '{s}' must be 1:N with N a whole number >= 1"
            )),
        }
    }

    /// True when the kernel program does all of this sampling.
    pub fn done_in_kernel(&self) -> bool {
        !matches!(self, Sampling::Packets { mode: SampleMode::Count, n } if *n > 1)
    }
}

/// The part of sampling that runs in user space: count mode live, and every
/// mode offline (where no kernel program runs).
#[derive(Debug, Clone)]
pub struct UserSampler {
    sampling: Sampling,
    counter: u32,
    rng: u64,
}

impl UserSampler {
    /// A sampler for a live capture: only what the kernel cannot do.
    pub fn live(sampling: Sampling) -> UserSampler {
        let sampling = if sampling.done_in_kernel() {
            Sampling::All
        } else {
            sampling
        };
        UserSampler::offline(sampling, 0x9e37_79b9_7f4a_7c15)
    }

    /// A sampler that does all of `sampling` itself, seeded with `seed`.
    pub fn offline(sampling: Sampling, seed: u64) -> UserSampler {
        UserSampler {
            sampling,
            counter: 0,
            rng: seed | 1,
        }
    }

    /// True if this sampler keeps every packet (and need not be asked).
    pub fn keeps_all(&self) -> bool {
        match self.sampling {
            Sampling::All => true,
            Sampling::Packets { n, .. } | Sampling::Flows { n } => n <= 1,
        }
    }

    /// Decides for one packet (an Ethernet frame, for flow sampling).
    #[inline]
    pub fn keep(&mut self, frame: &[u8]) -> bool {
        match self.sampling {
            Sampling::All => true,
            Sampling::Packets {
                n,
                mode: SampleMode::Count,
            } => {
                self.counter += 1;
                if self.counter >= n {
                    self.counter = 0;
                    true
                } else {
                    false
                }
            }
            Sampling::Packets {
                n,
                mode: SampleMode::Random,
            } => {
                // xorshift64*: fast and good enough for selection.
                self.rng ^= self.rng >> 12;
                self.rng ^= self.rng << 25;
                self.rng ^= self.rng >> 27;
                let r = (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32;
                r.is_multiple_of(n)
            }
            Sampling::Flows { n } => flow_hash_offline(frame).is_some_and(|h| h % n == 0),
        }
    }
}

fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The flow hash of [`crate::bpf::flow_hash_tail`], in Rust, for a frame as
/// the kernel filter sees it (the outer VLAN tag already stripped). `None`
/// where the kernel program would read past the end of the frame (and so drop it).
pub fn flow_hash(frame: &[u8]) -> Option<u32> {
    flow_hash_at(frame, 0)
}

/// [`flow_hash`] for a frame as it was on the wire (from a file): with two
/// VLAN tags the outer one is skipped, as the kernel would have stripped it.
pub fn flow_hash_offline(frame: &[u8]) -> Option<u32> {
    let is_tag = |o: usize| matches!(frame.get(o..o + 2), Some([0x81, 0x00]) | Some([0x88, 0xa8]));
    flow_hash_at(frame, if is_tag(12) && is_tag(16) { 4 } else { 0 })
}

/// Label stack entries [`flow_hash`] looks through for an IP packet under
/// MPLS (the kernel program is unrolled this many times).
pub const MPLS_MAX_LABELS: usize = 4;

fn flow_hash_at(f: &[u8], skip: usize) -> Option<u32> {
    let u8at = |o: usize| f.get(o + skip).map(|b| u32::from(*b));
    let be16 = |o: usize| {
        f.get(o + skip..o + skip + 2)
            .map(|b| u32::from(u16::from_be_bytes([b[0], b[1]])))
    };
    let be32 = |o: usize| {
        f.get(o + skip..o + skip + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let ipv4 = |b: usize| -> Option<u32> {
        let addr = be32(b + 12)? ^ be32(b + 16)?;
        let proto = u8at(b + 9)?;
        let frag = be16(b + 6)?;
        let ports = if frag & 0x3fff != 0 || !matches!(u8at(b + 9)?, 6 | 17 | 132) {
            0
        } else {
            let ihl = (u8at(b)? & 0xf) as usize * 4;
            be16(b + ihl)? ^ be16(b + ihl + 2)?
        };
        Some(ports ^ addr ^ (proto << 24))
    };
    let ipv6 = |b: usize| -> Option<u32> {
        let mut addr = 0;
        for w in 0..8 {
            addr ^= be32(b + 8 + 4 * w)?;
        }
        let nh = u8at(b + 6)?;
        let ports = if matches!(nh, 6 | 17 | 132) {
            be16(b + 40)? ^ be16(b + 42)?
        } else {
            0
        };
        Some(ports ^ addr ^ (nh << 24))
    };
    let mut et = be16(12)?;
    let mut b = 14;
    if et == 0x8100 || et == 0x88a8 {
        et = be16(16)?;
        b = 18;
    }
    // Not IP (or IP not found): the MAC pair, either way round, and the
    // EtherType. Never a constant: every frame is sampled.
    let l2 = || -> Option<u32> { Some(be32(0)? ^ be32(6)? ^ be16(4)? ^ be16(10)? ^ (et << 16)) };
    let h = match et {
        0x0800 => ipv4(b)?,
        0x86dd => ipv6(b)?,
        0x8847 | 0x8848 => {
            let mut inner = None;
            for i in 0..MPLS_MAX_LABELS {
                if u8at(b + 4 * i + 2)? & 1 == 1 {
                    let nb = b + 4 * (i + 1);
                    inner = match u8at(nb)? >> 4 {
                        4 => Some(ipv4(nb)?),
                        6 => Some(ipv6(nb)?),
                        _ => None,
                    };
                    break;
                }
            }
            match inner {
                Some(h) => h,
                None => l2()?,
            }
        }
        _ => l2()?,
    };
    Some(fmix32(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_parsing() {
        assert_eq!(Sampling::parse_ratio("1:10"), Ok(10));
        assert_eq!(Sampling::parse_ratio("7"), Ok(7));
        assert!(Sampling::parse_ratio("2:10").is_err());
        assert!(Sampling::parse_ratio("1:0").is_err());
        assert!(Sampling::parse_ratio("1:x").is_err());
    }

    #[test]
    fn count_mode_keeps_every_nth() {
        let mut s = UserSampler::live(Sampling::Packets {
            n: 4,
            mode: SampleMode::Count,
        });
        let kept: Vec<bool> = (0..8).map(|_| s.keep(&[])).collect();
        assert_eq!(kept, [false, false, false, true, false, false, false, true]);
    }

    #[test]
    fn random_mode_live_is_left_to_kernel() {
        let s = UserSampler::live(Sampling::Packets {
            n: 4,
            mode: SampleMode::Random,
        });
        assert!(s.keeps_all());
    }

    #[test]
    fn random_mode_offline_ratio() {
        let mut s = UserSampler::offline(
            Sampling::Packets {
                n: 10,
                mode: SampleMode::Random,
            },
            42,
        );
        let kept = (0..100_000).filter(|_| s.keep(&[])).count();
        // Binomial(100000, 0.1): sd ~ 95; 6 sd bounds.
        assert!((9_430..=10_570).contains(&kept), "{kept}");
    }
}

#[cfg(test)]
mod flow_tests {
    use super::*;
    use crate::bpf::Program;

    fn ipv4_udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 4];
        f[12] = 0x08;
        f[14] = 0x45;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = 17;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    fn ipv6_tcp(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + 20];
        f[12] = 0x86;
        f[13] = 0xdd;
        f[14] = 0x60;
        f[20] = 6;
        f[22..38].copy_from_slice(&src);
        f[38..54].copy_from_slice(&dst);
        f[54..56].copy_from_slice(&sport.to_be_bytes());
        f[56..58].copy_from_slice(&dport.to_be_bytes());
        f
    }

    fn tagged(mut f: Vec<u8>) -> Vec<u8> {
        f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        f
    }

    /// Ethernet frame (made-up MACs) with an MPLS stack of `labels` entries
    /// over `payload`.
    fn mpls(labels: usize, payload: Vec<u8>) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0x47];
        for i in 0..labels {
            let bos = u32::from(i + 1 == labels) << 8;
            f.extend_from_slice(&((16 + i as u32) << 12 | bos | 64).to_be_bytes());
        }
        f.extend(payload);
        f
    }

    /// A frame of neither IP nor MPLS: ARP or another EtherType, between
    /// MACs drawn from `r`.
    fn other(r: u64) -> Vec<u8> {
        let b = r.to_be_bytes();
        let mut f = vec![2, b[0], b[1], b[2], 0, 1, 2, b[3], b[4], b[5], 0, 2];
        let et: u16 = if r & 1 == 0 { 0x0806 } else { 0x88cc };
        f.extend_from_slice(&et.to_be_bytes());
        f.resize(60, 0);
        f
    }

    /// Under 1:N about one in N of each kind of non-IP frame is kept, in
    /// user space and by the kernel program alike; nothing is kept
    /// wholesale (it was: non-IP frames hashed to 0, 0 % N == 0).
    #[test]
    fn non_ip_frames_are_sampled_too() {
        let n = 10u32;
        let mut program = Program::accept_all(96);
        program.add_sampler(Sampling::Flows { n }).unwrap();
        let mut s = UserSampler::offline(Sampling::Flows { n }, 1);
        let mut r = 0x0123_4567_89ab_cdefu64;
        let mut next = || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        let total = 4000;
        for kind in ["mpls-ipv4", "mpls-ipv6", "mpls-other", "arp/lldp"] {
            let mut kept = 0;
            for _ in 0..total {
                let x = next();
                let a = x.to_be_bytes();
                let f = match kind {
                    "mpls-ipv4" => mpls(
                        1 + (x >> 62) as usize,
                        ipv4_udp(
                            [198, 18, a[0], a[1]],
                            [198, 19, a[2], 1],
                            a[3].into(),
                            53,
                            0,
                        )[14..]
                            .to_vec(),
                    ),
                    "mpls-ipv6" => {
                        let mut src = [0xfd; 16];
                        src[8..].copy_from_slice(&a);
                        mpls(
                            2,
                            ipv6_tcp(src, [0xfd; 16], 443, a[4].into())[14..].to_vec(),
                        )
                    }
                    "mpls-other" => {
                        let mut f = mpls(1, vec![0; 30]);
                        f[1..5].copy_from_slice(&a[..4]);
                        f
                    }
                    _ => other(x),
                };
                let k = s.keep(&f);
                assert_eq!(k, program.run(&f, f.len() as u32) > 0, "{kind}: {f:02x?}");
                kept += u32::from(k);
            }
            // Binomial(4000, 0.1): sd 19; 5 sd bounds.
            assert!(
                (305..=495).contains(&kept),
                "{kind}: kept {kept} of {total}"
            );
        }
    }

    #[test]
    fn mpls_flows_stay_together_in_both_directions() {
        let a = mpls(
            2,
            ipv4_udp([198, 18, 0, 1], [198, 18, 0, 2], 1000, 53, 0)[14..].to_vec(),
        );
        let b = mpls(
            3,
            ipv4_udp([198, 18, 0, 2], [198, 18, 0, 1], 53, 1000, 0)[14..].to_vec(),
        );
        assert_eq!(flow_hash(&a), flow_hash(&b));
        let plain = ipv4_udp([198, 18, 0, 1], [198, 18, 0, 2], 1000, 53, 0);
        assert_eq!(
            flow_hash(&a),
            flow_hash(&plain),
            "the same flow as without MPLS"
        );
        let mut c = other(7);
        let d = c.clone();
        c[..6].copy_from_slice(&d[6..12]);
        c[6..12].copy_from_slice(&d[..6]);
        assert_eq!(flow_hash(&c), flow_hash(&d), "MAC pair either way round");
    }

    #[test]
    fn symmetric_in_both_directions() {
        let a = ipv4_udp([198, 18, 0, 1], [198, 18, 0, 2], 1000, 53, 0);
        let b = ipv4_udp([198, 18, 0, 2], [198, 18, 0, 1], 53, 1000, 0);
        assert_eq!(flow_hash(&a), flow_hash(&b));
        let c = ipv4_udp([198, 18, 0, 1], [198, 18, 0, 2], 1001, 53, 0);
        assert_ne!(flow_hash(&a), flow_hash(&c));
        let mut s6 = [0u8; 16];
        s6[0] = 0xfd;
        s6[15] = 1;
        let mut d6 = s6;
        d6[15] = 2;
        assert_eq!(
            flow_hash(&ipv6_tcp(s6, d6, 5, 6)),
            flow_hash(&ipv6_tcp(d6, s6, 6, 5))
        );
    }

    #[test]
    fn offline_skips_an_outer_tag_like_the_kernel() {
        let f = ipv4_udp([198, 18, 0, 1], [198, 18, 0, 2], 1000, 53, 0);
        assert_eq!(
            flow_hash_offline(&tagged(tagged(f.clone()))),
            flow_hash(&tagged(f.clone()))
        );
        assert_eq!(flow_hash(&tagged(f.clone())), flow_hash(&f));
    }

    /// The kernel program and the Rust function make the same decision on the
    /// same bytes, run through libpcap's interpreter.
    #[test]
    fn bpf_and_rust_agree() {
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for n in [2u32, 3, 7, 16] {
            let mut program = Program::accept_all(96);
            program.add_sampler(Sampling::Flows { n }).unwrap();
            let mut kept = 0;
            for i in 0..4000 {
                let r = next();
                let sp = (r & 0xffff) as u16;
                let dp = (r >> 16 & 0xffff) as u16;
                let a = (r >> 32).to_be_bytes();
                let mut f = match i % 8 {
                    5 => mpls(
                        1 + (r >> 60) as usize % 5,
                        ipv4_udp([198, 18, a[0], a[1]], [198, 19, a[2], a[3]], sp, dp, 0)[14..]
                            .to_vec(),
                    ),
                    6 => {
                        let mut s = [0u8; 16];
                        s[..8].copy_from_slice(&r.to_be_bytes());
                        mpls(
                            1 + (r >> 61) as usize % 4,
                            ipv6_tcp(s, [0xfd; 16], sp, dp)[14..].to_vec(),
                        )
                    }
                    7 => other(r),
                    0 => ipv4_udp([198, 18, a[0], a[1]], [198, 19, a[2], a[3]], sp, dp, 0),
                    1 => ipv4_udp([198, 18, a[0], a[1]], [198, 19, a[2], a[3]], sp, dp, 0x2000),
                    2 => {
                        let mut s = [0u8; 16];
                        s[..8].copy_from_slice(&r.to_be_bytes());
                        ipv6_tcp(s, [0xfd; 16], sp, dp)
                    }
                    3 => tagged(ipv4_udp([198, 18, a[0], a[1]], [198, 19, 1, 1], sp, dp, 0)),
                    _ => {
                        let mut f = vec![0u8; 42];
                        f[12] = 0x08;
                        f[13] = 0x06;
                        f
                    }
                };
                if i % 7 == 0 {
                    let cut = (next() as usize) % f.len();
                    f.truncate(cut);
                }
                let rust = flow_hash(&f).is_some_and(|h| h % n == 0);
                let bpf = program.run(&f, f.len() as u32) > 0;
                assert_eq!(rust, bpf, "frame {i} n {n}: {f:02x?}");
                kept += rust as u32;
            }
            assert!(kept > 4000 / n / 3, "n {n} kept {kept}");
        }
    }
}
