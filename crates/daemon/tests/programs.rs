//! Issue 24, item 4, against a real ringcapd: no client's filter text is
//! compiled in the privileged process. Clients compile their filters
//! themselves and send the program; the daemon checks it (bounds, libpcap's
//! validation, forward jumps only, no ancillary loads) and refuses text that
//! comes without one. A raw-protocol client run as `nobody` (this test
//! binary again, under setpriv) sends each hostile shape; the daemon's CPU
//! time over the whole exchange, 16 KiB labels included, stays small.
//!
//! Before the fix, the daemon compiled every client text twice with
//! libpcap's optimizer (policy and hub), before any size check of the
//! program: four connections burned 39 s of CPU in 21 s.

mod common;

use common::*;
use ringcap_proto::{
    decode_response, encode_request, transport, FilterProgram, OutputFormat, Request, Response,
    SnapRequest, MAX_DATAGRAM,
};
use ringcap_testkit::Testbed;
use std::path::Path;
use std::time::Duration;

const CHILD: &str = "RINGCAP_PROGRAMS_CHILD_SOCKET";

fn open(filter: &str, program: Option<FilterProgram>) -> Request {
    Request::Open {
        interfaces: vec![std::env::var("RINGCAP_PROGRAMS_CHILD_IF").unwrap()],
        filter: filter.into(),
        program,
        snaplen: SnapRequest::Bytes(96),
        sample: None,
        format: OutputFormat::Pcap,
        dump: None,
        duration_s: None,
        count: None,
        compress: false,
        inject_only: false,
        flows: None,
    }
}

/// One request on a fresh connection; the answer.
fn ask(socket: &Path, req: &Request) -> Response {
    let fd = transport::connect(socket).expect("connect");
    transport::send(&fd, &encode_request(req), &[]).expect("send");
    let mut buf = Box::new([0u8; MAX_DATAGRAM]);
    let (len, _fds) = transport::recv(&fd, &mut buf)
        .expect("recv")
        .expect("an answer");
    decode_response(&buf[..len]).expect("decodes")
}

fn refused(r: &Response, needle: &str, what: &str) {
    match r {
        Response::Refused { rule, reason, .. } => assert!(
            rule == "filter" && reason.contains(needle),
            "{what}: refused by {rule}: {reason}"
        ),
        Response::Error { message } => assert!(message.contains(needle), "{what}: {message}"),
        other => panic!("{what}: {other:?}"),
    }
}

/// The raw client: runs only when the parent test starts it as `nobody`.
#[test]
fn hostile_program_child() {
    let Ok(socket) = std::env::var(CHILD) else {
        return;
    };
    let socket = Path::new(&socket);
    let accept_all = FilterProgram::encode(&[(0x06, 0, 0, 65535)], false);
    // Text without a program: the daemon does not compile it.
    refused(
        &ask(socket, &open("udp", None)),
        "compiled by the client",
        "text only",
    );
    // A backward jump (ja -1) would loop.
    let back = FilterProgram::encode(&[(0x06, 0, 0, 0), (0x05, 0, 0, u32::MAX)], false);
    refused(&ask(socket, &open("x", Some(back))), "", "backward jump");
    // An ancillary load (the skb's random number).
    let anc = FilterProgram::encode(&[(0x20, 0, 0, 0xffff_f038), (0x06, 0, 0, 65535)], false);
    refused(
        &ask(socket, &open("x", Some(anc))),
        "ancillary",
        "ancillary load",
    );
    // A jump past the end.
    let past = FilterProgram::encode(&[(0x15, 5, 0, 1), (0x06, 0, 0, 65535)], false);
    refused(
        &ask(socket, &open("x", Some(past))),
        "bpf_validate",
        "jump past the end",
    );
    // Too many instructions: refused by the codec's bound.
    let long: Vec<_> = (0..2049).map(|_| (0x06u16, 0u8, 0u8, 65535u32)).collect();
    refused(
        &ask(
            socket,
            &open("x", Some(FilterProgram::encode(&long, false))),
        ),
        "program",
        "2049 instructions",
    );
    // Text that would make libpcap's optimizer work hard, as a label on a
    // valid program: accepted, never compiled.
    let heavy = std::iter::repeat_n("(host 198.18.0.1 or port 7)", 500)
        .collect::<Vec<_>>()
        .join(" and ");
    assert!(heavy.len() < 16 * 1024);
    for _ in 0..10 {
        match ask(socket, &open(&heavy, Some(accept_all.clone()))) {
            Response::Accepted { .. } => {}
            other => panic!("a valid program with a long label: {other:?}"),
        }
    }
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // utime and stime: fields 14 and 15 of stat, 12 and 13 after the comm.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn client_programs_are_checked_and_client_text_is_never_compiled() {
    if !can_run() {
        return;
    }
    let tb = Testbed::new().expect("testbed");
    // Small rings: what is measured is the admission, not faulting rings in.
    let d = Daemon::for_nobody(&tb, "capture_filter = \"udp\"\nring_size = \"1M\"\n");
    let pid = d.child.id();
    let before = cpu_ticks(pid);
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = as_user(&tb, NOBODY, &exe);
    cmd.args(["--exact", "hostile_program_child", "--nocapture"])
        .env(CHILD, &d.socket)
        .env("RINGCAP_PROGRAMS_CHILD_IF", &tb.capture_if);
    let (status, out, err) = run_limited_out(&mut cmd, Duration::from_secs(60));
    assert!(
        status.success() && out.contains("1 passed"),
        "the raw client as nobody: {status}\n{out}\n{err}"
    );
    let used = cpu_ticks(pid) - before;
    // 100 ticks a second: a second of CPU for 15 opens would mean compiles.
    assert!(
        used < 100,
        "ringcapd used {used} ticks of CPU for the hostile programs"
    );
    assert_no_panic(&d.stop(), "ringcapd");
}
