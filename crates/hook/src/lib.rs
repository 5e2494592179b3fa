//! Capture hooks besides AF_PACKET's protocol handler: a BPF program at the
//! driver (XDP) or at netfilter's pre-routing point copies packets into a BPF
//! ring buffer, which the capture thread reads in place ([`ring`]).
//!
//! The programs (bpf/*.bpf.c) are compiled by clang in this crate's build
//! script and loaded with libbpf-rs; they are attached with BPF links, which
//! the kernel removes when the last descriptor closes, so nothing is left on
//! an interface after any exit of the process, SIGKILL included.
//!
//! # Why XDP copies into a ring buffer instead of redirecting to AF_XDP
//!
//! The hook is for capture, not interception: every packet must go on to
//! the host (`XDP_PASS`). An XDP program can either pass a frame or redirect
//! it to an AF_XDP socket, not both: `bpf_redirect_map` into an XSKMAP hands
//! the frame to the socket and the stack never sees it. To keep the host's
//! traffic untouched with AF_XDP, user space would have to re-inject every
//! frame (a transmit per packet, and a changed path for the host's traffic),
//! which is interception with extra steps. So the program copies the first
//! `copy_len` bytes of each frame (`bpf_xdp_load_bytes`) into a BPF ring
//! buffer and returns `XDP_PASS`. On veth, as on any driver without
//! zero-copy AF_XDP, a copy-mode AF_XDP socket would copy the frame too, so
//! the copy costs nothing that AF_XDP would have saved here; with zero-copy
//! drivers a redirect saves the copy but takes the packet from the host.
//! (Also, xsk-rs and libbpf-rs 0.27 cannot share one dependency graph.)
//!
//! # The filter
//!
//! With XDP the capture filter runs in the kernel, before any copy: libpcap's
//! classic BPF program is translated to eBPF ([`cbpf`], encoded by [`ebpf`],
//! loaded from instructions by [`raw`]: no clang at run time) and that
//! program is what is attached. On a match it leaves the snap length in the
//! per-CPU scratch record and tail-calls `ringcap_xdp_filtered` (through the
//! `progs` PROG_ARRAY), which copies that many bytes; frames it rejects are
//! never copied. With [`XdpOptions::monitor`] both return `XDP_DROP`, so no
//! frame of the interface becomes an skb (a monitor port: the host loses
//! the interface's traffic). The translation is checked against libpcap's
//! interpreter in the kernel (tests/cbpf.rs).
//!
//! Otherwise (netfilter, or a program the translator refuses) tcpdump's
//! filter runs in user space, per packet of each batch, as libpcap's
//! compiled classic BPF (the same program and interpreter as `-r`), so
//! filters are tcpdump's exactly. For that the program must copy every byte
//! the filter can read: the copy length is the snap length or, when larger,
//! the filter's reach ([`copy_len`]), so a small snap length does not change
//! what the filter accepts.

pub mod cbpf;
pub mod ebpf;
pub mod raw;
pub mod ring;
mod xdp_filter;

use libbpf_rs::{
    Link, MapCore, MapFlags, MapHandle, Object, ObjectBuilder, OpenObject, PrintLevel,
};
use ring::RingReader;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
pub use xdp_filter::XdpOptions;
use xdp_filter::{attach_filtered, XDP_DROP, XDP_PASS};

static XDP_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xdp.bpf.o"));
static NETFILTER_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/netfilter.bpf.o"));

/// Most bytes the programs copy of one packet (`RINGCAP_MAX_COPY` in
/// bpf/record.h): longer packets are recorded with their whole length and
/// their first this many bytes.
pub const MAX_COPY: u32 = 16384;
/// Bytes of the record header before a packet's data (bpf/record.h).
const RECORD_HEADER: usize = 16;
/// `LINKTYPE_RAW`: packets that start with an IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;
/// Netfilter hook priority: before conntrack's defragmentation (-400), so
/// fragments are seen as they arrived.
const NETFILTER_PRIORITY: i32 = -450;
/// Priorities tried from [`NETFILTER_PRIORITY`] on (all below -400).
const NETFILTER_PRIORITIES: i32 = 40;
/// The kernel's internal "not supported" errno, which reaches user space.
const ENOTSUPP: i32 = 524;

/// Where in the kernel packets are taken (one definition, in ringcap-source,
/// so that a build without this crate names the hooks alike).
pub use ringcap_source::Hook;

/// What kind of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The system refused: no support in the kernel or driver, a missing
    /// capability, the interface busy with another XDP program.
    System,
    /// Anything else.
    Runtime,
}

/// Why a hook could not be set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookError {
    /// What kind.
    pub kind: ErrorKind,
    /// What is missing, and what to do.
    pub message: String,
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HookError {}

fn system(message: String) -> HookError {
    HookError {
        kind: ErrorKind::System,
        message,
    }
}

fn runtime(message: String) -> HookError {
    HookError {
        kind: ErrorKind::Runtime,
        message,
    }
}

/// The counters the program keeps (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HookCounters {
    /// Packets the program ran on (for netfilter: on this interface).
    pub seen: u64,
    /// Records written into the ring buffer.
    pub delivered: u64,
    /// Packets with no record: the ring buffer was full.
    pub dropped: u64,
}

/// One packet read from the ring buffer.
#[derive(Debug, Clone, Copy)]
pub struct HookPacket<'a> {
    /// Capture time, ns since the epoch (CLOCK_REALTIME).
    pub ts_ns: u64,
    /// The packet's whole length.
    pub wire_len: u32,
    /// Its first bytes.
    pub data: &'a [u8],
}

/// The classic BPF program's reach: how many bytes from the start of the
/// packet it can read, or `None` when that is not bounded (indirect loads
/// with an index register that can come from packet data other than an IP
/// header length, or from scratch memory). `insns` are (code, k) pairs.
pub fn filter_reach(insns: impl IntoIterator<Item = (u16, u32)>) -> Option<u32> {
    const LD: u16 = 0x00;
    const LDX: u16 = 0x01;
    const ABS: u16 = 0x20;
    const IND: u16 = 0x40;
    const MSH: u16 = 0xa0;
    const IMM: u16 = 0x00;
    const LEN: u16 = 0x80;
    const MISC: u16 = 0x07;
    const TAX: u16 = 0x00;
    // Ancillary loads (SKF_AD_OFF = -0x1000 and below) read no packet bytes.
    const ANCILLARY: u32 = 0xffff_f000;
    let size = |code: u16| match code & 0x18 {
        0x00 => 4,
        0x08 => 2,
        _ => 1,
    };
    let mut reach: u64 = 0;
    let mut x_max: Option<u64> = Some(0);
    let mut ind: Vec<(u32, u64)> = Vec::new();
    for (code, k) in insns {
        let class = code & 0x07;
        let mode = code & 0xe0;
        match class {
            LD if mode == ABS && k < ANCILLARY => reach = reach.max(u64::from(k) + size(code)),
            LD if mode == IND => ind.push((k, size(code))),
            LDX if mode == MSH => {
                reach = reach.max(u64::from(k) + 1);
                x_max = x_max.map(|x| x.max(60));
            }
            LDX if mode == IMM || mode == LEN => {
                let v = if mode == IMM { u64::from(k) } else { u64::MAX };
                x_max = x_max.map(|x| x.max(v));
            }
            LDX => x_max = None,
            MISC if code & 0xf8 == TAX => x_max = None,
            _ => {}
        }
    }
    for (k, s) in ind {
        let x = x_max?;
        reach = reach.max(x.checked_add(u64::from(k))?.checked_add(s)?);
    }
    u32::try_from(reach).ok()
}

/// Bytes the program must copy for a snap length of `snaplen` and a filter
/// of reach `reach` ([`filter_reach`]), at most [`MAX_COPY`].
pub fn copy_len(snaplen: u32, reach: Option<u32>) -> u32 {
    snaplen.max(reach.unwrap_or(MAX_COPY)).min(MAX_COPY)
}

/// libbpf's last messages (the verifier's log of a failed load).
static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn keep_log(level: PrintLevel, msg: String) {
    // Debug builds only: the shipped binary reads no debugging variable.
    if cfg!(debug_assertions) && std::env::var_os("RINGCAP_BPF_DEBUG").is_some() {
        eprint!("{msg}");
    }
    if matches!(level, PrintLevel::Debug) {
        return;
    }
    if let Ok(mut l) = LOG.lock() {
        l.push(msg);
        let n = l.len();
        if n > 40 {
            l.drain(..n - 40);
        }
    }
}

fn log_tail() -> String {
    LOG.lock()
        .map(|mut l| {
            let lines: Vec<String> = l.drain(..).collect();
            lines.concat().trim_end().to_string()
        })
        .unwrap_or_default()
}

/// Turns the OS error of a failed libbpf call into a message naming what is
/// missing.
fn explain(
    what: &str,
    e: &libbpf_rs::Error,
    os: io::Error,
    hint: impl Fn(i32) -> Option<String>,
) -> HookError {
    let errno = os.raw_os_error().unwrap_or(0);
    if matches!(errno, libc::EPERM | libc::EACCES)
        || e.kind() == libbpf_rs::ErrorKind::PermissionDenied
    {
        return system(format!(
            "permission denied while {what}: BPF capture hooks need CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN); run as root"
        ));
    }
    if let Some(h) = hint(errno) {
        return system(format!("{what}: {h} ({e})"));
    }
    let log = log_tail();
    let log = if log.is_empty() {
        String::new()
    } else {
        format!("\nlibbpf said:\n{log}")
    };
    runtime(format!("{what}: {e:#} ({os}){log}"))
}

/// A loaded and attached hook program with its ring buffer. Dropping it
/// unmaps the ring, detaches the links and unloads the program.
pub struct HookCapture {
    // Fields drop in order: the mapping, then the links, then the programs.
    ring: RingReader,
    links: Vec<Link>,
    /// The translated filter's link and program (XDP with a kernel filter).
    filter_link: Option<OwnedFd>,
    _filter: Option<raw::XdpProgram>,
    counters: MapHandle,
    _object: Object,
    /// CLOCK_REALTIME - CLOCK_TAI, ns (0 on most systems, but not assumed).
    tai_to_realtime: i64,
    hook: Hook,
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, nothing else.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// Power of two ring buffer size for about `bytes` (1 MiB to 1 GiB).
pub fn ring_size(bytes: u64) -> u32 {
    let b = bytes.clamp(1 << 20, 1 << 30);
    1 << (63 - b.leading_zeros())
}

impl HookCapture {
    /// Loads the program of `hook` for interface `ifname` (index `ifindex`),
    /// copying `copy_len` bytes of each packet into a ring buffer of about
    /// `ring_bytes`, and attaches it. `Hook::Packet` is not a BPF hook.
    pub fn open(
        hook: Hook,
        ifname: &str,
        ifindex: i32,
        copy_len: u32,
        ring_bytes: u64,
        xdp: &XdpOptions,
    ) -> Result<HookCapture, HookError> {
        static PRINT: std::sync::Once = std::sync::Once::new();
        PRINT.call_once(|| {
            libbpf_rs::set_print(Some((PrintLevel::Debug, keep_log)));
        });
        let bytes = match hook {
            Hook::Xdp => XDP_OBJECT,
            Hook::Netfilter => {
                if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
                    return Err(system(
                        "--hook netfilter needs the kernel's BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF), which this kernel does not have".into(),
                    ));
                }
                NETFILTER_OBJECT
            }
            Hook::Packet => {
                return Err(runtime(
                    "the packet hook is AF_PACKET, not a BPF program".into(),
                ))
            }
        };
        let mut open: OpenObject = ObjectBuilder::default()
            .open_memory(bytes)
            .map_err(|e| runtime(format!("opening the {hook} program: {e:#}")))?;
        let size = ring_size(ring_bytes);
        for mut m in open.maps_mut() {
            let name = m.name().to_string_lossy().into_owned();
            if name == "ring" {
                m.set_max_entries(size)
                    .map_err(|e| runtime(format!("sizing the ring buffer: {e:#}")))?;
            } else if name.ends_with(".rodata") {
                let v = m
                    .initial_value_mut()
                    .filter(|v| v.len() >= 12)
                    .ok_or_else(|| runtime("the program has no configuration".into()))?;
                let verdict = if xdp.monitor { XDP_DROP } else { XDP_PASS };
                v[0..4].copy_from_slice(&copy_len.min(MAX_COPY).to_ne_bytes());
                v[4..8].copy_from_slice(&(ifindex as u32).to_ne_bytes());
                v[8..12].copy_from_slice(&verdict.to_ne_bytes());
            }
        }
        let _ = log_tail();
        let object = open.load().map_err(|e| {
            let os = io::Error::last_os_error();
            explain(&format!("loading the {hook} program"), &e, os, |errno| {
                (hook == Hook::Netfilter && matches!(errno, libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP)).then(|| {
                    "the kernel does not accept BPF netfilter programs (they need Linux 6.4 or later built with CONFIG_NETFILTER_BPF_LINK)".to_string()
                })
            })
        })?;
        let find = |name: &str| {
            object
                .maps()
                .find(|m| m.name() == name)
                .ok_or_else(|| runtime(format!("the {hook} program has no map '{name}'")))
        };
        let ring_map = find("ring")?;
        let ring = RingReader::map(ring_map.as_fd(), u64::from(size))
            .map_err(|e| runtime(format!("mapping the ring buffer: {e}")))?;
        let counters = MapHandle::try_from(&find("counters")?)
            .map_err(|e| runtime(format!("opening the counters: {e:#}")))?;
        let mut filter_link = None;
        let mut filter_prog = None;
        if let (Hook::Xdp, Some(filter)) = (hook, &xdp.filter) {
            let (prog, link) = attach_filtered(&object, filter, xdp.monitor, ifname, ifindex)?;
            filter_prog = Some(prog);
            filter_link = Some(link);
        }
        let main_name = match hook {
            Hook::Xdp => "ringcap_xdp",
            _ => "ringcap_netfilter",
        };
        let prog = object
            .progs_mut()
            .find(|p| p.name() == main_name)
            .ok_or_else(|| runtime(format!("the {hook} object has no program {main_name}")))?;
        let mut links = Vec::new();
        match hook {
            Hook::Xdp if filter_link.is_some() => {}
            Hook::Xdp => {
                let link = prog.attach_xdp(ifindex).map_err(|e| {
                    let os = io::Error::last_os_error();
                    explain(&format!("attaching the XDP program to {ifname}"), &e, os, |errno| match errno {
                        libc::EBUSY | libc::EEXIST => Some(format!(
                            "another XDP program is attached to {ifname} (see `ip link show {ifname}`); ringcap does not replace it"
                        )),
                        libc::EOPNOTSUPP | libc::EINVAL => Some(format!(
                            "the driver of {ifname} (or the kernel) does not support XDP programs"
                        )),
                        _ => None,
                    })
                })?;
                links.push(link);
            }
            Hook::Netfilter => {
                for pf in [libc::NFPROTO_IPV4, libc::NFPROTO_IPV6] {
                    let family = if pf == libc::NFPROTO_IPV4 {
                        "IPv4"
                    } else {
                        "IPv6"
                    };
                    // The kernel takes one BPF program per hook and priority
                    // (EBUSY otherwise): other captures may hold the first
                    // priorities, so try the next ones, all before
                    // defragmentation.
                    let mut attached = None;
                    for priority in NETFILTER_PRIORITY..NETFILTER_PRIORITY + NETFILTER_PRIORITIES {
                        let opts = libbpf_rs::NetfilterOpts {
                            protocol_family: pf,
                            hooknum: libc::NF_INET_PRE_ROUTING,
                            priority,
                            ..Default::default()
                        };
                        match prog.attach_netfilter_with_opts(opts) {
                            Ok(link) => {
                                attached = Some(Ok(link));
                                break;
                            }
                            Err(e) => {
                                let os = io::Error::last_os_error();
                                let busy = os.raw_os_error() == Some(libc::EBUSY);
                                attached = Some(Err(explain(
                                    &format!(
                                        "attaching the netfilter program at {family} pre-routing"
                                    ),
                                    &e,
                                    os,
                                    |errno| {
                                        match errno {
                                    libc::EBUSY => Some(format!("{NETFILTER_PRIORITIES} other BPF programs hold the pre-routing priorities ringcap uses")),
                                    libc::EINVAL | libc::EOPNOTSUPP | libc::EAFNOSUPPORT | ENOTSUPP => Some(format!("the kernel cannot attach BPF programs to {family} netfilter hooks (needs Linux 6.4+ with CONFIG_NETFILTER_BPF_LINK, and {family} support)")),
                                    _ => None,
                                }
                                    },
                                )));
                                if !busy {
                                    break;
                                }
                            }
                        }
                    }
                    match attached {
                        Some(Ok(link)) => links.push(link),
                        Some(Err(e)) => return Err(e),
                        None => return Err(runtime("no netfilter priority to try".into())),
                    }
                }
            }
            Hook::Packet => {}
        }
        let tai_to_realtime = (clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_TAI)) as i64;
        Ok(HookCapture {
            ring,
            links,
            filter_link,
            _filter: filter_prog,
            counters,
            _object: object,
            tai_to_realtime,
            hook,
        })
    }

    /// The hook.
    pub fn hook(&self) -> Hook {
        self.hook
    }

    /// Links attached (1 for XDP, 2 for netfilter: IPv4 and IPv6).
    pub fn links(&self) -> usize {
        self.links.len() + usize::from(self.filter_link.is_some())
    }

    /// True when the capture filter runs in the XDP program.
    pub fn kernel_filter(&self) -> bool {
        self.filter_link.is_some()
    }

    /// The program's counters now.
    pub fn counters(&self) -> Result<HookCounters, String> {
        let mut sums = [0u64; 3];
        for (i, sum) in sums.iter_mut().enumerate() {
            let per_cpu = self
                .counters
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| format!("reading the hook's counters: {e:#}"))?
                .unwrap_or_default();
            *sum = per_cpu
                .iter()
                .filter_map(|v| v.get(..8))
                .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
                .sum();
        }
        Ok(HookCounters {
            seen: sums[0],
            delivered: sums[1],
            dropped: sums[2],
        })
    }

    /// True when packets are waiting in the ring buffer.
    pub fn has_data(&self) -> bool {
        self.ring.has_data()
    }

    /// Bytes waiting in the ring buffer, and its size.
    pub fn backlog(&self) -> (u64, u64) {
        self.ring.backlog()
    }

    /// Hands up to `max_packets` waiting packets (and about `max_bytes`) to
    /// `each` in order; `each` returns false to stop after its packet.
    /// Returns how many were handed over.
    pub fn read_batch<F: FnMut(HookPacket<'_>) -> bool>(
        &mut self,
        max_packets: usize,
        max_bytes: u64,
        mut each: F,
    ) -> usize {
        let offset = self.tai_to_realtime;
        self.ring.read_batch(max_packets, max_bytes, |rec| {
            let Some((header, rest)) = rec.split_at_checked(RECORD_HEADER) else {
                return true;
            };
            let word = |at: usize, n: usize| {
                let mut b = [0u8; 8];
                b[..n].copy_from_slice(&header[at..at + n]);
                u64::from_ne_bytes(b)
            };
            let ts = word(0, 8);
            let wire_len = word(8, 4) as u32;
            let cap = (word(12, 4) as usize).min(rest.len());
            each(HookPacket {
                ts_ns: ts.saturating_add_signed(offset),
                wire_len,
                data: &rest[..cap],
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_parse() {
        assert_eq!("xdp".parse::<Hook>(), Ok(Hook::Xdp));
        assert_eq!("netfilter".parse::<Hook>(), Ok(Hook::Netfilter));
        assert_eq!("packet".parse::<Hook>(), Ok(Hook::Packet));
        assert!("tc".parse::<Hook>().is_err());
        assert_eq!(Hook::Netfilter.linktype(1), LINKTYPE_RAW);
        assert_eq!(Hook::Xdp.linktype(1), 1);
    }

    #[test]
    fn ring_sizes_are_powers_of_two() {
        assert_eq!(ring_size(256 << 20), 256 << 20);
        assert_eq!(ring_size(300 << 20), 256 << 20);
        assert_eq!(ring_size(1), 1 << 20);
        assert_eq!(ring_size(u64::MAX), 1 << 30);
    }

    #[test]
    fn reach_of_absolute_and_header_length_loads() {
        // ldh [12]; jeq #0x800; ldb [23]; ret
        assert_eq!(
            filter_reach([(0x28, 12), (0x15, 0x800), (0x30, 23), (0x06, 96)]),
            Some(24)
        );
        // ldxb 4*([14]&0xf); ldh [x + 16]: at most 60 + 16 + 2.
        assert_eq!(filter_reach([(0xb1, 14), (0x48, 16), (0x06, 96)]), Some(78));
        // tax makes the index unbounded.
        assert_eq!(filter_reach([(0x30, 14), (0x07, 0), (0x48, 16)]), None);
        // ldx M[1] too.
        assert_eq!(filter_reach([(0x61, 1), (0x50, 0)]), None);
        // Ancillary loads read no packet bytes.
        assert_eq!(filter_reach([(0x20, 0xffff_f038), (0x06, 1)]), Some(0));
        assert_eq!(copy_len(64, Some(78)), 78);
        assert_eq!(copy_len(64, None), MAX_COPY);
        assert_eq!(copy_len(262_144, Some(10)), MAX_COPY);
    }
}
