//! The audit log: one line per session start, change and end, and per
//! refusal (who, what they asked, what the policy gave, the counters), on
//! standard error (journald under systemd).
//!
//! What a client sends reaches the log bounded, so no client can flood it
//! (hostile review qa-d26 #7: refused opens, each with 16 KiB of filter
//! text, wrote 110 MiB/s, and journald's rate limit then dropped every
//! other user's lines): text a client chose is cut to [`TEXT`] characters
//! ([`text`]) and a line to [`LINE`] bytes; and refusals, which cost a
//! client nothing, have a budget per user other than root ([`RATE`] a
//! second, [`BURST`] at once): refusals past it are counted, and the next
//! refusal of that user written says how many were not. What a user was
//! given (start, change, end, a retrieval, a dump fetched or deleted) is
//! always written: a flood of refusals must not hide a session
//! (hostile re-review qa-d26b #2).

use ringcap_inject::rate::monotonic_ns;
use ringcap_proto::SessionCounters;
use ringcap_stages::rate::TokenBucket;
use std::collections::HashMap;
use std::sync::Mutex;

/// Characters of a client's text (a filter, a name) kept in a line.
pub const TEXT: usize = 200;
/// Bytes of a line's detail kept.
pub const LINE: usize = 2048;
/// Refusal lines a second one user (not root) may have written.
pub const RATE: u64 = 50;
/// Refusal lines one user may have written at once.
pub const BURST: u64 = 200;

/// Per user: the budget of refusal lines, and those not written since
/// the last one that was.
static BUDGETS: Mutex<Option<HashMap<u32, (TokenBucket, u64)>>> = Mutex::new(None);

/// Writes one audit line.
pub fn log(event: &str, session: Option<u64>, uid: u32, detail: &str) {
    let s = session.map(|s| format!(" session={s}")).unwrap_or_default();
    eprintln!(
        "ringcapd: audit: {event}{s} uid={uid} {}",
        cut(detail, LINE)
    );
}

/// Writes a refusal's line (event `refuse`), within the user's budget.
pub fn refused(uid: u32, detail: &str) {
    let Some(skipped) = admit(uid, monotonic_ns()) else {
        return;
    };
    if skipped > 0 {
        let more =
            format!(" ({skipped} earlier refusals of this user not logged: over {RATE} a second)");
        log("refuse", None, uid, &format!("{}{more}", cut(detail, LINE)));
    } else {
        log("refuse", None, uid, detail);
    }
}

/// `Some(refusals skipped before this one)` if `uid` may have a refusal
/// written at `now_ns`; else counts it as skipped.
fn admit(uid: u32, now_ns: u64) -> Option<u64> {
    if uid == 0 {
        return Some(0);
    }
    let mut all = BUDGETS.lock().unwrap_or_else(|e| e.into_inner());
    let (bucket, skipped) = all
        .get_or_insert_with(HashMap::new)
        .entry(uid)
        .or_insert_with(|| (TokenBucket::new(RATE, BURST), 0));
    if bucket.take(now_ns, 1) {
        Some(std::mem::take(skipped))
    } else {
        *skipped += 1;
        None
    }
}

/// A client's text for a line: quoted, at most [`TEXT`] characters, and
/// when longer its length in bytes.
pub fn text(s: &str) -> String {
    match s.char_indices().nth(TEXT) {
        None => format!("{s:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &s[..end], s.len()),
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Counters in one audit field.
pub fn counters(c: &SessionCounters) -> String {
    format!(
        "accepted={} sampled_out={} rate_limited={} dropped_ring={} dropped_client={} delivered={}",
        c.packets_filter_accepted,
        c.packets_sampled_out,
        c.packets_rate_limited,
        c.packets_dropped_ring,
        c.packets_dropped_client,
        c.packets_delivered
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_text_is_bounded() {
        assert_eq!(text("udp"), "\"udp\"");
        let long = "é".repeat(10_000);
        let t = text(&long);
        assert!(t.len() < 3 * TEXT, "{}", t.len());
        assert!(t.ends_with("... (20000 bytes)"), "{t}");
        assert_eq!(cut(&long, 5), "éé");
        assert_eq!(cut("abc", 5), "abc");
    }

    /// A user gets BURST lines at once and RATE a second after; the line
    /// after a gap says how many were skipped; root is never held.
    #[test]
    fn each_user_has_a_budget_of_lines() {
        let uid = 4_000_123;
        let t = 1_000_000_000_000u64;
        for _ in 0..BURST {
            assert_eq!(admit(uid, t), Some(0));
        }
        for _ in 0..1000 {
            assert_eq!(admit(uid, t), None);
        }
        assert_eq!(admit(uid + 1, t), Some(0), "another user");
        assert_eq!(admit(0, t), Some(0));
        // One second later: RATE lines, the first saying 1000 were skipped.
        let t = t + 1_000_000_000;
        assert_eq!(admit(uid, t), Some(1000));
        for _ in 1..RATE {
            assert_eq!(admit(uid, t), Some(0));
        }
        assert_eq!(admit(uid, t), None);
    }
}
