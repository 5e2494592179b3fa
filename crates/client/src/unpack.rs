//! The decoder of a compressed stream ([`Unpack`]): its blocks back into the
//! records the daemon would have written uncompressed. Apart because it is
//! the one part that knows ringcap-compress.

use crate::{ClientError, RECORD_HEADER};
use ringcap_format::record::{Endian, Header};

/// Turns the compressed blocks of a compressed stream back into records.
pub(super) struct Unpack {
    /// Format version of the blocks.
    pub(super) version: u16,
    reader: ringcap_compress::BlockReader,
    records: Vec<u8>,
}

impl Unpack {
    pub(super) fn new(version: u16) -> Result<Unpack, ClientError> {
        if !(ringcap_compress::OLDEST_VERSION..=ringcap_compress::VERSION).contains(&version) {
            return Err(ClientError::Protocol(format!(
                "the daemon sends compressed format version {version}; this client reads \
                 versions {} to {}",
                ringcap_compress::OLDEST_VERSION,
                ringcap_compress::VERSION
            )));
        }
        Ok(Unpack {
            version,
            reader: ringcap_compress::BlockReader::new(&ringcap_compress::FileHeader {
                version,
                resolution: ringcap_compress::Resolution::Nano,
                linktype: 1,
                snaplen: 262_144,
            }),
            records: Vec::new(),
        })
    }

    /// The records of `block` (one chunk's payload), as the daemon would
    /// have written them uncompressed.
    pub(super) fn records(&mut self, block: &[u8]) -> Result<&[u8], ClientError> {
        let bad = |e: ringcap_compress::DecodeError| {
            ClientError::Protocol(format!("a compressed chunk does not decode: {e}"))
        };
        self.records.clear();
        self.reader.load(block, 0).map_err(bad)?;
        while let Some(r) = self.reader.next_record().map_err(bad)? {
            let mut h = [0u8; RECORD_HEADER];
            Header {
                secs: u32::try_from(r.ts / 1_000_000_000).unwrap_or(u32::MAX),
                frac: (r.ts % 1_000_000_000) as u32,
                caplen: r.data.len() as u32,
                wire_len: r.wire_len,
            }
            .write(&mut h, Endian::Little);
            self.records.extend_from_slice(&h);
            self.records.extend_from_slice(r.data);
        }
        Ok(&self.records)
    }
}
