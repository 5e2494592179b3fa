//! Tests of the policy as a whole: loading, errors with their lines, grant
//! matching, admission and the `--check` report. Users and groups are ones
//! every Debian system has: root (0), nobody (65534), group nogroup (65534).

use crate::*;
use ringcap_stages::{SampleMode, Sampling, Snap};
use std::time::Duration;

const EXAMPLE: &str = r#"socket = "/run/ringcapd/ringcapd.sock"
dump_dir = "/var/lib/ringcapd"
anonymization_key = "/etc/ringcapd/anon.key"     # used by grants that anonymize

[[grant]]
users = ["nobody"]                # and/or groups = ["netmeasure"]
interfaces = ["eth0"]
capture_filter = "not port 22"    # ANDed with every client filter
max_snaplen = "headers"           # or bytes, e.g. 128
sample = "1:1"                    # or sample_flows = "1:10"
hide = ["payload", "ip.id"]       # field masks
anonymize = true                  # Crypto-PAn on addresses
max_packets_per_second = 200000
max_bits_per_second = 500000000
max_duration = "1h"
dump_quota = "10G"
ring_size = "64M"
[grant.inject]
filter = "udp dst portrange 33434-33534"
settable = ["ip.ttl", "ip.id"]
max_packets_per_second = 100
max_bits_per_second = "1M"
burst = 10
"#;

fn policy(text: &str) -> Policy {
    Policy::from_toml(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn error(text: &str) -> PolicyError {
    match Policy::from_toml(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

/// The error is on `line` and its reason contains `words`.
fn assert_error(text: &str, line: usize, words: &str) {
    let e = error(text);
    assert_eq!(e.line, line, "{e}\n{text}");
    assert!(e.reason.contains(words), "{e:?} lacks {words:?}");
    assert!(
        e.to_string().starts_with(&format!("line {line}, column ")),
        "{e}"
    );
}

fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
    Peer {
        uid,
        gid,
        groups: groups.to_vec(),
    }
}

/// A capture request as these tests write it: the filter as text.
struct CaptureRequest {
    interface: String,
    filter: String,
    snap: Snap,
    sampling: Sampling,
}

fn request(interface: &str, filter: &str, snap: Snap, sampling: Sampling) -> CaptureRequest {
    CaptureRequest {
        interface: interface.into(),
        filter: filter.into(),
        snap,
        sampling,
    }
}

/// What a client sends for `r`: its filter compiled alone in the client's
/// process (a filter that does not compile is the client's refusal, rule
/// `filter`, no grant), as `ringcap_client::compile_filter` does. Text over
/// the length limit goes uncompiled, for the daemon to refuse.
fn open_request(r: &CaptureRequest) -> Result<OpenRequest, Refusal> {
    let compiled = !r.filter.trim().is_empty() && r.filter.len() <= MAX_CLIENT_FILTER_LEN;
    let program = if compiled {
        let p = ringcap_stages::compile(
            &r.filter,
            ETHERNET,
            MAX_SNAPLEN,
            ringcap_stages::filter::Target::Offline,
        )
        .map_err(|e| Refusal {
            grant: None,
            rule: "filter",
            reason: format!("libpcap: {}", e.message),
        })?;
        Some(p.instructions)
    } else {
        None
    };
    let snap = match r.snap {
        Snap::Bytes(n) => ringcap_proto::SnapRequest::Bytes(n),
        Snap::Headers { max } => ringcap_proto::SnapRequest::Headers { max },
    };
    let sample = match r.sampling {
        Sampling::All => None,
        Sampling::Packets { n, .. } => Some(ringcap_proto::SampleRequest::Packets(n)),
        Sampling::Flows { n } => Some(ringcap_proto::SampleRequest::Flows(n)),
    };
    Ok(OpenRequest {
        interfaces: vec![r.interface.clone()],
        filter: r.filter.clone(),
        program,
        program_tagged: ringcap_stages::filter::mentions_vlan(&r.filter),
        snap,
        sample,
        duration: None,
        count: None,
        dump: None,
        format: ringcap_proto::OutputFormat::Pcap,
        inject_only: false,
        compress: false,
        flows: None,
    })
}

/// A grant's decision on `r`: through [`decide`]'s per-grant half, after
/// the interface check `decide` does.
trait GrantAdmit {
    fn admit(&self, r: &CaptureRequest) -> Result<Decision, Refusal>;
}

impl GrantAdmit for Grant {
    fn admit(&self, r: &CaptureRequest) -> Result<Decision, Refusal> {
        if !self.allows_interface(&r.interface) {
            return Err(Refusal {
                grant: Some(self.index),
                rule: "interfaces",
                reason: crate::decide::not_allowed(self, &r.interface),
            });
        }
        crate::decide::decide_under(self, &open_request(r)?)
    }
}

/// The policy's decision on `r` from `peer`: [`decide`].
trait PolicyAdmit {
    fn admit(&self, peer: &Peer, r: &CaptureRequest) -> Result<Decision, Refusal>;
}

impl PolicyAdmit for Policy {
    fn admit(&self, peer: &Peer, r: &CaptureRequest) -> Result<Decision, Refusal> {
        decide(self, peer, &open_request(r)?)
    }
}

/// The filter of a decision as text.
fn text(d: &Decision) -> String {
    combined_filter_text(&d.framework_text, &d.request.filter)
}

const NOBODY: u32 = 65534;

// ---- loading ----

#[test]
fn the_issue_example_loads_with_every_key() {
    let p = policy(EXAMPLE);
    assert_eq!(p.socket.to_str(), Some("/run/ringcapd/ringcapd.sock"));
    assert_eq!(p.dump_dir.to_str(), Some("/var/lib/ringcapd"));
    assert_eq!(
        p.anonymization_key.as_deref().and_then(|k| k.to_str()),
        Some("/etc/ringcapd/anon.key")
    );
    assert_eq!(p.grants.len(), 1);
    let g = &p.grants[0];
    assert_eq!((g.index, g.line), (0, 5));
    assert_eq!(
        g.users,
        vec![Named {
            name: "nobody".into(),
            id: NOBODY
        }]
    );
    assert!(g.groups.is_empty());
    assert_eq!(g.interfaces, vec!["eth0".to_string()]);
    assert_eq!(g.capture_filter, "not port 22");
    assert!(!g.capture_program.instructions.is_empty());
    assert_eq!(g.max_snap, Snap::Headers { max: HEADERS_MAX });
    assert_eq!(g.sampling, Sampling::All, "1:1 is no sampling");
    assert_eq!(
        g.hide,
        vec![
            ringcap_privacy::fields::PAYLOAD,
            ringcap_privacy::fields::IP_ID
        ]
    );
    assert!(g.anonymize);
    assert_eq!(g.max_packets_per_second, Some(200_000));
    assert_eq!(g.max_bits_per_second, Some(500_000_000));
    assert_eq!(g.max_duration, Some(Duration::from_secs(3600)));
    assert_eq!(g.dump_quota, 10 << 30);
    assert_eq!(g.ring_size, 64 << 20);
    let i = g.inject.as_ref().expect("inject");
    assert_eq!(i.filter, "udp dst portrange 33434-33534");
    assert_eq!(i.settable, vec![SettableField::IpTtl, SettableField::IpId]);
    assert_eq!((i.max_packets_per_second, i.burst), (100, 10));
    assert_eq!(i.max_bits_per_second, Some(1_000_000));
}

#[test]
fn defaults_are_the_documented_ones() {
    let p = policy("[[grant]]\ngroups = [\"nogroup\"]\ninterfaces = [\"*\"]\n");
    assert_eq!(p.socket.to_str(), Some(DEFAULT_SOCKET));
    assert_eq!(p.dump_dir.to_str(), Some(DEFAULT_DUMP_DIR));
    assert_eq!(p.anonymization_key, None);
    let g = &p.grants[0];
    assert_eq!(g.groups[0].id, NOBODY);
    assert!(g.interfaces.is_empty(), "\"*\" = any");
    assert!(g.allows_interface("anything0"));
    assert_eq!(g.capture_filter, "");
    assert_eq!(g.max_snap, Snap::Bytes(MAX_SNAPLEN));
    assert_eq!(g.sampling, Sampling::All);
    assert!(g.hide.is_empty() && !g.anonymize);
    assert_eq!(
        (
            g.max_packets_per_second,
            g.max_bits_per_second,
            g.max_duration
        ),
        (None, None, None)
    );
    assert_eq!(g.dump_quota, 0, "daemon dumps need a quota");
    assert_eq!(g.ring_size, DEFAULT_RING_SIZE);
    assert!(g.inject.is_none());
    // No grant at all: a valid policy that refuses everyone.
    let empty = policy("");
    assert!(empty.grants.is_empty());
    assert!(empty.grant_for(&peer(0, 0, &[]), "eth0").is_none());
}

#[test]
fn other_value_forms() {
    let p = policy(
        r#"
[[grant]]
users = ["root"]
interfaces = ["veth0", "eth1"]
max_snaplen = 128
sample_flows = "1:10"
max_bits_per_second = "2.5G"
max_duration = "1h30m"
dump_quota = 1048576
ring_size = "1.5G"
[grant.inject]
filter = ""
max_packets_per_second = 1

[[grant]]
users = ["root"]
interfaces = ["eth2"]
sample = "1:8"
"#,
    );
    let g = &p.grants[0];
    assert_eq!(g.max_snap, Snap::Bytes(128));
    assert_eq!(g.sampling, Sampling::Flows { n: 10 });
    assert_eq!(g.max_bits_per_second, Some(2_500_000_000));
    assert_eq!(g.max_duration, Some(Duration::from_secs(5400)));
    assert_eq!(g.dump_quota, 1 << 20);
    assert_eq!(g.ring_size, 3 << 29);
    let i = g.inject.as_ref().unwrap();
    assert_eq!((i.filter.as_str(), i.burst), ("", 1));
    assert_eq!(i.max_bits_per_second, None);
    assert!(i.settable.is_empty());
    assert_eq!(
        p.grants[1].sampling,
        Sampling::Packets {
            n: 8,
            mode: SampleMode::Random
        }
    );
    assert_eq!(p.grants[1].line, 15);
}

// ---- errors, each at its line ----

const HEAD: &str = "[[grant]]\nusers = [\"root\"]\ninterfaces = [\"eth0\"]\n"; // lines 1-3

#[test]
fn misspelled_keys_are_errors() {
    assert_error(
        &format!("{HEAD}max_snaplne = 96\n"),
        4,
        "unknown field `max_snaplne`",
    );
    assert_error("sokcet = \"/x\"\n", 1, "unknown field `sokcet`");
    assert_error(
        &format!("{HEAD}[grant.inject]\nfilter = \"udp\"\nmax_packets_per_second = 1\nbrust = 3\n"),
        7,
        "unknown field `brust`",
    );
    // [grant] instead of [[grant]].
    assert!(error("[grant]\nusers = [\"root\"]\n")
        .reason
        .contains("invalid type"));
}

#[test]
fn bad_values_are_errors_at_their_line() {
    assert_error(
        &format!("{HEAD}max_snaplen = 0\n"),
        4,
        "max_snaplen: expected a number of bytes from 1 to 262144 or \"headers\"",
    );
    assert_error(
        &format!("{HEAD}max_snaplen = 300000\n"),
        4,
        "max_snaplen: expected",
    );
    assert_error(
        &format!("{HEAD}max_snaplen = \"header\"\n"),
        4,
        "max_snaplen: expected",
    );
    assert_error(&format!("{HEAD}anonymize = \"yes\"\n"), 4, "invalid type");
    assert_error(&format!("{HEAD}sample = \"2:10\"\n"), 4, "sample: ");
    assert_error(
        &format!("{HEAD}sample_flows = \"1:0\"\n"),
        4,
        "sample_flows: ",
    );
    assert_error(
        &format!("{HEAD}sample = \"1:5\"\nsample_flows = \"1:5\"\n"),
        5,
        "exclude each other",
    );
    assert_error(
        &format!("{HEAD}hide = [\"payload\", \"ip.src\"]\n"),
        4,
        "hide: unknown field \"ip.src\"; known fields: eth.addr",
    );
    assert_error(
        &format!("{HEAD}max_packets_per_second = 0\n"),
        4,
        "max_packets_per_second: expected a whole number from 1",
    );
    assert_error(
        &format!("{HEAD}max_bits_per_second = \"fast\"\n"),
        4,
        "max_bits_per_second: expected a rate",
    );
    assert_error(
        &format!("{HEAD}max_duration = \"90\"\n"),
        4,
        "max_duration: expected a duration",
    );
    assert_error(
        &format!("{HEAD}max_duration = 90\n"),
        4,
        "max_duration: expected a duration string",
    );
    assert_error(
        &format!("{HEAD}max_duration = \"0s\"\n"),
        4,
        "longer than 0",
    );
    assert_error(
        &format!("{HEAD}dump_quota = \"10X\"\n"),
        4,
        "dump_quota: expected a size",
    );
    assert_error(
        &format!("{HEAD}dump_quota = -1\n"),
        4,
        "dump_quota: expected a size",
    );
    assert_error(
        &format!("{HEAD}ring_size = \"100K\"\n"),
        4,
        "ring_size: must be from 1 MiB to 4 GiB",
    );
    assert_error(
        &format!("{HEAD}ring_size = \"5G\"\n"),
        4,
        "ring_size: must be from",
    );
    assert_error(
        "socket = \"relative.sock\"\n",
        1,
        "socket: must be an absolute path",
    );
    assert_error(
        "\n\ndump_dir = \"var/lib\"\n",
        3,
        "dump_dir: must be an absolute path",
    );
    assert_error(
        &format!("{HEAD}capture_filter = \"port banana\"\n"),
        4,
        "capture_filter: libpcap: ",
    );
    assert!(error(&format!("{HEAD}capture_filter = \"port banana\"\n"))
        .reason
        .contains("banana"));
}

#[test]
fn who_and_where_are_required_and_must_exist() {
    assert_error("\n[[grant]]\ninterfaces = [\"eth0\"]\n", 2, "names no one");
    assert_error(
        "[[grant]]\nusers = []\ngroups = []\ninterfaces = [\"eth0\"]\n",
        1,
        "names no one",
    );
    assert_error(
        "[[grant]]\nusers = [\"root\"]\n",
        1,
        "interfaces: a grant must name at least one interface",
    );
    assert_error(
        "[[grant]]\nusers = [\"root\"]\ninterfaces = []\n",
        3,
        "interfaces: a grant must name",
    );
    assert_error(
        "[[grant]]\nusers = [\"root\"]\ninterfaces = [\"eth0\", \"bad/name\"]\n",
        3,
        "not an interface name",
    );
    assert_error(
        "[[grant]]\nusers = [\"root\"]\ninterfaces = [\"averyverylongname0\"]\n",
        3,
        "not an interface name",
    );
    let e =
        error("[[grant]]\nusers = [\"root\", \"no-such-user-ringcap\"]\ninterfaces = [\"eth0\"]\n");
    assert_eq!((e.line, e.column), (2, 18));
    assert!(
        e.reason
            .contains("users: no user named \"no-such-user-ringcap\""),
        "{e}"
    );
    assert_error(
        "[[grant]]\ninterfaces = [\"eth0\"]\ngroups = [\"no-such-group-ringcap\"]\n",
        3,
        "groups: no group named \"no-such-group-ringcap\"",
    );
}

#[test]
fn anonymize_needs_a_key_and_inject_needs_a_filter_and_rate() {
    assert_error(
        &format!("{HEAD}anonymize = true\n"),
        4,
        "anonymize: needs anonymization_key",
    );
    // anonymize = false needs no key.
    policy(&format!("{HEAD}anonymize = false\n"));
    assert_error(
        &format!("{HEAD}[grant.inject]\nmax_packets_per_second = 1\n"),
        4,
        "inject.filter: required",
    );
    assert_error(
        &format!("{HEAD}[grant.inject]\nfilter = \"udp\"\n"),
        4,
        "inject.max_packets_per_second: required",
    );
    assert_error(
        &format!("{HEAD}[grant.inject]\nfilter = \"udp port x\"\nmax_packets_per_second = 1\n"),
        5,
        "inject.filter: libpcap: ",
    );
    assert_error(
        &format!("{HEAD}[grant.inject]\nfilter = \"udp\"\nsettable = [\"ip.ttl\", \"ip.addr\"]\nmax_packets_per_second = 1\n"),
        6,
        "inject.settable: unknown field \"ip.addr\"",
    );
    assert_error(
        &format!("{HEAD}[grant.inject]\nfilter = \"udp\"\nmax_packets_per_second = 1\nmax_bits_per_second = \"1X\"\n"),
        7,
        "inject.max_bits_per_second: ",
    );
    assert_error(
        &format!("{HEAD}[grant.inject]\nfilter = \"udp\"\nmax_packets_per_second = 1\nburst = 0\n"),
        7,
        "inject.burst: expected a whole number from 1",
    );
}

#[test]
fn errors_name_the_line_in_later_grants() {
    let text = format!(
        "{HEAD}\n[[grant]]\ngroups = [\"nogroup\"]\ninterfaces = [\"*\"]\nmax_snaplen = -5\n"
    );
    assert_error(&text, 8, "max_snaplen");
}

#[test]
fn load_reads_a_file_and_reports_unreadable_ones() {
    let dir = std::env::temp_dir().join(format!("ringcap-policy-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("policy.toml");
    std::fs::write(&path, EXAMPLE).unwrap();
    assert_eq!(Policy::load(&path).unwrap().grants.len(), 1);
    let e = Policy::load(&dir.join("missing.toml")).unwrap_err();
    assert_eq!(e.line, 0);
    assert!(e.to_string().starts_with("cannot read it: "), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- which grant applies ----

const LAYERED: &str = r#"
[[grant]]                       # 1: root on eth0 only, narrow
users = ["root"]
interfaces = ["eth0"]
max_snaplen = 64

[[grant]]                       # 2: group nogroup (nobody's) on eth0 and eth1
groups = ["nogroup"]
interfaces = ["eth0", "eth1"]
max_snaplen = 96

[[grant]]                       # 3: root anywhere, headers only
users = ["root"]
interfaces = ["*"]
max_snaplen = "headers"
"#;

#[test]
fn first_matching_grant_wins_and_no_match_is_deny() {
    let p = policy(LAYERED);
    let root = peer(0, 0, &[]);
    let nobody = peer(NOBODY, NOBODY, &[]);
    let idx = |peer: &Peer, i: &str| p.grant_for(peer, i).map(|(n, g)| (n, g.index));

    // root on eth0: the first grant, though the third also matches.
    assert_eq!(idx(&root, "eth0"), Some((0, 0)));
    // root on eth1: grant 1 names root but not eth1, grant 2 does not name
    // root: falls through to grant 3.
    assert_eq!(idx(&root, "eth1"), Some((2, 2)));
    assert_eq!(idx(&root, "lo"), Some((2, 2)));
    // nobody by primary group.
    assert_eq!(idx(&nobody, "eth1"), Some((1, 1)));
    // nobody elsewhere: no grant.
    assert_eq!(idx(&nobody, "eth2"), None);
    // Another user whose supplementary groups include nogroup.
    assert_eq!(idx(&peer(1000, 1000, &[27, NOBODY]), "eth0"), Some((1, 1)));
    // A user with a gid no grant names.
    assert_eq!(idx(&peer(1000, 1000, &[27]), "eth0"), None);
    // Root's group alone does not make a peer root: grants 1 and 3 name the user.
    assert_eq!(idx(&peer(1000, 0, &[]), "eth0"), None);
}

#[test]
fn policy_admit_uses_the_first_match_and_says_default_deny() {
    let p = policy(LAYERED);
    let r = request("eth0", "", Snap::Bytes(1500), Sampling::All);
    let e = p.admit(&peer(0, 0, &[]), &r).unwrap();
    assert_eq!((e.grant, e.snap), (0, Snap::Bytes(64)));
    let e = p
        .admit(
            &peer(0, 0, &[]),
            &request("eth9", "", Snap::Bytes(1500), Sampling::All),
        )
        .unwrap();
    assert_eq!((e.grant, e.snap), (2, Snap::Headers { max: 256 }));
    let refused = p.admit(&peer(1000, 1000, &[]), &r).unwrap_err();
    assert_eq!((refused.grant, refused.rule), (None, "default deny"));
    assert!(refused.reason.contains("uid 1000"), "{refused}");
    assert!(refused.to_string().starts_with("refused (default deny): "));
}

// ---- admission ----

/// Ethernet + IPv4 + TCP or UDP with the given ports, and an ARP frame.
fn ipv4(proto: u8, sport: u16, dport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 60, 0, 1, 0x40, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0; 16]);
    f.extend_from_slice(&[0xa5; 200]);
    f
}

fn frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for proto in [6u8, 17, 1] {
        for (s, d) in [
            (22u16, 40000u16),
            (40000, 22),
            (53, 1234),
            (33434, 33434),
            (80, 443),
        ] {
            out.push(ipv4(proto, s, d));
        }
    }
    let mut arp = vec![0u8; 12];
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0; 28]);
    out.push(arp);
    out
}

fn one_grant(extra: &str) -> Grant {
    policy(&format!("{HEAD}{extra}")).grants.remove(0)
}

#[test]
fn a_filter_built_to_escape_the_and_cannot_widen() {
    let g = one_grant("capture_filter = \"not port 22\"\n");
    // Strings that would widen a textual "(framework) and (client)" do not
    // compile alone: refused with libpcap's message.
    for bad in [
        "tcp) or (udp",
        "1=1) or (1=1",
        "not (port 22",
        ") or (",
        "port 22) or (port 22",
    ] {
        let r = g
            .admit(&request("eth0", bad, Snap::Bytes(0), Sampling::All))
            .unwrap_err();
        // Refused where it is compiled, in the client: no grant is involved.
        assert_eq!((r.grant, r.rule), (None, "filter"), "{bad}");
        assert!(r.reason.starts_with("libpcap: "), "{r}");
        assert!(r.to_string().starts_with("refused (filter): libpcap: "));
    }
    // A NUL cannot cut the text short either.
    let r = g
        .admit(&request(
            "eth0",
            "tcp\0) or (port 22",
            Snap::Bytes(0),
            Sampling::All,
        ))
        .unwrap_err();
    assert_eq!(r.rule, "filter");
    // Filters that compile and accept everything stay inside the framework.
    let port22 = ipv4(6, 40000, 22);
    for wide in [
        "",
        "1=1",
        "port 22",
        "ip or not ip",
        "greater 0 or less 100000",
    ] {
        let e = g
            .admit(&request("eth0", wide, Snap::Bytes(0), Sampling::All))
            .unwrap();
        assert_eq!(
            e.filter.combined.run(&port22, port22.len() as u32),
            0,
            "{wide}"
        );
        for f in frames() {
            let framework = g.capture_program.run(&f, f.len() as u32);
            let both = e.filter.combined.run(&f, f.len() as u32);
            assert!(framework > 0 || both == 0, "{wide} widened on {f:02x?}");
        }
    }
    // And a narrowing client filter narrows.
    let e = g
        .admit(&request("eth0", "udp", Snap::Bytes(0), Sampling::All))
        .unwrap();
    let tcp = ipv4(6, 80, 443);
    let udp = ipv4(17, 53, 1234);
    assert_eq!(e.filter.combined.run(&tcp, tcp.len() as u32), 0);
    assert!(e.filter.combined.run(&udp, udp.len() as u32) > 0);
    assert_eq!(text(&e), "(not port 22) and (udp)");
}

#[test]
fn combined_filter_text_drops_empty_sides() {
    assert_eq!(
        combined_filter_text("not port 22", "udp"),
        "(not port 22) and (udp)"
    );
    assert_eq!(combined_filter_text("", "udp"), "udp");
    assert_eq!(combined_filter_text("tcp", "  "), "tcp");
    assert_eq!(combined_filter_text("", ""), "");
}

#[test]
fn snap_above_the_cap_is_capped() {
    let g = one_grant("max_snaplen = 96\n");
    let f = ipv4(17, 53, 1234);
    let admit = |snap| {
        g.admit(&request("eth0", "udp", snap, Sampling::All))
            .unwrap()
    };
    let e = admit(Snap::Bytes(1500));
    assert_eq!(e.snap, Snap::Bytes(96));
    assert_eq!(
        e.filter.combined.run(&f, f.len() as u32),
        96,
        "the kernel cuts at the cap"
    );
    assert_eq!(admit(Snap::Bytes(40)).snap, Snap::Bytes(40));
    assert_eq!(
        admit(Snap::Bytes(40))
            .filter
            .combined
            .run(&f, f.len() as u32),
        40
    );
    assert_eq!(
        admit(Snap::Bytes(0)).snap,
        Snap::Bytes(96),
        "0 = as much as allowed"
    );
    assert_eq!(
        admit(Snap::Headers { max: 256 }).snap,
        Snap::Headers { max: 96 }
    );

    let h = one_grant("max_snaplen = \"headers\"\n");
    let admit = |snap| {
        h.admit(&request("eth0", "", snap, Sampling::All))
            .unwrap()
            .snap
    };
    assert_eq!(admit(Snap::Bytes(1500)), Snap::Headers { max: 256 });
    assert_eq!(admit(Snap::Bytes(128)), Snap::Headers { max: 128 });
    assert_eq!(admit(Snap::Headers { max: 40 }), Snap::Headers { max: 40 });
    assert_eq!(
        admit(Snap::Headers { max: 1000 }),
        Snap::Headers { max: 256 }
    );
    // The program keeps enough for the header walk (max + slack); the daemon
    // cuts at the headers before the client sees anything.
    let e = h
        .admit(&request("eth0", "", Snap::Bytes(128), Sampling::All))
        .unwrap();
    assert_eq!(
        e.filter.combined.run(&f, f.len() as u32),
        Snap::Headers { max: 128 }.kernel_snaplen()
    );
    // No cap: the request as it is.
    let open = one_grant("");
    assert_eq!(
        open.admit(&request("eth0", "", Snap::Bytes(1500), Sampling::All))
            .unwrap()
            .snap,
        Snap::Bytes(1500)
    );
}

#[test]
fn cap_snap_is_never_wider_than_either_side() {
    let snaps = [
        Snap::Bytes(1),
        Snap::Bytes(64),
        Snap::Bytes(300),
        Snap::Bytes(MAX_SNAPLEN),
        Snap::Headers { max: 40 },
        Snap::Headers { max: 256 },
    ];
    let bound = |s: Snap| match s {
        Snap::Bytes(n) | Snap::Headers { max: n } => n,
    };
    for r in snaps {
        for c in snaps {
            let e = cap_snap(r, c);
            assert!(bound(e) <= bound(r) && bound(e) <= bound(c), "{r:?} {c:?}");
            let headers = matches!(r, Snap::Headers { .. }) || matches!(c, Snap::Headers { .. });
            assert_eq!(matches!(e, Snap::Headers { .. }), headers, "{r:?} {c:?}");
        }
    }
}

#[test]
fn an_interface_outside_the_grant_is_refused() {
    let g = one_grant("");
    let r = g
        .admit(&request("eth1", "", Snap::Bytes(0), Sampling::All))
        .unwrap_err();
    assert_eq!((r.grant, r.rule), (Some(0), "interfaces"));
    assert!(r.reason.contains("\"eth1\""), "{r}");
    assert!(r.reason.contains("eth0"), "{r}");
}

#[test]
fn sampling_is_the_stricter_of_request_and_grant() {
    let packets = |n| Sampling::Packets {
        n,
        mode: SampleMode::Random,
    };
    let count = |n| Sampling::Packets {
        n,
        mode: SampleMode::Count,
    };
    let g = one_grant("sample = \"1:10\"\n");
    let admit = |s| g.admit(&request("eth0", "", Snap::Bytes(0), s));
    assert_eq!(admit(Sampling::All).unwrap().sampling, packets(10));
    assert_eq!(admit(packets(4)).unwrap().sampling, packets(10));
    assert_eq!(admit(packets(100)).unwrap().sampling, packets(100));
    // (Count mode, every Nth packet, is not something a client can ask the
    // daemon for: the wire has 1:N packets, random, only.)
    assert_eq!(force_sampling(count(20), packets(10)), Ok(count(20)));
    assert_eq!(admit(count(1)).unwrap().sampling, packets(10));
    let r = admit(Sampling::Flows { n: 100 }).unwrap_err();
    assert_eq!((r.grant, r.rule), (Some(0), "sample"));

    let f = one_grant("sample_flows = \"1:10\"\n");
    let admit = |s| f.admit(&request("eth0", "", Snap::Bytes(0), s));
    assert_eq!(
        admit(Sampling::All).unwrap().sampling,
        Sampling::Flows { n: 10 }
    );
    assert_eq!(
        admit(Sampling::Flows { n: 3 }).unwrap().sampling,
        Sampling::Flows { n: 10 }
    );
    assert_eq!(
        admit(Sampling::Flows { n: 30 }).unwrap().sampling,
        Sampling::Flows { n: 30 }
    );
    assert_eq!(
        admit(packets(1)).unwrap().sampling,
        Sampling::Flows { n: 10 }
    );
    assert_eq!(admit(packets(5)).unwrap_err().rule, "sample_flows");

    // Nothing forced: the request as it is.
    let open = one_grant("");
    assert_eq!(
        open.admit(&request(
            "eth0",
            "",
            Snap::Bytes(0),
            Sampling::Flows { n: 7 }
        ))
        .unwrap()
        .sampling,
        Sampling::Flows { n: 7 }
    );
    assert_eq!(force_sampling(count(3), Sampling::All), Ok(count(3)));
}

#[test]
fn the_grants_limits_are_passed_through() {
    let p = policy(EXAMPLE);
    let e = p
        .admit(
            &peer(NOBODY, NOBODY, &[]),
            &request("eth0", "udp", Snap::Bytes(1500), Sampling::All),
        )
        .unwrap();
    assert_eq!(e.grant, 0);
    assert_eq!(e.request.interfaces, ["eth0"]);
    assert_eq!(text(&e), "(not port 22) and (udp)");
    assert_eq!(e.snap, Snap::Headers { max: 256 });
    assert_eq!(e.sampling, Sampling::All);
    assert_eq!(
        e.hide,
        vec![
            ringcap_privacy::fields::PAYLOAD,
            ringcap_privacy::fields::IP_ID
        ]
    );
    assert!(e.anonymize);
    assert_eq!(e.max_packets_per_second, Some(200_000));
    assert_eq!(e.max_bits_per_second, Some(500_000_000));
    assert_eq!(e.duration, Some(Duration::from_secs(3600)));
    assert_eq!(e.dump_quota, 10 << 30);
    assert_eq!(e.ring_size, 64 << 20);
    let line = e.to_string();
    for part in [
        "grant 1,",
        "filter \"(not port 22) and (udp)\"",
        "snap headers, at most 256 bytes",
        "hide payload,ip.id",
        "anonymize yes",
        "rate 200000 packets/s, 500000000 bits/s",
        "duration 1h",
        "dump quota 10 GiB",
        "ring 64 MiB",
    ] {
        assert!(line.contains(part), "{line} lacks {part}");
    }
}

#[test]
fn oversized_client_filters_are_refused_before_libpcap() {
    let g = one_grant("");
    let long = "tcp or ".repeat(MAX_CLIENT_FILTER_LEN / 7 + 1) + "udp";
    assert!(long.len() > MAX_CLIENT_FILTER_LEN);
    let r = g
        .admit(&request("eth0", &long, Snap::Bytes(0), Sampling::All))
        .unwrap_err();
    assert_eq!(r.rule, "filter");
    assert!(r.reason.contains("bytes long"), "{r}");
}

// ---- the --check report ----

#[test]
fn describe_shows_each_grant_as_understood() {
    let text = format!(
        "{EXAMPLE}\n{}",
        LAYERED.replace("[[grant]]                       # 1", "[[grant]] # 1")
    );
    let d = policy(&text).describe();
    for part in [
        "socket:            /run/ringcapd/ringcapd.sock",
        "anonymization_key: /etc/ringcapd/anon.key",
        "first that names the client",
        "default deny",
        "grant 1 of 4 (line 5)",
        "users nobody (uid 65534)",
        "interfaces:     eth0",
        "not port 22 (",
        "ANDed with each client's filter",
        "snap cap:       headers, at most 256 bytes",
        "sampling:       none forced",
        "hidden fields:  payload, ip.id",
        "anonymize:      addresses, with Crypto-PAn",
        "rate:           200000 packets/s, 500000000 bits/s",
        "duration:       at most 1h",
        "dump quota:     10 GiB",
        "ring size:      64 MiB",
        "inject:         frames matching \"udp dst portrange 33434-33534\"; settable: ip.ttl, ip.id; 100 packets/s, 1000000 bits/s, burst 10",
        "grant 2 of 4",
        "users root (uid 0)",
        "snap cap:       64 bytes",
        "groups nogroup (gid 65534)",
        "interfaces:     any",
        "rate:           unlimited",
        "dump quota:     daemon dumps not allowed",
        "inject:         not allowed",
    ] {
        assert!(d.contains(part), "--check output lacks {part:?}:\n{d}");
    }
    assert!(policy("")
        .describe()
        .contains("no grants: every client is refused"));
}
