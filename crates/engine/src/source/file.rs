//! The file source: records of a pcap or pcapng file, read in order. The
//! reader waits for the sink instead of dropping (the encoder blocks), so
//! nothing read is lost.

use super::{Flow, Next, Packet, Source, SourceError, LOOK_AHEAD};
use ringcap_format::read::{FileFormat, Interface, Reader};
use ringcap_stats::CaptureCounts;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Records handed over per call: bounds how late a stop is noticed.
const RECORDS_PER_BATCH: usize = 8192;

/// A capture file as a [`Source`].
pub struct FileSource {
    path: PathBuf,
    reader: Reader<File>,
    seen: u64,
    ended: bool,
}

/// Opens `path` as a capture file.
pub fn open(path: &Path) -> Result<Reader<File>, String> {
    let f = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Reader::new(f).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every interface of the file, in the reader's numbering (pcapng interface
/// blocks may come anywhere in a file, so a pcapng file is read through once).
pub fn interfaces(path: &Path) -> Result<Vec<Interface>, String> {
    let mut r = open(path)?;
    if let FileFormat::Pcap { .. } = r.format() {
        return Ok(r.interfaces().to_vec());
    }
    // A damaged file is reported with its offset when it is read for real,
    // after the packets before the damage.
    while let Ok(Some(_)) = r.next_packet() {}
    Ok(r.interfaces().to_vec())
}

impl FileSource {
    /// Reads `path` from the start.
    pub fn open(path: &Path) -> Result<FileSource, String> {
        Ok(FileSource {
            path: path.to_path_buf(),
            reader: open(path)?,
            seen: 0,
            ended: false,
        })
    }
}

impl Source for FileSource {
    fn next_batch<F: FnMut(Packet<'_>) -> Flow>(
        &mut self,
        mut each: F,
    ) -> Result<Next, SourceError> {
        if self.ended {
            return Ok(Next::End);
        }
        for _ in 0..RECORDS_PER_BATCH {
            let (p, ahead) = match self.reader.next_packet_ahead(LOOK_AHEAD) {
                Ok(Some(p)) => p,
                Ok(None) => {
                    self.ended = true;
                    break;
                }
                Err(e) => {
                    self.ended = true;
                    return Err(SourceError::Input(format!("{}: {e}", self.path.display())));
                }
            };
            self.seen += 1;
            let packet = Packet {
                ts_ns: p.ts_ns,
                wire_len: p.wire_len,
                data: p.data,
                vlan: None,
                interface: p.interface,
                ahead,
            };
            match each(packet) {
                Flow::Continue => {}
                Flow::Done => {
                    self.ended = true;
                    return Ok(Next::Packets { skipped: 0 });
                }
                Flow::Stop => {
                    self.ended = true;
                    return Ok(Next::Packets { skipped: 1 });
                }
            }
        }
        Ok(Next::Packets { skipped: 0 })
    }

    fn wait(
        &mut self,
        _timeout: Option<Duration>,
        _wake: Option<std::os::fd::RawFd>,
    ) -> Result<bool, SourceError> {
        Ok(false)
    }

    fn refresh(&mut self, _counts: &mut CaptureCounts) -> Result<(), SourceError> {
        Ok(())
    }

    fn seen(&self) -> Option<u64> {
        Some(self.seen)
    }

    fn drain_grace(&self) -> Duration {
        Duration::ZERO
    }
}
