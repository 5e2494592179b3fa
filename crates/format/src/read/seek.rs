//! Resuming a [`Reader`] at a record boundary found earlier (by an index):
//! the query side of `ringcap-index` jumps from one group of records to the
//! next without reading what lies between.

use std::io::{self, Read, Seek, SeekFrom};

use super::{FormatError, FormatErrorKind, Reader, State};

impl<R: Read + Seek> Reader<R> {
    /// Continues reading at byte `offset` of the stream, which must be the
    /// start of a record (pcap) or block (pcapng) of the same pcapng section
    /// and with the same interfaces as the reader has seen so far: the
    /// byte order, interfaces and section stay as they are. An offset that
    /// is not a record boundary is reported as a malformed record by the
    /// next read, never misread silently beyond what the framing checks
    /// catch. Compressed files cannot be resumed this way (their records
    /// are coded in blocks): that is an error.
    pub fn seek_to(&mut self, offset: u64) -> Result<(), FormatError> {
        if matches!(self.state, State::Compressed { .. }) {
            return Err(FormatError::new(
                offset,
                FormatErrorKind::Io(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "a compressed file cannot be read from the middle",
                )),
            ));
        }
        self.inner
            .seek(SeekFrom::Start(offset))
            .map_err(|e| FormatError::new(offset, FormatErrorKind::Io(e)))?;
        self.start = 0;
        self.end = 0;
        self.eof = false;
        self.pos = offset;
        Ok(())
    }

    /// [`Reader::seek_to`] `offset`, with `buf` as the reader's buffer:
    /// its first `filled` bytes are the stream's bytes from `offset` (read
    /// already, by another thread of a query) and are read where they are,
    /// not copied; the stream is read on from `offset + filled`. Returns
    /// the buffer the reader had. `buf` stays the reader's buffer for the
    /// reads after it (grown only when a record needs it). Nothing is
    /// checked of the bytes but what any read checks: they must be the
    /// stream's.
    pub fn resume_with(
        &mut self,
        offset: u64,
        buf: Vec<u8>,
        filled: usize,
    ) -> Result<Vec<u8>, FormatError> {
        let filled = filled.min(buf.len());
        self.seek_to(offset.saturating_add(filled as u64))?;
        self.pos = offset;
        self.end = filled;
        Ok(std::mem::replace(&mut self.buf, buf))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{pcap_file, pcapng_file, read_rest, Rng};
    use super::*;
    use crate::TsResolution;
    use std::io::Cursor;

    /// Resumed with some of the bytes at a record already in hand (none,
    /// part of a record, several records, all to the end; a buffer larger
    /// than they are or empty), a reader reads what reading on from there
    /// reads, and gives back the buffer it had.
    #[test]
    fn resuming_with_bytes_in_hand_reads_the_same_packets() {
        let mut rng = Rng(0x5eed);
        let (pcap, pstarts, ppkts) = pcap_file(TsResolution::Nano, 60);
        let (ng, nstarts, npkts) = pcapng_file(60);
        // pcapng: the packets start after the SHB's two IDBs.
        let files = [(pcap, pstarts, ppkts, 0), (ng, nstarts, npkts, 2)];
        for (f, starts, pkts, skip) in &files {
            for _ in 0..300 {
                let k = rng.below(pkts.len() as u64) as usize;
                let at = starts[skip + k];
                let filled = (rng.below(3 * 120) as usize).min(f.len() - at);
                let mut buf = f[at..at + filled].to_vec();
                buf.resize(filled + rng.below(200) as usize, 0xA5);
                let mut rd = Reader::new(Cursor::new(f.clone())).unwrap();
                rd.next_packet().unwrap();
                let had = rd.resume_with(at as u64, buf, filled).unwrap();
                assert!(!had.is_empty());
                assert_eq!(rd.offset(), at as u64);
                let (got, end) = read_rest(&mut rd, pkts.len());
                assert!(end.is_ok(), "k {k}, filled {filled}: {end:?}");
                assert_eq!(got, pkts[k..], "k {k}, filled {filled}");
            }
        }
    }
}
