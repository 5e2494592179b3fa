//! Policy files with errors and policy reloads: `ringcapd --check` reports
//! the line (exit 2), ringcapd refuses to start on a bad policy (exit 2), a
//! SIGHUP with a bad file keeps the old policy (sessions go on, new ones are
//! admitted), a SIGHUP with a narrower policy holds running sessions to it,
//! and one that no longer allows a session ends it with a reason the client
//! prints.

mod common;

use common::*;
use ringcap_testkit::{TempDir, Testbed};
use std::process::Command;
use std::time::{Duration, Instant};

/// A policy file whose error is on line 7 (a snap cap that is no size).
fn bad_policy(dir: &TempDir) -> String {
    format!(
        "{}\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"eth0\"]\nmax_snaplen = \"huge\"\n",
        policy_head(dir.path())
    )
}

#[test]
fn check_reports_the_line_and_a_bad_policy_is_refused_at_start() {
    if !can_run() {
        return;
    }
    let dir = TempDir::new("check");
    let cases = [
        // (file, line of the error, what the message says)
        (bad_policy(&dir), 7, "max_snaplen"),
        (
            format!(
                "{}\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"eth0\"]\ncapture_filter = \"udp and and\"\n",
                policy_head(dir.path())
            ),
            7,
            "capture_filter",
        ),
        (
            format!(
                "{}\n[[grant]]\nusers = [\"nobody\"]\nintrefaces = [\"eth0\"]\n",
                policy_head(dir.path())
            ),
            6,
            "intrefaces",
        ),
        (
            format!(
                "{}\n[[grant]]\nusers = [\"rc-no-such-user-here\"]\ninterfaces = [\"eth0\"]\n",
                policy_head(dir.path())
            ),
            5,
            "rc-no-such-user-here",
        ),
        (
            format!("{}\n[[grant]\nusers = [\"nobody\"]\n", policy_head(dir.path())),
            4,
            "",
        ),
    ];
    let config = dir.join("bad.toml");
    for (text, line, what) in &cases {
        std::fs::write(&config, text).expect("write");
        let (status, stderr) = run_limited(
            Command::new(ringcapd_bin())
                .arg("--check")
                .arg("--config")
                .arg(&config),
            Duration::from_secs(20),
        );
        assert_eq!(
            status.code(),
            Some(2),
            "--check on\n{text}\n{status}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("line {line},")) && stderr.contains(what),
            "--check on\n{text}\ndoes not point at line {line} ({what}): {stderr}"
        );
        // The daemon itself does not start on it (and makes no socket).
        let (status, stderr) = run_limited(
            Command::new(ringcapd_bin()).arg("--config").arg(&config),
            Duration::from_secs(20),
        );
        assert_eq!(
            status.code(),
            Some(2),
            "start on\n{text}\n{status}: {stderr}"
        );
        assert!(stderr.contains(&format!("line {line},")), "{stderr}");
        assert!(!dir.join("ringcapd.sock").exists(), "a socket was made");
        // The file is named once.
        let shown = config.display().to_string();
        assert_eq!(stderr.matches(&shown).count(), 1, "{stderr}");
    }
    // A file that cannot be read: named once, and why.
    let missing = dir.join("missing.toml");
    let (status, stderr) = run_limited(
        Command::new(ringcapd_bin()).arg("--config").arg(&missing),
        Duration::from_secs(20),
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!(
            "ringcapd: {}: cannot read it: No such file or directory (os error 2)",
            missing.display()
        )
    );

    // A good file: exit 0, each grant as the daemon understands it.
    std::fs::write(
        &config,
        format!(
            "{}\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"eth0\"]\nmax_snaplen = \"headers\"\n\n[[grant]]\ngroups = [\"nogroup\"]\ninterfaces = [\"*\"]\n",
            policy_head(dir.path())
        ),
    )
    .expect("write");
    let (status, stdout, stderr) = run_limited_out(
        Command::new(ringcapd_bin())
            .arg("--check")
            .arg("--config")
            .arg(&config),
        Duration::from_secs(20),
    );
    assert!(
        status.success(),
        "--check on a good file: {status}: {stderr}"
    );
    assert!(
        stdout.contains("grant 1 of 2 (line 4)")
            && stdout.contains("grant 2 of 2 (line 9)")
            && stdout.contains("nobody (uid 65534)"),
        "{stdout}"
    );
    // What the daemon would refuse when it starts, --check refuses too: a
    // dump directory others may write, under a grant with dumps. A store
    // it cannot use is a warning (its retrievals are refused).
    let dumps = dir.join("dumps");
    std::fs::create_dir(&dumps).expect("mkdir");
    std::fs::set_permissions(&dumps, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("chmod");
    let with = |extra: &str| {
        std::fs::write(
            &config,
            format!(
                "{}\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"eth0\"]\n{extra}",
                policy_head(dir.path())
            ),
        )
        .expect("write");
        run_limited_out(
            Command::new(ringcapd_bin())
                .arg("--check")
                .arg("--config")
                .arg(&config),
            Duration::from_secs(20),
        )
    };
    let (status, _, stderr) = with("dump_quota = \"1M\"\n");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is writable by its group or others"),
        "{stderr}"
    );
    let (status, _, stderr) = with("");
    assert!(
        status.success(),
        "no grant with dumps: a warning only: {stderr}"
    );
    assert!(stderr.contains("warning"), "{stderr}");
    let store = format!(
        "\n[[store]]\ninterface = \"eth0\"\ndir = \"{}\"\n",
        dir.join("no-store").display()
    );
    let (status, _, stderr) = with(&store);
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("no-store") && stderr.contains("retrievals from eth0 will be refused"),
        "{stderr}"
    );
}

#[test]
fn sighup_keeps_the_old_policy_on_error_and_holds_sessions_to_a_new_one() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let g = |snap: u32| {
        format!(
            "\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\ncapture_filter = \"udp or icmp\"\nmax_snaplen = {snap}\n",
            tb.capture_if
        )
    };
    let mut d = Daemon::start(&tb, &g(1000));
    let out = open_dir("reload");
    let one = start_client(&tb, &d, NOBODY, &out, "one", &[]);
    let batch1 = untagged_frames(&tb, 0..23 * 10);
    tb.send_from_peer(&batch1, 20_000).expect("send");

    // A file with an error: the old policy stays, the session goes on and
    // new sessions are admitted under it.
    let bad = bad_policy(&d.dir);
    assert!(!d.reload_raw(&bad), "ringcapd took a bad policy");
    let log = d.log.text();
    assert!(
        log.contains("policy not reloaded, the old one stays") && log.contains("line 7,"),
        "{log}"
    );
    let two = start_client(&tb, &d, NOBODY, &out, "two", &[]);
    assert!(two.ready.contains("snaplen 1000 bytes"), "{}", two.ready);
    let batch2 = untagged_frames(&tb, 1000..1000 + 23 * 10);
    tb.send_from_peer(&batch2, 20_000).expect("send");

    // A narrower cap: both sessions are held to it (restarted), without
    // losing or repeating a packet.
    std::thread::sleep(SETTLE);
    let changes = |d: &Daemon| d.log.text().matches("held to the reloaded policy").count();
    assert!(d.reload(&g(64)), "reload");
    let deadline = Instant::now() + Duration::from_secs(5);
    while changes(&d) < 2 {
        assert!(
            Instant::now() < deadline,
            "sessions not changed: {}",
            d.log.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let batch3 = untagged_frames(&tb, 2000..2000 + 23 * 10);
    tb.send_from_peer(&batch3, 20_000).expect("send");
    std::thread::sleep(SETTLE);

    // A policy that no longer names nobody: both sessions end, and each
    // client says why and exits by itself.
    assert!(
        d.reload("\n[[grant]]\nusers = [\"root\"]\ninterfaces = [\"*\"]\n"),
        "reload"
    );
    let (f1, f2) = (
        one.wait(Duration::from_secs(10)),
        two.wait(Duration::from_secs(10)),
    );
    for f in [&f1, &f2] {
        // Not as the client asked: exit status 1, the reason said.
        assert_no_panic(&f.stderr, "client");
        assert_eq!(f.status.code(), Some(1), "client: {}", f.stderr);
        assert!(
            f.stderr.contains("ringcapd ended the session: the policy was reloaded and no longer allows this session (default deny"),
            "{}",
            f.stderr
        );
        f.final_counters("client");
    }
    let oracle = Oracle::new("udp or icmp", "");
    let mut want1 = oracle.expect(&batch1, 1000);
    want1.extend(oracle.expect(&batch2, 1000));
    let mut want2 = oracle.expect(&batch2, 1000);
    for w in [&mut want1, &mut want2] {
        w.extend(oracle.expect(&batch3, 64));
    }
    assert_packets(&f1.packets(), &want1, "session one");
    assert_packets(&f2.packets(), &want2, "session two");

    // New sessions are held to the new policy.
    let (status, stderr) = run_capture(&tb, &d, NOBODY, &["-i", &tb.capture_if]);
    assert_eq!(status.code(), Some(3), "{status}: {stderr}");
    assert!(stderr.contains("default deny"), "{stderr}");
    d.stop();
}

/// A client that stops reading its control connection (while asking for
/// more and more answers) must not keep its session past a revocation: the
/// daemon's answers have nowhere to go, and it must not wait for them.
#[test]
fn a_client_that_does_not_read_its_answers_cannot_escape_a_revocation() {
    if !can_run() {
        return;
    }
    use ringcap_proto::{decode_response, encode_request, transport, Request, Response};
    use std::os::fd::AsRawFd;
    let tb = Testbed::new().expect("testbed");
    let grants = format!(
        "[[grant]]\nusers = [\"root\"]\ninterfaces = [\"{0}\"]\n\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{0}\"]\n",
        tb.capture_if
    );
    let mut d = Daemon::start(&tb, &grants);
    let conn = transport::connect(&d.socket).expect("connect");
    let open = Request::Open {
        interfaces: vec![tb.capture_if.clone()],
        filter: String::new(),
        program: None,
        snaplen: ringcap_proto::SnapRequest::Bytes(96),
        sample: None,
        format: ringcap_proto::OutputFormat::Pcap,
        dump: None,
        duration_s: None,
        count: None,
        compress: false,
        inject_only: false,
        flows: None,
    };
    transport::send(&conn, &encode_request(&open), &[]).expect("send Open");
    let mut buf = Box::new([0u8; ringcap_proto::MAX_DATAGRAM]);
    let (len, fds) = transport::recv(&conn, &mut buf)
        .expect("recv")
        .expect("an answer");
    assert!(matches!(
        decode_response(&buf[..len]),
        Ok(Response::Accepted { .. })
    ));
    let [data, consumer, wake] = transport::expect_fds::<3>(fds).expect("three descriptors");
    let ring = ringcap_shm::RingReader::map(data, consumer, wake).expect("map the ring");

    // Ask for counters without ever reading the answers, until the
    // daemon's answers fill the socket and this side cannot send either.
    // SAFETY: fcntl(2) on our own socket.
    unsafe {
        let fl = libc::fcntl(conn.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(conn.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let stats = encode_request(&Request::Stats);
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match transport::send(&conn, &stats, &[]) {
            Ok(()) => sent += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(200));
                if transport::send(&conn, &stats, &[]).is_err() {
                    break;
                }
                sent += 1;
            }
            Err(e) => panic!("send: {e}"),
        }
    }
    assert!(sent > 100, "only {sent} requests went out");

    // Root's grant goes: the session must end (its ring says so).
    assert!(
        d.reload(&format!(
            "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\n",
            tb.capture_if
        )),
        "reload"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ring.ended() {
        assert!(
            Instant::now() < deadline,
            "a revoked session still runs 10 s later ({sent} unread answers asked for); log:\n{}",
            d.log.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Everyone else is still served.
    let out = open_dir("unread");
    let c = start_client(&tb, &d, NOBODY, &out, "after", &[]);
    let f = c.stop();
    f.assert_ok("a client after the revocation");
    drop(conn);
    d.stop();
}

/// A reload is held to what the start checks: one that brings a dump
/// directory others may write, under a grant with dumps, is not taken (the
/// old policy stays, and says why); one that names another socket is taken
/// and says the socket stays until a restart.
#[test]
fn a_reload_is_checked_as_the_start_is() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let grant = format!(
        "[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{}\"]\ndump_quota = \"1M\"\n",
        tb.capture_if
    );
    let mut d = Daemon::start(&tb, &grant);
    let open = open_dir("reload-dumps");
    let text = format!(
        "socket = \"{}\"\ndump_dir = \"{}\"\n{grant}",
        d.socket.display(),
        open.path().display()
    );
    assert!(!d.reload_raw(&text), "{}", d.log.text());
    assert!(
        d.log.text().contains("not reloaded, the old one stays")
            && d.log.text().contains("not serving dumps"),
        "{}",
        d.log.text()
    );
    let moved = format!(
        "socket = \"{}\"\ndump_dir = \"{}\"\n{grant}",
        d.dir.join("elsewhere.sock").display(),
        d.dir.join("dumps").display()
    );
    assert!(d.reload_raw(&moved), "{}", d.log.text());
    assert!(
        d.log.text().contains("the socket is still"),
        "{}",
        d.log.text()
    );
    d.assert_running("after the reloads");
    d.stop();
}
