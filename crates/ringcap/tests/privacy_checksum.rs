//! Checksums must not give masked addresses away. Locally sent UDP and TCP
//! over veth (transmit checksum offload on, as it is by default) carry a
//! *partial* checksum when AF_PACKET sees them: only the pseudo-header sum
//! (TP_STATUS_CSUMNOTREADY). Updated incrementally after the addresses are
//! zeroed, it became `2*A + L`, from which a client computes the sum `A` of
//! the hidden addresses. Here two source addresses send the same datagrams
//! and segments; with the addresses masked ringcap's output must be byte for
//! byte the same for both, and every checksum in it right for the bytes
//! delivered or 0.

mod common;

use common::*;
use ringcap_testkit::capture::start_tcpdump;
use ringcap_testkit::netns::have_program;
use ringcap_testkit::{skip, skip_unless_netns, Testbed};
use std::time::Duration;

fn sum(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The IPv4 transport checksum (TCP or UDP) of an Ethernet/IPv4 frame is
/// right for its bytes.
fn l4_ok(f: &[u8]) -> bool {
    let hl = usize::from(f[14] & 0xf) * 4;
    let tl = usize::from(u16::from_be_bytes([f[16], f[17]]));
    let seg = &f[14 + hl..14 + tl];
    let ps = sum(&f[26..34]) + u32::from(f[23]) + seg.len() as u32;
    fold(ps + sum(seg)) == 0xffff
}

/// Outgoing IPv4 TCP/UDP frames from `src` to port 9.
fn from(pkts: &[Vec<u8>], src: [u8; 4]) -> Vec<Vec<u8>> {
    pkts.iter()
        .filter(|f| f.len() > 38 && f[12..14] == [8, 0] && f[26..30] == src)
        .filter(|f| matches!(f[23], 6 | 17))
        .cloned()
        .collect()
}

#[test]
fn partial_checksums_do_not_reveal_masked_addresses() {
    skip_unless_netns!();
    if !have_program("tcpdump") || !have_program("python3") {
        return skip("tcpdump and python3 are needed (scripts/setup installs them)");
    }
    let tb = Testbed::new().expect("testbed");
    let dir = TempDir::new("privacy-csum");
    let o = tb.capture_ip.octets();
    let (a, b) = ([o[0], o[1], o[2], 1], [o[0], o[1], o[2], 77]);
    let second = format!("{}.{}.{}.{}/24", b[0], b[1], b[2], b[3]);
    let added = std::process::Command::new("ip")
        .args([
            "-n",
            &tb.capture_ns,
            "addr",
            "add",
            &second,
            "dev",
            &tb.capture_if,
        ])
        .status()
        .unwrap();
    assert!(added.success(), "ip addr add {second}");

    let orig = dir.join("orig.pcap");
    let out = dir.file("masked.pcap");
    let td = start_tcpdump(&tb, &orig, None, "").expect("tcpdump");
    // The IP ID, TCP sequence numbers and timestamps differ per socket
    // anyway: hidden too, so only the addresses are left to compare.
    let run = start(
        &tb,
        &["-w", &out, "--mask", "ip.addr,ip.id,tcp.seq,tcp.options"],
    );
    // From each source address: 5 UDP datagrams and 3 TCP SYNs (to a port
    // nobody listens on: answered by a reset), same ports, same payload.
    let dotted = |x: [u8; 4]| format!("{}.{}.{}.{}", x[0], x[1], x[2], x[3]);
    let (sa, sb) = (dotted(a), dotted(b));
    let script = format!(
        "import socket,time\n\
         for src in ('{sa}', '{sb}'):\n\
         \x20   u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         \x20   u.bind((src, 40000))\n\
         \x20   for i in range(5):\n\
         \x20       u.sendto(b'hidden-means-hidden-%d' % i, ('{peer}', 9)); time.sleep(0.01)\n\
         \x20   u.close()\n\
         \x20   for i in range(3):\n\
         \x20       t = socket.socket(); t.bind((src, 41000 + i)); t.settimeout(0.5)\n\
         \x20       try: t.connect(('{peer}', 9))\n\
         \x20       except OSError: pass\n\
         \x20       t.close(); time.sleep(0.01)\n",
        peer = tb.peer_ip,
    );
    let sent = tb
        .in_capture_ns("timeout")
        .args(["20", "python3", "-c", &script])
        .status()
        .unwrap();
    assert!(sent.success(), "sender failed");
    std::thread::sleep(Duration::from_millis(300));
    let fin = run.stop();
    fin.assert_ok("masked capture");
    td.finish(Duration::from_secs(2)).expect("tcpdump");

    let orig: Vec<Vec<u8>> = read(&orig).into_iter().map(|p| p.data).collect();
    let masked: Vec<Vec<u8>> = read(&out).into_iter().map(|p| p.data).collect();
    let (oa, ob) = (from(&orig, a), from(&orig, b));
    assert_eq!((oa.len(), ob.len()), (8, 8), "tcpdump saw the sent packets");
    let partial = oa.iter().chain(&ob).filter(|f| !l4_ok(f)).count();
    println!("{partial} of 16 sent packets carried a partial (not yet right) checksum");
    // The masked capture: addresses 0, so split by the source port and
    // order: the first 8 outgoing ones came from `a`, the next 8 from `b`.
    let out: Vec<&Vec<u8>> = masked
        .iter()
        .filter(|f| f.len() > 38 && f[12..14] == [8, 0] && matches!(f[23], 6 | 17))
        .filter(|f| f[36..38] == [0, 9])
        .collect();
    assert_eq!(out.len(), 16, "ringcap kept the sent packets");
    for (x, y) in out[..8].iter().zip(&out[8..]) {
        assert_eq!(x, y, "output depends on the masked source address");
        assert_eq!(x[26..34], [0; 8]);
        let field = if x[23] == 6 {
            14 + 20 + 16
        } else {
            14 + 20 + 6
        };
        assert!(
            l4_ok(x) || x[field..field + 2] == [0, 0],
            "checksum neither right nor 0: {x:02x?}"
        );
    }
}
