//! The compressed-file decoder on arbitrary input. The input is used twice:
//! as a whole file, and as one block's payload behind a valid file header
//! and block header (checksum made right), so the fuzzer reaches the record
//! decoder without having to forge CRCs; the count's low bits pick the link
//! type and the format version (the oldest read or the current one). Decoding must return (records or
//! an error), never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringcap_compress::{
    decode, find_block, valid_prefix, FileHeader, Resolution, OLDEST_VERSION, VERSION,
};

fuzz_target!(|data: &[u8]| {
    let _ = decode(data, |_| {});
    let _ = valid_prefix(data);
    let _ = find_block(data, 0);
    let (count, body) = match data.split_first() {
        Some((c, b)) => (*c as u32, b),
        None => return,
    };
    let mut f = FileHeader {
        version: if count & 2 == 0 { VERSION } else { OLDEST_VERSION },
        resolution: Resolution::Nano,
        linktype: if count & 1 == 0 { 1 } else { 101 },
        snaplen: 65535,
    }
    .to_bytes()
    .to_vec();
    let mut h = Vec::new();
    h.extend_from_slice(&(body.len() as u32).to_le_bytes());
    h.extend_from_slice(&(count / 4).to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h);
    crc.update(body);
    f.extend_from_slice(b"RCZB");
    f.extend_from_slice(&h);
    f.extend_from_slice(&crc.finalize().to_le_bytes());
    f.extend_from_slice(body);
    let _ = decode(&f, |_| {});
});
