//! Retrieval of stored packets ([`Client::retrieve`]): the request, the
//! admitted retrieval and how it ended. Apart from sessions because it
//! needs none: the answer is a pcap stream on a pipe, not a ring.

use crate::{compile_filter, Client, ClientError, Snap};
use ringcap_proto::{transport, Effective, Request, Response};

/// A retrieval of stored packets ([`Client::retrieve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrieveRequest {
    /// The interface whose stored packets are asked for.
    pub interface: String,
    /// The filter (tcpdump syntax), compiled here like a session's.
    pub filter: String,
    /// How much of each packet to keep (the grant may cap it).
    pub snaplen: Snap,
    /// Packets at or after this time, ns since the epoch.
    pub after_ns: Option<u64>,
    /// Packets before this time, ns since the epoch (absent: now).
    pub before_ns: Option<u64>,
    /// Most bytes of answer wanted (the grant may cap it).
    pub max_bytes: Option<u64>,
}

/// An admitted retrieval: read [`Retrieval::stream`] (a pcap stream) to
/// its end, then [`Retrieval::finish`] says whether it is whole.
pub struct Retrieval {
    client: Client,
    /// The answer: a pcap stream (nanosecond timestamps) on a pipe.
    pub stream: std::fs::File,
    /// What the policy made of the request.
    pub effective: Effective,
    /// The window in force (ns): packets at or after `after_ns`...
    pub after_ns: u64,
    /// ... and before `before_ns`.
    pub before_ns: u64,
    /// Most bytes the answer may hold.
    pub max_bytes: u64,
}

/// How a retrieval ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retrieved {
    /// Packets in the answer.
    pub packets: u64,
    /// Bytes of the answer.
    pub bytes: u64,
    /// Files the daemon looked at.
    pub files: u64,
    /// Why the answer was cut short, if it was.
    pub cut: Option<String>,
}

impl Client {
    /// Asks for stored packets: refused, or a [`Retrieval`] whose stream
    /// carries the answer. The filter is compiled here (the daemon never
    /// compiles client text) and sent with its text.
    pub fn retrieve(mut self, req: RetrieveRequest) -> Result<Retrieval, ClientError> {
        let program = compile_filter(&req.filter)?;
        self.send(&Request::Retrieve {
            interface: req.interface,
            filter: req.filter,
            program,
            snaplen: req.snaplen,
            after_ns: req.after_ns,
            before_ns: req.before_ns,
            max_bytes: req.max_bytes,
        })?;
        match self.answer()? {
            (
                Response::Retrieving {
                    effective,
                    after_ns,
                    before_ns,
                    max_bytes,
                },
                fds,
            ) => {
                let [fd] = transport::expect_fds::<1>(fds)?;
                Ok(Retrieval {
                    client: self,
                    stream: std::fs::File::from(fd),
                    effective,
                    after_ns,
                    before_ns,
                    max_bytes,
                })
            }
            (r, _) => Err(ClientError::Protocol(format!(
                "{r:?} instead of Retrieving"
            ))),
        }
    }
}

impl Retrieval {
    /// After the stream's end: how the retrieval ended.
    pub fn finish(mut self) -> Result<Retrieved, ClientError> {
        drop(self.stream);
        match self.client.answer()? {
            (
                Response::Retrieved {
                    packets,
                    bytes,
                    files,
                    cut,
                },
                _,
            ) => Ok(Retrieved {
                packets,
                bytes,
                files,
                cut,
            }),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Retrieved"))),
        }
    }
}
