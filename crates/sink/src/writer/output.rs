//! Files: the header of a new file, opening (hidden name, then published),
//! interface statistics blocks, closing and publishing with retention.

use super::*;

impl Writer {
    pub(super) fn header_bytes(&self) -> Vec<u8> {
        if let (true, RecordFormat::Pcap(res)) = (self.cfg.compress, self.cfg.format) {
            let i = &self.cfg.interfaces[0];
            return ringcap_compress::FileHeader {
                version: ringcap_compress::VERSION,
                resolution: match res {
                    ringcap_format::TsResolution::Micro => ringcap_compress::Resolution::Micro,
                    ringcap_format::TsResolution::Nano => ringcap_compress::Resolution::Nano,
                },
                linktype: i.linktype,
                snaplen: self
                    .cfg
                    .interfaces
                    .iter()
                    .map(|i| i.snaplen)
                    .max()
                    .unwrap_or(i.snaplen),
            }
            .to_bytes()
            .to_vec();
        }
        match self.cfg.format {
            RecordFormat::Pcap(res) => {
                let i = &self.cfg.interfaces[0];
                let snap = self
                    .cfg
                    .interfaces
                    .iter()
                    .map(|i| i.snaplen)
                    .max()
                    .unwrap_or(i.snaplen);
                pcap::file_header(i.linktype, snap, res).to_vec()
            }
            RecordFormat::Pcapng => {
                let mut v = pcapng::section_header(
                    &os_name(),
                    &format!("ringcap {}", env!("CARGO_PKG_VERSION")),
                    Some(&self.cfg.comment),
                );
                for i in &self.cfg.interfaces {
                    v.extend_from_slice(&pcapng::interface_description(
                        &pcapng::InterfaceDescription {
                            linktype: i.linktype as u16,
                            snaplen: i.snaplen,
                            name: &i.name,
                            filter: i.filter.as_deref(),
                            description: None,
                        },
                    ));
                }
                v
            }
        }
    }

    pub(super) fn open(&mut self, first_ts: u64) -> io::Result<()> {
        let header = self.header_bytes();
        let (out, final_path, partial_path): (Box<dyn Output>, _, _) = match &self.cfg.plan {
            OutputPlan::Discard => return Ok(()),
            OutputPlan::Stdout => (Box::new(Stream::stdout()?), None, None),
            OutputPlan::Device(p) => (Box::new(Stream::device(p)?), None, None),
            OutputPlan::Single(p) => {
                let (out, partial) = self.create(p)?;
                (out, Some(p.clone()), Some(partial))
            }
            OutputPlan::Series { dir, template } => {
                // Another writer in the same directory (a second capture,
                // two ringcapd dumps of one user started in the same
                // second) may hold this name, or have published it: the
                // next number is taken, as the name's partial file is
                // created exclusively. One writer's numbers never meet.
                let time = UNIX_EPOCH + Duration::from_nanos(first_ts);
                let mut tries = 0;
                loop {
                    self.seq += 1;
                    let p = dir.join(files::expand_template(template, time, self.seq));
                    match self.create(&p) {
                        Ok((out, partial)) => break (out, Some(p), Some(partial)),
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 1000 => {
                            tries += 1;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        };
        let anchor = *self.anchor_ns.get_or_insert(first_ts);
        let period = self.cfg.rotation.seconds.filter(|s| *s > 0).map(|s| {
            let s = s * 1_000_000_000;
            let ts = first_ts.max(anchor);
            anchor + ((ts - anchor) / s + 1) * s
        });
        // A rotation asked for before this file's first packet was written
        // ends it at the request if the packet came before (see
        // `rotate_pending_ns`); a file that starts after it is the new one.
        let asked = self.rotate_pending_ns.take().filter(|t| first_ts < *t);
        let boundary_ns = match (period, asked) {
            (Some(p), Some(a)) => Some(p.min(a)),
            (p, a) => p.or(a),
        };
        let mut f = OpenFile {
            out,
            final_path,
            partial_path,
            packets: 0,
            boundary_ns,
            started_ns: first_ts,
            flushed_len: 0,
        };
        f.out.write(&header)?;
        self.board
            .overhead_bytes
            .fetch_add(header.len() as u64, Ordering::Relaxed);
        if let Ok(mut c) = self.shared.current.lock() {
            *c = f.final_path.as_ref().map(|p| p.display().to_string());
        }
        self.current = Some(f);
        self.last_isb = Instant::now();
        Ok(())
    }

    pub(super) fn create(&self, final_path: &Path) -> io::Result<(Box<dyn Output>, PathBuf)> {
        files::check_target(final_path, self.cfg.overwrite)?;
        let partial = files::partial_path(final_path);
        let direct = self.cfg.mode != WriteMode::Buffered;
        let file = match files::create_exclusive(&partial, self.cfg.file_mode, direct) {
            Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                // The filesystem has no O_DIRECT (tmpfs): fall back, say so once.
                self.log(format!(
                    "{}: no O_DIRECT on this filesystem; writing buffered",
                    partial.display()
                ));
                let f = files::create_exclusive(&partial, self.cfg.file_mode, false)?;
                return Ok((
                    self.tapped(Box::new(BufferedFile::new(f)), final_path),
                    partial,
                ));
            }
            r => r.map_err(|e| {
                io::Error::new(e.kind(), format!("creating {}: {e}", partial.display()))
            })?,
        };
        if let Some((uid, gid)) = self.cfg.owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
        }
        let mut out: Box<dyn Output> = match self.cfg.mode {
            WriteMode::Buffered => Box::new(BufferedFile::new(file)),
            WriteMode::Direct => Box::new(DirectFile::new(file)),
            WriteMode::Uring => match file.try_clone().and_then(DirectFile::with_uring) {
                Ok(d) => Box::new(d),
                Err(e) => {
                    self.log(format!(
                        "{}: io_uring is not available ({e}); writing with one O_DIRECT write at a time instead",
                        partial.display()
                    ));
                    Box::new(DirectFile::new(file))
                }
            },
        };
        if let Some(f) = &self.fixed {
            out.use_fixed(f.clone());
        }
        Ok((self.tapped(out, final_path), partial))
    }

    /// `out`, seen by the file observer's tap if it has one for the file.
    /// Compressed files are not tapped: a tap reads pcap or pcapng.
    fn tapped(&self, out: Box<dyn Output>, final_path: &Path) -> Box<dyn Output> {
        let tap = (!self.cfg.compress)
            .then(|| self.cfg.files.as_ref().and_then(|h| h.0.tap(final_path)))
            .flatten();
        match tap {
            Some(tap) => Box::new(crate::file_observer::Tapped { inner: out, tap }),
            None => out,
        }
    }

    pub(super) fn write_isbs(&mut self) -> io::Result<()> {
        let Some(started_ns) = self.current.as_ref().map(|f| f.started_ns) else {
            return Ok(());
        };
        let now = now_ns();
        let mut bytes = Vec::new();
        for (i, iface) in self.cfg.interfaces.iter().enumerate() {
            let Some(entry) = iface.stats else {
                continue;
            };
            let c = self.board.interface(entry);
            bytes.extend_from_slice(&pcapng::interface_statistics(
                &pcapng::InterfaceStatistics {
                    interface_id: i as u32,
                    ts_ns: now,
                    starttime_ns: Some(started_ns),
                    endtime_ns: Some(now),
                    ifrecv: Some(c.packets_seen_by_interface),
                    ifdrop: Some(c.packets_dropped_by_interface),
                    filteraccept: Some(c.packets_filter_accepted),
                    osdrop: Some(c.packets_dropped_ring),
                    usrdeliv: Some(c.packets_delivered),
                    comment: Some(format!(
                        "written {} dropped_writer {} sampled_out {}",
                        c.packets_written, c.packets_dropped_writer, c.packets_sampled_out
                    )),
                },
            ));
        }
        self.with_room(|f| {
            let before = f.out.len();
            f.out.write(&bytes).inspect_err(|_| {
                let _ = f.out.truncate(before);
            })
        })?;
        self.board
            .overhead_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Completes the current file: statistics, sync, rename, post-rotate,
    /// retention. The file is published valid even when this fails: whatever
    /// did not reach it is cut at its last complete record first.
    pub(super) fn close(&mut self) -> io::Result<()> {
        let mut result = Ok(());
        if self.cfg.format == RecordFormat::Pcapng && self.current.is_some() {
            result = self.write_isbs();
        }
        let finished = self.with_room(|f| f.out.finish());
        if result.is_ok() {
            result = finished;
        }
        let Some(f) = self.current.take() else {
            return result;
        };
        drop(f.out);
        let (Some(partial), Some(final_path)) = (f.partial_path, f.final_path) else {
            return result;
        };
        if result.is_err() {
            if let Err(e) = ringcap_format::repair::repair(&partial) {
                self.log(format!(
                    "could not cut {} at its last complete record: {e}",
                    partial.display()
                ));
            }
        }
        std::fs::rename(&partial, &final_path)?;
        let dir = final_path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        if let Ok(mut c) = self.shared.completed.lock() {
            c.push(final_path.clone());
        }
        self.notify();
        if let Some(h) = &self.cfg.files {
            h.0.published(&final_path);
        }
        if let Some(cmd) = &self.cfg.post_rotate {
            run_post_rotate(cmd, &final_path);
        }
        if let OutputPlan::Series { dir, template } = &self.cfg.plan {
            for gone in files::enforce_retention(dir, template, &self.cfg.retention, 0) {
                self.log(format!("retention: deleted {}", gone.display()));
                if let Some(h) = &self.cfg.files {
                    h.0.removed(&gone);
                }
            }
        }
        result
    }
}
