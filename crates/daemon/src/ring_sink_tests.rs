//! Tests of the ring sink: compressed sessions sharing blocks, records
//! filled in place in order.

use super::*;
use ringcap_shm::RingReader;

/// A compressed sink sharing `blocks`, and a reader of its ring.
fn sink(blocks: &Arc<SharedBlocks>) -> (RingSink, RingReader) {
    let mut w = RingWriter::create(4 << 20).expect("ring");
    let (d, c, e) = w.fds();
    let own = |f: std::os::fd::BorrowedFd<'_>| f.try_clone_to_owned().expect("dup");
    let reader = RingReader::map(own(d), own(c), own(e)).expect("reader");
    w.prefault();
    let sinks = RingSinks {
        ring: Arc::new(Mutex::new(w)),
        counters: Arc::new(SinkCounters::default()),
        max_pps: None,
        max_bps: None,
        threads: 1,
        compress: Some(blocks.clone()),
    };
    (sinks.sink(0), reader)
}

/// Two uncompressed sinks on one ring (a session on two interfaces),
/// taking runs of records of every size and single packets: each
/// sink's records arrive once and in order, a chunk holds one sink's
/// only, and nothing waits longer than a flush.
#[test]
fn records_go_into_the_ring_in_place_in_order() {
    let w = RingWriter::create(1 << 20).expect("ring");
    let (d, c, e) = w.fds();
    let own = |f: std::os::fd::BorrowedFd<'_>| f.try_clone_to_owned().expect("dup");
    let mut reader = RingReader::map(own(d), own(c), own(e)).expect("reader");
    let sinks = RingSinks {
        ring: Arc::new(Mutex::new(w)),
        counters: Arc::new(SinkCounters::default()),
        max_pps: None,
        max_bps: None,
        threads: 2,
        compress: None,
    };
    let mut s = [sinks.sink(0), sinks.sink(1)];
    let mut want: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut got: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let read = |reader: &mut RingReader, got: &mut [Vec<Vec<u8>>; 2]| {
        while let Some(chunk) = reader.next_chunk().expect("ring") {
            let mut p = chunk.payload;
            let mut from = None;
            while let Some((r, len)) = read_ring_record(p) {
                // The sink's number is in the first byte.
                let who = usize::from(r.data[0]);
                assert!(from.is_none_or(|f| f == who), "one sink per chunk");
                from = Some(who);
                got[who].push(p[..len].to_vec());
                p = &p[len..];
            }
            assert!(p.is_empty(), "whole records");
        }
        reader.release();
    };
    let mut i = 0u64;
    for round in 0..400u64 {
        let who = (round % 2) as usize;
        // Runs of 1..=64 records of 40..=1540 bytes; now and then single
        // packets (as after a sink refused runs).
        let n = 1 + (round * 37 % 64) as usize;
        let mut run = Vec::new();
        for k in 0..n {
            let mut f = vec![who as u8; 40 + (round as usize * 13 + k * 101) % 1500];
            f[1..9].copy_from_slice(&i.to_le_bytes());
            let rec = Record::whole(1_000 + i, f.len() as u32 + 4, &f);
            let mut bytes = vec![0; HEADER_LEN + f.len()];
            write_ring_record(&mut bytes, &rec);
            if round % 7 == 3 {
                s[who].push(rec);
            } else {
                run.extend_from_slice(&bytes);
            }
            want[who].push(bytes);
            i += 1;
        }
        if !run.is_empty() {
            assert!(s[who].push_records(&run, n as u32));
        }
        if round % 5 == 0 {
            read(&mut reader, &mut got);
        }
        if round % 50 == 0 {
            // What a flush hands over is visible at once.
            s[who].flush();
            read(&mut reader, &mut got);
            assert_eq!(got[who].len(), want[who].len(), "flushed");
        }
    }
    for x in &mut s {
        x.close();
        assert_eq!(x.dropped(), 0);
    }
    read(&mut reader, &mut got);
    for who in 0..2 {
        assert_eq!(got[who].len(), want[who].len());
        assert!(got[who] == want[who], "sink {who}'s records");
    }
    let c = &sinks.counters;
    assert_eq!(c.delivered.load(Ordering::Relaxed), i);
}

/// Every record in the ring's blocks: (timestamp, original length, bytes).
fn records(reader: &mut RingReader) -> Vec<(u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut blocks = ringcap_compress::BlockReader::new(&ringcap_compress::FileHeader {
        version: ringcap_compress::VERSION,
        resolution: ringcap_compress::Resolution::Nano,
        linktype: 1,
        snaplen: 262_144,
    });
    while let Some(chunk) = reader.next_chunk().expect("ring") {
        blocks.load(chunk.payload, 0).expect("a whole block");
        while let Some(r) = blocks.next_record().expect("decodes") {
            out.push((r.ts, r.wire_len, r.data.to_vec()));
        }
    }
    out
}

/// Packet `i` of a UDP stream: IP ID and payload count up, one per ms.
fn packet(i: u64) -> (u64, Vec<u8>) {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 50, 0, i as u8, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2, 0x9c, 0x40, 0x9c, 0x41]);
    f.extend_from_slice(&[0, 30, 0, 0]);
    f.extend_from_slice(&i.to_be_bytes());
    f.resize(64, 0xab);
    // Starts 20 ms into a slot.
    (SLOT_NS * 1_000_000 + 20_000_000 + i * 1_000_000, f)
}

#[test]
fn sessions_with_the_same_records_share_blocks_and_each_gets_its_own() {
    let blocks = Arc::new(SharedBlocks::default());
    let (mut a, mut ra) = sink(&blocks);
    let (mut b, mut rb) = sink(&blocks);
    let (mut c, mut rc) = sink(&blocks);
    // d takes a's packets as runs of ready-made records, as the hub
    // hands them (here runs of one).
    let (mut d, mut rd) = sink(&blocks);
    const N: u64 = 400;
    const B_FROM: u64 = 30;
    const ODD: u64 = 250;
    let (mut want_a, mut want_b, mut want_c) = (Vec::new(), Vec::new(), Vec::new());
    // As the hub does: every session in turn, packet by packet.
    for i in 0..N {
        let (ts, f) = packet(i);
        if i > 0 && ts / SLOT_NS != packet(i - 1).0 / SLOT_NS {
            // Chunks are cut now: give the encoders the time they would
            // have had between real packets (not what is tested here).
            let t0 = Instant::now();
            while [&a, &b, &c, &d].iter().any(|s| {
                s.compressed
                    .as_ref()
                    .is_some_and(|c| c.pending.iter().any(|(j, _)| j.block.get().is_none()))
            }) {
                assert!(t0.elapsed() < Duration::from_secs(20), "encoders stuck");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        a.push(Record::whole(ts, 100, &f));
        let mut record = vec![0; HEADER_LEN + f.len()];
        write_ring_record(&mut record, &Record::whole(ts, 100, &f));
        assert!(d.push_records(&record, 1), "d takes runs");
        want_a.push((ts, 100, f.clone()));
        if i >= B_FROM {
            b.push(Record::whole(ts, 100, &f));
            want_b.push((ts, 100, f.clone()));
        }
        // c's copy of one packet differs by a byte (a transform, say).
        let mut g = f.clone();
        if i == ODD {
            g[40] ^= 1;
        }
        c.push(Record::whole(ts, 100, &g));
        want_c.push((ts, 100, g));
    }
    for s in [&mut a, &mut b, &mut c, &mut d] {
        s.close();
        assert_eq!(s.dropped(), 0);
    }
    for (reader, want, who) in [
        (&mut rd, want_a.clone(), "d"),
        (&mut ra, want_a, "a"),
        (&mut rb, want_b, "b"),
        (&mut rc, want_c, "c"),
    ] {
        let got = records(reader);
        let first_wrong = got.iter().zip(&want).position(|(g, w)| g != w);
        assert_eq!(
            (got.len(), first_wrong),
            (want.len(), None),
            "{who}'s records"
        );
    }
    // a's chunks are its slots; b's first (it began mid-slot) and c's
    // with the odd packet are their own, every other chunk is shared
    // (all of d's).
    let slot = |i: u64| packet(i).0 / SLOT_NS;
    let slots = slot(N - 1) - slot(0) + 1;
    let b_slots = slot(N - 1) - slot(B_FROM) + 1;
    assert!(
        slots >= 5 && slot(B_FROM) == slot(0),
        "the test's own premise"
    );
    assert_eq!(blocks.encoded.load(Ordering::Relaxed), slots + 2);
    assert_eq!(
        blocks.shared.load(Ordering::Relaxed),
        (b_slots - 1) + (slots - 1) + slots
    );
}
