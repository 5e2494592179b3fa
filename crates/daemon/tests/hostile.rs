//! Bad input: while a good client (nobody) captures a known traffic run, a
//! hostile client (this test process, root, speaking the protocol raw)
//! sends malformed, truncated, oversized, unknown and out-of-order
//! messages, dump names that try to leave the directory, descriptors with
//! its requests, opens 300 connections at once (the daemon serves 256 and
//! refuses the rest), and writes garbage into the read position of a
//! session of its own. The daemon answers each with an error, keeps
//! serving, leaks no descriptor or thread, touches no file, and the good
//! client's capture is exact.

mod common;

use common::*;
use ringcap_proto::{
    decode_response, encode_request, transport, OutputFormat, Request, Response, SnapRequest,
    MAX_DATAGRAM,
};
use ringcap_testkit::{TempDir, Testbed};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A raw connection to the daemon.
struct Raw {
    fd: OwnedFd,
    buf: Box<[u8; MAX_DATAGRAM]>,
}

/// What came back.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Got {
    Message(Response, Vec<OwnedFd>),
    Closed,
    Nothing,
}

impl Raw {
    fn connect(path: &Path) -> Raw {
        Raw {
            fd: transport::connect(path).expect("connect"),
            buf: Box::new([0u8; MAX_DATAGRAM]),
        }
    }

    /// Sends `bytes` as one datagram, whatever they are (no size check).
    fn send_bytes(&self, bytes: &[u8]) {
        // SAFETY: send(2) on our socket with a valid buffer.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        assert_eq!(
            n,
            bytes.len() as isize,
            "send: {}",
            std::io::Error::last_os_error()
        );
    }

    fn send(&self, req: &Request) {
        self.send_bytes(&encode_request(req));
    }

    fn recv(&mut self, timeout: Duration) -> Got {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
        if n <= 0 {
            return Got::Nothing;
        }
        match transport::recv(&self.fd, &mut self.buf) {
            Ok(Some((len, fds))) => {
                let r = decode_response(&self.buf[..len]).expect("the daemon's answer decodes");
                Got::Message(r, fds)
            }
            Ok(None) => Got::Closed,
            Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => Got::Closed,
            Err(e) => panic!("recv: {e}"),
        }
    }

    /// The next answer (panics after 10 s).
    fn answer(&mut self) -> (Response, Vec<OwnedFd>) {
        match self.recv(Duration::from_secs(10)) {
            Got::Message(r, fds) => (r, fds),
            other => panic!("no answer: {other:?}"),
        }
    }

    /// Sends `bytes` and expects an Error whose message contains `needle`.
    fn expect_error(&mut self, bytes: &[u8], needle: &str) {
        self.send_bytes(bytes);
        let got = match self.recv(Duration::from_secs(10)) {
            Got::Message(r, fds) => (r, fds),
            other => panic!(
                "{:?}... ({} bytes): no answer: {other:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(60)]),
                bytes.len()
            ),
        };
        match got {
            (Response::Error { message }, fds) => {
                assert!(fds.is_empty());
                assert!(
                    message.contains(needle),
                    "{:?}...: error {message:?} does not say {needle:?}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(60)])
                );
            }
            (r, _) => panic!(
                "{:?}: answered {r:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(60)])
            ),
        }
    }

    /// The connection still works: Sessions is answered.
    fn assert_serving(&mut self, what: &str) {
        self.send(&Request::Sessions);
        match self.answer() {
            (Response::Sessions { .. }, _) => {}
            (r, _) => panic!("{what}: Sessions answered with {r:?}"),
        }
    }
}

/// A message with the header fields given and `body`.
fn message(magic: &[u8; 4], version: u16, kind: u16, body: &[u8]) -> Vec<u8> {
    let mut m = magic.to_vec();
    m.extend_from_slice(&version.to_be_bytes());
    m.extend_from_slice(&kind.to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn request(body: &str) -> Vec<u8> {
    message(b"RCD1", 1, 1, body.as_bytes())
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn threads(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Waits up to 5 s for `f() <= limit`; returns the last value.
fn settles(limit: usize, f: impl Fn() -> usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = f();
        if v <= limit || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Garbage, one kind after another, on one connection; each answered with
/// an error that says what was wrong, the connection usable after each.
fn garbage(d: &Daemon, canaries: &TempDir) {
    let mut c = Raw::connect(&d.socket);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"RCD".to_vec(), "truncated header"),
        (b"R".to_vec(), "truncated header"),
        (message(b"XXXX", 1, 1, b"{\"type\":\"stats\"}"), "bad magic"),
        (message(b"RCD1", 2, 1, b"{\"type\":\"stats\"}"), "unsupported protocol version 2"),
        (message(b"RCD1", 0xffff, 1, b"{}"), "unsupported protocol version 65535"),
        (message(b"RCD1", 1, 2, b"{\"type\":\"ok\"}"), "header kind 2"),
        (message(b"RCD1", 1, 7, b"{}"), "header kind 7"),
        (request("{not json"), "malformed JSON"),
        (request("{\"type\":\"sessions\""), "malformed JSON"),
        (request(""), "malformed JSON"),
        (request("\u{0}\u{1}\u{2}"), "malformed JSON"),
        (request(&"[".repeat(60_000)), "message"),
        // Deep nesting: bounded by the decoder, never by the daemon's stack.
        (request(&format!("{}{}", "{\"a\":".repeat(10_000), "1")), "recursion limit exceeded"),
        (
            request(&format!(
                "{{\"type\":\"open\",\"snaplen\":{}1",
                "{\"headers\":".repeat(5_000)
            )),
            "recursion limit exceeded",
        ),
        (request("{\"type\":\"frobnicate\"}"), "not a valid message"),
        (request("{\"type\":\"stats\",\"x\":1}"), "not a valid message"),
        (request("{\"type\":\"set_filter\"}"), "not a valid message"),
        (request("{\"type\":\"set_filter\",\"filter\":7}"), "not a valid message"),
        (request("{\"type\":\"set_filter\",\"filter\":\"udp\",\"filter\":\"tcp\"}"), "not a valid message"),
        (request("{\"type\":\"set_filter\",\"filter\":\"a\\u0000b\"}"), "NUL"),
        (
            request(
                "{\"type\":\"open\",\"interfaces\":[\"../../etc\"],\"filter\":\"\",\"snaplen\":{\"bytes\":96},\"format\":\"pcap\",\"compress\":false}",
            ),
            "interfaces[0]",
        ),
        (
            request(
                "{\"type\":\"open\",\"interfaces\":[\"lo\"],\"filter\":\"\",\"snaplen\":{\"bytes\":0},\"format\":\"pcap\",\"compress\":false}",
            ),
            "snaplen.bytes",
        ),
        (
            request(
                "{\"type\":\"open\",\"interfaces\":[\"lo\"],\"filter\":\"\",\"snaplen\":{\"bytes\":96},\"format\":\"pcap\",\"compress\":false,\"count\":18446744073709551616}",
            ),
            "not a valid message",
        ),
        // Oversize: a body over 64 KiB (the datagram over the daemon's buffer).
        (request(&" ".repeat(70_000)), "too large"),
        (request(&" ".repeat(64 * 1024 + 1)), "too large"),
        (
            request(&format!("{{\"type\":\"set_filter\",\"filter\":\"{}\"}}", "x".repeat(65_000))),
            "filters are limited",
        ),
        // In order but out of place: nothing to act on before a session.
        (encode_request(&Request::Stats), "no session"),
        (encode_request(&Request::SetFilter { filter: "udp".into(), program: None }), "no session"),
        (encode_request(&Request::Close), "no session"),
        (encode_request(&Request::Flush), "no session"),
        (encode_request(&Request::Checkpoint), ""),
        // Dump names that try to leave the user's directory, or another
        // user's: refused whatever the daemon does with dumps.
        (encode_request(&Request::FetchDump { name: "../canary".into() }), "not a dump file name"),
        (encode_request(&Request::DeleteDump { name: "../../canary".into() }), "not a dump file name"),
        (
            encode_request(&Request::DeleteDump {
                name: canaries.file("canary"),
            }),
            "not a dump file name",
        ),
        (encode_request(&Request::DeleteDump { name: "65534/x.pcap".into() }), "not a dump file name"),
        (encode_request(&Request::FetchDump { name: "..".into() }), "not a dump file name"),
    ];
    for (bytes, needle) in &cases {
        c.expect_error(bytes, needle);
        c.assert_serving("after garbage");
    }
    // Descriptors sent with a request are closed; the request is answered.
    let devnull = std::fs::File::open("/dev/null").expect("/dev/null");
    let fds = [devnull.as_fd(), devnull.as_fd(), devnull.as_fd()];
    transport::send(&c.fd, &encode_request(&Request::Sessions), &fds).expect("send with fds");
    match c.answer() {
        (Response::Sessions { .. }, _) => {}
        (r, _) => panic!("Sessions with descriptors answered {r:?}"),
    }
    // An empty datagram reads as the end: the daemon closes the connection.
    c.send_bytes(b"");
    assert!(
        matches!(c.recv(Duration::from_secs(5)), Got::Closed),
        "not closed after EOF"
    );

    // Eight bad messages in a row: the connection is closed.
    let mut c = Raw::connect(&d.socket);
    for _ in 0..8 {
        c.send_bytes(b"junk");
    }
    let mut errors = 0;
    loop {
        match c.recv(Duration::from_secs(5)) {
            Got::Message(Response::Error { .. }, _) => errors += 1,
            Got::Closed => break,
            other => panic!("after 8 bad messages: {other:?}"),
        }
    }
    assert_eq!(errors, 8);
    assert!(
        canaries.join("canary").exists(),
        "the daemon touched the canary"
    );
    assert!(
        d.dir.join("canary").exists(),
        "the daemon touched the canary next to dumps/"
    );
}

/// 300 connections at once: the daemon serves up to its cap and refuses
/// the others with an error, and serves again once they are gone.
fn flood(d: &Daemon, already: usize) {
    let conns: Vec<Raw> = (0..300).map(|_| Raw::connect(&d.socket)).collect();
    // The daemon answers a connection over its cap at once.
    std::thread::sleep(Duration::from_secs(1));
    let mut served = 0;
    let mut refused = 0;
    let mut kept = Vec::new();
    for mut c in conns {
        match c.recv(Duration::ZERO) {
            Got::Message(Response::Error { message }, _) => {
                assert!(message.contains("256 connections at most"), "{message}");
                assert!(
                    matches!(c.recv(Duration::from_secs(5)), Got::Closed),
                    "refused but not closed"
                );
                refused += 1;
            }
            Got::Nothing => {
                served += 1;
                kept.push(c);
            }
            other => panic!("flood: {other:?}"),
        }
    }
    assert_eq!(served + refused, 300);
    assert_eq!(
        served + already,
        256,
        "{served} of 300 served with {already} open before"
    );
    for c in &mut kept {
        c.assert_serving("a connection within the cap");
    }
    // Full: one more is refused; everyone served so far still is.
    let mut more = Raw::connect(&d.socket);
    let got = more.recv(Duration::from_secs(5));
    assert!(
        matches!(got, Got::Message(Response::Error { .. }, _)),
        "one more: {got:?}"
    );
    for c in kept.iter_mut().step_by(50) {
        c.assert_serving("while full");
    }
    drop(kept);
    // Once they are gone, new connections are served again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = Raw::connect(&d.socket);
        match c.recv(Duration::from_millis(300)) {
            Got::Nothing => {
                c.assert_serving("after the flood");
                break;
            }
            _ => assert!(
                Instant::now() < deadline,
                "not served again after the flood"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A session of root's whose read position this test scribbles over.
struct Scribbler {
    conn: Raw,
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

fn scribbler(d: &Daemon, iface: &str) -> Scribbler {
    let mut conn = Raw::connect(&d.socket);
    let open = Request::Open {
        interfaces: vec![iface.to_string()],
        filter: String::new(),
        program: None,
        snaplen: SnapRequest::Bytes(262_144),
        sample: None,
        format: OutputFormat::Pcap,
        dump: None,
        duration_s: None,
        count: None,
        compress: false,
        inject_only: false,
        flows: None,
    };
    conn.send(&open);
    let (r, fds) = conn.answer();
    assert!(matches!(r, Response::Accepted { .. }), "{r:?}");
    let [data, consumer, _wake] = transport::expect_fds::<3>(fds).expect("three descriptors");
    // A second Open on the same connection is refused.
    conn.send(&open);
    assert!(matches!(conn.answer().0, Response::Error { .. }));
    // The sizes are sealed.
    for fd in [&data, &consumer] {
        // SAFETY: ftruncate(2) on a descriptor we own.
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), 0) };
        assert_eq!(r, -1, "a client could shrink a ring memfd");
    }
    // SAFETY: mapping 4096 bytes of the consumer memfd we were given,
    // shared and writable, as a client may.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            consumer.as_raw_fd(),
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED, "map the consumer page read-write");
    let addr = page as usize;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        let _keep = (data, consumer);
        let read_pos = addr as *mut u64;
        let waiting = (addr + 64) as *mut u32;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut n = 0u64;
        while !s.load(Ordering::Relaxed) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = match n % 4 {
                0 => u64::MAX,
                1 => 0,
                2 => x,
                _ => x & !7,
            };
            // SAFETY: the page stays mapped until this thread unmaps it.
            unsafe {
                std::ptr::write_volatile(read_pos, v);
                std::ptr::write_volatile(waiting, x as u32);
            }
            n += 1;
            if n.is_multiple_of(64) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        // SAFETY: unmapping what was mapped above.
        unsafe { libc::munmap(addr as *mut libc::c_void, 4096) };
        n
    });
    Scribbler {
        conn,
        stop,
        thread: Some(thread),
    }
}

impl Drop for Scribbler {
    fn drop(&mut self) {
        // Also when the test fails half-way: the thread stops and unmaps.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Scribbler {
    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let n = self
            .thread
            .take()
            .expect("thread")
            .join()
            .expect("scribbler");
        assert!(n > 1000, "only {n} writes");
        // The daemon still serves this session, and ends it on Close.
        self.conn.send(&Request::Stats);
        assert!(matches!(self.conn.answer().0, Response::Stats { .. }));
        self.conn.send(&Request::Close);
        loop {
            match self.conn.answer().0 {
                Response::Ended { .. } => break,
                Response::Stats { .. } => {}
                r => panic!("Close answered {r:?}"),
            }
        }
    }
}

#[test]
fn hostile_input_is_answered_and_a_good_client_loses_nothing() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let mut d = Daemon::start(
        &tb,
        &format!(
            "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{0}\"]\n\n[[grant]]\nusers = [\"root\"]\ninterfaces = [\"{0}\"]\nring_size = \"1M\"\n",
            tb.capture_if
        ),
    );
    let canaries = TempDir::new("canaries");
    std::fs::write(canaries.join("canary"), b"x").expect("canary");
    std::fs::write(d.dir.join("canary"), b"x").expect("canary");
    let pid = d.child.id();
    let out = open_dir("hostile");
    let good = start_client(&tb, &d, NOBODY, &out, "good", &["-s", "200"]);
    std::thread::sleep(Duration::from_millis(300));
    let (fds0, threads0) = (fd_count(pid), threads(pid));

    let sent = untagged_frames(&tb, 0..23 * 300);
    std::thread::scope(|s| {
        let sender = s.spawn(|| tb.send_from_peer(&sent, 3_000));
        let scribble = scribbler(&d, &tb.capture_if);
        garbage(&d, &canaries);
        // The good client's and the scribbler's connections are open.
        std::thread::sleep(Duration::from_millis(500));
        flood(&d, 2);
        garbage(&d, &canaries);
        sender.join().expect("sender").expect("send");
        scribble.finish();
    });
    d.assert_running("after the hostile client");

    let f = good.stop();
    f.assert_ok("good client");
    let c = f.final_counters("good client");
    assert_eq!(num(&c, "packets_dropped_client"), 0, "{c}");
    assert_packets(
        &f.packets(),
        &Oracle::new("", "").expect(&sent, 200),
        "good client",
    );

    // Nothing left behind: descriptors and threads back to where they were
    // with one session (now none).
    // Rings stay in their user's pool for its next session (a client may
    // still hold them: ringcap_daemon::budget): root's scribbler's ring is
    // four descriptors (data, consumer, both pipe ends) more than before;
    // nobody's was already open then.
    let pooled = 4;
    let fds = settles(fds0 + pooled, || fd_count(pid));
    assert!(
        fds <= fds0 + pooled,
        "ringcapd holds {fds} descriptors, {fds0} before (+{pooled} for root's pooled ring)"
    );
    let t = settles(threads0, || threads(pid));
    assert!(
        t <= threads0,
        "ringcapd runs {t} threads, {threads0} before"
    );
    d.stop();
}
