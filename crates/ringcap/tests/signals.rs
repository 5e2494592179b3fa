//! Signals a tcpdump user sends: SIGUSR1 asks for the counters (tcpdump
//! prints its packet counts) and SIGUSR2 asks tcpdump to flush its output.
//! Left to their default action they killed the capture on the spot: the
//! packets in the ring and the writer's buffer lost, the file left hidden
//! for `ringcap repair`. Now the capture prints its counters, carries on,
//! and ends as ever on SIGINT with every packet written.

mod common;

use common::*;
use ringcap_testkit::{frames, skip_unless_netns, Testbed};
use std::time::Duration;

/// Waits up to `limit` for the capture's stderr to hold `needle` `times` times.
fn wait_for_count(run: &Running, needle: &str, times: usize, limit: Duration) -> bool {
    run.log
        .wait_for(limit, |text| {
            (text.matches(needle).count() >= times).then_some(())
        })
        .is_some()
}

#[test]
fn usr1_prints_the_counters_and_usr2_does_no_harm() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("signals");
    let out = dir.file("out.pcap");
    let sent = frames::mixed_sequence(&tb.endpoints(), 500);
    let mut run = start(&tb, &["-w", &out]);
    tb.send_from_peer(&sent[..250], 0).expect("send");
    std::thread::sleep(SETTLE);
    run.child.signal(libc::SIGUSR1).expect("SIGUSR1");
    // The log is read line by line on another thread: the report is whole
    // once its "written" line (and, when written lags, the line after it)
    // has been read.
    let value = |text: &str, label: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(label)?.trim().parse::<u64>().ok())
    };
    let (first, delivered, written) = run
        .log
        .wait_for(Duration::from_secs(5), |text| {
            let (d, w) = value(text, "delivered").zip(value(text, "written"))?;
            Some((text.to_string(), d, w))
        })
        .unwrap_or_else(|| panic!("no whole counters after SIGUSR1:\n{}", run.log.text()));
    assert!(first.contains("counters now (SIGUSR1)"), "{first}");
    assert_eq!(delivered, 250, "{first}");
    // "written" may lag "delivered" by a batch not yet handed over: then
    // the report says how many are on their way.
    if written < delivered {
        let line = format!(
            "{} packets delivered are on their way to the writer",
            delivered - written
        );
        assert!(
            wait_for_count(&run, &line, 1, Duration::from_secs(5)),
            "{line:?} missing:\n{}",
            run.log.text()
        );
    }
    run.child.signal(libc::SIGUSR2).expect("SIGUSR2");
    tb.send_from_peer(&sent[250..], 0).expect("send");
    std::thread::sleep(SETTLE);
    run.child.signal(libc::SIGUSR1).expect("SIGUSR1");
    assert!(
        wait_for_count(&run, "counters now (SIGUSR1)", 2, Duration::from_secs(5)),
        "no counters after the second SIGUSR1:\n{}",
        run.log.text()
    );
    let text = run.log.text();
    let seen = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("seen by the interface"))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .next_back();
    assert!(
        seen.is_some_and(|n| n >= 500),
        "the second SIGUSR1's counters miss packets seen: {seen:?}\n{text}"
    );
    assert!(
        run.child.try_wait().expect("try_wait").is_none(),
        "the capture ended after SIGUSR1/SIGUSR2:\n{text}"
    );
    let fin = run.stop();
    fin.assert_ok("capture after SIGUSR1 and SIGUSR2");
    fin.assert_no_loss("capture after SIGUSR1 and SIGUSR2");
    let got: Vec<Vec<u8>> = read(&out).into_iter().map(|p| p.data).collect();
    assert_eq!(got.len(), sent.len(), "packets in the file");
    assert!(got == sent, "the file's packets differ from those sent");
}
