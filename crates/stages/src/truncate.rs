//! How much of each packet is kept.

/// The snap length: a fixed number of bytes, or exactly the protocol headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snap {
    /// Keep at most this many bytes (the kernel cuts the copy).
    Bytes(u32),
    /// Keep exactly the protocol headers, never more than `max` bytes. The
    /// kernel copies `max` bytes; the capture thread cuts at the header end.
    Headers {
        /// Upper bound (`--headers-max`).
        max: u32,
    },
}

impl Snap {
    /// The snap length the kernel (or the file header) is told.
    pub fn kernel_snaplen(&self) -> u32 {
        match *self {
            Snap::Bytes(n) => n,
            Snap::Headers { max } => max,
        }
    }

    /// Bytes of `frame` (an Ethernet frame as it was on the wire) to keep.
    #[inline]
    pub fn keep_len(&self, frame: &[u8]) -> usize {
        match *self {
            Snap::Bytes(n) => frame.len().min(n as usize),
            Snap::Headers { max } => ringcap_wire::header_len(frame, max as usize),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_cut() {
        assert_eq!(Snap::Bytes(10).keep_len(&[0; 60]), 10);
        assert_eq!(Snap::Bytes(100).keep_len(&[0; 60]), 60);
    }
}
