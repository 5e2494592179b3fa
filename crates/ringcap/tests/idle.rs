//! An idle capture sleeps (issue 15: CPU a capture spends while no packet
//! comes counts against every packet it captures): no thread of `ringcap
//! capture` wakes on a timer to look at flags; interval records wake only the
//! thread that writes them, once per interval; and a stop still ends the
//! capture at once.

mod common;

use common::*;
use ringcap_testkit::{skip_unless_netns, Testbed};
use std::time::{Duration, Instant};

/// Voluntary context switches of all of `pid`'s threads so far: each is a
/// thread going to sleep, so the difference over an interval is how often
/// the process woke up.
fn wakeups(pid: u32) -> u64 {
    let mut n = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks") {
        let status =
            std::fs::read_to_string(task.expect("task").path().join("status")).unwrap_or_default();
        n += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    n
}

/// Wake-ups of the capture in `window`, once its start is behind it (the
/// file header reaches the disk one flush interval, 1 s, after the start).
fn idle_wakeups(run: &Running, window: Duration) -> u64 {
    let pid = run.child.id();
    std::thread::sleep(Duration::from_millis(1500));
    let before = wakeups(pid);
    std::thread::sleep(window);
    wakeups(pid) - before
}

/// SIGINT, and how long the capture took to end.
fn stop_timed(mut run: Running) -> (Finished, Duration) {
    let t = Instant::now();
    run.child.signal(libc::SIGINT).expect("SIGINT ringcap");
    let f = run.wait(EXIT_LIMIT);
    (f, t.elapsed())
}

#[test]
fn an_idle_capture_sleeps_and_stops_at_once() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("idle");
    let window = Duration::from_secs(2);

    // Default options (no terminal, no --stats-json): with timers (250 ms
    // for the capture thread, the supervisor and the main thread, 500 ms
    // for the writer) this was ~28 wake-ups in 2 s.
    let out = dir.file("plain.pcap");
    let run = start(&tb, &["-w", &out]);
    let woke = idle_wakeups(&run, window);
    let (f, took) = stop_timed(run);
    f.assert_ok("idle capture");
    assert!(woke <= 2, "an idle capture woke {woke} times in {window:?}");
    assert!(
        took < Duration::from_secs(1),
        "an idle capture took {took:?} to stop after SIGINT"
    );

    // One JSON record per second: the thread that writes them wakes once a
    // second, and nothing else does.
    let out = dir.file("json.pcap");
    let json = dir.file("stats.json");
    let run = start(&tb, &["--stats-json", &json, "-w", &out]);
    let woke = idle_wakeups(&run, window);
    let (f, took) = stop_timed(run);
    f.assert_ok("idle capture with --stats-json");
    assert!(
        woke <= 2 * window.as_secs() + 2,
        "an idle capture with --stats-json woke {woke} times in {window:?}"
    );
    assert!(
        took < Duration::from_secs(1),
        "an idle capture with --stats-json took {took:?} to stop after SIGINT"
    );
    let records = json_records(&json);
    assert!(
        records.len() >= 3,
        "interval records still come: {} records",
        records.len()
    );
}
