//! Fuzz target: arbitrary bytes as one injecting session. The first byte
//! picks a grant (filter and settable fields); the rest is cut into frames
//! at each 0xff 0xfe pair. The guard may refuse anything but never panic;
//! what it lets through has the interface's MAC, fits the interface and
//! matches the grant's filter as libpcap's interpreter judges it, and a
//! refusal names its rule.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ringcap_inject::{Guard, Identity};
use ringcap_policy::{InjectGrant, Policy};
use std::sync::OnceLock;

const GRANTS: &[(&str, &str)] = &[
    ("", ""),
    ("udp", ""),
    ("ip", "\"payload\""),
    ("ip6", "\"payload\", \"ipv6.hlim\", \"ipv6.flow\""),
    ("tcp", "\"tcp.flags\", \"tcp.seq\""),
    ("icmp or icmp6", "\"icmp.id\", \"icmp.seq\""),
    ("udp dst portrange 33434-33534", "\"ip.ttl\", \"ip.id\", \"udp.dport\""),
    ("arp", ""),
];

fn grants() -> &'static Vec<InjectGrant> {
    static G: OnceLock<Vec<InjectGrant>> = OnceLock::new();
    G.get_or_init(|| {
        GRANTS
            .iter()
            .map(|(filter, settable)| {
                let text = format!(
                    "[[grant]]\nusers = [\"root\"]\ninterfaces = [\"x\"]\n[grant.inject]\n\
                     filter = {filter:?}\nsettable = [{settable}]\nmax_packets_per_second = 1\n"
                );
                let p = Policy::from_toml(&text).expect("a fuzz grant");
                p.grants[0].inject.clone().expect("inject")
            })
            .collect()
    })
}

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let grant = &grants()[usize::from(pick) % GRANTS.len()];
    let identity = Identity {
        mac: MAC,
        ipv4: Some([198, 18, 0, 1]),
        ipv6: (pick & 0x80 != 0).then_some([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        mtu: 1500,
        index: 1,
    };
    let mut guard = Guard::new(grant, identity).expect("guard");
    let mut start = 0;
    let mut frames = Vec::new();
    for i in 0..rest.len() {
        if rest[i] == 0xff && rest.get(i + 1) == Some(&0xfe) {
            frames.push(&rest[start..i]);
            start = i + 2;
        }
    }
    frames.push(&rest[start.min(rest.len())..]);
    for f in frames {
        let mut frame = f.to_vec();
        match guard.check(&mut frame) {
            Ok(_) => {
                assert_eq!(frame[6..12], MAC);
                assert!(frame.len() <= 1514);
                assert!(grant.program.run(&frame, frame.len() as u32) > 0);
            }
            Err(r) => assert!(!r.rule.is_empty() && !r.reason.is_empty()),
        }
    }
});
