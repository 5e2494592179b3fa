//! A TPACKET_V3 ring block turned into pcapng where it lies, so that it can
//! be written to a file as it is (O_DIRECT from the ring memory) with no
//! copy per packet.
//!
//! The kernel lays a block out as a 48-byte block descriptor, then packets,
//! each a `tpacket3_hdr` (+ `sockaddr_ll`) at an 8-byte aligned offset and
//! the frame `tp_mac` bytes after it (82 for Ethernet, 84 with
//! `PACKET_RESERVE` [`RESERVE`] = 2, which puts Ethernet frames at a 4-byte
//! aligned offset as pcapng needs). After [`to_pcapng`] the block, from its
//! first byte to a page boundary, is a run of whole pcapng blocks:
//!
//! ```text
//! [PAD over the block descriptor and the first packet's header]
//! [EPB header (28 B, in the header room before the frame) | frame | pad | length]
//! [PAD over the next packet's header] [EPB ...] ... [PAD to the page boundary]
//! ```
//!
//! PAD is [`BT_PAD`], a local-use block readers skip. Every kernel header
//! field is read before any byte it occupies is written (the trailer of one
//! EPB may fall on the first word of the next `tpacket3_hdr`). The block
//! status word (bytes 8..12) lies inside the first PAD's body and is never
//! written here: the kernel reads it (and only it) while user space owns
//! the block, and the block goes back to the kernel by a store to it after
//! the write.
//!
//! Per packet the work is: read the header, write 28 bytes of EPB header, 4
//! of trailer (and up to 3 of zero padding) and 12 of PAD framing. A frame
//! whose data is not 4-byte aligned (a link header other than 14 bytes) is
//! moved back by 1–3 bytes, and a VLAN tag the kernel took out is put back
//! after the MAC addresses by moving those 12 bytes back 4: these are the
//! only moves of packet bytes, and none happens for untagged Ethernet.

use ringcap_format::pcapng::{self, BT_PAD, EPB_DATA_OFFSET, PAD_MIN};

/// `PACKET_RESERVE` that puts an Ethernet frame's first byte 4-byte aligned:
/// the kernel places it at `ALIGN16(68 + 16) - 14 + reserve` = 82 + reserve
/// bytes after the packet header, which is 8-byte aligned.
pub const RESERVE: u32 = 2;

/// Page size the converted region is padded to (O_DIRECT alignment).
pub const PAGE: usize = 4096;

use crate::packet::{
    HEADER_LEN, LEN, MAC, NEXT_OFFSET, NSEC, SEC, SNAPLEN, STATUS, VLAN_TCI, VLAN_TPID,
};
use crate::ring::{BLOCK_FIRST_PKT, BLOCK_NUM_PKTS, BLOCK_STATUS};

mod fast;

use fast::{fast_run, Stop};

/// What the packets of a block are to become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InPlace {
    /// pcapng interface id of the packets.
    pub interface_id: u32,
    /// Most bytes kept of a packet once a stripped VLAN tag is back in it
    /// (the snap length; the kernel already cut the frame to it).
    pub snaplen: u32,
    /// Frames longer than this were merged by a receive offload (counted).
    pub max_frame_len: u32,
}

/// What [`to_pcapng`] made of a block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Converted {
    /// Bytes from the block's start that are now whole pcapng blocks: a
    /// multiple of [`PAGE`] (0 when no packet could be converted).
    pub len: usize,
    /// Packets in them (EPBs).
    pub packets: u64,
    /// Sum of the packets' original lengths (tags put back included).
    pub bytes_on_wire: u64,
    /// Packets longer than `max_frame_len`.
    pub merged_by_offload: u64,
    /// Timestamps of the first and last packet, ns since the epoch.
    pub first_ts: u64,
    /// See `first_ts`.
    pub last_ts: u64,
    /// Packets of the block left out because the kernel's layout did not
    /// make sense (never seen; the block is cut before the first of them).
    pub malformed: u64,
    /// Packets whose bytes had to be moved (alignment or a VLAN tag put back).
    pub moved: u64,
}

#[inline(always)]
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[inline(always)]
fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

/// `words` one after the other from the start of `b`.
#[inline(always)]
fn put_words(b: &mut [u8], words: &[u32]) {
    for (i, v) in words.iter().enumerate() {
        put32(b, 4 * i, *v);
    }
}

/// The first EPB starts here or later, so that the padding block before it
/// (from the block's first byte) has the status word inside its body.
const FIRST_EPB_MIN: usize = BLOCK_STATUS + 8;

/// The fields of one `tpacket3_hdr`, read before anything near it is written.
#[derive(Clone, Copy)]
struct Header {
    at: usize,
    next: usize,
    ts_ns: u64,
    snaplen: usize,
    len: u32,
    mac: usize,
    status: u32,
    tci: u16,
    tpid: u16,
}

impl Header {
    /// The tag the kernel took out of the frame, as it was on the wire.
    #[inline]
    fn tag(&self) -> Option<[u8; 4]> {
        (self.status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if self.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                self.tpid
            } else {
                0x8100
            };
            let (p, t) = (tpid.to_be_bytes(), self.tci.to_be_bytes());
            [p[0], p[1], t[0], t[1]]
        })
    }
}

#[inline(always)]
fn read_header(b: &[u8], at: usize) -> Option<Header> {
    let h: &[u8; HEADER_LEN] = b.get(at..at.checked_add(HEADER_LEN)?)?.try_into().ok()?;
    Some(Header {
        at,
        next: u32_at(h, NEXT_OFFSET) as usize,
        ts_ns: u64::from(u32_at(h, SEC)) * 1_000_000_000 + u64::from(u32_at(h, NSEC)),
        snaplen: u32_at(h, SNAPLEN) as usize,
        len: u32_at(h, LEN),
        mac: usize::from(u16::from_ne_bytes([h[MAC], h[MAC + 1]])),
        status: u32_at(h, STATUS),
        tci: u32_at(h, VLAN_TCI) as u16,
        tpid: u16::from_ne_bytes([h[VLAN_TPID], h[VLAN_TPID + 1]]),
    })
}

/// Zeroes `block[from..to]`, the 0–3 bytes after a frame up to its 4-byte
/// boundary `to`, with one word store (no call for a few bytes).
#[inline(always)]
fn zero_tail(block: &mut [u8], from: usize, to: usize) {
    let keep = 4 - (to - from);
    if keep < 4 {
        let w = u32::from_le_bytes(block[to - 4..to].try_into().unwrap());
        let mask = (1u32 << (8 * keep)).wrapping_sub(1);
        block[to - 4..to].copy_from_slice(&(w & mask).to_le_bytes());
    }
}

/// Where a walk over a block's packets is: what is converted so far.
struct Walk {
    /// What is converted so far.
    p: Progress,
    /// Packets in the block (the kernel's count).
    count: u64,
    moved: u64,
    /// Long packets: the lines around guessed headers up to here have been
    /// asked for.
    guessed: usize,
    /// The CPU has PREFETCHW ([`crate::sys::has_prefetchw`]).
    owned: bool,
    /// Packets that repeat the layout of the one before go through
    /// `fast::uniform_run` (off only to test it against the packet-by-packet
    /// path).
    runs: bool,
}

/// The part of a [`Walk`] every packet changes: a copy of it lives in
/// registers while the fast loops run.
#[derive(Clone, Copy)]
struct Progress {
    /// End of the pcapng blocks so far.
    end: usize,
    /// Where the last EPB starts.
    last_epb: Option<usize>,
    /// Packets converted.
    done: u64,
    bytes_on_wire: u64,
    merged: u64,
    last_ts: u64,
    /// Lines up to here have been asked for (short packets).
    fetched: usize,
}

/// Rewrites the packets of a TPACKET_V3 `block` (user space owns it) into
/// pcapng blocks in place; see the module documentation. Bad layouts never
/// panic: the block is cut before the first packet that does not fit where
/// the kernel says it is. Bytes 8..12 (the block status) are never written.
pub fn to_pcapng(block: &mut [u8], opts: &InPlace) -> Converted {
    convert(block, opts, true)
}

fn convert(block: &mut [u8], opts: &InPlace, runs: bool) -> Converted {
    let mut out = Converted::default();
    if block.len() < 48 {
        return out;
    }
    let count = u32_at(block, BLOCK_NUM_PKTS) as u64;
    let first = u32_at(block, BLOCK_FIRST_PKT) as usize;
    let mut w = Walk {
        p: Progress {
            end: 0,
            last_epb: None,
            done: 0,
            bytes_on_wire: 0,
            merged: 0,
            last_ts: 0,
            fetched: first & !63,
        },
        count,
        moved: 0,
        guessed: 0,
        owned: crate::sys::has_prefetchw(),
        runs,
    };
    let mut cur = if count > 0 {
        read_header(block, first)
    } else {
        None
    };
    let first_ts = cur.map_or(0, |h| h.ts_ns);
    while let Some(h) = cur.take() {
        let h = match fast_run(block, &mut w, opts, h.at, h.next) {
            Stop::End => break,
            Stop::Slow(at, next) => match read_header(block, at) {
                // Its first word may be the last EPB's trailer by now.
                Some(h) => Header { next, ..h },
                None => break,
            },
        };
        match slow_one(block, &mut w, opts, h) {
            Some(next) => cur = Some(next),
            None => break,
        }
    }
    out.packets = w.p.done;
    out.bytes_on_wire = w.p.bytes_on_wire;
    out.merged_by_offload = w.p.merged;
    out.moved = w.moved;
    if w.p.done > 0 {
        out.first_ts = first_ts;
        out.last_ts = w.p.last_ts;
    }
    out.malformed = count.saturating_sub(out.packets);
    let (Some(last), end) = (w.p.last_epb, w.p.end) else {
        return out;
    };
    // Up to a page boundary: a padding block, or (4 or 8 bytes, too few for
    // one) zero option words added to the last EPB (read as opt_endofopt).
    let target = end.div_ceil(PAGE) * PAGE;
    if target > block.len() {
        // A block that is not a whole number of pages: nothing is written
        // from it in place.
        out.len = 0;
        return out;
    }
    let gap = target - end;
    if gap >= PAD_MIN {
        pad_block_around_status(block, end, target);
    } else if gap > 0 {
        let total = (end - last + gap) as u32;
        block[end - 4..target - 4].fill(0);
        put32(block, last + 4, total);
        put32(block, target - 4, total);
    }
    out.len = target;
    out
}

/// Converts the one packet `h` in the general way (a VLAN tag put back,
/// bytes moved to a 4-byte boundary, the snap length applied, no padding
/// block before it): the next packet's header if there is one to go on
/// with, None when the walk ends here (this packet converted or not).
#[inline(never)]
fn slow_one(block: &mut [u8], w: &mut Walk, opts: &InPlace, h: Header) -> Option<Header> {
    let size = block.len();
    // Where the frame is and what it becomes.
    let data = h.at.checked_add(h.mac)?;
    if data.checked_add(h.snaplen).is_none_or(|e| e > size) {
        return None;
    }
    let mut caplen = h.snaplen;
    let mut wire = h.len;
    let mut start = data;
    let tag = h.tag();
    let tagged = tag.is_some() && caplen >= 12;
    if tagged {
        start = data.checked_sub(4)?;
        caplen += 4;
        wire = wire.saturating_add(4);
    }
    caplen = caplen.min(opts.snaplen.max(1) as usize);
    let shift = start % 4;
    start -= shift;
    let epb = start.checked_sub(EPB_DATA_OFFSET)?;
    let padded = caplen.div_ceil(4) * 4;
    let epb_len = EPB_DATA_OFFSET + padded + 4;
    let epb_end = epb + epb_len;
    // The header must lie after what is already converted, with room
    // for a padding block in between (or none), and the trailer before
    // the end of the block and no later than the next header's second
    // word (its first is read before the trailer is written).
    let more = w.p.done + 1 < w.count && h.next != 0;
    let limit = if more {
        h.at.saturating_add(h.next).saturating_add(4).min(size)
    } else {
        size
    };
    let gap_ok = match epb.checked_sub(w.p.end) {
        Some(g) => g == 0 || g >= PAD_MIN,
        None => false,
    };
    if !gap_ok || epb < FIRST_EPB_MIN || epb_end > limit || caplen > u32::MAX as usize - 64 {
        return None;
    }
    // Move the bytes first (they only go backwards, into header room
    // already read), then frame them.
    if tagged || shift != 0 {
        if let Some(tag) = tag.filter(|_| tagged) {
            block.copy_within(data..data + 12, data - 4);
            block[data + 8..data + 12].copy_from_slice(&tag);
        }
        if shift != 0 {
            let from = start + shift;
            block.copy_within(from..from + caplen, start);
        }
        w.moved += 1;
    }
    if epb > w.p.end {
        pad_block_around_status(block, w.p.end, epb);
    }
    pcapng::write_epb_header(
        &mut block[epb..epb + EPB_DATA_OFFSET],
        opts.interface_id,
        h.ts_ns,
        caplen as u32,
        wire,
    );
    // The next header, before this trailer can cover its first word.
    let next = if more {
        h.at.checked_add(h.next)
            .and_then(|at| read_header(block, at))
    } else {
        None
    };
    zero_tail(block, start + caplen, start + padded);
    put32(block, start + padded, epb_len as u32);
    w.p.done += 1;
    w.p.last_ts = h.ts_ns;
    w.p.bytes_on_wire += u64::from(wire);
    w.p.merged += u64::from(wire > opts.max_frame_len);
    w.p.end = epb_end;
    w.p.last_epb = Some(epb);
    next
}

/// A padding block over `block[from..to]`. The block status word can only
/// fall inside the body of the first one (from = 0, to > 12).
#[inline]
fn pad_block_around_status(block: &mut [u8], from: usize, to: usize) {
    debug_assert!(from >= BLOCK_STATUS + 4 || (from == 0 && to >= BLOCK_STATUS + 8));
    let n = to - from;
    put32(block, from, BT_PAD);
    put32(block, from + 4, n as u32);
    put32(block, to - 4, n as u32);
}

#[cfg(test)]
mod tests;
