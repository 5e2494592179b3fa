//! Cross-checks against Wireshark's and tcpdump's readers and writers: files
//! ringcap writes must read correctly there, and files they write must read
//! correctly here. Each test is skipped (`SKIP: ...`; a failure with
//! `RINGCAP_REQUIRE_PRIVILEGED_TESTS=1`) when its tool is absent.

use std::path::Path;
use std::process::Command;

use ringcap_format::pcap::{file_header, write_record_header};
use ringcap_format::pcapng::{
    epb_len, interface_description, interface_statistics, section_header, write_epb_header,
    write_epb_trailer, InterfaceDescription, InterfaceStatistics,
};
use ringcap_format::{FileFormat, Reader, TsResolution};
use ringcap_testkit::netns::have_program;
use ringcap_testkit::{skip, TempFile};

/// A fresh path ending in `.ext`, removed when dropped.
fn temp_file(ext: &str) -> TempFile {
    TempFile::new("tools", ext).expect("temp file")
}

/// True when `tool` is installed; otherwise false after [`skip`].
fn have(tool: &str) -> bool {
    let found = have_program(tool);
    if !found {
        skip(format!("{tool} is not installed"));
    }
    found
}

/// Runs a tool, asserts success, returns stdout.
fn run(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{tool} {args:?} failed: {stderr}");
    for bad in [
        "damaged",
        "corrupt",
        "isn't",
        "appears to have been cut short",
    ] {
        assert!(
            !stderr.contains(bad),
            "{tool} {args:?} complained: {stderr}"
        );
    }
    String::from_utf8(out.stdout).unwrap()
}

const TS: [u64; 3] = [
    1_700_000_000_123_456_789,
    1_700_000_001_000_000_001,
    1_700_000_002_999_999_999,
];
const LENS: [usize; 3] = [60, 61, 1514];

/// Ethernet frames of the given lengths: broadcast destination, IPv4 ethertype
/// is avoided (0x88b5, local experimental) so dissectors stay quiet.
fn frame(len: usize, i: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, i as u8]);
    f[12] = 0x88;
    f[13] = 0xb5;
    f
}

fn write_pcapng(path: &Path) {
    let mut f = section_header("Linux", "ringcap test", Some("ringcap -i eth0"));
    f.extend(interface_description(&InterfaceDescription {
        linktype: 1,
        snaplen: 262144,
        name: "eth0",
        filter: Some("ether proto 0x88b5"),
        description: None,
    }));
    for (i, (&ts, &len)) in TS.iter().zip(&LENS).enumerate() {
        // The last packet is cut to 100 bytes of its 1514.
        let data = frame(len.min(100), i);
        let at = f.len();
        f.resize(at + epb_len(data.len()), 0);
        write_epb_header(&mut f[at..], 0, ts, data.len() as u32, len as u32);
        f[at + 28..at + 28 + data.len()].copy_from_slice(&data);
        write_epb_trailer(&mut f[at..], data.len() as u32);
    }
    f.extend(interface_statistics(&InterfaceStatistics {
        interface_id: 0,
        ts_ns: TS[2] + 1,
        starttime_ns: Some(TS[0] - 1),
        endtime_ns: Some(TS[2] + 1),
        ifrecv: Some(3),
        ifdrop: Some(0),
        filteraccept: Some(3),
        osdrop: Some(0),
        usrdeliv: Some(3),
        comment: Some("capture ended".into()),
    }));
    std::fs::write(path, f).unwrap();
}

fn write_pcap(path: &Path, res: TsResolution) {
    let mut f = file_header(1, 262144, res).to_vec();
    for (i, (&ts, &len)) in TS.iter().zip(&LENS).enumerate() {
        let data = frame(len, i);
        let mut h = [0u8; 16];
        write_record_header(&mut h, ts, data.len() as u32, len as u32, res);
        f.extend_from_slice(&h);
        f.extend_from_slice(&data);
    }
    std::fs::write(path, f).unwrap();
}

#[test]
fn tshark_reads_our_pcapng_with_nanoseconds() {
    if !have("tshark") {
        return;
    }
    let t = temp_file("pcapng");
    write_pcapng(t.path());
    let p = t.path().to_str().unwrap();
    let out = run(
        "tshark",
        &[
            "-r",
            p,
            "-T",
            "fields",
            "-e",
            "frame.len",
            "-e",
            "frame.cap_len",
            "-e",
            "frame.time_epoch",
        ],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        vec![
            "60\t60\t1700000000.123456789",
            "61\t61\t1700000001.000000001",
            "1514\t100\t1700000002.999999999",
        ],
        "tshark output: {out}"
    );
}

#[test]
fn capinfos_reads_our_files() {
    if !have("capinfos") {
        return;
    }
    let t = temp_file("pcapng");
    write_pcapng(t.path());
    let out = run("capinfos", &[t.path().to_str().unwrap()]);
    assert!(out.contains("pcapng"), "{out}");
    assert!(out.contains("nanoseconds"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("Number of packets") && l.trim_end().ends_with(" 3")),
        "{out}"
    );
    for res in [TsResolution::Micro, TsResolution::Nano] {
        let t = temp_file("pcap");
        write_pcap(t.path(), res);
        let out = run("capinfos", &[t.path().to_str().unwrap()]);
        let want = match res {
            TsResolution::Micro => "microseconds",
            TsResolution::Nano => "nanoseconds",
        };
        assert!(out.contains(want), "{out}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("Number of packets") && l.trim_end().ends_with(" 3")),
            "{out}"
        );
    }
}

#[test]
fn tcpdump_reads_our_files() {
    if !have("tcpdump") {
        return;
    }
    let t = temp_file("pcapng");
    write_pcapng(t.path());
    let t2 = temp_file("pcap");
    write_pcap(t2.path(), TsResolution::Nano);
    for path in [t.path(), t2.path()] {
        let out = run(
            "tcpdump",
            &[
                "-r",
                path.to_str().unwrap(),
                "-nn",
                "-tt",
                "--time-stamp-precision=nano",
            ],
        );
        // Unknown ethertypes come with an indented hex dump; keep the summary lines.
        let stamps: Vec<&str> = out
            .lines()
            .filter(|l| !l.starts_with(char::is_whitespace))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(
            stamps,
            vec![
                "1700000000.123456789",
                "1700000001.000000001",
                "1700000002.999999999"
            ],
            "{out}"
        );
    }
}

/// Converts our file with editcap (Wireshark's writer) and reads the result.
#[test]
fn we_read_what_editcap_writes() {
    if !have("editcap") {
        return;
    }
    let src = temp_file("pcap");
    write_pcap(src.path(), TsResolution::Nano);
    for (fmt, resolution) in [
        ("pcapng", None),
        ("nsecpcap", Some(TsResolution::Nano)),
        ("pcap", Some(TsResolution::Micro)),
    ] {
        let dst = temp_file(fmt);
        run(
            "editcap",
            &[
                "-F",
                fmt,
                src.path().to_str().unwrap(),
                dst.path().to_str().unwrap(),
            ],
        );
        let file = std::fs::File::open(dst.path()).unwrap();
        let mut r = Reader::new(file).unwrap();
        match (r.format(), resolution) {
            (FileFormat::Pcapng, None) => {}
            (
                FileFormat::Pcap {
                    resolution: got, ..
                },
                Some(want),
            ) => assert_eq!(got, want),
            (other, _) => panic!("editcap -F {fmt} gave {other:?}"),
        }
        let mut n = 0;
        while let Some(p) = r.next_packet().unwrap() {
            let want_ts = match resolution {
                Some(TsResolution::Micro) => TS[n] / 1000 * 1000,
                _ => TS[n],
            };
            assert_eq!(p.ts_ns, want_ts, "{fmt} packet {n}");
            assert_eq!(p.wire_len as usize, LENS[n]);
            assert_eq!(p.data, &frame(LENS[n], n)[..]);
            n += 1;
        }
        assert_eq!(n, 3, "{fmt}");
        assert_eq!(r.interfaces()[0].linktype, 1);
    }
}
