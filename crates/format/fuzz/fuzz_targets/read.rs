//! Fuzz target: arbitrary bytes as a capture file for ringcap-format's
//! Reader (pcap, pcapng or compressed, whichever the bytes look like), read
//! to its end or its first error. It may not panic, hang or allocate beyond
//! what the input justifies; what it yields must be consistent: packets of
//! known interfaces, an offset that never moves back and stays within the
//! input, an error that stays put when asked again, and bounded error texts.

#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use ringcap_format::Reader;

/// Packets read from one input at most (a 70 KB input holds fewer).
const MAX_PACKETS: usize = 100_000;

fuzz_target!(|data: &[u8]| {
    let mut reader = match Reader::new(Cursor::new(data)) {
        Ok(r) => r,
        Err(e) => return check_error_text(&e.to_string()),
    };
    let _ = reader.format();
    let len = data.len() as u64;
    let mut last = reader.offset();
    assert!(last <= len, "offset {last} past the end of {len} bytes");
    for _ in 0..MAX_PACKETS {
        let got = reader
            .next_packet()
            .map(|p| p.map(|p| (p.interface, p.data.len(), p.ts_ns, p.wire_len)));
        match got {
            Ok(Some((interface, captured, _ts_ns, _wire_len))) => {
                assert!(interface < reader.interfaces().len());
                assert!(captured <= data.len());
            }
            Ok(None) => {
                // A clean end stays one.
                assert!(matches!(reader.next_packet(), Ok(None)));
                break;
            }
            Err(e) => {
                check_error_text(&e.to_string());
                assert!(e.offset <= len, "error at {} of {len} bytes", e.offset);
                // After an error the reader stays at the bad record.
                let at = reader.offset();
                let again = reader.next_packet().expect_err("the same error again");
                assert_eq!(again.offset, e.offset);
                assert_eq!(reader.offset(), at);
                break;
            }
        }
        let off = reader.offset();
        assert!(off >= last, "offset moved back from {last} to {off}");
        assert!(off <= len, "offset {off} past the end of {len} bytes");
        last = off;
        for i in reader.interfaces() {
            let _ = i.ts_to_ns(u64::MAX);
        }
        let _ = reader.sections();
    }
});

fn check_error_text(text: &str) {
    assert!(text.len() < 4096, "error text of {} bytes", text.len());
}
