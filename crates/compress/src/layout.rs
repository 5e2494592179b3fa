//! Where the fields the codec predicts sit in a packet: a small, fixed
//! parse of Ethernet (up to two VLAN tags) or raw IP, IPv4/IPv6, TCP/UDP.
//!
//! Both sides run [`parse`] on the same bytes (the encoder on the packet it
//! was given, the decoder on the packet it rebuilt), so the layout stored in
//! a flow context is always the same on both sides. Anything not understood
//! gives `None` and the packet is stored literally.

/// Largest header region a context keeps (Ethernet + 2 tags + IPv4 with
/// options + TCP with options is 142 bytes).
pub(crate) const MAXH: usize = 160;

/// Link types with a layout (pcap LINKTYPE values).
pub(crate) const LINKTYPE_ETHERNET: u32 = 1;
pub(crate) const LINKTYPE_RAW: u32 = 101;
pub(crate) const LINKTYPE_IPV4: u32 = 228;
pub(crate) const LINKTYPE_IPV6: u32 = 229;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum L4 {
    #[default]
    None,
    Tcp,
    Udp,
}

/// Offsets of one packet's headers. Equal layouts mean every predicted
/// field is at the same place in both packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Layout {
    /// Start of the IP header.
    pub l3: u8,
    pub v6: bool,
    /// Start of the transport header (end of the IP header).
    pub l4: u8,
    pub kind: L4,
    /// End of the headers: the bytes the context keeps and predicts.
    pub hdr_len: u8,
    /// Offset of the TCP timestamp option's TSval (TSecr follows), 0 if none.
    pub ts_opt: u8,
}

impl Layout {
    pub fn v4(&self) -> bool {
        !self.v6
    }
    pub fn tcp(&self) -> bool {
        self.kind == L4::Tcp
    }
    pub fn udp(&self) -> bool {
        self.kind == L4::Udp
    }
    /// Offset of the IP length field (IPv4 total length, IPv6 payload length).
    pub fn ip_len_at(&self) -> usize {
        self.l3 as usize + if self.v6 { 4 } else { 2 }
    }
    /// Offset of the transport checksum, for TCP and UDP.
    pub fn l4_csum_at(&self) -> usize {
        self.l4 as usize + if self.tcp() { 16 } else { 6 }
    }
}

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// The layout of `data` (the captured bytes) for `linktype`, if every header
/// byte is present and the headers are of a kind the codec predicts.
#[inline]
pub(crate) fn parse(linktype: u32, data: &[u8]) -> Option<Layout> {
    if linktype == LINKTYPE_ETHERNET {
        if let Some(l) = parse_common(data) {
            return Some(l);
        }
    }
    parse_any(linktype, data)
}

/// The most common shapes, Ethernet + IPv4 without options + TCP without
/// options or with only NOP, NOP, timestamp, or UDP, as [`parse_any`]
/// finds them; `None` for anything else (then `parse_any` decides).
#[inline(always)]
fn parse_common(data: &[u8]) -> Option<Layout> {
    let b: &[u8; 42] = data.get(..42)?.try_into().ok()?;
    if b[12] != 0x08 || b[13] != 0 || b[14] != 0x45 || b[20] & 0x1f != 0 || b[21] != 0 {
        return None;
    }
    let l = |kind, hdr_len: u8, ts_opt| Layout {
        l3: 14,
        v6: false,
        l4: 34,
        kind,
        hdr_len,
        ts_opt,
    };
    match b[23] {
        17 => Some(l(L4::Udp, 42, 0)),
        6 => {
            let t = data.get(34..54)?;
            match (t[12] >> 4, data.get(54..66)) {
                (5, _) => Some(l(L4::Tcp, 54, 0)),
                (8, Some([1, 1, 8, 10, ..])) => Some(l(L4::Tcp, 66, 58)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The layout of any packet [`parse`] takes.
fn parse_any(linktype: u32, data: &[u8]) -> Option<Layout> {
    let (l3, version) = match linktype {
        LINKTYPE_ETHERNET => {
            let mut off = 12;
            let mut et = be16(data.get(..14)?, 12);
            let mut tags = 0;
            while (et == 0x8100 || et == 0x88a8) && tags < 2 {
                off += 4;
                et = be16(data.get(..off + 2)?, off);
                tags += 1;
            }
            let v = match et {
                0x0800 => 4,
                0x86dd => 6,
                _ => return None,
            };
            (off + 2, v)
        }
        LINKTYPE_RAW => (0, *data.first()? >> 4),
        LINKTYPE_IPV4 => (0, 4),
        LINKTYPE_IPV6 => (0, 6),
        _ => return None,
    };
    let (l4, proto, v6) = match version {
        4 => {
            let b = data.get(l3..l3 + 20)?;
            if b[0] >> 4 != 4 || b[0] & 15 < 5 {
                return None;
            }
            let l4 = l3 + (b[0] & 15) as usize * 4;
            data.get(..l4)?;
            // A fragment other than the first has no transport header.
            let proto = if be16(b, 6) & 0x1fff != 0 { 0 } else { b[9] };
            (l4, proto, false)
        }
        6 => {
            let b = data.get(l3..l3 + 40)?;
            if b[0] >> 4 != 6 {
                return None;
            }
            (l3 + 40, b[6], true)
        }
        _ => return None,
    };
    let (kind, end, ts_opt) = match proto {
        6 => {
            let t = data.get(l4..l4 + 20)?;
            let thl = (t[12] >> 4) as usize * 4;
            if thl < 20 {
                return None;
            }
            let opts = data.get(l4 + 20..l4 + thl)?;
            (
                L4::Tcp,
                l4 + thl,
                timestamp_option(opts).map_or(0, |o| l4 + 20 + o),
            )
        }
        17 => {
            data.get(l4..l4 + 8)?;
            (L4::Udp, l4 + 8, 0)
        }
        _ => (L4::None, l4, 0),
    };
    if end > MAXH {
        return None;
    }
    Some(Layout {
        l3: l3 as u8,
        v6,
        l4: l4 as u8,
        kind,
        hdr_len: end as u8,
        ts_opt: ts_opt as u8,
    })
}

/// Offset of TSval in TCP options `o`, if there is a well-formed timestamp option.
fn timestamp_option(o: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < o.len() {
        match o[i] {
            0 => return None,
            1 => i += 1,
            kind => {
                let len = *o.get(i + 1)? as usize;
                if len < 2 || i + len > o.len() {
                    return None;
                }
                if kind == 8 && len == 10 {
                    return Some(i + 2);
                }
                i += len;
            }
        }
    }
    None
}

/// The IPv4 header checksum of `h` (the checksum field counted as zero).
#[inline]
pub(crate) fn ipv4_checksum(h: &[u8]) -> u16 {
    if let Ok(b) = <&[u8; 20]>::try_from(h) {
        // No options (nearly every packet): ten words, the sixth skipped.
        let w = |i: usize| u16::from_be_bytes([b[2 * i], b[2 * i + 1]]) as u32;
        let mut acc = w(0) + w(1) + w(2) + w(3) + w(4) + w(6) + w(7) + w(8) + w(9);
        acc = (acc & 0xffff) + (acc >> 16);
        acc = (acc & 0xffff) + (acc >> 16);
        return !(acc as u16);
    }
    let words = h.chunks_exact(2);
    let mut acc: u32 = match words.remainder() {
        [b] => (*b as u32) << 8,
        _ => 0,
    };
    for (i, c) in words.enumerate() {
        // Word 5 is the checksum itself.
        acc += (i != 5) as u32 * u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_checksum() {
        // The example header of RFC 1071-style worked examples (wikipedia).
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_checksum(&h), 0xb861);
        // The checksum field does not count.
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(ipv4_checksum(&z), 0xb861);
    }
}
