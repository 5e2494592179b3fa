//! Community ID (version 1, Corelight's specification): one string per
//! conversation that Zeek, Suricata, Arkime and others compute the same
//! way, so a flow record can be joined with their logs.
//!
//! `1:` + base64(SHA-1(seed, both addresses, protocol, 0, both ports)),
//! the end points ordered so both directions give the same value; for
//! ICMP and ICMPv6 the "ports" are the type and the code, or the type of
//! the answer for request/answer pairs (those are ordered like ports; any
//! other type keeps its direction). Computed on the exporter thread, once
//! per record, never per packet. SHA-1 and base64 are written out here
//! (about 80 lines) rather than taken as two more dependencies; the tests
//! check them against published vectors and PyPI's `communityid`.

use crate::key::FlowKey;

/// The answer type of an ICMPv4 request type (and the other way round).
fn icmp4_counterpart(t: u8) -> Option<u8> {
    Some(match t {
        8 => 0,
        0 => 8,
        13 => 14,
        14 => 13,
        15 => 16,
        16 => 15,
        10 => 9,
        9 => 10,
        17 => 18,
        18 => 17,
        _ => return None,
    })
}

/// The answer type of an ICMPv6 type (and the other way round).
fn icmp6_counterpart(t: u8) -> Option<u8> {
    Some(match t {
        128 => 129,
        129 => 128,
        133 => 134,
        134 => 133,
        135 => 136,
        136 => 135,
        130 => 131,
        131 => 130,
        139 => 140,
        140 => 139,
        144 => 145,
        145 => 144,
        _ => return None,
    })
}

/// The Community ID of `key` (ICMP type and code in `icmp`, `type << 8 |
/// code`) with `seed` (0 unless all parties agree on another).
pub fn community_id(key: &FlowKey, icmp: u16, seed: u16) -> String {
    let alen = if key.v6 { 16 } else { 4 };
    let (mut sa, mut da) = (&key.src[..alen], &key.dst[..alen]);
    let (mut sp, mut dp) = (key.sport, key.dport);
    let mut one_way = false;
    let counterpart = match key.proto {
        1 => Some(icmp4_counterpart as fn(u8) -> Option<u8>),
        58 => Some(icmp6_counterpart as fn(u8) -> Option<u8>),
        _ => None,
    };
    if let Some(f) = counterpart {
        let (t, c) = ((icmp >> 8) as u8, icmp as u8);
        sp = u16::from(t);
        dp = match f(t) {
            Some(answer) => u16::from(answer),
            None => {
                one_way = true;
                u16::from(c)
            }
        };
    }
    if !one_way && (sa, sp) > (da, dp) {
        std::mem::swap(&mut sa, &mut da);
        std::mem::swap(&mut sp, &mut dp);
    }
    // Ports are hashed only for the protocols the specification gives
    // ports to.
    let ports = matches!(key.proto, 1 | 6 | 17 | 58 | 132);
    let (sp, dp) = (sp.to_be_bytes(), dp.to_be_bytes());
    let port_parts: [&[u8]; 2] = if ports { [&sp, &dp] } else { [&[], &[]] };
    let mut input = [0u8; 2 + 16 + 16 + 2 + 4];
    let mut n = 0;
    for part in [
        &seed.to_be_bytes()[..],
        sa,
        da,
        &[key.proto, 0],
        port_parts[0],
        port_parts[1],
    ] {
        input[n..n + part.len()].copy_from_slice(part);
        n += part.len();
    }
    let mut out = String::with_capacity(30);
    out.push_str("1:");
    base64(&sha1(&input[..n]), &mut out);
    out
}

/// SHA-1 (FIPS 180-4) of `data`.
pub fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xefcd_ab89,
        0x98ba_dcfe,
        0x1032_5476,
        0xc3d2_e1f0,
    ];
    let bits = (data.len() as u64).wrapping_mul(8);
    // The message, a 1 bit, zeros to 56 mod 64, the length in bits.
    let padded = (data.len() + 9).div_ceil(64) * 64;
    let mut block = [0u8; 64];
    for start in (0..padded).step_by(64) {
        for (i, b) in block.iter_mut().enumerate() {
            let at = start + i;
            *b = if at < data.len() {
                data[at]
            } else if at == data.len() {
                0x80
            } else if at >= padded - 8 {
                (bits >> (8 * (padded - 1 - at))) as u8
            } else {
                0
            };
        }
        let mut w = [0u32; 80];
        for (i, c) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5a82_7999),
                20..=39 => (b ^ c ^ d, 0x6ed9_eba1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc),
                _ => (b ^ c ^ d, 0xca62_c1d6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (o, x) in out.chunks_exact_mut(4).zip(h) {
        o.copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// Standard base64 (RFC 4648, with padding) of `data`, appended to `out`.
pub fn base64(data: &[u8], out: &mut String) {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for c in data.chunks(3) {
        let n = u32::from(c[0]) << 16
            | u32::from(*c.get(1).unwrap_or(&0)) << 8
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(ABC[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn sha1_and_base64_match_published_vectors() {
        // FIPS 180 examples.
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(&sha1(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        // RFC 4648 section 10.
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut s = String::new();
            base64(i.as_bytes(), &mut s);
            assert_eq!(s, o);
        }
    }

    fn key4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> FlowKey {
        let mut k = FlowKey {
            sport,
            dport,
            proto,
            ..Default::default()
        };
        k.src[..4].copy_from_slice(&src);
        k.dst[..4].copy_from_slice(&dst);
        k
    }

    #[test]
    fn the_specifications_examples() {
        // The examples of the Community ID specification's README
        // (github.com/corelight/community-id-spec).
        let k = key4([128, 232, 110, 120], [66, 35, 250, 204], 34855, 80, 6);
        assert_eq!(community_id(&k, 0, 0), "1:LQU9qZlK+B5F3KDmev6m5PMibrg=");
        assert_eq!(
            community_id(&k.reversed(), 0, 0),
            "1:LQU9qZlK+B5F3KDmev6m5PMibrg="
        );
        assert_eq!(community_id(&k, 0, 1), "1:3V71V58M3Ksw/yuFALMcW0LAHvc=");
        // A protocol without ports (GRE): PyPI communityid 1.5.0's value.
        let k = key4([1, 2, 3, 4], [5, 6, 7, 8], 0, 0, 47);
        assert_eq!(community_id(&k, 0, 0), "1:+mluqz76jObh6dJLwnhX08n5St4=");
    }
}
