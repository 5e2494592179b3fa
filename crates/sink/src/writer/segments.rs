//! Writing batches and ring blocks: segments of whole units, room made on a
//! full disk (retention), salvage after a failed write.

use super::*;

impl Writer {
    /// Takes the registered ring memory the engine offered, for this file
    /// and the next.
    pub(super) fn take_fixed(&mut self) {
        let offer = self
            .shared
            .fixed_offer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(f) = offer {
            let f = Arc::new(Mutex::new(f));
            if let Some(cur) = self.current.as_mut() {
                cur.out.use_fixed(f.clone());
            }
            self.fixed = Some(f);
        }
    }

    /// Writes a ring block turned into pcapng in place. When all of it goes
    /// into the current file it is written from the ring memory as it is
    /// (after a padding block, if the file does not end at a page boundary:
    /// ISBs, or the part of a block split by rotation, leave it elsewhere);
    /// a block split by rotation is written part by part through the
    /// output's copy path. The block goes back to the kernel when `ring` is
    /// dropped, after the write.
    pub(super) fn handle_ring(&mut self, ring: RingWrite) {
        if self.fixed.is_none() {
            self.take_fixed();
        }
        let interface = ring.interface;
        if self.failed || self.cfg.plan == OutputPlan::Discard {
            if self.failed {
                self.board.add_write_failed(interface, ring.packets);
            } else {
                self.board
                    .add_written(interface, ring.packets, ring.len as u64);
            }
            return;
        }
        let bytes = &ring.block.bytes()[..ring.len.min(ring.block.bytes().len())];
        let mut off = 0;
        let mut left = ring.packets;
        while off < bytes.len() {
            if self.failed {
                self.board.add_write_failed(interface, left);
                break;
            }
            if self.current.is_none() {
                let ts = first_packet_ts(bytes, off).unwrap_or(ring.first_ts);
                if let Err(e) = self.open(ts) {
                    self.fail(WriteFailure::io("opening the next output file", &e));
                    self.board.add_write_failed(interface, left);
                    break;
                }
            }
            let (end, n) = self.segment(bytes, off, left, ring.last_ts, false);
            if end == off {
                if let Err(e) = self.close() {
                    self.fail(WriteFailure::other(format!("rotating: {e}")));
                }
                continue;
            }
            let whole = off == 0 && end == bytes.len();
            let mut padded = 0u64;
            let r = self.with_room(|f| {
                let before = f.out.len();
                let pad = pcapng::pad_to(before, crate::batch::ALIGN as u64);
                padded = pad.len() as u64;
                let r = if !whole {
                    f.out.write(&bytes[off..end])
                } else if pad.is_empty() {
                    f.out.write_pages(bytes)
                } else {
                    f.out.write(&pad).and_then(|()| f.out.write_pages(bytes))
                };
                r.inspect_err(|_| {
                    let _ = f.out.truncate(before);
                })
            });
            if let Err(e) = r {
                let name = self
                    .current
                    .as_ref()
                    .map(|f| display(&f.final_path))
                    .unwrap_or_default();
                let (why, kept) = if is_disk_full(&e) {
                    // As the copy path: what fits of the block is kept,
                    // packet by packet.
                    let (kept, kept_bytes) = self.salvage(bytes, off, end, false);
                    self.board.add_written(interface, kept, kept_bytes);
                    (disk_full(name, &e), kept)
                } else {
                    (
                        WriteFailure::other(format!(
                            "writing {name}: {e}; the file was closed valid"
                        )),
                        0,
                    )
                };
                self.fail(why);
                self.board.add_write_failed(interface, left - kept);
                self.close_after_failure(interface);
                break;
            }
            if let Some(f) = self.current.as_mut() {
                f.packets += n;
            }
            if whole && padded > 0 {
                self.board
                    .overhead_bytes
                    .fetch_add(padded, Ordering::Relaxed);
            }
            self.board.add_written(interface, n, (end - off) as u64);
            off = end;
            left -= n;
        }
        drop(ring);
    }

    /// How much of `bytes[off..]` (`coded`: compressed blocks, see
    /// [`Batch::coded`]) goes into the current file: (end offset, packets).
    pub(super) fn segment(
        &self,
        bytes: &[u8],
        off: usize,
        left: u64,
        last_ts: u64,
        coded: bool,
    ) -> (usize, u64) {
        let Some(f) = self.current.as_ref() else {
            return (off, 0);
        };
        let r = self.cfg.rotation;
        let size = f.out.len();
        let need_walk = r.packets.is_some_and(|m| f.packets + left > m)
            || r.bytes
                .is_some_and(|m| size + (bytes.len() - off) as u64 > m)
            || f.boundary_ns.is_some_and(|b| last_ts >= b);
        if !need_walk {
            return (bytes.len(), left);
        }
        let mut p = off;
        let mut n = 0u64;
        while p < bytes.len() {
            let Some((rl, ts, k)) = unit_at(self.cfg.format, coded, bytes, p) else {
                // Never for what the encoder or the converter made; should
                // it happen, what cannot be walked goes out whole rather
                // than opening file after file.
                if p == off {
                    return (bytes.len(), left);
                }
                break;
            };
            if let Some(ts) = ts {
                let first = f.packets + n == 0;
                if !first
                    && (r.packets.is_some_and(|m| f.packets + n >= m)
                        || r.bytes.is_some_and(|m| size + (p - off + rl) as u64 > m)
                        || f.boundary_ns.is_some_and(|b| ts >= b))
                {
                    break;
                }
                n += k;
            }
            p += rl;
        }
        (p, n)
    }

    /// Runs `op` on the open file; when the disk is full and retention is
    /// on, deletes the oldest completed file and tries again.
    pub(super) fn with_room(
        &mut self,
        mut op: impl FnMut(&mut OpenFile) -> io::Result<()>,
    ) -> io::Result<()> {
        loop {
            let Some(f) = self.current.as_mut() else {
                return Ok(());
            };
            match op(f) {
                Ok(()) => return Ok(()),
                Err(e) if is_disk_full(&e) && self.make_room() => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes data bytes `from..to` of a batch. On failure nothing of the
    /// segment is left half-written; on a full disk as many whole records as
    /// fit are kept. Returns, on failure, the message and the records (and
    /// bytes) of the segment that were kept.
    pub(super) fn write_segment(
        &mut self,
        batch: &mut Batch,
        from: usize,
        to: usize,
    ) -> Result<u64, (WriteFailure, u64, u64)> {
        let mut wrote = (to - from) as u64;
        let r = if let (Some(enc), false) = (self.zenc.as_mut(), batch.coded) {
            let mut z = std::mem::take(&mut self.zbuf);
            z.clear();
            compress_records(
                enc,
                self.cfg.format,
                batch.bytes(),
                from,
                to,
                usize::MAX,
                &mut z,
            );
            wrote = z.len() as u64;
            let r = self.with_room(|f| {
                let before = f.out.len();
                f.out.write(&z).inspect_err(|_| {
                    let _ = f.out.truncate(before);
                })
            });
            self.zbuf = z;
            r
        } else {
            self.with_room(|f| {
                let before = f.out.len();
                f.out.write_batch(batch, from, to).inspect_err(|_| {
                    // Never leave half a record: cut back to the last whole one.
                    let _ = f.out.truncate(before);
                })
            })
        };
        let Err(e) = r else { return Ok(wrote) };
        let name = self
            .current
            .as_ref()
            .map(|f| display(&f.final_path))
            .unwrap_or_default();
        if !is_disk_full(&e) {
            return Err((
                WriteFailure::other(format!("writing {name}: {e}; the file was closed valid")),
                0,
                0,
            ));
        }
        let (kept, kept_bytes) = self.salvage(batch.bytes(), from, to, batch.coded);
        Err((disk_full(name, &e), kept, kept_bytes))
    }

    /// After a full disk: writes the segment's records in small groups, each
    /// forced to the file, until one does not fit; keeps those that did.
    pub(super) fn salvage(
        &mut self,
        bytes: &[u8],
        from: usize,
        to: usize,
        coded: bool,
    ) -> (u64, u64) {
        let format = self.cfg.format;
        let Some(f) = self.current.as_mut() else {
            return (0, 0);
        };
        let start = f.out.len();
        let mut good = (start, 0u64);
        let mut n = 0u64;
        let mut p = from;
        let mut z = Vec::new();
        while p < to {
            let Some((len, _, k)) = unit_at(format, coded, bytes, p) else {
                break;
            };
            let written = if let (Some(enc), false) = (self.zenc.as_mut(), coded) {
                // A block per record: each write leaves a whole file.
                z.clear();
                compress_records(enc, format, bytes, p, p + len, 1, &mut z);
                f.out.write(&z)
            } else {
                f.out.write(&bytes[p..p + len])
            };
            if written.is_err() {
                break;
            }
            n += k;
            p += len;
            if f.out.len() - good.0 >= 16 << 10 || p >= to {
                if f.out.tick().is_err() {
                    break;
                }
                good = (f.out.len(), n);
            }
        }
        let _ = f.out.truncate(good.0);
        f.packets += good.1;
        (good.1, good.0 - start)
    }

    /// Closes the current file after a write failure: if even that fails, the
    /// file is cut at its last complete record before it is published, and
    /// packets counted as written that are not in it are moved to the
    /// writer's drops.
    pub(super) fn close_after_failure(&mut self, interface: usize) {
        let Some(f) = self.current.as_ref() else {
            return;
        };
        let claimed = f.packets;
        let partial = f.partial_path.clone();
        if self.close().is_err() {
            if let Some(p) = partial
                .as_ref()
                .and_then(|p| files::final_path_of_partial(p))
                .or(partial)
            {
                if let Ok(rep) = ringcap_format::repair::check(&p) {
                    if rep.packets < claimed {
                        self.board.unwrite(interface, claimed - rep.packets);
                    }
                }
            }
        }
    }

    /// Deletes the oldest completed file of a series to make room; true if one went.
    pub(super) fn make_room(&mut self) -> bool {
        let OutputPlan::Series { dir, template } = &self.cfg.plan else {
            return false;
        };
        if !self.cfg.retention.any() {
            return false;
        }
        let files = files::completed_files(dir, template);
        let Some((oldest, _)) = files.first() else {
            return false;
        };
        if crate::files::remove_completed(oldest, &self.cfg.retention).is_ok() {
            self.log(format!(
                "deleted {} to make room (disk full)",
                oldest.display()
            ));
            if let Some(h) = &self.cfg.files {
                h.0.removed(oldest);
            }
            true
        } else {
            false
        }
    }
}

/// The failure of a write that found the disk full.
fn disk_full(file: String, e: &io::Error) -> WriteFailure {
    SinkReason::DiskFull {
        file,
        error: e.to_string(),
    }
    .into()
}
