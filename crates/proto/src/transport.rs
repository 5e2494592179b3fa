//! The socket transport: one encoded message per `SOCK_SEQPACKET` datagram,
//! with file descriptors alongside (SCM_RIGHTS). The only module of this
//! crate that does I/O.
//!
//! Why `SOCK_SEQPACKET`: the kernel keeps message boundaries and delivers a
//! datagram whole or not at all, so there is no length prefix for a client to
//! lie about and no partial read to reassemble; it is connection-oriented, so
//! SO_PEERCRED names the peer and a closed peer reads as end of file.
//!
//! Rules this module enforces, so that callers cannot forget them:
//! - At most [`MAX_FDS`] descriptors per message. [`recv`] leaves room for
//!   exactly that many; if the peer sends more, the kernel installs what fits
//!   and discards the rest (`MSG_CTRUNC`), and [`recv`] closes the ones it
//!   got and reports an error. Received descriptors are `O_CLOEXEC`
//!   (`MSG_CMSG_CLOEXEC`) so they never leak into a child process.
//! - A datagram larger than the buffer is an error ("message too large"),
//!   never a silently cut message (`MSG_TRUNC`); the rest of it is gone, the
//!   next [`recv`] reads the next message.
//! - Descriptors the caller did not expect are closed: [`recv`] returns them
//!   as [`OwnedFd`]s (dropping them closes them) and [`expect_fds`] turns
//!   "exactly N" into an array, closing all of them if the count is wrong.
//! - [`send`] uses `MSG_NOSIGNAL`: a client that went away is an `EPIPE`
//!   error for the daemon, not a SIGPIPE that kills it.
//!
//! Both calls block on a blocking socket and return `WouldBlock` on a
//! non-blocking one; both retry on `EINTR`. A daemon serving many clients
//! should use non-blocking sockets (or a thread per client): a client that
//! does not read fills its socket buffer, and a blocking [`send`] to it would
//! wait.
//!
//! Errors that are the peer's fault (too large, too many descriptors) have
//! kind [`io::ErrorKind::InvalidData`]; the connection is still usable after
//! them.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use crate::codec::MAX_DATAGRAM;

/// Most file descriptors that travel with one message.
pub const MAX_FDS: usize = 4;

/// Descriptors sent with [`Response::Accepted`](crate::Response::Accepted).
pub const ACCEPTED_FDS: usize = 3;
/// Index of the ring's data memfd among the `Accepted` descriptors.
pub const ACCEPTED_FD_RING: usize = 0;
/// Index of the consumer-position memfd among the `Accepted` descriptors.
pub const ACCEPTED_FD_CONSUMER: usize = 1;
/// Index of the wake-up eventfd among the `Accepted` descriptors.
pub const ACCEPTED_FD_EVENT: usize = 2;

/// Descriptors sent with [`Response::Dump`](crate::Response::Dump): the
/// file, read-only.
pub const DUMP_FDS: usize = 1;

/// Descriptors sent with [`Response::Retrieving`](crate::Response::Retrieving):
/// the read end of the pipe that carries the answer.
pub const RETRIEVING_FDS: usize = 1;

/// Sends one encoded message (`msg`, as made by
/// [`encode_request`](crate::encode_request) or
/// [`encode_response`](crate::encode_response)) with `fds` as one datagram.
///
/// Refuses (`InvalidInput`) an empty message, one over
/// [`MAX_DATAGRAM`] bytes, or more than [`MAX_FDS`]
/// descriptors, before anything is sent: the peer would refuse them anyway,
/// and the sender learns it with its own error.
pub fn send(fd: &impl AsFd, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if msg.is_empty() {
        // An empty datagram reads as end of file on the other side.
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty message"));
    }
    if msg.len() > MAX_DATAGRAM {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "message too large: {} bytes, the limit is {MAX_DATAGRAM}",
                msg.len()
            ),
        ));
    }
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} file descriptors, at most {MAX_FDS} travel with a message",
                fds.len()
            ),
        ));
    }
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        // The buffer is sized for MAX_FDS, checked above.
        return Err(io::Error::other("control buffer too small"));
    }
    let iov = [IoSlice::new(msg)];
    loop {
        match rustix::net::sendmsg(fd, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(n) if n == msg.len() => return Ok(()),
            // SEQPACKET sends are all or nothing; anything else is a kernel
            // surprise worth an error rather than a half message.
            Ok(n) => {
                return Err(io::Error::other(format!(
                    "short send: {n} of {} bytes",
                    msg.len()
                )))
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one datagram into `buf`: `Ok(Some((len, fds)))` with the message
/// in `buf[..len]` and the descriptors that came with it (close-on-exec),
/// `Ok(None)` when the peer has closed the connection.
///
/// A datagram over `buf`'s size or with more than [`MAX_FDS`] descriptors is
/// consumed and reported as an `InvalidData` error; any descriptors that came
/// with it are closed.
///
/// A zero-length datagram is indistinguishable from end of file on a
/// `SOCK_SEQPACKET` socket and reads as `None`; [`send`] never sends one.
pub fn recv(
    fd: &impl AsFd,
    buf: &mut [u8; MAX_DATAGRAM],
) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    // TRUNC as an input flag makes the kernel report the datagram's real
    // length, so the error can say how large it was.
    let flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::TRUNC;
    let msg = loop {
        let mut iov = [IoSliceMut::new(&mut buf[..])];
        match rustix::net::recvmsg(fd, &mut iov, &mut control, flags) {
            Ok(msg) => break msg,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    // Claim every descriptor first, whatever happens next: an unclaimed one
    // would be closed by the buffer's Drop anyway, but owning them here makes
    // the closing explicit. Other control messages (credentials, if someone
    // set SO_PASSCRED) are ignored.
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if msg.flags.contains(ReturnFlags::TRUNC) || msg.bytes > buf.len() {
        drop(fds);
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "message too large: datagram of {} bytes, the limit is {}",
                msg.bytes,
                buf.len()
            ),
        ));
    }
    // The control buffer has alignment slack, so a few more than MAX_FDS can
    // arrive without MSG_CTRUNC: count as well.
    if msg.flags.contains(ReturnFlags::CTRUNC) || fds.len() > MAX_FDS {
        let got = fds.len();
        drop(fds);
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "too many file descriptors with a message (received {got}{}), \
                 at most {MAX_FDS} are allowed; closed them",
                if msg.flags.contains(ReturnFlags::CTRUNC) {
                    " and more the kernel discarded"
                } else {
                    ""
                }
            ),
        ));
    }
    if msg.bytes == 0 {
        // End of file (or an empty datagram, which reads the same).
        return Ok(None);
    }
    Ok(Some((msg.bytes, fds)))
}

/// Exactly `N` descriptors, in order, or an `InvalidData` error that closes
/// all of them: how a receiver holds the peer to
/// [`Request::fds_expected`](crate::Request::fds_expected) /
/// [`Response::fds_expected`](crate::Response::fds_expected).
pub fn expect_fds<const N: usize>(fds: Vec<OwnedFd>) -> io::Result<[OwnedFd; N]> {
    let got = fds.len();
    // On a count mismatch `try_into` hands the Vec back; dropping it closes
    // every descriptor.
    fds.try_into().map_err(|_: Vec<OwnedFd>| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected {N} file descriptors with the message, received {got}"),
        )
    })
}

/// A connected pair of `SOCK_SEQPACKET` Unix sockets (close-on-exec).
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Connects to a daemon listening on the Unix socket at `path`.
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let socket = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::connect(&socket, &SocketAddrUnix::new(path)?)?;
    Ok(socket)
}

/// A `SOCK_SEQPACKET` socket bound to `path` and listening.
///
/// Does not remove a stale socket file or set permissions: that is the
/// daemon's policy (and must not follow symlinks an attacker placed).
pub fn listen(path: &Path, backlog: i32) -> io::Result<OwnedFd> {
    let socket = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::bind(&socket, &SocketAddrUnix::new(path)?)?;
    rustix::net::listen(&socket, backlog)?;
    Ok(socket)
}

/// Accepts one connection on a socket made by [`listen`] (close-on-exec).
pub fn accept(listener: &impl AsFd) -> io::Result<OwnedFd> {
    loop {
        match rustix::net::accept_with(listener, SocketFlags::CLOEXEC) {
            Ok(fd) => return Ok(fd),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
