//! JSON lines: one object per flow, field names after the IPFIX elements
//! they stand for, times in ns since the epoch, and (when asked) the
//! flow's Community ID (`community_id`, see [`crate::community_id`]).

use crate::record::FlowRecord;
use std::fmt::Write;

/// Appends `r` as one JSON object (no newline) to `out`, with its
/// Community ID when `community_id`.
pub fn write(out: &mut String, r: &FlowRecord, community_id: bool) {
    let k = &r.key;
    let _ = write!(
        out,
        "{{\"start_ns\":{},\"end_ns\":{},\"src\":\"{}\",\"dst\":\"{}\",\"sport\":{},\"dport\":{},\"proto\":{},\"vlan\":{},\
\"packets\":{},\"octets\":{},\"tcp_flags\":{},\"rev_packets\":{},\"rev_octets\":{},\"rev_tcp_flags\":{}",
        r.start_ns,
        r.end_ns,
        k.src_addr(),
        k.dst_addr(),
        k.sport,
        k.dport,
        k.proto,
        k.vlan,
        r.fwd.packets,
        r.fwd.octets,
        r.fwd.tcp_flags,
        r.rev.packets,
        r.rev.octets,
        r.rev.tcp_flags,
    );
    if k.proto == 1 || k.proto == 58 {
        let _ = write!(
            out,
            ",\"icmp_type\":{},\"icmp_code\":{}",
            r.icmp >> 8,
            r.icmp & 0xff
        );
    }
    if k.tunnel.kind != 0 {
        let t = &k.tunnel;
        let _ = write!(
            out,
            ",\"tunnel\":\"{}\",\"tunnel_id\":{},\"outer_src\":\"{}\",\"outer_dst\":\"{}\"",
            t.name(),
            t.id,
            t.src_addr(),
            t.dst_addr()
        );
    }
    if community_id {
        let _ = write!(
            out,
            ",\"community_id\":\"{}\"",
            crate::community_id::community_id(k, r.icmp, 0)
        );
    }
    let _ = write!(out, ",\"end_reason\":\"{}\"}}", r.reason.name());
}
