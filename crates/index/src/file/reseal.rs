//! Checksums recomputed in place, so that tests and the fuzz target can
//! forge files the checksums do not refuse and check the reader's bounds.

use super::exact;
use super::{le_u32, le_u64, Cursor, BLOCK, HEADER_LEN, PAGE, PAGE_FENCE};
use crate::keys::Kind;

/// Recomputes every checksum of an index file's bytes in place, so that a
/// test can forge a file the checksums do not refuse and check that the
/// reader's bounds hold (the checksums guard against damage, the bounds
/// against everything). Stops where the layout cannot be followed; false
/// then. Never panics.
#[doc(hidden)]
pub fn reseal(raw: &mut [u8]) -> bool {
    let Some(end) = raw
        .get(64..72)
        .map(|b| le_u64(b, 0))
        .and_then(|h| h.checked_add(HEADER_LEN as u64))
        .filter(|&e| e.saturating_add(4) <= raw.len() as u64)
        .map(|e| e as usize)
    else {
        return false;
    };
    let crc = crc32fast::hash(&raw[..end]);
    raw[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    let ngroups = le_u32(raw, 28) as usize;
    let (head, rest) = raw.split_at_mut(end + 4);
    let Some(sums) = block_sums(&head[..end], rest, ngroups) else {
        return false;
    };
    for (f, sum) in sums {
        head[f..f + 4].copy_from_slice(&sum.to_le_bytes());
    }
    let crc = crc32fast::hash(&head[..end]);
    head[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    true
}

/// For [`reseal`]: where each fence's checksum is in `head` and what it
/// should be for the blocks in `rest`.
fn block_sums(head: &[u8], rest: &[u8], ngroups: usize) -> Option<Vec<(usize, u32)>> {
    let mut c = Cursor {
        b: head,
        p: HEADER_LEN,
    };
    let nepochs = c.num("").ok()?.min(u32::MAX as u64) as usize;
    for _ in 0..nepochs * 3 + 1 {
        c.num("").ok()?;
    }
    let mut sums = Vec::new();
    let glen = c.num("").ok()?.min(u32::MAX as u64) as usize;
    let npages = ngroups.div_ceil(PAGE);
    let fences = c.take(npages * PAGE_FENCE, "").ok()?;
    let pages = rest.get(..glen)?;
    for p in 0..npages {
        let f = fences.start + p * PAGE_FENCE;
        let from = le_u32(head, f + 32) as usize;
        let to = if p + 1 < npages {
            le_u32(head, f + PAGE_FENCE + 32) as usize
        } else {
            glen
        };
        sums.push((f + 36, crc32fast::hash(pages.get(from..to).unwrap_or(&[]))));
    }
    let nkinds = c.num("").ok()?;
    let mut at = glen;
    for _ in 0..nkinds.min(Kind::ALL.len() as u64) {
        let kind = Kind::from_code(*c.b.get(c.p)?)?;
        c.p += 1;
        let n = c.num("").ok()?.min(u32::MAX as u64) as usize;
        let len = c.num("").ok()?.min(u32::MAX as u64) as usize;
        let w = kind.width();
        let fences = c.take(n.div_ceil(BLOCK) * (w + 8), "").ok()?;
        let section = rest.get(at..at.checked_add(len)?)?;
        let blocks = n.div_ceil(BLOCK);
        for b in 0..blocks {
            let f = fences.start + b * (w + 8);
            let from = le_u32(head, f + w) as usize;
            let to = if b + 1 < blocks {
                le_u32(head, f + w + 8 + w) as usize
            } else {
                len
            };
            let crc = crc32fast::hash(section.get(from..to).unwrap_or(&[]));
            sums.push((f + w + 4, crc));
        }
        at += len;
    }
    let capture_len = le_u64(head, 16);
    sums.extend(exact::sums(&mut c, capture_len, rest.get(at..)?)?);
    Some(sums)
}
