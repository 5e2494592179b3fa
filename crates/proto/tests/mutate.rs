//! Mutation testing of the decoders: valid encodings of every sample message,
//! damaged by bit flips, byte changes, truncations, insertions, deletions and
//! splices, must never make `decode_request`/`decode_response` panic; and
//! whatever they do accept must be a valid message that re-encodes and
//! decodes to itself.
//!
//! A small deterministic PRNG (splitmix64) keeps the run reproducible
//! without a dependency: a failure prints the seed and the input. The fuzz
//! target in `crates/proto/fuzz` explores further with coverage guidance.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::*;
use ringcap_proto::*;

/// splitmix64: tiny, fast, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Fragments that steer mutations towards interesting JSON and bounds.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b",",
    b":",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"null",
    b"true",
    b"-1",
    b"0",
    b"1e999",
    b"-0.0",
    b"4294967296",
    b"18446744073709551616",
    b"NaN",
    b"\"type\"",
    b"\"x\":1,",
    b"\"../x\"",
    b"\".hidden\"",
    b"\xff",
    b"\xc3",
    b"\x00",
    b" ",
    b"{\"bytes\":0}",
    b"{\"headers\":{\"max\":13}}",
    b"\"stats\"",
    b"RCD1",
];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    // Several mutations stacked, so damage compounds.
    for _ in 0..=rng.below(4) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            2 => input.truncate(rng.below(len + 1)),
            3 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(at..at, bytes);
            }
            4 => {
                let at = rng.below(len + 1);
                let token = TOKENS[rng.below(TOKENS.len())];
                input.splice(at..at, token.iter().copied());
            }
            5 if len > 0 => {
                let at = rng.below(len);
                let end = (at + 1 + rng.below(16)).min(len);
                input.drain(at..end);
            }
            6 if len > 0 => {
                // Duplicate a slice elsewhere (repeats keys, nests values).
                let at = rng.below(len);
                let end = (at + 1 + rng.below(32)).min(len);
                let piece = input[at..end].to_vec();
                let to = rng.below(len + 1);
                input.splice(to..to, piece);
            }
            _ if len > HEADER_LEN => {
                // Replace a digit run with an extreme number.
                let i = HEADER_LEN + rng.below(len - HEADER_LEN);
                if input[i].is_ascii_digit() {
                    let extreme: &[u8] =
                        [&b"0"[..], b"262145", b"2147483649", b"99999999999999999999"]
                            [rng.below(4)];
                    input.splice(i..i + 1, extreme.iter().copied());
                }
            }
            _ => input.push(rng.next() as u8),
        }
    }
}

fn check(seed: u64, round: usize, input: &[u8]) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        if let Ok(request) = decode_request(input) {
            request.validate().expect("decoded request validates");
            let again = encode_request(&request);
            assert_eq!(decode_request(&again).unwrap(), request);
        }
        if let Ok(response) = decode_response(input) {
            response.validate().expect("decoded response validates");
            let again = encode_response(&response);
            assert_eq!(decode_response(&again).unwrap(), response);
        }
        if let Err(e) = decode_request(input) {
            // Error texts are bounded, printable, and fit to send back.
            let text = e.to_string();
            assert!(
                text.len() < 2048 && text.chars().all(|c| !c.is_control()),
                "{text:?}"
            );
        }
    }));
    if outcome.is_err() {
        panic!("seed {seed:#x} round {round}: input {input:?}");
    }
}

#[test]
fn mutated_encodings_never_panic() {
    let mut seeds: Vec<Vec<u8>> = requests().iter().map(encode_request).collect();
    seeds.extend(responses().iter().map(encode_response));
    // More rounds in release builds (the fuzz script, CI with --release).
    let rounds = if cfg!(debug_assertions) {
        60_000
    } else {
        600_000
    };
    let seed = 0x5eed_0001;
    let mut rng = Rng(seed);
    let mut accepted = 0usize;
    for round in 0..rounds {
        let mut input = seeds[rng.below(seeds.len())].clone();
        mutate(&mut rng, &mut input);
        check(seed, round, &input);
        if decode_request(&input).is_ok() || decode_response(&input).is_ok() {
            accepted += 1;
        }
    }
    // The mutations must not all be caught by the header check: a healthy
    // share must reach serde and validation, and some must still decode.
    assert!(
        accepted > rounds / 100,
        "only {accepted} of {rounds} decoded"
    );
}

#[test]
fn random_bytes_never_panic() {
    let seed = 0x5eed_0002;
    let mut rng = Rng(seed);
    for round in 0..20_000 {
        let len = rng.below(64);
        let mut input: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Half behind a valid header, so the body parser sees them.
        if rng.below(2) == 0 {
            input = framed(
                if rng.below(2) == 0 {
                    MessageKind::Request
                } else {
                    MessageKind::Response
                },
                &input,
            );
        }
        check(seed, round, &input);
    }
}
