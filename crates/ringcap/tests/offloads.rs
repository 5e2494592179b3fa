//! Receive offloads that merge packets before capture (GRO): the warning that
//! names the exact ethtool fix, and `--fix-offloads`, which turns them off for
//! the capture and restores exactly what it changed when the capture ends (by
//! SIGINT or SIGTERM).
//!
//! The capture-side veth of a throw-away testbed has GRO switched on or off
//! with `ethtool -K` inside its namespace; `ethtool -k` is the oracle.

mod common;

use common::*;
use ringcap_testkit::{skip_unless_netns, Testbed};

/// True when `ethtool -k` says generic-receive-offload is on for the capture interface.
fn gro_on(tb: &Testbed) -> bool {
    let out = tb
        .in_capture_ns("ethtool")
        .arg("-k")
        .arg(&tb.capture_if)
        .output()
        .expect("run ethtool -k");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("generic-receive-offload:"))
        .unwrap_or_else(|| panic!("no generic-receive-offload line in ethtool -k:\n{text}"));
    line.split(':')
        .nth(1)
        .is_some_and(|v| v.trim().starts_with("on"))
}

fn set_gro(tb: &Testbed, on: bool) {
    let st = tb
        .in_capture_ns("ethtool")
        .args(["-K", &tb.capture_if, "gro", if on { "on" } else { "off" }])
        .status()
        .expect("run ethtool -K");
    assert!(st.success(), "ethtool -K {} gro {on} failed", tb.capture_if);
    assert_eq!(gro_on(tb), on, "GRO did not switch to {on}");
}

#[test]
fn gro_on_gives_a_warning_with_the_ethtool_fix_and_is_left_alone() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    set_gro(&tb, true);
    let dir = TempDir::new("offload-warn");
    let run = start(&tb, &["-w", &dir.file("out.pcap")]);
    assert!(gro_on(&tb), "without --fix-offloads GRO must stay on");
    let fin = run.stop();
    fin.assert_ok("capture with GRO on");
    let fix = format!("ethtool -K {} gro off", tb.capture_if);
    assert!(
        fin.stderr.contains("warning") && fin.stderr.contains(&fix),
        "no warning naming `{fix}` in:\n{}",
        fin.stderr
    );
    assert!(fin.stderr.contains("--fix-offloads"), "{}", fin.stderr);
    assert!(
        gro_on(&tb),
        "GRO changed by a capture without --fix-offloads"
    );
}

/// Starts a `--fix-offloads` capture with GRO on, checks GRO is off while it
/// runs, stops it with `signal` and checks GRO is back on.
fn fix_and_restore(signal: i32, what: &str) {
    let tb = Testbed::new().expect("testbed");
    set_gro(&tb, true);
    let dir = TempDir::new("offload-fix");
    let mut run = start(&tb, &["--fix-offloads", "-w", &dir.file("out.pcap")]);
    assert!(
        !gro_on(&tb),
        "{what}: GRO still on during a --fix-offloads capture"
    );
    std::thread::sleep(SETTLE);
    run.child.signal(signal).expect("signal ringcap");
    let fin = run.wait(EXIT_LIMIT);
    fin.assert_ok(what);
    assert!(
        fin.stderr.contains(&format!(
            "turned off generic-receive-offload on {}",
            tb.capture_if
        )),
        "{what}: no notice of what was turned off:\n{}",
        fin.stderr
    );
    assert!(!fin.stderr.contains("warning"), "{what}: {}", fin.stderr);
    assert!(gro_on(&tb), "{what}: GRO not restored at exit");
}

#[test]
fn fix_offloads_turns_gro_off_and_restores_it_on_sigint() {
    skip_unless_netns!();
    fix_and_restore(libc::SIGINT, "--fix-offloads, SIGINT");
}

#[test]
fn fix_offloads_restores_gro_on_sigterm() {
    skip_unless_netns!();
    fix_and_restore(libc::SIGTERM, "--fix-offloads, SIGTERM");
}

/// Only what ringcap turned off is turned back on: GRO that was off stays off.
#[test]
fn fix_offloads_leaves_offloads_that_were_off_alone() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    set_gro(&tb, false);
    let dir = TempDir::new("offload-off");
    let run = start(&tb, &["--fix-offloads", "-w", &dir.file("out.pcap")]);
    let fin = run.stop();
    fin.assert_ok("--fix-offloads with GRO off");
    assert!(!fin.stderr.contains("turned off"), "{}", fin.stderr);
    assert!(!gro_on(&tb), "GRO turned on by a capture that found it off");
}
