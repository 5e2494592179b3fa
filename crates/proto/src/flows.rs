//! Flow records through ringcapd: what a client asks for in `Open`
//! ([`FlowRequest`]), what it gets ([`FlowSettings`] in the `Accepted`
//! reply's effective settings), and the records themselves
//! ([`FlowEntry`]) as they travel in the session's shared-memory ring.
//!
//! # Why the ring, not the control socket
//!
//! Flow records go into the same ring as the session's packets, as chunks
//! of their own: the ring is already bounded memory counted against the
//! user (a flood of flows can fill only the client's own ring, and what does
//! not fit is dropped and counted, never queued in the daemon), the client
//! already waits on its wake-up descriptor, records are fixed-size binary
//! (no JSON per flow, a chunk of up to 128 records per append), and they
//! arrive within a flush interval (~0.1 s) of their end, alongside the
//! session's packets. The control socket stays request/answer: no
//! unsolicited stream a client would have to sort out from its answers.
//!
//! # Versions
//!
//! `Open`'s `flows` is an optional field: a daemon from before it refuses
//! the request as an unknown field (never ignores it), and a daemon puts
//! `flows` in the effective settings only for a client that asked, so
//! older clients never see a flow chunk. The chunk carries its own magic
//! (with a version digit) and record size, which a client checks.
//!
//! # Flow chunks
//!
//! A ring chunk whose header says it holds **0 packets** is a flow chunk (a
//! packet chunk always holds at least one packet: the daemon never appends
//! an empty one). Its payload, little-endian:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 8 | magic `b"RCFLOWS1"` |
//! | 8 | 4 | record size = [`FLOW_RECORD_LEN`] (128) |
//! | 12 | 4 | number of records `n` |
//! | 16 | 128·n | records |
//!
//! A record ([`FlowEntry::encode`]): source and destination address (16
//! bytes each, IPv4 in the first 4), first and last packet time (ns), then
//! packets and octets forward and reverse (u64 each), source and destination
//! port, TCP flags forward and reverse, VLAN ID, ICMP `type << 8 | code`
//! (u16 each), IP protocol, flags (bit 0: IPv6), the end reason (IPFIX
//! flowEndReason 1..=5), the tunnel kind (0: none), the GRE key or VNI
//! (u32), and 28 reserved bytes that are zero. [`decode_flow_chunk`] checks
//! every one of those, so a client takes nothing it does not understand.

use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;

/// Active and idle timeouts a client may ask for, in seconds (hard limits;
/// the grant may narrow them).
pub const FLOW_TIMEOUT_S: RangeInclusive<u32> = 1..=86_400;
/// Flow-table sizes a client may ask for (hard limit; the grant's
/// `max_flows` narrows it).
pub const FLOW_TABLE: RangeInclusive<u32> = 1..=(1 << 22);

/// Magic of a flow chunk.
pub const FLOW_CHUNK_MAGIC: [u8; 8] = *b"RCFLOWS1";
/// Bytes of a flow chunk's header.
pub const FLOW_CHUNK_HEADER: usize = 16;
/// Bytes of one flow record.
pub const FLOW_RECORD_LEN: usize = 128;

/// Flow records asked for in `Open`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowRequest {
    /// A flow is exported, and counted anew, after this many seconds
    /// ([`FLOW_TIMEOUT_S`]).
    pub active_timeout_s: u32,
    /// A flow without packets for this many seconds is exported
    /// ([`FLOW_TIMEOUT_S`]).
    pub idle_timeout_s: u32,
    /// Most flows the session's table holds ([`FLOW_TABLE`]); when full, the
    /// flow idle longest is exported early (counted).
    pub max_flows: u32,
    /// Packets too (default); `false`: flow records only, no packet bytes.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub packets: bool,
}

/// The flow settings in force for a session (in `Accepted`'s `effective`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSettings {
    /// Active timeout, seconds (raised to the grant's minimum if asked below).
    pub active_timeout_s: u32,
    /// Idle timeout, seconds (raised to the grant's minimum if asked below).
    pub idle_timeout_s: u32,
    /// Flows the table holds (the most a table of this session holds).
    pub max_flows: u32,
    /// Whether packets come too.
    pub packets: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// One flow record as a client receives it: a biflow (RFC 5103) whose
/// forward direction is its first packet's, keyed and counted from the
/// packets as the session's policy delivers them (masks and anonymization
/// applied before the flow table saw them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowEntry {
    /// Source address (IPv4 in the first 4 bytes, the rest zero).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// First packet, ns since the epoch.
    pub start_ns: u64,
    /// Last packet, ns since the epoch.
    pub end_ns: u64,
    /// Packets forward.
    pub packets: u64,
    /// IP octets forward.
    pub octets: u64,
    /// Packets reverse.
    pub rev_packets: u64,
    /// IP octets reverse.
    pub rev_octets: u64,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// TCP flags seen forward.
    pub tcp_flags: u16,
    /// TCP flags seen reverse.
    pub rev_tcp_flags: u16,
    /// VLAN ID (0: none).
    pub vlan: u16,
    /// ICMP type and code of the first packet (`type << 8 | code`).
    pub icmp: u16,
    /// IP protocol.
    pub proto: u8,
    /// IPv6 addresses.
    pub v6: bool,
    /// Why it was exported: IPFIX flowEndReason (1 idle, 2 active, 3 end of
    /// flow, 4 forced end, 5 lack of resources).
    pub reason: u8,
    /// Tunnel kind (0: none; else the outer protocol, 17 for VXLAN).
    pub tunnel_kind: u8,
    /// GRE key or VXLAN VNI.
    pub tunnel_id: u32,
}

impl FlowEntry {
    /// Writes the record into `out[..FLOW_RECORD_LEN]`.
    pub fn encode(&self, out: &mut [u8; FLOW_RECORD_LEN]) {
        out[0..16].copy_from_slice(&self.src);
        out[16..32].copy_from_slice(&self.dst);
        let words = [
            self.start_ns,
            self.end_ns,
            self.packets,
            self.octets,
            self.rev_packets,
            self.rev_octets,
        ];
        for (i, w) in words.iter().enumerate() {
            out[32 + 8 * i..40 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        let halves = [
            self.sport,
            self.dport,
            self.tcp_flags,
            self.rev_tcp_flags,
            self.vlan,
            self.icmp,
        ];
        for (i, h) in halves.iter().enumerate() {
            out[80 + 2 * i..82 + 2 * i].copy_from_slice(&h.to_le_bytes());
        }
        out[92] = self.proto;
        out[93] = u8::from(self.v6);
        out[94] = self.reason;
        out[95] = self.tunnel_kind;
        out[96..100].copy_from_slice(&self.tunnel_id.to_le_bytes());
        out[100..].fill(0);
    }

    /// Reads a record; `Err` says what is wrong with it.
    pub fn decode(b: &[u8; FLOW_RECORD_LEN]) -> Result<FlowEntry, String> {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        if b[93] & !1 != 0 {
            return Err(format!("unknown flags {:#04x}", b[93]));
        }
        if !(1..=5).contains(&b[94]) {
            return Err(format!("end reason {} is not one of 1 to 5", b[94]));
        }
        if b[100..].iter().any(|&x| x != 0) {
            return Err("reserved bytes are not zero".into());
        }
        let v6 = b[93] & 1 != 0;
        let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
        src.copy_from_slice(&b[0..16]);
        dst.copy_from_slice(&b[16..32]);
        if !v6 && (src[4..].iter().chain(&dst[4..]).any(|&x| x != 0)) {
            return Err("an IPv4 flow with bytes after its addresses".into());
        }
        Ok(FlowEntry {
            src,
            dst,
            start_ns: u64_at(32),
            end_ns: u64_at(40),
            packets: u64_at(48),
            octets: u64_at(56),
            rev_packets: u64_at(64),
            rev_octets: u64_at(72),
            sport: u16_at(80),
            dport: u16_at(82),
            tcp_flags: u16_at(84),
            rev_tcp_flags: u16_at(86),
            vlan: u16_at(88),
            icmp: u16_at(90),
            proto: b[92],
            v6,
            reason: b[94],
            tunnel_kind: b[95],
            tunnel_id: u32::from_le_bytes([b[96], b[97], b[98], b[99]]),
        })
    }

    /// The source address.
    pub fn src_addr(&self) -> std::net::IpAddr {
        addr(&self.src, self.v6)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> std::net::IpAddr {
        addr(&self.dst, self.v6)
    }
}

fn addr(a: &[u8; 16], v6: bool) -> std::net::IpAddr {
    if v6 {
        std::net::IpAddr::from(*a)
    } else {
        std::net::IpAddr::from([a[0], a[1], a[2], a[3]])
    }
}

/// Writes a flow chunk's header for `n` records into `out[..16]`.
pub fn write_flow_chunk_header(out: &mut [u8], n: u32) {
    out[..8].copy_from_slice(&FLOW_CHUNK_MAGIC);
    out[8..12].copy_from_slice(&(FLOW_RECORD_LEN as u32).to_le_bytes());
    out[12..16].copy_from_slice(&n.to_le_bytes());
}

/// Checks a flow chunk's payload and hands each record to `f`; returns how
/// many there were. Never panics, whatever the bytes.
pub fn decode_flow_chunk(payload: &[u8], mut f: impl FnMut(FlowEntry)) -> Result<u64, String> {
    if payload.len() < FLOW_CHUNK_HEADER || payload[..8] != FLOW_CHUNK_MAGIC {
        return Err("a chunk of no packets is not a flow chunk (bad magic)".into());
    }
    let size = u32::from_le_bytes([payload[8], payload[9], payload[10], payload[11]]);
    let n = u32::from_le_bytes([payload[12], payload[13], payload[14], payload[15]]);
    if size as usize != FLOW_RECORD_LEN {
        return Err(format!(
            "flow records of {size} bytes; this client reads {FLOW_RECORD_LEN}"
        ));
    }
    let body = &payload[FLOW_CHUNK_HEADER..];
    if body.len() as u64 != u64::from(n) * FLOW_RECORD_LEN as u64 {
        return Err(format!(
            "a flow chunk says {n} records but holds {} bytes of them",
            body.len()
        ));
    }
    for (i, r) in body.chunks_exact(FLOW_RECORD_LEN).enumerate() {
        let r: &[u8; FLOW_RECORD_LEN] = r.try_into().map_err(|_| "short record".to_string())?;
        f(FlowEntry::decode(r).map_err(|e| format!("flow record {i}: {e}"))?);
    }
    Ok(u64::from(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u8) -> FlowEntry {
        FlowEntry {
            src: [198, 18, 0, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            dst: [198, 19, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            start_ns: 1_700_000_000_000_000_000 + u64::from(i),
            end_ns: 1_700_000_001_000_000_000,
            packets: 3,
            octets: 300,
            rev_packets: 2,
            rev_octets: 120,
            sport: 40000 + u16::from(i),
            dport: 53,
            tcp_flags: 0x12,
            rev_tcp_flags: 0x18,
            vlan: 7,
            icmp: 0,
            proto: 17,
            v6: false,
            reason: 1,
            tunnel_kind: 47,
            tunnel_id: 99,
        }
    }

    #[test]
    fn chunks_round_trip_and_bad_ones_are_refused() {
        let mut chunk = vec![0u8; FLOW_CHUNK_HEADER + 3 * FLOW_RECORD_LEN];
        write_flow_chunk_header(&mut chunk, 3);
        for i in 0..3u8 {
            let at = FLOW_CHUNK_HEADER + usize::from(i) * FLOW_RECORD_LEN;
            let out: &mut [u8; FLOW_RECORD_LEN] =
                (&mut chunk[at..at + FLOW_RECORD_LEN]).try_into().unwrap();
            entry(i).encode(out);
        }
        let mut got = Vec::new();
        assert_eq!(decode_flow_chunk(&chunk, |e| got.push(e)), Ok(3));
        assert_eq!(got, (0..3).map(entry).collect::<Vec<_>>());
        // Every single-byte change either decodes to something else or is
        // refused; none panics. A count that does not match is refused.
        let mut bad = chunk.clone();
        bad[12] = 4;
        assert!(decode_flow_chunk(&bad, |_| {}).is_err());
        let mut bad = chunk.clone();
        bad[FLOW_CHUNK_HEADER + 94] = 9;
        assert!(decode_flow_chunk(&bad, |_| {}).is_err());
        let mut bad = chunk.clone();
        bad[FLOW_CHUNK_HEADER + 127] = 1;
        assert!(decode_flow_chunk(&bad, |_| {}).is_err());
        let mut bad = chunk.clone();
        bad[FLOW_CHUNK_HEADER + 10] = 1;
        assert!(decode_flow_chunk(&bad, |_| {}).is_err(), "v4 with junk");
        assert!(decode_flow_chunk(&chunk[..20], |_| {}).is_err());
        assert!(decode_flow_chunk(b"RCFLOWS1", |_| {}).is_err());
        for i in 0..chunk.len() {
            let mut c = chunk.clone();
            c[i] ^= 0xff;
            let _ = decode_flow_chunk(&c, |_| {});
        }
    }
}
