//! One user cannot hold every connection: beyond MAX_CONNECTIONS_PER_USER
//! (64) their further connections are told so and closed, while another
//! user is still served.

mod common;

use common::*;
use ringcap_testkit::Testbed;
use std::process::Stdio;
use std::time::Duration;

/// Opens 80 connections as `nobody` (a Python helper, so that the peer's
/// credentials are really nobody's), keeps them open until stdin closes,
/// and prints how many were refused (the daemon answered at once).
const HOLDER: &str = r#"
import socket, sys, time
conns, refused = [], 0
for i in range(80):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1])
    conns.append(s)
time.sleep(1.0)
for s in conns:
    s.settimeout(0.05)
    try:
        if s.recv(70000):
            refused += 1
    except socket.timeout:
        pass
print(refused, flush=True)
sys.stdin.read()
"#;

#[test]
fn one_user_cannot_hold_every_connection() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::start(
        &tb,
        &format!(
            "[[grant]]\nusers = [\"nobody\", \"daemon\"]\ninterfaces = [\"{}\"]\n",
            tb.capture_if
        ),
    );
    let mut cmd = tb.in_capture_ns("setpriv");
    cmd.args([
        "--reuid",
        NOBODY.0,
        "--regid",
        NOBODY.1,
        "--clear-groups",
        "--inh-caps=-all",
        "/usr/bin/python3",
        "-c",
        HOLDER,
    ])
    .arg(&d.socket)
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    let mut child = cmd.spawn().expect("spawn the holder");
    let stdout = child.stdout.take().expect("stdout");
    let holder = ringcap_testkit::capture::ChildGuard::new(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the holder did not report");
    assert_eq!(line.trim(), "16", "80 connections, 64 served: 16 refused");
    // While nobody holds 64, another user captures.
    let dir = open_dir("limits");
    let c = start_client(&tb, &d, OTHER, &dir, "other", &["udp"]);
    c.stop().assert_ok("another user's capture");
    drop(holder);
    let log = d.stop();
    assert_no_panic(&log, "ringcapd");
}
