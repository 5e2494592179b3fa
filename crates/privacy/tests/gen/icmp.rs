//! ICMP and ICMPv6 messages of [`Gen`]: echo, errors quoting a datagram,
//! redirects, router advertisements, neighbor discovery with options, MLD.

use super::Gen;
use ringcap_privacy::fields;

impl Gen {
    pub(super) fn icmp4(&mut self, deep: bool) -> Vec<u8> {
        let ty = [0u8, 8, 3, 11, 5, 9, 13][self.v(7) as usize];
        let mut m = vec![ty, self.v(4) as u8, 0, 0];
        match ty {
            0 | 8 => {
                m.extend(self.fbytes(Some(fields::ICMP_ECHO), 4));
                m.extend(self.payload(30));
            }
            3 | 11 | 5 => {
                if ty == 5 {
                    m.extend(self.ip4());
                } else {
                    m.extend(self.fbytes(None, 4));
                }
                m.extend(self.quote(false, deep));
            }
            9 => {
                let n = self.v(4) as u8;
                m.extend([n, 2, 0, 30]);
                for _ in 0..n {
                    m.extend(self.ip4());
                    m.extend(self.fbytes(None, 4));
                }
            }
            _ => {
                m.extend(self.fbytes(None, 4));
                m.extend(self.payload(20));
            }
        }
        self.fill(&mut m, 2, None, false);
        m
    }

    /// The start of a datagram, as an ICMP error quotes it.
    fn quote(&mut self, v6: bool, deep: bool) -> Vec<u8> {
        if deep {
            return self.payload(20);
        }
        if self.v(8) == 0 {
            // Malformed (IHL 3, or version 5), addresses in it all the same.
            let mut d = vec![if v6 { 0x50 } else { 0x43 }];
            d.extend(self.fbytes(None, 11));
            d.extend(self.ip4());
            d.extend(self.ip6());
            return d;
        }
        self.depth += 2;
        let mut d = if v6 { self.ipv6() } else { self.ipv4() };
        self.depth -= 2;
        let keep = self.v(d.len() as u64 + 1) as usize;
        d.truncate(keep.max(d.len().min(48)));
        d
    }

    pub(super) fn icmp6(&mut self, src: &[u8], dst: &[u8], deep: bool) -> Vec<u8> {
        let ty = [128u8, 129, 1, 3, 133, 134, 135, 136, 137, 130, 143][self.v(11) as usize];
        let mut m = vec![ty, 0, 0, 0];
        match ty {
            128 | 129 => {
                m.extend(self.fbytes(Some(fields::ICMP_ECHO), 4));
                m.extend(self.payload(30));
            }
            1 | 3 => {
                m.extend(self.fbytes(None, 4));
                m.extend(self.quote(true, deep));
            }
            133..=137 => {
                m.extend(self.fbytes(None, 4));
                if ty == 134 {
                    m.extend(self.fbytes(None, 8));
                }
                if ty >= 135 {
                    m.extend(self.ip6());
                }
                if ty == 137 {
                    m.extend(self.ip6());
                }
                self.nd_options(&mut m);
            }
            130 => {
                m.extend(self.fbytes(None, 4));
                m.extend(self.ip6());
                if self.v(2) == 0 {
                    let n = self.v(3) as u16;
                    m.extend([0, 0]);
                    m.extend(n.to_be_bytes());
                    for _ in 0..n {
                        m.extend(self.ip6());
                    }
                }
            }
            _ => {
                let n = self.v(3) as u16;
                m.extend([0, 0]);
                m.extend(n.to_be_bytes());
                for _ in 0..n {
                    let srcs = self.v(3) as u16;
                    let aux = self.v(2) as u8;
                    m.extend([1 + self.v(6) as u8, aux]);
                    m.extend(srcs.to_be_bytes());
                    m.extend(self.ip6());
                    for _ in 0..srcs {
                        m.extend(self.ip6());
                    }
                    m.extend(self.fbytes(Some(fields::IP_ADDR), usize::from(aux) * 4));
                }
            }
        }
        self.fill(&mut m, 2, Some((src, dst, 58)), false);
        m
    }

    fn nd_options(&mut self, m: &mut Vec<u8>) {
        for _ in 0..self.v(4) {
            match self.v(6) {
                0 | 1 => {
                    m.extend([1 + self.v(2) as u8, 1]);
                    m.extend(self.mac());
                }
                2 => {
                    m.extend([3, 4, 64, 0xc0]);
                    m.extend(self.fbytes(None, 12));
                    m.extend(self.ip6());
                }
                3 => {
                    m.extend([5, 1, 0, 0]);
                    m.extend(self.fbytes(None, 4));
                }
                4 => {
                    // Redirected header: a quoted packet with addresses.
                    m.extend([4, 3, 0, 0, 0, 0, 0, 0]);
                    m.extend(self.fbytes(Some(fields::IP_ADDR), 16));
                }
                _ => {
                    m.extend([25, 3, 0, 0]);
                    m.extend(self.fbytes(None, 4));
                    m.extend(self.ip6());
                }
            }
        }
    }
}
