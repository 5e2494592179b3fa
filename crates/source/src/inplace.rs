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

use ringcap_format::pcapng::{self, BT_EPB, BT_PAD, EPB_DATA_OFFSET, PAD_MIN};

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

/// Bytes ahead of the packet being converted whose cache lines are asked
/// for ([`crate::sys::prefetch_for_write`]) while packets are short. The
/// kernel filled the block from another CPU, so every line of it is a miss
/// here; the walk is a chain (each header says where the next one is), so
/// the CPU cannot run ahead by itself. Asking ~16 lines (a dozen short
/// packets) ahead covers the latency of fetching a line from the other
/// CPU's cache.
const PREFETCH_AHEAD: usize = 1024;

/// Packets further apart than this (header to header) are "long": the
/// converter touches only the few lines around each header (the trailer
/// and padding block head of the packet before, the header, the EPB header
/// before the frame), not the frame bytes between. Asking for every line
/// of a 1500-byte packet (25 lines to use 2 or 3) cost ~100 ns per packet
/// live, and 1 KiB ahead fell short of the next header (~1.6 KiB on), so
/// every header read still waited for memory.
const DENSE_STRIDE: usize = 256;

/// For long packets: how many packets ahead the lines around a header are
/// asked for, guessing that the packets ahead are as far apart as the
/// current one and the next (a wrong guess only wastes a hint).
const PREFETCH_PACKETS: usize = 8;

/// Where an Ethernet frame starts after its `tpacket3_hdr` with
/// [`RESERVE`] (`tp_mac`): the end of the lines asked for around a header.
const FRAME_AT: usize = 82 + RESERVE as usize;

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
    /// [`uniform_run`] (off only to test it against the packet-by-packet
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

/// What [`fast_run`] stopped at.
enum Stop {
    /// Every packet the block has (or the walk cannot go on).
    End,
    /// The packet at this header offset (whose `tp_next_offset` is the
    /// second value, read before anything could cover it) needs the
    /// general path.
    Slow(usize, usize),
}

/// Asks for every line from the last one asked for (`fetched`) up to
/// [`PREFETCH_AHEAD`] bytes after `at`: the walk over short packets (at
/// most [`DENSE_STRIDE`] apart) touches them all.
#[inline(always)]
fn prefetch_lines<const OWNED: bool>(block: &[u8], fetched: &mut usize, at: usize) {
    let ahead = (at + PREFETCH_AHEAD).min(block.len());
    while *fetched < ahead {
        crate::sys::prefetch_for_write(block, *fetched, OWNED);
        *fetched += 64;
    }
}

/// Asks, for long packets (more than [`DENSE_STRIDE`] apart), for the lines
/// around the headers [`PREFETCH_PACKETS`] packets ahead, guessing they are
/// `next` apart.
#[inline(always)]
fn prefetch_headers(block: &[u8], w: &mut Walk, at: usize, next: usize) {
    let size = block.len();
    // One header per packet once under way; the first packet of a run asks
    // for all of them up to PREFETCH_PACKETS ahead.
    let last = at.saturating_add(next.saturating_mul(PREFETCH_PACKETS));
    let mut g = w.guessed.max(at.saturating_add(next));
    while g <= last && g < size {
        // From the 16 bytes before the header (where the packet before ends
        // with its trailer and this one's padding block starts) to its frame.
        let mut line = g.saturating_sub(16) & !63;
        let end = (g + FRAME_AT).min(size);
        while line < end {
            crate::sys::prefetch_for_write(block, line, w.owned);
            line += 64;
        }
        g = g.saturating_add(next);
    }
    w.guessed = g;
}

/// The layout shared by a run of packets: header to header `stride`,
/// frame `mac` bytes after its header, `caplen` bytes of it.
#[derive(Clone, Copy)]
struct Uniform {
    stride: usize,
    mac: usize,
    caplen: usize,
}

/// Converts packets from the header at `at` (whose `tp_next_offset`,
/// already read, is `next` = `layout.stride`) for as long as each has the
/// layout of the packet before it, which the last EPB (ending at
/// `run.end`) was made from: the same stride, frame offset and length, no
/// tag, and a header after it. Such packets need no per-packet decision:
/// every word written is a constant of the run or a field of the header
/// (timestamp, original length), at offsets fixed relative to the packet.
/// The bytes each packet touches, from the padding block's head at the
/// last EPB's end to the next header's first word, are one window of the
/// block: one bounds check per packet. Returns where the walk goes on:
/// the first packet not converted here and its `tp_next_offset`.
#[inline(always)]
fn uniform_run<const OWNED: bool, const LEAD: usize>(
    block: &mut [u8],
    run: &mut Progress,
    count: u64,
    opts: &InPlace,
    layout: Uniform,
    mut at: usize,
    mut next: usize,
) -> (usize, usize) {
    let Uniform {
        stride,
        mac,
        caplen,
    } = layout;
    let padded = (caplen + 3) & !3;
    // The last EPB ended LEAD bytes after this packet's header: 0, or 4
    // when its trailer took the header's first word.
    let epb_len = EPB_DATA_OFFSET + padded + 4;
    if run.end != at + LEAD
        || !stride.is_multiple_of(4)
        || mac + padded + 4 != stride + LEAD
        || mac < LEAD + EPB_DATA_OFFSET + PAD_MIN
        || !(at + mac).is_multiple_of(4)
        || caplen > opts.snaplen.max(1) as usize
    {
        return (at, next);
    }
    let head = (mac - LEAD - EPB_DATA_OFFSET) as u32;
    let mut pad_head = [0u8; 8];
    put_words(&mut pad_head, &[BT_PAD, head]);
    let mut fixed = [0u8; 16];
    put_words(
        &mut fixed,
        &[head, BT_EPB, epb_len as u32, opts.interface_id],
    );
    let epb_at = mac - LEAD - EPB_DATA_OFFSET - 4;
    let frame_at = mac - LEAD;
    let mut base = run.end;
    while run.done + 1 < count {
        prefetch_lines::<OWNED>(block, &mut run.fetched, at);
        // From the padding block's head to the next header's first word.
        let Some(c) = block.get_mut(base..base + stride + 4) else {
            break;
        };
        let Some(h) = c.first_chunk::<28>() else {
            break;
        };
        let status = u32_at(h, STATUS - LEAD);
        let snap = u32_at(h, SNAPLEN - LEAD) as usize;
        let this_mac = usize::from(u16::from_ne_bytes([h[MAC - LEAD], h[MAC + 1 - LEAD]]));
        if status & libc::TP_STATUS_VLAN_VALID != 0 || snap != caplen || this_mac != mac {
            break;
        }
        let ts_ns =
            u64::from(u32_at(h, SEC - LEAD)) * 1_000_000_000 + u64::from(u32_at(h, NSEC - LEAD));
        let wire = u32_at(h, LEN - LEAD);
        let next_next =
            u32::from_ne_bytes(c[stride - LEAD..stride - LEAD + 4].try_into().unwrap()) as usize;
        c[..8].copy_from_slice(&pad_head);
        let e: &mut [u8; 32] = (&mut c[epb_at..epb_at + 32]).try_into().unwrap();
        e[..16].copy_from_slice(&fixed);
        put_words(
            &mut e[16..],
            &[(ts_ns >> 32) as u32, ts_ns as u32, caplen as u32, wire],
        );
        zero_tail(c, frame_at + caplen, frame_at + padded);
        c[stride - 4..stride].copy_from_slice(&(epb_len as u32).to_ne_bytes());
        run.done += 1;
        run.last_ts = ts_ns;
        run.bytes_on_wire += u64::from(wire);
        run.merged += u64::from(wire > opts.max_frame_len);
        run.last_epb = Some(base + epb_at + 4);
        base += stride;
        run.end = base;
        at += stride;
        next = next_next;
        if next != stride {
            break;
        }
    }
    (at, next)
}

/// Converts packets from the header at `at` (whose `tp_next_offset` is
/// `next`) for as long as each is the common case: an untagged frame at a
/// 4-byte aligned offset, within the snap length, with room before it for
/// a padding block over what lies between it and the last EPB. Per packet:
/// one header read, a padding block's head and an EPB's header written
/// (the padding block's length word is the 4 bytes before the EPB), the
/// next header's first word read, the trailer written. Anything else goes
/// back to the caller ([`Stop::Slow`]) untouched.
///
/// The loop keeps its state in registers and touches the block through one
/// bounds-checked window per packet; packets that repeat the layout of the
/// one before go to [`uniform_run`]. At 64-byte packets this runs once per
/// 152 bytes of the block, so every instruction shows: 8.5 ns per packet
/// before, 4.8 after, with the block in the cache (`examples/inplace_speed`).
#[inline(always)]
fn fast_run(block: &mut [u8], w: &mut Walk, opts: &InPlace, at: usize, next: usize) -> Stop {
    if w.owned {
        fast_loop::<true>(block, w, opts, at, next)
    } else {
        fast_loop::<false>(block, w, opts, at, next)
    }
}

#[inline(always)]
fn fast_loop<const OWNED: bool>(
    block: &mut [u8],
    w: &mut Walk,
    opts: &InPlace,
    mut at: usize,
    mut next: usize,
) -> Stop {
    let size = block.len();
    let max_caplen = opts.snaplen.max(1) as usize;
    let first_data = FIRST_EPB_MIN + EPB_DATA_OFFSET;
    let mut p = w.p;
    p.fetched = p.fetched.max(at & !63);
    let stop = loop {
        if next <= DENSE_STRIDE {
            prefetch_lines::<OWNED>(block, &mut p.fetched, at);
        } else {
            prefetch_headers(block, w, at, next);
        }
        let Some(h) = block.get(at..at + HEADER_LEN) else {
            break Stop::Slow(at, next);
        };
        let h: &[u8; HEADER_LEN] = h.try_into().unwrap();
        let status = u32_at(h, STATUS);
        let caplen = u32_at(h, SNAPLEN) as usize;
        let data = at + usize::from(u16::from_ne_bytes([h[MAC], h[MAC + 1]]));
        let padded = (caplen + 3) & !3;
        let epb_end = data + padded + 4;
        let more = p.done + 1 < w.count && next != 0;
        let limit = if more {
            (at + next + 4).min(size)
        } else {
            size
        };
        if status & libc::TP_STATUS_VLAN_VALID != 0
            || caplen > max_caplen
            || !data.is_multiple_of(4)
            || data < (p.end + EPB_DATA_OFFSET + PAD_MIN).max(first_data)
            || epb_end > limit
        {
            break Stop::Slow(at, next);
        }
        let ts_ns = u64::from(u32_at(h, SEC)) * 1_000_000_000 + u64::from(u32_at(h, NSEC));
        let wire = u32_at(h, LEN);
        // The next header's first word, before the trailer can cover it.
        let next_at = at + next;
        let next_next = if more {
            block
                .get(next_at..next_at + 4)
                .map(|b| u32_at(b, 0) as usize)
        } else {
            None
        };
        // Everything this packet writes, from the padding block's head to
        // the trailer: one bounds check (end < data <= epb_end <= size).
        let Some(span) = block.get_mut(p.end..epb_end) else {
            break Stop::Slow(at, next);
        };
        let head = data - p.end - EPB_DATA_OFFSET;
        let epb_len = (EPB_DATA_OFFSET + padded + 4) as u32;
        put_words(&mut span[..8], &[BT_PAD, head as u32]);
        put_words(
            &mut span[head - 4..head + EPB_DATA_OFFSET],
            &[
                head as u32,
                BT_EPB,
                epb_len,
                opts.interface_id,
                (ts_ns >> 32) as u32,
                ts_ns as u32,
                caplen as u32,
                wire,
            ],
        );
        let t = span.len() - 4;
        zero_tail(span, t - padded + caplen, t);
        span[t..].copy_from_slice(&epb_len.to_ne_bytes());
        p.done += 1;
        p.last_ts = ts_ns;
        p.bytes_on_wire += u64::from(wire);
        p.merged += u64::from(wire > opts.max_frame_len);
        p.last_epb = Some(data - EPB_DATA_OFFSET);
        p.end = epb_end;
        let (prev_at, stride) = (at, next);
        match next_next {
            Some(n) => (at, next) = (next_at, n),
            None => break Stop::End,
        }
        // The packets after this one may share its layout.
        if w.runs && next == stride && stride <= DENSE_STRIDE {
            let layout = Uniform {
                stride,
                mac: data - prev_at,
                caplen,
            };
            (at, next) = if p.end == at {
                uniform_run::<OWNED, 0>(block, &mut p, w.count, opts, layout, at, next)
            } else {
                uniform_run::<OWNED, 4>(block, &mut p, w.count, opts, layout, at, next)
            };
        }
    };
    w.p = p;
    stop
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
mod tests {
    use super::*;
    use ringcap_format::walk::{record_at, RecordFormat};

    /// A frame for [`kernel_block`]: bytes, original length, VLAN tag
    /// (tpid, tci) the kernel took out.
    type Frame = (Vec<u8>, u32, Option<(u16, u16)>);

    /// A block as the kernel lays it out: descriptor, then packets with
    /// `tp_mac` = `mac` (84 for Ethernet with RESERVE).
    fn kernel_block(size: usize, mac: usize, pkts: &[Frame]) -> Vec<u8> {
        let mut b = vec![0xeeu8; size];
        put32(&mut b, 0, 3);
        put32(&mut b, 4, 0);
        put32(&mut b, BLOCK_STATUS, libc::TP_STATUS_USER);
        put32(&mut b, BLOCK_NUM_PKTS, pkts.len() as u32);
        put32(&mut b, BLOCK_FIRST_PKT, 48);
        let mut at = 48;
        for (i, (data, len, tag)) in pkts.iter().enumerate() {
            // The kernel's TOTAL_PKT_LEN_INCL_ALIGN: 8-byte steps.
            let next = (mac + data.len()).div_ceil(8) * 8;
            b[at..at + 68].fill(0x11);
            put32(
                &mut b,
                at + NEXT_OFFSET,
                if i + 1 == pkts.len() { 0 } else { next as u32 },
            );
            put32(&mut b, at + SEC, 1_700_000_000 + i as u32);
            put32(&mut b, at + NSEC, 123 + i as u32);
            put32(&mut b, at + SNAPLEN, data.len() as u32);
            put32(&mut b, at + LEN, *len);
            let mut status = libc::TP_STATUS_USER;
            if let Some((tpid, tci)) = tag {
                status |= libc::TP_STATUS_VLAN_VALID | libc::TP_STATUS_VLAN_TPID_VALID;
                put32(&mut b, at + VLAN_TCI, u32::from(*tci));
                b[at + VLAN_TPID..at + VLAN_TPID + 2].copy_from_slice(&tpid.to_ne_bytes());
            }
            put32(&mut b, at + STATUS, status);
            b[at + MAC..at + MAC + 2].copy_from_slice(&(mac as u16).to_ne_bytes());
            b[at + mac..at + mac + data.len()].copy_from_slice(data);
            at += next;
        }
        put32(&mut b, 20, at as u32);
        b
    }

    /// (ts, caplen, wire, data) of every EPB, checking that the region is
    /// a run of whole blocks of known types.
    fn epbs(region: &[u8]) -> Vec<(u64, u32, u32, Vec<u8>)> {
        let mut v = Vec::new();
        let mut p = 0;
        while p < region.len() {
            let (len, ts) = record_at(RecordFormat::Pcapng, region, p).expect("whole block");
            let t = u32_at(region, p);
            assert!(t == BT_EPB || t == BT_PAD, "block type {t:#x} at {p}");
            assert_eq!(u32_at(region, p + len - 4) as usize, len);
            if t == BT_EPB {
                let cap = u32_at(region, p + 20);
                let wire = u32_at(region, p + 24);
                assert!(28 + (cap as usize).div_ceil(4) * 4 + 4 <= len);
                let tail = &region[p + 28 + cap as usize..p + 28 + (cap as usize).div_ceil(4) * 4];
                assert!(
                    tail.iter().all(|&b| b == 0),
                    "padding after the frame at {p}"
                );
                let d = region[p + 28..p + 28 + cap as usize].to_vec();
                v.push((ts.unwrap(), cap, wire, d));
            }
            p += len;
        }
        assert_eq!(p, region.len());
        v
    }

    /// Numbers below `n` from a xorshift generator started at `seed`.
    fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        }
    }

    fn frame(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| seed.wrapping_add(i as u8)).collect()
    }

    const OPTS: InPlace = InPlace {
        interface_id: 0,
        snaplen: 262_144,
        max_frame_len: 1514,
    };

    #[test]
    fn ethernet_frames_become_epbs_without_moving() {
        let pkts: Vec<_> = [60usize, 61, 62, 63, 64, 1514, 1500, 97]
            .iter()
            .enumerate()
            .map(|(i, n)| (frame(*n, i as u8), *n as u32, None))
            .collect();
        let mut b = kernel_block(1 << 16, 84, &pkts);
        let c = to_pcapng(&mut b, &OPTS);
        assert_eq!(c.packets, pkts.len() as u64);
        assert_eq!(c.moved, 0);
        assert_eq!(c.malformed, 0);
        assert_eq!(c.len % PAGE, 0);
        assert_eq!(
            u32_at(&b, BLOCK_STATUS),
            libc::TP_STATUS_USER,
            "status word written"
        );
        let got = epbs(&b[..c.len]);
        for (i, (ts, cap, wire, data)) in got.iter().enumerate() {
            assert_eq!(
                *ts,
                (1_700_000_000 + i as u64) * 1_000_000_000 + 123 + i as u64
            );
            assert_eq!(*cap as usize, pkts[i].0.len());
            assert_eq!(*wire, pkts[i].1);
            assert_eq!(data, &pkts[i].0);
        }
        assert_eq!((c.first_ts, c.last_ts), (got[0].0, got[7].0));
        assert_eq!(c.merged_by_offload, 0);
    }

    #[test]
    fn misaligned_frames_move_and_tags_go_back() {
        // tp_mac 82: Ethernet without PACKET_RESERVE (2 bytes off); 96: no
        // link header room of 14 (raw IP).
        for mac in [82usize, 84, 83, 96, 81] {
            let pkts = vec![
                (frame(60, 1), 60u32, None),
                (frame(100, 2), 100, Some((0x8100u16, 0x0064u16))),
                (frame(8, 3), 8, Some((0x88a8, 5))), // too short for a tag
                (frame(1514, 4), 3000, None),        // merged by an offload
            ];
            let mut b = kernel_block(1 << 16, mac, &pkts);
            let c = to_pcapng(&mut b, &OPTS);
            assert_eq!(c.packets, 4, "mac {mac}");
            let got = epbs(&b[..c.len]);
            assert_eq!(got[0].3, pkts[0].0);
            let mut tagged = pkts[1].0[..12].to_vec();
            tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
            tagged.extend_from_slice(&pkts[1].0[12..]);
            assert_eq!(got[1].3, tagged);
            assert_eq!((got[1].1, got[1].2), (104, 104));
            assert_eq!(got[2].3, pkts[2].0);
            assert_eq!(got[3].2, 3000);
            assert_eq!(c.merged_by_offload, 1);
            assert_eq!(c.bytes_on_wire, 60 + 104 + 8 + 3000);
            assert_eq!(u32_at(&b, BLOCK_STATUS), libc::TP_STATUS_USER);
        }
    }

    #[test]
    fn snap_length_counts_the_tag() {
        let pkts = vec![(frame(64, 9), 1000u32, Some((0x8100u16, 7u16)))];
        let mut b = kernel_block(1 << 14, 84, &pkts);
        let c = to_pcapng(
            &mut b,
            &InPlace {
                snaplen: 64,
                ..OPTS
            },
        );
        let got = epbs(&b[..c.len]);
        assert_eq!((got[0].1, got[0].2), (64, 1004));
        assert_eq!(&got[0].3[12..16], &[0x81, 0, 0, 7]);
        assert_eq!(&got[0].3[16..], &pkts[0].0[12..60]);
    }

    /// The last packet ending 4, 8 or 12+ bytes before a page boundary,
    /// and exactly on it.
    #[test]
    fn every_tail_reaches_a_page_boundary() {
        for n in 3900..4100usize {
            let pkts = vec![(frame(n, 1), n as u32, None)];
            let mut b = kernel_block(3 * PAGE, 84, &pkts);
            let c = to_pcapng(&mut b, &OPTS);
            assert_eq!(c.packets, 1, "{n}");
            assert_eq!(c.len % PAGE, 0);
            let got = epbs(&b[..c.len]);
            assert_eq!(got[0].3, pkts[0].0);
        }
    }

    /// Blocks of random frames (lengths, tags, link header room, snap
    /// lengths) and random damage: never a panic, never a write to the
    /// status word, always whole blocks, and every packet converted when
    /// nothing was damaged.
    #[test]
    fn random_blocks_convert_or_cut_cleanly() {
        let mut rnd = xorshift(0x2545_f491_4f6c_dd1d);
        for round in 0..2000 {
            let mac = [84usize, 84, 84, 82, 83, 96][rnd(6) as usize];
            let n = 1 + rnd(40) as usize;
            let pkts: Vec<Frame> = (0..n)
                .map(|i| {
                    let len = [60usize, 61, 62, 63, 64, 65, 66, 67, 128, 1514][rnd(10) as usize];
                    let tag = (rnd(8) == 0).then_some((0x8100u16, rnd(4096) as u16));
                    (frame(len, i as u8), len as u32 + rnd(3) as u32, tag)
                })
                .collect();
            let snaplen = [64u32, 65, 96, 262_144][rnd(4) as usize];
            let opts = InPlace { snaplen, ..OPTS };
            let mut b = kernel_block(1 << 16, mac, &pkts);
            let damaged = rnd(4) == 0;
            if damaged {
                let at = rnd(2048) as usize;
                b[at] = rnd(256) as u8;
            }
            let c = to_pcapng(&mut b, &opts);
            assert_eq!(
                u32_at(&b, BLOCK_STATUS),
                libc::TP_STATUS_USER,
                "round {round}"
            );
            let got = epbs(&b[..c.len]);
            assert_eq!(got.len() as u64, c.packets, "round {round}");
            if !damaged {
                assert_eq!(c.packets, n as u64, "round {round}");
                for (i, (_, cap, _, data)) in got.iter().enumerate() {
                    let (f, _, tag) = &pkts[i];
                    let mut want = f.clone();
                    if let (Some((p, t)), true) = (tag, f.len() >= 12) {
                        let mut v = f[..12].to_vec();
                        v.extend_from_slice(&p.to_be_bytes());
                        v.extend_from_slice(&t.to_be_bytes());
                        v.extend_from_slice(&f[12..]);
                        want = v;
                    }
                    want.truncate(snaplen as usize);
                    assert_eq!(*cap as usize, want.len(), "round {round} packet {i}");
                    assert_eq!(data, &want, "round {round} packet {i}");
                }
            }
        }
    }

    #[test]
    fn runs_of_one_layout_convert_as_packet_by_packet() {
        // Blocks made of runs of packets that share a layout (the case
        // uniform_run takes), broken by tags, other lengths, frames at
        // other offsets and damage: the result must be byte for byte what
        // the packet-by-packet path makes of the same block.
        let mut rnd = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut run_packets = 0u64;
        for round in 0..1500 {
            let mac = [84usize, 84, 84, 88, 82][rnd(5) as usize];
            let mut pkts: Vec<Frame> = Vec::new();
            while pkts.len() < 300 {
                let len = [60usize, 61, 62, 63, 64, 65, 66, 67, 68, 100, 1514][rnd(11) as usize];
                let tag = (rnd(10) == 0).then_some((0x8100u16, rnd(4096) as u16));
                for _ in 0..1 + rnd(40) {
                    let i = pkts.len();
                    pkts.push((frame(len, i as u8), len as u32 + rnd(2) as u32, tag));
                }
            }
            let snaplen = [64u32, 66, 262_144][rnd(3) as usize];
            let opts = InPlace { snaplen, ..OPTS };
            let need: usize = 48
                + pkts
                    .iter()
                    .map(|p| (mac + p.0.len()).div_ceil(8) * 8)
                    .sum::<usize>();
            let mut b = kernel_block((need + 64).div_ceil(PAGE) * PAGE, mac, &pkts);
            if rnd(3) == 0 {
                for _ in 0..1 + rnd(3) {
                    let at = rnd(b.len() as u64) as usize;
                    b[at] = rnd(256) as u8;
                }
            }
            let mut reference = b.clone();
            let want = convert(&mut reference, &opts, false);
            let got = convert(&mut b, &opts, true);
            assert_eq!(got, want, "round {round}");
            assert!(b == reference, "round {round}: blocks differ");
            assert_eq!(
                epbs(&b[..got.len]).len() as u64,
                got.packets,
                "round {round}"
            );
            run_packets += got.packets;
        }
        assert!(run_packets > 100_000, "{run_packets}");
    }

    #[test]
    fn bad_layouts_are_cut_not_followed() {
        let pkts: Vec<_> = (0..5).map(|i| (frame(200, i), 200u32, None)).collect();
        let good = kernel_block(1 << 14, 84, &pkts);
        // A next offset pointing past the block, or backwards; a snap
        // length past the end; a tp_mac of 0; more packets than there are.
        let mut cases = Vec::new();
        let second = 48 + (84 + 200usize).div_ceil(8) * 8;
        let mut b = good.clone();
        put32(&mut b, second + NEXT_OFFSET, 1 << 30);
        cases.push((b, 2));
        let mut b = good.clone();
        put32(&mut b, second + SNAPLEN, 1 << 20);
        cases.push((b, 1));
        let mut b = good.clone();
        b[second + MAC..second + MAC + 2].copy_from_slice(&0u16.to_ne_bytes());
        cases.push((b, 1));
        let mut b = good.clone();
        put32(&mut b, BLOCK_NUM_PKTS, 1000);
        cases.push((b, 5));
        let mut b = good.clone();
        put32(&mut b, BLOCK_FIRST_PKT, 1 << 20);
        cases.push((b, 0));
        for (i, (mut b, want)) in cases.into_iter().enumerate() {
            let c = to_pcapng(&mut b, &OPTS);
            assert_eq!(c.packets, want, "case {i}");
            if want > 0 {
                assert_eq!(epbs(&b[..c.len]).len(), want as usize);
            } else {
                assert_eq!(c.len, 0);
            }
        }
        // Tiny and empty blocks.
        assert_eq!(to_pcapng(&mut [0u8; 10], &OPTS), Converted::default());
        let mut empty = kernel_block(PAGE, 84, &[]);
        assert_eq!(to_pcapng(&mut empty, &OPTS).len, 0);
    }
}
