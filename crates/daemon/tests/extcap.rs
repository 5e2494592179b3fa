//! Wireshark's extcap over ringcapd: tshark, run as the unprivileged user
//! `nobody`, lists the "ringcapd: IF" interface its grant allows and
//! captures N packets through it (`tshark -i ringcapd-IF -c N -w
//! out.pcapng -f FILTER`): exactly the first N packets the grant and the
//! filter let through, capped at the grant's snap length, nothing the
//! grant's framework filter hides. The extcap program is found through
//! WIRESHARK_EXTCAP_DIR (a wrapper like the one scripts/setup installs).

mod common;

use common::*;
use ringcap_testkit::capture::{wait_for_stderr_match, ChildGuard};
use ringcap_testkit::netns::have_program;
use ringcap_testkit::{frames, skip, Testbed};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const FRAMEWORK: &str = "not port 20001";
const CAP: u32 = 128;

#[test]
fn tshark_as_nobody_captures_n_packets_the_grant_allows_through_extcap() {
    if !can_run() {
        return;
    }
    if !have_program("tshark") {
        skip("tshark is not installed (scripts/setup installs it)");
        return;
    }
    let tb = Testbed::new().expect("testbed");
    let d = Daemon::for_nobody(
        &tb,
        &format!("capture_filter = \"{FRAMEWORK}\"\nmax_snaplen = {CAP}\n"),
    );
    let dir = open_dir("extcap");
    let extdir = dir.join("extcap");
    std::fs::create_dir(&extdir).expect("mkdir");
    let wrapper = extdir.join("ringcap-extcap");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec {} extcap \"$@\"\n",
            ringcap_bin().display()
        ),
    )
    .expect("write the wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&extdir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let iface = format!("ringcapd-{}", tb.capture_if);
    let tshark = |args: &[&str]| {
        let mut c = as_user(&tb, NOBODY, Path::new("/usr/bin/tshark"));
        c.args(args)
            .env("WIRESHARK_EXTCAP_DIR", &extdir)
            .env("RINGCAP_DAEMON", &d.socket)
            .env("HOME", dir.path())
            .current_dir(dir.path());
        c
    };

    // The interface list: the grant's interface, and not the loopback.
    let (st, out, err) = run_limited_out(&mut tshark(&["-D"]), Duration::from_secs(60));
    assert!(st.success(), "tshark -D: {st}: {err}");
    assert!(
        out.contains(&format!("{iface} (ringcapd: {})", tb.capture_if)),
        "tshark -D as nobody:\n{out}"
    );
    assert!(!out.contains("ringcapd-lo"), "lo is not granted:\n{out}");

    // A capture of N packets.
    const N: usize = 300;
    let filter = "udp or icmp";
    let pcapng = dir.join("out.pcapng");
    let mut cmd = tshark(&["-i", &iface, "-c", &N.to_string(), "-f", filter, "-w"]);
    cmd.arg(&pcapng)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd).expect("spawn tshark");
    let (_, log) = wait_for_stderr_match(
        &mut child,
        |l| l.contains("Capturing on"),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("tshark did not start capturing: {e}"));
    // The capture's session is open once the daemon audits its start (with
    // its filter: tshark also runs --extcap-interfaces, whose probe
    // sessions have another).
    let start = std::time::Instant::now();
    while !d.log.text().contains(&format!("filter={filter:?}")) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no capture session: {}",
            d.log.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let sent = frames::mixed_sequence(&tb.endpoints(), 23 * 4 * 25);
    tb.send_from_peer(&sent, 20_000).expect("send");
    let status = child
        .wait_timeout(Duration::from_secs(30))
        .expect("wait tshark")
        .unwrap_or_else(|| panic!("tshark did not stop after {N} packets: {}", log.text()));
    let text = log.wait_eof(Duration::from_secs(5));
    assert!(status.success(), "tshark: {status}: {text}");

    let got = read(&pcapng);
    let want = Oracle::new(FRAMEWORK, filter).expect(&sent, CAP as usize);
    assert!(want.len() > N, "{} packets expected in all", want.len());
    assert_packets(&got, &want[..N], "tshark through extcap");
    d.stop();
}
