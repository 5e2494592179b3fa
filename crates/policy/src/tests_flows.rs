//! Tests of the flow keys of a grant (`flows`, `packets`, `max_flows`,
//! `min_flow_timeout`) and of how `decide` holds a request to them.

use crate::*;
use ringcap_proto::{FlowRequest, FlowSettings, OutputFormat, SnapRequest};
use ringcap_stages::Snap;

const HEAD: &str = "[[grant]]\nusers = [\"root\"]\ninterfaces = [\"eth0\"]\n"; // lines 1-3

fn grant_policy(extra: &str) -> Policy {
    Policy::from_toml(&format!("{HEAD}{extra}")).unwrap_or_else(|e| panic!("{e}\n{extra}"))
}

fn root() -> Peer {
    Peer {
        uid: 0,
        gid: 0,
        groups: vec![],
    }
}

fn open(flows: Option<FlowRequest>) -> OpenRequest {
    OpenRequest {
        interfaces: vec!["eth0".into()],
        filter: String::new(),
        program: None,
        program_tagged: false,
        snap: SnapRequest::Bytes(262_144),
        sample: None,
        duration: None,
        count: None,
        dump: None,
        format: OutputFormat::Pcap,
        inject_only: false,
        compress: false,
        flows,
    }
}

fn flows(active: u32, idle: u32, max_flows: u32, packets: bool) -> Option<FlowRequest> {
    Some(FlowRequest {
        active_timeout_s: active,
        idle_timeout_s: idle,
        max_flows,
        packets,
    })
}

#[test]
fn flow_keys_parse_with_defaults_and_errors_have_lines() {
    let g = &grant_policy("").grants[0];
    assert_eq!(g.flow, FlowGrant::default());
    assert!(!g.flow.flows && g.flow.packets);
    let g = &grant_policy(
        "flows = true\npackets = false\nmax_flows = 1000\nmin_flow_timeout = \"30s\"\n",
    )
    .grants[0];
    assert_eq!(
        g.flow,
        FlowGrant {
            flows: true,
            packets: false,
            max_flows: 1000,
            min_timeout_s: 30
        }
    );
    for (extra, line, words) in [
        ("packets = false\n", 4, "needs flows = true"),
        ("flows = 1\n", 4, "invalid type"),
        (
            "max_flows = 0\n",
            4,
            "max_flows: expected a whole number from 1",
        ),
        ("max_flows = 4194305\n", 4, "at most 4194304"),
        ("min_flow_timeout = \"0s\"\n", 4, "from 1 s"),
        ("min_flow_timeout = 10\n", 4, "duration string"),
        ("flow = true\n", 4, "unknown field"),
    ] {
        let e = Policy::from_toml(&format!("{HEAD}{extra}")).unwrap_err();
        assert_eq!(e.line, line, "{extra}: {e}");
        assert!(e.reason.contains(words), "{extra}: {e}");
    }
}

#[test]
fn flows_and_packets_are_held_to_the_grant() {
    // Default grant: packets yes, flows no.
    let p = grant_policy("");
    let d = decide(&p, &root(), &open(None)).unwrap();
    assert!(d.packets && d.flows.is_none());
    let r = decide(&p, &root(), &open(flows(60, 15, 100, true))).unwrap_err();
    assert_eq!((r.grant, r.rule), (Some(0), "flows"), "{r}");
    let r = decide(&p, &root(), &open(flows(60, 15, 100, false))).unwrap_err();
    assert_eq!(r.rule, "flows");

    // Flows only.
    let p = grant_policy("flows = true\npackets = false\nmax_snaplen = 200\n");
    for (req, what) in [
        (open(None), "packets by default"),
        (open(flows(60, 15, 100, true)), "packets and flows"),
        (
            OpenRequest {
                dump: Some(Default::default()),
                ..open(None)
            },
            "a dump",
        ),
    ] {
        let r = decide(&p, &root(), &req).unwrap_err();
        assert_eq!((r.grant, r.rule), (Some(0), "packets"), "{what}: {r}");
        assert!(
            r.to_string().contains("refused by grant 1 (packets)"),
            "{r}"
        );
    }
    let d = decide(&p, &root(), &open(flows(60, 15, 100, false))).unwrap();
    assert!(!d.packets);
    assert_eq!(
        d.flows,
        Some(FlowSettings {
            active_timeout_s: 60,
            idle_timeout_s: 15,
            max_flows: 100,
            packets: false
        })
    );
    // Only the headers are kept for the table, never more than the cap.
    assert_eq!(d.snap, Snap::Headers { max: 200 });
    assert!(d.to_string().contains("packets no, flows active 60 s"));
    // Inject-only sessions capture nothing: not refused for packets.
    let inject = OpenRequest {
        inject_only: true,
        ..open(None)
    };
    assert!(decide(&p, &root(), &inject).is_ok());

    // Flows and packets: asked numbers narrowed by the grant, and told.
    let p = grant_policy("flows = true\nmax_flows = 500\nmin_flow_timeout = \"10s\"\n");
    let d = decide(&p, &root(), &open(flows(1, 2, 100_000, true))).unwrap();
    assert_eq!(
        d.flows,
        Some(FlowSettings {
            active_timeout_s: 10,
            idle_timeout_s: 10,
            max_flows: 500,
            packets: true
        })
    );
    assert_eq!(d.flow_budget, 500);
    assert_eq!(d.snap, Snap::Bytes(262_144));
    // A reload that takes flows away changes the decision.
    let before = d;
    let after = decide(&grant_policy(""), &root(), &before.request).unwrap_err();
    assert_eq!(after.rule, "flows");
    let same = decide(&p, &root(), &before.request).unwrap();
    assert!(same.same_as(&before));
    let narrower = grant_policy("flows = true\nmax_flows = 400\nmin_flow_timeout = \"10s\"\n");
    assert!(!decide(&narrower, &root(), &before.request)
        .unwrap()
        .same_as(&before));
}

#[test]
fn check_shows_flow_rights() {
    let d = grant_policy("flows = true\npackets = false\nmax_flows = 1000\n").describe();
    assert!(
        d.contains("flow records:   allowed, flow records ONLY (no packets); at most 1000 flows held per user"),
        "{d}"
    );
    let d = grant_policy("").describe();
    assert!(
        d.contains("flow records:   not allowed (packets only)"),
        "{d}"
    );
}
