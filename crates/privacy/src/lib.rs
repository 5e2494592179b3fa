//! Privacy transforms, applied at capture time in the engine's transform
//! slot so the real values never reach a file or a client: field masks
//! (zeroing a documented vocabulary of fields, [`fields`]) and
//! prefix-preserving address anonymization ([`cryptopan`], Crypto-PAn),
//! of every header the `-s headers` walk knows and of the addresses ICMP,
//! ICMPv6 neighbor discovery, MLD and IP options carry ([`rewrite`]).
//!
//! The promise: nothing the client receives depends on a hidden field's
//! value (for an anonymized address: on anything but its Crypto-PAn image).
//! Checksums are where that is easiest to break; one covering a hidden or
//! anonymized field is recomputed from the delivered bytes when all it
//! covers was captured, and set to 0 otherwise, never updated from its
//! input value (which may be a partial offload checksum, wrong, or
//! unverifiable): see [Checksums](#checksums) below.
//!
//! # Checksums
//!
//! * Recomputed (right for the bytes delivered) when the whole range it
//!   covers is in the captured frame: IPv4 header checksums (outer,
//!   tunnelled, quoted by ICMP errors), TCP, UDP, ICMP, ICMPv6, GRE and
//!   SCTP (CRC-32c) over the segment or message up to the end its IP header
//!   announces. A wrong input checksum comes out right.
//! * Set to 0 when it covers hidden bytes that were not captured (snap
//!   length), when the IP length is unknown (0, as in segmentation offload
//!   captures), or when the pseudo-header's destination comes from an IPv6
//!   routing type that is not understood. For UDP over IPv4 0 means "no
//!   checksum" (and a UDP-over-IPv4 checksum of 0 stays 0).
//! * `payload` hidden means every transport checksum covering payload is
//!   covering hidden bytes: recomputed over the zeroed payload, or 0.
//! * Left as it came when it covers nothing hidden (e.g. the IPv4 header
//!   checksum when only ports are masked).
//! * An authentication header's integrity value is always zeroed.
//!
//! ```
//! use ringcap_privacy::{fields::FieldSet, Key, Privacy};
//! let p = Privacy::new(FieldSet::parse("ip.ttl")?, Some((Key::from_bytes([7; 32]), FieldSet::parse("ip.addr")?)))?;
//! let mut t = p.transform();
//! # Ok::<(), String>(())
//! ```

#![deny(missing_docs)]
// One audited spot (`prefetch`, a cache hint) allows it; nothing else may.
#![deny(unsafe_code)]

mod anon;
pub mod cryptopan;
mod fast;
pub mod fields;
mod hint;
mod icmp;
pub mod key;
mod prefetch;
pub mod rewrite;
mod sums;
mod v4cache;

pub use key::Key;

use cryptopan::CryptoPan;
use fields::FieldSet;
use ringcap_stages::{Transform, TransformFactory};
use std::sync::Arc;

/// LINKTYPE_ETHERNET: the link type whose headers the rewrite walks.
const LINKTYPE_ETHERNET: u32 = 1;

/// What to hide: fields to zero, and fields to anonymize under a key.
#[derive(Clone)]
pub struct Privacy {
    mask: FieldSet,
    anon: Option<(CryptoPan, FieldSet)>,
}

impl std::fmt::Debug for Privacy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Privacy")
            .field("mask", &self.mask)
            .field("anonymize", &self.anon.as_ref().map(|a| a.1))
            .finish()
    }
}

/// Fields Crypto-PAn can anonymize.
pub const ANONYMIZABLE: &[fields::Field] = &[fields::IP_ADDR, fields::ETH_ADDR];

impl Privacy {
    /// Masks `mask` and, with a key, anonymizes its fields (`ip.addr`,
    /// `eth.addr`). A field both masked and anonymized is masked.
    pub fn new(mask: FieldSet, anonymize: Option<(Key, FieldSet)>) -> Result<Privacy, String> {
        let anon = match anonymize {
            None => None,
            Some((key, set)) => {
                let extra = set.minus(FieldSet::of(ANONYMIZABLE));
                if !extra.is_empty() {
                    return Err(format!(
                        "only ip.addr and eth.addr can be anonymized (not {extra}); mask the others"
                    ));
                }
                if set.is_empty() {
                    return Err("no field to anonymize: give ip.addr and/or eth.addr".into());
                }
                Some((CryptoPan::new(&key.0), set))
            }
        };
        Ok(Privacy { mask, anon })
    }

    /// Whether it changes anything.
    pub fn is_noop(&self) -> bool {
        self.mask.is_empty() && self.anon.is_none()
    }

    /// A fresh per-thread transform (its own translation caches).
    pub fn transform(&self) -> PrivacyTransform {
        PrivacyTransform {
            scratch: Box::new(rewrite::Scratch::new()),
            rw: rewrite::Rewriter::new(
                self.mask,
                self.anon
                    .as_ref()
                    .map(|(c, f)| anon::Anon::new(c.clone(), *f)),
            ),
        }
    }

    /// The factory the engine's transform slot takes.
    pub fn factory(&self) -> TransformFactory {
        let p = self.clone();
        Arc::new(move || Box::new(p.transform()) as Box<dyn Transform>)
    }
}

/// One capture thread's privacy transform.
pub struct PrivacyTransform {
    rw: rewrite::Rewriter,
    scratch: Box<rewrite::Scratch>,
}

impl PrivacyTransform {
    /// Rewrites one Ethernet frame in place.
    pub fn rewrite_ethernet(&mut self, frame: &mut [u8]) {
        self.rw.rewrite_ethernet_with(frame, &mut self.scratch);
    }

    /// A hint: `frame`, an Ethernet frame, will be rewritten a few packets
    /// from now; start loading the translations it needs (see
    /// [`Transform::prepare`]). Changes nothing it computes.
    #[inline]
    pub fn prepare_ethernet(&mut self, frame: &[u8]) {
        self.rw.prepare_ethernet(frame);
    }
}

impl Transform for PrivacyTransform {
    fn apply(&mut self, linktype: u32, frame: &mut [u8], _wire_len: u32) {
        if linktype == LINKTYPE_ETHERNET {
            self.rw.rewrite_ethernet_with(frame, &mut self.scratch);
        } else {
            // Headers this rewrite does not walk could hold anything it
            // should hide: fail closed.
            frame.fill(0);
        }
    }

    #[inline]
    fn prepare(&mut self, linktype: u32, frame: &[u8]) {
        if linktype == LINKTYPE_ETHERNET {
            self.rw.prepare_ethernet(frame);
        }
    }
}
