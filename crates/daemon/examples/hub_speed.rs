//! CPU time per delivered packet of the daemon's per-session work, without
//! a network: twelve sessions' filters, stages and ring sinks over groups of
//! 64-byte frames, run by the hub's own code (`ringcap_engine::hub::group`),
//! each ring released by a reader in the same thread. `cargo run --release -p ringcap-daemon --example
//! hub_speed [PACKETS] [flows]`: with `flows`, each session is one of flow
//! records only (`ringcap_daemon::flows`: the packet held for the
//! transforms, then a flow table of 65536), its frames spread over 64 flows
//! per group and, with `SETS=N` in the environment (default 64), N groups
//! of them: 64·N flows in all. `SESSIONS=N` (default 12) sets the number of
//! sessions (1: one tool alone through the daemon, as bench/run's
//! `tcpdump-lib:1`).

use ringcap_daemon::ring_sink::{RingSinks, SinkCounters};
use ringcap_engine::hub::group::{Group, GroupWork, Subscriber};
use ringcap_engine::source::Packet;
use ringcap_engine::stages::Stages;
use ringcap_engine::SinkFactory;
use ringcap_shm::{RingReader, RingWriter};
use ringcap_stages::filter::Target;
use ringcap_stages::{compile, CheckedProgram, Sampling, SessionFilter, Snap, UserSampler};
use std::sync::{Arc, Mutex};

const GROUP: usize = 64;

struct Session {
    sub: Subscriber,
    reader: RingReader,
}

fn cpu_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("thread CPU clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn session(i: usize, flows: bool) -> Session {
    let mut w = RingWriter::create(16 << 20).expect("ring");
    w.prefault();
    let (d, c, e) = w.fds();
    let reader = RingReader::map(
        d.try_clone_to_owned().expect("dup"),
        c.try_clone_to_owned().expect("dup"),
        e.try_clone_to_owned().expect("dup"),
    )
    .expect("reader");
    let sinks = RingSinks {
        ring: Arc::new(Mutex::new(w)),
        counters: Arc::new(SinkCounters::default()),
        max_pps: None,
        max_bps: None,
        threads: 1,
        compress: None,
    };
    let sinks: Box<dyn SinkFactory> = if flows {
        let budget = ringcap_daemon::budget::Budgets::new();
        let slot = budget.reserve_flows(1, 65_536, 65_536).expect("budget");
        Box::new(ringcap_daemon::flows::FlowSinks {
            packets: None,
            ring: sinks.ring.clone(),
            counters: Default::default(),
            table: ringcap_flow::TableConfig {
                active_ns: 1800 * 1_000_000_000,
                idle_ns: 60 * 1_000_000_000,
                max_flows: 65_536,
            },
            slot: Arc::new(slot),
            max_pps: None,
            max_bps: None,
            threads: 1,
            sink_counters: sinks.counters.clone(),
        })
    } else {
        Box::new(sinks)
    };
    let expr = format!("udp and not dst port {}", 60000 + i);
    let program = compile(&expr, 1, 262_144, Target::Offline).expect("filter");
    let stages = Stages::new(
        UserSampler::offline(Sampling::All, 1),
        if flows {
            Snap::Headers { max: 256 }
        } else {
            Snap::Bytes(96)
        },
        1514,
        Vec::new(),
        vec![1],
    );
    let filter = CheckedProgram::new(program).expect("valid");
    Session {
        sub: Subscriber::new(
            SessionFilter::single(filter, false),
            stages,
            sinks.make(0, 0, 1),
        ),
        reader,
    }
}

fn main() {
    let packets: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let flows = std::env::args().nth(2).is_some_and(|a| a == "flows");
    let n_sessions: usize = std::env::var("SESSIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut sessions: Vec<Session> = (0..n_sessions).map(|i| session(i, flows)).collect();
    // 64-byte IPv4/UDP frames to port 40000, as bench/run's daemon phase
    // sends, with IP IDs counting up.
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    frame.extend_from_slice(&[0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0]);
    frame.extend_from_slice(&[
        198, 18, 0, 1, 198, 18, 0, 2, 0x9c, 0x40, 0x9c, 0x40, 0, 26, 0, 0,
    ]);
    frame.resize(64, 0xab);
    // With flows: 64 sets of frames, each of 64 flows (the source port's
    // high byte is the frame, its low byte the set), 4096 flows in all.
    let sets = if flows {
        std::env::var("SETS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(64)
    } else {
        1
    };
    let frames: Vec<Vec<Vec<u8>>> = (0..sets)
        .map(|set| {
            (0..GROUP)
                .map(|i| {
                    let mut f = frame.clone();
                    f[19] = i as u8;
                    if flows {
                        f[35] = set as u8;
                        f[34] = i as u8;
                    }
                    f
                })
                .collect()
        })
        .collect();
    let packet_sets: Vec<Vec<Packet<'_>>> = frames
        .iter()
        .map(|set| {
            set.iter()
                .enumerate()
                .map(|(i, f)| Packet {
                    ts_ns: 1_700_000_000_000_000_000 + i as u64 * 1000,
                    wire_len: 64,
                    data: f,
                    vlan: None,
                    interface: 0,
                    ahead: &[],
                })
                .collect()
        })
        .collect();
    let mut work = GroupWork::new();
    let groups = packets / GROUP as u64;
    let t0 = cpu_ns();
    for g in 0..groups {
        let packets_of_group = &packet_sets[g as usize % sets];
        let group = Group::new(packets_of_group);
        work.next_group();
        for s in &mut sessions {
            s.sub.take(&group, &mut work);
        }
        // The clients give back what they were handed, every 64 groups.
        if g % 64 == 63 {
            for s in &mut sessions {
                while let Ok(Some(_)) = s.reader.next_chunk() {}
                s.reader.release();
            }
        }
    }
    let ns = cpu_ns() - t0;
    let delivered: u64 = sessions.iter().map(|s| s.sub.counts().delivered).sum();
    let dropped: u64 = sessions.iter_mut().map(|s| s.sub.sink().dropped()).sum();
    println!(
        "{n_sessions} sessions{}, {} packets each: {:.1} ns of CPU per delivered packet ({dropped} dropped)",
        if flows { " of flow records only" } else { "" },
        groups * GROUP as u64,
        ns as f64 / delivered.max(1) as f64
    );
}
