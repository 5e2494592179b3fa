//! pmacct's nfacctd (Debian's pmacct 1.7.7) as a collector: its print
//! plugin writes one CSV line per (VLAN, 5-tuple) with the packets and
//! bytes it counted.
//!
//! Facts about nfacctd 1.7.7 this relies on (seen on Debian 12):
//! - its core process blocks its signals while it waits for a datagram and
//!   handles them only when one arrives, so a SIGTERM alone can leave it
//!   waiting for ever: [`Nfacctd::read`] sends SIGTERM, then a junk datagram
//!   to wake it;
//! - on SIGTERM the print plugin purges its cache into the CSV file, so
//!   nothing is lost with a refresh time of an hour;
//! - it forks the print plugin, so the test runs it in its own process
//!   group and kills the whole group, even on failure.

use super::{free_udp_port, FiveTuple, Sums};
use ringcap_testkit::capture::ChildGuard;
use std::collections::BTreeMap;
use std::net::{IpAddr, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Five-tuple -> VLAN ID, as a collector reports it.
pub type Vlans = BTreeMap<FiveTuple, u16>;

/// nfacctd on 127.0.0.1:PORT with its config, CSV and log in `dir`.
pub struct Nfacctd {
    child: ChildGuard,
    pgid: i32,
    pub port: u16,
    csv: PathBuf,
    log: PathBuf,
}

impl Nfacctd {
    pub fn start(dir: &Path) -> Nfacctd {
        std::fs::create_dir_all(dir).unwrap();
        let port = free_udp_port();
        let csv = dir.join("flows.csv");
        let log = dir.join("nfacctd.log");
        let conf = dir.join("nfacctd.conf");
        // time_new: bins by arrival time (the file's timestamps are old);
        // num_protos: protocol numbers, not names.
        std::fs::write(
            &conf,
            format!(
                "daemonize: false\n\
                 nfacctd_ip: 127.0.0.1\n\
                 nfacctd_port: {port}\n\
                 nfacctd_time_new: true\n\
                 logfile: {}\n\
                 plugins: print\n\
                 print_output: csv\n\
                 print_output_file: {}\n\
                 print_refresh_time: 3600\n\
                 print_num_protos: true\n\
                 aggregate: vlan,src_host,dst_host,src_port,dst_port,proto\n",
                log.display(),
                csv.display()
            ),
        )
        .unwrap();
        let mut cmd = Command::new("nfacctd");
        cmd.arg("-f")
            .arg(&conf)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = ChildGuard::spawn(&mut cmd).expect("start nfacctd");
        let pgid = child.id() as i32;
        let n = Nfacctd {
            child,
            pgid,
            port,
            csv,
            log,
        };
        // Ready when its socket is bound: a bind to the port fails then.
        let t = Instant::now();
        while UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "nfacctd did not bind: {}",
                n.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        n
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops nfacctd (its print plugin writes the CSV then) and reads the
    /// CSV: per (src, dst, sport, dport, proto) the packets and bytes, and
    /// the VLAN of each.
    pub fn read(mut self) -> (Sums, Vlans) {
        // Give the last datagrams time to be accounted.
        std::thread::sleep(Duration::from_millis(500));
        self.child.signal(libc::SIGTERM).expect("SIGTERM nfacctd");
        let waker = UdpSocket::bind("127.0.0.1:0").unwrap();
        let t = Instant::now();
        loop {
            let _ = waker.send_to(b"wake up", ("127.0.0.1", self.port));
            if self
                .child
                .wait_timeout(Duration::from_millis(200))
                .expect("wait nfacctd")
                .is_some()
            {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "nfacctd did not stop: {}",
                self.log_text()
            );
        }
        // The plugin exits before the core; wait for the group to be empty.
        let t = Instant::now();
        while kill_group(self.pgid, "-0") && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let text = std::fs::read_to_string(&self.csv)
            .unwrap_or_else(|e| panic!("nfacctd's CSV: {e}\n{}", self.log_text()));
        let mut lines = text.lines();
        let head: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
        let col = |name: &str| {
            head.iter()
                .position(|h| *h == name)
                .unwrap_or_else(|| panic!("no {name} in nfacctd's CSV header {head:?}"))
        };
        let c = [
            "SRC_IP", "DST_IP", "SRC_PORT", "DST_PORT", "PROTOCOL", "PACKETS", "BYTES", "VLAN",
        ]
        .map(col);
        let mut sums = Sums::new();
        let mut vlans = Vlans::new();
        for line in lines {
            let f: Vec<&str> = line.split(',').collect();
            let ip = |i: usize| -> IpAddr {
                f[c[i]]
                    .parse()
                    .unwrap_or_else(|_| panic!("address in {line}"))
            };
            let n = |i: usize| -> u64 {
                f[c[i]]
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("number in {line}"))
            };
            let key = (ip(0), ip(1), n(2) as u16, n(3) as u16, n(4) as u8);
            let e = sums.entry(key).or_default();
            e.0 += n(5);
            e.1 += n(6);
            vlans.insert(key, n(7) as u16);
        }
        (sums, vlans)
    }
}

impl Drop for Nfacctd {
    fn drop(&mut self) {
        // The print plugin too, whatever happened (the guard then reaps
        // the core).
        kill_group(self.pgid, "-KILL");
    }
}

/// kill(1) SIGNAL to the process group; true when it had a process.
fn kill_group(pgid: i32, signal: &str) -> bool {
    Command::new("kill")
        .args([signal, "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
