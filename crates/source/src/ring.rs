//! The TPACKET_V3 receive ring: blocks of packets shared with the kernel.
//!
//! Ownership of a block passes through its `block_status` word: the kernel sets
//! TP_STATUS_USER when the block is full or its retire timer fires; user space
//! reads it with Acquire ordering (so the packet bytes written before it are
//! visible), walks the packets, and hands the block back with a Release store
//! of TP_STATUS_KERNEL (so the kernel cannot reuse it before we are done).

use crate::sys::Mapping;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Offsets in `struct tpacket_block_desc` (version, offset_to_priv, then the v1 header).
pub(crate) const BLOCK_STATUS: usize = 8;
pub(crate) const BLOCK_NUM_PKTS: usize = 12;
pub(crate) const BLOCK_FIRST_PKT: usize = 16;

/// Size and shape of a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    /// Bytes per block (a multiple of the page size).
    pub block_size: u32,
    /// Number of blocks.
    pub block_count: u32,
    /// Milliseconds after which the kernel hands over a block that is not full.
    pub retire_timeout_ms: u32,
}

/// Fewest blocks a ring is cut into when it is big enough: with only two,
/// one block being read and one being filled, a burst that arrives while
/// user space holds a block has nowhere to go.
pub const MIN_BLOCKS: u64 = 8;
/// Smallest block: a 64 KiB packet merged by an offload still fits whole.
pub const MIN_BLOCK_SIZE: u32 = 128 << 10;

impl RingGeometry {
    /// A ring of about `total_bytes`, in blocks of at most `max_block_size`
    /// (a power of two), smaller if that is needed to make at least
    /// [`MIN_BLOCKS`] blocks, but never below [`MIN_BLOCK_SIZE`].
    pub fn with_total(
        total_bytes: u64,
        max_block_size: u32,
        retire_timeout_ms: u32,
    ) -> RingGeometry {
        let total = total_bytes.max(2 * u64::from(MIN_BLOCK_SIZE));
        let mut block_size = max_block_size.max(MIN_BLOCK_SIZE);
        while block_size > MIN_BLOCK_SIZE && total / u64::from(block_size) < MIN_BLOCKS {
            block_size /= 2;
        }
        let block_count = (total / u64::from(block_size)).clamp(2, u64::from(u32::MAX)) as u32;
        RingGeometry {
            block_size,
            block_count,
            retire_timeout_ms,
        }
    }

    /// Total bytes of the ring.
    pub fn total_bytes(&self) -> usize {
        self.block_size as usize * self.block_count as usize
    }
}

/// The memory of a mapped ring, kept mapped while this value lives, for
/// registering with io_uring (`ringcap_sink`'s fixed-buffer writes of
/// in-place blocks). It hands out addresses, never bytes: what lies there
/// belongs to the kernel or to whoever holds a block.
#[derive(Clone)]
pub struct RingMemory {
    map: Arc<Mapping>,
}

impl RingMemory {
    /// Address of the ring's first byte.
    pub fn start(&self) -> usize {
        self.map.as_ptr() as usize
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True for an empty mapping (never made).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }
}

impl std::fmt::Debug for RingMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RingMemory({} bytes at {:#x})", self.len(), self.start())
    }
}

/// A mapped TPACKET_V3 receive ring.
pub struct RxRing {
    // Shared with blocks held for in-place writing (`take_block`): the
    // memory stays mapped until the last of them is given back.
    map: Arc<Mapping>,
    geometry: RingGeometry,
    current: usize,
    /// Blocks user space has moved past since the ring was made: the
    /// sequence number of the current block.
    passed: u64,
    /// Blocks taken with `take_block` and not given back yet.
    held: Arc<AtomicU32>,
}

impl RxRing {
    /// Sets up the ring on a packet socket whose PACKET_VERSION is already
    /// TPACKET_V3, and maps it. Fails (`InvalidInput`) on a socket of another
    /// version: the ring would not have the layout read here.
    pub fn new(fd: &impl AsRawFd, geometry: RingGeometry) -> io::Result<RxRing> {
        let req = libc::tpacket_req3 {
            tp_block_size: geometry.block_size,
            tp_block_nr: geometry.block_count,
            // Frames are only a sanity check in V3; packets are packed in blocks.
            tp_frame_size: 2048,
            tp_frame_nr: (geometry.total_bytes() / 2048) as u32,
            tp_retire_blk_tov: geometry.retire_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        crate::sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
        let map = Arc::new(Mapping::new(fd, geometry.total_bytes())?);
        // The block layout (and the promise that the kernel leaves a block
        // alone while user space owns it) is TPACKET_V3's. Checked once the
        // ring is mapped: from then on the kernel refuses to change the
        // version (EBUSY while a ring exists, and a mapped ring cannot be
        // freed).
        let version: libc::c_int =
            crate::sys::getsockopt(fd, libc::SOL_PACKET, libc::PACKET_VERSION)?;
        if version != libc::tpacket_versions::TPACKET_V3 as libc::c_int {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the packet socket uses TPACKET version {version}, not TPACKET_V3"),
            ));
        }
        Ok(RxRing {
            map,
            geometry,
            current: 0,
            passed: 0,
            held: Arc::new(AtomicU32::new(0)),
        })
    }

    /// The ring's memory (see [`RingMemory`]).
    pub fn memory(&self) -> RingMemory {
        RingMemory {
            map: self.map.clone(),
        }
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    fn status_word(&self, block: usize) -> &AtomicU32 {
        status_word(&self.map, block * self.geometry.block_size as usize)
    }

    /// True when the kernel has handed over the current block.
    pub fn ready(&self) -> bool {
        self.status_word(self.current).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// How many blocks the kernel has handed over and user space has not
    /// taken yet, counting from the current one: the ring's occupancy. The
    /// caller says how many are already known to be ready (`known`, from a
    /// previous call, less the blocks taken since): the kernel hands blocks
    /// over in order and never takes one back, so only the blocks after
    /// those are looked at, one status word each.
    pub fn ready_blocks(&self, known: u32) -> u32 {
        let count = self.geometry.block_count;
        let mut n = known.min(count);
        while n < count {
            let block = (self.current + n as usize) % count as usize;
            if self.status_word(block).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                break;
            }
            n += 1;
        }
        n
    }

    /// The sequence number of the current block (blocks moved past so far).
    pub fn sequence(&self) -> u64 {
        self.passed
    }

    /// The sequence number from which on every block holds only packets the
    /// kernel put in the ring after this call. The kernel fills blocks in
    /// order and hands each over (TP_STATUS_USER) when it closes it, and only
    /// user space gives one back: the first block from the current one that
    /// is not handed over now is the one the kernel is filling, or the next
    /// it will open, so the one after it was not open yet. (Call it between
    /// blocks: with blocks held, see [`take_block`](Self::take_block), the
    /// answer is later than needed, never earlier.)
    pub fn fresh_from(&self) -> u64 {
        self.passed + u64::from(self.ready_blocks(0)) + 1
    }

    /// The current block, if the kernel has handed it over. Dropping the
    /// returned [`Block`] gives it back and moves on to the next one.
    pub fn next_block(&mut self) -> Option<Block<'_>> {
        if !self.ready() {
            return None;
        }
        let size = self.geometry.block_size as usize;
        let start = self.current * size;
        // SAFETY: the kernel set TP_STATUS_USER (observed with Acquire above), so
        // it will not write this block until we store TP_STATUS_KERNEL, which
        // happens only in Block::drop after this slice's borrow has ended. The
        // range is inside the mapping.
        let bytes = unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), size) };
        Some(Block { ring: self, bytes })
    }

    /// Takes the current block, if the kernel has handed it over, to be
    /// given back later from anywhere (another thread, once the block is
    /// written): the ring moves on to the next block now, and the kernel
    /// gets this one back when the [`HeldBlock`] is dropped. Until then the
    /// kernel skips it, and when it comes round to it again with the block
    /// still held, drops packets (and counts them) as for a full ring.
    ///
    /// Held blocks go back in the order they were taken (the writer writes
    /// them in order), so they are the ones just before the current block,
    /// and the current block is one of them only when all are held: then
    /// nothing is taken (its status still says user space has it).
    pub fn take_block(&mut self) -> Option<HeldBlock> {
        if self.held_blocks() >= self.geometry.block_count || !self.ready() {
            return None;
        }
        self.held.fetch_add(1, Ordering::AcqRel);
        let size = self.geometry.block_size as usize;
        let start = self.current * size;
        self.current = (self.current + 1) % self.geometry.block_count as usize;
        self.passed += 1;
        Some(HeldBlock {
            map: self.map.clone(),
            start,
            size,
            held: self.held.clone(),
        })
    }

    /// Blocks taken with [`take_block`](Self::take_block) and not given back.
    pub fn held_blocks(&self) -> u32 {
        self.held.load(Ordering::Acquire)
    }
}

/// The status word of the block at byte `start` of the mapping.
fn status_word(map: &Mapping, start: usize) -> &AtomicU32 {
    let offset = start + BLOCK_STATUS;
    assert!(offset + 4 <= map.len(), "status word outside the ring");
    // SAFETY: the offset is inside the mapping (checked) and 4-byte aligned
    // (blocks are page aligned). The kernel writes this word concurrently,
    // which is why it is only ever accessed atomically.
    unsafe { &*(map.as_ptr().add(offset) as *const AtomicU32) }
}

/// A ring block taken with [`RxRing::take_block`]: user space owns it until
/// this is dropped, which gives it back to the kernel (a Release store of
/// TP_STATUS_KERNEL). It keeps the ring mapped.
pub struct HeldBlock {
    map: Arc<Mapping>,
    start: usize,
    size: usize,
    held: Arc<AtomicU32>,
}

impl HeldBlock {
    /// The block's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the range is one block inside the mapping (made by
        // take_block). The kernel set TP_STATUS_USER (observed with Acquire)
        // and does not write the block until the store in drop; only this
        // value hands out its bytes. The kernel may read the status word
        // meanwhile, which shared bytes allow.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.start), self.size) }
    }

    /// The block's bytes, to rewrite in place (`crate::inplace`). Bytes
    /// 8..12, the status word the kernel may read at any time, must not be
    /// written through this.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only view of the
        // block in user space. The kernel only reads the status word of a
        // block user space owns, and callers leave that word alone.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().add(self.start), self.size) }
    }
}

impl Drop for HeldBlock {
    fn drop(&mut self) {
        status_word(&self.map, self.start).store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.held.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for HeldBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeldBlock({} bytes at {})", self.size, self.start)
    }
}

/// A block of packets owned by user space until dropped.
pub struct Block<'a> {
    ring: &'a mut RxRing,
    bytes: &'a [u8],
}

impl<'a> Block<'a> {
    fn u32_at(&self, offset: usize) -> u32 {
        u32::from_ne_bytes(self.bytes[offset..offset + 4].try_into().unwrap())
    }

    /// Number of packets in the block.
    pub fn packet_count(&self) -> u32 {
        self.u32_at(BLOCK_NUM_PKTS)
    }

    /// The packets of the block, in arrival order.
    pub fn packets(&self) -> crate::packet::BlockPackets<'_> {
        crate::packet::BlockPackets::new(
            self.bytes,
            self.u32_at(BLOCK_FIRST_PKT) as usize,
            self.packet_count(),
        )
    }
}

impl Drop for Block<'_> {
    fn drop(&mut self) {
        let ring = &mut *self.ring;
        ring.status_word(ring.current)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        ring.current = (ring.current + 1) % ring.geometry.block_count as usize;
        ring.passed += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_has_enough_blocks() {
        let g = RingGeometry::with_total(256 << 20, 4 << 20, 50);
        assert_eq!((g.block_size, g.block_count), (4 << 20, 64));
        let g = RingGeometry::with_total(4 << 20, 4 << 20, 50);
        assert_eq!((g.block_size, g.block_count), (512 << 10, 8));
        let g = RingGeometry::with_total(512 << 10, 4 << 20, 50);
        assert_eq!((g.block_size, g.block_count), (128 << 10, 4));
        let g = RingGeometry::with_total(1, 4 << 20, 50);
        assert_eq!((g.block_size, g.block_count), (128 << 10, 2));
        assert_eq!(g.total_bytes(), 256 << 10);
    }

    #[test]
    fn refuses_a_socket_not_in_tpacket_v3() {
        let socket = || match crate::sys::packet_socket() {
            Ok(fd) => Some(fd),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => None,
            Err(e) => panic!("packet socket: {e}"),
        };
        let Some(v1) = socket() else {
            eprintln!("SKIP: a packet socket needs CAP_NET_RAW");
            return;
        };
        let g = RingGeometry::with_total(1 << 20, 128 << 10, 10);
        // A new socket is TPACKET_V1: its ring has another layout.
        let e = RxRing::new(&v1, g)
            .err()
            .expect("a TPACKET_V1 socket was taken for a TPACKET_V3 ring");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let v3 = socket().unwrap();
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        crate::sys::setsockopt(&v3, libc::SOL_PACKET, libc::PACKET_VERSION, &version).unwrap();
        let ring = RxRing::new(&v3, g).unwrap();
        assert!(!ring.ready());
    }
}
