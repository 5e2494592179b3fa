//! Sample messages shared by the codec and mutation tests: at least one of
//! every variant, with optional fields both present and absent.

#![allow(dead_code)] // each test binary uses a different part

use ringcap_proto::*;

pub fn counters(seed: u64) -> SessionCounters {
    SessionCounters {
        packets_seen_by_interface: seed * 100,
        packets_filter_accepted: seed * 50,
        packets_sampled_out: seed * 10,
        packets_rate_limited: seed,
        packets_dropped_ring: 2,
        packets_dropped_client: 3,
        packets_delivered: seed * 30,
        bytes_delivered: u64::MAX,
        flows_delivered: seed * 3,
        flows_evicted: seed,
        flows_dropped_client: 0,
        packets_to_flows: seed * 7,
    }
}

pub fn open_minimal() -> Request {
    Request::Open {
        interfaces: vec!["eth0".into()],
        filter: String::new(),
        program: None,
        snaplen: SnapRequest::Bytes(262_144),
        sample: None,
        format: OutputFormat::Pcap,
        dump: None,
        duration_s: None,
        count: None,
        compress: false,
        inject_only: false,
        flows: None,
    }
}

pub fn open_full() -> Request {
    Request::Open {
        interfaces: vec!["eth0".into(), "veth1.100".into(), "bond0:1".into()],
        filter: "tcp port 80 and (host 10.0.0.1 or \"odd\\\" text\")\n\tand not icmp é".into(),
        program: None,
        snaplen: SnapRequest::Headers { max: 128 },
        sample: Some(SampleRequest::Flows(1 << 31)),
        format: OutputFormat::Pcapng,
        dump: Some(DumpRequest {
            rotate_seconds: Some(3600),
            rotate_packets: Some(1_000_000),
            rotate_bytes: Some(u64::MAX),
        }),
        duration_s: Some(0.25),
        count: Some(1),
        compress: true,
        inject_only: false,
        flows: None,
    }
}

/// A flows-only session with the largest table and longest timeouts.
pub fn open_flows_only() -> Request {
    Request::Open {
        interfaces: vec!["eth0".into()],
        filter: "udp".into(),
        program: None,
        snaplen: SnapRequest::Bytes(96),
        sample: None,
        format: OutputFormat::Pcap,
        dump: None,
        duration_s: None,
        count: None,
        compress: false,
        inject_only: false,
        flows: Some(FlowRequest {
            active_timeout_s: 86_400,
            idle_timeout_s: 1,
            max_flows: 1 << 22,
            packets: false,
        }),
    }
}

pub fn effective() -> Effective {
    Effective {
        interfaces: vec!["eth0".into()],
        filter: "tcp port 80".into(),
        framework_filter: "not port 22".into(),
        snaplen: SnapRequest::Headers { max: 128 },
        sample: Some(SampleRequest::Packets(10)),
        hide: vec!["payload".into(), "ip.id".into()],
        anonymize: true,
        max_packets_per_second: Some(200_000),
        max_bits_per_second: Some(500_000_000),
        max_duration_s: Some(3600.0),
        grant: 0,
        compress: false,
        compress_format: None,
        flows: None,
    }
}

pub fn requests() -> Vec<Request> {
    vec![
        open_minimal(),
        open_full(),
        Request::Open {
            interfaces: vec!["lo".into()],
            filter: "udp".into(),
            program: None,
            snaplen: SnapRequest::Bytes(1),
            sample: Some(SampleRequest::Packets(1)),
            format: OutputFormat::Pcapng,
            dump: Some(DumpRequest::default()),
            duration_s: Some(1e9),
            count: None,
            compress: false,
            inject_only: false,
            flows: None,
        },
        open_flows_only(),
        Request::SetFilter {
            filter: "udp port 53".into(),
            program: None,
        },
        Request::SetFilter {
            filter: String::new(),
            program: None,
        },
        Request::Stats,
        Request::Checkpoint,
        Request::Flush,
        Request::Close,
        Request::ListDumps,
        Request::FetchDump {
            name: "alice-20240101T000000-0001.pcapng".into(),
        },
        Request::DeleteDump {
            name: "a..b_c-d".into(),
        },
        Request::Sessions,
        Request::Retrieve {
            interface: "eth0".into(),
            filter: "udp".into(),
            program: Some(FilterProgram::encode(&[(0x06, 0, 0, 65535)], false)),
            snaplen: SnapRequest::Bytes(96),
            after_ns: Some(1),
            before_ns: Some(2),
            max_bytes: Some(1 << 20),
        },
    ]
}

pub fn responses() -> Vec<Response> {
    vec![
        Response::Retrieving {
            effective: effective(),
            after_ns: 0,
            before_ns: u64::MAX,
            max_bytes: 1 << 30,
        },
        Response::Retrieved {
            packets: 3,
            bytes: 200,
            files: 1,
            cut: Some("max_bytes".into()),
        },
        Response::Accepted {
            session: 7,
            effective: effective(),
            ring: RingInfo { capacity: 4 << 20 },
        },
        Response::Accepted {
            session: u64::MAX,
            effective: Effective {
                interfaces: vec!["eth0".into(), "eth1".into()],
                filter: String::new(),
                framework_filter: String::new(),
                snaplen: SnapRequest::Bytes(96),
                sample: None,
                hide: vec![],
                anonymize: false,
                max_packets_per_second: None,
                max_bits_per_second: None,
                max_duration_s: None,
                grant: u32::MAX,
                compress: true,
                compress_format: Some(3),
                flows: Some(FlowSettings {
                    active_timeout_s: 60,
                    idle_timeout_s: 15,
                    max_flows: 65_536,
                    packets: true,
                }),
            },
            ring: RingInfo { capacity: 1 },
        },
        Response::Refused {
            grant: Some(2),
            rule: "grant[2].interfaces".into(),
            reason: "interface eth1 is not granted".into(),
        },
        Response::Refused {
            grant: None,
            rule: "default deny".into(),
            reason: "no grant names uid 1001".into(),
        },
        Response::Stats {
            counters: counters(5),
        },
        Response::Ok,
        Response::Error {
            message: "filter: syntax error in filter expression".into(),
        },
        Response::Ended {
            reason: "max_duration reached".into(),
            counters: counters(9),
        },
        Response::DumpPublished {
            name: "d-0001.pcapng".into(),
        },
        Response::Dumps { files: vec![] },
        Response::Dumps {
            files: vec![
                DumpFile {
                    name: "d-0001.pcapng".into(),
                    bytes: 1234,
                    modified_s: 1_700_000_000,
                },
                DumpFile {
                    name: "d-0002.pcap".into(),
                    bytes: 0,
                    modified_s: 0,
                },
            ],
        },
        Response::Dump {
            name: "d-0001.pcapng".into(),
            bytes: 1234,
        },
        Response::Sessions {
            sessions: vec![],
            more: 0,
        },
        Response::Sessions {
            sessions: vec![SessionInfo {
                session: 3,
                uid: 1000,
                interfaces: vec!["eth0".into()],
                filter: "tcp".into(),
                counters: counters(1),
                started_s: 1_700_000_000,
            }],
            more: 7,
        },
    ]
}

/// `body` behind a valid header of `kind`.
pub fn framed(kind: MessageKind, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&(kind as u16).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A request body (JSON text) behind a valid request header.
pub fn req(body: &str) -> Vec<u8> {
    framed(MessageKind::Request, body.as_bytes())
}

/// A response body (JSON text) behind a valid response header.
pub fn resp(body: &str) -> Vec<u8> {
    framed(MessageKind::Response, body.as_bytes())
}
