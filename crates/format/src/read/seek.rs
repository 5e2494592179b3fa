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
}
