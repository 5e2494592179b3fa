//! The fast path of [`to_pcapng`](super::to_pcapng): the loops that convert
//! the common packets (untagged, aligned, within the snap length) with one
//! bounds check each, and the prefetching that keeps them fed. Apart from
//! the general packet-by-packet path (the parent) because it is tuned for
//! speed on its own terms; anything it does not take goes back to the
//! parent untouched ([`Stop::Slow`]).

use ringcap_format::pcapng::{BT_EPB, BT_PAD, EPB_DATA_OFFSET, PAD_MIN};

use super::{put_words, u32_at, zero_tail, InPlace, Progress, Walk, FIRST_EPB_MIN, RESERVE};
use crate::packet::{HEADER_LEN, LEN, MAC, NSEC, SEC, SNAPLEN, STATUS};

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

/// What [`fast_run`] stopped at.
pub(super) enum Stop {
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
pub(super) fn fast_run(
    block: &mut [u8],
    w: &mut Walk,
    opts: &InPlace,
    at: usize,
    next: usize,
) -> Stop {
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
