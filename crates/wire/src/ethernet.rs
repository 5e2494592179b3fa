//! Ethernet II frame header: destination MAC, source MAC and EtherType.
//!
//! ```text
//!  0                   6                  12      14
//! +-------------------+-------------------+-------+---------
//! |  destination MAC  |    source MAC     | type  | payload
//! +-------------------+-------------------+-------+---------
//! ```

use crate::{array, be16, need, put16, tail, Result};

/// Length of an Ethernet II header (no FCS, no VLAN tags).
pub const HEADER_LEN: usize = 14;

/// EtherType values this crate knows about.
pub mod ethertype {
    /// Internet Protocol version 4.
    pub const IPV4: u16 = 0x0800;
    /// Address Resolution Protocol.
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q VLAN tag (C-tag).
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.1ad service VLAN tag (S-tag, "QinQ").
    pub const QINQ: u16 = 0x88a8;
    /// Pre-standard QinQ tag used by some vendors.
    pub const VLAN_9100: u16 = 0x9100;
    /// Internet Protocol version 6.
    pub const IPV6: u16 = 0x86dd;
    /// MPLS unicast.
    pub const MPLS_UNICAST: u16 = 0x8847;
    /// MPLS multicast.
    pub const MPLS_MULTICAST: u16 = 0x8848;
    /// Transparent Ethernet bridging (an Ethernet frame inside GRE).
    pub const TRANSPARENT_ETHERNET: u16 = 0x6558;
    /// PPP (used by the PPTP flavour of GRE).
    pub const PPP: u16 = 0x880b;

    /// True for the EtherTypes that introduce a 4-byte VLAN tag
    /// (0x8100, 0x88a8, 0x9100).
    #[inline]
    pub const fn is_vlan(t: u16) -> bool {
        matches!(t, VLAN | QINQ | VLAN_9100)
    }
}

/// Where each field is (byte ranges in the header).
pub mod field {
    use crate::Field;
    /// Destination MAC address.
    pub const DESTINATION: Field = 0..6;
    /// Source MAC address.
    pub const SOURCE: Field = 6..12;
    /// EtherType.
    pub const ETHERTYPE: Field = 12..14;
}

/// A view of an Ethernet II frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buf`, checking that it holds a whole 14-byte header.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        need(b, HEADER_LEN)?;
        Ok(EthernetFrame { buf })
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Destination MAC address.
    #[inline]
    pub fn destination(&self) -> [u8; 6] {
        array(self.buf.as_ref(), 0)
    }

    /// Source MAC address.
    #[inline]
    pub fn source(&self) -> [u8; 6] {
        array(self.buf.as_ref(), 6)
    }

    /// The EtherType field (or, below 0x0600, an IEEE 802.3 length).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), 12)
    }

    /// Header length: always [`HEADER_LEN`].
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> EthernetFrame<&'a T> {
    /// The underlying bytes (header and payload).
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        AsRef::<[u8]>::as_ref(self.buf)
    }

    /// The bytes after the header (may include trailing padding).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        tail(AsRef::<[u8]>::as_ref(self.buf), HEADER_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_destination(&mut self, a: [u8; 6]) {
        self.buf.as_mut()[field::DESTINATION].copy_from_slice(&a);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_source(&mut self, a: [u8; 6]) {
        self.buf.as_mut()[field::SOURCE].copy_from_slice(&a);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        put16(self.buf.as_mut(), field::ETHERTYPE.start, t);
    }

    /// The bytes after the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    const FRAME: [u8; 16] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, // dst
        0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, // src
        0x08, 0x00, // IPv4
        0x45, 0x00,
    ];

    #[test]
    fn parse() {
        let f = EthernetFrame::new_checked(&FRAME).unwrap();
        assert_eq!(f.destination(), [0x00, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(f.source(), [0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]);
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.payload(), &[0x45, 0x00]);
        assert_eq!(f.as_bytes().len(), 16);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&FRAME[..13]),
            Err(Error::Truncated)
        );
        let f = EthernetFrame::new_checked(&FRAME[..14]).unwrap();
        assert!(f.payload().is_empty());
    }

    #[test]
    fn vlan_types() {
        assert!(ethertype::is_vlan(0x8100));
        assert!(ethertype::is_vlan(0x88a8));
        assert!(ethertype::is_vlan(0x9100));
        assert!(!ethertype::is_vlan(0x0800));
    }
}
