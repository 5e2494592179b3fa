//! Isolation: a session that never reads fills only its own ring — its
//! drops are counted for it, in the ring's header and in its Stats — while
//! a reading client next to it loses nothing; a client that is killed
//! frees its session; `ringcap stats --daemon` shows a user only their own
//! sessions and root all of them.

mod common;

use common::*;
use ringcap_client::{Client, OpenRequest};
use ringcap_testkit::Testbed;
use std::time::{Duration, Instant};

fn uids(v: &[serde_json::Value]) -> Vec<u64> {
    let mut u: Vec<u64> = v.iter().map(|s| s["uid"].as_u64().expect("uid")).collect();
    u.sort();
    u
}

#[test]
fn a_client_that_never_reads_loses_only_its_own_packets() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    // root (the test itself) gets the smallest ring a grant may give.
    let d = Daemon::start(
        &tb,
        &format!(
            "[[grant]]\nusers = [\"root\"]\ninterfaces = [\"{0}\"]\nring_size = \"1M\"\n\n[[grant]]\nusers = [\"nobody\"]\ninterfaces = [\"{0}\"]\n",
            tb.capture_if
        ),
    );
    let out = open_dir("slow");
    let mut slow = Client::connect(&d.socket)
        .expect("connect")
        .open(OpenRequest::new(&tb.capture_if, ""))
        .expect("open the slow session");
    let reader = start_client(&tb, &d, NOBODY, &out, "reader", &[]);
    std::thread::sleep(Duration::from_millis(300));
    let fds_before = fd_count(d.child.id());
    let victim = start_client(&tb, &d, NOBODY, &out, "victim", &[]);

    // A user sees their own sessions; root sees everyone's.
    assert_eq!(uids(&stats_json(&tb, &d, Some(NOBODY))), vec![65534, 65534]);
    // A user no grant names is refused outright (one refusal, then the close).
    let mut cmd = as_user(&tb, OTHER, &ringcap_bin());
    cmd.args(["stats", &d.arg(), "--json"]);
    let (status, stdout, stderr) = run_limited_out(&mut cmd, Duration::from_secs(20));
    assert!(!status.success() && stdout.is_empty(), "{status}: {stdout}");
    assert!(stderr.contains("default deny"), "{stderr}");
    assert_eq!(uids(&stats_json(&tb, &d, None)), vec![0, 65534, 65534]);

    // A client killed outright frees its session.
    let mut victim = victim;
    victim.child.kill().expect("SIGKILL");
    let deadline = Instant::now() + Duration::from_secs(5);
    while uids(&stats_json(&tb, &d, None)) != vec![0, 65534] {
        assert!(
            Instant::now() < deadline,
            "the killed client's session is still listed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // ... and everything it held: its connection; its ring goes back to
    // nobody's pool for nobody's next session (ringcap_daemon::budget), its
    // four descriptors (data, consumer, both pipe ends) kept.
    let pooled = 4;
    let deadline = Instant::now() + Duration::from_secs(5);
    while fd_count(d.child.id()) > fds_before + pooled {
        assert!(
            Instant::now() < deadline,
            "ringcapd holds {} descriptors, {fds_before} before the killed client \
             (+{pooled} for its pooled ring)",
            fd_count(d.child.id())
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let sent = untagged_frames(&tb, 0..23 * 900);
    tb.send_from_peer(&sent, 0).expect("send");
    std::thread::sleep(SETTLE);

    // The slow session: its ring is full, what did not fit is counted.
    let (stats, ring) = whole_counters(&mut slow, sent.len() as u64);
    assert!(ring.packets_dropped > 0, "nothing dropped: {ring:?}");
    assert_eq!(
        stats.packets_dropped_client, ring.packets_dropped,
        "{stats:?} {ring:?}"
    );
    assert_eq!(
        stats.packets_delivered, ring.packets_written,
        "{stats:?} {ring:?}"
    );
    assert_eq!(
        stats.packets_filter_accepted,
        sent.len() as u64,
        "{stats:?}"
    );
    assert_eq!(
        stats.packets_filter_accepted,
        stats.packets_delivered + stats.packets_dropped_client,
        "{stats:?}"
    );
    // What it was given is what was sent, in order, with gaps only.
    let mut got = Vec::new();
    slow.packets(|p| got.push(p.data.to_vec()))
        .expect("read the slow ring");
    assert_eq!(got.len() as u64, stats.packets_delivered);
    let mut at = 0;
    for (i, p) in got.iter().enumerate() {
        let Some(j) = sent[at..].iter().position(|s| s == p) else {
            panic!("slow session packet {i} is not a sent frame, in order");
        };
        at += j + 1;
    }
    // The daemon's view agrees (root sees the session and its drops).
    let all = stats_json(&tb, &d, None);
    let mine = all
        .iter()
        .find(|s| s["uid"] == 0)
        .expect("the slow session is listed");
    assert_eq!(
        mine["counters"]["packets_dropped_client"].as_u64(),
        Some(stats.packets_dropped_client),
        "{mine}"
    );

    // The reader, next to it, lost nothing.
    let f = reader.stop();
    f.assert_ok("reader");
    let c = f.final_counters("reader");
    assert_eq!(num(&c, "packets_dropped_client"), 0, "{c}");
    assert_packets(
        &f.packets(),
        &Oracle::new("", "").expect(&sent, 262_144),
        "reader",
    );

    let (reason, counters) = slow.close().expect("close");
    assert!(reason.contains("closed by the client"), "{reason}");
    assert_eq!(
        counters.packets_dropped_client,
        stats.packets_dropped_client
    );

    // One user runs at most 16 sessions at once; the 17th is refused, and
    // a place frees when one ends.
    let open = || {
        Client::connect(&d.socket)
            .expect("connect")
            .open(OpenRequest::new(&tb.capture_if, "arp"))
    };
    let mut many: Vec<_> = (0..16)
        .map(|i| open().unwrap_or_else(|e| panic!("session {i}: {e}")))
        .collect();
    match open() {
        Err(ringcap_client::ClientError::Refused { rule, .. }) => assert_eq!(rule, "sessions"),
        Err(e) => panic!("the 17th session: {e}"),
        Ok(_) => panic!("a 17th session was admitted"),
    }
    many.pop().expect("one").close().expect("close");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match open() {
            Ok(s) => {
                many.push(s);
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "no place after one ended: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(many);
    d.stop();
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}
