//! Packets as the kernel lays them out in a ring block (`struct tpacket3_hdr`).

/// Offsets in `struct tpacket3_hdr` (also the in-place converter's).
pub(crate) const NEXT_OFFSET: usize = 0;
pub(crate) const SEC: usize = 4;
pub(crate) const NSEC: usize = 8;
pub(crate) const SNAPLEN: usize = 12;
pub(crate) const LEN: usize = 16;
pub(crate) const STATUS: usize = 20;
pub(crate) const MAC: usize = 24;
pub(crate) const VLAN_TCI: usize = 32;
pub(crate) const VLAN_TPID: usize = 36;
pub(crate) const HEADER_LEN: usize = 40;

/// A VLAN tag the kernel removed from the frame before capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    /// Tag protocol identifier (0x8100, or 0x88a8 for an 802.1ad outer tag).
    pub tpid: u16,
    /// Tag control information (priority, DEI, VLAN id).
    pub tci: u16,
}

impl VlanTag {
    /// The four bytes of the tag as they were on the wire.
    #[inline]
    pub fn bytes(&self) -> [u8; 4] {
        let p = self.tpid.to_be_bytes();
        let t = self.tci.to_be_bytes();
        [p[0], p[1], t[0], t[1]]
    }
}

/// One packet in a ring block.
#[derive(Debug, Clone, Copy)]
pub struct RingPacket<'a> {
    /// Arrival time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length of the packet as received (without a stripped VLAN tag).
    pub wire_len: u32,
    /// The captured bytes (at most the snap length), starting at the link header.
    pub data: &'a [u8],
    /// A tag the kernel stripped, to be put back after the MAC addresses.
    pub vlan: Option<VlanTag>,
    /// `tp_status` bits (timestamp source, checksum state, losing).
    pub status: u32,
}

/// Iterator over the packets of a block.
pub struct BlockPackets<'a> {
    block: &'a [u8],
    offset: usize,
    remaining: u32,
}

impl<'a> BlockPackets<'a> {
    pub(crate) fn new(block: &'a [u8], first: usize, count: u32) -> Self {
        BlockPackets {
            block,
            offset: first,
            remaining: count,
        }
    }
}

/// How far ahead of the walk the ring is prefetched, in bytes: some seven
/// short packets (a 64-byte frame takes 144 bytes of a block).
const FAR: usize = 1024;

/// A field of the packet header: constant offsets into a fixed-size array,
/// so each read is one load with no bounds check.
#[inline(always)]
fn u32_at(h: &[u8; HEADER_LEN], off: usize) -> u32 {
    u32::from_ne_bytes([h[off], h[off + 1], h[off + 2], h[off + 3]])
}

#[inline(always)]
fn u16_at(h: &[u8; HEADER_LEN], off: usize) -> u16 {
    u16::from_ne_bytes([h[off], h[off + 1]])
}

impl<'a> Iterator for BlockPackets<'a> {
    type Item = RingPacket<'a>;

    #[inline]
    fn next(&mut self) -> Option<RingPacket<'a>> {
        if self.remaining == 0 {
            return None;
        }
        let b = self.block;
        let h = self.offset;
        let hdr: &[u8; HEADER_LEN] = b.get(h..h + HEADER_LEN)?.try_into().ok()?;
        self.remaining -= 1;
        let status = u32_at(hdr, STATUS);
        let snaplen = u32_at(hdr, SNAPLEN) as usize;
        let mac = h + u16_at(hdr, MAC) as usize;
        let end = (mac + snaplen).min(b.len());
        let vlan = if status & libc::TP_STATUS_VLAN_VALID != 0 {
            let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                u16_at(hdr, VLAN_TPID)
            } else {
                0x8100
            };
            Some(VlanTag {
                tpid,
                tci: u32_at(hdr, VLAN_TCI) as u16,
            })
        } else {
            None
        };
        let packet = RingPacket {
            ts_ns: u64::from(u32_at(hdr, SEC)) * 1_000_000_000 + u64::from(u32_at(hdr, NSEC)),
            wire_len: u32_at(hdr, LEN),
            data: &b[mac.min(end)..end],
            vlan,
            status,
        };
        let next = u32_at(hdr, NEXT_OFFSET) as usize;
        self.offset = if next == 0 { b.len() } else { h + next };
        // The next packet is likely about as long as this one.
        if let Some(ahead) = b.get(self.offset..(self.offset + (end - h)).min(b.len())) {
            crate::sys::prefetch(ahead);
        }
        // And the lines [`FAR`] bytes on: another CPU wrote them (the one
        // that received the packets), and fetching them from there takes
        // longer than a packet or two of work here.
        if let Some(far) = b.get(self.offset + FAR..(self.offset + FAR + 128).min(b.len())) {
            crate::sys::prefetch(far);
        }
        Some(packet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block laid out by hand as the kernel would: two packets, the second
    /// with a stripped VLAN tag.
    #[test]
    fn walks_packets_and_tags() {
        let mut block = vec![0u8; 512];
        let first = 48;
        let put32 =
            |b: &mut Vec<u8>, off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        let put16 =
            |b: &mut Vec<u8>, off: usize, v: u16| b[off..off + 2].copy_from_slice(&v.to_ne_bytes());
        // packet 1 at 48: mac at +66 (TPACKET3_HDRLEN-ish alignment), 4 bytes
        put32(&mut block, first, 80);
        put32(&mut block, first + SEC, 7);
        put32(&mut block, first + NSEC, 5);
        put32(&mut block, first + SNAPLEN, 4);
        put32(&mut block, first + LEN, 60);
        put16(&mut block, first + MAC, 66);
        block[first + 66..first + 70].copy_from_slice(&[1, 2, 3, 4]);
        // packet 2 at 128
        let p2 = first + 80;
        put32(&mut block, p2 + SNAPLEN, 2);
        put32(&mut block, p2 + LEN, 64);
        put32(
            &mut block,
            p2 + STATUS,
            libc::TP_STATUS_VLAN_VALID | libc::TP_STATUS_VLAN_TPID_VALID,
        );
        put32(&mut block, p2 + VLAN_TCI, 0x2064);
        put16(&mut block, p2 + VLAN_TPID, 0x88a8);
        put16(&mut block, p2 + MAC, 66);
        block[p2 + 66..p2 + 68].copy_from_slice(&[9, 9]);
        let pkts: Vec<_> = BlockPackets::new(&block, first, 2).collect();
        assert_eq!(pkts.len(), 2);
        assert_eq!(pkts[0].ts_ns, 7_000_000_005);
        assert_eq!(pkts[0].data, &[1, 2, 3, 4]);
        assert_eq!(pkts[0].wire_len, 60);
        assert_eq!(pkts[0].vlan, None);
        assert_eq!(pkts[1].data, &[9, 9]);
        assert_eq!(
            pkts[1].vlan,
            Some(VlanTag {
                tpid: 0x88a8,
                tci: 0x2064
            })
        );
        assert_eq!(pkts[1].vlan.unwrap().bytes(), [0x88, 0xa8, 0x20, 0x64]);
    }
}
