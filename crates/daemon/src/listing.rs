//! Listings whose size depends on other users' state, bounded so that
//! they always fit one message: the `Sessions` answer root (or anyone)
//! asks for must never become an error because some user runs sessions
//! with 16 KiB filters (three of them, in tabs that JSON doubles, pushed
//! the answer past the 64 KiB message limit and the daemon closed root's
//! connection).

use ringcap_proto::{encode_response, Response, SessionInfo, MAX_DATAGRAM};

/// Characters of a session's filter shown in a `Sessions` listing; longer
/// ones are cut and marked, so that no user's filter can grow the listing
/// another user (root) asks for past the message limit.
pub const LISTED_FILTER_CHARS: usize = 256;

/// The `Sessions` answer for `sessions` (sorted), always within the message
/// limit however many sessions other users run and whatever their filters:
/// each filter cut to [`LISTED_FILTER_CHARS`] with a marker saying how much
/// was left out, and entries that do not fit counted in `more`.
pub fn sessions_reply(mut sessions: Vec<SessionInfo>) -> Response {
    for s in &mut sessions {
        if s.filter.chars().count() > LISTED_FILTER_CHARS {
            let cut: String = s.filter.chars().take(LISTED_FILTER_CHARS).collect();
            let left = s.filter.len() - cut.len();
            s.filter = format!("{cut}... [{left} more bytes]");
        }
    }
    // Headroom under the datagram limit for the envelope and `more`.
    let room = MAX_DATAGRAM - 256;
    let mut used = 64;
    let mut fit = 0;
    for s in &sessions {
        let n = serde_json_len(s);
        if used + n + 1 > room {
            break;
        }
        used += n + 1;
        fit += 1;
    }
    let more = (sessions.len() - fit) as u64;
    sessions.truncate(fit);
    Response::Sessions { sessions, more }
}

/// Bytes one listing entry takes in a reply (encoded alone).
fn serde_json_len(s: &SessionInfo) -> usize {
    encode_response(&Response::Sessions {
        sessions: vec![s.clone()],
        more: 0,
    })
    .len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringcap_proto::SessionCounters;

    #[test]
    fn sessions_replies_fit_whatever_others_run() {
        let info = |i: u64, filter: String| SessionInfo {
            session: i,
            uid: 1000,
            interfaces: vec!["eth0".into()],
            filter,
            counters: SessionCounters::default(),
            started_s: 0,
        };
        // 2000 sessions with 16 KiB filters of tabs (JSON doubles them).
        let many = (0..2000).map(|i| info(i, "\t".repeat(16 * 1024))).collect();
        let reply = sessions_reply(many);
        assert!(encode_response(&reply).len() <= MAX_DATAGRAM);
        let Response::Sessions { sessions, more } = reply else {
            panic!("not a Sessions reply");
        };
        assert!(sessions.len() > 50, "only {} listed", sessions.len());
        assert_eq!(sessions.len() as u64 + more, 2000);
        assert_eq!(sessions[0].session, 0, "the first ones, in order");
        assert!(sessions[0]
            .filter
            .ends_with(&format!("[{} more bytes]", 16 * 1024 - 256)));
        // Short filters are listed whole, and a few sessions all fit.
        let few = (0..3).map(|i| info(i, "udp".into())).collect();
        let Response::Sessions { sessions, more } = sessions_reply(few) else {
            panic!("not a Sessions reply");
        };
        assert_eq!((sessions.len(), more), (3, 0));
        assert_eq!(sessions[2].filter, "udp");
    }
}
