//! Fuzz target: arbitrary text (bytes read as UTF-8, lossily) as a
//! stenographer query for ringcap-serve's translate, with a fixed now. It
//! may not panic; its output must stay proportionate to the query, the
//! filter it makes must hold only what its primitives write (words,
//! numbers, addresses, parentheses: nothing of the client's text passes
//! through unchecked), and an error must point inside the query. The
//! filter is not compiled here: nothing reaches libpcap.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ringcap_serve::steno::translate;

/// 2025-11-26T14:00:00Z, the now `N ago` counts back from.
const NOW: u64 = 1_764_165_600_000_000_000;

fuzz_target!(|data: &[u8]| {
    let query = String::from_utf8_lossy(data);
    match translate(&query, NOW) {
        Ok(t) => {
            assert!(
                t.filter.len() <= 8 * query.len() + 64,
                "a filter of {} bytes from a query of {}",
                t.filter.len(),
                query.len()
            );
            assert!(
                t.filter
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b" .:/()".contains(&b)),
                "unexpected character in the filter {:?}",
                t.filter
            );
            // The same query, the same answer.
            assert_eq!(translate(&query, NOW).ok(), Some(t));
        }
        Err(e) => {
            assert!(e.at <= query.len(), "error at {} of {}", e.at, query.len());
            let text = e.to_string();
            assert!(
                text.len() <= query.len() + 512,
                "an error text of {} bytes for a query of {}",
                text.len(),
                query.len()
            );
        }
    }
});
