//! How `ringcap capture` refuses: every error's exit status (2 usage, 3 system
//! refusal, 1 runtime) and message, and that it never panics.
//!
//! Live cases run inside a throw-away testbed namespace and print `SKIP: ...`
//! when not root (fail, with `RINGCAP_REQUIRE_PRIVILEGED_TESTS=1`); a ringcap
//! that wrongly starts capturing is killed after a time limit and the test
//! fails.

mod common;

use common::*;
use ringcap_testkit::{frames, skip_unless_netns, Testbed, TestbedOptions};
use std::process::Command;
use std::time::Duration;

/// Longest a refusal may take.
const LIMIT: Duration = Duration::from_secs(15);

/// `ringcap capture ARGS...` inside the capture namespace of `tb`.
fn capture_in_ns(tb: &Testbed, args: &[&str]) -> Finished {
    let mut cmd = tb.in_capture_ns(bin());
    cmd.arg("capture").args(args);
    let (status, _, stderr) = run_limited(cmd, LIMIT);
    Finished { status, stderr }
}

/// Checks the exit status, that nothing panicked, and that every `needles` is in
/// the message.
fn expect_refusal(fin: &Finished, code: i32, needles: &[&str], what: &str) {
    assert_no_panic(&fin.stderr, what);
    assert!(
        !fin.stderr.contains("capturing on "),
        "{what}: ringcap started capturing instead of refusing:\n{}",
        fin.stderr
    );
    assert_eq!(
        fin.code(),
        Some(code),
        "{what}: exit status; stderr:\n{}",
        fin.stderr
    );
    for n in needles {
        assert!(
            fin.stderr.contains(n),
            "{what}: message should contain {n:?}; stderr:\n{}",
            fin.stderr
        );
    }
}

#[test]
fn no_such_interface() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("nosuch");
    let out = dir.file("out.pcap");
    let fin = capture_in_ns(&tb, &["-i", "rcnosuch0", "-B", "8M", "-w", &out]);
    expect_refusal(&fin, 3, &["no such interface", "rcnosuch0"], "-i rcnosuch0");
    assert!(!std::path::Path::new(&out).exists(), "no output file");
    // A name that only exists in another namespace (the peer end) is not visible.
    let fin = capture_in_ns(&tb, &["-i", &tb.peer_if, "-B", "8M"]);
    expect_refusal(&fin, 3, &["no such interface"], "-i PEER_IF");
}

#[test]
fn interface_down() {
    skip_unless_netns!();
    let tb = Testbed::with_options(TestbedOptions {
        capture_if_up: false,
        ..TestbedOptions::default()
    })
    .expect("testbed");
    let fin = capture_in_ns(&tb, &["-i", &tb.capture_if, "-B", "8M"]);
    expect_refusal(&fin, 3, &["is down", &tb.capture_if], "interface down");
}

/// An interface that goes down while captured is waited for (as libpcap
/// does); one that is deleted ends the capture with exit status 1 and
/// libpcap's words, every packet before it written and the interface's
/// counters as last read (they were reported as 0 once its statistics files
/// were gone).
#[test]
fn interface_down_then_deleted_while_capturing() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("gone");
    let out = dir.file("out.pcap");
    let sent = frames::mixed_sequence(&tb.endpoints(), 40);
    let run = start(&tb, &["-w", &out]);
    tb.send_from_peer(&sent[..20], 0).expect("send before down");
    // Down at once: the block holding these frames retires after it went
    // down (a block of packets then says nothing of the interface: a
    // capture that took it for "up again" missed the deletion below).
    tb.set_capture_if_up(false).expect("down");
    std::thread::sleep(Duration::from_millis(600));
    tb.set_capture_if_up(true).expect("up");
    // The peer's carrier comes back with it.
    std::thread::sleep(Duration::from_millis(300));
    tb.send_from_peer(&sent[20..], 0).expect("send after up");
    // The counters are read every second while no status line reads them.
    std::thread::sleep(Duration::from_millis(1300));
    tb.delete_capture_if().expect("delete the interface");
    let fin = run.wait(EXIT_LIMIT);
    assert_no_panic(&fin.stderr, "deleted interface");
    assert_eq!(fin.code(), Some(1), "exit status; stderr:\n{}", fin.stderr);
    assert!(
        fin.stderr
            .contains(&format!("the interface {} disappeared", tb.capture_if)),
        "{}",
        fin.stderr
    );
    assert!(
        !fin.stderr.contains("could not be written"),
        "nothing failed to be written: {}",
        fin.stderr
    );
    let got = read(&out);
    // (The interface's own frames, such as IPv6 neighbour discovery after
    // it came up, carry no tag.)
    let tagged: Vec<u32> = seqs(&got).into_iter().flatten().collect();
    assert_eq!(
        tagged,
        (0..40).collect::<Vec<u32>>(),
        "every frame sent before the deletion, in order"
    );
    assert_eq!(
        fin.report_value("written"),
        Some(got.len() as u64),
        "{}",
        fin.stderr
    );
    assert!(
        fin.report_value("seen by the interface").unwrap_or(0) >= 40,
        "the interface's counters as last read: {}",
        fin.stderr
    );
}

#[test]
fn missing_capability_names_cap_net_raw() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let mut cmd = tb.in_capture_ns("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        bin(),
        "capture",
        "-i",
        &tb.capture_if,
        "-B",
        "8M",
    ]);
    let (status, _, stderr) = run_limited(cmd, LIMIT);
    let fin = Finished { status, stderr };
    // ...and the unprivileged way: through ringcapd.
    expect_refusal(
        &fin,
        3,
        &["CAP_NET_RAW", "ringcapd", "--daemon"],
        "unprivileged user",
    );
}

#[test]
fn bad_filter_expressions() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("badfilter");
    let empty = dir.join("empty.pcap");
    ringcap_testkit::netns::write_pcap(&empty, &[]).unwrap();
    for expr in [
        "udp port banana",
        "udp and and",
        "host 1.2.3.4.5",
        "port 99999",
        "ip[",
        // Mentions vlan: compiled on a live libpcap handle of the interface.
        "vlan and bogus",
    ] {
        // libpcap's own message, as tcpdump prints it.
        let mut cmd = Command::new("tcpdump");
        cmd.arg("-r").arg(&empty).arg(expr);
        let (_, _, td_err) = run_limited(cmd, LIMIT);
        let libpcap_msg = td_err
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("tcpdump: "))
            .unwrap_or_else(|| panic!("tcpdump accepted {expr:?}?: {td_err}"))
            .trim()
            .to_string();
        let fin = capture_in_ns(&tb, &["-i", &tb.capture_if, "-B", "8M", expr]);
        expect_refusal(&fin, 2, &[expr, &libpcap_msg], &format!("filter {expr:?}"));
        assert!(!fin.stderr.contains("libpcap error"), "{}", fin.stderr);
        // Split into several arguments, as a shell user would type it unquoted.
        let mut args = vec!["-i", tb.capture_if.as_str(), "-B", "8M"];
        args.extend(expr.split(' '));
        let fin = capture_in_ns(&tb, &args);
        expect_refusal(
            &fin,
            2,
            &[expr, &libpcap_msg],
            &format!("filter {expr:?} unquoted"),
        );
    }
}

#[test]
fn bad_option_values() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let cases: &[(&[&str], &str)] = &[
        (&["-s", "abc"], "abc"),
        (&["-s", "300000"], "300000"),
        (&["-s", "-5"], "-5"),
        (&["--threads", "0"], "--threads"),
        (&["--threads", "65"], "--threads"),
        (&["--sample", "2:3"], "2:3"),
        (&["--sample", "1:0"], "1:0"),
        (&["--sample", "1:x"], "1:x"),
        (&["--sample-flows", "3:4"], "3:4"),
        (
            &["--sample", "1:4", "--sample-mode", "sometimes"],
            "sometimes",
        ),
        (&["--sample", "1:4", "--sample-flows", "1:4"], "--sample"),
        (&["-B", "0"], "-B"),
        (&["-B", "lots"], "lots"),
        (&["--format", "xyz"], "xyz"),
        (&["--tstamp", "atomic"], "atomic"),
        (&["--tstamp-precision", "pico"], "pico"),
        (&["-c", "0"], "-c"),
        (&["-c", "-1"], "-1"),
        (&["--duration", "0"], "--duration"),
        (&["--duration", "-3"], "-3"),
        (&["--duration", "soon"], "soon"),
        (&["-C", "-1"], "-C -1"),
        (&["-G", "-3"], "-3"),
        (&["-W", "-1"], "-1"),
        (&["--rotate-packets", "-1"], "-1"),
        (&["--flush-interval", "-1"], "--flush-interval"),
        (&["--max-total", "-1G"], "-1G"),
        (&["--sample", "-1:4"], "-1:4"),
        (&["-s", "headers", "--headers-max", "-1"], "--headers-max"),
        (&["--stats-interval", "0"], "--stats-interval"),
        (&["-s", "headers", "--headers-max", "5"], "--headers-max"),
        (&["--write-mode", "telepathic"], "telepathic"),
        (&["--no-such-option"], "--no-such-option"),
        (&["-Z", "rc-no-such-user"], "rc-no-such-user"),
    ];
    let mut failures = Vec::new();
    for (extra, needle) in cases {
        let mut args = vec!["-i", tb.capture_if.as_str()];
        if !extra.contains(&"-B") {
            args.extend(["-B", "8M"]);
        }
        args.extend_from_slice(extra);
        let fin = capture_in_ns(&tb, &args);
        assert_no_panic(&fin.stderr, &format!("{extra:?}"));
        // A negative number is a bad value, not an option: clap's advice
        // to write `-- -1` would make it a filter.
        if fin.code() != Some(2) || !fin.stderr.contains(needle) || fin.stderr.contains("'-- ") {
            failures.push(format!(
                "{extra:?}: exit {:?} (want 2), message should contain {needle:?}: {}",
                fin.code(),
                fin.stderr.trim()
            ));
        }
    }
    // No interface and no file.
    let fin = capture_in_ns(&tb, &["-B", "8M"]);
    if fin.code() != Some(2) || !fin.stderr.contains("-i") {
        failures.push(format!(
            "no -i/-r: exit {:?}: {}",
            fin.code(),
            fin.stderr.trim()
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn tstamp_adapter_on_veth_is_refused() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let fin = capture_in_ns(
        &tb,
        &["-i", &tb.capture_if, "-B", "8M", "--tstamp", "adapter"],
    );
    expect_refusal(
        &fin,
        3,
        &["cannot give hardware timestamps", &tb.capture_if],
        "--tstamp adapter on veth",
    );
}

#[test]
fn existing_output_needs_overwrite() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("exists");
    let out = dir.file("out.pcap");
    std::fs::write(&out, b"precious data").unwrap();
    let fin = capture_in_ns(&tb, &["-i", &tb.capture_if, "-B", "8M", "-w", &out]);
    expect_refusal(&fin, 2, &["already exists", &out], "existing output");
    assert_eq!(std::fs::read(&out).unwrap(), b"precious data", "file kept");

    // With --overwrite the capture runs and replaces it.
    let sent = frames::mixed_sequence(&tb.endpoints(), 40);
    let run = start(&tb, &["-w", &out, "--overwrite"]);
    tb.send_from_peer(&sent, 0).expect("send");
    let fin = run.stop();
    fin.assert_ok("--overwrite");
    assert_eq!(read(&out).len(), sent.len());
}

#[test]
fn output_through_symlink_is_refused() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("symlink");
    let target = dir.file("target.txt");
    std::fs::write(&target, b"not yours").unwrap();
    let link = dir.file("link.pcap");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let dangling_target = dir.file("nothing-here");
    let dangling = dir.file("dangling.pcap");
    std::os::unix::fs::symlink(&dangling_target, &dangling).unwrap();
    for (path, what) in [
        (&link, "symlink to a file"),
        (&dangling, "dangling symlink"),
    ] {
        for extra in [&[][..], &["--overwrite"][..]] {
            let mut args = vec!["-i", tb.capture_if.as_str(), "-B", "8M", "-w", path];
            args.extend_from_slice(extra);
            let fin = capture_in_ns(&tb, &args);
            let what = format!("{what} {extra:?}");
            assert_no_panic(&fin.stderr, &what);
            assert!(
                matches!(fin.code(), Some(1) | Some(2)),
                "{what}: exit {:?}; stderr:\n{}",
                fin.code(),
                fin.stderr
            );
            assert!(
                fin.stderr.contains("symbolic link"),
                "{what}: message should say symbolic link: {}",
                fin.stderr
            );
        }
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"not yours", "target kept");
    assert!(
        !std::path::Path::new(&dangling_target).exists(),
        "the dangling link's target was created"
    );
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
}

// ---------------------------------------------------------------------------
// Unreadable -r files (no namespace needed).

#[test]
fn unreadable_read_files() {
    let dir = TempDir::new("unreadable");
    let out = dir.file("out.pcap");
    let missing = dir.file("missing.pcap");
    let fin = ringcap(&["capture", "-r", &missing, "-w", &out]);
    expect_refusal(&fin, 2, &["missing.pcap"], "-r missing file");
    let fin = ringcap(&["capture", "-r", &dir.file(""), "-w", &out]);
    expect_refusal(&fin, 2, &[], "-r a directory");
    // A good file first, then a missing one: refused before writing anything.
    let good = dir.join("good.pcap");
    ringcap_testkit::netns::write_pcap(&good, &[vec![0u8; 60]]).unwrap();
    let fin = ringcap(&[
        "capture",
        "-r",
        good.to_str().unwrap(),
        "-r",
        &missing,
        "-w",
        &out,
    ]);
    expect_refusal(&fin, 2, &["missing.pcap"], "-r good -r missing");
    assert!(!std::path::Path::new(&out).exists(), "no output written");
    // -r and -i together.
    let fin = ringcap(&["capture", "-r", good.to_str().unwrap(), "-i", "lo"]);
    expect_refusal(&fin, 2, &[], "-r with -i");

    // No read permission: a root-owned 0600 file read by nobody.
    let secret = dir.join("secret.pcap");
    ringcap_testkit::netns::write_pcap(&secret, &[vec![0u8; 60]]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let root = ringcap_testkit::netns::is_root();
    let fin = if root {
        if !have("setpriv") {
            ringcap_testkit::skip("permission case: setpriv not found");
            return;
        }
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            bin(),
            "capture",
            "-r",
            secret.to_str().unwrap(),
        ]);
        let (status, _, stderr) = run_limited(cmd, LIMIT);
        Finished { status, stderr }
    } else {
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
        ringcap(&["capture", "-r", secret.to_str().unwrap()])
    };
    expect_refusal(
        &fin,
        2,
        &["secret.pcap", "ermission denied"],
        "-r without read permission",
    );
}

/// `-w DIR/` that no file can be made in fails before capturing, as
/// `-w FILE` there does: it used to say "capturing on" and fail (or say
/// nothing, with no packets) at the first packet. A regular file given as
/// `DIR/` is "not a directory", a usage error.
#[test]
fn an_output_directory_that_takes_no_files() {
    skip_unless_netns!();
    let tb = Testbed::new().expect("testbed");
    let fin = capture_in_ns(&tb, &["-i", &tb.capture_if, "-B", "8M", "-w", "/proc/sys/"]);
    expect_refusal(
        &fin,
        1,
        &["cannot make files in /proc/sys/"],
        "-w /proc/sys/",
    );
    let dir = TempDir::new("notadir");
    let file = dir.file("f");
    std::fs::write(&file, b"x").unwrap();
    let as_dir = format!("{file}/");
    let fin = capture_in_ns(&tb, &["-i", &tb.capture_if, "-B", "8M", "-w", &as_dir]);
    expect_refusal(&fin, 2, &["is not a directory"], "-w FILE/");
}
