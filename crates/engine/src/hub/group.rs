//! What the hub thread does with each group of packets for one subscriber:
//! its filter on the whole group, then its stages and sink on the packets
//! the filter passed. Public so that a benchmark can run exactly this
//! without a network (`crates/daemon/examples/hub_speed.rs`).
//!
//! A subscriber whose stages keep every packet the filter passes alike
//! (`Stages::per_packet_free`: no sampling, count or transforms) hands its
//! sink whole runs of records at once ([`PacketSink::push_records`]); the
//! records are made once per group for all subscribers with the same snap
//! length, so a dozen clients with different filters cost one record each
//! per packet, not twelve.

use crate::source::live::GROUP;
use crate::source::{Flow, Packet, LOOK_AHEAD};
use crate::stages::Stages;
use ringcap_sink::PacketSink;
use ringcap_stages::bpf::interp::Paths;
use ringcap_stages::{SessionFilter, Snap};
use ringcap_stats::CaptureCounts;

// A group fits in one run of a filter.
const _: () = assert!(GROUP <= ringcap_stages::bpf::interp::LANES);

/// One subscriber's filter, stages, sink and counts.
pub struct Subscriber {
    /// Its filter, run here (not in `stages`): the framework on the frame
    /// as the kernel delivered it (VLAN tag taken out, as a live tcpdump's
    /// filter sees it) unless the framework itself tests `vlan`, the
    /// client's program on the view it asked for, and the `exclude` rule at
    /// every layer (see [`SessionFilter`]).
    filter: SessionFilter,
    /// The paths packets took through the combined program (see
    /// `CheckedProgram::run_group`).
    paths: Paths,
    pub(crate) stages: Stages,
    /// Runs of records go to the sink at once (see the module doc), until
    /// the sink says it takes packets one by one only.
    bulk: bool,
    pub(crate) sink: Box<dyn PacketSink>,
    pub(crate) counts: CaptureCounts,
    /// It has all it asked for (its count), or it was closed.
    pub(crate) done: bool,
}

impl Subscriber {
    /// A subscriber with `filter`, `stages` and `sink`.
    pub fn new(filter: SessionFilter, stages: Stages, sink: Box<dyn PacketSink>) -> Subscriber {
        Subscriber {
            filter,
            paths: Paths::default(),
            bulk: stages.per_packet_free(),
            stages,
            sink,
            counts: CaptureCounts::default(),
            done: false,
        }
    }

    /// Its counts so far.
    pub fn counts(&self) -> &CaptureCounts {
        &self.counts
    }

    /// Its sink.
    pub fn sink(&mut self) -> &mut dyn PacketSink {
        &mut *self.sink
    }

    /// Runs the filter, stages and sink on `group`.
    pub fn take(&mut self, group: &Group<'_, '_>, work: &mut GroupWork) {
        self.take_group(group, work, false)
    }

    /// As [`take`](Self::take), for a group the kernel already ran exactly
    /// this subscriber's filter on (the hub's socket had it alone, see
    /// `hub::kernel`): its filter runs only if some packet of the group is
    /// not whole in the ring (the kernel judged bytes user space lacks).
    pub fn take_passed(&mut self, group: &Group<'_, '_>, work: &mut GroupWork) {
        self.take_group(group, work, true)
    }

    fn take_group(&mut self, group: &Group<'_, '_>, work: &mut GroupWork, passed: bool) {
        if self.done {
            return;
        }
        let n = group.packets.len();
        let mut keep = [0u32; GROUP];
        let f = &self.filter;
        let wants_tags = f.framework_tagged || f.client_tagged;
        if passed && group.whole {
            keep[..n].fill(1);
        } else if group.tagged && wants_tags {
            // Some frame had its VLAN tag taken out and some part of the
            // filter wants it back: packet by packet, each part on its view.
            for (i, p) in group.packets.iter().enumerate() {
                keep[i] = f.run(p.data, retag(&mut work.scratch, p), p.wire_len);
            }
        } else {
            // One view for every part: the combined program on the group.
            f.combined.run_group(
                &mut self.paths,
                &group.data[..n],
                &group.wire_len[..n],
                &mut keep[..n],
            );
            if f.exclude.is_some() {
                for (i, p) in group.packets.iter().enumerate() {
                    if keep[i] == 0 {
                        continue;
                    }
                    if f.excluded(p.data, retag(&mut work.scratch, p)) {
                        keep[i] = 0;
                    }
                }
            }
        }
        let mut from = 0;
        if passed && group.whole && self.bulk {
            // Alone on the socket (see `take_passed`), so nobody else needs
            // this group's records: the sink takes them made in place.
            let stages = &self.stages;
            let len = group.packets.iter().map(|p| stages.record_len(p)).sum();
            let built = self.sink.push_built(len, n as u32, &mut |room: &mut [u8]| {
                let mut at = 0;
                for p in group.packets {
                    at += stages.record_into(p, &mut room[at..]);
                }
            });
            if built {
                self.counts.ring_accepted += n as u64;
                for p in group.packets {
                    self.stages.kept(p, &mut self.counts);
                }
                return;
            }
        }
        if self.bulk {
            let recs = work.records(&self.stages, group);
            let mut i = 0;
            while i < n {
                if keep[i] == 0 {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < n && keep[i] != 0 {
                    i += 1;
                }
                let bytes = &recs.bytes[recs.ends[start]..recs.ends[i]];
                if !self.sink.push_records(bytes, (i - start) as u32) {
                    // This sink keeps packets one by one: from here on too.
                    self.bulk = false;
                    from = start;
                    break;
                }
                self.counts.ring_accepted += (i - start) as u64;
                for p in &group.packets[start..i] {
                    self.stages.kept(p, &mut self.counts);
                }
            }
            if self.bulk {
                return;
            }
        }
        for (i, (p, &k)) in group.packets[from..].iter().zip(&keep[from..n]).enumerate() {
            if k == 0 {
                continue;
            }
            self.counts.ring_accepted += 1;
            let mut p = *p;
            // The transforms' look-ahead hint, from the same group.
            if let Some(a) = group.packets.get(from + i + LOOK_AHEAD) {
                p.ahead = a.data;
            }
            if self.stages.handle(p, &mut self.sink, &mut self.counts) != Flow::Continue {
                self.done = true;
                self.sink.flush();
                break;
            }
        }
    }
}

/// The frame with the VLAN tag the kernel took out put back, in `scratch`
/// (reused from packet to packet); None when it had no tag.
fn retag<'s>(scratch: &'s mut Vec<u8>, p: &Packet<'_>) -> Option<&'s [u8]> {
    let tag = p.vlan.filter(|_| p.data.len() >= 12)?;
    scratch.resize(p.data.len() + 4, 0);
    crate::copy_with_tag(scratch, p.data, Some(tag), p.data.len() + 4);
    Some(scratch)
}

/// A group of at most [`GROUP`] packets, with what every subscriber's filter
/// needs of it made once.
pub struct Group<'g, 'p> {
    packets: &'g [Packet<'p>],
    data: [&'p [u8]; GROUP],
    wire_len: [u32; GROUP],
    /// Some packet has a VLAN tag the kernel took out.
    tagged: bool,
    /// Every packet is whole in the ring (nothing cut by the ring's snap
    /// length or block size).
    whole: bool,
}

impl<'g, 'p> Group<'g, 'p> {
    /// The first [`GROUP`] of `packets`.
    pub fn new(packets: &'g [Packet<'p>]) -> Group<'g, 'p> {
        let packets = &packets[..packets.len().min(GROUP)];
        let mut data: [&'p [u8]; GROUP] = [&[]; GROUP];
        let mut wire_len = [0u32; GROUP];
        let mut tagged = false;
        let mut whole = true;
        for (i, p) in packets.iter().enumerate() {
            data[i] = p.data;
            wire_len[i] = p.wire_len;
            tagged |= p.vlan.is_some();
            whole &= p.data.len() as u64 == u64::from(p.wire_len);
        }
        Group {
            packets,
            data,
            wire_len,
            tagged,
            whole,
        }
    }
}

/// The hub thread's working memory for groups, kept from one to the next.
#[derive(Default)]
pub struct GroupWork {
    scratch: Vec<u8>,
    /// Records of the current group, one set per snap length; the first
    /// `built` are valid.
    records: Vec<GroupRecords>,
    built: usize,
}

impl GroupWork {
    /// Working memory for groups.
    pub fn new() -> GroupWork {
        GroupWork {
            scratch: Vec::new(),
            records: Vec::new(),
            built: 0,
        }
    }

    /// Forgets the last group's records (call before each group).
    pub fn next_group(&mut self) {
        self.built = 0;
    }

    /// The current group's records as `stages` keep them, made now if no
    /// subscriber with the same snap length has needed them yet.
    fn records(&mut self, stages: &Stages, group: &Group<'_, '_>) -> &GroupRecords {
        let i = match self.records[..self.built]
            .iter()
            .position(|r| r.snap == stages.snap)
        {
            Some(i) => i,
            None => {
                if self.built == self.records.len() {
                    self.records.push(GroupRecords::default());
                }
                self.records[self.built].make(stages, group);
                self.built += 1;
                self.built - 1
            }
        };
        &self.records[i]
    }
}

/// One group's records as subscribers with one snap length keep them
/// (`Stages::record`), back to back: packet `i`'s is
/// `bytes[ends[i]..ends[i + 1]]`.
struct GroupRecords {
    snap: Snap,
    bytes: Vec<u8>,
    ends: [usize; GROUP + 1],
}

impl Default for GroupRecords {
    fn default() -> GroupRecords {
        GroupRecords {
            snap: Snap::Bytes(0),
            bytes: Vec::new(),
            ends: [0; GROUP + 1],
        }
    }
}

impl GroupRecords {
    fn make(&mut self, stages: &Stages, group: &Group<'_, '_>) {
        self.snap = stages.snap;
        self.bytes.clear();
        for (i, p) in group.packets.iter().enumerate() {
            stages.record(p, &mut self.bytes);
            self.ends[i + 1] = self.bytes.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringcap_format::record::{read_ring_record, write_ring_record, Record, HEADER_LEN};
    use ringcap_stages::filter::Target;
    use ringcap_stages::{Sampling, UserSampler};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    type Kept = Arc<Mutex<Vec<Vec<u8>>>>;

    /// Keeps every record it is given, whole; takes runs of records for the
    /// first `bulk_calls` calls, then refuses them.
    struct Keeper {
        records: Kept,
        bulk_calls: usize,
    }

    impl PacketSink for Keeper {
        fn push(&mut self, rec: Record<'_>) -> Option<&mut [u8]> {
            let mut r = vec![0; HEADER_LEN + rec.caplen];
            write_ring_record(&mut r, &rec);
            self.records.lock().unwrap().push(r);
            None
        }
        fn push_records(&mut self, mut records: &[u8], packets: u32) -> bool {
            if self.bulk_calls == 0 {
                return false;
            }
            self.bulk_calls -= 1;
            for _ in 0..packets {
                let (_, len) = read_ring_record(records).expect("whole records only");
                let (r, rest) = records.split_at(len);
                self.records.lock().unwrap().push(r.to_vec());
                records = rest;
            }
            assert!(records.is_empty(), "whole records only");
            true
        }
        fn push_built(
            &mut self,
            len: usize,
            packets: u32,
            build: &mut dyn FnMut(&mut [u8]),
        ) -> bool {
            if self.bulk_calls == 0 {
                return false;
            }
            // Not zeros: every byte must be written.
            let mut room = vec![0xaa; len];
            build(&mut room);
            self.push_records(&room, packets)
        }
        fn flush(&mut self) {}
        fn oldest(&self) -> Option<Instant> {
            None
        }
        fn close(&mut self) {}
        fn dropped(&self) -> u64 {
            0
        }
        fn set_interface_id(&mut self, _id: u32) {}
    }

    fn subscriber(snap: Snap, bulk_calls: usize) -> (Subscriber, Kept) {
        let program = ringcap_stages::compile("udp port 53", 1, 262_144, Target::Offline)
            .expect("filter compiles");
        let stages = Stages::new(
            UserSampler::offline(Sampling::All, 1),
            snap,
            1514,
            Vec::new(),
            vec![1],
        );
        let kept = Kept::default();
        let sink = Box::new(Keeper {
            records: kept.clone(),
            bulk_calls,
        });
        let filter = ringcap_stages::CheckedProgram::new(program).expect("valid");
        (
            Subscriber::new(SessionFilter::single(filter, false), stages, sink),
            kept,
        )
    }

    /// A UDP frame to port `port`, `len` bytes long, numbered `i`.
    fn frame(i: u8, port: u16, len: usize) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 46, 0, i, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2, 0x9c, 0x40]);
        f.extend_from_slice(&port.to_be_bytes());
        f.extend_from_slice(&[0, 26, 0, 0]);
        f.resize(len, i);
        f
    }

    #[test]
    fn a_group_the_kernel_passed_gets_its_records_made_in_place() {
        let frames: Vec<Vec<u8>> = (0..GROUP as u8)
            .map(|i| frame(i, if i % 3 == 0 { 80 } else { 53 }, 60 + usize::from(i) * 5))
            .collect();
        let packets = |extra: u32| -> Vec<Packet<'_>> {
            frames
                .iter()
                .enumerate()
                .map(|(i, f)| Packet {
                    ts_ns: 1_700_000_000_000_000_007 + i as u64 * 999,
                    wire_len: f.len() as u32 + extra * (i == 9) as u32,
                    data: f,
                    vlan: (i % 7 == 2).then_some([0x81, 0x00, 0x20, 0x07]),
                    interface: 0,
                    ahead: &[],
                })
                .collect()
        };
        let whole = packets(0);
        for snap in SNAPS {
            let (mut passed, kept) = subscriber(snap, usize::MAX);
            let mut work = GroupWork::new();
            work.next_group();
            passed.take_passed(&Group::new(&whole), &mut work);
            let want: Vec<Vec<u8>> = whole
                .iter()
                .map(|p| {
                    let mut r = Vec::new();
                    passed.stages.record(p, &mut r);
                    r
                })
                .collect();
            assert_eq!(*kept.lock().unwrap(), want, "{snap:?}");
            let c = passed.counts();
            assert_eq!((c.ring_accepted, c.delivered), (64, 64), "{snap:?}");
            // A packet cut in the ring: the kernel judged bytes user space
            // does not have, so the filter runs (it keeps the port 53 ones).
            let cut = packets(100);
            let (mut passed, kept) = subscriber(snap, usize::MAX);
            work.next_group();
            passed.take_passed(&Group::new(&cut), &mut work);
            assert_eq!(kept.lock().unwrap().len(), 42, "{snap:?}");
        }
    }

    /// Snap lengths of the record tests: cut in the MAC addresses (8), in
    /// the tag put back (14), the usual and the whole, and headers.
    const SNAPS: [Snap; 5] = [
        Snap::Bytes(96),
        Snap::Bytes(8),
        Snap::Bytes(14),
        Snap::Bytes(65_535),
        Snap::Headers { max: 128 },
    ];

    #[test]
    fn runs_of_records_are_what_packets_one_by_one_give() {
        // Runs of kept packets of several lengths between rejected ones,
        // one with a VLAN tag the kernel took out.
        let frames: Vec<Vec<u8>> = (0..GROUP as u8)
            .map(|i| {
                let port = if i % 7 == 3 || i % 11 == 0 { 80 } else { 53 };
                frame(i, port, 60 + usize::from(i) * 3)
            })
            .collect();
        let packets: Vec<Packet<'_>> = frames
            .iter()
            .enumerate()
            .map(|(i, f)| Packet {
                ts_ns: 1_700_000_000_123_456_789 + i as u64 * 1_000_001,
                wire_len: f.len() as u32 + 100,
                data: f,
                vlan: (i == 5).then_some([0x81, 0x00, 0x00, 0x07]),
                interface: 0,
                ahead: &[],
            })
            .collect();
        let group = Group::new(&packets);
        for snap in SNAPS {
            let mut work = GroupWork::new();
            work.next_group();
            let (mut alone, one_by_one) = subscriber(snap, 0);
            let (mut bulk, in_runs) = subscriber(snap, usize::MAX);
            // Takes runs twice, then refuses: the rest of the group goes
            // packet by packet.
            let (mut mixed, mixed_kept) = subscriber(snap, 2);
            alone.take(&group, &mut work);
            bulk.take(&group, &mut work);
            mixed.take(&group, &mut work);
            let expected = one_by_one.lock().unwrap().clone();
            assert_eq!(expected.len(), 49, "{snap:?}: the filter keeps 49 of 64");
            assert_eq!(*in_runs.lock().unwrap(), expected, "{snap:?}: runs");
            assert_eq!(
                *mixed_kept.lock().unwrap(),
                expected,
                "{snap:?}: runs, then one by one"
            );
            for s in [&alone, &bulk, &mixed] {
                let c = s.counts();
                assert_eq!((c.ring_accepted, c.delivered), (49, 49), "{snap:?}");
                assert_eq!(c.bytes_on_wire, alone.counts().bytes_on_wire, "{snap:?}");
            }
        }
    }
}
