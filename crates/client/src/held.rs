//! Reading a session's ring in place, for a reader that hands packets out
//! over several calls and sleeps in its caller's `select` (the libpcap
//! shim: `pcap_next_ex`, `pcap_get_selectable_fd`): a chunk is held in the
//! ring, unread chunks wait there, and the daemon is asked for a wake-up
//! only when the caller goes to sleep. Nothing is copied.

use crate::{ClientError, Session};

/// A chunk of records held in the session's ring, for a reader that hands
/// its packets out over several calls without copying them (the libpcap
/// shim's `pcap_next_ex`): see [`Session::hold_next`].
#[derive(Debug, Clone, Copy)]
pub struct Held {
    span: ringcap_shm::Span,
}

impl Session {
    /// Gives the daemon back the chunk held before (and any read before
    /// it) and holds the next chunk of records in the ring: its bytes stay
    /// readable through [`Session::held`] until the next call.
    /// `None`: no chunk now (everything read was given back). The records
    /// are read where the daemon wrote them, never copied; for streams that
    /// are not compressed.
    pub fn hold_next(&mut self) -> Result<Option<Held>, ClientError> {
        if self.unpack.is_some() {
            return Err(ClientError::Protocol(
                "holding chunks of a compressed stream".into(),
            ));
        }
        let Some(span) = self
            .ring
            .next_span()
            .map_err(|e| ClientError::Protocol(e.to_string()))?
        else {
            self.ring.release();
            return Ok(None);
        };
        self.ring.release_before(&span);
        Ok(Some(Held { span }))
    }

    /// The bytes of a chunk [`Session::hold_next`] holds (empty once it was
    /// given back): records as in [`crate::Records`], *not* walked here
    /// (that walk cost ~13 ns a packet in the libpcap shim, which reads
    /// each record header once anyway): the reader checks each record's
    /// length against what is left before taking it.
    pub fn held(&self, h: &Held) -> &[u8] {
        self.ring.span(&h.span)
    }

    /// For a reader that sleeps elsewhere, polling [`Session::wake_fds`]
    /// (a tool's `select`): asks the daemon for a wake-up at its next
    /// append, unless chunks (or the ring's end) are there already — then
    /// returns true and asks nothing. [`Session::end_sleep`] when awake.
    pub fn begin_sleep(&self) -> bool {
        self.ring.begin_sleep()
    }

    /// Ends a sleep begun with [`Session::begin_sleep`].
    pub fn end_sleep(&self) {
        self.ring.end_sleep()
    }

    /// What to poll while asleep: the ring's wake-up pipe and the
    /// connection to the daemon (readable when it ends the session or
    /// goes away).
    pub fn wake_fds(&self) -> [std::os::fd::BorrowedFd<'_>; 2] {
        use std::os::fd::AsFd;
        [self.ring.wake_fd(), self.client.conn.as_fd()]
    }
}
