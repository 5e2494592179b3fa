//! The codec: round trips of every message, the wire format pinned to exact
//! bytes, and every way a message is refused.

mod common;

use common::*;
use ringcap_proto::*;

#[test]
fn every_request_round_trips() {
    for request in requests() {
        request.validate().unwrap();
        let bytes = encode_request(&request);
        assert_eq!(&bytes[..4], b"RCD1");
        assert_eq!(decode_request(&bytes).unwrap(), request, "{bytes:?}");
        assert_eq!(request.fds_expected(), 0);
    }
}

#[test]
fn every_response_round_trips() {
    for response in responses() {
        response.validate().unwrap();
        let bytes = encode_response(&response);
        assert_eq!(decode_response(&bytes).unwrap(), response, "{bytes:?}");
    }
}

#[test]
fn every_variant_is_covered_by_the_samples() {
    let mut kinds: Vec<_> = requests().iter().map(Request::kind_name).collect();
    kinds.dedup();
    assert_eq!(kinds.len(), 11, "{kinds:?}");
    let mut kinds: Vec<_> = responses().iter().map(Response::kind_name).collect();
    kinds.dedup();
    assert_eq!(kinds.len(), 12, "{kinds:?}");
}

/// The exact bytes of an `Open`: header `RCD1`, version 1, kind 1
/// (request), then the JSON body with `None` fields left out.
#[test]
fn open_wire_bytes_are_pinned() {
    let open = Request::Open {
        interfaces: vec!["eth0".into()],
        filter: "tcp port 80".into(),
        program: None,
        snaplen: SnapRequest::Bytes(96),
        sample: Some(SampleRequest::Packets(10)),
        format: OutputFormat::Pcapng,
        dump: None,
        duration_s: Some(60.0),
        count: None,
        compress: false,
        inject_only: false,
        flows: None,
    };
    let expected: &[u8] = b"RCD1\x00\x01\x00\x01\
        {\"type\":\"open\",\"interfaces\":[\"eth0\"],\"filter\":\"tcp port 80\",\
        \"snaplen\":{\"bytes\":96},\"sample\":{\"packets\":10},\"format\":\"pcapng\",\
        \"duration_s\":60.0,\"compress\":false}";
    assert_eq!(encode_request(&open), expected);
    assert_eq!(decode_request(expected).unwrap(), open);
    // Absent and null optional fields decode alike.
    let with_nulls = req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"tcp port 80","snaplen":{"bytes":96},
            "sample":{"packets":10},"format":"pcapng","dump":null,"duration_s":60,"count":null,
            "compress":false}"#,
    );
    assert_eq!(decode_request(&with_nulls).unwrap(), open);
    // And a header-mode snap length with the other sampling.
    let headers = req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"headers":{"max":128}},
            "sample":{"flows":10},"format":"pcap","compress":true}"#,
    );
    match decode_request(&headers).unwrap() {
        Request::Open {
            snaplen, sample, ..
        } => {
            assert_eq!(snaplen, SnapRequest::Headers { max: 128 });
            assert_eq!(sample, Some(SampleRequest::Flows(10)));
        }
        other => panic!("{other:?}"),
    }
}

/// The exact bytes of an `Accepted`: kind 2 (response).
#[test]
fn accepted_wire_bytes_are_pinned() {
    let accepted = Response::Accepted {
        session: 7,
        effective: effective(),
        ring: RingInfo { capacity: 4 << 20 },
    };
    let expected: &[u8] = b"RCD1\x00\x01\x00\x02\
        {\"type\":\"accepted\",\"session\":7,\"effective\":{\"interfaces\":[\"eth0\"],\
        \"filter\":\"tcp port 80\",\"framework_filter\":\"not port 22\",\
        \"snaplen\":{\"headers\":{\"max\":128}},\"sample\":{\"packets\":10},\
        \"hide\":[\"payload\",\"ip.id\"],\"anonymize\":true,\"max_packets_per_second\":200000,\
        \"max_bits_per_second\":500000000,\"max_duration_s\":3600.0,\"grant\":0},\
        \"ring\":{\"capacity\":4194304}}";
    assert_eq!(encode_response(&accepted), expected);
    assert_eq!(decode_response(expected).unwrap(), accepted);
    assert_eq!(accepted.fds_expected(), ACCEPTED_FDS);
    assert_eq!(
        (ACCEPTED_FD_RING, ACCEPTED_FD_CONSUMER, ACCEPTED_FD_EVENT),
        (0, 1, 2)
    );
}

#[test]
fn unit_messages_are_just_their_type() {
    assert_eq!(encode_request(&Request::Stats), req(r#"{"type":"stats"}"#));
    assert_eq!(encode_response(&Response::Ok), resp(r#"{"type":"ok"}"#));
    assert_eq!(
        decode_request(&req(r#" { "type" : "list_dumps" } "#)).unwrap(),
        Request::ListDumps
    );
}

fn request_error(bytes: &[u8]) -> String {
    match decode_request(bytes) {
        Ok(request) => panic!(
            "accepted {request:?} from {:?}",
            String::from_utf8_lossy(bytes)
        ),
        Err(e) => e.to_string(),
    }
}

fn response_error(bytes: &[u8]) -> String {
    match decode_response(bytes) {
        Ok(response) => panic!(
            "accepted {response:?} from {:?}",
            String::from_utf8_lossy(bytes)
        ),
        Err(e) => e.to_string(),
    }
}

#[test]
fn refuses_bad_magic() {
    let mut bytes = encode_request(&Request::Stats);
    bytes[..4].copy_from_slice(b"RCD0");
    let err = decode_request(&bytes).unwrap_err();
    assert_eq!(err, ProtoError::BadMagic { found: *b"RCD0" });
    assert_eq!(
        err.to_string(),
        "bad magic \"RCD0\": not a ringcapd message (expected \"RCD1\")"
    );
    bytes[..4].copy_from_slice(b"\x1b[2J");
    assert_eq!(
        request_error(&bytes),
        "bad magic \"\\x1b[2J\": not a ringcapd message (expected \"RCD1\")"
    );
    assert!(request_error(b"GET / HTTP/1.1\r\n\r\n").starts_with("bad magic \"GET \""));
}

#[test]
fn refuses_other_versions() {
    let mut bytes = encode_request(&Request::Stats);
    bytes[4..6].copy_from_slice(&2u16.to_be_bytes());
    assert_eq!(
        decode_request(&bytes).unwrap_err(),
        ProtoError::UnsupportedVersion {
            found: 2,
            expected: MessageKind::Request
        }
    );
    assert_eq!(
        request_error(&bytes),
        "unsupported protocol version 2 (this daemon speaks 1)"
    );
    bytes[4..6].copy_from_slice(&0u16.to_be_bytes());
    assert_eq!(
        request_error(&bytes),
        "unsupported protocol version 0 (this daemon speaks 1)"
    );
    let mut bytes = encode_response(&Response::Ok);
    bytes[4..6].copy_from_slice(&256u16.to_be_bytes()); // little-endian 1
    assert_eq!(
        response_error(&bytes),
        "unsupported protocol version 256 (this client speaks 1)"
    );
}

#[test]
fn refuses_the_wrong_direction() {
    let response = encode_response(&Response::Ok);
    assert_eq!(
        request_error(&response),
        "header kind 2 where a request (1) was expected"
    );
    let request = encode_request(&Request::Stats);
    assert_eq!(
        response_error(&request),
        "header kind 1 where a response (2) was expected"
    );
    let mut zero = request.clone();
    zero[6..8].copy_from_slice(&[0, 0]);
    assert!(request_error(&zero).starts_with("header kind 0 "));
}

#[test]
fn refuses_truncated_headers() {
    for len in 0..HEADER_LEN {
        let bytes = &encode_request(&Request::Stats)[..len];
        assert_eq!(
            decode_request(bytes).unwrap_err(),
            ProtoError::TruncatedHeader { len }
        );
        assert!(decode_response(bytes).is_err());
    }
    assert_eq!(
        request_error(b"RCD"),
        "truncated header: 3 bytes, every message starts with an 8-byte header"
    );
    // A header alone has an empty body: malformed JSON, not a panic.
    assert!(request_error(&req("")).starts_with("malformed JSON at line 1 column 0: EOF"));
}

#[test]
fn size_limit_is_checked_before_parsing() {
    // Exactly MAX_MESSAGE body bytes is fine (whitespace pads the JSON).
    let mut body = String::from(r#"{"type":"stats"}"#);
    body.push_str(&" ".repeat(MAX_MESSAGE - body.len()));
    assert_eq!(decode_request(&req(&body)).unwrap(), Request::Stats);
    // One more byte is refused, whatever the bytes are.
    body.push(' ');
    let err = decode_request(&req(&body)).unwrap_err();
    assert_eq!(
        err,
        ProtoError::TooLarge {
            len: MAX_MESSAGE + 1
        }
    );
    assert_eq!(
        err.to_string(),
        "message too large: body of 65537 bytes, the limit is 65536"
    );
    let garbage = vec![0xffu8; MAX_DATAGRAM + 1000];
    assert!(request_error(&garbage).starts_with("message too large"));
    assert!(response_error(&garbage).starts_with("message too large"));
}

#[test]
fn refuses_malformed_json_with_its_position() {
    let err = decode_request(&req("{\"type\":\"stats\",\n  oops}")).unwrap_err();
    assert!(
        matches!(
            err,
            ProtoError::Malformed {
                line: 2,
                column: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "malformed JSON at line 2 column 3: key must be a string"
    );
    assert!(request_error(&req(r#"{"type":"stats"} {}"#)).contains("trailing characters"));
    assert!(request_error(&req("\u{feff}{}")).starts_with("malformed JSON"));
    let mut invalid_utf8 = req(r#"{"type":"set_filter","filter":"#);
    invalid_utf8.extend_from_slice(b"\"\xff\xfe\"}");
    assert!(request_error(&invalid_utf8).contains("invalid unicode"));
    // Numbers beyond f64 are JSON that serde_json refuses, not infinity.
    assert!(request_error(&req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"bytes":96},
            "format":"pcap","duration_s":1e999,"compress":false}"#
    ))
    .contains("number out of range"));
    // Deep nesting hits serde_json's recursion limit, not the stack.
    let deep = format!(
        r#"{{"type":"set_filter","filter":"x","x":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(decode_request(&req(&deep[..MAX_MESSAGE])).is_err());
    let deep = format!(r#"{{"type":"stats","x":{}}}"#, "[".repeat(1000));
    assert!(decode_request(&req(&deep)).is_err());
}

#[test]
fn refuses_unknown_types_and_fields() {
    assert!(request_error(&req(r#"{"type":"transmit"}"#)).contains("unknown variant `transmit`"));
    assert!(request_error(&req(r#"{"type":"inject"}"#)).contains("missing field `frames`"));
    assert!(request_error(&req(r#"{"type":"inject","frames":[]}"#)).starts_with("frames: "));
    assert!(request_error(&req(
        r#"{"type":"inject","frames":[{"tag":1,"at_ns":0,"tolerance_ns":0,"data":"0011"}]}"#
    ))
    .starts_with("frames[0].data: "));
    assert!(request_error(&req(
        r#"{"type":"inject","frames":[{"tag":1,"at_ns":0,"tolerance_ns":0,"data":"zz"}]}"#
    ))
    .contains("hexadecimal"));
    assert!(request_error(&req(r#"{"type":"Stats"}"#)).contains("unknown variant `Stats`"));
    assert!(request_error(&req(r#"{"filter":"x"}"#)).contains("missing field `type`"));
    // serde also reads a struct from a JSON array of its fields in order.
    // That positional form yields the same typed values and goes through the
    // same bounds, so it widens nothing; pinned here so a change is noticed.
    assert_eq!(
        decode_request(&req(r#"["set_filter","tcp"]"#)).unwrap(),
        Request::SetFilter {
            filter: "tcp".into(),
            program: None
        }
    );
    assert!(request_error(&req(r#"["fetch_dump","../a"]"#)).starts_with("name: "));
    assert!(request_error(&req(r#"["stats",1]"#)).contains("invalid length"));
    assert!(request_error(&req(r#""stats""#)).starts_with("not a valid message"));
    // A response's type is not a request's.
    assert!(request_error(&req(r#"{"type":"ok"}"#)).contains("unknown variant `ok`"));

    let unknown = request_error(&req(r#"{"type":"set_filter","filter":"x","root":true}"#));
    assert_eq!(
        unknown,
        "not a valid message: unknown field `root`, expected `filter` or `program`"
    );
    // Unit variants too (serde's internally tagged enums would let this by).
    assert!(request_error(&req(r#"{"type":"stats","all":true}"#)).contains("unknown field `all`"));
    assert!(response_error(&resp(r#"{"type":"ok","x":null}"#)).contains("unknown field `x`"));
    // Nested structs and the choice enums.
    assert!(request_error(&req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"headers":{"max":64,"min":1}},
            "format":"pcap","compress":false}"#
    ))
    .contains("unknown field `min`"));
    assert!(request_error(&req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"bytes":64},
            "format":"pcap","compress":false,"dump":{"rotate_minutes":1}}"#
    ))
    .contains("unknown field `rotate_minutes`"));
    assert!(request_error(&req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"kilobytes":64},
            "format":"pcap","compress":false}"#
    ))
    .contains("unknown variant `kilobytes`"));
    assert!(request_error(&req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"bytes":64},
            "format":"erf","compress":false}"#
    ))
    .contains("unknown variant `erf`"));
    assert!(response_error(&resp(
        r#"{"type":"stats","counters":{"packets_seen_by_interface":1,"packets_filter_accepted":1,
            "packets_sampled_out":0,"packets_rate_limited":0,"packets_dropped_ring":0,
            "packets_dropped_client":0,"packets_delivered":1,"bytes_delivered":1,"bonus":1}}"#
    ))
    .contains("unknown field `bonus`"));
    // Missing required fields and duplicates.
    assert!(request_error(&req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"bytes":64},"format":"pcap"}"#
    ))
    .contains("missing field `compress`"));
    assert!(
        request_error(&req(r#"{"type":"set_filter","filter":"a","filter":"b"}"#))
            .contains("duplicate field `filter`")
    );
    assert!(request_error(&req(r#"{"type":"stats","type":"close"}"#))
        .contains("duplicate field `type`"));
    // Wrong types and signs.
    assert!(request_error(&req(
        r#"{"type":"open","interfaces":"eth0","filter":"","snaplen":{"bytes":64},"format":"pcap","compress":false}"#
    ))
    .contains("invalid type"));
    assert!(request_error(&req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"bytes":-1},"format":"pcap","compress":false}"#
    ))
    .starts_with("not a valid message"));
}

#[test]
fn errors_escape_what_the_peer_sent() {
    // A field name that would forge a log line and colour a terminal.
    let err = request_error(&req(
        r#"{"type":"set_filter","filter":"x","\nFAKE LOG LINE \u001b[31m":1}"#,
    ));
    assert!(!err.contains('\n') && !err.contains('\u{1b}'), "{err}");
    assert!(err.contains("\\nFAKE LOG LINE \\u{1b}[31m"), "{err}");
    // A huge unknown field name is not echoed whole.
    let long = format!(r#"{{"type":"stats","{}":1}}"#, "A".repeat(60_000));
    assert!(request_error(&req(&long)).len() < 400);
    let long_if = format!(
        r#"{{"type":"open","interfaces":["{}"],"filter":"","snaplen":{{"bytes":64}},"format":"pcap","compress":false}}"#,
        "\u{202e}".repeat(10_000)
    );
    let err = request_error(&req(&long_if));
    assert!(err.len() < 1000 && err.is_ascii(), "{err}");
}

/// An `Open` body with one field replaced (`key` is the JSON key, `value`
/// its JSON text).
fn open_with(key: &str, value: &str) -> Vec<u8> {
    let mut fields = vec![
        ("interfaces", r#"["eth0"]"#.to_string()),
        ("filter", r#""tcp""#.to_string()),
        ("snaplen", r#"{"bytes":96}"#.to_string()),
        ("format", r#""pcap""#.to_string()),
        ("compress", "false".to_string()),
    ];
    match fields.iter_mut().find(|(k, _)| *k == key) {
        Some(field) => field.1 = value.to_string(),
        None => fields.push((
            Box::leak(key.to_string().into_boxed_str()),
            value.to_string(),
        )),
    }
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    req(&format!("{{\"type\":\"open\",{}}}", body.join(",")))
}

fn open_ok(key: &str, value: &str) {
    if let Err(e) = decode_request(&open_with(key, value)) {
        panic!("{key}={value} refused: {e}");
    }
}

fn open_refused(key: &str, value: &str) -> String {
    match decode_request(&open_with(key, value)) {
        Ok(r) => panic!("{key}={value} accepted: {r:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn interface_names_are_bounded() {
    for good in [
        "eth0",
        "a",
        "veth-1_2.100",
        "bond0:1",
        "abcdefghijklmno",
        "...",
    ] {
        open_ok("interfaces", &format!(r#"["{good}"]"#));
    }
    assert_eq!(
        open_refused("interfaces", r#"["../x"]"#),
        "interfaces[0]: \"../x\" is not an interface name \
         (1 to 15 bytes of A-Z a-z 0-9 _ . : -, not \".\" or \"..\")"
    );
    for bad in [
        r#"[".."]"#,
        r#"["."]"#,
        r#"[""]"#,
        r#"["abcdefghijklmnop"]"#,
        r#"["eth 0"]"#,
        r#"["eth/0"]"#,
        r#"["eth0\u0000"]"#,
        r#"["éth0"]"#,
        r#"["eth0","-x","a b"]"#,
    ] {
        assert!(
            open_refused("interfaces", bad).contains("is not an interface name"),
            "{bad}"
        );
    }
    assert_eq!(
        open_refused("interfaces", "[]"),
        "interfaces: at least one interface is needed"
    );
    let sixteen: Vec<String> = (0..16).map(|i| format!("\"e{i}\"")).collect();
    open_ok("interfaces", &format!("[{}]", sixteen.join(",")));
    let seventeen: Vec<String> = (0..17).map(|i| format!("\"e{i}\"")).collect();
    assert_eq!(
        open_refused("interfaces", &format!("[{}]", seventeen.join(","))),
        "interfaces: 17 interfaces, at most 16 are allowed"
    );
    assert_eq!(
        open_refused("interfaces", r#"["eth0","eth1","eth0"]"#),
        "interfaces[2]: \"eth0\" is listed twice"
    );
}

#[test]
fn filters_are_bounded() {
    open_ok("filter", &format!("\"{}\"", "a".repeat(16 * 1024)));
    assert_eq!(
        open_refused("filter", &format!("\"{}\"", "a".repeat(16 * 1024 + 1))),
        "filter: 16385 bytes, filters are limited to 16384"
    );
    assert_eq!(
        open_refused("filter", r#""tcp\u0000 or udp""#),
        "filter: contains a NUL byte"
    );
    assert_eq!(
        request_error(&req(r#"{"type":"set_filter","filter":"\u0000"}"#)),
        "filter: contains a NUL byte"
    );
    // Newlines and tabs are ordinary filter whitespace.
    open_ok("filter", r#""tcp\n\tand port 80""#);
}

#[test]
fn snap_lengths_are_bounded() {
    open_ok("snaplen", r#"{"bytes":1}"#);
    open_ok("snaplen", r#"{"bytes":262144}"#);
    assert_eq!(
        open_refused("snaplen", r#"{"bytes":0}"#),
        "snaplen.bytes: 0 is out of range 1..=262144"
    );
    assert!(open_refused("snaplen", r#"{"bytes":262145}"#).contains("out of range"));
    assert!(open_refused("snaplen", r#"{"bytes":4294967296}"#).starts_with("not a valid message"));
    open_ok("snaplen", r#"{"headers":{"max":14}}"#);
    open_ok("snaplen", r#"{"headers":{"max":65535}}"#);
    assert_eq!(
        open_refused("snaplen", r#"{"headers":{"max":13}}"#),
        "snaplen.headers.max: 13 is out of range 14..=65535"
    );
    assert!(open_refused("snaplen", r#"{"headers":{"max":65536}}"#).contains("out of range"));
    assert!(open_refused("snaplen", r#"{"headers":{}}"#).contains("missing field `max`"));
    assert!(open_refused("snaplen", r#"{"headers":128}"#).starts_with("not a valid message"));
    assert!(
        open_refused("snaplen", r#"{"bytes":96,"headers":{"max":128}}"#)
            .starts_with("not a valid message")
    );
}

#[test]
fn sampling_durations_and_counts_are_bounded() {
    open_ok("sample", r#"{"packets":1}"#);
    open_ok("sample", r#"{"flows":2147483648}"#);
    assert_eq!(
        open_refused("sample", r#"{"packets":0}"#),
        "sample.packets: 0 is out of range 1..=2147483648"
    );
    assert!(open_refused("sample", r#"{"flows":2147483649}"#).contains("out of range"));

    open_ok("duration_s", "0.001");
    open_ok("duration_s", "1e9");
    for bad in ["0", "0.0", "-1", "1000000000.5", "-0.0"] {
        assert!(
            open_refused("duration_s", bad).starts_with("duration_s: "),
            "{bad}"
        );
    }
    assert!(open_refused("duration_s", r#""60""#).contains("invalid type"));

    open_ok("count", "1");
    assert_eq!(open_refused("count", "0"), "count: must be at least 1");
    open_ok("dump", r#"{}"#);
    open_ok(
        "dump",
        r#"{"rotate_seconds":1,"rotate_packets":1,"rotate_bytes":1}"#,
    );
    for key in ["rotate_seconds", "rotate_packets", "rotate_bytes"] {
        assert_eq!(
            open_refused("dump", &format!(r#"{{"{key}":0}}"#)),
            format!("dump.{key}: must be at least 1")
        );
    }
}

#[test]
fn dump_names_are_bounded() {
    let json = |name: &str| serde_json::to_string(name).unwrap();
    let fetch = |name: &str| req(&format!(r#"{{"type":"fetch_dump","name":{}}}"#, json(name)));
    let delete = |name: &str| {
        req(&format!(
            r#"{{"type":"delete_dump","name":{}}}"#,
            json(name)
        ))
    };
    for good in ["a", "d-0001.pcapng", "a..b", "x.", &"n".repeat(255)] {
        decode_request(&fetch(good)).unwrap();
        decode_request(&delete(good)).unwrap();
    }
    assert_eq!(
        request_error(&fetch("../a")),
        "name: \"../a\" is not a dump file name (1 to 255 bytes of A-Z a-z 0-9 . _ -, \
         not starting with \".\", no \"/\")"
    );
    for bad in [
        "a/b",
        ".hidden",
        ".",
        "..",
        "",
        "/etc/passwd",
        "a\\b",
        "a b",
        "a\u{0}b",
        "ä",
        &"n".repeat(256),
    ] {
        assert!(
            request_error(&fetch(bad)).contains("is not a dump file name"),
            "{bad:?}"
        );
        assert!(
            request_error(&delete(bad)).contains("is not a dump file name"),
            "{bad:?}"
        );
    }
    assert!(!validate::is_dump_name("../a"));
    assert!(validate::is_interface_name("eth0"));
}

#[test]
fn responses_are_bounded_too() {
    let bad_name = Response::Dumps {
        files: vec![
            DumpFile {
                name: "ok.pcap".into(),
                bytes: 1,
                modified_s: 1,
            },
            DumpFile {
                name: "../../etc/shadow".into(),
                bytes: 1,
                modified_s: 1,
            },
        ],
    };
    assert!(response_error(&encode_response(&bad_name)).starts_with("files[1].name: "));
    let nul = Response::Error {
        message: "a\0b".into(),
    };
    assert_eq!(
        response_error(&encode_response(&nul)),
        "message: contains a NUL byte"
    );
    let long = Response::Refused {
        grant: None,
        rule: "r".into(),
        reason: "x".repeat(validate::MAX_TEXT + 1),
    };
    assert!(response_error(&encode_response(&long)).starts_with("reason: 4097 bytes"));
    let zero_ring = Response::Accepted {
        session: 1,
        effective: effective(),
        ring: RingInfo { capacity: 0 },
    };
    assert_eq!(
        response_error(&encode_response(&zero_ring)),
        "ring.capacity: must be at least 1"
    );
    let mut eff = effective();
    eff.hide.push("ip id".into());
    let bad_hide = Response::Accepted {
        session: 1,
        effective: eff,
        ring: RingInfo { capacity: 1 },
    };
    assert!(response_error(&encode_response(&bad_hide)).starts_with("effective.hide[2]: "));
    let mut eff = effective();
    eff.max_duration_s = Some(f64::NAN);
    assert!(Response::Accepted {
        session: 1,
        effective: eff,
        ring: RingInfo { capacity: 1 },
    }
    .validate()
    .unwrap_err()
    .to_string()
    .starts_with("effective.max_duration_s: "));
    let mut eff = effective();
    eff.compress_format = Some(3);
    assert_eq!(
        response_error(&encode_response(&Response::Accepted {
            session: 1,
            effective: eff,
            ring: RingInfo { capacity: 1 },
        })),
        "effective.compress_format: given for a stream that is not compressed"
    );
    let session = Response::Sessions {
        sessions: vec![SessionInfo {
            session: 1,
            uid: 0,
            interfaces: vec!["a/b".into()],
            filter: String::new(),
            counters: SessionCounters::default(),
            started_s: 0,
        }],
        more: 0,
    };
    assert!(response_error(&encode_response(&session)).starts_with("sessions[0].interfaces[0]: "));
}

#[test]
fn error_helper_always_makes_a_valid_response() {
    let huge = format!("pcap: {}\0 é", "é".repeat(10_000));
    let response = Response::error(&huge);
    response.validate().unwrap();
    match &response {
        Response::Error { message } => {
            assert!(message.len() <= validate::MAX_TEXT && message.starts_with("pcap: é"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        decode_response(&encode_response(&response)).unwrap(),
        response
    );
    // A decode error's text is itself fit to send back.
    let err = decode_request(&req(&format!(r#"{{"type":"{}"}}"#, "z".repeat(60_000)))).unwrap_err();
    Response::Error {
        message: err.to_string(),
    }
    .validate()
    .unwrap();
}

/// A compiled filter goes as 16 hex digits an instruction and comes back
/// the same; anything else is refused by the bounds.
#[test]
fn filter_programs_round_trip_and_are_bounded() {
    use ringcap_proto::validate::MAX_CLIENT_INSTRUCTIONS;
    use ringcap_proto::FilterProgram;
    let insns = vec![
        (0x28u16, 0u8, 0u8, 12u32),
        (0x15, 0, 1, 0x0800),
        (0x06, 0, 0, 65535),
        (0x06, 0, 0, 0),
    ];
    let p = FilterProgram::encode(&insns, true);
    assert_eq!(p.code.len(), 64);
    assert_eq!(p.instructions().unwrap(), insns);
    let set = |program: FilterProgram| Request::SetFilter {
        filter: "ip".into(),
        program: Some(program),
    };
    let ok = set(p.clone());
    assert_eq!(decode_request(&encode_request(&ok)).unwrap(), ok);
    for (code, why) in [
        ("", "1 to"),
        ("0028000000000000c", "16-digit"),
        ("0028000000000000000C", "hex"),
        ("002800000000000g", "hex"),
    ] {
        let bad = set(FilterProgram {
            code: code.into(),
            tagged: false,
        });
        let e = decode_request(&encode_request(&bad))
            .unwrap_err()
            .to_string();
        assert!(e.contains("program") && e.contains(why), "{code:?}: {e}");
    }
    let long = FilterProgram::encode(&vec![(6, 0, 0, 1); MAX_CLIENT_INSTRUCTIONS + 1], false);
    let e = decode_request(&encode_request(&set(long)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("2048"), "{e}");
}

/// Flow requests: timeouts and table size within the hard limits, and only
/// where flow records can go (the session's ring); unknown keys refused.
#[test]
fn flow_requests_are_bounded() {
    let f = |a: u32, i: u32, n: u32| {
        format!(r#"{{"active_timeout_s":{a},"idle_timeout_s":{i},"max_flows":{n}}}"#)
    };
    open_ok("flows", &f(1, 1, 1));
    open_ok("flows", &f(86_400, 86_400, 1 << 22));
    open_ok(
        "flows",
        r#"{"active_timeout_s":60,"idle_timeout_s":15,"max_flows":100,"packets":false}"#,
    );
    assert_eq!(
        open_refused("flows", &f(0, 15, 100)),
        "flows.active_timeout_s: 0 s; from 1 to 86400 s"
    );
    assert!(open_refused("flows", &f(60, 86_401, 100)).starts_with("flows.idle_timeout_s"));
    assert_eq!(
        open_refused("flows", &f(60, 15, (1 << 22) + 1)),
        "flows.max_flows: 4194305 flows; from 1 to 4194304"
    );
    assert!(open_refused("flows", &f(60, 15, 0)).starts_with("flows.max_flows"));
    assert!(
        open_refused("flows", r#"{"active_timeout_s":60,"idle_timeout_s":15}"#)
            .contains("max_flows")
    );
    assert!(open_refused(
        "flows",
        r#"{"active_timeout_s":60,"idle_timeout_s":15,"max_flows":1,"table":1}"#
    )
    .contains("table"));
    // Not with a dump or an inject-only session: their rings carry no records.
    let dump = req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"bytes":96},
            "format":"pcap","compress":false,"dump":{},
            "flows":{"active_timeout_s":60,"idle_timeout_s":15,"max_flows":1}}"#,
    );
    assert!(decode_request(&dump)
        .unwrap_err()
        .to_string()
        .starts_with("flows: "));
    let only = req(
        r#"{"type":"open","interfaces":["eth0"],"filter":"","snaplen":{"bytes":96},
            "format":"pcap","compress":true,
            "flows":{"active_timeout_s":60,"idle_timeout_s":15,"max_flows":1,"packets":false}}"#,
    );
    assert!(decode_request(&only)
        .unwrap_err()
        .to_string()
        .contains("flow records only"));
}
