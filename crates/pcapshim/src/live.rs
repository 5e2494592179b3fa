//! One live capture handle: what a `pcap_t` of this library is behind the
//! pointer, in safe Rust.
//!
//! Why a placeholder filter: libpcap tools call `pcap_activate`, then
//! `pcap_setfilter`. The session is opened at activation (so a refusal is
//! reported where libpcap reports it) with a filter that accepts nothing
//! (`less 1`), and the tool's filter replaces it; packets the tool did not
//! ask for never reach it. A tool that reads without setting a filter gets
//! the grant's whole view from its first read on.

use crate::ffi::{BpfInsn, PktHdr, Stat, Timeval};
use crate::reader::{lock, reader, End, Queue, Shared, MAX_HOLD, SLICE};
use ringcap_client::{
    default_socket, Client, ClientError, InjectFrame, InjectStatus, OpenRequest, Pump,
    SessionCounters, Snap, Stop,
};
use ringcap_format::record::{Endian, Header, HEADER_LEN};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The session's filter between activation and the tool's filter.
const PLACEHOLDER: &str = "less 1";
/// Largest snap length libpcap takes (and the daemon).
const MAX_SNAPLEN: u32 = 262_144;
/// Bytes of a record header in the queue (as in the ring).
const RECORD: usize = HEADER_LEN;

/// Settings made before activation (`pcap_set_*`).
#[derive(Debug, Clone)]
pub struct Config {
    pub device: String,
    pub snaplen: i32,
    pub promisc: bool,
    pub timeout_ms: i32,
    pub immediate: bool,
    pub buffer_size: i32,
    pub nano: bool,
}

impl Config {
    pub fn new(device: &str) -> Config {
        Config {
            device: device.to_string(),
            snaplen: MAX_SNAPLEN as i32,
            promisc: false,
            timeout_ms: 0,
            immediate: false,
            buffer_size: 2 * 1024 * 1024,
            nano: false,
        }
    }

    /// How long a packet may wait to be handed out with others: none in
    /// immediate mode, else the tool's timeout (0: none given) up to
    /// `MAX_HOLD`.
    pub fn hold(&self) -> Option<Duration> {
        if self.immediate {
            return None;
        }
        match u64::try_from(self.timeout_ms) {
            Ok(ms) if ms > 0 => Some(Duration::from_millis(ms).min(MAX_HOLD)),
            _ => Some(MAX_HOLD),
        }
    }

    /// The snap length to ask for: libpcap treats 0 and too big as the maximum.
    pub fn snap(&self) -> u32 {
        match u32::try_from(self.snaplen) {
            Ok(n) if (1..=MAX_SNAPLEN).contains(&n) => n,
            _ => MAX_SNAPLEN,
        }
    }
}

/// An activated handle's session.
pub struct Running {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Snap length after the grant's cap.
    pub snaplen: u32,
    /// Whether the tool's (or the empty) filter replaced the placeholder.
    started: bool,
    next_tag: u64,
}

/// Why a read returned without packets.
pub enum NoPacket {
    /// Nothing yet (non-blocking, timeout, or a break).
    Empty,
    /// The session is over; the message says why.
    Over(String),
}

/// A handle: settings, then the session, and the packets being handed out.
pub struct Live {
    pub config: Config,
    pub nonblock: bool,
    pub running: Option<Running>,
    /// The batch being handed out, and how far.
    local: Vec<u8>,
    local_off: usize,
    /// `keep_awake` made the descriptor readable for the batch's rest.
    awake: bool,
    /// Packets handed to the tool (a floor for `pcap_stats`' received:
    /// the daemon's counters can trail what it already delivered).
    handed: u64,
    /// Header of the packet `pcap_next_ex` returned last.
    pub hdr: PktHdr,
    /// Programs `pcap_compile` made on this handle, with their text, newest last.
    programs: Vec<(Vec<BpfInsn>, String)>,
}

/// The message of a refusal or failure, as libpcap tools print it.
pub fn describe(e: &ClientError) -> String {
    match e {
        ClientError::Refused { .. } => format!("ringcapd: {e}"),
        _ => e.to_string(),
    }
}

impl Live {
    pub fn new(device: &str) -> Live {
        Live {
            config: Config::new(device),
            nonblock: false,
            running: None,
            local: Vec::new(),
            local_off: 0,
            awake: false,
            handed: 0,
            hdr: PktHdr::default(),
            programs: Vec::new(),
        }
    }

    /// Opens the session (placeholder filter) and starts the reader.
    pub fn activate(&mut self) -> Result<(), ClientError> {
        let mut req = OpenRequest::new(&self.config.device, PLACEHOLDER);
        req.snaplen = Snap::Bytes(self.config.snap());
        let session = Client::connect(&default_socket())?.open(req)?;
        let snaplen = match session.effective.snaplen {
            Snap::Bytes(n) => n,
            Snap::Headers { max } => max,
        };
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )
        .map_err(|e| ClientError::Io(e.into()))?;
        let limit = usize::try_from(self.config.buffer_size)
            .unwrap_or(0)
            .clamp(64 * 1024, 256 * 1024 * 1024);
        let shared = Arc::new(Shared {
            session: Mutex::new(session),
            queue: Mutex::new(Queue {
                buf: Vec::new(),
                limit,
                end: None,
            }),
            cond: Condvar::new(),
            wake,
            armed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            hold: self.config.hold(),
            last: Mutex::new(SessionCounters::default()),
        });
        // The tool's signals (SIGINT, SIGPIPE...) must reach its own
        // threads, never this one: block them all while spawning.
        use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
        let mut old = SigSet::empty();
        let _ = pthread_sigmask(
            SigmaskHow::SIG_SETMASK,
            Some(&SigSet::all()),
            Some(&mut old),
        );
        let s2 = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("ringcap-pcap".into())
            .spawn(move || reader(s2));
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        let thread = spawned.map_err(ClientError::Io)?;
        self.running = Some(Running {
            shared,
            thread: Some(thread),
            snaplen,
            started: false,
            next_tag: 0,
        });
        Ok(())
    }

    fn running(&mut self) -> Result<&mut Running, String> {
        self.running
            .as_mut()
            .ok_or_else(|| "the handle is not activated".to_string())
    }

    /// Remembers a program `pcap_compile` made from `text`.
    pub fn remember(&mut self, insns: Vec<BpfInsn>, text: String) {
        self.programs.retain(|(i, _)| *i != insns);
        self.programs.push((insns, text));
        if self.programs.len() > 64 {
            self.programs.remove(0);
        }
    }

    /// The text of a program compiled on this handle.
    pub fn text_of(&self, insns: &[BpfInsn]) -> Option<String> {
        self.programs
            .iter()
            .rev()
            .find(|(i, _)| i == insns)
            .map(|(_, t)| t.clone())
    }

    /// Replaces the filter; packets read before are discarded (as
    /// libpcap discards what its socket held).
    pub fn set_filter(&mut self, text: &str) -> Result<(), String> {
        let r = self.running()?;
        {
            let mut s = lock(&r.shared.session);
            s.set_filter(text).map_err(|e| describe(&e))?;
            r.shared.generation.fetch_add(1, Ordering::AcqRel);
            let _ = s.chunks(|_| {});
        }
        r.started = true;
        let mut q = lock(&r.shared.queue);
        q.buf.clear();
        r.shared.clear();
        r.shared.cond.notify_all();
        drop(q);
        self.local.clear();
        self.local_off = 0;
        Ok(())
    }

    /// The eventfd (readable while packets wait). Before the capture has
    /// started it is made readable, so a tool that waits on it before
    /// reading gets to call a read, which starts the capture.
    pub fn selectable_fd(&mut self) -> RawFd {
        match &self.running {
            Some(r) => {
                if !r.started {
                    let _q = lock(&r.shared.queue);
                    r.shared.arm();
                }
                r.shared.wake.as_fd().as_raw_fd()
            }
            None => -1,
        }
    }

    /// Makes sure a batch is there to hand out; `block`: wait for one
    /// (up to the timeout, or a break).
    fn fill(&mut self, block: bool, brk: &AtomicBool) -> Result<(), NoPacket> {
        if self.local_off < self.local.len() {
            return Ok(());
        }
        if !self.running.as_ref().is_some_and(|r| r.started) {
            self.set_filter("").map_err(NoPacket::Over)?;
        }
        let timeout = (self.config.timeout_ms > 0 && !self.config.immediate)
            .then(|| Duration::from_millis(self.config.timeout_ms as u64));
        let start = Instant::now();
        let Some(r) = self.running.as_ref() else {
            return Err(NoPacket::Over("the handle is not activated".into()));
        };
        let mut q = lock(&r.shared.queue);
        loop {
            if !q.buf.is_empty() {
                self.local.clear();
                std::mem::swap(&mut self.local, &mut q.buf);
                self.local_off = 0;
                r.shared.clear();
                r.shared.cond.notify_all();
                return Ok(());
            }
            match &q.end {
                Some(End::Ended(reason)) => {
                    return Err(NoPacket::Over(format!(
                        "ringcapd ended the session: {reason}"
                    )))
                }
                Some(End::Failed(e)) => return Err(NoPacket::Over(e.clone())),
                None => {}
            }
            if !block || brk.load(Ordering::Relaxed) {
                // Nothing waits: the descriptor must not say otherwise (it
                // may still be readable from a batch handed out earlier).
                r.shared.clear();
                return Err(NoPacket::Empty);
            }
            let mut wait = SLICE;
            if let Some(t) = timeout {
                let left = t.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return Err(NoPacket::Empty);
                }
                wait = wait.min(left);
            }
            q = r
                .shared
                .cond
                .wait_timeout(q, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Packets left in the batch keep the descriptor readable (a tool
    /// that reads one packet per wake-up, as dumpcap does, must be woken
    /// for the rest); `fill` clears it once nothing is left.
    fn keep_awake(&mut self) {
        let Some(r) = &self.running else {
            return;
        };
        if self.local_off < self.local.len() {
            let _q = lock(&r.shared.queue);
            r.shared.arm();
            self.awake = true;
        } else if self.awake {
            // The batch is done: readable only if the reader queued more.
            self.awake = false;
            let q = lock(&r.shared.queue);
            if q.buf.is_empty() && q.end.is_none() {
                r.shared.clear();
            }
        }
    }

    /// The next packet of the batch: its header (timestamps at the handle's
    /// precision) and a pointer to its bytes (valid until the next read).
    fn take(&mut self) -> Option<(PktHdr, *const u8)> {
        let p = self.local.get(self.local_off..)?;
        let h = Header::read(p, Endian::Little)?;
        let (sec, nsec, caplen, wire) = (h.secs, h.frac, h.caplen, h.wire_len);
        let end = (RECORD + caplen as usize).min(p.len());
        let data = p[RECORD..end].as_ptr();
        self.local_off += end;
        self.handed += 1;
        let frac = if self.config.nano { nsec } else { nsec / 1000 };
        let hdr = PktHdr {
            ts: Timeval {
                tv_sec: libc::c_long::from(sec),
                tv_usec: libc::c_long::from(frac),
            },
            caplen: (end - RECORD) as u32,
            len: wire,
        };
        Some((hdr, data))
    }

    /// Reads up to `max` packets (0: the batch there is), calling `f` for
    /// each; blocks for the first unless non-blocking. `Ok(n)`, or the
    /// break (`Ok` with `brk` left set for the caller) or the end.
    pub fn dispatch(
        &mut self,
        max: usize,
        brk: &AtomicBool,
        mut f: impl FnMut(&PktHdr, *const u8),
    ) -> Result<usize, NoPacket> {
        let block = !self.nonblock;
        match self.fill(block, brk) {
            Ok(()) => {}
            Err(NoPacket::Empty) => return Ok(0),
            Err(e) => return Err(e),
        }
        let mut n = 0;
        while max == 0 || n < max {
            if n > 0 && brk.load(Ordering::Relaxed) {
                break;
            }
            let Some((hdr, data)) = self.take() else {
                break;
            };
            f(&hdr, data);
            n += 1;
        }
        self.keep_awake();
        Ok(n)
    }

    /// One packet, for `pcap_next_ex`: stored in `self.hdr`.
    pub fn next(&mut self, brk: &AtomicBool) -> Result<Option<*const u8>, NoPacket> {
        let block = !self.nonblock;
        match self.fill(block, brk) {
            Ok(()) => {}
            Err(NoPacket::Empty) => return Ok(None),
            Err(e) => return Err(e),
        }
        let got = self.take().map(|(h, d)| {
            self.hdr = h;
            d
        });
        self.keep_awake();
        Ok(got)
    }

    /// The daemon's counters as `pcap_stats` reports them: received =
    /// accepted by the combined filter (at least what was handed out),
    /// dropped = dropped in the daemon's kernel ring + in this session's
    /// ring.
    pub fn stats(&mut self) -> Result<Stat, String> {
        let handed = self.handed;
        let r = self.running()?;
        let c = {
            // The reader holds the session for at most one SLICE at a time.
            let asked = lock(&r.shared.session).stats();
            match asked {
                Ok(c) => {
                    *lock(&r.shared.last) = c;
                    c
                }
                // Ended: the final counters the reader kept.
                Err(_) => *lock(&r.shared.last),
            }
        };
        let clip = |v: u64| v as u32; // libpcap's counters are 32-bit and wrap
        Ok(Stat {
            ps_recv: clip(c.packets_filter_accepted.max(handed)),
            ps_drop: clip(c.packets_dropped_ring + c.packets_dropped_client),
            ps_ifdrop: 0,
        })
    }

    /// Sends one frame through the grant's inject rights; waits for its report.
    pub fn inject(&mut self, frame: &[u8]) -> Result<(), String> {
        let r = self.running()?;
        r.next_tag += 1;
        let tag = r.next_tag;
        let mut s = lock(&r.shared.session);
        s.inject(vec![InjectFrame {
            tag,
            at_ns: 0,
            tolerance_ns: 1_000_000_000,
            data: frame.to_vec(),
        }])
        .map_err(|e| describe(&e))?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let reports = s.inject_reports().map_err(|e| describe(&e))?;
            if let Some(rep) = reports.into_iter().find(|rep| rep.tag == tag) {
                return match rep.status {
                    InjectStatus::Sent => Ok(()),
                    st => Err(format!(
                        "ringcapd did not send the frame ({st:?}): {}",
                        rep.reason.unwrap_or_default()
                    )),
                };
            }
            if Instant::now() > deadline {
                return Err("ringcapd did not report on the frame within 5 s".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(mut r) = self.running.take() {
            r.shared.stop.store(true, Ordering::Release);
            r.shared.cond.notify_all();
            if let Some(t) = r.thread.take() {
                let _ = t.join();
            }
            // Ended as every client ends it (ringcap-client's loop); what
            // the ring still holds is not wanted any more.
            let mut pump = Pump::new(None);
            pump.stop(Stop::Interrupted);
            let _ = pump.finish(&mut lock(&r.shared.session), |_| {});
        }
    }
}

/// Whether ringcapd admits this user on `device`: a probe session with the
/// placeholder filter, closed at once (the protocol has no "which
/// interfaces may I use" request; `ringcap extcap` probes the same way).
/// `Err` only when the daemon cannot be asked at all.
pub fn admitted(device: &str) -> Result<bool, ClientError> {
    let client = Client::connect(&default_socket())?;
    let mut req = OpenRequest::new(device, PLACEHOLDER);
    req.snaplen = Snap::Bytes(64);
    match client.open(req) {
        Ok(s) => {
            let _ = s.close();
            Ok(true)
        }
        Err(ClientError::Io(e)) => Err(ClientError::Io(e)),
        Err(_) => Ok(false),
    }
}
