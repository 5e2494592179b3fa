//! [`Testbed`]: two network namespaces joined by a veth pair.
//!
//! The veth pair is created directly inside the two namespaces (`ip link add ...
//! netns A type veth peer name ... netns B`), so the root namespace never sees it.
//! Everything is torn down by [`Drop`]: processes still running inside the
//! namespaces are killed (by pid, from `ip netns pids`), then both namespaces are
//! deleted, which destroys the veth pair.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::frames::Endpoints;
pub use crate::tempdir::TempFile;

/// Largest number of frames [`Testbed::send_from_peer`] sends in one call.
pub const MAX_SEND_FRAMES: usize = 1_000_000;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Options for [`Testbed::with_options`]. `TestbedOptions::default()` is what
/// [`Testbed::new`] uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestbedOptions {
    /// Keep IPv6 enabled on both ends and give them the addresses
    /// `fd52:4300:X::1/64` (capture) and `::2` (peer), without DAD, router
    /// solicitations or RA processing. Even so the kernel may send an MLD report
    /// or two after the link comes up. Default: false (IPv6 disabled, so neither
    /// kernel sends anything unasked).
    pub ipv6: bool,
    /// Bring the capture end up. Set false for "interface down" tests; the peer end
    /// is always up. Default: true.
    pub capture_if_up: bool,
    /// MTU of both ends, `None` for the veth default (1500).
    pub mtu: Option<u32>,
    /// Put the capture end in promiscuous mode. Default: true.
    pub promisc: bool,
}

impl Default for TestbedOptions {
    fn default() -> Self {
        TestbedOptions {
            ipv6: false,
            capture_if_up: true,
            mtu: None,
            promisc: true,
        }
    }
}

/// Two network namespaces joined by a veth pair: `capture` end and `peer` end.
///
/// Both ends up (unless [`TestbedOptions::capture_if_up`] is false), IPv6 disabled
/// unless asked, offloads (gro, lro, tso, gso, rx-gro-hw, rx-udp-gro-forwarding)
/// off, capture end promiscuous, addresses 198.18.X.1/24 (capture) and
/// 198.18.X.2/24 (peer) with made-up locally administered MACs, IPv4 forwarding off
/// in both namespaces. Dropping it kills what still runs inside the namespaces and
/// deletes both (which deletes the veth).
///
/// Names are `rc-<pid>-<counter>-<random>-cap` / `-peer` for the namespaces and
/// `rc<8 hex>c` / `rc<8 hex>p` for the interfaces (11 characters), unique across
/// runs and threads.
#[derive(Debug)]
pub struct Testbed {
    /// Namespace of the capture end.
    pub capture_ns: String,
    /// Namespace of the peer (sending) end.
    pub peer_ns: String,
    /// Interface name of the capture end (inside `capture_ns`).
    pub capture_if: String,
    /// Interface name of the peer end (inside `peer_ns`).
    pub peer_if: String,
    /// MAC of the capture end.
    pub capture_mac: [u8; 6],
    /// MAC of the peer end.
    pub peer_mac: [u8; 6],
    /// IPv4 address of the capture end (198.18.X.1).
    pub capture_ip: Ipv4Addr,
    /// IPv4 address of the peer end (198.18.X.2).
    pub peer_ip: Ipv4Addr,
    created: Vec<String>,
}

fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// A name unique in this process and, with high probability, across processes:
/// used for namespaces.
fn unique_suffix() -> (u32, u32) {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    (n, random_u64() as u32)
}

/// True when running as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// True when `program` can be run (found on `PATH` and executable).
pub fn have_program(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Why netns tests cannot run here, or `None` when they can (root, `ip` present,
/// and a throwaway namespace could be created and deleted). Cached.
pub fn netns_skip_reason() -> Option<String> {
    static REASON: OnceLock<Option<String>> = OnceLock::new();
    REASON
        .get_or_init(|| {
            if !is_root() {
                return Some("not running as root (network namespaces need root)".into());
            }
            if !have_program("ip") {
                return Some("`ip` (iproute2) not found on PATH".into());
            }
            let (n, r) = unique_suffix();
            let name = format!("rc-{}-{}-{:08x}-probe", std::process::id(), n, r);
            match run("ip", &["netns", "add", &name]) {
                Ok(_) => {
                    let _ = run("ip", &["netns", "del", &name]);
                    None
                }
                Err(e) => Some(format!("cannot create a network namespace: {e}")),
            }
        })
        .clone()
}

/// Runs `program args`, returning its output, or an error with its stderr if it
/// could not start or exited non-zero.
pub(crate) fn run(program: &str, args: &[&str]) -> io::Result<Output> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {program}: {e}")))?;
    check_output(program, args, out)
}

fn check_output(program: &str, args: &[&str], out: Output) -> io::Result<Output> {
    if out.status.success() {
        Ok(out)
    } else {
        Err(io::Error::other(format!(
            "`{program} {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        )))
    }
}

fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The offloads turned off on both ends.
pub const OFFLOADS_OFF: [&str; 6] = [
    "gro",
    "lro",
    "tso",
    "gso",
    "rx-gro-hw",
    "rx-udp-gro-forwarding",
];

impl Testbed {
    /// A testbed with default options. Errors clearly if not root or `ip` is missing.
    pub fn new() -> io::Result<Testbed> {
        Testbed::with_options(TestbedOptions::default())
    }

    /// A testbed with `opts`.
    pub fn with_options(opts: TestbedOptions) -> io::Result<Testbed> {
        if !is_root() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "Testbed needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN) to create network namespaces",
            ));
        }
        if !have_program("ip") {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "Testbed needs `ip` from iproute2 on PATH",
            ));
        }
        let (n, r) = unique_suffix();
        let pid = std::process::id();
        let base = format!("rc-{pid}-{n}-{r:08x}");
        // 198.18.X.0/24 and the low MAC bytes from the random part.
        let x = (r >> 8) as u8;
        let tb = Testbed {
            capture_ns: format!("{base}-cap"),
            peer_ns: format!("{base}-peer"),
            capture_if: format!("rc{r:08x}c"),
            peer_if: format!("rc{r:08x}p"),
            capture_mac: [0x02, 0x52, 0x43, (r >> 16) as u8, x, 0x01],
            peer_mac: [0x02, 0x52, 0x43, (r >> 16) as u8, x, 0x02],
            capture_ip: Ipv4Addr::new(198, 18, x, 1),
            peer_ip: Ipv4Addr::new(198, 18, x, 2),
            created: Vec::new(),
        };
        tb.setup(opts, x)
    }

    fn setup(mut self, opts: TestbedOptions, x: u8) -> io::Result<Testbed> {
        for ns in [self.capture_ns.clone(), self.peer_ns.clone()] {
            run("ip", &["netns", "add", &ns])?;
            self.created.push(ns);
        }
        let (cns, pns) = (self.capture_ns.clone(), self.peer_ns.clone());
        let (cif, pif) = (self.capture_if.clone(), self.peer_if.clone());
        run(
            "ip",
            &[
                "link", "add", &cif, "netns", &cns, "type", "veth", "peer", "name", &pif, "netns",
                &pns,
            ],
        )?;
        let ends = [
            (&cns, &cif, self.capture_mac, self.capture_ip),
            (&pns, &pif, self.peer_mac, self.peer_ip),
        ];
        for (i, (ns, ifname, mac, ip)) in ends.into_iter().enumerate() {
            let is_capture = i == 0;
            // Sysctls before the link comes up, so nothing is sent on "up".
            let v6 = if opts.ipv6 { "0" } else { "1" };
            let mut sys = vec![
                format!("net.ipv6.conf.all.disable_ipv6={v6}"),
                format!("net.ipv6.conf.default.disable_ipv6={v6}"),
                format!("net.ipv6.conf.{ifname}.disable_ipv6={v6}"),
                "net.ipv4.ip_forward=0".to_string(),
            ];
            if opts.ipv6 {
                for k in [
                    "accept_ra=0",
                    "router_solicitations=0",
                    "accept_dad=0",
                    "dad_transmits=0",
                ] {
                    sys.push(format!("net.ipv6.conf.{ifname}.{k}"));
                }
            }
            let mut args = vec!["netns", "exec", ns.as_str(), "sysctl", "-q", "-w"];
            args.extend(sys.iter().map(String::as_str));
            run("ip", &args)?;
            let macs = fmt_mac(&mac);
            let mut link = vec![
                "-n",
                ns.as_str(),
                "link",
                "set",
                ifname.as_str(),
                "address",
                &macs,
            ];
            let mtu = opts.mtu.map(|m| m.to_string());
            if let Some(m) = &mtu {
                link.extend(["mtu", m.as_str()]);
            }
            if is_capture && opts.promisc {
                link.extend(["promisc", "on"]);
            }
            run("ip", &link)?;
            let cidr = format!("{ip}/24");
            run("ip", &["-n", ns, "addr", "add", &cidr, "dev", ifname])?;
            if opts.ipv6 {
                let a = format!("fd52:4300:{x:x}::{}/64", i + 1);
                run("ip", &["-n", ns, "addr", "add", &a, "dev", ifname, "nodad"])?;
            }
            self.offloads_off(ns, ifname)?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            if !is_capture || opts.capture_if_up {
                run("ip", &["-n", ns, "link", "set", ifname, "up"])?;
            }
        }
        Ok(self)
    }

    /// Makes the peer a router to a third namespace, the target, behind it:
    /// capture — peer (forwarding, ICMP errors not rate-limited) — target at
    /// 198.19.X.2/24 (the peer is 198.19.X.1 on that side), with routes both
    /// ways. The target namespace is removed with the testbed. For tests of
    /// tools that probe paths (traceroute).
    pub fn add_target(&mut self) -> io::Result<Target> {
        let x = self.capture_ip.octets()[2];
        let ns = self.capture_ns.trim_end_matches("-cap").to_string() + "-tgt";
        let stem = self.capture_if.trim_end_matches('c');
        let (rif, tif) = (format!("{stem}r"), format!("{stem}t"));
        let (router_ip, ip) = (Ipv4Addr::new(198, 19, x, 1), Ipv4Addr::new(198, 19, x, 2));
        run("ip", &["netns", "add", &ns])?;
        self.created.push(ns.clone());
        let pns = self.peer_ns.clone();
        run(
            "ip",
            &[
                "link", "add", &rif, "netns", &pns, "type", "veth", "peer", "name", &tif, "netns",
                &ns,
            ],
        )?;
        for (n, sys) in [
            (
                &pns,
                vec!["net.ipv4.ip_forward=1", "net.ipv4.icmp_ratelimit=0"],
            ),
            (
                &ns,
                vec![
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv4.icmp_ratelimit=0",
                ],
            ),
        ] {
            let mut args = vec!["netns", "exec", n.as_str(), "sysctl", "-q", "-w"];
            args.extend(sys);
            run("ip", &args)?;
        }
        for (n, ifname, addr) in [(&pns, &rif, router_ip), (&ns, &tif, ip)] {
            run(
                "ip",
                &["-n", n, "addr", "add", &format!("{addr}/24"), "dev", ifname],
            )?;
            self.offloads_off(n, ifname)?;
            run("ip", &["-n", n, "link", "set", ifname, "up"])?;
        }
        run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        let peer = self.peer_ip.to_string();
        run(
            "ip",
            &[
                "-n",
                &self.capture_ns,
                "route",
                "add",
                &format!("198.19.{x}.0/24"),
                "via",
                &peer,
            ],
        )?;
        run(
            "ip",
            &[
                "-n",
                &ns,
                "route",
                "add",
                "default",
                "via",
                &router_ip.to_string(),
            ],
        )?;
        Ok(Target { ns, router_ip, ip })
    }

    fn offloads_off(&self, ns: &str, ifname: &str) -> io::Result<()> {
        if !have_program("ethtool") {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "`ethtool` not found on PATH",
            ));
        }
        let mut args = vec!["netns", "exec", ns, "ethtool", "-K", ifname];
        for o in OFFLOADS_OFF {
            args.extend([o, "off"]);
        }
        if run("ip", &args).is_ok() {
            return Ok(());
        }
        // ethtool fails as a whole when one feature is fixed; retry one by one and
        // only complain about features that stayed on.
        for o in OFFLOADS_OFF {
            let _ = run(
                "ip",
                &["netns", "exec", ns, "ethtool", "-K", ifname, o, "off"],
            );
        }
        let k = run("ip", &["netns", "exec", ns, "ethtool", "-k", ifname])?;
        let text = String::from_utf8_lossy(&k.stdout);
        let long = [
            "generic-receive-offload",
            "large-receive-offload",
            "tcp-segmentation-offload",
            "generic-segmentation-offload",
            "rx-gro-hw",
            "rx-udp-gro-forwarding",
        ];
        let still_on: Vec<&str> = text
            .lines()
            .filter(|l| long.iter().any(|n| l.starts_with(&format!("{n}: on"))))
            .collect();
        if still_on.is_empty() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "could not turn offloads off on {ifname}: {still_on:?}"
            )))
        }
    }

    /// The [`Endpoints`] of frames sent from the peer to the capture end: peer MAC →
    /// capture MAC, `peer_ip` → [`Testbed::sink_ip`], IPv6 fd52:4300:X::2 → ::3.
    pub fn endpoints(&self) -> Endpoints {
        let x = self.capture_ip.octets()[2];
        Endpoints::new(self.peer_mac, self.capture_mac)
            .with_ipv4(self.peer_ip, self.sink_ip())
            .with_ipv6(
                Ipv6Addr::new(0xfd52, 0x4300, u16::from(x), 0, 0, 0, 0, 2),
                Ipv6Addr::new(0xfd52, 0x4300, u16::from(x), 0, 0, 0, 0, 3),
            )
    }

    /// 198.18.X.3: in the testbed's subnet but assigned to nobody. Frames to it reach
    /// the capture end's kernel, which drops them without answering (forwarding is
    /// off), so captures hold only what the test sent.
    pub fn sink_ip(&self) -> Ipv4Addr {
        let o = self.capture_ip.octets();
        Ipv4Addr::new(o[0], o[1], o[2], 3)
    }

    /// `ip netns exec CAPTURE_NS program`: add arguments, stdio, then spawn.
    pub fn in_capture_ns(&self, program: &str) -> Command {
        in_ns(&self.capture_ns, program)
    }

    /// `ip netns exec PEER_NS program`: add arguments, stdio, then spawn.
    pub fn in_peer_ns(&self, program: &str) -> Command {
        in_ns(&self.peer_ns, program)
    }

    /// Sets the capture end up or down.
    pub fn set_capture_if_up(&self, up: bool) -> io::Result<()> {
        let state = if up { "up" } else { "down" };
        run(
            "ip",
            &[
                "-n",
                &self.capture_ns,
                "link",
                "set",
                &self.capture_if,
                state,
            ],
        )
        .map(|_| ())
    }

    /// Deletes the capture end (and so the veth pair) while the namespaces
    /// stay: an interface that disappears under a capture.
    pub fn delete_capture_if(&self) -> io::Result<()> {
        run(
            "ip",
            &["-n", &self.capture_ns, "link", "del", &self.capture_if],
        )
        .map(|_| ())
    }

    /// Sends the frames from the peer end (they arrive on the capture end), paced at
    /// `pps` frames per second (0: as fast as possible), and waits until all are
    /// sent. Refuses more than [`MAX_SEND_FRAMES`] frames.
    ///
    /// Writes a temporary pcap file with `ringcap_format::pcap` and runs
    /// `tcpreplay --pps PPS -i PEER_IF FILE` in the peer namespace; fails if
    /// tcpreplay exits non-zero, does not report every frame as sent, or runs past
    /// `2 × n / pps + 20` seconds (then it is killed).
    ///
    /// The kernel refuses (EMSGSIZE) frames longer than MTU + 14, or MTU + 18 with
    /// one VLAN tag (so a full-size QinQ frame needs a larger
    /// [`TestbedOptions::mtu`]). Frames shorter than 60 bytes are *not* padded by
    /// veth: they arrive as sent. Measured here: ~125k frames/s at `pps = 0`.
    pub fn send_from_peer(&self, frames: &[Vec<u8>], pps: u32) -> io::Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        if frames.len() > MAX_SEND_FRAMES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "refusing to send {} frames (max {MAX_SEND_FRAMES})",
                    frames.len()
                ),
            ));
        }
        let file = TempFile::new("send", "pcap")?;
        write_pcap(file.path(), frames)?;
        let path = file.path().to_string_lossy().into_owned();
        let mut cmd = self.in_peer_ns("tcpreplay");
        let pps_s = pps.to_string();
        if pps == 0 {
            cmd.arg("--topspeed");
        } else {
            cmd.args(["--pps", &pps_s]);
        }
        cmd.args(["-i", &self.peer_if, &path]);
        let limit = if pps == 0 {
            Duration::from_secs(20 + frames.len() as u64 / 10_000)
        } else {
            Duration::from_secs(20 + 2 * frames.len() as u64 / u64::from(pps))
        };
        let out = output_with_timeout(cmd, limit)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "tcpreplay failed ({}): {stderr}{stdout}",
                out.status
            )));
        }
        let field = |name: &str| -> Option<u64> {
            stdout
                .lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
        };
        let ok = field("Successful packets:");
        let failed = field("Failed packets:");
        if ok != Some(frames.len() as u64) || failed != Some(0) {
            return Err(io::Error::other(format!(
                "tcpreplay sent {ok:?} of {} frames ({failed:?} failed): {stdout}{stderr}",
                frames.len()
            )));
        }
        Ok(())
    }

    /// Reads `/sys/class/net/CAPTURE_IF/statistics/NAME` (e.g. `rx_packets`,
    /// `rx_dropped`) inside the capture namespace. Panics if it cannot be read.
    pub fn capture_if_counter(&self, name: &str) -> u64 {
        read_counter(&self.capture_ns, &self.capture_if, name)
    }

    /// Like [`Testbed::capture_if_counter`] for the peer end.
    pub fn peer_if_counter(&self, name: &str) -> u64 {
        read_counter(&self.peer_ns, &self.peer_if, name)
    }
}

fn read_counter(ns: &str, ifname: &str, name: &str) -> u64 {
    assert!(
        !name.contains('/') && !name.is_empty(),
        "bad counter name {name:?}"
    );
    let path = format!("/sys/class/net/{ifname}/statistics/{name}");
    let out = run("ip", &["netns", "exec", ns, "cat", &path])
        .unwrap_or_else(|e| panic!("reading {path} in {ns}: {e}"));
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("parsing {path} in {ns}: {e}"))
}

fn in_ns(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

/// Runs `cmd` with stdout/stderr captured, killing it if it outlives `limit`.
pub(crate) fn output_with_timeout(mut cmd: Command, limit: Duration) -> io::Result<Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn()?;
    let guard = crate::child::ChildGuard::new(child);
    guard.wait_output(limit)
}

/// Writes `frames` as a microsecond pcap (Ethernet, 1 µs apart) to `path`.
pub fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) -> io::Result<()> {
    write_pcap_spaced(path, frames, 1000)
}

/// Writes `frames` as a microsecond pcap (Ethernet), `gap_ns` apart (a
/// schedule for `ringcap inject`), to `path`.
pub fn write_pcap_spaced(
    path: &std::path::Path,
    frames: &[Vec<u8>],
    gap_ns: u64,
) -> io::Result<()> {
    use ringcap_format::pcap;
    use ringcap_format::TsResolution;
    let mut w = io::BufWriter::new(std::fs::File::create(path)?);
    w.write_all(&pcap::file_header(1, 262_144, TsResolution::Micro))?;
    let t0 = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut hdr = [0u8; pcap::RECORD_HEADER_LEN];
    for (i, f) in frames.iter().enumerate() {
        let len = u32::try_from(f.len()).map_err(|_| io::Error::other("frame too long"))?;
        pcap::write_record_header(
            &mut hdr,
            t0 + i as u64 * gap_ns,
            len,
            len,
            TsResolution::Micro,
        );
        w.write_all(&hdr)?;
        w.write_all(f)?;
    }
    w.flush()
}

/// The third namespace of [`Testbed::add_target`].
#[derive(Debug, Clone)]
pub struct Target {
    /// Its network namespace.
    pub ns: String,
    /// The router's (the peer's) address on the target's link.
    pub router_ip: Ipv4Addr,
    /// The target's address.
    pub ip: Ipv4Addr,
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for ns in &self.created {
            kill_ns_processes(ns);
        }
        for ns in &self.created {
            if let Err(e) = run("ip", &["netns", "del", ns]) {
                eprintln!("ringcap-testkit: deleting namespace {ns}: {e}");
            }
        }
    }
}

/// SIGKILLs every process still running inside `ns` (found with `ip netns pids`),
/// waiting up to 2 s for them to go.
fn kill_ns_processes(ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let pids: Vec<i32> = match run("ip", &["netns", "pids", ns]) {
            Ok(o) => String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .filter(|&p: &i32| p > 1 && p as u32 != std::process::id())
                .collect(),
            Err(_) => return,
        };
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for p in pids {
            // SAFETY: kill(2) with a pid we just read from our own namespace.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
