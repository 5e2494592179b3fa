//! Frame injection's messages: the frames a client sends
//! ([`InjectFrame`], in `Request::Inject`) and the report each gets back
//! ([`InjectReport`], in `Response::InjectReports`). Separate because it is
//! the one place bytes go from a client to the wire, with its own encoding
//! of them (hexadecimal, `hex_bytes`).

use serde::{Deserialize, Serialize};

/// One frame to inject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectFrame {
    /// The client's name for it, echoed in its report.
    pub tag: u64,
    /// When to send it: CLOCK_REALTIME nanoseconds; 0 = now.
    pub at_ns: u64,
    /// How late it may still be sent, in nanoseconds; later it is reported
    /// missed, not sent.
    pub tolerance_ns: u64,
    /// The whole Ethernet frame (hexadecimal on the wire).
    #[serde(with = "hex_bytes")]
    pub data: Vec<u8>,
}

/// What became of an injected frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InjectStatus {
    /// It left; `sent_ns` is when (the kernel's transmit timestamp).
    Sent,
    /// Its time had passed by more than its tolerance: not sent.
    Missed,
    /// The policy (or a bound) refused it: not sent; `reason` says why.
    Refused,
    /// Sending failed (`reason`), or the session ended before its time.
    Failed,
}

/// The report of one injected frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectReport {
    /// The frame's tag.
    pub tag: u64,
    /// When it was asked for (for "now": when the sender took it up).
    pub requested_ns: u64,
    /// When it left (kernel transmit timestamp), if it did and the kernel
    /// said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_ns: Option<u64>,
    /// What became of it.
    pub status: InjectStatus,
    /// Why it was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The fields the daemon's guard rewrote (by `inject.settable` name:
    /// "ip.ttl", "eth.src", ...): the frame left, or was to leave, with
    /// the grant's values there instead of the client's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewritten: Vec<String>,
}

/// Bytes as a hexadecimal string: half the size of a JSON number array.
mod hex_bytes {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(b.len() * 2);
        for &x in b {
            out.push(HEX[usize::from(x >> 4)] as char);
            out.push(HEX[usize::from(x & 15)] as char);
        }
        s.serialize_str(&out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <&str>::deserialize(d)?;
        if text.len() % 2 != 0 {
            return Err(D::Error::custom("odd number of hexadecimal digits"));
        }
        text.as_bytes()
            .chunks_exact(2)
            .map(|p| {
                let v = |c: u8| (c as char).to_digit(16);
                match (v(p[0]), v(p[1])) {
                    (Some(h), Some(l)) => Ok((h * 16 + l) as u8),
                    _ => Err(D::Error::custom("not a hexadecimal digit")),
                }
            })
            .collect()
    }
}
