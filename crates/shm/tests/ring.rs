//! The ring through its public API: round trips with wrap-around, a full
//! ring, releases, a hostile client, wake-ups, and a reader thread racing a
//! writer over a million chunks.

use ringcap_shm::layout::{self, HEADER_SIZE};
use ringcap_shm::{RingReader, RingWriter};
use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::{dup, reader_for, CAP};

/// A payload that says which chunk it is: the sequence number, then bytes
/// derived from it, `len` bytes in all (at least 8).
fn numbered(seq: u64, len: usize) -> Vec<u8> {
    let mut v = seq.to_le_bytes().to_vec();
    v.extend((8..len.max(8)).map(|i| (seq as u8) ^ (i as u8).wrapping_mul(31)));
    v
}

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

#[test]
fn writer_and_reader_are_send() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<RingWriter>();
    send::<RingReader>();
    sync::<RingReader>();
}

#[test]
fn capacities_are_checked() {
    for cap in [
        0,
        1,
        4096,
        32 << 10,
        (64 << 10) + 8,
        3 << 16,
        8 << 30,
        usize::MAX,
    ] {
        let e = RingWriter::create(cap).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{cap}: {e}");
    }
    // The largest ring costs nothing until it is written: memory is only
    // allocated for the pages the ring touches.
    let mut w = RingWriter::create(4 << 30).unwrap();
    let mut r = reader_for(&w);
    assert_eq!(r.capacity(), 4 << 30);
    assert!(w.append(b"big ring", 3));
    let c = r.next_chunk().unwrap().unwrap();
    assert_eq!((c.payload, c.packets), (&b"big ring"[..], 3));
}

#[test]
fn round_trip_with_wrap_around() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let mut rng = Rng(7);
    let mut sent = VecDeque::new();
    let mut next_seq = 0u64;
    let mut received = 0u64;
    let mut chunk_bytes = 0u64; // headers + padded payloads, no padding markers
    let mut zero_len = 0;
    while received < 20_000 {
        // Sizes from 0 to ~9 KiB, including odd ones; bursts of appends so
        // the ring is often nearly full when a chunk meets the end.
        for _ in 0..(1 + rng.next() % 8) {
            let len = match rng.next() % 10 {
                0 => 0,
                1 => (rng.next() % 8) as usize,
                _ => 8 + (rng.next() % 9000) as usize,
            };
            let payload = if len == 0 {
                Vec::new()
            } else {
                numbered(next_seq, len)
            };
            if w.append(&payload, (next_seq % 5) as u32) {
                chunk_bytes += layout::chunk_size(payload.len() as u32);
                sent.push_back((next_seq, payload));
                next_seq += 1;
            } else {
                break;
            }
        }
        for _ in 0..(rng.next() % 8) {
            match r.next_chunk().unwrap() {
                Some(c) => {
                    let (seq, payload) = sent.pop_front().expect("a chunk nobody sent");
                    assert_eq!(c.payload, &payload[..], "chunk {seq}");
                    assert_eq!(c.packets, (seq % 5) as u32);
                    zero_len += usize::from(c.payload.is_empty());
                    received += 1;
                }
                None => break,
            }
        }
        r.release();
    }
    let c = w.counters();
    assert_eq!(c.chunks_written, next_seq);
    assert_eq!(r.counters(), c);
    // Wrapped many times, and padding markers were needed: the write
    // position counts more than the chunks themselves.
    assert!(c.write_position > 50 * CAP as u64, "{c:?}");
    assert!(
        c.write_position > chunk_bytes,
        "no padding marker was ever written"
    );
    assert!(zero_len > 0);
}

#[test]
fn chunk_that_exactly_reaches_the_end_needs_no_padding() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    // 8 + 32760 = half the ring, twice: ends exactly at the end.
    let half = CAP / 2 - 8;
    assert_eq!(w.max_payload(), half);
    assert!(w.append(&numbered(0, half), 1));
    assert!(r.next_chunk().unwrap().is_some());
    r.release();
    assert!(w.append(&numbered(1, half), 1));
    assert_eq!(w.counters().write_position, CAP as u64);
    assert_eq!(
        r.next_chunk().unwrap().unwrap().payload,
        &numbered(1, half)[..]
    );
    r.release();
    // The next one starts at offset 0 without a marker.
    assert!(w.append(b"again", 1));
    assert_eq!(w.counters().write_position, CAP as u64 + 16);
    assert_eq!(r.next_chunk().unwrap().unwrap().payload, b"again");
}

#[test]
fn max_payload_fits_an_empty_ring_at_any_offset() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let big = vec![0xab; w.max_payload()];
    for step in 0..(CAP / 8) {
        assert!(w.append(&big, 1), "at offset {}", step * 8);
        assert_eq!(r.next_chunk().unwrap().unwrap().payload.len(), big.len());
        // Move the offset on by 8 bytes.
        assert!(w.append(&[], 0));
        assert!(r.next_chunk().unwrap().is_some());
        r.release();
    }
    assert_eq!(w.counters().packets_dropped, 0);
    // Larger than capacity - 8 never fits, and is counted.
    assert!(!w.append(&vec![0; CAP - 7], 9));
    let c = w.counters();
    assert_eq!((c.packets_dropped, c.bytes_dropped), (9, CAP as u64 - 7));
}

#[test]
fn full_ring_refuses_and_counts_drops() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let payload = vec![7u8; 1000]; // 1008 bytes a chunk
    let mut appended = 0;
    while w.append(&payload, 3) {
        appended += 1;
    }
    assert_eq!(appended, CAP / 1008);
    assert!(w.free_bytes() < 1008);
    assert_eq!(w.free_bytes(), CAP - appended * 1008);
    for _ in 0..10 {
        assert!(!w.append(&payload, 3));
    }
    w.add_dropped(5, 500);
    let c = w.counters();
    assert_eq!(c.chunks_written, appended as u64);
    assert_eq!(c.packets_written, 3 * appended as u64);
    assert_eq!(c.bytes_written, 1000 * appended as u64);
    assert_eq!(c.packets_dropped, 3 * 11 + 5);
    assert_eq!(c.bytes_dropped, 1000 * 11 + 500);
    // The client sees the same numbers in the header.
    assert_eq!(r.counters(), c);
    // Reading without releasing frees nothing.
    for _ in 0..appended {
        assert!(r.next_chunk().unwrap().is_some());
    }
    assert!(r.next_chunk().unwrap().is_none());
    assert!(!w.append(&payload, 3));
    assert_eq!(w.read_position(), 0);
}

#[test]
fn release_frees_space() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let payload = vec![1u8; 4088]; // 4096 bytes a chunk: 16 fill the ring
    for _ in 0..16 {
        assert!(w.append(&payload, 1));
    }
    assert_eq!(w.free_bytes(), 0);
    assert!(!w.append(b"", 0));
    for released in 1..=16 {
        assert!(r.next_chunk().unwrap().is_some());
        r.release();
        assert_eq!(w.free_bytes(), released * 4096);
        assert_eq!(w.read_position(), released as u64 * 4096);
    }
    for _ in 0..16 {
        assert!(w.append(&payload, 1));
    }
    assert!(!w.append(b"", 0));
}

/// What a hostile client controls: its read position, written here with
/// `pwrite` on the consumer region (as a client that never maps a
/// `RingReader` could), at any time, with any value. The daemon must keep
/// `0 <= free <= capacity`, keep `free == capacity - (write - released)` for
/// the position clamped to `[previous, write]`, decide every append exactly
/// as that clamped position allows, and never overwrite a chunk the clamped
/// position has not freed.
#[test]
fn hostile_client_positions() {
    let mut w = RingWriter::create(CAP).unwrap();
    let (d, c, _) = w.fds();
    let data = File::from(dup(d));
    let consumer = File::from(dup(c));
    let cap = CAP as u64;
    let mut rng = Rng(0xdead_beef);
    // Model: every chunk appended, by position; the clamped position.
    let mut chunks: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut released = 0u64;
    let mut client_value = 0u64;
    let mut write = 0u64;
    let mut seq = 0u64;
    let mut image = vec![0u8; CAP];
    for round in 0..6000 {
        match rng.next() % 3 {
            0 => {
                client_value = match rng.next() % 9 {
                    0 => u64::MAX,
                    1 => 0,
                    2 => rng.next(),
                    3 => write + 8 * (1 + rng.next() % 100), // ahead of the data
                    4 => released.saturating_sub(8),         // backwards
                    5 => write.saturating_sub(3),            // not aligned
                    6 => released + rng.next() % (write - released + 1), // mid-chunk
                    7 => chunks
                        .get((rng.next() % (chunks.len() as u64 + 1)) as usize)
                        .map_or(write, |c| c.0), // a real chunk boundary
                    _ => write,
                };
                consumer
                    .write_all_at(&client_value.to_le_bytes(), 0)
                    .unwrap();
                // The flag too: garbage there must not matter.
                consumer
                    .write_all_at(&(rng.next() as u32).to_le_bytes(), 64)
                    .unwrap();
                if rng.next().is_multiple_of(2) {
                    let free = w.free_bytes() as u64;
                    released = client_value.clamp(released, write);
                    assert!(free <= cap);
                    assert_eq!(free, cap - (write - released), "round {round}");
                    assert_eq!(w.read_position(), released);
                }
            }
            _ => {
                let len = (rng.next() % 6000) as usize;
                let payload = numbered(seq, len);
                let need = layout::chunk_size(payload.len() as u32);
                let off = write % cap;
                let total = if need <= cap - off {
                    need
                } else {
                    cap - off + need
                };
                // The daemon looks at the client's value only when what it
                // knows to be free is not enough.
                if total > cap - (write - released) {
                    released = client_value.clamp(released, write);
                }
                let fits = total <= cap - (write - released);
                assert_eq!(w.append(&payload, 1), fits, "round {round}");
                if fits {
                    write += total;
                    chunks.push_back((write - need, payload));
                    seq += 1;
                }
            }
        }
        assert_eq!(w.counters().write_position, write);
        assert!(write - w.read_position() <= cap);
        while chunks.front().is_some_and(|c| c.0 < released) {
            chunks.pop_front();
        }
        // Every chunk not freed by the clamped position is intact.
        if round % 10 == 0 {
            data.read_exact_at(&mut image, HEADER_SIZE as u64).unwrap();
            for (pos, payload) in &chunks {
                let at = (pos % cap) as usize;
                let word = u64::from_le_bytes(image[at..at + 8].try_into().unwrap());
                assert_eq!(
                    layout::decode_chunk_header(word),
                    (payload.len() as u32, 1),
                    "round {round}: chunk at {pos} overwritten"
                );
                assert_eq!(&image[at + 8..at + 8 + payload.len()], &payload[..]);
            }
        }
    }
    let c = w.counters();
    assert!(c.chunks_written > 1000 && c.packets_dropped > 10, "{c:?}");
}

/// The other thing a client can do to its side: ask for a wake-up after
/// every append and never drain them. The daemon writes to its own end of a
/// pipe (an open file description the client does not share, so it cannot
/// make it blocking either): once the pipe is full, writes fail with EAGAIN
/// and the daemon goes on.
#[test]
fn hostile_client_wakeups_never_block_the_daemon() {
    let mut w = RingWriter::create(CAP).unwrap();
    let (_, c, e) = w.fds();
    let consumer = File::from(dup(c));
    let _client_end = dup(e);
    consumer.write_all_at(&1u32.to_le_bytes(), 64).unwrap();
    let started = Instant::now();
    for i in 0..200_000u64 {
        // The client "reads" everything at once (garbage, but harmless).
        consumer.write_all_at(&(i * 16).to_le_bytes(), 0).unwrap();
        assert!(w.append(&[0u8; 8], 1));
    }
    w.finish();
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(w.counters().packets_dropped, 0);
}

#[test]
fn wait_times_out_and_wakes() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let t = Instant::now();
    assert!(!r.wait(Duration::from_millis(50)).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(50));
    assert!(!r.wait(Duration::ZERO).unwrap());

    // Unread data: returns at once.
    assert!(w.append(b"x", 1));
    let t = Instant::now();
    assert!(r.wait(Duration::from_secs(10)).unwrap());
    assert!(t.elapsed() < Duration::from_secs(1));
    assert!(r.next_chunk().unwrap().is_some());
    r.release();

    // An append from another thread wakes a sleeping reader.
    let writer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        assert!(w.append(b"late", 1));
        thread::sleep(Duration::from_millis(100));
        w.finish();
        w
    });
    let t = Instant::now();
    assert!(r.wait(Duration::from_secs(10)).unwrap());
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(r.next_chunk().unwrap().unwrap().payload, b"late");
    // finish() wakes it too.
    while !r.ended() {
        assert!(r.wait(Duration::from_secs(10)).unwrap());
    }
    let mut w = writer.join().unwrap();
    assert!(r.next_chunk().unwrap().is_none());
    // After the end: appends are refused and counted.
    assert!(!w.append(b"after", 2));
    assert_eq!(w.counters().packets_dropped, 2);
}

#[test]
fn dropping_the_writer_ends_the_ring() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    assert!(w.append(b"last words", 1));
    drop(w);
    assert!(r.ended());
    assert_eq!(r.next_chunk().unwrap().unwrap().payload, b"last words");
    assert!(r.next_chunk().unwrap().is_none());
    // The pipe has hung up: wait returns at once, every time.
    assert!(r.wait(Duration::from_secs(10)).unwrap());
    assert!(r.wait(Duration::from_secs(10)).unwrap());
}

/// The wake-up test: one chunk at a time, the writer waiting for each to be
/// released before the next, so the reader goes to sleep before almost every
/// chunk and the daemon's append races the reader's "set the flag, check
/// again, sleep". A lost wake-up leaves a chunk unread while `wait` times
/// out (nothing else would wake the reader: the writer is waiting for it).
#[test]
fn ping_pong_never_loses_a_wake_up() {
    const N: u64 = 100_000;
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let reader = thread::spawn(move || {
        let mut seq = 0;
        while seq < N {
            match r.next_chunk().unwrap() {
                Some(c) => {
                    assert_eq!(c.payload, seq.to_le_bytes());
                    seq += 1;
                    r.release();
                }
                None => {
                    if !r.wait(Duration::from_secs(2)).unwrap() {
                        let pending = r.next_chunk().unwrap().is_some();
                        panic!("wait timed out at chunk {seq} (a chunk was pending: {pending})");
                    }
                }
            }
        }
    });
    'writing: for seq in 0..N {
        assert!(w.append(&seq.to_le_bytes(), 1));
        while w.free_bytes() != CAP {
            if reader.is_finished() {
                break 'writing;
            }
            std::hint::spin_loop();
        }
    }
    reader.join().unwrap();
}

/// The ordering test: a writer thread appends a million numbered chunks
/// of 8..=71 bytes into a 64 KiB ring while a reader thread (with its own
/// mapping of the same pages) checks every chunk's number and contents,
/// releasing in small batches and sleeping in `wait` when it catches up.
/// A missing Release/Acquire shows up as a stale header or payload, a lost
/// wake-up as a `wait` that times out.
#[test]
fn reader_thread_races_writer_over_a_million_chunks() {
    const N: u64 = 1_000_000;
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w);
    let reader = thread::spawn(move || {
        let mut seq = 0u64;
        let mut waits = 0u64;
        while seq < N {
            match r.next_chunk().unwrap() {
                Some(c) => {
                    let len = 8 + (seq % 64) as usize;
                    assert_eq!(c.payload.len(), len, "chunk {seq}");
                    assert_eq!(c.payload, &numbered(seq, len)[..], "chunk {seq}");
                    assert_eq!(c.packets, (seq % 3) as u32);
                    seq += 1;
                    if seq.is_multiple_of(7) {
                        r.release();
                    }
                }
                None => {
                    r.release();
                    waits += 1;
                    assert!(
                        r.wait(Duration::from_secs(10)).unwrap(),
                        "lost wake-up at chunk {seq}"
                    );
                }
            }
        }
        r.release();
        while !r.ended() {
            assert!(r.wait(Duration::from_secs(10)).unwrap());
        }
        assert!(r.next_chunk().unwrap().is_none());
        (r.counters(), waits)
    });
    let mut refused = 0u64;
    let mut dropped = 0u64;
    'writing: for seq in 0..N {
        let payload = numbered(seq, 8 + (seq % 64) as usize);
        while !w.append(&payload, (seq % 3) as u32) {
            // Refused appends count as drops even though this test retries.
            refused += 1;
            dropped += seq % 3;
            if reader.is_finished() {
                break 'writing; // it failed: report its panic below
            }
            thread::yield_now();
        }
    }
    w.finish();
    let (seen, waits) = reader.join().unwrap();
    let c = w.counters();
    assert_eq!(seen, c);
    assert_eq!(c.chunks_written, N);
    assert_eq!(c.packets_dropped, dropped);
    eprintln!("{N} chunks, writer refused {refused} times, reader waited {waits} times");
}
