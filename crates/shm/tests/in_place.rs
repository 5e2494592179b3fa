//! Chunks filled in place (`RingWriter::extend` / `commit`): two writers and
//! whole-chunk appends interleaved at random over a small ring that wraps
//! many times, a reader that checks every record arrives once, in order,
//! never before its chunk is committed, and that a chunk holds one writer's
//! records only.

use ringcap_shm::RingWriter;

mod common;
use common::{reader_for, CAP};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A record: its length (u32), its writer (u8), its sequence number (u64),
/// then bytes derived from the number; `len` bytes in all (at least 13).
fn record(who: u8, seq: u64, len: usize) -> Vec<u8> {
    let len = len.max(13);
    let mut v = (len as u32).to_le_bytes().to_vec();
    v.push(who);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend((13..len).map(|i| (seq as u8) ^ (i as u8).wrapping_mul(31)));
    v
}

/// The records of a chunk's payload: (writer, sequence number, bytes).
fn records(mut p: &[u8]) -> Vec<(u8, u64, Vec<u8>)> {
    let mut out = Vec::new();
    while !p.is_empty() {
        let len = u32::from_le_bytes(p[..4].try_into().unwrap()) as usize;
        let seq = u64::from_le_bytes(p[5..13].try_into().unwrap());
        out.push((p[4], seq, p[..len].to_vec()));
        p = &p[len..];
    }
    out
}

#[test]
fn records_filled_in_place_arrive_once_in_order_and_only_when_committed() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let writers = [w.writer(), w.writer()];
    let mut rng = Rng(11);
    let mut seq = 0u64;
    // Sent and not yet read, oldest first; per writer, records of its last
    // extend when nothing since can have committed them (earlier ones may
    // have been, when a chunk reached its room).
    let mut sent = std::collections::VecDeque::new();
    let mut uncommitted = [0usize; 2];
    let (mut dropped, mut read, mut committed_by_other) = (0u64, 0u64, 0u64);
    while read < 50_000 {
        for _ in 0..(1 + rng.next() % 6) {
            let who = (rng.next() % 2) as usize;
            let n = 1 + rng.next() % 4;
            let mut payload = Vec::new();
            let mut recs = Vec::new();
            for _ in 0..n {
                let len = match rng.next() % 8 {
                    0 => 2000 + (rng.next() % 6000) as usize,
                    _ => 13 + (rng.next() % 200) as usize,
                };
                let rec = record(who as u8, seq, len);
                seq += 1;
                payload.extend_from_slice(&rec);
                recs.push((who as u8, rec));
            }
            let other = 1 - who;
            // One time in ten a whole chunk made elsewhere (it commits any
            // open chunk first, and itself).
            let whole = rng.next().is_multiple_of(10);
            let ok = if whole {
                w.append(&payload, n as u32)
            } else if rng.next().is_multiple_of(2) {
                w.extend(writers[who], &payload, n as u32)
            } else {
                // Written where it stays, by the caller.
                w.extend_with(writers[who], payload.len(), n as u32, |room| {
                    room.copy_from_slice(&payload)
                })
            };
            if uncommitted[other] > 0 {
                // Whatever this writer did committed the other's chunk.
                committed_by_other += 1;
                uncommitted[other] = 0;
            }
            if ok {
                sent.extend(recs);
                uncommitted[who] = if whole { 0 } else { n as usize };
            } else {
                dropped += n;
                // A refused extend may have committed this writer's chunk
                // first; appends always do.
                uncommitted[who] = 0;
            }
            if rng.next().is_multiple_of(4) {
                w.commit(writers[who]);
                uncommitted[who] = 0;
            }
        }
        // Only committed records are visible.
        let visible = sent.len() - uncommitted.iter().sum::<usize>();
        let mut seen = 0;
        for _ in 0..(rng.next() % 6) {
            let Some(c) = r.next_chunk().unwrap() else {
                break;
            };
            let got = records(c.payload);
            assert_eq!(got.len(), c.packets as usize, "packets in the header");
            assert!(got.iter().all(|g| g.0 == got[0].0), "one writer per chunk");
            for (who, s, bytes) in got {
                let (w_want, want) = sent.pop_front().expect("a record nobody sent");
                assert_eq!((who, &bytes), (w_want, &want), "record {s}");
                seen += 1;
                read += 1;
            }
        }
        assert!(seen <= visible, "a record was read before its commit");
        r.release();
    }
    assert!(dropped > 0 && committed_by_other > 0, "the premise");
    let c = w.counters();
    assert_eq!(c.packets_dropped, dropped);
    assert!(c.write_position > 20 * CAP as u64, "wrapped many times");
}

#[test]
fn finishing_commits_the_open_chunk_and_refuses_more() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let a = w.writer();
    assert!(w.extend(a, &record(0, 1, 40), 1));
    assert!(w.extend(a, &record(0, 2, 50), 1));
    assert!(
        r.next_chunk().unwrap().is_none(),
        "nothing before the commit"
    );
    w.finish();
    let c = r.next_chunk().unwrap().expect("committed by finish");
    assert_eq!((c.packets, c.payload.len()), (2, 90));
    assert!(!w.extend(a, &record(0, 3, 40), 1));
    assert_eq!(w.counters().packets_dropped, 1);
}

#[test]
fn a_chunk_filled_in_place_never_outgrows_what_the_client_released() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let a = w.writer();
    // Fill the ring with 1000-byte records the client does not read.
    let mut n = 0u64;
    while w.extend(a, &record(0, n, 1000), 1) {
        n += 1;
        if n.is_multiple_of(20) {
            w.commit(a);
        }
    }
    w.commit(a);
    assert!(n > 50 && n < 66, "{n} records of 1000 bytes in 64 KiB");
    // Every byte the ring wrote is accounted for and nothing overlaps:
    // the reader gets all n records back.
    let mut got = 0;
    while let Some(c) = r.next_chunk().unwrap() {
        got += records(c.payload).len() as u64;
    }
    assert_eq!(got, n);
    r.release();
    assert!(w.extend(a, &record(0, n, 1000), 1), "room again once read");
}
