//! Fuzz target: arbitrary bytes into both decoders (the daemon's and the
//! client's), and into the client's flow-chunk decoder. Neither may panic; whatever they accept must validate and
//! survive encode → decode unchanged, and error texts must stay bounded and
//! free of control characters (they go into logs and back to the client).

#![no_main]

use libfuzzer_sys::fuzz_target;
use ringcap_proto::{decode_request, decode_response, encode_request, encode_response};

fuzz_target!(|data: &[u8]| {
    match decode_request(data) {
        Ok(request) => {
            request.validate().expect("a decoded request validates");
            let again = decode_request(&encode_request(&request)).expect("re-encoding decodes");
            assert_eq!(again, request);
        }
        Err(e) => check_error_text(&e.to_string()),
    }
    match decode_response(data) {
        Ok(response) => {
            response.validate().expect("a decoded response validates");
            let again = decode_response(&encode_response(&response)).expect("re-encoding decodes");
            assert_eq!(again, response);
        }
        Err(e) => check_error_text(&e.to_string()),
    }
    // A flow chunk (a ring chunk of 0 packets): never a panic, and what it
    // accepts is whole records.
    let mut n = 0u64;
    if let Ok(count) = ringcap_proto::decode_flow_chunk(data, |_| n += 1) {
        assert_eq!(count, n);
        assert_eq!(
            data.len() as u64,
            16 + 128 * n,
            "a flow chunk of {n} records"
        );
    }
});

fn check_error_text(text: &str) {
    assert!(text.len() < 2048, "error text of {} bytes", text.len());
    assert!(
        !text.chars().any(char::is_control),
        "control character in {text:?}"
    );
}
