//! Packets of the file being written are queryable (issue 27: capture to
//! queryable in seconds): a directory query also reads the hidden partial
//! file of a capture, up to its last whole record. Whatever the tail looks
//! like — a record cut in the middle, the zeros of an O_DIRECT block not yet
//! filled, a pcapng block cut short — the answer is exactly the whole
//! records before it, as `tcpdump -r` of the finished file would give them.

mod mixed;

use mixed::{frame, write_file, Kind, Rec, Rng};
use ringcap_index::{plan, run, OutFormat, Output, Query, Window};
use ringcap_testkit::TempDir;
use std::path::PathBuf;

fn recs(n: usize, t0: u64) -> Vec<Rec> {
    let mut rng = Rng(7);
    (0..n)
        .map(|i| {
            let f = frame(&mut rng, i as u32, 50, 600, true);
            (t0 + i as u64 * 1000, f.len() as u32, f)
        })
        .collect()
}

fn read(bytes: &[u8]) -> Vec<Rec> {
    let mut rd = ringcap_format::Reader::new(bytes).unwrap();
    let mut v = Vec::new();
    while let Some(p) = rd.next_packet().unwrap() {
        v.push((p.ts_ns, p.wire_len, p.data.to_vec()));
    }
    v
}

/// A query of everything over `dir`.
fn query_dir(dir: &std::path::Path) -> Vec<Rec> {
    let files = ringcap_index::dir::capture_files(&[dir.to_path_buf()], &mut |f| {
        panic!("{} skipped", f.display())
    })
    .unwrap();
    let tmp = TempDir::new("growing-out");
    let out_path = tmp.join("out.pcap");
    {
        let w = std::fs::File::create(&out_path).unwrap();
        let mut out = Output::new(Box::new(w), OutFormat::Pcap);
        let q = Query {
            filter: "",
            plan: plan(""),
            window: Window::default(),
            use_index: true,
            stop: None,
            readers: 1,
        };
        run(&q, &files, &mut out, &mut |_| {}).unwrap();
    }
    read(&std::fs::read(&out_path).unwrap())
}

#[test]
fn the_partial_file_is_read_to_its_last_whole_record() {
    let all = recs(300, 1_764_000_000_000_000_000);
    for kind in [Kind::PcapNano, Kind::Pcapng] {
        for tail in ["cut record", "zero block", "cut header", "none"] {
            let d = TempDir::new("growing");
            // A finished, published file, then the one being written.
            write_file(&d.join("a.pcap"), kind, &all[..100]);
            let partial: PathBuf = d.join(".b.pcap.ringcap-partial");
            write_file(&partial, kind, &all[100..]);
            let whole = std::fs::read(&partial).unwrap();
            // Where the last 10 records start: cut inside the last one.
            let mut bytes = whole.clone();
            match tail {
                "cut record" => bytes.truncate(whole.len() - 7),
                "cut header" => {
                    // The next record's header begun, no more.
                    let mut more = whole.clone();
                    more.extend_from_slice(&whole[whole.len() - 60..whole.len() - 50]);
                    bytes = more;
                }
                "zero block" => bytes.extend(std::iter::repeat_n(0u8, 4096 - bytes.len() % 4096)),
                _ => {}
            }
            std::fs::write(&partial, &bytes).unwrap();
            let want_n = if tail == "cut record" { 299 } else { 300 };
            let got = query_dir(d.path());
            assert_eq!(got.len(), want_n, "{kind:?}, {tail}");
            assert!(
                got == all[..want_n],
                "{kind:?}, {tail}: not the records written"
            );
        }
    }
}

#[test]
fn an_empty_or_header_only_partial_file_is_passed_over() {
    let all = recs(20, 1_764_000_000_000_000_000);
    let d = TempDir::new("growing-empty");
    write_file(&d.join("a.pcap"), Kind::PcapNano, &all);
    std::fs::write(d.join(".b.pcap.ringcap-partial"), b"").unwrap();
    std::fs::write(
        d.join(".c.pcap.ringcap-partial"),
        ringcap_format::pcap::file_header(1, 65535, ringcap_format::TsResolution::Nano),
    )
    .unwrap();
    assert!(query_dir(d.path()) == all);
}
