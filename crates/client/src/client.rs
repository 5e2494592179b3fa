//! The connection to the daemon ([`Client`]): connecting, sending a
//! request, reading answers (keeping the notices that come unasked), and
//! the requests about dump files and sessions that need no session of their
//! own. Opening a session is in `session`, retrieval in `retrieve`.

use crate::{default_socket, ClientError, DumpFile, SessionCounters};
use ringcap_proto::{
    decode_response, encode_request, transport, Request, Response, SessionInfo, MAX_DATAGRAM,
};
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

/// A connection to the daemon.
pub struct Client {
    pub(super) conn: OwnedFd,
    buf: Box<[u8; MAX_DATAGRAM]>,
    /// An `Ended` that arrived while waiting for another answer.
    pub(super) ended: Option<(String, SessionCounters)>,
    /// Dump files the daemon said it completed, not yet taken.
    pub(super) published: Vec<String>,
}

impl Client {
    /// Connects to the daemon at `path`.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let conn = transport::connect(path).map_err(|e| {
            ClientError::Io(io::Error::new(
                e.kind(),
                format!("cannot reach ringcapd at {}: {e}", path.display()),
            ))
        })?;
        Ok(Client {
            conn,
            buf: Box::new([0u8; MAX_DATAGRAM]),
            ended: None,
            published: Vec::new(),
        })
    }

    /// Connects to the daemon at [`default_socket`].
    pub fn connect_default() -> Result<Client, ClientError> {
        Client::connect(&default_socket())
    }

    pub(super) fn send(&mut self, req: &Request) -> Result<(), ClientError> {
        transport::send(&self.conn, &encode_request(req), &[])?;
        Ok(())
    }

    /// The next message from the daemon, whatever it is.
    pub(super) fn message(&mut self) -> Result<(Response, Vec<OwnedFd>), ClientError> {
        let Some((len, fds)) = transport::recv(&self.conn, &mut self.buf)? else {
            return Err(ClientError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "ringcapd closed the connection",
            )));
        };
        let r =
            decode_response(&self.buf[..len]).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok((r, fds))
    }

    /// The next answer that is not an `Ended` notice (those are kept).
    pub(super) fn answer(&mut self) -> Result<(Response, Vec<OwnedFd>), ClientError> {
        loop {
            let (r, fds) = self.message()?;
            match r {
                Response::Ended { reason, counters } => self.ended = Some((reason, counters)),
                Response::DumpPublished { name } => self.published.push(name),
                Response::Error { message } => return Err(ClientError::Daemon(message)),
                Response::Refused {
                    grant,
                    rule,
                    reason,
                } => {
                    return Err(ClientError::Refused {
                        grant,
                        rule,
                        reason,
                    })
                }
                other => return Ok((other, fds)),
            }
        }
    }

    /// This user's dump files, oldest first.
    pub fn list_dumps(&mut self) -> Result<Vec<DumpFile>, ClientError> {
        self.send(&Request::ListDumps)?;
        match self.answer()? {
            (Response::Dumps { files }, _) => Ok(files),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Dumps"))),
        }
    }

    /// One of this user's dump files, as a read-only file, and its size.
    pub fn fetch_dump(&mut self, name: &str) -> Result<(std::fs::File, u64), ClientError> {
        self.send(&Request::FetchDump {
            name: name.to_string(),
        })?;
        match self.answer()? {
            (Response::Dump { bytes, .. }, fds) => {
                let [fd] = transport::expect_fds::<1>(fds)?;
                Ok((std::fs::File::from(fd), bytes))
            }
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Dump"))),
        }
    }

    /// Deletes one of this user's dump files.
    pub fn delete_dump(&mut self, name: &str) -> Result<(), ClientError> {
        self.send(&Request::DeleteDump {
            name: name.to_string(),
        })?;
        match self.answer()? {
            (Response::Ok, _) => Ok(()),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Ok"))),
        }
    }

    /// The daemon's sessions (a user sees their own; root sees all).
    pub fn sessions(&mut self) -> Result<Vec<SessionInfo>, ClientError> {
        self.send(&Request::Sessions)?;
        match self.answer()? {
            (Response::Sessions { sessions, .. }, _) => Ok(sessions),
            (r, _) => Err(ClientError::Protocol(format!("{r:?} instead of Sessions"))),
        }
    }
}
