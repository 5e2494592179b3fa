//! The transport over a real `socketpair(AF_UNIX, SOCK_SEQPACKET)`:
//! descriptors arrive in order and usable, oversize datagrams and surplus
//! descriptors are errors that leave nothing open, a closed peer reads as
//! `None`.

mod common;

use std::fs;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::{eventfd, EventfdFlags};
use rustix::fs::{memfd_create, MemfdFlags};
use rustix::io::{fcntl_getfd, pread, read, write, FdFlags};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use common::*;
use ringcap_proto::*;

fn buffer() -> Box<[u8; MAX_DATAGRAM]> {
    vec![0u8; MAX_DATAGRAM]
        .into_boxed_slice()
        .try_into()
        .unwrap()
}

fn memfd(name: &str, contents: &[u8]) -> OwnedFd {
    let fd = memfd_create(name, MemfdFlags::CLOEXEC).unwrap();
    write(&fd, contents).unwrap();
    fd
}

fn contents(fd: &impl AsFd) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let n = pread(fd, &mut buf, 0).unwrap();
    buf[..n].to_vec()
}

/// How many descriptors of this process point at the memfd named `name`
/// (tests run in parallel threads, so count by a unique name, not in total).
fn open_memfds_named(name: &str) -> usize {
    let wanted = format!("/memfd:{name} (deleted)");
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_str() == Some(wanted.as_str()))
        .count()
}

/// Sends `bytes` with `fds` bypassing `transport::send`'s own limits, as a
/// hostile peer would.
fn raw_send(fd: &impl AsFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    }
    Ok(rustix::net::sendmsg(
        fd,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?)
}

#[test]
fn accepted_arrives_with_three_usable_descriptors_in_order() {
    let (daemon, client) = transport::pair().unwrap();
    let ring = memfd("ring", b"ring data");
    let consumer = memfd("consumer", b"read position");
    let event = eventfd(0, EventfdFlags::CLOEXEC).unwrap();
    let accepted = Response::Accepted {
        session: 7,
        effective: effective(),
        ring: RingInfo { capacity: 9 },
    };
    transport::send(
        &daemon,
        &encode_response(&accepted),
        &[ring.as_fd(), consumer.as_fd(), event.as_fd()],
    )
    .unwrap();

    let mut buf = buffer();
    let (len, fds) = transport::recv(&client, &mut buf).unwrap().unwrap();
    let response = decode_response(&buf[..len]).unwrap();
    assert_eq!(response, accepted);
    let fds: [OwnedFd; ACCEPTED_FDS] = transport::expect_fds(fds).unwrap();
    for fd in &fds {
        // MSG_CMSG_CLOEXEC: nothing received leaks into a child process.
        assert!(fcntl_getfd(fd).unwrap().contains(FdFlags::CLOEXEC));
    }
    assert_eq!(contents(&fds[ACCEPTED_FD_RING]), b"ring data");
    assert_eq!(contents(&fds[ACCEPTED_FD_CONSUMER]), b"read position");
    // The eventfd is the daemon's: a write on the client's copy wakes it.
    write(&fds[ACCEPTED_FD_EVENT], &5u64.to_ne_bytes()).unwrap();
    let mut count = [0u8; 8];
    read(&event, &mut count).unwrap();
    assert_eq!(u64::from_ne_bytes(count), 5);
}

#[test]
fn dump_arrives_with_one_descriptor() {
    let (daemon, client) = transport::pair().unwrap();
    let file = memfd("dump", b"pcap bytes");
    let dump = Response::Dump {
        name: "d-0001.pcap".into(),
        bytes: 10,
    };
    transport::send(&daemon, &encode_response(&dump), &[file.as_fd()]).unwrap();
    let mut buf = buffer();
    let (len, fds) = transport::recv(&client, &mut buf).unwrap().unwrap();
    let response = decode_response(&buf[..len]).unwrap();
    assert_eq!(response.fds_expected(), 1);
    let [fd] = transport::expect_fds::<DUMP_FDS>(fds).unwrap();
    assert_eq!(contents(&fd), b"pcap bytes");
}

#[test]
fn requests_travel_both_ways_in_order() {
    let (client, daemon) = transport::pair().unwrap();
    for request in requests() {
        transport::send(&client, &encode_request(&request), &[]).unwrap();
    }
    let mut buf = buffer();
    for request in requests() {
        let (len, fds) = transport::recv(&daemon, &mut buf).unwrap().unwrap();
        assert!(fds.is_empty());
        assert_eq!(decode_request(&buf[..len]).unwrap(), request);
    }
}

#[test]
fn largest_message_fits_and_one_more_byte_is_too_large() {
    let (client, daemon) = transport::pair().unwrap();
    let mut buf = buffer();

    // Exactly MAX_DATAGRAM bytes: received whole and decodes.
    let mut body = String::from(r#"{"type":"stats"}"#);
    body.push_str(&" ".repeat(MAX_MESSAGE - body.len()));
    let largest = req(&body);
    assert_eq!(largest.len(), MAX_DATAGRAM);
    transport::send(&client, &largest, &[]).unwrap();
    let (len, _) = transport::recv(&daemon, &mut buf).unwrap().unwrap();
    assert_eq!(len, MAX_DATAGRAM);
    assert_eq!(decode_request(&buf[..len]).unwrap(), Request::Stats);

    // One byte more, sent by a peer that ignores the limit, with a
    // descriptor: an error, the descriptor closed, the socket still usable.
    let name = "oversize-extra";
    let extra = memfd(name, b"x");
    let mut oversize = largest.clone();
    oversize.push(b' ');
    raw_send(&client, &oversize, &[extra.as_fd()]).unwrap();
    drop(extra);
    let err = transport::recv(&daemon, &mut buf).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert_eq!(
        err.to_string(),
        format!(
            "message too large: datagram of {} bytes, the limit is {MAX_DATAGRAM}",
            MAX_DATAGRAM + 1
        )
    );
    assert_eq!(open_memfds_named(name), 0);
    transport::send(&client, &encode_request(&Request::Flush), &[]).unwrap();
    let (len, _) = transport::recv(&daemon, &mut buf).unwrap().unwrap();
    assert_eq!(decode_request(&buf[..len]).unwrap(), Request::Flush);

    // The sender refuses to send what the peer would refuse.
    let err = transport::send(&client, &oversize, &[]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(err.to_string().starts_with("message too large"));
    assert_eq!(
        transport::send(&client, &[], &[]).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[test]
fn peer_close_reads_as_none() {
    let (client, daemon) = transport::pair().unwrap();
    transport::send(&client, &encode_request(&Request::Close), &[]).unwrap();
    drop(client);
    let mut buf = buffer();
    // What was sent before the close is still delivered, then end of file.
    let (len, _) = transport::recv(&daemon, &mut buf).unwrap().unwrap();
    assert_eq!(decode_request(&buf[..len]).unwrap(), Request::Close);
    assert!(transport::recv(&daemon, &mut buf).unwrap().is_none());
    assert!(transport::recv(&daemon, &mut buf).unwrap().is_none());
    // Sending to a closed peer is EPIPE, not a SIGPIPE that kills us.
    let err = transport::send(&daemon, &encode_response(&Response::Ok), &[]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
}

#[test]
fn descriptors_beyond_four_are_refused_and_closed() {
    let (client, daemon) = transport::pair().unwrap();
    let mut buf = buffer();
    let request = encode_request(&Request::Stats);
    for count in [5usize, 6, 7, 16, 64] {
        let name = format!("surplus-{count}");
        let fds: Vec<OwnedFd> = (0..count).map(|_| memfd(&name, b"x")).collect();
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|fd| fd.as_fd()).collect();
        raw_send(&client, &request, &borrowed).unwrap();
        drop(borrowed);
        drop(fds); // only the copies in flight remain
        let err = transport::recv(&daemon, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{count}: {err}");
        assert!(
            err.to_string().starts_with("too many file descriptors"),
            "{count}: {err}"
        );
        // Neither the ones the kernel installed nor the ones it discarded
        // are open in this process.
        assert_eq!(open_memfds_named(&name), 0, "{count} fds: some left open");
    }
    // The connection goes on.
    transport::send(&client, &request, &[]).unwrap();
    let (len, fds) = transport::recv(&daemon, &mut buf).unwrap().unwrap();
    assert!(fds.is_empty());
    assert_eq!(decode_request(&buf[..len]).unwrap(), Request::Stats);

    // The sender refuses more than MAX_FDS itself.
    let five: Vec<OwnedFd> = (0..5).map(|_| memfd("five", b"x")).collect();
    let borrowed: Vec<BorrowedFd<'_>> = five.iter().map(|fd| fd.as_fd()).collect();
    let err = transport::send(&client, &request, &borrowed).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn unexpected_descriptors_are_closed_by_expect_fds() {
    let (client, daemon) = transport::pair().unwrap();
    let name = "unexpected-two";
    let fds: Vec<OwnedFd> = (0..2).map(|_| memfd(name, b"x")).collect();
    transport::send(
        &client,
        &encode_request(&Request::Stats),
        &[fds[0].as_fd(), fds[1].as_fd()],
    )
    .unwrap();
    drop(fds);
    let mut buf = buffer();
    let (len, fds) = transport::recv(&daemon, &mut buf).unwrap().unwrap();
    assert_eq!(fds.len(), 2);
    assert_eq!(open_memfds_named(name), 2);
    let request = decode_request(&buf[..len]).unwrap();
    let err = match request.fds_expected() {
        0 => transport::expect_fds::<0>(fds).unwrap_err(),
        n => panic!("requests carry no descriptors, not {n}"),
    };
    assert_eq!(
        err.to_string(),
        "expected 0 file descriptors with the message, received 2"
    );
    assert_eq!(open_memfds_named(name), 0);
    // Too few is an error too.
    assert!(transport::expect_fds::<3>(Vec::new()).is_err());
}

#[test]
fn listen_connect_accept() {
    let dir = std::env::temp_dir().join(format!("ringcap-proto-test-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sock");
    let _ = fs::remove_file(&path);
    let listener = transport::listen(&path, 4).unwrap();
    let client = transport::connect(&path).unwrap();
    let server = transport::accept(&listener).unwrap();
    transport::send(&client, &encode_request(&Request::Sessions), &[]).unwrap();
    let mut buf = buffer();
    let (len, _) = transport::recv(&server, &mut buf).unwrap().unwrap();
    assert_eq!(decode_request(&buf[..len]).unwrap(), Request::Sessions);
    fs::remove_dir_all(&dir).unwrap();
}
