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
/// The header walk needs the whole of the header that straddles `max` to
/// know that the headers reach `max`; cut at `max`, it would stop at the end
/// of the previous header. 128 bytes cover every single header the walk
/// reads (IPv4 and TCP at most 60, an ICMP error with its quoted headers 76)
/// except IPv6 extension and AH headers longer than 128 bytes, for which
/// the result stops before that header.
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
        // What a kernel cut at `max` would have produced instead.
        assert_eq!(snap.keep_len(&f[..40], 0), 34);
        assert_eq!(snap.snaplen(), 40);
    }
}
