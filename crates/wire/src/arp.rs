//! Address Resolution Protocol packet (RFC 826).
//!
//! The packet is 8 fixed bytes followed by sender and target hardware and
//! protocol addresses, of `hlen` and `plen` bytes each: `8 + 2*hlen + 2*plen`
//! bytes in total (28 for Ethernet/IPv4).

use crate::{be16, need, tail, Result};

/// Length of the fixed part of an ARP packet.
pub const FIXED_LEN: usize = 8;

/// Length of an Ethernet/IPv4 ARP packet.
pub const ETHERNET_IPV4_LEN: usize = 28;

/// A view of an ARP packet whose addresses are all present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket<'a> {
    buf: &'a [u8],
}

impl<'a> ArpPacket<'a> {
    /// Wraps `buf`, checking that it holds the fixed part and all four
    /// addresses.
    #[inline]
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        need(buf, FIXED_LEN)?;
        let p = ArpPacket { buf };
        need(buf, p.packet_len())?;
        Ok(p)
    }

    /// Hardware type (1 = Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        be16(self.buf, 0)
    }

    /// Protocol type (an EtherType, 0x0800 for IPv4).
    #[inline]
    pub fn protocol_type(&self) -> u16 {
        be16(self.buf, 2)
    }

    /// Hardware address length in bytes.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buf[4]
    }

    /// Protocol address length in bytes.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buf[5]
    }

    /// Operation (1 = request, 2 = reply).
    #[inline]
    pub fn operation(&self) -> u16 {
        be16(self.buf, 6)
    }

    /// Total length of the ARP packet: `8 + 2*hlen + 2*plen`.
    #[inline]
    pub fn packet_len(&self) -> usize {
        FIXED_LEN + 2 * (self.hardware_len() as usize + self.protocol_len() as usize)
    }

    #[inline]
    fn field(&self, index: usize) -> &'a [u8] {
        let h = self.hardware_len() as usize;
        let p = self.protocol_len() as usize;
        let (start, len) = match index {
            0 => (FIXED_LEN, h),
            1 => (FIXED_LEN + h, p),
            2 => (FIXED_LEN + h + p, h),
            _ => (FIXED_LEN + 2 * h + p, p),
        };
        self.buf.get(start..start + len).unwrap_or(&[])
    }

    /// Sender hardware address.
    #[inline]
    pub fn sender_hardware_addr(&self) -> &'a [u8] {
        self.field(0)
    }

    /// Sender protocol address.
    #[inline]
    pub fn sender_protocol_addr(&self) -> &'a [u8] {
        self.field(1)
    }

    /// Target hardware address.
    #[inline]
    pub fn target_hardware_addr(&self) -> &'a [u8] {
        self.field(2)
    }

    /// Target protocol address.
    #[inline]
    pub fn target_protocol_addr(&self) -> &'a [u8] {
        self.field(3)
    }

    /// Bytes after the ARP packet (Ethernet padding, usually).
    #[inline]
    pub fn trailer(&self) -> &'a [u8] {
        tail(self.buf, self.packet_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    const REQUEST: [u8; 30] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // fixed
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 192, 168, 1, 1, // sender
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 192, 168, 1, 2, // target
        0x00, 0x00, // padding
    ];

    #[test]
    fn parse() {
        let a = ArpPacket::new_checked(&REQUEST).unwrap();
        assert_eq!(a.hardware_type(), 1);
        assert_eq!(a.protocol_type(), 0x0800);
        assert_eq!(a.hardware_len(), 6);
        assert_eq!(a.protocol_len(), 4);
        assert_eq!(a.operation(), 1);
        assert_eq!(a.packet_len(), ETHERNET_IPV4_LEN);
        assert_eq!(
            a.sender_hardware_addr(),
            &[0x00, 0x11, 0x22, 0x33, 0x44, 0x55]
        );
        assert_eq!(a.sender_protocol_addr(), &[192, 168, 1, 1]);
        assert_eq!(a.target_hardware_addr(), &[0; 6]);
        assert_eq!(a.target_protocol_addr(), &[192, 168, 1, 2]);
        assert_eq!(a.trailer(), &[0, 0]);
    }

    #[test]
    fn truncated() {
        assert_eq!(ArpPacket::new_checked(&REQUEST[..7]), Err(Error::Truncated));
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]),
            Err(Error::Truncated)
        );
        assert!(ArpPacket::new_checked(&REQUEST[..28]).is_ok());
    }
}
