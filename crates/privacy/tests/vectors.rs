//! Crypto-PAn against its references: the original distribution's sample
//! trace (IPv4), a second implementation (PyPI `yacryptopan`) for IPv6 and
//! random IPv4, and the properties that make it what it is.

use ringcap_privacy::cryptopan::CryptoPan;
use std::collections::HashSet;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::{Command, Stdio};

const REFERENCE_KEY: [u8; 32] = [
    21, 34, 23, 141, 51, 164, 207, 128, 19, 10, 91, 22, 73, 144, 125, 16, 216, 152, 143, 131, 121,
    121, 101, 39, 98, 87, 76, 45, 42, 132, 34, 2,
];

#[test]
fn sample_trace_vectors_all_match() {
    let c = CryptoPan::new(&REFERENCE_KEY);
    let text = include_str!("data/cryptopan-sample-trace-v4.txt");
    let mut n = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (raw, sanitized) = line.split_once(' ').unwrap();
        let raw: Ipv4Addr = raw.parse().unwrap();
        let want: Ipv4Addr = sanitized.parse().unwrap();
        assert_eq!(Ipv4Addr::from(c.ipv4(raw.octets())), want, "{raw}");
        n += 1;
    }
    assert_eq!(n, 71);
}

/// A small deterministic generator (xorshift64*), so failures repeat.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn common_prefix(a: u128, b: u128) -> u32 {
    (a ^ b).leading_zeros()
}

#[test]
fn prefix_preserving_and_one_to_one() {
    let c = CryptoPan::new(&REFERENCE_KEY);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Pairs sharing a prefix of every length, IPv4 and IPv6.
    for i in 0..4000u32 {
        let bits = if i % 2 == 0 { 32 } else { 128 };
        let a = u128::from(rng.next()) << 64 | u128::from(rng.next());
        let share = i % (bits + 1);
        let b = if share == bits {
            a
        } else {
            // Same first `share` bits, then the next bit differs.
            let flip = 1u128 << (127 - share);
            let rest = (u128::from(rng.next()) << 64 | u128::from(rng.next())) & (flip - 1);
            ((a & !(flip | (flip - 1))) | (!a & flip)) | rest
        };
        let mask = u128::MAX << (128 - bits);
        let (a, b) = (a & mask, b & mask);
        let (x, y) = (c.anonymize_bits(a, bits), c.anonymize_bits(b, bits));
        let want = common_prefix(a, b).min(bits);
        assert_eq!(common_prefix(x, y).min(bits), want, "{a:032x} {b:032x}");
    }
    // One-to-one on a large sample (a collision would need two originals
    // with one image: with distinct originals, images must be distinct).
    let mut seen = HashSet::new();
    let mut origs = HashSet::new();
    for _ in 0..100_000 {
        let a = rng.next() as u32;
        if origs.insert(a) {
            assert!(
                seen.insert(c.ipv4(a.to_be_bytes())),
                "two addresses map to one"
            );
        }
    }
    // All of a /24 map onto all of a /24.
    let imgs: HashSet<_> = (0..=255u8).map(|x| c.ipv4([198, 18, 7, x])).collect();
    assert_eq!(imgs.len(), 256);
    assert_eq!(
        imgs.iter()
            .map(|i| [i[0], i[1], i[2]])
            .collect::<HashSet<_>>()
            .len(),
        1
    );
}

#[test]
fn matches_yacryptopan_for_ipv6_and_random_ipv4() {
    let python = match ringcap_testkit::oracle::oracle_python("yacryptopan") {
        Ok(p) => p,
        Err(reason) => return ringcap_testkit::skip(reason),
    };
    let c = CryptoPan::new(&REFERENCE_KEY);
    let mut rng = Rng(42);
    let mut addrs: Vec<String> = vec!["::1".into(), "2001:db8::1".into(), "198.18.0.1".into()];
    for i in 0..600 {
        if i % 3 == 0 {
            addrs.push(Ipv4Addr::from(rng.next() as u32).to_string());
        } else {
            let v = u128::from(rng.next()) << 64 | u128::from(rng.next());
            addrs.push(Ipv6Addr::from(v).to_string());
        }
    }
    let script = format!(
        "import sys\nfrom yacryptopan import CryptoPAn\nc = CryptoPAn(bytes({REFERENCE_KEY:?}))\n\
         for l in sys.stdin:\n    print(c.anonymize(l.strip()))\n"
    );
    let mut child = Command::new(&python)
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(addrs.join("\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let theirs: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(theirs.len(), addrs.len());
    for (a, want) in addrs.iter().zip(theirs) {
        let got = match a.parse::<std::net::IpAddr>().unwrap() {
            std::net::IpAddr::V4(v) => Ipv4Addr::from(c.ipv4(v.octets())).to_string(),
            std::net::IpAddr::V6(v) => Ipv6Addr::from(c.ipv6(v.octets())).to_string(),
        };
        assert_eq!(got, want, "{a}");
    }
}
