//! A capture session: the request that opens one ([`OpenRequest`],
//! [`Client::open`]) and the running session ([`Session`]): reading what
//! the daemon delivers through its ring (packets, chunks, blocks, flow
//! records) and the requests that change or end it.

use crate::unpack::Unpack;
use crate::{
    compile_filter, Client, ClientError, DumpRequest, FlowEntry, FlowRequest, InjectFrame,
    InjectReport, OutputFormat, Packet, Records, SessionCounters, MAX_HELD_FLOWS,
};
use ringcap_proto::{
    transport, Effective, FilterProgram, Request, Response, SampleRequest, SnapRequest,
};
use ringcap_shm::RingReader;
use std::time::Duration;

/// A capture request.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenRequest {
    /// Interfaces to capture on.
    pub interfaces: Vec<String>,
    /// Filter (tcpdump syntax; the daemon ANDs it with the grant's).
    pub filter: String,
    /// Snap length (the daemon caps it).
    pub snaplen: SnapRequest,
    /// Sampling (the daemon may force stricter).
    pub sample: Option<SampleRequest>,
    /// Stop after this long (the daemon may cap it).
    pub duration: Option<Duration>,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Have the daemon write the packets to files of its own naming under
    /// this user's dump directory, rotated as asked, instead of delivering
    /// them (`None`: deliver them here).
    pub dump: Option<DumpRequest>,
    /// Format of dump files.
    pub format: OutputFormat,
    /// Only inject: capture nothing into the ring.
    pub inject_only: bool,
    /// Have the daemon compress the stream (a few bytes a packet in the
    /// shared ring instead of whole records); the session decodes it, so
    /// packets come out the same either way.
    pub compress: bool,
    /// Flow records of what the session keeps (the grant must allow them;
    /// with `packets: false`, flow records only). Read them with
    /// [`Session::flows`].
    pub flows: Option<FlowRequest>,
}

impl OpenRequest {
    /// Whole packets on `interface` matching `filter`.
    pub fn new(interface: &str, filter: &str) -> OpenRequest {
        OpenRequest {
            interfaces: vec![interface.to_string()],
            filter: filter.to_string(),
            snaplen: SnapRequest::Bytes(262_144),
            sample: None,
            duration: None,
            count: None,
            dump: None,
            format: OutputFormat::Pcap,
            inject_only: false,
            compress: false,
            flows: None,
        }
    }

    /// A session that only injects on `interface` (captures nothing).
    pub fn inject_only(interface: &str) -> OpenRequest {
        OpenRequest {
            inject_only: true,
            ..OpenRequest::new(interface, "")
        }
    }
}

impl Client {
    /// Opens a capture session.
    pub fn open(mut self, req: OpenRequest) -> Result<Session, ClientError> {
        let program = compile_filter(&req.filter)?;
        self.send(&Request::Open {
            interfaces: req.interfaces,
            filter: req.filter,
            program,
            snaplen: req.snaplen,
            sample: req.sample,
            format: req.format,
            dump: req.dump,
            duration_s: req.duration.map(|d| d.as_secs_f64()),
            count: req.count,
            compress: req.compress,
            inject_only: req.inject_only,
            flows: req.flows,
        })?;
        let (r, fds) = self.answer()?;
        let Response::Accepted {
            session, effective, ..
        } = r
        else {
            return Err(ClientError::Protocol(format!("{r:?} instead of Accepted")));
        };
        let [data, consumer, event] = transport::expect_fds::<3>(fds)?;
        let ring = RingReader::map(data, consumer, event)?;
        let unpack = match (effective.compress, effective.compress_format) {
            (false, _) => None,
            // Daemons from before version 3 did not say: theirs was 2.
            (true, v) => Some(Unpack::new(v.unwrap_or(2))?),
        };
        Ok(Session {
            client: self,
            ring,
            id: session,
            effective,
            unpack,
            held_flows: Vec::new(),
            flows_lost: 0,
        })
    }
}

/// A running capture session.
pub struct Session {
    pub(super) client: Client,
    pub(super) ring: RingReader,
    /// The daemon's number for it.
    pub id: u64,
    /// What the policy allowed.
    pub effective: Effective,
    /// For a compressed stream: the decoder of its chunks.
    pub(super) unpack: Option<Unpack>,
    /// Flow records met while reading packets, for [`Session::flows`].
    held_flows: Vec<FlowEntry>,
    /// Flow records let go because `held_flows` was full.
    flows_lost: u64,
}

/// A flow chunk's records (a chunk of 0 packets, see
/// `ringcap_proto::flows`) into `held`, at most [`MAX_HELD_FLOWS`]; the rest
/// counted in `lost`.
fn hold_flows(
    payload: &[u8],
    held: &mut Vec<FlowEntry>,
    lost: &mut u64,
) -> Result<(), ClientError> {
    ringcap_proto::decode_flow_chunk(payload, |e| {
        if held.len() < MAX_HELD_FLOWS {
            held.push(e);
        } else {
            *lost += 1;
        }
    })
    .map(|_| ())
    .map_err(ClientError::Protocol)
}

/// Hands every chunk in `ring` now to `f`, which says how many packets it
/// held, then gives the space back to the daemon; returns the packets.
fn drain(
    ring: &mut RingReader,
    mut f: impl FnMut(ringcap_shm::Chunk<'_>) -> Result<u64, ClientError>,
) -> Result<u64, ClientError> {
    let mut n = 0u64;
    while let Some(chunk) = ring
        .next_chunk()
        .map_err(|e| ClientError::Protocol(e.to_string()))?
    {
        n += f(chunk)?;
    }
    ring.release();
    Ok(n)
}

impl Session {
    /// Waits up to `timeout` for packets (or the end); true if woken.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, ClientError> {
        Ok(self.ring.wait(timeout)?)
    }

    /// Hands every packet in the ring now to `f`, then gives the space back
    /// to the daemon; returns how many there were.
    pub fn packets(&mut self, mut f: impl FnMut(Packet<'_>)) -> Result<u64, ClientError> {
        self.chunks(|chunk| {
            for p in chunk.packets() {
                f(p);
            }
        })
    }

    /// Hands every chunk of packets in the ring now to `f` (whole, for a
    /// consumer that copies records in bulk), then gives the space back to
    /// the daemon; returns how many packets there were. Every record of a
    /// chunk is checked to lie inside it before `f` sees it.
    pub fn chunks(&mut self, mut f: impl FnMut(Records<'_>)) -> Result<u64, ClientError> {
        let unpack = &mut self.unpack;
        let (held, lost) = (&mut self.held_flows, &mut self.flows_lost);
        drain(&mut self.ring, |chunk| {
            if chunk.packets == 0 {
                hold_flows(chunk.payload, held, lost)?;
                return Ok(0);
            }
            let bytes = match unpack {
                Some(u) => u.records(chunk.payload)?,
                None => chunk.payload,
            };
            let records = Records::check(bytes)?;
            let n = records.count;
            f(records);
            Ok(n)
        })
    }

    /// The ringcap-compress format version of a compressed stream's blocks
    /// (`None`: the stream is not compressed).
    pub fn compress_format(&self) -> Option<u16> {
        self.unpack.as_ref().map(|u| u.version)
    }

    /// For a compressed stream (`effective.compress`): hands every block in
    /// the ring now to `f` as the daemon coded it — one whole
    /// ringcap-compress block of format [`compress_format`](Self::compress_format)
    /// (nanosecond timestamps, link type Ethernet)
    /// and what its header says, its checksum checked — then gives the
    /// space back; returns how many packets there were. For a consumer that
    /// keeps the blocks as they are (a compressed file) instead of decoding
    /// them; an error for a stream that is not compressed.
    pub fn blocks(
        &mut self,
        mut f: impl FnMut(&[u8], ringcap_compress::BlockInfo),
    ) -> Result<u64, ClientError> {
        if self.unpack.is_none() {
            return Err(ClientError::Protocol(
                "blocks of a stream that is not compressed".into(),
            ));
        }
        let (held, lost) = (&mut self.held_flows, &mut self.flows_lost);
        drain(&mut self.ring, |chunk| {
            if chunk.packets == 0 {
                hold_flows(chunk.payload, held, lost)?;
                return Ok(0);
            }
            let info = ringcap_compress::check_block(chunk.payload, 0).map_err(|e| {
                ClientError::Protocol(format!("a compressed chunk is not a whole block: {e}"))
            })?;
            if info.records != chunk.packets {
                return Err(ClientError::Protocol(format!(
                    "a compressed chunk of {} packets holds a block of {} records",
                    chunk.packets, info.records
                )));
            }
            f(chunk.payload, info);
            Ok(u64::from(info.records))
        })
    }

    /// Hands every flow record the daemon has delivered so far to `f`, in
    /// order: those met while packets were read ([`Session::packets`],
    /// [`Session::chunks`], [`Session::blocks`] keep them), then, for a
    /// session of flow records only, every flow chunk in the ring now (the
    /// space given back). In a session with packets, read packets first:
    /// flow records arrive in the same ring. Returns how many there were.
    pub fn flows(&mut self, mut f: impl FnMut(&FlowEntry)) -> Result<u64, ClientError> {
        let mut n = self.held_flows.len() as u64;
        for e in self.held_flows.drain(..) {
            f(&e);
        }
        if self.effective.flows.is_some_and(|s| !s.packets) {
            drain(&mut self.ring, |chunk| {
                if chunk.packets != 0 {
                    return Err(ClientError::Protocol(
                        "packets in a session of flow records only".into(),
                    ));
                }
                n += ringcap_proto::decode_flow_chunk(chunk.payload, |e| f(&e))
                    .map_err(ClientError::Protocol)?;
                Ok(0)
            })?;
        }
        Ok(n)
    }

    /// Flow records let go on this side because the session held
    /// [`MAX_HELD_FLOWS`] unread (packets were read, flows were not).
    pub fn flows_lost(&self) -> u64 {
        self.flows_lost
    }

    /// Packets the daemon dropped because this ring was full, and the ring's
    /// other counters.
    pub fn ring_counters(&self) -> ringcap_shm::RingCounters {
        self.ring.counters()
    }

    /// Bytes the session's ring holds: how much may wait unread before the
    /// daemon drops.
    pub fn ring_capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// The session's counters (asks the daemon).
    pub fn stats(&mut self) -> Result<SessionCounters, ClientError> {
        self.client.send(&Request::Stats)?;
        match self.client.answer()? {
            (Response::Stats { counters }, _) => Ok(counters),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Stats"))),
        }
    }

    /// Starts a new dump file now (dump sessions).
    pub fn checkpoint(&mut self) -> Result<(), ClientError> {
        self.client.send(&Request::Checkpoint)?;
        match self.client.answer()? {
            (Response::Ok, _) => Ok(()),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// Asks the daemon to push out whatever it holds for this session
    /// (pktd's `wire_flush`). The daemon hands partial chunks over at least
    /// every 50 ms by itself, so this is a round trip that returns once the
    /// daemon has seen every earlier request.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        self.client.send(&Request::Flush)?;
        match self.client.answer()? {
            (Response::Ok, _) => Ok(()),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// Dump files the daemon completed since the last call (dump sessions).
    pub fn published(&mut self) -> Vec<String> {
        if self.client.ended.is_none() {
            self.poll_notices();
        }
        std::mem::take(&mut self.client.published)
    }

    /// Queues frames to send on the session's interface at their times
    /// (at most [`MAX_INJECT_BATCH`](crate::MAX_INJECT_BATCH)
    /// per call); each gets exactly one report (see [`Session::inject_reports`]),
    /// refused ones too. Fails only if the batch as a whole is refused (the
    /// grant has no injection rights, say, or the daemon holds too many
    /// reports not yet asked for: take them, then send again).
    pub fn inject(&mut self, frames: Vec<InjectFrame>) -> Result<(), ClientError> {
        self.client.send(&Request::Inject { frames })?;
        match self.client.answer()? {
            (Response::Ok, _) => Ok(()),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// The transmit reports ready so far (up to 256 per call).
    pub fn inject_reports(&mut self) -> Result<Vec<InjectReport>, ClientError> {
        self.client.send(&Request::InjectReports)?;
        match self.client.answer()? {
            (Response::InjectReports { reports }, _) => Ok(reports),
            (r, _) => Err(ClientError::Protocol(format!(
                "{r:?} instead of InjectReports"
            ))),
        }
    }

    /// Replaces the filter (still ANDed with the grant's).
    pub fn set_filter(&mut self, filter: &str) -> Result<(), ClientError> {
        let program = compile_filter(filter)?;
        self.set_compiled_filter(filter, program)
    }

    /// [`set_filter`](Self::set_filter) with the program already made
    /// ([`crate::compiled_filter`]).
    pub fn set_compiled_filter(
        &mut self,
        filter: &str,
        program: Option<FilterProgram>,
    ) -> Result<(), ClientError> {
        self.client.send(&Request::SetFilter {
            filter: filter.to_string(),
            program,
        })?;
        match self.client.answer()? {
            (Response::Ok, _) => {
                self.effective.filter = filter.to_string();
                Ok(())
            }
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// If the daemon has ended the session: why, and the final counters.
    /// Does not block.
    pub fn ended(&mut self) -> Option<(String, SessionCounters)> {
        if self.client.ended.is_none() {
            self.poll_notices();
        }
        self.client.ended.clone()
    }

    fn poll_notices(&mut self) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.client.conn, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0) {
            // Only notices come unasked (Ended, DumpPublished); a closed
            // connection means the session is over.
            match self.client.message() {
                Ok((Response::Ended { reason, counters }, _)) => {
                    self.client.ended = Some((reason, counters))
                }
                Ok((Response::DumpPublished { name }, _)) => self.client.published.push(name),
                Ok(_) => {}
                Err(e) => {
                    self.client.ended = Some((
                        format!("the connection to ringcapd ended: {e}"),
                        SessionCounters::default(),
                    ))
                }
            }
        }
    }

    /// Asks the daemon to end the session and waits until it has: returns
    /// why and the final counters. The ring stays mapped and holds every
    /// packet the daemon delivered before the end that was not read yet
    /// (the counters count them as delivered): read them with
    /// [`Session::packets`].
    pub fn stop(&mut self) -> Result<(String, SessionCounters), ClientError> {
        if let Some(e) = self.client.ended.clone() {
            return Ok(e);
        }
        self.client.send(&Request::Close)?;
        loop {
            match self.client.message()? {
                (Response::Ended { reason, counters }, _) => {
                    self.client.ended = Some((reason.clone(), counters));
                    return Ok((reason, counters));
                }
                (Response::Error { message }, _) => return Err(ClientError::Daemon(message)),
                (Response::DumpPublished { name }, _) => self.client.published.push(name),
                // Answers to earlier requests: nothing to do with them now.
                _ => {}
            }
        }
    }

    /// Ends the session; returns the final counters. Packets still in the
    /// ring are discarded: use [`Session::stop`] and [`Session::packets`] to
    /// keep them.
    pub fn close(mut self) -> Result<(String, SessionCounters), ClientError> {
        self.stop()
    }
}
