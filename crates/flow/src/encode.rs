//! Data records of the IPFIX and NetFlow v9 templates (`netflow`), written
//! out field by field in one fixed-size copy. Walking the template's field
//! list and matching each element was most of the exporter's own CPU at a
//! million records a second (perf); this layout must stay the templates'
//! (a test compares the two for records of every kind).

use crate::record::FlowRecord;

/// Which protocol (IPFIX or NetFlow v9; the encoding's and the exporter's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// IPFIX, version 10.
    Ipfix,
    /// NetFlow version 9.
    NetflowV9,
}

/// Longest record: IPFIX with IPv6 addresses.
const MAX: usize = 6 * 8 + 2 * 16 + 2 + 2 + 1 + 2 + 2 + 2 + 2 + 1;

/// Appends `r` as one data record of its template in `d` to `b`.
#[inline]
pub(crate) fn record(d: Dialect, r: &FlowRecord, b: &mut Vec<u8>) {
    let mut o = [0u8; MAX];
    let mut n = 0;
    let mut put = |x: &[u8]| {
        o[n..n + x.len()].copy_from_slice(x);
        n += x.len();
    };
    put(&(r.start_ns / 1_000_000).to_be_bytes());
    put(&(r.end_ns / 1_000_000).to_be_bytes());
    put(&r.fwd.packets.to_be_bytes());
    put(&r.fwd.octets.to_be_bytes());
    let ipfix = d == Dialect::Ipfix;
    if ipfix {
        put(&r.rev.packets.to_be_bytes());
        put(&r.rev.octets.to_be_bytes());
    }
    if r.key.v6 {
        put(&r.key.src);
        put(&r.key.dst);
    } else {
        put(&r.key.src[..4]);
        put(&r.key.dst[..4]);
    }
    put(&r.key.sport.to_be_bytes());
    put(&r.key.dport.to_be_bytes());
    put(&[r.key.proto]);
    if ipfix {
        // Reverse first (see the templates in `netflow`).
        put(&r.rev.tcp_flags.to_be_bytes());
        put(&r.fwd.tcp_flags.to_be_bytes());
    } else {
        // NetFlow v9's TCP_FLAGS is one byte.
        put(&[r.fwd.tcp_flags as u8]);
    }
    put(&r.key.vlan.to_be_bytes());
    put(&r.icmp.to_be_bytes());
    if ipfix {
        put(&[r.reason as u8]);
    }
    b.extend_from_slice(&o[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{FlowKey, NO_TUNNEL};
    use crate::netflow::{record_len, write_record_by_template};
    use crate::record::{Direction, EndReason};

    #[test]
    fn the_written_out_layout_is_the_templates() {
        let mut n = 0u64;
        for d in [Dialect::Ipfix, Dialect::NetflowV9] {
            for v6 in [false, true] {
                for (proto, flags, icmp) in [(6u8, 0x1d3u16, 0u16), (17, 0, 0), (1, 0, 0x0303)] {
                    n += 1;
                    let mut key = FlowKey {
                        src: [0; 16],
                        dst: [0; 16],
                        sport: 0x1234 + n as u16,
                        dport: 0xfedc,
                        proto,
                        v6,
                        vlan: 0x0abc,
                        icmp,
                        tunnel: NO_TUNNEL,
                    };
                    for i in 0..16 {
                        key.src[i] = if v6 || i < 4 { i as u8 + 1 } else { 0 };
                        key.dst[i] = if v6 || i < 4 { 0xf0 | i as u8 } else { 0 };
                    }
                    let r = FlowRecord {
                        key,
                        start_ns: 1_790_000_000_123_456_789 + n,
                        end_ns: 1_790_000_009_987_654_321,
                        fwd: Direction {
                            packets: 0x0102_0304_0506_0708 + n,
                            octets: 0x1112_1314_1516_1718,
                            tcp_flags: flags,
                        },
                        rev: Direction {
                            packets: 0x2122_2324_2526_2728,
                            octets: 0x3132_3334_3536_3738,
                            tcp_flags: flags >> 1,
                        },
                        icmp,
                        reason: EndReason::LackOfResources,
                    };
                    let (mut a, mut b) = (vec![0xee], vec![0xee]);
                    record(d, &r, &mut a);
                    write_record_by_template(d, &r, &mut b);
                    assert_eq!(a, b, "{d:?} v6={v6} proto={proto}");
                    assert_eq!(a.len(), 1 + record_len(d, v6));
                }
            }
        }
    }
}
