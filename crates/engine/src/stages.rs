//! The stages a capture thread runs in user space on each packet a source
//! hands over, in the order of the capture path: filter (where the kernel did
//! not already run it), sample (what the kernel could not), the `-c` count,
//! truncate (exact header lengths, VLAN tags put back), encode into the
//! sink's batch, then the transform chain on the encoded bytes in place.
//!
//! Between the cut and the encoding sits the observer slot ([`Observer`]):
//! a stage that looks at every kept packet (a flow table, an index) without
//! changing it. It is one direct call per packet on the capture thread, with
//! no lock; the thread owns its observer, so an observer keeps per-thread
//! state and hands results elsewhere itself.

use crate::source::{Flow, Packet};
use ringcap_format::record::{Endian, Header, Record, HEADER_LEN};
use ringcap_format::TsResolution;
use ringcap_sink::encode::copy_with_tag;
use ringcap_sink::PacketSink;
use ringcap_stages::session::SessionFilter;
use ringcap_stages::transform::{apply_all, prepare_all};
use ringcap_stages::{CheckedProgram, Snap, Transform, UserSampler};
use ringcap_stats::CaptureCounts;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A stage that sees each kept packet after filter, sampling, `-c` and the
/// snap length, before encoding, and cannot change it. One per capture
/// thread, owned by it (see [`ObserverFactory`]).
pub trait Observer: Send {
    /// One kept packet: `data` is what the record keeps of it (cut to the
    /// snap length; without the VLAN tag the kernel took out, which is in
    /// `vlan`), `wire_len` its length on the wire (tag included),
    /// `ts_ns` its time (ns since the epoch), `linktype` its link type.
    fn packet(
        &mut self,
        data: &[u8],
        vlan: Option<[u8; 4]>,
        wire_len: u32,
        ts_ns: u64,
        linktype: u32,
    );
    /// Called between batches at most every few hundred milliseconds while
    /// packets come, and when the thread runs out of them: time-driven work
    /// (live captures).
    fn idle(&mut self) {}
    /// The longest the thread may sleep without calling [`idle`](Self::idle)
    /// (`None`: until packets come).
    fn wake_within(&self) -> Option<Duration> {
        None
    }
    /// The capture thread's source has ended (the last file, or the capture
    /// stopped): whatever is held is handed on now.
    fn finish(&mut self) {}
}

/// Where a capture thread's observer comes from.
#[derive(Debug, Clone, Copy)]
pub struct ObserverContext {
    /// Live packets (time goes on without them) rather than files (time is
    /// the packets' own).
    pub live: bool,
    /// The capture's interface (board entry) and thread on it.
    pub interface: usize,
    /// Thread number on that interface.
    pub thread: usize,
}

/// Makes one [`Observer`] per capture thread.
pub type ObserverFactory = Arc<dyn Fn(ObserverContext) -> Box<dyn Observer> + Send + Sync>;

/// The empty observer: [`Stages::handle`] runs with it, at no cost.
struct NoObserver;

impl Observer for NoObserver {
    #[inline(always)]
    fn packet(&mut self, _: &[u8], _: Option<[u8; 4]>, _: u32, _: u64, _: u32) {}
}

/// One capture thread's stages.
pub struct Stages {
    /// User-space filter per source interface (files); `None` when the
    /// kernel already filtered (live).
    pub filters: Option<Vec<CheckedProgram>>,
    /// Sampling left to user space.
    pub sampler: UserSampler,
    /// Truncation.
    pub snap: Snap,
    /// Frames longer than this were merged by a receive offload.
    pub max_frame_len: u32,
    /// In-place rewrites of kept packets.
    pub transforms: Vec<Box<dyn Transform>>,
    /// Link type per source interface (for transforms).
    pub linktypes: Vec<u32>,
    /// Packets still to keep with `-c`, shared by the capture's threads.
    pub budget: Option<Arc<AtomicU64>>,
    /// Output interface id of source interface 0 when a source has several
    /// (files); `None` when the encoder's id is fixed.
    pub interface_base: Option<u32>,
    /// Source interface of the last packet (files).
    pub current_interface: usize,
    /// A daemon session whose client judges packets as delivered (its
    /// grant hides fields): see [`Stages::with_client_after`].
    pub client_after: Option<ClientAfter>,
}

/// The client's program of a session that runs after the transforms
/// (`SessionFilter::client_after`), with the room its check needs.
pub struct ClientAfter {
    filter: SessionFilter,
    /// The record being made (cut, tag put back, transformed).
    record: Vec<u8>,
    /// The same without the tag, for a program made for the kernel's view.
    untagged: Vec<u8>,
}

impl Stages {
    /// The stages every capture has: `sampler`, the snap length, the
    /// interface's longest frame, the transforms and the link type of each
    /// source interface. No user-space filter, `-c` count or interface
    /// switching until the `with_*` calls below add them: this is the one
    /// place a capture thread's or a daemon session's stages are made.
    pub fn new(
        sampler: UserSampler,
        snap: Snap,
        max_frame_len: u32,
        transforms: Vec<Box<dyn Transform>>,
        linktypes: Vec<u32>,
    ) -> Stages {
        Stages {
            filters: None,
            sampler,
            snap,
            max_frame_len,
            transforms,
            linktypes,
            budget: None,
            interface_base: None,
            current_interface: 0,
            client_after: None,
        }
    }

    /// A daemon session's filter whose client's program judges packets as
    /// delivered (`SessionFilter::client_after`): each packet is cut, its
    /// tag put back and transformed before the program runs, and kept only
    /// if it accepts. None for any other filter.
    pub fn with_client_after(mut self, filter: &SessionFilter) -> Stages {
        self.client_after = filter.client_after.then(|| ClientAfter {
            filter: filter.clone(),
            record: Vec::new(),
            untagged: Vec::new(),
        });
        self
    }

    /// The filters run in user space, one per source interface (files and
    /// hooks; live captures filter in the kernel).
    pub fn with_filters(mut self, filters: Option<Vec<CheckedProgram>>) -> Stages {
        self.filters = filters;
        self
    }

    /// The `-c` budget, shared by the capture's threads.
    pub fn with_budget(mut self, budget: Option<Arc<AtomicU64>>) -> Stages {
        self.budget = budget;
        self
    }

    /// Output interface id of source interface 0 when a source has several.
    pub fn with_interface_base(mut self, base: Option<u32>) -> Stages {
        self.interface_base = base;
        self
    }

    /// True when the `-c` count has been reached.
    pub fn count_reached(&self) -> bool {
        self.budget
            .as_ref()
            .is_some_and(|b| b.load(Ordering::Relaxed) == 0)
    }

    /// True when nothing but the snap length acts on single packets (no
    /// user-space filter, sampling, `-c` count, transforms or interface
    /// switching): then each packet a filter passes is kept as
    /// [`record`](Self::record) writes it, and the records of many packets
    /// can go to a sink at once with [`kept`](Self::kept) counting them.
    pub fn per_packet_free(&self) -> bool {
        self.filters.is_none()
            && self.sampler.keeps_all()
            && self.budget.is_none()
            && self.transforms.is_empty()
            && self.interface_base.is_none()
            && self.client_after.is_none()
    }

    /// Appends `p`'s ring record (see `ringcap_format::record`), cut to the
    /// snap length, to `out`: the bytes `write_ring_record` makes, appended
    /// piece by piece rather than written into room zero-filled first (the
    /// hub makes every kept packet's record here; the zero-fill cost a tenth
    /// of its time).
    #[inline]
    pub fn record(&self, p: &Packet<'_>, out: &mut Vec<u8>) {
        let tag_len = if p.vlan.is_some() { 4 } else { 0 };
        let caplen = self.caplen(p);
        let at = out.len();
        let mut head = [0u8; HEADER_LEN];
        Header::new(
            p.ts_ns,
            caplen as u32,
            p.wire_len + tag_len as u32,
            TsResolution::Nano,
        )
        .write(&mut head, Endian::Little);
        out.extend_from_slice(&head);
        // As `copy_with_tag`: the tag goes back after the MAC addresses.
        match p.vlan {
            Some(tag) if p.data.len() >= 12 && caplen >= 12 => {
                out.extend_from_slice(&p.data[..12]);
                let tag_len = (caplen - 12).min(4);
                out.extend_from_slice(&tag[..tag_len]);
                let rest = (caplen - 12 - tag_len).min(p.data.len() - 12);
                out.extend_from_slice(&p.data[12..12 + rest]);
            }
            _ => out.extend_from_slice(&p.data[..caplen.min(p.data.len())]),
        }
        // Bytes the packet does not have are zeros (as `copy_with_tag`; a
        // snap length never asks for more than the packet has).
        out.resize(at + HEADER_LEN + caplen, 0);
    }

    /// The length of `p`'s record as [`record`](Self::record) makes it.
    #[inline]
    pub fn record_len(&self, p: &Packet<'_>) -> usize {
        HEADER_LEN + self.caplen(p)
    }

    /// Bytes of `p` its record keeps (its snap length; a byte count is cut
    /// here, without a call into the stages crate per packet).
    #[inline(always)]
    fn caplen(&self, p: &Packet<'_>) -> usize {
        let tag_len = if p.vlan.is_some() { 4 } else { 0 };
        match self.snap {
            Snap::Bytes(n) => (p.data.len() + tag_len).min(n as usize),
            snap => snap.keep_len(p.data, tag_len),
        }
    }

    /// Writes `p`'s record, exactly as [`record`](Self::record) makes it,
    /// at the start of `out`, which has at least
    /// [`record_len`](Self::record_len) bytes (else this panics); returns
    /// its length.
    #[inline]
    pub fn record_into(&self, p: &Packet<'_>, out: &mut [u8]) -> usize {
        let tag_len = if p.vlan.is_some() { 4 } else { 0 };
        let caplen = self.caplen(p);
        let len = HEADER_LEN + caplen;
        let out = &mut out[..len];
        let (head, body) = out.split_at_mut(HEADER_LEN);
        Header::new(
            p.ts_ns,
            caplen as u32,
            p.wire_len + tag_len as u32,
            TsResolution::Nano,
        )
        .write(head, Endian::Little);
        if p.vlan.is_none() && caplen <= p.data.len() {
            // Most packets: one copy.
            body.copy_from_slice(&p.data[..caplen]);
            return len;
        }
        // As `record`: the tag goes back after the MAC addresses, and bytes
        // the packet does not have are zeros.
        let mut at = 0;
        let mut put = |b: &[u8]| {
            let n = b.len().min(caplen - at);
            body[at..at + n].copy_from_slice(&b[..n]);
            at += n;
        };
        match p.vlan {
            Some(tag) if p.data.len() >= 12 && caplen >= 12 => {
                put(&p.data[..12]);
                put(&tag);
                put(&p.data[12..]);
            }
            _ => put(p.data),
        }
        if at < caplen {
            body[at..].fill(0);
        }
        len
    }

    /// Counts `p` as kept, as [`handle`](Self::handle) does.
    #[inline]
    pub fn kept(&self, p: &Packet<'_>, counts: &mut CaptureCounts) {
        let tag_len = if p.vlan.is_some() { 4 } else { 0 };
        if p.wire_len > self.max_frame_len {
            counts.merged_by_offload += 1;
        }
        counts.delivered += 1;
        counts.bytes_on_wire += u64::from(p.wire_len + tag_len);
    }

    /// Runs the stages on one packet.
    #[inline]
    pub fn handle<K: PacketSink>(
        &mut self,
        p: Packet<'_>,
        encoder: &mut K,
        counts: &mut CaptureCounts,
    ) -> Flow {
        self.handle_observed(p, encoder, counts, &mut NoObserver)
    }

    /// [`handle`](Self::handle), with `observer` shown each kept packet
    /// before it is encoded.
    #[inline]
    pub fn handle_observed<K: PacketSink, O: Observer + ?Sized>(
        &mut self,
        p: Packet<'_>,
        encoder: &mut K,
        counts: &mut CaptureCounts,
        observer: &mut O,
    ) -> Flow {
        if !p.ahead.is_empty() && !self.transforms.is_empty() {
            let linktype = self.linktypes.get(p.interface).copied().unwrap_or(1);
            prepare_all(&mut self.transforms, linktype, p.ahead);
        }
        if let Some(filters) = &self.filters {
            // Source interface indexes come from the source, which only hands
            // over packets of interfaces it described; the fallback keeps a
            // bad index from panicking.
            let Some(program) = filters.get(p.interface).or(filters.last()) else {
                return Flow::Continue;
            };
            if program.run(p.data, p.wire_len) == 0 {
                return Flow::Continue;
            }
            counts.ring_accepted += 1;
        }
        let tag_len = if p.vlan.is_some() { 4 } else { 0 };
        if p.wire_len > self.max_frame_len {
            counts.merged_by_offload += 1;
        }
        if !self.sampler.keeps_all() && !self.sampler.keep(p.data) {
            counts.sampled_out += 1;
            return Flow::Continue;
        }
        let wire_len = p.wire_len + tag_len as u32;
        let caplen = self.snap.keep_len(p.data, tag_len);
        let linktype = self.linktypes.get(p.interface).copied().unwrap_or(1);
        if let Some(ca) = &mut self.client_after {
            // The client judges the packet as it will be delivered: its
            // record is made and transformed first, and it goes no further
            // (no `-c` count, no counts) unless the client's program accepts
            // it; the filter that passed it counted it accepted.
            ca.record.clear();
            ca.record.resize(caplen, 0);
            copy_with_tag(&mut ca.record, p.data, p.vlan, caplen);
            apply_all(&mut self.transforms, linktype, &mut ca.record, wire_len);
            let tagged = p.vlan.is_some();
            if !ca
                .filter
                .client_accepts_delivered(&ca.record, tagged, wire_len, &mut ca.untagged)
            {
                counts.ring_accepted = counts.ring_accepted.saturating_sub(1);
                return Flow::Continue;
            }
        }
        let mut last = false;
        if let Some(b) = &self.budget {
            // Only with -c: one atomic per packet is fine for bounded captures.
            match b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)) {
                Err(_) => return Flow::Stop,
                Ok(1) => last = true,
                Ok(_) => {}
            }
        }
        if let Some(base) = self.interface_base {
            if p.interface != self.current_interface {
                self.current_interface = p.interface;
                encoder.set_interface_id(base + p.interface as u32);
            }
        }
        counts.delivered += 1;
        counts.bytes_on_wire += u64::from(wire_len);
        // The observer slot: what the record keeps, before encoding.
        let seen = caplen.saturating_sub(tag_len).min(p.data.len());
        observer.packet(&p.data[..seen], p.vlan, wire_len, p.ts_ns, linktype);
        if let Some(ca) = &self.client_after {
            // Made and transformed above.
            encoder.push(Record {
                ts_ns: p.ts_ns,
                wire_len,
                data: &ca.record,
                tag: None,
                caplen: ca.record.len(),
            });
            return if last { Flow::Done } else { Flow::Continue };
        }
        let kept = encoder.push(Record {
            ts_ns: p.ts_ns,
            wire_len,
            data: p.data,
            tag: p.vlan,
            caplen,
        });
        if !self.transforms.is_empty() {
            if let Some(bytes) = kept {
                apply_all(&mut self.transforms, linktype, bytes, wire_len);
            }
        }
        if last {
            Flow::Done
        } else {
            Flow::Continue
        }
    }
}
