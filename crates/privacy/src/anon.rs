//! Per-thread address anonymization state: the key's Crypto-PAn and caches
//! of recent translations (a translation costs up to 128 AES blocks; traffic
//! repeats its addresses).

use crate::cryptopan::{Cache, CryptoPan};
use crate::fields::FieldSet;
use crate::v4cache::V4Cache;

/// Address anonymization state: the key's anonymizer and caches of recent
/// translations, per thread.
pub(crate) struct Anon {
    pub(crate) cpan: CryptoPan,
    pub(crate) fields: FieldSet,
    /// IPv4: a /16 table and a growing address map ([`V4Cache`]).
    v4: V4Cache,
    v6: Cache<16, 4096>,
    /// Images of /64 prefixes (64 AES blocks saved per new address).
    v6_64: Cache<8, 1024>,
    mac: Cache<6, 4096>,
}

impl Anon {
    pub(crate) fn new(cpan: CryptoPan, fields: FieldSet) -> Anon {
        Anon {
            cpan,
            fields,
            v4: V4Cache::new(),
            v6: Cache::default(),
            v6_64: Cache::default(),
            mac: Cache::default(),
        }
    }

    #[inline]
    pub(crate) fn ipv4(&mut self, a: [u8; 4]) -> [u8; 4] {
        self.v4.get(&self.cpan, u32::from_be_bytes(a)).to_be_bytes()
    }

    /// Starts loading what translating `a` and `b` will read (a hint).
    #[inline]
    pub(crate) fn prepare_ipv4_pair(&self, a: [u8; 4], b: [u8; 4]) {
        self.v4.prepare(u32::from_be_bytes(a));
        self.v4.prepare(u32::from_be_bytes(b));
    }

    /// The images of two addresses (a header's source and destination),
    /// looked up together.
    #[inline]
    pub(crate) fn ipv4_pair(&mut self, a: [u8; 4], b: [u8; 4]) -> ([u8; 4], [u8; 4]) {
        let (x, y) = self
            .v4
            .get2(&self.cpan, u32::from_be_bytes(a), u32::from_be_bytes(b));
        (x.to_be_bytes(), y.to_be_bytes())
    }

    pub(crate) fn ipv6(&mut self, a: [u8; 16]) -> [u8; 16] {
        let Anon {
            cpan, v6, v6_64, ..
        } = self;
        v6.get(a, |a| {
            let mut hi = [0u8; 8];
            hi.copy_from_slice(&a[..8]);
            let p = v6_64.get(hi, |p| {
                let mut full = [0u8; 16];
                full[..8].copy_from_slice(&p);
                let i = cpan.ipv6(full);
                let mut out = [0u8; 8];
                out.copy_from_slice(&i[..8]);
                out
            });
            let orig = u128::from_be_bytes(a);
            let low = (orig ^ cpan.flips(orig, 64, 128)) as u64;
            let mut out = [0u8; 16];
            out[..8].copy_from_slice(&p);
            out[8..].copy_from_slice(&low.to_be_bytes());
            out
        })
    }

    pub(crate) fn mac(&mut self, m: [u8; 6]) -> [u8; 6] {
        let Anon { cpan, mac, .. } = self;
        mac.get(m, |m| cpan.mac(m))
    }
}
