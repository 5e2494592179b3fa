//! TCP header (RFC 9293), including options.
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Source Port          |       Destination Port        |
//! |                        Sequence Number                        |
//! |                    Acknowledgment Number                      |
//! |  Data |     |N|C|E|U|A|P|R|S|F|                               |
//! | Offset| Rsv |S|W|C|R|C|S|S|Y|I|            Window             |
//! |           Checksum            |         Urgent Pointer        |
//! |                    Options (data offset > 5)                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use crate::{be16, be32, need, put16, put32, tail, Error, Result};

/// Length of a TCP header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// TCP flag bits as they appear in the low 9 bits of bytes 12..14.
pub mod flags {
    /// FIN: no more data from sender.
    pub const FIN: u16 = 0x001;
    /// SYN: synchronize sequence numbers.
    pub const SYN: u16 = 0x002;
    /// RST: reset the connection.
    pub const RST: u16 = 0x004;
    /// PSH: push function.
    pub const PSH: u16 = 0x008;
    /// ACK: acknowledgment field significant.
    pub const ACK: u16 = 0x010;
    /// URG: urgent pointer field significant.
    pub const URG: u16 = 0x020;
    /// ECE: ECN echo.
    pub const ECE: u16 = 0x040;
    /// CWR: congestion window reduced.
    pub const CWR: u16 = 0x080;
    /// NS: ECN nonce (historic).
    pub const NS: u16 = 0x100;
}

/// Where each field is (byte ranges in the header).
pub mod field {
    use crate::Field;
    /// Source port.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port.
    pub const DST_PORT: Field = 2..4;
    /// Sequence number.
    pub const SEQ_NUM: Field = 4..8;
    /// Acknowledgment number.
    pub const ACK_NUM: Field = 8..12;
    /// Data offset (4 bits), reserved (3 bits) and the 9 flags.
    pub const OFF_FLAGS: Field = 12..14;
    /// Window.
    pub const WIN_SIZE: Field = 14..16;
    /// Checksum.
    pub const CHECKSUM: Field = 16..18;
    /// Urgent pointer.
    pub const URGENT: Field = 18..20;
}

/// A view of a TCP segment whose whole header (with options) is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps `buf`, checking the data offset is at least 5 and the whole
    /// header (data offset * 4 bytes) is present.
    ///
    /// The data offset is checked as soon as its byte is present:
    /// [`Error::Truncated`] means the bytes there could begin a valid header.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.get(12).is_some_and(|&b| b >> 4 < 5) {
            return Err(Error::Malformed);
        }
        need(b, MIN_HEADER_LEN)?;
        let p = TcpPacket { buf };
        need(p.buf.as_ref(), p.header_len())?;
        Ok(p)
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buf.as_ref(), 4)
    }

    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buf.as_ref(), 8)
    }

    /// Data offset: header length in 32-bit words.
    #[inline]
    pub fn data_offset(&self) -> u8 {
        self.buf.as_ref()[12] >> 4
    }

    /// Header length in bytes, options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }

    /// Data offset, reserved bits and the 9 flags as one word.
    #[inline]
    pub fn offset_and_flags(&self) -> u16 {
        be16(self.buf.as_ref(), field::OFF_FLAGS.start)
    }

    /// The 9 flag bits (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u16 {
        be16(self.buf.as_ref(), 12) & 0x01ff
    }

    /// FIN flag.
    #[inline]
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    /// SYN flag.
    #[inline]
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    /// RST flag.
    #[inline]
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    /// PSH flag.
    #[inline]
    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }

    /// ACK flag.
    #[inline]
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    /// URG flag.
    #[inline]
    pub fn urg(&self) -> bool {
        self.flags() & flags::URG != 0
    }

    /// ECE flag.
    #[inline]
    pub fn ece(&self) -> bool {
        self.flags() & flags::ECE != 0
    }

    /// CWR flag.
    #[inline]
    pub fn cwr(&self) -> bool {
        self.flags() & flags::CWR != 0
    }

    /// Window size.
    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.buf.as_ref(), 14)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buf.as_ref(), 16)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent_pointer(&self) -> u16 {
        be16(self.buf.as_ref(), 18)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> TcpPacket<&'a T> {
    /// The options bytes (empty when the data offset is 5).
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &AsRef::<[u8]>::as_ref(self.buf)[MIN_HEADER_LEN..self.header_len()]
    }

    /// The captured bytes after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(AsRef::<[u8]>::as_ref(self.buf), self.header_len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::SRC_PORT.start, v);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::DST_PORT.start, v);
    }

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::SEQ_NUM.start, v);
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        put32(self.buf.as_mut(), field::ACK_NUM.start, v);
    }

    /// Sets the reserved bits and the 9 flags (the low 12 bits of `v`),
    /// keeping the data offset: the header's length is the one the view
    /// was checked with, so no later accessor can read past the buffer.
    #[inline]
    pub fn set_reserved_and_flags(&mut self, v: u16) {
        let w = self.offset_and_flags() & 0xf000 | v & 0x0fff;
        put16(self.buf.as_mut(), field::OFF_FLAGS.start, w);
    }

    /// Sets the window.
    #[inline]
    pub fn set_window(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::WIN_SIZE.start, v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::CHECKSUM.start, v);
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_pointer(&mut self, v: u16) {
        put16(self.buf.as_mut(), field::URGENT.start, v);
    }

    /// Computes and sets the checksum over the whole buffer (wrap exactly
    /// the segment) and `pseudo`, the pseudo-header's sum
    /// ([`crate::checksum::pseudo_header`]).
    pub fn fill_checksum(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let c = !crate::checksum::add(pseudo, crate::checksum::sum(self.buf.as_ref()));
        self.set_checksum(c);
    }

    /// The options bytes, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buf.as_mut()[MIN_HEADER_LEN..hl]
    }

    /// The bytes after the header (to the end of the buffer), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buf.as_mut()[hl..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SYN from 12345 to 80 with MSS 1460, SACK permitted, timestamps,
    // NOP, window scale 7 (data offset 10 = 40 bytes).
    const SYN: [u8; 41] = [
        0x30, 0x39, 0x00, 0x50, // ports
        0x00, 0x00, 0x00, 0x01, // seq
        0x00, 0x00, 0x00, 0x00, // ack
        0xa0, 0x02, 0xfa, 0xf0, // doff 10, SYN, window 64240
        0x12, 0x34, 0x00, 0x00, // checksum, urgent
        0x02, 0x04, 0x05, 0xb4, // MSS
        0x04, 0x02, // SACK permitted
        0x08, 0x0a, 0, 0, 0, 1, 0, 0, 0, 0, // timestamps
        0x01, 0x03, 0x03, 0x07, // NOP, WS
        0xee, // one payload byte
    ];

    #[test]
    fn parse() {
        let t = TcpPacket::new_checked(&SYN).unwrap();
        assert_eq!(t.src_port(), 12345);
        assert_eq!(t.dst_port(), 80);
        assert_eq!(t.seq_number(), 1);
        assert_eq!(t.ack_number(), 0);
        assert_eq!(t.data_offset(), 10);
        assert_eq!(t.header_len(), 40);
        assert_eq!(t.flags(), flags::SYN);
        assert!(t.syn());
        assert!(!t.ack() && !t.fin() && !t.rst() && !t.psh() && !t.urg());
        assert!(!t.ece() && !t.cwr());
        assert_eq!(t.window(), 64240);
        assert_eq!(t.checksum(), 0x1234);
        assert_eq!(t.urgent_pointer(), 0);
        assert_eq!(t.options().len(), 20);
        assert_eq!(t.options()[..4], [0x02, 0x04, 0x05, 0xb4]);
        assert_eq!(t.payload(), &[0xee]);
    }

    #[test]
    fn errors() {
        assert_eq!(TcpPacket::new_checked(&SYN[..19]), Err(Error::Truncated));
        assert_eq!(TcpPacket::new_checked(&SYN[..39]), Err(Error::Truncated));
        let mut b = SYN;
        b[12] = 0x20; // data offset 2
        assert_eq!(TcpPacket::new_checked(&b), Err(Error::Malformed));
        // Seen in a header cut short.
        assert_eq!(TcpPacket::new_checked(&b[..13]), Err(Error::Malformed));
        assert_eq!(TcpPacket::new_checked(&b[..12]), Err(Error::Truncated));
        assert_eq!(TcpPacket::new_checked(&SYN[..13]), Err(Error::Truncated));
    }
}
