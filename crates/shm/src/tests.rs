//! Tests that need the crate's insides: the seals as the kernel enforces them
//! (mapping attempts go through `sys`), readers refusing hand-made regions,
//! readers facing a daemon that writes garbage, and a reader in another
//! process.

use crate::layout::{self, hdr, CONSUMER_SIZE, HEADER_SIZE};
use crate::sys::{self, Mapping};
use crate::{RingReader, RingWriter};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const CAP: usize = 64 << 10;

fn dup(fd: BorrowedFd<'_>) -> OwnedFd {
    fd.try_clone_to_owned().unwrap()
}

fn reader_for(w: &RingWriter) -> io::Result<RingReader> {
    let (d, c, e) = w.fds();
    RingReader::map(dup(d), dup(c), dup(e))
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error()
        .unwrap_or_else(|| panic!("not an OS error: {e}"))
}

// ---------------------------------------------------------------- seals

#[test]
fn data_region_seals_hold() {
    let mut w = RingWriter::create(CAP).unwrap();
    let total = HEADER_SIZE + CAP;
    let data = dup(w.fds().0);

    let seals = sys::seals(data.as_fd()).unwrap();
    for s in [
        libc::F_SEAL_SHRINK,
        libc::F_SEAL_GROW,
        libc::F_SEAL_FUTURE_WRITE,
        libc::F_SEAL_SEAL,
    ] {
        assert_ne!(seals & s, 0, "seal {s:#x} missing from {seals:#x}");
    }

    // No second writable shared mapping.
    let e = Mapping::new(data.as_fd(), total, true).unwrap_err();
    assert_eq!(errno(&e), libc::EPERM, "{e}");
    // A read-only one is fine, but cannot be made writable.
    let mut ro = Mapping::new(data.as_fd(), total, false).unwrap();
    let e = ro.try_make_writable().unwrap_err();
    assert_eq!(errno(&e), libc::EACCES, "{e}");

    // No resizing, no write(2), no hole punching, no more seals.
    let f = File::from(dup(data.as_fd()));
    for len in [0, 4096, total as u64 - 8, total as u64 + 4096] {
        let e = f.set_len(len).unwrap_err();
        assert_eq!(errno(&e), libc::EPERM, "ftruncate to {len}: {e}");
    }
    assert_eq!(f.metadata().unwrap().len(), total as u64);
    let e = f.write_at(b"evil", HEADER_SIZE as u64).unwrap_err();
    assert_eq!(errno(&e), libc::EPERM, "{e}");
    let e = sys::punch_hole(data.as_fd(), HEADER_SIZE as u64, 4096).unwrap_err();
    assert_eq!(errno(&e), libc::EPERM, "{e}");
    for s in [libc::F_SEAL_WRITE, libc::F_SEAL_SHRINK, 0] {
        let e = sys::add_seals(data.as_fd(), s).unwrap_err();
        assert_eq!(errno(&e), libc::EPERM, "F_ADD_SEALS {s:#x}: {e}");
    }

    // The daemon's mapping, made before the seals, still writes.
    assert!(w.append(b"still writable", 1));
    let mut r = reader_for(&w).unwrap();
    assert_eq!(r.next_chunk().unwrap().unwrap().payload, b"still writable");
}

#[test]
fn consumer_region_is_sealed_and_claimed_by_one_reader() {
    let w = RingWriter::create(CAP).unwrap();
    let consumer = dup(w.fds().1);
    let f = File::from(dup(consumer.as_fd()));
    for len in [0, 8, 8192] {
        let e = f.set_len(len).unwrap_err();
        assert_eq!(errno(&e), libc::EPERM, "ftruncate to {len}: {e}");
    }

    let _r = reader_for(&w).unwrap();
    let seals = sys::seals(consumer.as_fd()).unwrap();
    assert_ne!(seals & libc::F_SEAL_FUTURE_WRITE, 0);
    assert_ne!(seals & libc::F_SEAL_SEAL, 0);
    // Once claimed: no other writer, not even write(2) in this process.
    let e = Mapping::new(consumer.as_fd(), CONSUMER_SIZE, true).unwrap_err();
    assert_eq!(errno(&e), libc::EPERM, "{e}");
    let e = f.write_at(&u64::MAX.to_le_bytes(), 0).unwrap_err();
    assert_eq!(errno(&e), libc::EPERM, "{e}");
    // A second reader of the same ring is refused.
    let e = reader_for(&w).unwrap_err();
    assert!(e.to_string().contains("consumer region"), "{e}");
}

#[test]
fn a_pooled_ring_serves_one_session_after_another() {
    let mut w = RingWriter::create_pooled(CAP).unwrap();
    assert!(w.recycle().is_err(), "recycled while running");
    let mut first = reader_for(&w).unwrap();
    assert!(w.append(b"first session", 1));
    assert_eq!(
        first.next_chunk().unwrap().unwrap().payload,
        b"first session"
    );
    first.release();
    assert!(w.append(b"never read", 1));
    w.finish();
    assert!(first.ended());
    w.recycle().unwrap();
    assert_eq!(w.counters().packets_written, 0);
    // The next session's reader maps the same descriptors and starts after
    // everything the first session wrote, read or not.
    let mut second = reader_for(&w).unwrap();
    assert!(!second.ended());
    assert!(second.next_chunk().unwrap().is_none());
    assert!(w.append(b"second session", 1));
    assert_eq!(
        second.next_chunk().unwrap().unwrap().payload,
        b"second session"
    );
    second.release();
    assert_eq!(second.counters().packets_written, 1);
    // A reader kept from the first session sees the same user's new chunks
    // (never a position going backwards), and the daemon still clamps.
    assert_eq!(first.next_chunk().unwrap().unwrap().payload, b"never read");
    first.release();
    assert_eq!(
        first.next_chunk().unwrap().unwrap().payload,
        b"second session"
    );
    // A ring not made for the pool is never recycled.
    let mut plain = RingWriter::create(CAP).unwrap();
    plain.finish();
    assert!(plain.recycle().is_err());
}

#[test]
fn spans_stay_readable_until_released_and_sleeps_split_in_two() {
    let mut w = RingWriter::create(CAP).unwrap();
    let mut r = reader_for(&w).unwrap();
    assert!(w.append(b"one", 1));
    assert!(w.append(b"two", 1));
    let one = r.next_span().unwrap().unwrap();
    let two = r.next_span().unwrap().unwrap();
    assert_eq!((r.span(&one), r.span(&two)), (&b"one"[..], &b"two"[..]));
    // Giving back what lies before `two` keeps `two`, not `one`.
    r.release_before(&two);
    assert_eq!(r.span(&one), b"");
    assert_eq!(r.span(&two), b"two");
    r.release();
    assert_eq!(r.span(&two), b"");
    // A wake-up byte of an append already read (a sleep that ended as it
    // came) does not make the pipe say there is something new.
    assert!(!r.begin_sleep());
    assert!(w.append(b"three", 1));
    assert!(pipe_readable(&r));
    // Read without ending the sleep (the byte stays in the pipe).
    assert_eq!(r.next_chunk().unwrap().unwrap().payload, b"three");
    r.release();
    assert!(!r.begin_sleep(), "nothing new, yet ready");
    assert!(!pipe_readable(&r), "stale wake-up byte left in the pipe");
    r.end_sleep();
    // Something there already: no sleep.
    assert!(w.append(b"four", 1));
    assert!(r.begin_sleep());
}

/// Whether the wake-up pipe is readable now.
fn pipe_readable(r: &RingReader) -> bool {
    crate::sys::poll_in(r.wake_fd(), std::time::Duration::ZERO)
        .unwrap()
        .is_some_and(|p| p.readable)
}

// ---------------------------------------------------- hand-made regions

/// A data region as a daemon would make it, with `edit` applied to the
/// header page, the file `len` bytes long and sealed `seals`.
fn fake_data(len: u64, seals: libc::c_int, edit: impl FnOnce(&mut [u8])) -> OwnedFd {
    let fd = sys::memfd(c"ringcap-test").unwrap();
    let mut page = vec![0u8; HEADER_SIZE];
    page[hdr::MAGIC..hdr::MAGIC + 8].copy_from_slice(&layout::MAGIC);
    page[hdr::VERSION..hdr::VERSION + 4].copy_from_slice(&layout::VERSION.to_le_bytes());
    page[hdr::HEADER_SIZE..hdr::HEADER_SIZE + 4]
        .copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
    page[hdr::CAPACITY..hdr::CAPACITY + 8].copy_from_slice(&(CAP as u64).to_le_bytes());
    edit(&mut page);
    sys::set_len(fd.as_fd(), len).unwrap();
    let f = File::from(fd);
    let n = page.len().min(len as usize);
    f.write_all_at(&page[..n], 0).unwrap();
    let fd = OwnedFd::from(f);
    if seals != 0 {
        sys::add_seals(fd.as_fd(), seals).unwrap();
    }
    fd
}

const DATA_SEALS: libc::c_int =
    libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL;
const GOOD_LEN: u64 = (HEADER_SIZE + CAP) as u64;

fn fake_consumer(len: u64, seals: libc::c_int, position: u64) -> OwnedFd {
    let fd = sys::memfd(c"ringcap-test-consumer").unwrap();
    sys::set_len(fd.as_fd(), len).unwrap();
    let f = File::from(fd);
    f.write_all_at(&position.to_le_bytes(), 0).unwrap();
    let fd = OwnedFd::from(f);
    if seals != 0 {
        sys::add_seals(fd.as_fd(), seals).unwrap();
    }
    fd
}

fn good_consumer() -> OwnedFd {
    fake_consumer(4096, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW, 0)
}

fn wake_fd() -> OwnedFd {
    sys::pipe().unwrap().0
}

fn refused(data: OwnedFd, consumer: OwnedFd, wake: OwnedFd, expect: &str) {
    match RingReader::map(data, consumer, wake) {
        Ok(_) => panic!("accepted, expected an error about {expect:?}"),
        Err(e) => assert!(
            e.to_string().contains(expect),
            "error {e:?} does not mention {expect:?}"
        ),
    }
}

#[test]
fn hand_made_region_with_good_header_is_accepted() {
    let mut r = RingReader::map(
        fake_data(GOOD_LEN, DATA_SEALS, |_| {}),
        good_consumer(),
        wake_fd(),
    )
    .unwrap();
    assert_eq!(r.capacity(), CAP);
    assert_eq!(r.next_chunk().unwrap(), None);
}

#[test]
fn corrupted_headers_are_refused() {
    type Edit = Box<dyn FnOnce(&mut [u8])>;
    let cases: Vec<(&str, Edit)> = vec![
        ("magic", Box::new(|p| p[0..8].copy_from_slice(b"RCRING02"))),
        ("magic", Box::new(|p| p[0..8].fill(0))),
        (
            "version",
            Box::new(|p| p[8..12].copy_from_slice(&2u32.to_le_bytes())),
        ),
        (
            "version",
            Box::new(|p| p[8..12].copy_from_slice(&1u32.to_be_bytes())),
        ),
        (
            "header size",
            Box::new(|p| p[12..16].copy_from_slice(&8192u32.to_le_bytes())),
        ),
        (
            "capacity",
            Box::new(|p| p[16..24].copy_from_slice(&(128u64 << 10).to_le_bytes())),
        ),
        (
            "capacity",
            Box::new(|p| p[16..24].copy_from_slice(&u64::MAX.to_le_bytes())),
        ),
    ];
    for (expect, edit) in cases {
        refused(
            fake_data(GOOD_LEN, DATA_SEALS, edit),
            good_consumer(),
            wake_fd(),
            expect,
        );
    }
}

#[test]
fn bad_sizes_and_missing_seals_are_refused() {
    // Sizes: not 4096 + a power of two in range.
    for len in [0, 100, 4096, 4096 + (32 << 10), GOOD_LEN + 8, GOOD_LEN * 3] {
        refused(
            fake_data(len, DATA_SEALS, |_| {}),
            good_consumer(),
            wake_fd(),
            "bytes",
        );
    }
    // A plain memfd with a good header: writable by anyone holding it.
    refused(
        fake_data(GOOD_LEN, 0, |_| {}),
        good_consumer(),
        wake_fd(),
        "sealed",
    );
    // Size sealed but writes allowed.
    refused(
        fake_data(
            GOOD_LEN,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            |_| {},
        ),
        good_consumer(),
        wake_fd(),
        "FUTURE_WRITE",
    );
    // Not a memfd at all.
    let file = OwnedFd::from(File::open("/proc/self/exe").unwrap());
    refused(file, good_consumer(), wake_fd(), "F_GET_SEALS");
}

#[test]
fn bad_consumer_regions_and_wake_fds_are_refused() {
    let data = || fake_data(GOOD_LEN, DATA_SEALS, |_| {});
    let grow_shrink = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    refused(data(), fake_consumer(4096, 0, 0), wake_fd(), "SHRINK");
    refused(
        data(),
        fake_consumer(8192, grow_shrink, 0),
        wake_fd(),
        "8192",
    );
    refused(
        data(),
        fake_consumer(4096, grow_shrink | libc::F_SEAL_SEAL, 0),
        wake_fd(),
        "claiming",
    );
    refused(
        data(),
        fake_consumer(4096, grow_shrink | libc::F_SEAL_FUTURE_WRITE, 0),
        wake_fd(),
        "mmap",
    );
    for position in [1, 8, u64::MAX] {
        refused(
            data(),
            fake_consumer(4096, grow_shrink, position),
            wake_fd(),
            "read position",
        );
    }
    let (blocking, _writer) = std::io::pipe().unwrap();
    refused(data(), good_consumer(), OwnedFd::from(blocking), "blocking");
}

// ------------------------------------------------------ a buggy daemon

#[test]
fn corrupt_chunks_are_errors_not_panics() {
    let data_at = |off: u64| HEADER_SIZE + off as usize;
    let header = |len: u32, packets: u32| layout::encode_chunk_header(len, packets).to_le_bytes();

    // A length that runs past the end of the data area.
    let mut w = RingWriter::create(CAP).unwrap();
    assert!(w.append(&[1; 100], 1));
    let mut r = reader_for(&w).unwrap();
    w.corrupt(data_at(0), &header(CAP as u32, 1));
    let e = r.next_chunk().unwrap_err();
    assert!(e.reason.contains("end of the data area"), "{e}");
    assert_eq!(e.position, 0);
    // The reader stays put: the same error again.
    assert_eq!(r.next_chunk().unwrap_err(), e);

    // A length that runs past the write position.
    w.corrupt(data_at(0), &header(200, 1));
    let e = r.next_chunk().unwrap_err();
    assert!(e.reason.contains("write position"), "{e}");

    // A padding marker that runs past the write position.
    w.corrupt(data_at(0), &header(layout::PADDING_LEN, 0));
    let e = r.next_chunk().unwrap_err();
    assert!(e.reason.contains("padding"), "{e}");

    // Write positions that go backwards, too far ahead, or are misaligned.
    let mut w = RingWriter::create(CAP).unwrap();
    assert!(w.append(&[1; 100], 1));
    let mut r = reader_for(&w).unwrap();
    assert!(r.next_chunk().unwrap().is_some());
    for (wp, what) in [
        (8u64, "backwards"),
        (CAP as u64 + 8, "capacity ahead"),
        (u64::MAX - 7, "capacity ahead"),
        (112 + 3, "aligned"),
    ] {
        w.corrupt(hdr::WRITE_POSITION, &wp.to_le_bytes());
        let e = r.next_chunk().unwrap_err();
        assert!(e.reason.contains(what), "{wp}: {e}");
    }
}

/// xorshift64*: deterministic, no dependency.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn random_garbage_from_the_daemon_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..300 {
        let mut w = RingWriter::create(CAP).unwrap();
        let mut r = reader_for(&w).unwrap();
        for _ in 0..(rng.next() % 40) {
            let len = (rng.next() % 5000) as usize;
            w.append(&vec![round as u8; len], 1);
        }
        // Garbage: chunk headers at random aligned offsets, and sometimes
        // the write position.
        for _ in 0..(1 + rng.next() % 8) {
            let off = (rng.next() % (CAP as u64 / 8)) * 8;
            let word = match rng.next() % 4 {
                0 => rng.next(),
                1 => layout::encode_chunk_header(layout::PADDING_LEN, 0),
                2 => rng.next() % 70_000,
                _ => rng.next() & 0xffff_ffff,
            };
            w.corrupt(HEADER_SIZE + off as usize, &word.to_le_bytes());
        }
        if rng.next().is_multiple_of(3) {
            let wp = match rng.next() % 3 {
                0 => rng.next(),
                1 => rng.next() % (2 * CAP as u64),
                _ => (rng.next() % (2 * CAP as u64)) & !7,
            };
            w.corrupt(hdr::WRITE_POSITION, &wp.to_le_bytes());
        }
        for _ in 0..200 {
            match r.next_chunk() {
                Ok(Some(c)) => assert!(c.payload.len() <= CAP),
                Ok(None) | Err(_) => break,
            }
            if rng.next().is_multiple_of(4) {
                r.release();
            }
        }
    }
}

#[test]
fn a_daemon_that_vanishes_without_finishing_is_seen() {
    // The header still says "running" but the daemon's end of the wake-up
    // pipe is closed (a daemon killed mid-session): wait() sees the hang-up
    // at once and ended() turns true.
    let w = RingWriter::create(CAP).unwrap();
    let (d, c, _) = w.fds();
    let (wake_read, wake_write) = sys::pipe().unwrap();
    drop(wake_write);
    let r = RingReader::map(dup(d), dup(c), wake_read).unwrap();
    assert!(!r.ended());
    let t = Instant::now();
    assert!(r.wait(Duration::from_secs(10)).unwrap());
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(r.ended());
}

// ------------------------------------------------ a reader in a process

const CHILD_ENV: &str = "RINGCAP_SHM_TEST_CHILD";
const CHILD_SKIP: i32 = 77;

fn payload_for(seq: u64, buf: &mut Vec<u8>) {
    let len = 8 + (seq.wrapping_mul(2_654_435_761) % 60) as usize;
    buf.clear();
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend((8..len).map(|i| (seq as u8).wrapping_add(i as u8)));
}

/// The parent half: appends `N` numbered chunks to a 64 KiB ring (much
/// smaller than the data: it wraps and fills many times) while a child
/// process maps the ring and checks every chunk in order.
#[test]
fn reader_in_another_process() {
    const N: u64 = 300_000;
    let mut w = RingWriter::create(CAP).unwrap();
    let (d, c, e) = w.fds();
    let spec = format!(
        "{} {} {} {} {N}",
        std::process::id(),
        d.as_raw_fd(),
        c.as_raw_fd(),
        e.as_raw_fd()
    );
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::reader_in_another_process_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, spec)
        .spawn()
        .unwrap();
    let mut buf = Vec::new();
    let mut refused = 0u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    'writing: for seq in 0..N {
        payload_for(seq, &mut buf);
        while !w.append(&buf, 1) {
            refused += 1;
            if refused.is_multiple_of(1024)
                && (child.try_wait().unwrap().is_some() || Instant::now() > deadline)
            {
                break 'writing;
            }
            std::thread::yield_now();
        }
    }
    w.finish();
    let status = child.wait().unwrap();
    if status.code() == Some(CHILD_SKIP) {
        eprintln!("skipped: the child cannot take the parent's descriptors (pidfd_getfd)");
        return;
    }
    assert!(status.success(), "child reader failed: {status}");
    let c = w.counters();
    assert_eq!(c.chunks_written, N);
    assert_eq!(c.packets_dropped, refused);
}

/// The child half (does nothing unless started by the parent above).
#[test]
fn reader_in_another_process_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let v: Vec<u64> = spec.split(' ').map(|s| s.parse().unwrap()).collect();
    let take = |fd: u64| match sys::fd_of_process(v[0] as u32, fd as i32) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("pidfd_getfd: {e}");
            std::process::exit(CHILD_SKIP);
        }
    };
    let n = v[4];
    let mut r = RingReader::map(take(v[1]), take(v[2]), take(v[3])).unwrap();
    let mut expect = Vec::new();
    let mut seq = 0u64;
    let mut ended_seen = false;
    while seq < n {
        match r.next_chunk().unwrap() {
            Some(c) => {
                payload_for(seq, &mut expect);
                assert_eq!(c.payload, &expect[..], "chunk {seq}");
                assert_eq!(c.packets, 1);
                seq += 1;
                if seq.is_multiple_of(5) {
                    r.release();
                }
            }
            None => {
                r.release();
                // Chunks appended before the end are visible once `ended()`
                // has been seen: one more empty read means they are missing.
                assert!(!ended_seen, "ended after {seq} of {n} chunks");
                if r.ended() {
                    ended_seen = true;
                    continue;
                }
                assert!(
                    r.wait(Duration::from_secs(10)).unwrap(),
                    "no wake-up after chunk {seq}"
                );
            }
        }
    }
    r.release();
    while !r.ended() {
        assert!(r.wait(Duration::from_secs(10)).unwrap());
    }
    assert_eq!(r.next_chunk().unwrap(), None);
    assert_eq!(r.counters().chunks_written, n);
}
