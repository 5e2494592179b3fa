//! Setting up one capture socket, in the only order that leaves no window in
//! which unfiltered packets reach the ring: socket with protocol 0 (receives
//! nothing) → attach and lock the filter → TPACKET_V3 ring → bind to the
//! interface → join the fanout group.

use crate::interface::{Interface, OpenError};
use crate::ring::{RingGeometry, RxRing};
use crate::sys;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Where packet timestamps come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampSource {
    /// The kernel's clock when the packet arrived.
    Host,
    /// The NIC's clock (SO_TIMESTAMPING raw hardware stamps).
    Adapter,
}

/// A capture socket's fanout group (PACKET_FANOUT_HASH: each flow to one
/// member).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fanout {
    /// No group: the socket has the interface's packets to itself. The
    /// kernel then hands each packet straight to the ring; in a group it
    /// first hashes the packet's flow (the flow dissector, on the CPU that
    /// receives the packet: on a veth pair the sender's) to pick the member.
    Off,
    /// A new group, with a unique id ([`CaptureSocket::fanout_id`]).
    New,
    /// Joins the group with this id.
    Join(u16),
}

/// How to open a capture socket.
#[derive(Debug, Clone)]
pub struct SocketOptions {
    /// The classic BPF program (filter, snap length, sampling) in `sock_filter` layout.
    pub program: Vec<libc::sock_filter>,
    /// Ring size and shape.
    pub geometry: RingGeometry,
    /// Whether the socket shares its interface's packets with others.
    pub fanout: Fanout,
    /// Put the interface in promiscuous mode while the socket is open.
    pub promiscuous: bool,
    /// Timestamp source.
    pub timestamps: TimestampSource,
    /// Extra bytes the kernel leaves before each packet's network header
    /// (`PACKET_RESERVE`): [`crate::inplace::RESERVE`] for rings whose
    /// blocks are written in place as pcapng, else 0.
    pub reserve: u32,
    /// Lock the filter (SO_LOCK_FILTER) so that it never changes. Only a
    /// socket whose filter its owner changes on purpose (the shared capture's
    /// hub: see [`FilterHandle`]) leaves it unlocked.
    pub lock_filter: bool,
}

/// Kernel counters of one socket, accumulated in 64 bits (the kernel's are
/// 32-bit and reset on every read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Packets the filter accepted (delivered to the ring or dropped there).
    pub accepted: u64,
    /// Packets dropped because the ring was full.
    pub dropped: u64,
}

/// An AF_PACKET socket with its receive ring.
pub struct CaptureSocket {
    // Field order matters: the ring must be unmapped before the socket closes.
    ring: RxRing,
    fd: OwnedFd,
    fanout_id: Option<u16>,
    stats: SocketStats,
    /// The interface's name, for errors.
    interface: String,
    /// The interface went down (and may be up again): the kernel reports
    /// nothing more about it (not even its deletion while down), so waits
    /// are cut short to look at its binding.
    down: bool,
}

/// How long a wait lasts at most while the interface is down.
const DOWN_RECHECK_MS: i32 = 250;

/// Waiting for packets failed.
#[derive(Debug)]
pub enum WaitError {
    /// The interface was deleted (or moved to another network namespace)
    /// while the socket was bound to it: no packet can come any more.
    InterfaceGone(String),
    /// A system call failed.
    Os(std::io::Error),
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::InterfaceGone(name) => write!(f, "the interface {name} disappeared"),
            WaitError::Os(e) => write!(f, "waiting for packets: {e}"),
        }
    }
}

impl std::error::Error for WaitError {}

const FANOUT_TYPE: u32 = libc::PACKET_FANOUT_HASH;

impl CaptureSocket {
    /// Opens a capture socket on `iface`.
    pub fn open(iface: &Interface, opts: &SocketOptions) -> Result<CaptureSocket, OpenError> {
        let fd = sys::packet_socket()
            .map_err(|e| OpenError::os("opening a packet socket", e, "CAP_NET_RAW"))?;
        sys::attach_filter(&fd, &opts.program).map_err(|e| OpenError::Os {
            action: format!("attaching the filter ({} instructions)", opts.program.len()),
            error: e,
        })?;
        if opts.lock_filter {
            sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_LOCK_FILTER, &1i32)
                .map_err(|e| OpenError::os("locking the filter", e, "CAP_NET_RAW"))?;
        }
        sys::setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &(libc::tpacket_versions::TPACKET_V3 as i32),
        )
        .map_err(|e| OpenError::os("selecting TPACKET_V3", e, "CAP_NET_RAW"))?;
        if opts.timestamps == TimestampSource::Adapter {
            let ctl = sys::ioctl_socket()
                .map_err(|e| OpenError::os("opening a control socket", e, "CAP_NET_ADMIN"))?;
            sys::enable_hw_timestamps(&ctl, &iface.name).map_err(|error| {
                match error.raw_os_error() {
                    Some(libc::EPERM) => OpenError::MissingCapability {
                        capability: "CAP_NET_ADMIN",
                        action: format!("enabling hardware timestamps on {}", iface.name),
                    },
                    _ => OpenError::NoHardwareTimestamps {
                        interface: iface.name.clone(),
                        error,
                    },
                }
            })?;
            let flags = libc::SOF_TIMESTAMPING_RAW_HARDWARE as i32;
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_TIMESTAMP, &flags).map_err(
                |error| OpenError::NoHardwareTimestamps {
                    interface: iface.name.clone(),
                    error,
                },
            )?;
        }
        if opts.reserve > 0 {
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_RESERVE, &opts.reserve).map_err(
                |e| OpenError::Os {
                    action: format!("reserving {} bytes before packets", opts.reserve),
                    error: e,
                },
            )?;
        }
        let ring = RxRing::new(&fd, opts.geometry).map_err(|e| {
            OpenError::os(
                format!(
                    "setting up a {} MiB capture ring ({} blocks of {} KiB)",
                    opts.geometry.total_bytes() >> 20,
                    opts.geometry.block_count,
                    opts.geometry.block_size >> 10
                ),
                e,
                "CAP_NET_RAW",
            )
        })?;
        sys::bind_packet(&fd, iface.index).map_err(|e| match e.raw_os_error() {
            Some(libc::ENODEV) => OpenError::NoSuchInterface(iface.name.clone()),
            Some(libc::ENETDOWN) => OpenError::InterfaceDown(iface.name.clone()),
            _ => OpenError::os(format!("binding to {}", iface.name), e, "CAP_NET_RAW"),
        })?;
        if opts.promiscuous {
            let mreq = libc::packet_mreq {
                mr_ifindex: iface.index,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq).map_err(
                |e| {
                    OpenError::os(
                        format!("making {} promiscuous", iface.name),
                        e,
                        "CAP_NET_RAW",
                    )
                },
            )?;
        }
        // Threads of one interface share a fanout group, and the hash keeps
        // each flow on one thread; a socket alone stays out of groups (see
        // `Fanout::Off`). No PACKET_FANOUT_FLAG_DEFRAG: it would reassemble
        // IP fragments before capture and the file would not hold what was
        // on the wire. Fragments of one datagram still hash alike (the flow
        // dissector does not read ports of fragments).
        let fanout_id = match opts.fanout {
            Fanout::Off => None,
            Fanout::Join(id) => {
                let arg: u32 = u32::from(id) | (FANOUT_TYPE << 16);
                sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg).map_err(|e| {
                    OpenError::os(
                        format!("joining fanout group {id} on {}", iface.name),
                        e,
                        "CAP_NET_RAW",
                    )
                })?;
                Some(id)
            }
            Fanout::New => {
                let arg: u32 = (FANOUT_TYPE | libc::PACKET_FANOUT_FLAG_UNIQUEID) << 16;
                sys::setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg).map_err(|e| {
                    OpenError::os(
                        format!("creating a fanout group on {}", iface.name),
                        e,
                        "CAP_NET_RAW",
                    )
                })?;
                let got: u32 = sys::getsockopt(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT)
                    .map_err(|e| OpenError::os("reading the fanout group id", e, "CAP_NET_RAW"))?;
                Some((got & 0xffff) as u16)
            }
        };
        Ok(CaptureSocket {
            ring,
            fd,
            fanout_id,
            stats: SocketStats::default(),
            interface: iface.name.clone(),
            down: false,
        })
    }

    /// The fanout group id, for further sockets of the same interface
    /// (`None`: not in a group).
    pub fn fanout_id(&self) -> Option<u16> {
        self.fanout_id
    }

    /// The receive ring's geometry.
    pub fn ring_geometry(&self) -> crate::ring::RingGeometry {
        self.ring.geometry()
    }

    /// The receive ring.
    pub fn ring(&mut self) -> &mut RxRing {
        &mut self.ring
    }

    /// Waits up to `timeout_ms` (-1: without a timeout) for a block, or
    /// until `wake`, if given, is readable: true when `wake` is. Returns at
    /// once if a block is ready.
    ///
    /// The interface going down is not an error (the kernel takes its
    /// packets again when it comes back up, and libpcap waits too); its
    /// deletion is, as in libpcap ("The interface disappeared").
    pub fn wait(&mut self, timeout_ms: i32, wake: Option<RawFd>) -> Result<bool, WaitError> {
        if self.ring.ready() {
            return Ok(false);
        }
        let timeout_ms = match self.down {
            true if timeout_ms < 0 => DOWN_RECHECK_MS,
            true => timeout_ms.min(DOWN_RECHECK_MS),
            false => timeout_ms,
        };
        let (revents, woken) =
            sys::poll_readable_or(self.fd.as_raw_fd(), wake, timeout_ms).map_err(WaitError::Os)?;
        if revents & libc::POLLERR != 0 {
            // Reading SO_ERROR clears it (else poll reports it forever).
            let error: i32 = sys::getsockopt(&self.fd, libc::SOL_SOCKET, libc::SO_ERROR)
                .map_err(WaitError::Os)?;
            match error {
                0 => {}
                // Down or deleted: which one, the binding says.
                libc::ENETDOWN => self.down = true,
                e => return Err(WaitError::Os(std::io::Error::from_raw_os_error(e))),
            }
        }
        // Once down, the binding is looked at after every wait for the rest
        // of the capture (a few times a second at most): a block that
        // arrives says nothing of the interface (the kernel retires a
        // block of packets from before it went down), and a deletion while
        // it is down raises no error.
        if self.down && sys::bound_ifindex(&self.fd).map_err(WaitError::Os)? <= 0 {
            return Err(WaitError::InterfaceGone(self.interface.clone()));
        }
        Ok(woken)
    }

    /// Reads the kernel's counters and adds them to the running totals.
    pub fn update_stats(&mut self) -> std::io::Result<SocketStats> {
        let s: libc::tpacket_stats_v3 =
            sys::getsockopt(&self.fd, libc::SOL_PACKET, libc::PACKET_STATISTICS)?;
        // tp_packets includes tp_drops (the kernel adds them on read).
        self.stats.accepted += u64::from(s.tp_packets);
        self.stats.dropped += u64::from(s.tp_drops);
        Ok(self.stats)
    }

    /// The running totals as of the last [`update_stats`](Self::update_stats).
    pub fn stats(&self) -> SocketStats {
        self.stats
    }

    /// The raw descriptor (for poll sets).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A handle that replaces this socket's filter from any thread (a
    /// duplicate of the descriptor: it stays valid as long as it lives, even
    /// after this socket is dropped). Fails on a socket whose filter is
    /// locked only when the handle is used.
    pub fn filter_handle(&self) -> std::io::Result<FilterHandle> {
        Ok(FilterHandle {
            fd: self.fd.try_clone()?,
        })
    }
}

/// Replaces the filter of a capture socket opened without
/// [`SocketOptions::lock_filter`] (see [`CaptureSocket::filter_handle`]).
/// The kernel swaps the program at once for packets that arrive from then on;
/// packets already being received may still be filtered by the old one until
/// a grace period has passed ([`crate::sys::rcu_barrier`]).
pub struct FilterHandle {
    fd: OwnedFd,
}

impl FilterHandle {
    /// Attaches `program` in place of the current filter.
    pub fn set(&self, program: &[libc::sock_filter]) -> std::io::Result<()> {
        sys::attach_filter(&self.fd, program)
    }
}

/// A socket that only counts what a filter accepts, without keeping packets:
/// when sampling runs in the kernel program, the capture rings see only the
/// sampled-in packets, and this socket (with the filter alone and a tiny
/// receive buffer that is never read) counts everything the filter accepted.
/// After the buffer fills, each accepted packet costs the kernel one filter
/// run and one counter increment, and no copy.
pub struct CountingSocket {
    fd: OwnedFd,
    total: std::cell::Cell<u64>,
}

impl CountingSocket {
    /// Opens a counting socket on `iface` with `program`.
    pub fn open(
        iface: &Interface,
        program: &[libc::sock_filter],
    ) -> Result<CountingSocket, OpenError> {
        let fd = sys::packet_socket()
            .map_err(|e| OpenError::os("opening a packet socket", e, "CAP_NET_RAW"))?;
        sys::attach_filter(&fd, program).map_err(|e| OpenError::Os {
            action: "attaching the counting filter".into(),
            error: e,
        })?;
        sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &0i32).map_err(|e| {
            OpenError::Os {
                action: "shrinking the counting socket's buffer".into(),
                error: e,
            }
        })?;
        sys::bind_packet(&fd, iface.index)
            .map_err(|e| OpenError::os(format!("binding to {}", iface.name), e, "CAP_NET_RAW"))?;
        Ok(CountingSocket {
            fd,
            total: std::cell::Cell::new(0),
        })
    }

    /// Packets the filter accepted since the socket was opened.
    pub fn accepted(&self) -> std::io::Result<u64> {
        let s: libc::tpacket_stats =
            sys::getsockopt(&self.fd, libc::SOL_PACKET, libc::PACKET_STATISTICS)?;
        // tp_packets already includes tp_drops (added by the kernel on read).
        self.total.set(self.total.get() + u64::from(s.tp_packets));
        Ok(self.total.get())
    }
}
