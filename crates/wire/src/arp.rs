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

/// Where the fixed fields are (byte ranges, or the byte); the addresses
/// follow at offsets that depend on the lengths ([`ArpPacket::addr_range`]).
pub mod field {
    use crate::Field;
    /// Hardware type.
    pub const HTYPE: Field = 0..2;
    /// Protocol type.
    pub const PTYPE: Field = 2..4;
    /// Hardware address length.
    pub const HLEN: usize = 4;
    /// Protocol address length.
    pub const PLEN: usize = 5;
    /// Operation.
    pub const OPER: Field = 6..8;
}

/// The four addresses of an ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    /// Sender hardware address.
    SenderHardware,
    /// Sender protocol address.
    SenderProtocol,
    /// Target hardware address.
    TargetHardware,
    /// Target protocol address.
    TargetProtocol,
}

/// A view of an ARP packet whose addresses are all present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps `buf`, checking that it holds the fixed part and all four
    /// addresses.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        need(b, FIXED_LEN)?;
        let p = ArpPacket { buf };
        need(p.buf.as_ref(), p.packet_len())?;
        Ok(p)
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Hardware type (1 = Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }

    /// Protocol type (an EtherType, 0x0800 for IPv4).
    #[inline]
    pub fn protocol_type(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }

    /// Hardware address length in bytes.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buf.as_ref()[4]
    }

    /// Protocol address length in bytes.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buf.as_ref()[5]
    }

    /// Operation (1 = request, 2 = reply).
    #[inline]
    pub fn operation(&self) -> u16 {
        be16(self.buf.as_ref(), 6)
    }

    /// Total length of the ARP packet: `8 + 2*hlen + 2*plen`.
    #[inline]
    pub fn packet_len(&self) -> usize {
        FIXED_LEN + 2 * (self.hardware_len() as usize + self.protocol_len() as usize)
    }

    /// Where address `a` is (inside the packet: the constructor checked
    /// that all four are present).
    #[inline]
    pub fn addr_range(&self, a: Addr) -> core::ops::Range<usize> {
        let h = usize::from(self.hardware_len());
        let p = usize::from(self.protocol_len());
        let (start, len) = match a {
            Addr::SenderHardware => (FIXED_LEN, h),
            Addr::SenderProtocol => (FIXED_LEN + h, p),
            Addr::TargetHardware => (FIXED_LEN + h + p, h),
            Addr::TargetProtocol => (FIXED_LEN + 2 * h + p, p),
        };
        start..start + len
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> ArpPacket<&'a T> {
    /// Sender hardware address.
    #[inline]
    pub fn sender_hardware_addr(&self) -> &'a [u8] {
        let r = self.addr_range(Addr::SenderHardware);
        &AsRef::<[u8]>::as_ref(self.buf)[r]
    }

    /// Sender protocol address.
    #[inline]
    pub fn sender_protocol_addr(&self) -> &'a [u8] {
        let r = self.addr_range(Addr::SenderProtocol);
        &AsRef::<[u8]>::as_ref(self.buf)[r]
    }

    /// Target hardware address.
    #[inline]
    pub fn target_hardware_addr(&self) -> &'a [u8] {
        let r = self.addr_range(Addr::TargetHardware);
        &AsRef::<[u8]>::as_ref(self.buf)[r]
    }

    /// Target protocol address.
    #[inline]
    pub fn target_protocol_addr(&self) -> &'a [u8] {
        let r = self.addr_range(Addr::TargetProtocol);
        &AsRef::<[u8]>::as_ref(self.buf)[r]
    }

    /// Bytes after the ARP packet (Ethernet padding, usually).
    #[inline]
    pub fn trailer(&self) -> &'a [u8] {
        tail(AsRef::<[u8]>::as_ref(self.buf), self.packet_len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// The address `a`, writable.
    #[inline]
    pub fn addr_mut(&mut self, a: Addr) -> &mut [u8] {
        let r = self.addr_range(a);
        &mut self.buf.as_mut()[r]
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
