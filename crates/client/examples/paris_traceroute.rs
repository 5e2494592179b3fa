//! A UDP Paris traceroute through ringcapd, for an unprivileged user whose
//! grant lets them send UDP probes and capture ICMP on one interface.
//!
//! Paris traceroute (Augustin et al., 2006) keeps every probe of a trace in
//! one flow — the same addresses, ports and protocol — so load balancers
//! that hash the 5-tuple send them all down one path; probes differ only in
//! fields no balancer hashes. Here the probe's number is its IP ID, which
//! routers quote back in their ICMP errors. The daemon sends each probe at
//! the time asked for and reports when it left (the kernel's transmit
//! timestamp); the same session captures the ICMP replies with their
//! receive timestamps, so each RTT is kernel time to kernel time, with no
//! scheduling delay of this process in it.
//!
//! ```text
//! paris_traceroute -i IF [--daemon SOCKET] [--gateway-mac MAC]
//!                  [--max-ttl N] [--probes N] [--sport P] [--dport P] TARGET
//! ```
//!
//! Without `--gateway-mac`, the next hop's MAC comes from the kernel's
//! tables (/proc/net/route, /proc/net/arp), resolved first by one ordinary
//! UDP datagram to the target (any user may send that).

use ringcap_client::{Client, InjectFrame, InjectReport, InjectStatus, OpenRequest, Snap};
use std::collections::HashMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Args {
    interface: String,
    daemon: Option<PathBuf>,
    gateway_mac: Option<[u8; 6]>,
    max_ttl: u8,
    probes: u8,
    sport: u16,
    dport: u16,
    target: Ipv4Addr,
}

const USAGE: &str = "usage: paris_traceroute -i IF [--daemon SOCKET] [--gateway-mac MAC] \
                     [--max-ttl N] [--probes N] [--sport P] [--dport P] TARGET";

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut interface, mut daemon, mut gateway_mac, mut target) = (None, None, None, None);
    let (mut max_ttl, mut probes, mut sport, mut dport) = (16u8, 3u8, 45_000u16, 33_435u16);
    fn num<T: std::str::FromStr>(v: Option<String>, what: &str) -> Result<T, String> {
        v.ok_or(format!("{what}: a value is needed"))?
            .parse()
            .map_err(|_| format!("{what}: not a number in range"))
    }
    while let Some(a) = it.next() {
        match a.as_str() {
            "-i" => interface = it.next(),
            "--daemon" => daemon = it.next().map(PathBuf::from),
            "--gateway-mac" => {
                let v = it.next().ok_or("--gateway-mac: a value is needed")?;
                gateway_mac = Some(parse_mac(&v).ok_or(format!("--gateway-mac: {v}: not a MAC"))?);
            }
            "--max-ttl" => max_ttl = num(it.next(), "--max-ttl")?,
            "--probes" => probes = num(it.next(), "--probes")?,
            "--sport" => sport = num(it.next(), "--sport")?,
            "--dport" => dport = num(it.next(), "--dport")?,
            t if !t.starts_with('-') && target.is_none() => {
                target = Some(t.parse().map_err(|_| format!("{t}: not an IPv4 address"))?)
            }
            other => return Err(format!("{other}: unknown argument\n{USAGE}")),
        }
    }
    if max_ttl == 0 || probes == 0 {
        return Err("--max-ttl and --probes must be at least 1".into());
    }
    Ok(Args {
        interface: interface.ok_or(USAGE)?,
        daemon,
        gateway_mac,
        max_ttl,
        probes,
        sport,
        dport,
        target: target.ok_or(USAGE)?,
    })
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

/// The next hop toward `target` on `interface`: the gateway of the longest
/// matching route, or the target itself when it is on the link.
fn next_hop(interface: &str, target: Ipv4Addr) -> Result<Ipv4Addr, String> {
    let routes = std::fs::read_to_string("/proc/net/route").map_err(|e| e.to_string())?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::from_be);
    let t = u32::from(target);
    let mut best: Option<(u32, Ipv4Addr)> = None;
    for line in routes.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[0] != interface {
            continue;
        }
        let (Some(dest), Some(gw), Some(mask)) = (hex(f[1]), hex(f[2]), hex(f[7])) else {
            continue;
        };
        if t & mask == dest && best.is_none_or(|(m, _)| mask > m) {
            let hop = if gw == 0 { target } else { Ipv4Addr::from(gw) };
            best = Some((mask, hop));
        }
    }
    best.map(|(_, hop)| hop)
        .ok_or(format!("no route to {target} on {interface}"))
}

/// The MAC of `hop` from the neighbour table, after one ordinary datagram
/// toward `target` made the kernel resolve it.
fn resolve_mac(
    interface: &str,
    hop: Ipv4Addr,
    target: Ipv4Addr,
    dport: u16,
) -> Result<[u8; 6], String> {
    let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    let _ = sock.send_to(&[0u8; 1], (target, dport));
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let arp = std::fs::read_to_string("/proc/net/arp").map_err(|e| e.to_string())?;
        for line in arp.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // IP, HW type, flags (0x2: complete), MAC, mask, device.
            if f.len() >= 6 && f[5] == interface && f[0] == hop.to_string() && f[2] == "0x2" {
                return parse_mac(f[3]).ok_or(format!("/proc/net/arp: bad MAC {}", f[3]));
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{hop}: no ARP entry on {interface} (give --gateway-mac)"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A probe: Ethernet to the next hop, IPv4 with this TTL and ID, UDP with
/// the trace's fixed ports. The daemon fills in the interface's source MAC
/// and address and the checksums; they are left zero here.
fn probe(a: &Args, mac: [u8; 6], ttl: u8, id: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(54);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let payload = [0u8; 12];
    let total = (20 + 8 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(&[0, 0, ttl, 17, 0, 0]);
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&a.target.octets());
    let c = checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&a.sport.to_be_bytes());
    f.extend_from_slice(&a.dport.to_be_bytes());
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&payload);
    f
}

/// An ICMP time-exceeded or destination-unreachable reply quoting one of
/// our probes: (replier, its ICMP type, the quoted IP ID).
fn reply(a: &Args, frame: &[u8]) -> Option<(Ipv4Addr, u8, u16)> {
    let ip = frame.get(14..)?;
    if frame.get(12..14)? != [8, 0] || ip[0] >> 4 != 4 || *ip.get(9)? != 1 {
        return None;
    }
    let icmp = ip.get(usize::from(ip[0] & 15) * 4..)?;
    let kind = *icmp.first()?;
    if kind != 11 && kind != 3 {
        return None;
    }
    let quoted = icmp.get(8..)?;
    let qhl = usize::from(*quoted.first()? & 15) * 4;
    let udp = quoted.get(qhl..qhl + 4)?;
    let ours = quoted.get(16..20)? == a.target.octets()
        && *quoted.get(9)? == 17
        && udp[0..2] == a.sport.to_be_bytes()
        && udp[2..4] == a.dport.to_be_bytes();
    if !ours {
        return None;
    }
    let from = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    Some((from, kind, u16::from_be_bytes([quoted[4], quoted[5]])))
}

fn run(a: &Args) -> Result<(), String> {
    let mac = match a.gateway_mac {
        Some(m) => m,
        None => {
            let hop = next_hop(&a.interface, a.target)?;
            resolve_mac(&a.interface, hop, a.target, a.dport)?
        }
    };
    let client = match &a.daemon {
        Some(p) => Client::connect(p),
        None => Client::connect_default(),
    }
    .map_err(|e| format!("ringcapd: {e}"))?;
    let mut req = OpenRequest::new(&a.interface, "icmp");
    req.snaplen = Snap::Bytes(128);
    let mut s = client.open(req).map_err(|e| format!("ringcapd: {e}"))?;

    // All probes in one batch, 10 ms apart from 100 ms out; probe k (its
    // tag) has TTL 1 + k / probes and IP ID base + k.
    let base = (std::process::id() as u16) & 0x7fff;
    let n = u16::from(a.max_ttl) * u16::from(a.probes);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_nanos() as u64;
    let start = now + 100_000_000;
    let frames: Vec<InjectFrame> = (0..n)
        .map(|k| InjectFrame {
            tag: u64::from(k),
            at_ns: start + u64::from(k) * 10_000_000,
            tolerance_ns: 5_000_000,
            data: probe(
                a,
                mac,
                1 + (k / u16::from(a.probes)) as u8,
                base.wrapping_add(k),
            ),
        })
        .collect();
    s.inject(frames).map_err(|e| format!("inject: {e}"))?;

    // Collect reports and replies until a second after the last probe.
    let until = Instant::now() + Duration::from_millis(100 + 10 * u64::from(n) + 1000);
    let mut sent: HashMap<u16, InjectReport> = HashMap::new();
    let mut replies: HashMap<u16, (Ipv4Addr, u8, u64)> = HashMap::new();
    while Instant::now() < until {
        s.wait(Duration::from_millis(20))
            .map_err(|e| e.to_string())?;
        for r in s.inject_reports().map_err(|e| e.to_string())? {
            sent.insert(r.tag as u16, r);
        }
        s.packets(|p| {
            if let Some((from, kind, id)) = reply(a, p.data) {
                let k = id.wrapping_sub(base);
                if k < n {
                    replies.entry(k).or_insert((from, kind, p.ts_ns));
                }
            }
        })
        .map_err(|e| e.to_string())?;
    }
    let _ = s.close();

    println!(
        "paris-traceroute to {}, {} hops max, UDP {} -> {}, probe id in the IP ID",
        a.target, a.max_ttl, a.sport, a.dport
    );
    for ttl in 1..=a.max_ttl {
        let mut line = format!("{ttl:2} ");
        let mut last_from = None;
        let mut reached = false;
        for j in 0..a.probes {
            let k = u16::from(ttl - 1) * u16::from(a.probes) + u16::from(j);
            let report = sent.get(&k);
            match (report, replies.get(&k)) {
                (Some(r), _) if r.status != InjectStatus::Sent => {
                    line += &format!(" !{:?}({})", r.status, r.reason.clone().unwrap_or_default())
                }
                (Some(r), Some((from, kind, rx))) if r.sent_ns.is_some() => {
                    if last_from != Some(*from) {
                        line += &format!(" {from}");
                        last_from = Some(*from);
                    }
                    let rtt = *rx as f64 - r.sent_ns.unwrap_or(0) as f64;
                    line += &format!("  {:.3} ms", rtt / 1e6);
                    reached |= *kind == 3;
                }
                _ => line += "  *",
            }
        }
        println!("{line}");
        if reached {
            break;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("paris_traceroute: {e}");
            ExitCode::from(2)
        }
    }
}
