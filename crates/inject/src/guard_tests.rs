//! The guard's own small checks (the shapes are in tests/guard_cases.rs,
//! the property in tests/guard_property.rs).

use super::*;
use ringcap_policy::Policy;

fn guard(inject: &str, identity: Identity) -> Guard {
    let text =
        format!("[[grant]]\nusers = [\"root\"]\ninterfaces = [\"x\"]\n[grant.inject]\n{inject}");
    let p = Policy::from_toml(&text).unwrap_or_else(|e| panic!("{e}"));
    Guard::new(p.grants[0].inject.as_ref().unwrap(), identity).unwrap()
}

#[test]
fn a_family_the_interface_has_no_address_of_is_refused() {
    let id = Identity {
        mac: [2, 0, 0, 0, 0, 1],
        ipv4: None,
        ipv6: None,
        mtu: 1500,
        index: 1,
    };
    let mut g = guard("filter = \"\"\nmax_packets_per_second = 1\n", id);
    let ep = ringcap_testkit::frames::Endpoints::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .with_ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into());
    let mut f = ringcap_testkit::frames::udp4(&ep, 0, 4000, 33434, 10);
    assert_eq!(g.check(&mut f).unwrap_err().rule, "source");
}

#[test]
fn sizes_outside_the_interface_are_refused() {
    let id = Identity {
        mac: [2, 0, 0, 0, 0, 1],
        ipv4: Some([198, 18, 0, 1]),
        ipv6: None,
        mtu: 100,
        index: 1,
    };
    let mut g = guard("filter = \"\"\nmax_packets_per_second = 1\n", id);
    assert_eq!(g.check(&mut [0u8; 13]).unwrap_err().rule, "size");
    assert_eq!(g.check(&mut [0u8; 115]).unwrap_err().rule, "size");
    assert_eq!(g.check(&mut [0u8; 114]).unwrap_err().rule, "ethertype");
}
