//! One live capture handle: what a `pcap_t` of this library is behind the
//! pointer, in safe Rust.
//!
//! Why a placeholder filter: libpcap tools call `pcap_activate`, then
//! `pcap_setfilter`. The session is opened at activation (so a refusal is
//! reported where libpcap reports it) with a filter that accepts nothing
//! (`less 1`), and the tool's filter replaces it; packets the tool did not
//! ask for never reach it. A tool that reads without setting a filter gets
//! the grant's whole view from its first read on.
//!
//! Why no copy and no thread: the tool's own thread reads the session's
//! shared ring, and `pcap_dispatch` / `pcap_next_ex` hand it pointers to
//! the records where the daemon wrote them (libpcap hands out its kernel
//! ring's frames the same way): a chunk stays held in the ring until the
//! next read moves past it ([`ringcap_client::Session::hold_next`]). A
//! blocking read that finds the ring empty naps a few milliseconds if the
//! previous read found packets (the daemon then appends several chunks
//! without writing a wake-up), else sleeps on the ring's wake-up pipe.
//! `pcap_get_selectable_fd` is an epoll descriptor over the ring's wake-up
//! pipe, the connection to the daemon (its end notice) and an eventfd of
//! this handle: after each read, the eventfd is made readable if packets
//! are still waiting, else the daemon is asked for a wake-up at its next
//! append — so the descriptor is readable exactly while packets (or the
//! end) wait, with no thread watching the ring.

use crate::ffi::{BpfInsn, PktHdr, Stat, Timeval};
use ringcap_client::{
    default_socket, Batch, Client, ClientError, Held, InjectFrame, InjectStatus, OpenRequest, Pump,
    Session, SessionCounters, Snap, Stop, BUSY_NAP,
};
use ringcap_format::record::{Endian, Header, HEADER_LEN};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::Seen;
use std::time::{Duration, Instant};

/// The session's filter between activation and the tool's filter.
const PLACEHOLDER: &str = "less 1";
/// Largest snap length libpcap takes (and the daemon).
const MAX_SNAPLEN: u32 = 262_144;
/// Bytes of a record header in the ring.
const RECORD: usize = HEADER_LEN;
/// How long a blocking read sleeps at a time (it checks for a break).
const SLICE: Duration = Duration::from_millis(50);

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
    session: Session,
    /// The session's loop (ringcap-client's): its end, and the close.
    pump: Pump,
    /// The chunk being handed out, and how far.
    held: Option<Held>,
    off: usize,
    /// Records handed over with the session's end (copied), and how far.
    tail: Vec<u8>,
    tail_off: usize,
    /// Why the session is over, once it is and nothing is left to read.
    over: Option<String>,
    /// The last read found packets: a blocking read naps instead of
    /// asking the daemon for a wake-up.
    busy: bool,
    /// The selectable descriptor (epoll), and the eventfd in it that says
    /// "packets are waiting".
    epoll: OwnedFd,
    mark: OwnedFd,
    marked: bool,
    /// The daemon was asked for a wake-up (`begin_sleep`) when the last
    /// read returned.
    asleep: bool,
    /// The daemon's final counters, once it ended the session.
    last: SessionCounters,
    /// Snap length after the grant's cap.
    pub snaplen: u32,
    /// Whether the tool's (or the empty) filter replaced the placeholder.
    started: bool,
    next_tag: u64,
    /// The process that opened the session: a child of a fork() that
    /// closes its copy of the handle must not end its parent's session.
    pid: u32,
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
    /// Header of the packet `pcap_next_ex` returned last.
    pub hdr: PktHdr,
    /// Programs `pcap_compile` made on this handle, with their text, newest last.
    programs: Vec<(Vec<BpfInsn>, String)>,
    /// What nested calls read (the handle's, shared); also the count of
    /// packets handed to the tool.
    seen: Arc<Seen>,
    /// When a waiting read last refreshed `seen`'s counters from the daemon.
    polled: Instant,
}

/// The message of a refusal or failure, as libpcap tools print it.
pub fn describe(e: &ClientError) -> String {
    match e {
        ClientError::Refused { .. } => format!("ringcapd: {e}"),
        _ => e.to_string(),
    }
}

fn io(e: rustix::io::Errno) -> ClientError {
    ClientError::Io(e.into())
}

impl Running {
    /// Makes the selectable descriptor readable (or not) through the
    /// eventfd; a system call only when that changes.
    fn mark(&mut self, on: bool) {
        if on == self.marked {
            return;
        }
        self.marked = on;
        if on {
            let _ = rustix::io::write(&self.mark, &1u64.to_ne_bytes());
        } else {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&self.mark, &mut b);
        }
    }

    /// Whether packets wait to be handed out here.
    fn have(&self) -> bool {
        self.tail_off < self.tail.len()
            || self
                .held
                .as_ref()
                .is_some_and(|h| self.off < self.session.held(h).len())
    }

    /// At the start of a read: the sleep asked for at the end of the last
    /// one is over.
    fn wake(&mut self) {
        if self.asleep {
            self.asleep = false;
            self.session.end_sleep();
        }
    }

    /// At the end of a read: the descriptor becomes readable if packets
    /// (or the end) wait, else the daemon is asked for a wake-up.
    fn settle(&mut self) {
        if !self.started {
            return;
        }
        let waiting = self.have() || self.over.is_some() || self.session.begin_sleep();
        self.asleep = !waiting;
        self.mark(waiting);
    }

    /// Makes sure packets are there to hand out, taking the next chunk
    /// from the ring (or, at the session's end, what it still held).
    /// `Ok(false)`: none now.
    fn fill(&mut self) -> Result<bool, NoPacket> {
        loop {
            if self.have() {
                return Ok(true);
            }
            if let Some(why) = &self.over {
                return Err(NoPacket::Over(why.clone()));
            }
            self.tail.clear();
            self.tail_off = 0;
            let fail = |e: ClientError| NoPacket::Over(describe(&e));
            self.held = self.session.hold_next().map_err(fail)?;
            self.off = 0;
            if self.held.is_some() {
                continue;
            }
            // Nothing in the ring: over? (What the daemon delivered before
            // its end is handed over here.)
            let tail = &mut self.tail;
            let end = self
                .pump
                .finish(&mut self.session, |b| {
                    if let Batch::Records(r) = b {
                        tail.extend_from_slice(r.bytes);
                    }
                })
                .map_err(fail)?;
            match end {
                Some(end) => {
                    self.last = end.counters;
                    self.over = Some(format!("ringcapd ended the session: {}", end.reason));
                }
                None => return Ok(false),
            }
        }
    }

    /// Waits up to `limit` for packets: a nap while the traffic keeps
    /// coming, else a sleep on the ring.
    fn wait(&mut self, limit: Duration, immediate: bool) -> Result<(), NoPacket> {
        if self.busy && !immediate {
            std::thread::sleep(BUSY_NAP.min(limit));
            return Ok(());
        }
        self.session
            .wait(limit)
            .map(|_| ())
            .map_err(|e| NoPacket::Over(describe(&e)))
    }

    /// The next packet: its header (timestamps at `nano` precision or
    /// micro) and a pointer to its bytes, valid until the next read.
    fn take(&mut self, nano: bool) -> Option<(PktHdr, *const u8)> {
        let p = if self.tail_off < self.tail.len() {
            &self.tail[self.tail_off..]
        } else {
            let h = self.held.as_ref()?;
            self.session.held(h).get(self.off..)?
        };
        let Some(h) = Header::read(p, Endian::Little) else {
            // Stray bytes after a chunk's last record: the chunk is done
            // (never read again, so no loop on a malformed chunk).
            let (tail, held) = (self.tail.len(), p.len());
            if self.tail_off < tail {
                self.tail_off = tail;
            } else {
                self.off += held;
            }
            return None;
        };
        // A record that says it runs past its chunk is cut at the end.
        let end = (RECORD + h.caplen as usize).min(p.len());
        let data = p[RECORD..end].as_ptr();
        let frac = if nano { h.frac } else { h.frac / 1000 };
        let hdr = PktHdr {
            ts: Timeval {
                tv_sec: libc::c_long::from(h.secs),
                tv_usec: libc::c_long::from(frac),
            },
            caplen: (end - RECORD) as u32,
            len: h.wire_len,
        };
        if self.tail_off < self.tail.len() {
            self.tail_off += end;
        } else {
            self.off += end;
        }
        Some((hdr, data))
    }
}

impl Live {
    pub fn new(device: &str, seen: Arc<Seen>) -> Live {
        Live {
            config: Config::new(device),
            nonblock: false,
            running: None,
            hdr: PktHdr::default(),
            programs: Vec::new(),
            seen,
            polled: Instant::now(),
        }
    }

    /// Opens the session (placeholder filter) and its selectable descriptor.
    pub fn activate(&mut self) -> Result<(), ClientError> {
        let mut req = OpenRequest::new(&self.config.device, PLACEHOLDER);
        req.snaplen = Snap::Bytes(self.config.snap());
        let session = Client::connect(&default_socket())?.open(req)?;
        let snaplen = match session.effective.snaplen {
            Snap::Bytes(n) => n,
            Snap::Headers { max } => max,
        };
        use rustix::event::{epoll, eventfd, EventfdFlags};
        let mark = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC).map_err(io)?;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(io)?;
        let [pipe, conn] = session.wake_fds();
        for (i, fd) in [pipe, conn, mark.as_fd()].into_iter().enumerate() {
            epoll::add(
                &epoll,
                fd,
                epoll::EventData::new_u64(i as u64),
                epoll::EventFlags::IN,
            )
            .map_err(io)?;
        }
        self.running = Some(Running {
            session,
            pump: Pump::new(None),
            held: None,
            off: 0,
            tail: Vec::new(),
            tail_off: 0,
            over: None,
            busy: false,
            epoll,
            mark,
            marked: false,
            asleep: false,
            last: SessionCounters::default(),
            snaplen,
            started: false,
            next_tag: 0,
            pid: std::process::id(),
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
    pub fn set_filter(&mut self, text: &str, insns: &[BpfInsn]) -> Result<(), String> {
        // The program the tool's pcap_compile made (its netmask and
        // optimisation), not the text compiled again.
        let insns: Vec<_> = insns.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect();
        let program = ringcap_client::compiled_filter(text, &insns).map_err(|e| describe(&e))?;
        let r = self.running()?;
        r.wake();
        r.session
            .set_compiled_filter(text, program)
            .map_err(|e| describe(&e))?;
        r.held = None;
        r.tail.clear();
        r.tail_off = 0;
        while let Ok(Some(_)) = r.session.hold_next() {}
        r.started = true;
        r.settle();
        Ok(())
    }

    /// The epoll descriptor (readable while packets wait). Before the
    /// capture has started it is made readable, so a tool that waits on it
    /// before reading gets to call a read, which starts the capture.
    pub fn selectable_fd(&mut self) -> RawFd {
        match &mut self.running {
            Some(r) => {
                if !r.started {
                    r.mark(true);
                }
                r.epoll.as_raw_fd()
            }
            None => -1,
        }
    }

    /// Makes sure packets are there to hand out; `block`: wait for some
    /// (up to the timeout, or a break).
    fn fill(&mut self, block: bool, brk: &AtomicBool) -> Result<(), NoPacket> {
        if !self.running.as_ref().is_some_and(|r| r.started) {
            self.set_filter("", &[]).map_err(NoPacket::Over)?;
        }
        let timeout = (self.config.timeout_ms > 0 && !self.config.immediate)
            .then(|| Duration::from_millis(self.config.timeout_ms as u64));
        let immediate = self.config.immediate;
        let start = Instant::now();
        let Some(r) = self.running.as_mut() else {
            return Err(NoPacket::Over("the handle is not activated".into()));
        };
        r.wake();
        loop {
            if r.fill()? {
                return Ok(());
            }
            if !block || brk.load(Ordering::Relaxed) {
                r.busy = false;
                return Err(NoPacket::Empty);
            }
            let mut wait = SLICE;
            if let Some(t) = timeout {
                let left = t.saturating_sub(start.elapsed());
                if left.is_zero() {
                    r.busy = false;
                    return Err(NoPacket::Empty);
                }
                wait = wait.min(left);
            }
            // Nothing to hand out: a moment to bring the daemon's counters
            // for a nested pcap_stats (tcpdump's SIGUSR1), once a second.
            if self.polled.elapsed() >= Duration::from_secs(1) {
                self.polled = Instant::now();
                counters(r, &self.seen);
            }
            r.wait(wait, immediate)?;
            r.busy = false;
        }
    }

    /// Reads up to `max` packets (0: all there are now), calling `f` for
    /// each; blocks for the first unless non-blocking. `Ok(n)`, or the
    /// break (`Ok` with `brk` left set for the caller) or the end.
    pub fn dispatch(
        &mut self,
        max: usize,
        brk: &AtomicBool,
        mut f: impl FnMut(&PktHdr, *const u8),
    ) -> Result<usize, NoPacket> {
        let block = !self.nonblock;
        let result = self.fill(block, brk);
        let nano = self.config.nano;
        let Some(r) = self.running.as_mut() else {
            return Err(NoPacket::Over("the handle is not activated".into()));
        };
        let mut n = 0;
        if result.is_ok() {
            while max == 0 || n < max {
                if n > 0 && brk.load(Ordering::Relaxed) {
                    break;
                }
                let Some((hdr, data)) = r.take(nano) else {
                    // This chunk is done: on to the next, without waiting.
                    match r.fill() {
                        Ok(true) => continue,
                        _ => break,
                    }
                };
                f(&hdr, data);
                n += 1;
            }
            r.busy = n > 0;
        }
        self.seen.handed.fetch_add(n as u64, Ordering::Relaxed);
        r.settle();
        match result {
            Ok(()) | Err(NoPacket::Empty) => Ok(n),
            Err(e) => Err(e),
        }
    }

    /// One packet, for `pcap_next_ex`: stored in `self.hdr`.
    pub fn next(&mut self, brk: &AtomicBool) -> Result<Option<*const u8>, NoPacket> {
        let block = !self.nonblock;
        let result = self.fill(block, brk);
        let nano = self.config.nano;
        let Some(r) = self.running.as_mut() else {
            return Err(NoPacket::Over("the handle is not activated".into()));
        };
        let got = match result {
            Ok(()) => r.take(nano),
            Err(NoPacket::Empty) => None,
            Err(e) => {
                r.settle();
                return Err(e);
            }
        };
        if let Some((h, _)) = got {
            self.hdr = h;
            self.seen.handed.fetch_add(1, Ordering::Relaxed);
            r.busy = true;
        }
        r.settle();
        Ok(got.map(|(_, d)| d))
    }

    /// The daemon's counters as `pcap_stats` reports them: received =
    /// accepted by the combined filter (at least what was handed out),
    /// dropped = dropped in the daemon's kernel ring + in this session's
    /// ring.
    pub fn stats(&mut self) -> Result<Stat, String> {
        let seen = self.seen.clone();
        Ok(counters(self.running()?, &seen))
    }

    /// Sends one frame through the grant's inject rights; waits for its report.
    pub fn inject(&mut self, frame: &[u8]) -> Result<(), String> {
        let r = self.running()?;
        r.next_tag += 1;
        let tag = r.next_tag;
        let s = &mut r.session;
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

/// The daemon's counters (the final ones once it ended the session), kept
/// in `seen` for nested calls: received at least what was handed out.
fn counters(r: &mut Running, seen: &Seen) -> Stat {
    let c = r.session.stats().unwrap_or(r.last);
    let clip = |v: u64| v as u32; // libpcap's counters are 32-bit and wrap
    seen.recv
        .store(clip(c.packets_filter_accepted), Ordering::Relaxed);
    seen.drop.store(
        clip(c.packets_dropped_ring + c.packets_dropped_client),
        Ordering::Relaxed,
    );
    seen.stat()
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(mut r) = self.running.take() {
            if r.pid != std::process::id() {
                // A child's copy after fork(): its descriptors close with
                // it; the session (and its end) stays its parent's.
                std::mem::forget(r);
                return;
            }
            r.wake();
            // Ended as every client ends it (ringcap-client's loop); what
            // the ring still holds is not wanted any more.
            r.pump.stop(Stop::Interrupted);
            let _ = r.pump.finish(&mut r.session, |_| {});
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
