//! How much of each packet is kept.

/// The snap length: a fixed number of bytes, or exactly the protocol headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snap {
    /// Keep at most this many bytes (the kernel cuts the copy).
    Bytes(u32),
    /// Keep exactly the protocol headers, never more than `max` bytes. The
    /// kernel copies `max + HEADERS_SLACK` bytes; the capture thread cuts at
    /// the header end.
    Headers {
        /// Upper bound (`--headers-max`).
        max: u32,
    },
}

/// Bytes the kernel copies beyond `--headers-max` in headers mode.
///
/// A header cut short by the end of the copy counts as header up to the cut,
/// so a copy cut at `max` would already keep a header that straddles `max`
/// up to `max`, but only on trust: the fields that show a header is
/// malformed or not understood (a TCP data offset below 5, GRE routing, the
/// VXLAN I flag, ...) can lie beyond `max`, and with them the answer is to
/// stop before that header. 128 bytes cover every single header the walk
/// reads (IPv4 and TCP at most 60, an ICMP error with its quoted headers 76);
/// an IPv6 extension or AH header longer than that is kept up to `max`.
pub const HEADERS_SLACK: u32 = 128;

impl Snap {
    /// The snap length the kernel (or the offline filter program) cuts at.
    pub fn kernel_snaplen(&self) -> u32 {
        match *self {
            Snap::Bytes(n) => n,
            Snap::Headers { max } => max.saturating_add(HEADERS_SLACK),
        }
    }

    /// The snap length written in file headers: no record is longer.
    pub fn snaplen(&self) -> u32 {
        match *self {
            Snap::Bytes(n) => n,
            Snap::Headers { max } => max,
        }
    }

    /// Bytes to keep of `frame` (as captured) once `tag_len` bytes (a VLAN
    /// tag the kernel stripped, put back after the MAC addresses) are added
    /// to it.
    #[inline]
    pub fn keep_len(&self, frame: &[u8], tag_len: usize) -> usize {
        match *self {
            Snap::Bytes(n) => (frame.len() + tag_len).min(n as usize),
            Snap::Headers { max } => {
                (ringcap_wire::header_len(frame, max as usize) + tag_len).min(max as usize)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_cut() {
        assert_eq!(Snap::Bytes(10).keep_len(&[0; 60], 0), 10);
        assert_eq!(Snap::Bytes(100).keep_len(&[0; 60], 0), 60);
        // A VLAN tag put back counts against the snap length.
        assert_eq!(Snap::Bytes(62).keep_len(&[0; 60], 4), 62);
        assert_eq!(Snap::Bytes(100).keep_len(&[0; 60], 4), 64);
    }

    #[test]
    fn headers_straddling_max_are_kept_up_to_max() {
        // Ethernet + IPv4 + UDP + payload; UDP ends at 42, max is 40.
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[
            0x45, 0, 0, 32, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
        ]);
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00]);
        f.extend_from_slice(b"data");
        let snap = Snap::Headers { max: 40 };
        let copied = &f[..f.len().min(snap.kernel_snaplen() as usize)];
        assert_eq!(snap.keep_len(copied, 0), 40);
        // A kernel cut at `max` gives the same here (a header cut short is
        // still header) ...
        assert_eq!(snap.keep_len(&f[..40], 0), 40);
        // ... but only the slack shows a straddling header to be malformed:
        // ports are fine, yet as TCP, a data offset of 2 (byte 46) is not.
        f[23] = 6;
        f[17] = 46; // IPv4 total length
        f.resize(60, 0);
        f[46] = 0x20;
        let copied = &f[..f.len().min(snap.kernel_snaplen() as usize)];
        assert_eq!(snap.keep_len(copied, 0), 34);
        assert_eq!(snap.keep_len(&f[..40], 0), 40);
        assert_eq!(snap.snaplen(), 40);
    }

    /// Ethernet, IPv4 (total length 30), the first 10 bytes of a TCP header,
    /// Ethernet padding to 60 bytes.
    const TCP_CUT_AT_10: [u8; 60] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x1e, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, //
        0x30, 0x39, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, //
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn headers_cut_by_the_packet_end_are_kept() {
        let snap = Snap::Headers { max: 256 };
        // The datagram ends 10 bytes into the TCP header: those 10 bytes are
        // header, the padding after them is not.
        assert_eq!(snap.keep_len(&TCP_CUT_AT_10, 0), 44);
        // The frame itself ends there.
        assert_eq!(snap.keep_len(&TCP_CUT_AT_10[..44], 0), 44);
        // With a stripped VLAN tag put back.
        assert_eq!(snap.keep_len(&TCP_CUT_AT_10, 4), 48);
        // Capped by max.
        assert_eq!(Snap::Headers { max: 40 }.keep_len(&TCP_CUT_AT_10, 0), 40);
    }
}
