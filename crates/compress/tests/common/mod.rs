//! Synthetic but realistic packet records for the codec's tests: Ethernet,
//! IPv4/IPv6, TCP with timestamp options, fragmented UDP, many flows, with
//! correct IPv4 header checksums, driven by a small deterministic PRNG.
#![allow(dead_code)]

use ringcap_compress::{Encoder, FileHeader, Resolution};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub ts: u64,
    pub wire: u32,
    pub data: Vec<u8>,
}

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn csum(h: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    for c in h.chunks(2) {
        acc += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

pub struct Ip {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub id: u16,
    pub frag: u16,
    pub ttl: u8,
    pub proto: u8,
}

/// Ethernet + IPv4 header with `l4` (transport header) following; the IP
/// total length counts `payload` bytes after it that are not captured.
pub fn ipv4(ip: &Ip, l4: &[u8], payload: usize) -> (Vec<u8>, u32) {
    let mut d = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    let total = (20 + l4.len() + payload) as u16;
    let mut h = vec![0x45, 0, 0, 0, 0, 0, 0, 0, ip.ttl, ip.proto, 0, 0];
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&ip.id.to_be_bytes());
    h[6..8].copy_from_slice(&ip.frag.to_be_bytes());
    h.extend_from_slice(&ip.src);
    h.extend_from_slice(&ip.dst);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    d.extend_from_slice(&h);
    d.extend_from_slice(l4);
    let wire = 14 + total as u32;
    (d, wire)
}

#[allow(clippy::too_many_arguments)]
pub fn tcp(
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    win: u16,
    ts: Option<(u32, u32)>,
    csum: u16,
) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    let thl = if ts.is_some() { 32 } else { 20 };
    t.push((thl / 4) << 4);
    t.push(flags);
    t.extend_from_slice(&win.to_be_bytes());
    t.extend_from_slice(&csum.to_be_bytes());
    t.extend_from_slice(&[0, 0]);
    if let Some((v, e)) = ts {
        t.extend_from_slice(&[1, 1, 8, 10]);
        t.extend_from_slice(&v.to_be_bytes());
        t.extend_from_slice(&e.to_be_bytes());
    }
    t
}

pub fn udp(sport: u16, dport: u16, len: u16, csum: u16) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&csum.to_be_bytes());
    u
}

/// A TCP bulk transfer seen from the middle: data one way, delayed ACKs the
/// other, timestamps in `unit_ns` units.
pub fn tcp_bulk(rng: &mut Rng, n: usize, unit_ns: u64) -> Vec<Rec> {
    let (a, b) = ([198, 18, 0, 1], [198, 18, 0, 2]);
    let mut out = Vec::new();
    let (mut seq, ack) = (1000u32, 5000u32);
    let (mut id_a, mut id_b) = (100u16, 900u16);
    let mut t = 1_700_000_000_000_000_000u64;
    let mut tsval = 77u32;
    let mut win = 500u16;
    let mss = 1448;
    while out.len() < n {
        t += 1_000 + rng.below(3_000);
        if rng.below(1000) == 0 {
            tsval += 1;
        }
        let csum = rng.next() as u16;
        let l4 = tcp(40000, 5201, seq, ack, 0x10, 502, Some((tsval, 999)), csum);
        let (d, w) = ipv4(
            &Ip {
                src: a,
                dst: b,
                id: id_a,
                frag: 0x4000,
                ttl: 64,
                proto: 6,
            },
            &l4,
            mss,
        );
        out.push(Rec {
            ts: t / unit_ns,
            wire: w,
            data: d,
        });
        seq = seq.wrapping_add(mss as u32);
        id_a = id_a.wrapping_add(1);
        if out.len() % 3 == 2 {
            t += rng.below(2_000);
            win = win.wrapping_add(rng.below(3) as u16);
            let l4 = tcp(
                5201,
                40000,
                ack,
                seq,
                0x10,
                win,
                Some((999, tsval)),
                rng.next() as u16,
            );
            let (d, w) = ipv4(
                &Ip {
                    src: b,
                    dst: a,
                    id: id_b,
                    frag: 0x4000,
                    ttl: 64,
                    proto: 6,
                },
                &l4,
                0,
            );
            out.push(Rec {
                ts: t / unit_ns,
                wire: w,
                data: d,
            });
            id_b = id_b.wrapping_add(1);
        }
    }
    out.truncate(n);
    out
}

/// A constant-rate stream of 8000-byte UDP datagrams fragmented at 1500.
pub fn udp_fragments(rng: &mut Rng, n: usize, unit_ns: u64) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut id = 4000u16;
    let mut t = 1_700_000_000_000_000_000u64;
    let dgram = 8008usize;
    while out.len() < n {
        t += 1_000_000 + rng.below(20_000);
        let mut off = 0usize;
        while off < dgram {
            let len = (dgram - off).min(1480);
            let more = off + len < dgram;
            let frag = (if more { 0x2000 } else { 0 }) | (off / 8) as u16;
            let ip = Ip {
                src: [198, 18, 1, 1],
                dst: [198, 18, 1, 2],
                id,
                frag,
                ttl: 64,
                proto: 17,
            };
            let (d, w) = if off == 0 {
                ipv4(
                    &ip,
                    &udp(33000, 9000, dgram as u16, rng.next() as u16),
                    len - 8,
                )
            } else {
                ipv4(&ip, &[], len)
            };
            out.push(Rec {
                ts: t / unit_ns,
                wire: w,
                data: d,
            });
            off += len;
            t += 1_200 + rng.below(100);
        }
        id = id.wrapping_add(1);
    }
    out.truncate(n);
    out
}

/// Many short flows (DNS-like UDP and small TCP exchanges) interleaved.
pub fn many_flows(rng: &mut Rng, n: usize, unit_ns: u64) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut t = 1_700_000_000_000_000_000u64;
    let flows = 300u64;
    let mut seqs = vec![0u32; flows as usize];
    while out.len() < n {
        t += rng.below(50_000);
        let f = rng.below(flows);
        let src = [198, 18, 2, (f % 250) as u8];
        let dst = [198, 19, (f / 250) as u8, 1];
        let sport = 20000 + f as u16;
        let s = &mut seqs[f as usize];
        let (d, w) = if f.is_multiple_of(2) {
            let l4 = udp(sport, 53, 40, rng.next() as u16);
            ipv4(
                &Ip {
                    src,
                    dst,
                    id: rng.next() as u16,
                    frag: 0,
                    ttl: 63,
                    proto: 17,
                },
                &l4,
                32,
            )
        } else {
            *s = s.wrapping_add(100);
            let l4 = tcp(
                sport,
                443,
                *s,
                7,
                0x18,
                1000,
                Some((f as u32, 5)),
                rng.next() as u16,
            );
            ipv4(
                &Ip {
                    src,
                    dst,
                    id: f as u16,
                    frag: 0x4000,
                    ttl: 64,
                    proto: 6,
                },
                &l4,
                100,
            )
        };
        out.push(Rec {
            ts: t / unit_ns,
            wire: w,
            data: d,
        });
    }
    out
}

/// Encodes `recs` as a whole file, ending a block after every record for
/// which `cut(i)` is true (and at the end).
pub fn encode(recs: &[Rec], res: Resolution, mut cut: impl FnMut(usize) -> bool) -> Vec<u8> {
    let mut out = FileHeader {
        version: ringcap_compress::VERSION,
        resolution: res,
        linktype: 1,
        snaplen: 262144,
    }
    .to_bytes()
    .to_vec();
    let mut e = Encoder::new(1);
    for (i, r) in recs.iter().enumerate() {
        if e.push(r.ts, r.wire, &r.data) || cut(i) {
            e.finish_block(&mut out);
        }
    }
    e.finish_block(&mut out);
    out
}

pub fn decode(file: &[u8]) -> Result<Vec<Rec>, ringcap_compress::DecodeError> {
    let mut v = Vec::new();
    ringcap_compress::decode(file, |r| {
        v.push(Rec {
            ts: r.ts,
            wire: r.wire_len,
            data: r.data.to_vec(),
        })
    })?;
    Ok(v)
}

/// Ones' complement sum of `b` (16-bit big-endian words, an odd byte
/// padded), folded, not inverted.
fn sum16(b: &[u8], mut acc: u32) -> u32 {
    for c in b.chunks(2) {
        acc += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// Ethernet + IPv6 header (no extension headers) with `l4` following and
/// `payload` bytes after it that are not captured.
pub fn ipv6(
    src: &[u8; 16],
    dst: &[u8; 16],
    proto: u8,
    l4: &[u8],
    payload: usize,
) -> (Vec<u8>, u32) {
    let mut d = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    let plen = (l4.len() + payload) as u16;
    d.extend_from_slice(&[0x60, 0, 0, 0]);
    d.extend_from_slice(&plen.to_be_bytes());
    d.extend_from_slice(&[proto, 64]);
    d.extend_from_slice(src);
    d.extend_from_slice(dst);
    d.extend_from_slice(l4);
    (d, 54 + plen as u32)
}

/// A UDP header whose checksum is the full one over the pseudo-header
/// (addresses `src`, `dst` of either family), the header and `payload`.
pub fn udp_summed(src: &[u8], dst: &[u8], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = (8 + payload.len()) as u16;
    let mut u = udp(sport, dport, len, 0);
    let mut acc = sum16(src, 0);
    acc = sum16(dst, acc);
    acc = sum16(&[0, 17], acc);
    acc = sum16(&len.to_be_bytes(), acc);
    acc = sum16(&u, acc);
    acc = sum16(payload, acc);
    let c = match !(acc as u16) {
        0 => 0xffff,
        c => c,
    };
    u[6..8].copy_from_slice(&c.to_be_bytes());
    u
}

/// Traffic with no flow reuse: every packet of a new UDP flow with random
/// ports (ephemeral source ports, destination ports anywhere), from a few
/// IPv4 and IPv6 hosts to many, some answered (the reply mirrors the
/// query's addresses and ports), checksums full (the same payload each
/// time) or absent.
pub fn new_flows(rng: &mut Rng, n: usize, unit_ns: u64) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut t = 1_700_000_000_000_000_000u64;
    let payload = [0x5au8; 24];
    while out.len() < n {
        t += 1000 + rng.below(3000);
        let sport = 32768 + rng.below(28232) as u16;
        let dport = match rng.below(4) {
            0 => 53,
            _ => 1 + rng.below(65535) as u16,
        };
        let six = rng.below(5) == 0;
        let summed = rng.below(3) != 0;
        let (src4, dst4) = (
            [198, 18, 0, 1 + rng.below(3) as u8],
            [198, 19, rng.below(8) as u8, rng.below(256) as u8],
        );
        let mut src6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mut dst6 = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        src6[15] = 1 + rng.below(2) as u8;
        for b in &mut dst6[8..] {
            *b = rng.next() as u8;
        }
        let answered = rng.below(3) == 0;
        for reply in [false, true] {
            if reply && !answered {
                break;
            }
            let (sp, dp) = if reply {
                (dport, sport)
            } else {
                (sport, dport)
            };
            let (d, w) = if six {
                let (s, d) = if reply {
                    (&dst6, &src6)
                } else {
                    (&src6, &dst6)
                };
                let l4 = if summed {
                    udp_summed(s, d, sp, dp, &payload)
                } else {
                    udp(sp, dp, 32, 0)
                };
                ipv6(s, d, 17, &l4, payload.len())
            } else {
                let (s, d) = if reply { (dst4, src4) } else { (src4, dst4) };
                let l4 = if summed {
                    udp_summed(&s, &d, sp, dp, &payload)
                } else {
                    udp(sp, dp, 32, 0)
                };
                ipv4(
                    &Ip {
                        src: s,
                        dst: d,
                        id: rng.next() as u16,
                        frag: 0,
                        ttl: if reply { 57 } else { 64 },
                        proto: 17,
                    },
                    &l4,
                    payload.len(),
                )
            };
            out.push(Rec {
                ts: t / unit_ns,
                wire: w,
                data: d,
            });
            t += 200 + rng.below(500);
        }
    }
    out.truncate(n);
    out
}
