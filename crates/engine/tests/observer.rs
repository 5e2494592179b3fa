//! The observer slot (issue 26): a packet observer that counts every kept
//! packet, and a file observer (`SinkSpec.files`) that must see every file
//! the writer publishes and every file it removes, through rotation and
//! retention — for an offline capture through the copy path, for ring
//! blocks written in place as pcapng on a live interface (in its own
//! network namespace), and for the writer ringcapd's dumps use
//! ([`FileSink`]). The files on disk at the end must be exactly those
//! published and not removed, and the packets in them exactly the kept
//! ones.

use ringcap_engine::stages::{Observer, ObserverContext, ObserverFactory};
use ringcap_engine::{Board, Sampling};
use ringcap_engine::{
    Capture, CaptureSpec, FileSink, LiveSpec, OutputPlan, Record, RecordFormat, Retention,
    Rotation, SinkInterface, SinkSpec, Snap, SourceSpec, TimestampSource, ZeroCopy,
};
use ringcap_format::TsResolution;
use ringcap_sink::{FileHook, FileObserver};
use ringcap_testkit::capture::read_capture;
use ringcap_testkit::frames::{self, Endpoints};
use ringcap_testkit::netns::write_pcap;
use ringcap_testkit::{skip_unless_netns, TempDir, Testbed};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CHILD_ENV: &str = "RINGCAP_OBSERVER_TEST_CHILD";

/// Counts the packets it is shown.
struct Counter(Arc<AtomicU64>);

impl Observer for Counter {
    fn packet(&mut self, _: &[u8], _: Option<[u8; 4]>, _: u32, _: u64, _: u32) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Records what happens to files, in order.
#[derive(Default)]
struct Files {
    published: Mutex<Vec<PathBuf>>,
    removed: Mutex<Vec<PathBuf>>,
}

impl FileObserver for Files {
    fn published(&self, path: &Path) {
        self.published.lock().unwrap().push(path.to_path_buf());
    }
    fn removed(&self, path: &Path) {
        self.removed.lock().unwrap().push(path.to_path_buf());
    }
}

impl Files {
    /// Checks the events against `dir`: every removed file was published
    /// first and is gone, every other published file is there, and nothing
    /// else is. Returns (published, removed).
    fn check(&self, dir: &Path) -> (usize, usize) {
        let published = self.published.lock().unwrap().clone();
        let removed = self.removed.lock().unwrap().clone();
        let p: BTreeSet<_> = published.iter().cloned().collect();
        let r: BTreeSet<_> = removed.iter().cloned().collect();
        assert_eq!(p.len(), published.len(), "a file published twice");
        assert_eq!(r.len(), removed.len(), "a file removed twice");
        assert!(r.is_subset(&p), "removed but never published: {r:?} {p:?}");
        let on_disk: BTreeSet<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .filter(|p| p.is_file())
            .collect();
        let kept: BTreeSet<_> = p.difference(&r).cloned().collect();
        assert_eq!(on_disk, kept, "files on disk vs published and not removed");
        (p.len(), r.len())
    }
}

/// Records in the files of `dir` (pcap or pcapng).
fn records_in(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        n += read_capture(e.unwrap().path()).unwrap().packets.len() as u64;
    }
    n
}

fn series(dir: &Path, ext: &str) -> OutputPlan {
    OutputPlan::Series {
        dir: dir.to_path_buf(),
        template: format!("obs-{{seq}}.{ext}"),
    }
}

fn counting(count: &Arc<AtomicU64>) -> ObserverFactory {
    let count = count.clone();
    Arc::new(move |_: ObserverContext| Box::new(Counter(count.clone())) as Box<dyn Observer>)
}

/// An offline capture (copy path): 300 frames, 200 of them UDP; the filter
/// keeps the UDP ones, 30 to a file, the newest 3 files kept.
#[test]
fn offline_capture_every_kept_packet_and_every_file() {
    let tmp = TempDir::new("observer-offline");
    let ep = Endpoints::new([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]);
    let frames: Vec<Vec<u8>> = (0..300u32)
        .map(|i| {
            if i % 3 == 2 {
                frames::icmp4_echo(&ep, i, 7, 40)
            } else {
                frames::udp4(&ep, i, 40000, 5000, 40)
            }
        })
        .collect();
    let input = tmp.path().join("in.pcap");
    write_pcap(&input, &frames).unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let files = Arc::new(Files::default());
    let count = Arc::new(AtomicU64::new(0));
    let spec = CaptureSpec {
        source: SourceSpec::Files(vec![input]),
        filter: "udp".into(),
        snap: Snap::Bytes(65535),
        sampling: Sampling::All,
        transforms: Vec::new(),
        sink: SinkSpec {
            rotation: Rotation {
                packets: Some(30),
                ..Rotation::default()
            },
            retention: Retention {
                max_files: Some(3),
                ..Retention::default()
            },
            files: Some(FileHook(files.clone())),
            ..SinkSpec::new(series(&out, "pcap"), RecordFormat::Pcap(TsResolution::Nano))
        },
        count: None,
        duration: None,
        observer: Some(counting(&count)),
    };
    let outcome = Capture::start(spec).unwrap().join();
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    assert_eq!(count.load(Ordering::Relaxed), 200, "kept packets observed");
    assert_eq!(outcome.total.packets_written, 200);
    let (published, removed) = files.check(&out);
    assert_eq!((published, removed), (200 / 30 + 1, 200 / 30 + 1 - 3));
    // The newest 3 files: 30 + 30 + the last 20.
    assert_eq!(records_in(&out), 80);
}

/// The writer of ringcapd's dumps (`FileSink`): records pushed by a front
/// end, 25 to a file, at most 2 files kept.
#[test]
fn file_sink_dumps_every_file() {
    let tmp = TempDir::new("observer-dump");
    let files = Arc::new(Files::default());
    let sink = SinkSpec {
        rotation: Rotation {
            packets: Some(25),
            ..Rotation::default()
        },
        retention: Retention {
            max_files: Some(2),
            ..Retention::default()
        },
        write_mode: ringcap_engine::WriteMode::Buffered,
        writer_buffer_bytes: 8 << 20,
        files: Some(FileHook(files.clone())),
        ..SinkSpec::new(series(tmp.path(), "pcapng"), RecordFormat::Pcapng)
    };
    let iface = SinkInterface {
        name: "dump".into(),
        linktype: 1,
        snaplen: 65535,
        filter: None,
        stats: Some(0),
    };
    let board = Arc::new(Board::new(&[("dump".to_string(), 1)]));
    let FileSink {
        writer,
        mut encoder,
    } = FileSink::open(&sink, vec![iface], board).unwrap();
    let ep = Endpoints::new([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]);
    for i in 0..110u32 {
        let f = frames::udp4(&ep, i, 40000, 5000, 40);
        let rec = Record::whole(
            1_700_000_000_000_000_000 + u64::from(i) * 1000,
            f.len() as u32,
            &f,
        );
        assert!(encoder.push(rec).is_some());
    }
    encoder.close();
    drop(encoder);
    writer.join();
    let (published, removed) = files.check(tmp.path());
    assert_eq!((published, removed), (5, 3));
    assert_eq!(records_in(tmp.path()), 25 + 10);
}

/// The child's role: a live zero-copy capture (ring blocks written in place
/// as pcapng) in the capture namespace, rotated every 40 packets, 2 files
/// kept; prints what it saw when stdin closes.
#[test]
fn observer_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let iface = std::env::var("RINGCAP_OBSERVER_TEST_IF").unwrap();
    let files = Arc::new(Files::default());
    let spec = CaptureSpec {
        source: SourceSpec::Live(LiveSpec {
            interfaces: vec![iface],
            threads: 1,
            ring_bytes: 8 << 20,
            promiscuous: true,
            fix_offloads: true,
            tstamp: TimestampSource::Host,
            hook: ringcap_engine::Hook::Packet,
            monitor: false,
        }),
        filter: "udp".into(),
        snap: Snap::Bytes(65535),
        sampling: Sampling::All,
        transforms: Vec::new(),
        sink: SinkSpec {
            rotation: Rotation {
                bytes: Some(1),
                ..Rotation::default()
            },
            retention: Retention {
                max_files: Some(2),
                ..Retention::default()
            },
            flush_interval: Duration::from_millis(50),
            writer_buffer_bytes: 16 << 20,
            zero_copy: ZeroCopy::On,
            files: Some(FileHook(files.clone())),
            ..SinkSpec::new(series(&dir, "pcapng"), RecordFormat::Pcapng)
        },
        count: None,
        duration: None,
        observer: None,
    };
    let capture = Capture::start(spec).unwrap();
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    capture.stop();
    let outcome = capture.join();
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    let (published, removed) = files.check(&dir);
    println!(
        "written={} published={published} removed={removed} records={}",
        outcome.total.packets_written,
        records_in(&dir)
    );
}

/// A live capture with ring blocks written in place: every file published
/// and removed is seen (a packet observer would keep blocks from being
/// written in place, so only files are observed here).
#[test]
fn in_place_files_are_published_and_removed() {
    skip_unless_netns!();
    let bed = Testbed::new().unwrap();
    let tmp = TempDir::new("observer-inplace");
    let mut child = bed
        .in_capture_ns(std::env::current_exe().unwrap().to_str().unwrap())
        .args([
            "--exact",
            "observer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, tmp.path())
        .env("RINGCAP_OBSERVER_TEST_IF", &bed.capture_if)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
    }
    // Whole 1500-byte frames: a 1 MB file holds ~680; 3000 make a few files
    // (each rotation at a ring block's end).
    let ep = bed.endpoints();
    let frames: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| frames::udp4(&ep, i, 40000, 5000, 1458))
        .collect();
    bed.send_from_peer(&frames, 20_000).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    drop(child.stdin.take());
    let mut report = String::new();
    for l in out.lines() {
        let l = l.unwrap();
        if let Some(at) = l.find("written=") {
            report = l[at..].to_string();
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
    let field = |k: &str| -> u64 {
        report
            .split_whitespace()
            .find_map(|f| f.strip_prefix(k)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {k} in {report:?}"))
            .parse()
            .unwrap()
    };
    assert_eq!(field("written"), 3000, "{report}");
    let (published, removed) = (field("published"), field("removed"));
    assert!(published >= 3, "{report}");
    assert_eq!(removed, published - 2, "{report}");
    assert!(field("records") > 0 && field("records") < 3000, "{report}");
}
