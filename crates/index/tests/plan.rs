//! The planner reads tcpdump's grammar as libpcap does (and/or equal and
//! left-grouped, not tightest, bare values inheriting qualifiers), and
//! refuses to narrow what would shift libpcap's offsets.

use ringcap_index::keys::Kind;
use ringcap_index::{plan, Expr};

fn k(kind: Kind, lo: u128, hi: u128) -> Expr {
    Expr::Key { kind, lo, hi }
}
fn v4(s: &str) -> Expr {
    let n = u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()) as u128;
    k(Kind::V4, n, n)
}
fn and(a: Expr, b: Expr) -> Expr {
    Expr::And(Box::new(a), Box::new(b))
}
fn or(a: Expr, b: Expr) -> Expr {
    Expr::Or(Box::new(a), Box::new(b))
}
fn port(p: u16) -> Expr {
    k(Kind::Port, p as u128, p as u128)
}
fn proto(p: u8) -> Expr {
    k(Kind::Proto, p as u128, p as u128)
}

#[test]
fn grammar_as_libpcap() {
    assert_eq!(plan("host 1.2.3.4"), v4("1.2.3.4"));
    assert_eq!(plan("1.2.3.4"), v4("1.2.3.4"));
    assert_eq!(plan("src and dst host 1.2.3.4"), v4("1.2.3.4"));
    assert_eq!(plan("ip src or dst 1.2.3.4"), v4("1.2.3.4"));
    assert_eq!(
        plan("host 1.2.3.4 or 5.6.7.8"),
        or(v4("1.2.3.4"), v4("5.6.7.8"))
    );
    // and/or bind equally, to the left.
    assert_eq!(
        plan("tcp or udp and port 53"),
        and(or(proto(6), proto(17)), port(53))
    );
    assert_eq!(
        plan("tcp or (udp and port 53)"),
        or(proto(6), and(proto(17), port(53)))
    );
    // not binds tightest; a bare value after it inherits, un-negated.
    assert_eq!(
        plan("not host 1.2.3.4 and 5.6.7.8"),
        and(Expr::Not(Box::new(v4("1.2.3.4"))), v4("5.6.7.8"))
    );
    assert_eq!(
        plan("! tcp && port 80 || 443"),
        or(and(Expr::Not(Box::new(proto(6))), port(80)), port(443))
    );
    assert_eq!(plan("tcp port 80 or 443"), or(port(80), port(443)));
    assert_eq!(
        plan("host 1.2.3.4 and (5.6.7.8 or 9.9.9.9)"),
        and(v4("1.2.3.4"), or(v4("5.6.7.8"), v4("9.9.9.9")))
    );
    assert_eq!(plan("portrange 20-10"), k(Kind::Port, 10, 20));
    assert_eq!(plan("ip proto \\udp"), proto(17));
    assert_eq!(plan("proto 132"), proto(132));
    assert_eq!(plan("icmp6"), proto(58));
    assert_eq!(plan("net 10"), k(Kind::V4, 0x0a00_0000, 0x0aff_ffff));
    assert_eq!(
        plan("net 10.1.2.0/24"),
        k(Kind::V4, 0x0a01_0200, 0x0a01_02ff)
    );
    assert_eq!(
        plan("net 10.1.0.0 mask 255.255.0.0"),
        k(Kind::V4, 0x0a01_0000, 0x0a01_ffff)
    );
    assert_eq!(
        plan("net fd00::/8"),
        k(Kind::V6, 0xfd << 120, (0xfe << 120) - 1)
    );
    assert_eq!(
        plan("vlan 100 and udp"),
        and(k(Kind::Vlan, 100, 100), proto(17))
    );
}

#[test]
fn what_cannot_be_narrowed() {
    // Terms the index has no keys for: All, the rest still narrows.
    assert_eq!(
        plan("ether host 02:00:00:00:00:01 and port 80"),
        and(Expr::All, port(80))
    );
    assert_eq!(plan("port http"), Expr::All);
    assert_eq!(plan("ether src 1:2:3:4:5:6:7:8"), Expr::All);
    assert_eq!(plan("host example.com"), Expr::All);
    assert_eq!(plan("ip and less 100"), and(Expr::All, Expr::All));
    // Offsets moved by vlan under or/not/parens, mpls, pppoes, geneve;
    // byte offsets; unknown words; syntax errors: a scan.
    for f in [
        "vlan 100 or host 1.2.3.4",
        "not vlan 100 and host 1.2.3.4",
        "(vlan 100) and host 1.2.3.4",
        "mpls and host 1.2.3.4",
        "pppoes and host 1.2.3.4",
        "geneve and host 1.2.3.4",
        "tcp[13] & 2 != 0",
        "host 1.2.3.4 and",
        "(host 1.2.3.4",
        "tcp and 80",
        "len > 100",
        "frobnicate 1.2.3.4",
    ] {
        assert_eq!(plan(f), Expr::All, "{f}");
    }
}

/// Numbers as libpcap's scanner reads them (`tcpdump -d 'port 053'` is
/// `port 43`): a leading zero is octal, `0x` hex. Read as decimal, `053`
/// narrowed a query to port 53's groups and missed every packet of port 43.
/// A port range's numbers are read differently by libpcap versions: only
/// plain decimal narrows one.
#[test]
fn numbers_as_libpcap_reads_them() {
    assert_eq!(plan("udp port 053"), port(43));
    assert_eq!(plan("port 0x35"), port(53));
    assert_eq!(plan("port 0X35"), port(53));
    assert_eq!(plan("port 0"), port(0));
    assert_eq!(plan("vlan 010"), k(Kind::Vlan, 8, 8));
    assert_eq!(plan("vlan 0x10"), k(Kind::Vlan, 16, 16));
    assert_eq!(plan("ip proto 021"), proto(17));
    assert_eq!(plan("ip proto 0x11"), proto(17));
    assert_eq!(plan("portrange 10-20"), k(Kind::Port, 10, 20));
    // `net`: one part and a prefix length are numbers to libpcap; dotted
    // parts are decimal (tcpdump -d: `net 012` and `net 10.0.0.0/010` are
    // 10/8, `net 10.010` is 10.10/16).
    let v4net = |lo: &str, hi: &str| {
        let n = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()) as u128;
        k(Kind::V4, n(lo), n(hi))
    };
    let ten = v4net("10.0.0.0", "10.255.255.255");
    assert_eq!(plan("net 012"), ten);
    assert_eq!(plan("net 0xa"), ten);
    assert_eq!(plan("net 10"), ten);
    assert_eq!(plan("net 10.0.0.0/010"), ten);
    assert_eq!(plan("net 10.010"), v4net("10.10.0.0", "10.10.255.255"));
    let v6 = |s: &str| u128::from(s.parse::<std::net::Ipv6Addr>().unwrap());
    assert_eq!(
        plan("net 2001:db8::/040"),
        k(
            Kind::V6,
            v6("2001:db8::"),
            v6("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")
        )
    );
    for never_narrowed in [
        "portrange 010-020",
        "portrange 0x10-20",
        "port 09",
        "port 0x",
        "port +53",
        "port 70000",
        "vlan 09",
        // libpcap: 1.44.0.0/16; not narrowed here.
        "net 300",
    ] {
        assert!(
            !matches!(plan(never_narrowed), Expr::Key { .. }),
            "{never_narrowed}: {:?}",
            plan(never_narrowed)
        );
    }
}
