//! The planner reads text from ringcapd's unprivileged clients (the label of
//! a retrieval's filter), inside the daemon: for every input it must return,
//! without panicking, in bounded time and stack, with a bounded tree.

use proptest::prelude::*;
use ringcap_index::plan::{plan, Expr, MAX_DEPTH, MAX_TERMS};

fn size(e: &Expr) -> (usize, usize) {
    match e {
        Expr::All | Expr::Key { .. } => (1, 1),
        Expr::Not(a) => {
            let (n, d) = size(a);
            (n + 1, d + 1)
        }
        Expr::And(a, b) | Expr::Or(a, b) => {
            let (na, da) = size(a);
            let (nb, db) = size(b);
            (na + nb + 1, da.max(db) + 1)
        }
    }
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("host".to_string()),
        Just("net".to_string()),
        Just("port".to_string()),
        Just("portrange".to_string()),
        Just("proto".to_string()),
        Just("vlan".to_string()),
        Just("src".to_string()),
        Just("dst".to_string()),
        Just("tcp".to_string()),
        Just("udp".to_string()),
        Just("ip6".to_string()),
        Just("and".to_string()),
        Just("or".to_string()),
        Just("not".to_string()),
        Just("!".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just("&&".to_string()),
        Just("||".to_string()),
        Just("mask".to_string()),
        Just("198.18.0.1".to_string()),
        Just("198.18".to_string()),
        Just("2001:db8::1".to_string()),
        Just("53".to_string()),
        Just("1-65535".to_string()),
        "[ -~]{0,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn any_token_soup_gives_a_bounded_plan(words in proptest::collection::vec(word(), 0..80)) {
        let e = plan(&words.join(" "));
        let (n, d) = size(&e);
        prop_assert!(n <= 4 * MAX_TERMS + 2 * MAX_DEPTH, "{n} nodes");
        prop_assert!(d <= MAX_TERMS + MAX_DEPTH + 1, "depth {d}");
    }

    #[test]
    fn any_text_is_read_without_panicking(text in "\\PC{0,300}") {
        let _ = plan(&text);
    }
}

/// Deep nesting and long chains, on a small stack: a plan, not an overflow.
#[test]
fn deep_and_long_filters_stay_small() {
    let inputs = vec![
        "(".repeat(20_000) + "host 198.18.0.1" + &")".repeat(20_000),
        "not ".repeat(20_000) + "port 53",
        "! ".repeat(30_000) + "port 53",
        std::iter::repeat_n("port 53", 9000)
            .collect::<Vec<_>>()
            .join(" or "),
        "host 198.18.0.1 ".repeat(10_000),
    ];
    let t = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            for i in &inputs {
                let e = plan(i);
                assert!(size(&e).0 <= 4 * MAX_TERMS + 2 * MAX_DEPTH);
            }
        })
        .unwrap();
    t.join().expect("planned on a 256 KiB stack");
    // Within the bounds, still narrowed.
    let nested = "(".repeat(MAX_DEPTH - 1) + "port 53" + &")".repeat(MAX_DEPTH - 1);
    assert!(matches!(plan(&nested), Expr::Key { .. }));
}
