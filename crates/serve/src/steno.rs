//! stenographer's query language, translated into a tcpdump filter and a
//! time window, so that a query from `stenoread`/`stenocurl` is answered by
//! the same index + libpcap path as `ringcap query`.
//!
//! The language (stenographer's `query/parser.y`, learned from its grammar,
//! not its code): `host IP`, `net IP/N`, `net IP mask MASK`, `port N`,
//! `ip proto N`, `tcp`, `udp`, `icmp`, `before T`, `after T` (T is RFC 3339
//! or `N{s,m,h,d} ago`), `and`/`&&`, `or`/`||`, parentheses. `and` and `or`
//! bind equally, left to right (`a or b and c` is `(a or b) and c`): that is
//! stenographer's grammar, kept so a query means what its user meant there.
//!
//! Each primitive becomes the tcpdump primitive that says the same thing
//! (`ip proto N` becomes `(ip proto N or ip6 proto N)`, as stenographer's
//! protocol index covers both; a net's host bits are cleared as
//! stenographer does). Times are per packet (stenographer only narrows to
//! whole files), `after` inclusive and `before` exclusive like `ringcap
//! query`; they must be `and`-ed with the rest of the query (a time under an
//! `or` has no tcpdump equivalent and is refused with a clear message).
//! Words are matched whole (stenographer matches keyword prefixes, so
//! `hostile` would read as `host ile` there; here it is an error).

use std::fmt;
use std::net::IpAddr;

use ringcap_index::query::Window;

/// A query in stenographer's language, as tcpdump filter and time window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    /// The tcpdump filter ("" for every packet).
    pub filter: String,
    /// The time window (`after` inclusive, `before` exclusive).
    pub window: Window,
}

/// Why a query was refused: the message and the character it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What is wrong.
    pub message: String,
    /// Byte offset in the query.
    pub at: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.at)
    }
}

impl std::error::Error for ParseError {}

/// Nesting deeper than this is refused (parentheses recurse).
const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    And,
    Or,
    Open,
    Close,
    Slash,
}

fn lex(q: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let b = q.as_bytes();
    let mut v = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let two = b.get(i..i + 2);
        let (tok, len) = match c {
            b'(' => (Tok::Open, 1),
            b')' => (Tok::Close, 1),
            b'/' => (Tok::Slash, 1),
            _ if two == Some(b"&&") => (Tok::And, 2),
            _ if two == Some(b"||") => (Tok::Or, 2),
            _ => {
                let n = b[i..]
                    .iter()
                    .take_while(|&&c| {
                        !c.is_ascii_whitespace() && !matches!(c, b'(' | b')' | b'/' | b'&' | b'|')
                    })
                    .count();
                if n == 0 {
                    return Err(ParseError {
                        message: format!("unexpected '{}'", c as char),
                        at: i,
                    });
                }
                let w = &q[i..i + n];
                let t = match w.to_ascii_lowercase().as_str() {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    _ => Tok::Word(w.to_string()),
                };
                (t, n)
            }
        };
        v.push((tok, i));
        i += len;
    }
    Ok(v)
}

/// The parsed query.
#[derive(Debug, Clone)]
enum Node {
    /// A tcpdump primitive.
    Prim(String),
    After(u64),
    Before(u64),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
}

struct Parser<'a> {
    toks: &'a [(Tok, usize)],
    pos: usize,
    end: usize,
    now_ns: u64,
}

impl Parser<'_> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            message: message.into(),
            at: self.toks.get(self.pos).map_or(self.end, |t| t.1),
        })
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }

    fn next_word(&mut self, what: &str) -> Result<String, ParseError> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => self.err(format!("expected {what}")),
        }
    }

    fn expr(&mut self, depth: usize) -> Result<Node, ParseError> {
        if depth > MAX_DEPTH {
            return self.err(format!("more than {MAX_DEPTH} nested parentheses"));
        }
        let mut left = self.term(depth)?;
        loop {
            match self.peek() {
                Some(Tok::And) => {
                    self.pos += 1;
                    left = Node::And(Box::new(left), Box::new(self.term(depth)?));
                }
                Some(Tok::Or) => {
                    self.pos += 1;
                    left = Node::Or(Box::new(left), Box::new(self.term(depth)?));
                }
                _ => return Ok(left),
            }
        }
    }

    fn ip(&mut self, what: &str) -> Result<IpAddr, ParseError> {
        let w = self.next_word(what)?;
        w.parse().or_else(|_| {
            self.pos -= 1;
            self.err(format!("bad IP address '{w}'"))
        })
    }

    fn num(&mut self, what: &str, max: u32) -> Result<u32, ParseError> {
        let w = self.next_word(what)?;
        match w.parse::<u32>() {
            Ok(n) if n <= max && w.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => {
                self.pos -= 1;
                self.err(format!("bad {what} '{w}' (0 to {max})"))
            }
        }
    }

    fn time(&mut self) -> Result<u64, ParseError> {
        let w = self.next_word("a time (RFC 3339, or N{s,m,h,d} ago)")?;
        if let Some(d) = duration_ns(&w) {
            if !matches!(self.peek(), Some(Tok::Word(a)) if a.eq_ignore_ascii_case("ago")) {
                return self.err("expected 'ago' after a duration");
            }
            self.pos += 1;
            return Ok(self.now_ns.saturating_sub(d));
        }
        // RFC 3339 only: a bare number is not a stenographer time.
        let rfc = w.len() >= 20 && w.as_bytes()[4] == b'-';
        match rfc.then(|| ringcap_index::time::parse_time(&w)) {
            Some(Ok(t)) => Ok(t),
            _ => {
                self.pos -= 1;
                self.err(format!(
                    "bad time '{w}': use RFC 3339 (2026-11-26T14:00:00Z) or N{{s,m,h,d}} ago"
                ))
            }
        }
    }

    fn term(&mut self, depth: usize) -> Result<Node, ParseError> {
        let word = match self.peek() {
            Some(Tok::Open) => {
                self.pos += 1;
                let e = self.expr(depth + 1)?;
                if self.peek() != Some(&Tok::Close) {
                    return self.err("expected ')'");
                }
                self.pos += 1;
                return Ok(e);
            }
            Some(Tok::Word(w)) => w.to_ascii_lowercase(),
            Some(_) => return self.err("expected a condition (host, net, port, ip proto, tcp, udp, icmp, before, after) or '('"),
            None => return self.err("the query ends where a condition is expected"),
        };
        self.pos += 1;
        Ok(match word.as_str() {
            "host" => Node::Prim(format!("host {}", self.ip("an IP address after 'host'")?)),
            "port" => Node::Prim(format!("port {}", self.num("port", 65535)?)),
            "tcp" | "udp" | "icmp" => Node::Prim(word),
            "ip" => {
                match self.peek() {
                    Some(Tok::Word(p)) if p.eq_ignore_ascii_case("proto") => self.pos += 1,
                    _ => return self.err("expected 'proto' after 'ip'"),
                }
                let n = self.num("protocol", 255)?;
                Node::Prim(format!("(ip proto {n} or ip6 proto {n})"))
            }
            "net" => {
                let ip = self.ip("an IP address after 'net'")?;
                let bits = match self.peek() {
                    Some(Tok::Slash) => {
                        self.pos += 1;
                        let max = if ip.is_ipv4() { 32 } else { 128 };
                        self.num("prefix length", max)?
                    }
                    Some(Tok::Word(m)) if m.eq_ignore_ascii_case("mask") => {
                        self.pos += 1;
                        let mask = self.ip("a mask after 'mask'")?;
                        match prefix_of_mask(ip, mask) {
                            Some(b) => b,
                            None => {
                                self.pos -= 1;
                                return self.err(format!(
                                    "mask {mask} is not a contiguous mask of the same family as {ip}"
                                ));
                            }
                        }
                    }
                    _ => return self.err("expected '/N' or 'mask M' after the net's address"),
                };
                Node::Prim(format!("net {}/{bits}", network(ip, bits)))
            }
            "before" => Node::Before(self.time()?),
            "after" => Node::After(self.time()?),
            _ => {
                self.pos -= 1;
                return self.err(format!(
                    "unknown word '{word}' (stenographer's language: host, net, port, ip proto, tcp, udp, icmp, before, after, and, or)"
                ));
            }
        })
    }
}

/// `N` followed by s, m, h or d, in nanoseconds.
fn duration_ns(w: &str) -> Option<u64> {
    // On bytes: the last character may be more than one byte long, and a
    // str cut inside a character panics.
    let (unit, n) = w.as_bytes().split_last()?;
    if n.is_empty() || !n.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(n).ok()?.parse().ok()?;
    let s = match unit {
        b's' => 1,
        b'm' => 60,
        b'h' => 3600,
        b'd' => 86_400,
        _ => return None,
    };
    n.checked_mul(s)?.checked_mul(1_000_000_000)
}

fn prefix_of_mask(ip: IpAddr, mask: IpAddr) -> Option<u32> {
    let m: u128 = match (ip, mask) {
        (IpAddr::V4(_), IpAddr::V4(m)) => (u32::from(m) as u128) << 96,
        (IpAddr::V6(_), IpAddr::V6(m)) => u128::from(m),
        _ => return None,
    };
    let bits = m.leading_ones();
    let contiguous = m.checked_shl(bits).unwrap_or(0) == 0;
    let bits = if ip.is_ipv4() { bits.min(32) } else { bits };
    contiguous.then_some(bits)
}

fn network(ip: IpAddr, bits: u32) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

fn has_time(n: &Node) -> bool {
    match n {
        Node::Prim(_) => false,
        Node::After(_) | Node::Before(_) => true,
        Node::And(a, b) | Node::Or(a, b) => has_time(a) || has_time(b),
    }
}

fn to_filter(n: &Node) -> String {
    match n {
        Node::Prim(p) => p.clone(),
        Node::And(a, b) => format!("({} and {})", to_filter(a), to_filter(b)),
        Node::Or(a, b) => format!("({} or {})", to_filter(a), to_filter(b)),
        // has_time() keeps times out of here.
        Node::After(_) | Node::Before(_) => String::new(),
    }
}

/// Splits the top-level `and`s into a window and filter parts.
fn collect(n: &Node, window: &mut Window, parts: &mut Vec<String>) -> Result<(), String> {
    match n {
        Node::And(a, b) => {
            collect(a, window, parts)?;
            collect(b, window, parts)
        }
        Node::After(t) => {
            window.after = Some(window.after.map_or(*t, |a| a.max(*t)));
            Ok(())
        }
        Node::Before(t) => {
            window.before = Some(window.before.map_or(*t, |b| b.min(*t)));
            Ok(())
        }
        other if has_time(other) => Err(
            "'before'/'after' must be and-ed with the whole query, not inside an 'or' \
             (and and or bind equally, left to right: add parentheses, e.g. \
             '(host A or host B) and after 1h ago')"
                .into(),
        ),
        other => {
            parts.push(to_filter(other));
            Ok(())
        }
    }
}

/// Translates a stenographer query; `now_ns` is the time `N ago` counts back from.
pub fn translate(query: &str, now_ns: u64) -> Result<Translated, ParseError> {
    let toks = lex(query)?;
    if toks.is_empty() {
        return Err(ParseError {
            message: "empty query".into(),
            at: 0,
        });
    }
    let mut p = Parser {
        toks: &toks,
        pos: 0,
        end: query.len(),
        now_ns,
    };
    let node = p.expr(0)?;
    if p.pos < toks.len() {
        return p.err("expected 'and', 'or' or the end of the query");
    }
    let mut window = Window::default();
    let mut parts = Vec::new();
    collect(&node, &mut window, &mut parts).map_err(|message| ParseError { message, at: 0 })?;
    Ok(Translated {
        filter: parts.join(" and "),
        window,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_165_600_000_000_000;

    fn ok(q: &str) -> Translated {
        translate(q, NOW).unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    #[test]
    fn primitives_and_combinations() {
        assert_eq!(ok("host 198.18.0.1").filter, "host 198.18.0.1");
        assert_eq!(ok("port 53").filter, "port 53");
        assert_eq!(ok("ip proto 47").filter, "(ip proto 47 or ip6 proto 47)");
        assert_eq!(ok("net 198.18.3.7/16").filter, "net 198.18.0.0/16");
        assert_eq!(
            ok("net 198.18.3.7 mask 255.255.255.0").filter,
            "net 198.18.3.0/24"
        );
        assert_eq!(ok("net fd52:4300::1/32").filter, "net fd52:4300::/32");
        assert_eq!(ok("TCP").filter, "tcp");
        // Equal binding, left to right.
        assert_eq!(
            ok("host 198.18.0.1 or port 53 and udp").filter,
            "(host 198.18.0.1 or port 53) and udp"
        );
        assert_eq!(
            ok("host 198.18.0.1||(port 53&&udp)").filter,
            "(host 198.18.0.1 or (port 53 and udp))"
        );
    }

    #[test]
    fn times() {
        let t = ok("after 2025-11-26T14:00:00Z and port 80 and before 1h ago");
        assert_eq!(t.filter, "port 80");
        assert_eq!(t.window.after, Some(NOW));
        assert_eq!(t.window.before, Some(NOW - 3_600_000_000_000));
        let t = ok("after 3d ago and after 10m ago");
        assert_eq!(t.window.after, Some(NOW - 600_000_000_000));
        assert_eq!(t.filter, "");
        assert!(translate("host 198.18.0.1 or after 1h ago", NOW).is_err());
        assert!(translate("after 1h", NOW).is_err());
        assert!(translate("after 1764165600", NOW).is_err());
    }

    #[test]
    fn refused() {
        for q in [
            "",
            "hostile 1.2.3.4",
            "host",
            "host 1.2.3",
            "port 65536",
            "ip proto 256",
            "net 1.2.3.4/33",
            "net 1.2.3.4 mask 255.0.255.0",
            "net 1.2.3.4 mask ffff::",
            "(port 1",
            "port 1)",
            "port 1 port 2",
            "host 1.2.3.4 and",
            "port -1",
            "port 1; rm -rf /",
        ] {
            assert!(translate(q, NOW).is_err(), "{q}");
        }
        let deep = "(".repeat(100) + "port 1" + &")".repeat(100);
        assert!(translate(&deep, NOW).is_err());
    }

    /// Text that is not ASCII where a time is expected is an error, never
    /// a panic (these once sliced a str inside a character).
    #[test]
    fn non_ascii_times_are_errors() {
        for q in [
            "after 1é",
            "before 1é ago",
            "after é",
            "after 2026-11-26T14:00:00+0é00",
            "after 2026-11-26T14:00:00+é:00",
            "after 2026-11-26T14:00:00.é",
            "after 2026-11-26T14:0é:00Z",
            "after 2026-11-26Té4:00:00Z",
        ] {
            assert!(translate(q, NOW).is_err(), "{q}");
        }
        for t in [
            "2026-11-26T14:00:00+0é00",
            "2026-11-26T14:00:00-é:00",
            "2026-11-26T14:00:00é",
            "2026-11-26T14:00:00.5+01:0é",
        ] {
            assert!(ringcap_index::time::parse_time(t).is_err(), "{t}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// No text makes the translation or the time parser panic.
        #[test]
        fn never_panics(s in "\\PC{0,40}", pick in 0usize..4) {
            let prefix = ["", "after ", "before ", "after 2026-11-26T14:00:00"][pick];
            let q = format!("{prefix}{s}");
            let _ = translate(&q, NOW);
            let _ = ringcap_index::time::parse_time(&q);
            let _ = ringcap_index::time::parse_time(&s);
        }

        /// Times shaped like RFC 3339 with any characters in any place.
        #[test]
        fn rfc3339_shapes_never_panic(
            chars in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::char::range('0', '9'),
                    proptest::strategy::Just('-'),
                    proptest::strategy::Just(':'),
                    proptest::strategy::Just('+'),
                    proptest::strategy::Just('T'),
                    proptest::strategy::Just('.'),
                    proptest::strategy::Just('Z'),
                    proptest::char::any(),
                ],
                18..30,
            )
        ) {
            let t: String = chars.into_iter().collect();
            let _ = ringcap_index::time::parse_time(&t);
            let _ = translate(&format!("after {t}"), NOW);
        }
    }
}
