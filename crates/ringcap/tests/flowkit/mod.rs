//! Shared by the flow tests: a capture file of many kinds of flows, the
//! file's own per-5-tuple sums, and nfcapd as a collector read back with
//! nfdump.
#![allow(dead_code)]

use ringcap_testkit::capture::{read_pcap, ChildGuard};
use ringcap_testkit::frames::{self, Endpoints};
use ringcap_testkit::skip;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub mod kafka;
pub mod pmacct;

/// (src, dst, sport, dport, proto).
pub type FiveTuple = (IpAddr, IpAddr, u16, u16, u8);
/// Five-tuple -> (packets, bytes).
pub type Sums = BTreeMap<FiveTuple, (u64, u64)>;

pub fn ep(i: u32, v6: bool) -> (Endpoints, Endpoints) {
    let c4 = Ipv4Addr::new(198, 18, (i >> 8) as u8, i as u8);
    let s4 = Ipv4Addr::new(198, 19, 0, 1 + (i % 7) as u8);
    let c6: Ipv6Addr = format!("2001:db8::{:x}", 0x100 + i).parse().unwrap();
    let s6: Ipv6Addr = format!("2001:db8:1::{:x}", 1 + i % 7).parse().unwrap();
    let mac_c = [2, 0, 0, 0, (i >> 8) as u8, i as u8];
    let mac_s = [2, 0, 0, 1, 0, 1];
    let a = Endpoints::new(mac_c, mac_s).with_ipv4(c4, s4);
    let b = Endpoints::new(mac_s, mac_c).with_ipv4(s4, c4);
    if v6 {
        (a.with_ipv6(c6, s6), b.with_ipv6(s6, c6))
    } else {
        (a, b)
    }
}

/// A TCP segment of `len` payload bytes with `flags` (checksums are not
/// what flow exporters look at).
pub fn tcp(e: &Endpoints, seq: u32, sport: u16, dport: u16, flags: u8, len: usize) -> Vec<u8> {
    let mut f = frames::tcp4_with_options(e, seq, sport, dport, len);
    f[14 + 20 + 13] = flags;
    f
}

/// Many conversations of several kinds, interleaved.
pub fn traffic() -> Vec<Vec<u8>> {
    let mut convs: Vec<Vec<Vec<u8>>> = Vec::new();
    for i in 0..240u32 {
        let seq = i * 100;
        let port = 20_000 + i as u16;
        let mut c = Vec::new();
        match i % 6 {
            0 => {
                let (a, b) = ep(i, false);
                c.push(tcp(&a, seq, port, 80, 0x02, 0));
                c.push(tcp(&b, seq + 1, 80, port, 0x12, 0));
                for k in 0..(i % 5 + 1) {
                    c.push(tcp(&a, seq + 2 + k, port, 80, 0x18, 100 + k as usize));
                    c.push(tcp(&b, seq + 20 + k, 80, port, 0x18, 900 + i as usize));
                }
                c.push(tcp(&a, seq + 40, port, 80, 0x11, 0));
                c.push(tcp(&b, seq + 41, 80, port, 0x11, 0));
            }
            1 => {
                let (a, b) = ep(i, false);
                for k in 0..(i % 4 + 1) {
                    c.push(frames::udp4(&a, seq + k, port, 53, 30 + k as usize));
                    c.push(frames::udp4(&b, seq + 10 + k, 53, port, 200));
                }
            }
            2 => {
                let (a, b) = ep(i, false);
                let vid = 100 + (i % 3) as u16;
                c.push(frames::vlan_udp4(&a, seq, vid, port, 4789, 500));
                c.push(frames::vlan_udp4(&b, seq + 1, vid, 4789, port, 60));
                c.push(frames::vlan_udp4(&a, seq + 2, vid, port, 4789, 700));
            }
            3 => {
                let (a, b) = ep(i, true);
                for k in 0..3 {
                    c.push(frames::udp6(&a, seq + k, port, 443, 1200));
                    c.push(frames::udp6(&b, seq + 10 + k, 443, port, 80));
                }
            }
            4 => {
                let (a, b) = ep(i, false);
                c.push(frames::icmp4_echo(&a, seq, i as u16, 56));
                let mut reply = frames::icmp4_echo(&b, seq + 1, i as u16, 56);
                reply[14 + 20] = 0; // echo reply
                c.push(reply);
            }
            _ => {
                // One way only.
                let (a, _) = ep(i, false);
                for k in 0..5 {
                    c.push(frames::udp4(&a, seq + k, port, 514, 120));
                }
            }
        }
        convs.push(c);
    }
    // Interleave: one packet of each conversation in turn.
    let mut out = Vec::new();
    let mut k = 0;
    loop {
        let mut any = false;
        for c in &convs {
            if let Some(f) = c.get(k) {
                out.push(f.clone());
                any = true;
            }
        }
        if !any {
            break;
        }
        k += 1;
    }
    out
}

/// The file's own sums, from the testkit's reader and flow keys; bytes are
/// IP lengths read from the frames here.
pub fn file_sums(path: &Path) -> Sums {
    file_sums_and_trailers(path).0
}

/// [`file_sums`], and the keys of flows with frames that carry bytes past
/// their IP packet (the testkit's sequence trailer on short frames).
pub fn file_sums_and_trailers(path: &Path) -> (Sums, std::collections::BTreeSet<FiveTuple>) {
    let mut sums = Sums::new();
    let mut trailers = std::collections::BTreeSet::new();
    for p in read_pcap(path).unwrap() {
        let k = frames::flow_key(&p.data).expect("frame");
        let (Some(src), Some(dst)) = (k.src, k.dst) else {
            continue;
        };
        let ip = 14 + 4 * k.vlans.len();
        let len = match k.ethertype {
            0x0800 => u64::from(u16::from_be_bytes([p.data[ip + 2], p.data[ip + 3]])),
            _ => 40 + u64::from(u16::from_be_bytes([p.data[ip + 4], p.data[ip + 5]])),
        };
        let proto = k.proto as u8;
        let (sp, dp) = if proto == 1 || proto == 58 {
            (0, 0)
        } else {
            (k.src_port, k.dst_port)
        };
        let e = sums.entry((src, dst, sp, dp, proto)).or_default();
        e.0 += 1;
        e.1 += len;
        if p.data.len() as u64 > ip as u64 + len {
            trailers.insert((src, dst, sp, dp, proto));
        }
    }
    (sums, trailers)
}

/// Per five-tuple, the VLAN ID of the file's frames (0 untagged), and the
/// five-tuples that opened a conversation: the direction of the first
/// frame of each unordered pair, which a biflow calls forward.
pub fn file_vlans_and_initiators(
    path: &Path,
) -> (
    BTreeMap<FiveTuple, u16>,
    std::collections::BTreeSet<FiveTuple>,
) {
    let mut vlans = BTreeMap::new();
    let mut first = std::collections::BTreeSet::new();
    let mut seen = std::collections::BTreeSet::new();
    for p in read_pcap(path).unwrap() {
        let k = frames::flow_key(&p.data).expect("frame");
        let (Some(src), Some(dst)) = (k.src, k.dst) else {
            continue;
        };
        let proto = k.proto as u8;
        let (sp, dp) = if proto == 1 || proto == 58 {
            (0, 0)
        } else {
            (k.src_port, k.dst_port)
        };
        let key = (src, dst, sp, dp, proto);
        vlans.insert(key, k.vlans.first().copied().unwrap_or(0) & 0x0fff);
        if seen.insert(key) && !seen.contains(&(dst, src, dp, sp, proto)) {
            first.insert(key);
        }
    }
    (vlans, first)
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// nfcapd on 127.0.0.1:PORT writing into `dir`, stopped (and its file
/// completed) by [`Collector::read`].
pub struct Collector {
    child: ChildGuard,
    pub port: u16,
    dir: std::path::PathBuf,
}

impl Collector {
    pub fn start(dir: &Path) -> Collector {
        std::fs::create_dir_all(dir).unwrap();
        let port = free_udp_port();
        let mut cmd = Command::new("nfcapd");
        cmd.args([
            "-b",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "3600",
            "-w",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let child = ChildGuard::spawn(&mut cmd).expect("start nfcapd");
        // Ready when its socket is bound: a bind to the port fails then.
        let t = Instant::now();
        while UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            assert!(t.elapsed() < Duration::from_secs(10), "nfcapd did not bind");
            std::thread::sleep(Duration::from_millis(50));
        }
        Collector {
            child,
            port,
            dir: dir.to_path_buf(),
        }
    }

    /// Stops nfcapd and reads its flows with nfdump: its CSV lines (ts, te,
    /// td, sa, da, sp, dp, pr, flg, fwd, stos, ipkt, ibyt, opkt, obyt, ...).
    pub fn csv(mut self) -> Vec<String> {
        // Give the last datagrams time to be stored.
        std::thread::sleep(Duration::from_millis(500));
        let _ = self.child.terminate();
        let out = Command::new("nfdump")
            .arg("-R")
            .arg(&self.dir)
            .args(["-q", "-o", "csv"])
            .output()
            .expect("nfdump");
        assert!(
            out.status.success(),
            "nfdump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Stops nfcapd and reads its flows with nfdump: per direction.
    pub fn read(self) -> Sums {
        let mut sums = Sums::new();
        for line in self.csv() {
            let line = line.as_str();
            let f: Vec<&str> = line.split(',').collect();
            if f.len() < 15 || f[0] == "ts" {
                continue;
            }
            let (Ok(sa), Ok(da)) = (f[3].parse::<IpAddr>(), f[4].parse::<IpAddr>()) else {
                continue;
            };
            let proto: u8 = match f[7] {
                "TCP" => 6,
                "UDP" => 17,
                "ICMP" => 1,
                "ICMP6" => 58,
                n => n
                    .parse()
                    .unwrap_or_else(|_| panic!("protocol {n} in {line}")),
            };
            let port = |s: &str| -> u16 { s.split('.').next().unwrap_or("0").parse().unwrap_or(0) };
            let (sp, dp) = if proto == 1 || proto == 58 {
                (0, 0)
            } else {
                (port(f[5]), port(f[6]))
            };
            let n = |s: &str| -> u64 {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("count {s} in {line}"))
            };
            let (ipkt, ibyt, opkt, obyt) = (n(f[11]), n(f[12]), n(f[13]), n(f[14]));
            if ipkt > 0 {
                let e = sums.entry((sa, da, sp, dp, proto)).or_default();
                e.0 += ipkt;
                e.1 += ibyt;
            }
            if opkt > 0 {
                let e = sums.entry((da, sa, dp, sp, proto)).or_default();
                e.0 += opkt;
                e.1 += obyt;
            }
        }
        sums
    }
}

pub fn diff(a: &Sums, b: &Sums) -> String {
    let mut s = String::new();
    for (k, v) in a {
        if b.get(k) != Some(v) {
            s += &format!("{k:?}: {v:?} vs {:?}\n", b.get(k));
        }
    }
    for (k, v) in b {
        if !a.contains_key(k) {
            s += &format!("{k:?}: missing vs {v:?}\n");
        }
    }
    s.lines().take(20).collect::<Vec<_>>().join("\n")
}

pub fn collectors_here() -> bool {
    for t in ["nfcapd", "nfdump"] {
        if !have(t) {
            skip(format!(
                "{t} is not installed (Debian: apt-get install nfdump)"
            ));
            return false;
        }
    }
    true
}
