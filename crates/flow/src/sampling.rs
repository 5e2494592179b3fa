//! What the exporters say of the sampling in front of the flow table: one
//! description that IPFIX's PSAMP options record ([`crate::netflow`]) and
//! NetFlow v9's options record ([`crate::v9_options`]) both encode.

/// The sampling in front of the flow table, as an IPFIX options record
/// (PSAMP, RFC 5475/5476/5477 information elements) reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingReport {
    /// selectorAlgorithm (IANA psampSelectorAlgorithm): 1 systematic
    /// count-based, 4 uniform probabilistic, 6 hash-based (ringcap's flow
    /// hash is not BOB, but the selection is hash-based filtering).
    pub algorithm: u16,
    /// samplingPacketInterval: packets selected in a row.
    pub interval: u32,
    /// samplingPacketSpace: packets not selected after them.
    pub space: u32,
    /// samplingProbability.
    pub probability: f64,
}

impl SamplingReport {
    /// Exactly every `n`th packet.
    pub fn count(n: u32) -> SamplingReport {
        SamplingReport {
            algorithm: 1,
            interval: 1,
            space: n.saturating_sub(1),
            probability: 1.0 / f64::from(n.max(1)),
        }
    }

    /// Each packet with probability 1/`n`.
    pub fn random(n: u32) -> SamplingReport {
        SamplingReport {
            algorithm: 4,
            ..Self::count(n)
        }
    }

    /// One flow in `n` by a hash of its 5-tuple.
    pub fn flows(n: u32) -> SamplingReport {
        SamplingReport {
            algorithm: 6,
            ..Self::count(n)
        }
    }
}
