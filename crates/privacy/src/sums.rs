//! The checksums of a frame being rewritten, and the rule that keeps them
//! from telling what was hidden.
//!
//! # Why not an incremental update
//!
//! An incremental update (RFC 1624) turns the input checksum `C` into
//! `C - old + new`. That is only free of the old values when `C` was right
//! for them. It often is not: a locally sent packet with checksum offload
//! carries a *partial* checksum (the pseudo-header sum only,
//! `TP_STATUS_CSUMNOTREADY`), from which an updated value gives away the sum
//! of the hidden addresses; a wrong or unverifiable (truncated) checksum
//! leaks the same way. So a checksum covering a hidden or anonymized byte is
//! never derived from its input value:
//!
//! * **recomputed** from the rewritten bytes when everything it covers was
//!   captured (the whole header for IPv4, the whole segment or message up
//!   to the end its IP header announces for TCP, UDP, ICMP, ICMPv6, GRE and
//!   SCTP's CRC-32c), so it is right for what the client sees, whatever the
//!   input value was (a wrong one becomes right);
//! * **set to 0** when it cannot be (payload not captured, snap length, IP
//!   length unknown, an IPv6 routing type whose final destination is not
//!   understood): 0 depends on nothing. For UDP over IPv4 0 means "no
//!   checksum"; elsewhere it is simply wrong.
//!
//! A checksum covering nothing hidden is left as it came. "Covers" is
//! decided by where the rewrite writes (each field it may change, whether
//! or not its value changes) and by the pseudo-header's addresses, never by
//! a value, so the decision itself leaks nothing. A recomputed or zeroed
//! checksum field inside the range of another checksum (an inner checksum
//! in a tunnel or in an ICMP quote) makes that one covered too.

use ringcap_wire::checksum::{fold, sum};

/// Up to this many checksums per frame (one per header at most).
pub(crate) const MAX: usize = 16;

/// How a checksum is computed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The Internet checksum (16 bits). `udp` makes a computed 0 into
    /// 0xffff (0 means "none" for UDP over IPv4).
    Inet { udp: bool },
    /// SCTP's CRC-32c, stored little-endian.
    Crc32c,
}

/// The pseudo-header of a transport checksum: offsets of its addresses in
/// the frame (read after the rewrite).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pseudo {
    None,
    V4 {
        src: u32,
        dst: u32,
        proto: u8,
    },
    V6 {
        src: u32,
        dst: u32,
        proto: u8,
    },
    /// Not understood (an IPv6 routing type): the checksum cannot be
    /// recomputed.
    Unknown,
}

#[derive(Clone, Copy)]
struct Entry {
    field: u32,
    start: u32,
    /// End of the covered bytes as announced by the headers (`u32::MAX`:
    /// unknown).
    end: u32,
    kind: Kind,
    pseudo: Pseudo,
    tainted: bool,
    /// Covering bytes not captured is covering something hidden (they may
    /// hold headers the walk never reached).
    opaque_tail: bool,
}

const EMPTY: Entry = Entry {
    field: 0,
    start: 0,
    end: 0,
    kind: Kind::Inet { udp: false },
    pseudo: Pseudo::None,
    tainted: false,
    opaque_tail: false,
};

/// The checksums found so far, outermost first: every entry's range holds
/// or precedes the ranges of the entries after it.
pub(crate) struct Sums {
    items: [Entry; MAX],
    n: usize,
}

impl Sums {
    pub(crate) fn new() -> Sums {
        Sums {
            items: [EMPTY; MAX],
            n: 0,
        }
    }

    /// Forgets every checksum (for the next frame).
    #[inline]
    pub(crate) fn clear(&mut self) {
        self.n = 0;
    }

    /// Adds the checksum at `field` covering `start..end` (plus `pseudo`);
    /// `tainted` if its pseudo-header holds something hidden; with
    /// `opaque_tail`, tainted too if it covers bytes not captured.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push(
        &mut self,
        field: usize,
        start: usize,
        end: usize,
        kind: Kind,
        pseudo: Pseudo,
        tainted: bool,
        opaque_tail: bool,
    ) {
        if self.n == MAX {
            return;
        }
        let c = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        self.items[self.n] = Entry {
            field: c(field),
            start: c(start),
            end: c(end),
            kind,
            pseudo,
            tainted,
            opaque_tail,
        };
        self.n += 1;
    }

    /// The byte at `p` is (or may be) hidden or rewritten: every checksum
    /// covering it must not keep its input value.
    #[inline]
    pub(crate) fn taint(&mut self, p: usize) {
        let p = u32::try_from(p).unwrap_or(u32::MAX);
        for e in &mut self.items[..self.n] {
            if e.start <= p && p < e.end {
                e.tainted = true;
            }
        }
    }

    /// Every checksum covering a byte of `p..end`.
    #[inline]
    pub(crate) fn taint_span(&mut self, p: usize, end: usize) {
        let p = u32::try_from(p).unwrap_or(u32::MAX);
        let end = u32::try_from(end).unwrap_or(u32::MAX);
        for e in &mut self.items[..self.n] {
            if e.start < end && p < e.end {
                e.tainted = true;
            }
        }
    }

    /// Every checksum covering bytes at or after `p` (the payload from `p`
    /// is hidden, captured or not).
    pub(crate) fn taint_from(&mut self, p: usize) {
        let p = u32::try_from(p).unwrap_or(u32::MAX);
        for e in &mut self.items[..self.n] {
            if p < e.end {
                e.tainted = true;
            }
        }
    }

    /// Writes every covered checksum, innermost first (so an outer one sums
    /// the inner one's new value): recomputed when all it covers is in
    /// `frame`, else 0.
    pub(crate) fn finish(&mut self, frame: &mut [u8]) {
        for i in (0..self.n).rev() {
            let e = self.items[i];
            let whole = (e.end as usize) <= frame.len();
            if !(e.tainted || e.opaque_tail && !whole) {
                continue;
            }
            let f = e.field as usize;
            let width = if e.kind == Kind::Crc32c { 4 } else { 2 };
            if f + width > frame.len() {
                // Cut short: whatever part of it was captured tells nothing.
                if f < frame.len() {
                    frame[f..].fill(0);
                }
                self.n = i;
                self.taint(f);
                continue;
            }
            frame[f..f + width].fill(0);
            let (start, end) = (e.start as usize, e.end as usize);
            if whole && start <= f && f + width <= end {
                if let Some(p) = pseudo_sum(frame, e.pseudo, end - start) {
                    let range = &frame[start..end];
                    match e.kind {
                        Kind::Inet { udp } => {
                            let mut v = !fold(u64::from(sum(range)) + u64::from(p));
                            if udp && v == 0 {
                                v = 0xffff;
                            }
                            frame[f..f + 2].copy_from_slice(&v.to_be_bytes());
                        }
                        Kind::Crc32c => {
                            let v = crc32c(range);
                            frame[f..f + 4].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
            // The field changed (or may have): the checksums around it too.
            self.n = i;
            self.taint(f);
        }
        self.n = 0;
    }
}

/// The pseudo-header's sum, read from the (rewritten) frame; `None` if it
/// is not known or not captured.
pub(crate) fn pseudo_sum(frame: &[u8], p: Pseudo, len: usize) -> Option<u16> {
    let (src, dst, proto, n) = match p {
        Pseudo::None => return Some(0),
        Pseudo::Unknown => return None,
        Pseudo::V4 { src, dst, proto } => (src, dst, proto, 4),
        Pseudo::V6 { src, dst, proto } => (src, dst, proto, 16),
    };
    let s = frame.get(src as usize..src as usize + n)?;
    let d = frame.get(dst as usize..dst as usize + n)?;
    let len = u32::try_from(len).ok()?;
    if n == 4 && len > 0xffff {
        return None;
    }
    let acc = u64::from(sum(s))
        + u64::from(sum(d))
        + u64::from(proto)
        + u64::from(len >> 16)
        + u64::from(len & 0xffff);
    Some(fold(acc))
}

/// CRC-32c (Castagnoli) as SCTP computes it.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82f6_3b78
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }
}
