//! What an index can answer of a tcpdump filter expression.
//!
//! The expression is parsed into a small tree of `and`/`or`/`not` over the
//! terms the index has keys for (`host`, `net`, `port`, `portrange`, `proto`
//! and the protocol names, `vlan N`). Every other term is [`Expr::All`]: the
//! index cannot narrow it. Evaluating the tree against an index gives the
//! groups that *may* hold a match: `and` intersects, `or` unites, `not` is
//! everything (a group holding a key may hold other packets too). libpcap's
//! compiled filter then decides exactly, so a plan can only be too wide,
//! never too narrow — provided the parse agrees with libpcap's grammar:
//! `and` and `or` bind equally and group to the left, `not` binds tightest,
//! and a bare value after `and`/`or` takes the qualifiers of the term
//! before it (`host a or b`).
//!
//! What would make a narrowing wrong is refused outright (the whole filter
//! becomes [`Expr::All`], a scan): a keyword the parser does not know
//! (`mpls`, `pppoes`, `geneve` and other keywords change the offsets every
//! later term reads at), byte-offset expressions (`tcp[13] & 2 != 0`), and
//! `vlan` anywhere but as a top-level `and` term (libpcap moves the offsets
//! of everything after the first `vlan`, also inside `or` and `not`).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::keys::{packet_keys, Key, Kind};

/// A filter, as far as an index can answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Anything: the index cannot narrow this.
    All,
    /// Packets with a key of `kind` in `lo..=hi`.
    Key {
        /// Kind of key.
        kind: Kind,
        /// Smallest value.
        lo: u128,
        /// Largest value.
        hi: u128,
    },
    /// Both.
    And(Box<Expr>, Box<Expr>),
    /// Either.
    Or(Box<Expr>, Box<Expr>),
    /// Not (answered as [`Expr::All`]).
    Not(Box<Expr>),
}

/// The kind of value a qualifier takes, inherited by bare values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Host,
    Net,
    Port,
    Portrange,
    Proto,
    Other,
}

/// Every libpcap keyword; one of these that the parser does not handle
/// makes the filter unplannable.
const KEYWORDS: &[&str] = &[
    "dst",
    "src",
    "host",
    "net",
    "mask",
    "port",
    "portrange",
    "proto",
    "protochain",
    "gateway",
    "type",
    "subtype",
    "direction",
    "dir",
    "action",
    "reason",
    "ether",
    "fddi",
    "tr",
    "wlan",
    "ppp",
    "slip",
    "link",
    "arp",
    "rarp",
    "ip",
    "sctp",
    "tcp",
    "udp",
    "icmp",
    "igmp",
    "igrp",
    "pim",
    "vrrp",
    "carp",
    "radio",
    "ip6",
    "icmp6",
    "ah",
    "esp",
    "decnet",
    "lat",
    "sca",
    "moprc",
    "mopdl",
    "iso",
    "esis",
    "es-is",
    "isis",
    "is-is",
    "l1",
    "l2",
    "iih",
    "lsp",
    "snp",
    "csnp",
    "psnp",
    "clnp",
    "stp",
    "ipx",
    "netbeui",
    "atalk",
    "aarp",
    "len",
    "less",
    "greater",
    "byte",
    "broadcast",
    "multicast",
    "and",
    "or",
    "not",
    "inbound",
    "outbound",
    "ifindex",
    "vlan",
    "mpls",
    "pppoed",
    "pppoes",
    "geneve",
    "vxlan",
    "lane",
    "llc",
    "metac",
    "bcc",
    "oam",
    "oamf4",
    "oamf4ec",
    "oamf4sc",
    "sc",
    "ilmic",
    "connectmsg",
    "metaconnect",
    "on",
    "ifname",
    "rnr",
    "rulenum",
    "srnr",
    "subrulenum",
    "hdpr",
    "ra",
    "ta",
    "addr1",
    "addr2",
    "addr3",
    "addr4",
    "hsrp",
    "vxlan",
];

fn tokens(s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for word in s.split_whitespace() {
        let mut cur = String::new();
        let mut chars = word.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '(' | ')' => {
                    if !cur.is_empty() {
                        out.push(std::mem::take(&mut cur));
                    }
                    out.push(c.to_string());
                }
                '!' if cur.is_empty() && chars.peek() != Some(&'=') => out.push("!".into()),
                '&' | '|' if cur.is_empty() && chars.peek() == Some(&c) => {
                    chars.next();
                    out.push(if c == '&' { "and" } else { "or" }.into());
                }
                c if c.is_ascii_alphanumeric()
                    || matches!(c, '.' | ':' | '/' | '-' | '_' | '\\') =>
                {
                    cur.push(c)
                }
                _ => return None,
            }
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    Some(out)
}

/// Longest filter text the planner reads (longer: a scan, [`Expr::All`]).
pub const MAX_FILTER_LEN: usize = 64 << 10;
/// Deepest nesting of `not` and parentheses the planner follows.
pub const MAX_DEPTH: usize = 64;
/// Most primitives the planner puts in a tree.
pub const MAX_TERMS: usize = 256;

struct Parser {
    t: Vec<String>,
    p: usize,
    /// Nesting of `not` and parentheses now.
    depth: usize,
    /// Primitives read.
    terms: usize,
    /// The qualifier a bare value takes (libpcap's inheritance); `None`
    /// after a term that has none to give (libpcap then refuses a bare
    /// value, and so does the planner).
    last: Option<Slot>,
    /// A term has been read.
    started: bool,
}

type R = Result<Expr, ()>;

fn is_keyword(w: &str) -> bool {
    KEYWORDS.contains(&w.to_ascii_lowercase().as_str())
}

fn key(kind: Kind, lo: u128, hi: u128) -> Expr {
    Expr::Key { kind, lo, hi }
}

/// A number as libpcap's scanner reads it: `0x`/`0X` and hex digits, a
/// leading `0` and octal digits (`053` is 43), else decimal. `None` for
/// anything else, which libpcap refuses or reads as a name: the plan then
/// narrows nothing there (a scan), never a wrong key.
fn pcap_number(w: &str) -> Option<u32> {
    let (digits, radix) = match w.as_bytes() {
        [b'0', b'x' | b'X', ..] => (&w[2..], 16),
        [b'0', _, ..] => (&w[1..], 8),
        _ => (w, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

/// A 16-bit number (port, VLAN ID) as libpcap reads it.
fn pcap_u16(w: &str) -> Option<u16> {
    pcap_number(w).and_then(|n| u16::try_from(n).ok())
}

/// A decimal number without a leading zero (or `0`), which every libpcap
/// reads alike.
fn plain_u16(w: &str) -> Option<u16> {
    (w == "0" || !w.starts_with('0') && w.bytes().all(|b| b.is_ascii_digit()))
        .then(|| w.parse().ok())
        .flatten()
}

fn proto_number(w: &str) -> Option<u8> {
    let w = w.strip_prefix('\\').unwrap_or(w);
    Some(match w {
        "icmp" => 1,
        "igmp" => 2,
        "tcp" => 6,
        "udp" => 17,
        "esp" => 50,
        "ah" => 51,
        "icmp6" => 58,
        "pim" => 103,
        "vrrp" => 112,
        "sctp" => 132,
        _ => return pcap_number(w).and_then(|n| u8::try_from(n).ok()),
    })
}

/// A host value: an IPv4 or IPv6 address, else (a name) anything.
fn host(v: &str) -> Expr {
    if let Ok(a) = v.parse::<Ipv4Addr>() {
        let n = u32::from(a) as u128;
        return key(Kind::V4, n, n);
    }
    if let Ok(a) = v.parse::<Ipv6Addr>() {
        let n = u128::from(a);
        return key(Kind::V6, n, n);
    }
    Expr::All
}

fn v4_range(net: u32, bits: u32) -> Option<Expr> {
    if bits > 32 {
        return None;
    }
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    let lo = net & mask;
    Some(key(Kind::V4, lo as u128, (lo | !mask) as u128))
}

/// A net value: `a.b.c.d/len`, `a[.b[.c]]` (libpcap's class-like short
/// forms), `v6/len`, or an address (a host); anything else is `All`.
fn net(v: &str, mask: Option<&str>) -> Expr {
    if let Some(m) = mask {
        let (Ok(a), Ok(m)) = (v.parse::<Ipv4Addr>(), m.parse::<Ipv4Addr>()) else {
            return Expr::All;
        };
        let m = u32::from(m);
        if m.leading_ones() + m.trailing_zeros() != 32 {
            return Expr::All;
        }
        return v4_range(u32::from(a), m.leading_ones()).unwrap_or(Expr::All);
    }
    if let Some((a, len)) = v.split_once('/') {
        // A number to libpcap: `/010` is /8.
        let Some(bits) = pcap_number(len) else {
            return Expr::All;
        };
        if let Ok(a) = a.parse::<Ipv4Addr>() {
            return v4_range(u32::from(a), bits).unwrap_or(Expr::All);
        }
        if let (Ok(a), true) = (a.parse::<Ipv6Addr>(), bits <= 128) {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            let lo = u128::from(a) & mask;
            return key(Kind::V6, lo, lo | !mask);
        }
        return Expr::All;
    }
    let parts: Vec<&str> = v.split('.').collect();
    // One part is a number to libpcap (`net 012` is 10/8, `net 0xa` too);
    // dotted parts are decimal (`10.010` is 10.10/16).
    if let [one] = parts[..] {
        return match pcap_number(one).and_then(|n| u8::try_from(n).ok()) {
            Some(b) => v4_range(u32::from(b) << 24, 8).unwrap_or(Expr::All),
            None => Expr::All,
        };
    }
    if parts.len() < 4 && parts.iter().all(|p| !p.is_empty() && p.len() <= 3) {
        let mut n = 0u32;
        for p in &parts {
            match p.parse::<u8>() {
                Ok(b) => n = n << 8 | b as u32,
                Err(_) => return Expr::All,
            }
        }
        let bits = 8 * parts.len() as u32;
        return v4_range(n << (32 - bits), bits).unwrap_or(Expr::All);
    }
    host(v)
}

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.t.get(self.p).map(String::as_str)
    }
    fn next(&mut self) -> Option<String> {
        let t = self.t.get(self.p).cloned();
        self.p += 1;
        t
    }
    fn eat(&mut self, w: &str) -> bool {
        if self.peek() == Some(w) {
            self.p += 1;
            true
        } else {
            false
        }
    }

    fn expr(&mut self) -> R {
        let mut e = self.term()?;
        loop {
            let and = match self.peek() {
                Some("and") => true,
                Some("or") => false,
                _ => return Ok(e),
            };
            self.p += 1;
            let r = self.term()?;
            e = if and {
                Expr::And(Box::new(e), Box::new(r))
            } else {
                Expr::Or(Box::new(e), Box::new(r))
            };
        }
    }

    fn term(&mut self) -> R {
        if self.depth >= MAX_DEPTH {
            return Err(());
        }
        if self.eat("not") || self.eat("!") {
            self.depth += 1;
            let e = self.term();
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(e?)));
        }
        if self.eat("(") {
            self.depth += 1;
            let e = self.expr();
            self.depth -= 1;
            let e = e?;
            return if self.eat(")") { Ok(e) } else { Err(()) };
        }
        self.terms += 1;
        if self.terms > MAX_TERMS {
            return Err(());
        }
        self.primitive()
    }

    /// A value token (not a keyword, not punctuation).
    fn value(&mut self) -> Result<String, ()> {
        match self.peek() {
            Some(w) if !is_keyword(w) && !matches!(w, "(" | ")" | "!") => {
                Ok(self.next().unwrap_or_default())
            }
            _ => Err(()),
        }
    }

    fn slot_value(&mut self, slot: Slot, v: &str) -> R {
        self.last = Some(slot);
        Ok(match slot {
            Slot::Host => host(v),
            Slot::Net => {
                let mask = if self.eat("mask") {
                    Some(self.value()?)
                } else {
                    None
                };
                net(v, mask.as_deref())
            }
            Slot::Port => match pcap_u16(v) {
                Some(p) => key(Kind::Port, p as u128, p as u128),
                None => Expr::All,
            },
            // libpcap versions read a range's numbers differently (sscanf's
            // decimal, or as ports): plain decimal only, else a scan.
            Slot::Portrange => match v.split_once('-').map(|(a, b)| (plain_u16(a), plain_u16(b))) {
                Some((Some(a), Some(b))) => key(Kind::Port, a.min(b) as u128, a.max(b) as u128),
                _ => Expr::All,
            },
            Slot::Proto => match proto_number(v) {
                Some(n) => key(Kind::Proto, n as u128, n as u128),
                None => Expr::All,
            },
            Slot::Other => Expr::All,
        })
    }

    fn primitive(&mut self) -> R {
        let started = std::mem::replace(&mut self.started, true);
        let Some(first) = self.peek().map(str::to_ascii_lowercase) else {
            return Err(());
        };
        if !is_keyword(&first) {
            // A bare value: it takes the last qualifiers; at the start, a
            // bare address is a host.
            let v = self.value()?;
            let slot = match self.last {
                Some(s) => s,
                None if !started && matches!(host(&v), Expr::Key { .. }) => Slot::Host,
                None => return Err(()),
            };
            return self.slot_value(slot, &v);
        }
        // Protocol qualifier.
        let proto = match first.as_str() {
            "ip" | "ip6" | "arp" | "rarp" | "tcp" | "udp" | "sctp" | "icmp" | "icmp6" | "igmp"
            | "ether" | "pim" | "vrrp" | "ah" | "esp" => {
                self.p += 1;
                Some(first.clone())
            }
            _ => None,
        };
        // Direction qualifier.
        let mut dir = false;
        if self.eat("src") || self.eat("dst") {
            dir = true;
            if matches!(self.peek(), Some("and" | "or"))
                && matches!(
                    self.t.get(self.p + 1).map(String::as_str),
                    Some("src" | "dst")
                )
            {
                self.p += 2;
            }
        }
        let ty = self.peek().map(str::to_ascii_lowercase);
        let slot = match ty.as_deref() {
            Some("host") => Some(Slot::Host),
            Some("net") => Some(Slot::Net),
            Some("port") => Some(Slot::Port),
            Some("portrange") => Some(Slot::Portrange),
            Some("proto") => Some(Slot::Proto),
            Some("gateway") | Some("protochain") => Some(Slot::Other),
            _ => None,
        };
        if let Some(slot) = slot {
            self.p += 1;
            let v = self.value()?;
            // `ether host`, `ether proto`, ...: link-layer, not indexed.
            let slot = if proto.as_deref() == Some("ether") {
                Slot::Other
            } else {
                slot
            };
            return self.slot_value(slot, &v);
        }
        if dir {
            // `src 10.0.0.1`: a host (`ether src MAC`: a link address).
            let v = self.value()?;
            let slot = if proto.as_deref() == Some("ether") {
                Slot::Other
            } else {
                Slot::Host
            };
            return self.slot_value(slot, &v);
        }
        // The terms below give no qualifiers to a bare value after them.
        self.last = None;
        if let Some(p) = proto {
            // A protocol alone.
            return Ok(match p.as_str() {
                "ip" | "ip6" | "arp" | "rarp" => Expr::All,
                "ether" => {
                    // `ether broadcast`, `ether multicast`.
                    if self.eat("broadcast") || self.eat("multicast") {
                        Expr::All
                    } else {
                        return Err(());
                    }
                }
                name => match proto_number(name) {
                    Some(n) => {
                        if self.eat("broadcast") || self.eat("multicast") {
                            Expr::All
                        } else {
                            key(Kind::Proto, n as u128, n as u128)
                        }
                    }
                    None => Expr::All,
                },
            });
        }
        match first.as_str() {
            "vlan" => {
                self.p += 1;
                match self.peek().and_then(pcap_u16) {
                    Some(v) => {
                        self.p += 1;
                        Ok(Expr::Key {
                            kind: Kind::Vlan,
                            lo: v as u128,
                            hi: v as u128,
                        })
                    }
                    _ => Ok(Expr::All),
                }
            }
            "less" | "greater" => {
                self.p += 1;
                self.value()?;
                Ok(Expr::All)
            }
            "broadcast" | "multicast" => {
                self.p += 1;
                Ok(Expr::All)
            }
            _ => Err(()),
        }
    }
}

/// Parses a filter into what an index can answer; anything the parser is
/// not sure of gives [`Expr::All`].
///
/// Bounded for any input (it reads text from ringcapd's clients): at most
/// [`MAX_FILTER_LEN`] bytes, [`MAX_DEPTH`] levels of nesting and
/// [`MAX_TERMS`] primitives, beyond which the answer is [`Expr::All`] (so
/// the tree, and the recursion over it, stay small).
pub fn plan(filter: &str) -> Expr {
    if filter.len() > MAX_FILTER_LEN {
        return Expr::All;
    }
    let Some(t) = tokens(filter) else {
        return Expr::All;
    };
    if t.is_empty() {
        return Expr::All;
    }
    let t: Vec<String> = t
        .into_iter()
        .map(|w| {
            let l = w.to_ascii_lowercase();
            if is_keyword(&l) {
                l
            } else {
                w
            }
        })
        .collect();
    let vlans = t.iter().filter(|w| *w == "vlan").count();
    if vlans > 0 && !vlans_only_in_top_and(&t) {
        return Expr::All;
    }
    let mut p = Parser {
        t,
        p: 0,
        depth: 0,
        terms: 0,
        last: None,
        started: false,
    };
    match p.expr() {
        Ok(e) if p.p == p.t.len() => e,
        _ => Expr::All,
    }
}

/// True if a packet of link type `linktype` with bytes `data` may match
/// `plan` by its own keys (`scratch` is reused from packet to packet): a
/// key of the plan's kind in its range for a term, both sides for `and`,
/// either for `or`; `not` and what the index cannot narrow hold for every
/// packet, and so does everything for a packet the index cannot describe
/// ([`Kind::Any`]). This is the index's rule for one packet rather than for
/// a group of them, so a packet the plan's filter accepts always passes.
///
/// For a reader that must not let the answer about one packet depend on
/// the others of its group: the index picks groups by the keys of all
/// their packets, so the packets of a group read because of another one
/// (which the reader may hide, as ringcapd hides packets a grant excludes)
/// are dropped here unless they match on their own.
pub fn packet_may_match(plan: &Expr, linktype: u32, data: &[u8], scratch: &mut Vec<Key>) -> bool {
    if matches!(plan, Expr::All | Expr::Not(_)) {
        return true;
    }
    scratch.clear();
    packet_keys(linktype, data, scratch);
    scratch.iter().any(|k| k.kind == Kind::Any) || holds(plan, scratch)
}

fn holds(e: &Expr, keys: &[Key]) -> bool {
    match e {
        Expr::All | Expr::Not(_) => true,
        Expr::Key { kind, lo, hi } => keys
            .iter()
            .any(|k| k.kind == *kind && (*lo..=*hi).contains(&k.value)),
        Expr::And(a, b) => holds(a, keys) && holds(b, keys),
        Expr::Or(a, b) => holds(a, keys) || holds(b, keys),
    }
}

/// With a `vlan` in the filter: no `or`, no `not`/`!` and no parentheses at
/// all (then every term is a top-level `and` term).
fn vlans_only_in_top_and(t: &[String]) -> bool {
    !t.iter()
        .any(|w| matches!(w.as_str(), "or" | "not" | "!" | "(" | ")"))
}
