//! Running a query over capture files: the index picks the groups of
//! records that may match, libpcap's compiled filter decides on each packet
//! of them, and the time window on each timestamp.
//!
//! Files are taken in time order (first packet's timestamp, then name) and
//! the packets of a file in file order, which is what `tcpdump -r` of each
//! file in turn writes. A file without a usable index is scanned (and the
//! log says so). Reading jumps from one run of candidate groups to the
//! next with [`Reader::seek_to`], reading only the bytes of the run; a jump
//! is taken only when the reader has seen the pcapng sections and
//! interfaces the index recorded for that group, otherwise the records
//! before it are read to get there (interface blocks after the first packet
//! are rare, but allowed).

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

use ringcap_format::{FormatError, Reader};

use crate::build::Unusable;
use crate::file::epoch_of;
use crate::out::Output;
use crate::plan::Expr;
use crate::readahead::{hint_runs, ReadAhead, HEADS_AHEAD, RUNS_AHEAD};

mod fetch;
mod prepare;
mod taker;
use crate::bounded::{reader_held, reader_in, resume, Bounded, Held, Limit};
pub use fetch::readers_here;
use fetch::Ahead;
use prepare::{prepare_shared, Prepared, Run};
use taker::FilterTaker;
pub use taker::{Taker, TICK};

/// A time window: `after` inclusive, `before` exclusive (ns since the epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// Packets at or after this time.
    pub after: Option<u64>,
    /// Packets before this time.
    pub before: Option<u64>,
}

impl Window {
    /// True if `ts` is inside.
    pub fn contains(&self, ts: u64) -> bool {
        self.after.is_none_or(|a| ts >= a) && self.before.is_none_or(|b| ts < b)
    }

    /// True if some time in `lo..=hi` is inside.
    pub fn overlaps(&self, lo: u64, hi: u64) -> bool {
        self.after.is_none_or(|a| hi >= a) && self.before.is_none_or(|b| lo < b)
    }
}

/// Why a query failed.
#[derive(Debug)]
pub enum QueryError {
    /// The filter does not compile for a file's link type.
    Filter(String),
    /// A file could not be read.
    File(PathBuf, String),
    /// The output could not be written.
    Output(io::Error),
    /// Stopped from outside ([`Query::stop`]).
    Stopped,
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::Filter(m) => write!(f, "{m}"),
            QueryError::File(p, m) => write!(f, "{}: {m}", p.display()),
            QueryError::Output(e) => write!(f, "writing the output: {e}"),
            QueryError::Stopped => write!(f, "stopped"),
        }
    }
}

impl std::error::Error for QueryError {}

/// What a query did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// Files looked at.
    pub files: u64,
    /// Files answered through their index.
    pub indexed: u64,
    /// Files scanned whole (no usable index, or `--no-index`).
    pub scanned: u64,
    /// Files passed over whole (their index says they are outside the window).
    pub skipped: u64,
    /// Groups of the indexed files.
    pub groups: u64,
    /// Groups read.
    pub groups_read: u64,
    /// Key blocks of the indexes looked up.
    pub key_blocks: u64,
    /// Bytes of the files.
    pub file_bytes: u64,
    /// Bytes read (runs of groups, and scanned files).
    pub bytes_read: u64,
    /// Records read (in the window or not).
    pub read: u64,
    /// Of them, read at positions the index lists (not in whole groups).
    pub by_position: u64,
    /// Packets the filter was run on.
    pub examined: u64,
    /// Packets written.
    pub matched: u64,
    /// Packets the taker took ([`run_with`]).
    pub taken: u64,
    /// Link type of the first file in time order (1 when there is none).
    pub first_linktype: u32,
    /// Files scanned whole that ended in damage (a torn last record, say):
    /// the packets before it were taken, the rest of the file passed over,
    /// and the query went on, as `tcpdump -r` of each would (it too exits
    /// 1). What was found, for the first [`DAMAGE_SAID`] of them.
    pub damaged: Vec<String>,
}

/// Damaged files a query describes at most ([`QueryStats::damaged`]).
pub const DAMAGE_SAID: usize = 16;

/// How [`read_until`] reads a file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Being written: its last whole record ends it ([`is_growing`]).
    Growing,
    /// Scanned whole: damage ends it (said in the stats), not the query.
    Whole,
    /// A run of groups its index names: damage there means the file is not
    /// the one indexed, and fails the query.
    Run,
}

/// A query over files.
pub struct Query<'a> {
    /// The tcpdump filter expression ("" for everything).
    pub filter: &'a str,
    /// What the index can answer of it (see [`crate::plan::plan`]).
    pub plan: Expr,
    /// The time window.
    pub window: Window,
    /// Use the indexes (false: scan every file).
    pub use_index: bool,
    /// Set from another thread to stop the query (a time limit, a client
    /// gone): checked with [`Taker::tick`], before each file and every
    /// [`TICK`] records read, so a query that reads much and writes little
    /// stops too.
    pub stop: Option<&'a AtomicBool>,
    /// Threads that read the candidate runs of the files ahead while this
    /// one filters and writes, and that open the indexes with it (0: this
    /// thread does everything; see `query/fetch.rs` and [`readers_here`]).
    pub readers: usize,
}

/// A file ready to be queried.
struct Source {
    path: PathBuf,
    index: Result<Prepared, Unusable>,
    first_ts: u64,
    linktype: u32,
    /// A file still being written: read up to this size, its last whole
    /// record (see [`is_growing`]).
    growing: Option<u64>,
}

/// Suffix of the hidden name a capture file has while it is written
/// (`.NAME.ringcap-partial`, ringcap-sink's `files::PARTIAL_SUFFIX`).
pub const PARTIAL_SUFFIX: &str = ".ringcap-partial";

/// True if `path` is the hidden partial file of a capture being written
/// (or left by a crash). Such a file is queried so that packets are found
/// as soon as the writer has flushed them (every 50-200 ms), not only once
/// the file is rotated and indexed: it is read without an index, up to the
/// size it had when the query opened it, and only up to its last whole
/// record (a record cut by the end, an unreadable one, or a pcap record of
/// zero length — the zeros of an O_DIRECT block not yet filled — ends it).
/// Every record before that end was written whole, so what is returned is
/// byte-exact; a crash leaves a file whose valid prefix is read the same way.
pub fn is_growing(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') && n.ends_with(PARTIAL_SUFFIX))
}

fn file_err(path: &Path, e: impl fmt::Display) -> QueryError {
    QueryError::File(path.to_path_buf(), e.to_string())
}

/// Opens `path` for reading, with the end the reader may read to.
fn open(path: &Path) -> Result<(Reader<Bounded>, Rc<Limit>), QueryError> {
    let f = File::open(path).map_err(|e| file_err(path, e))?;
    open_file(path, f, Vec::new())
}

/// [`open`] with the file already open, reading into `buf` (see
/// [`reader_in`]).
fn open_file(
    path: &Path,
    f: File,
    buf: Vec<u8>,
) -> Result<(Reader<Bounded>, Rc<Limit>), QueryError> {
    reader_in(f, buf).map_err(|e| file_err(path, e))
}

/// Where a query may be stopped from outside: its flag ([`Query::stop`])
/// and its taker's checks ([`Taker::tick`]).
fn stop_point(q: &Query, taker: &mut dyn Taker) -> Result<(), QueryError> {
    if q.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
        return Err(QueryError::Stopped);
    }
    taker.tick()
}

/// Runs `q` over `files`, writing matches to `out`; `log` gets a line for
/// each file scanned without an index (and why).
pub fn run(
    q: &Query,
    files: &[PathBuf],
    out: &mut Output,
    log: &mut dyn FnMut(String),
) -> Result<QueryStats, QueryError> {
    let mut taker = FilterTaker {
        q,
        names: Vec::new(),
        programs: Vec::new(),
        out,
    };
    let mut st = run_with(q, files, &mut taker, log)?;
    out.finish(st.first_linktype).map_err(QueryError::Output)?;
    st.matched = out.packets;
    Ok(st)
}

/// Runs `q` over `files`, each packet in the window handed to `taker`
/// (`q.filter` is not compiled: the taker decides); `log` gets a line for
/// each file scanned without an index (and why).
pub fn run_with(
    q: &Query,
    files: &[PathBuf],
    taker: &mut dyn Taker,
    log: &mut dyn FnMut(String),
) -> Result<QueryStats, QueryError> {
    let mut st = QueryStats::default();
    // The buffer of the reader last done with, for the next.
    let mut spare = Vec::new();
    let mut sources = Vec::new();
    for batch in files.chunks(HEADS_AHEAD) {
        stop_point(q, taker)?;
        let (growing, done): (Vec<&PathBuf>, Vec<&PathBuf>) =
            batch.iter().partition(|p| is_growing(p));
        for path in growing {
            // Being written: its size now, and its first packet if a whole
            // one is there; gone (renamed when published) or still empty:
            // passed over.
            let Ok(size) = std::fs::metadata(path).map(|m| m.len()) else {
                continue;
            };
            let Ok((mut rd, end)) = open(path) else {
                continue;
            };
            end.set(size);
            let first_ts = match rd.next_packet() {
                Ok(Some(p)) if !(p.wire_len == 0 && p.data.is_empty()) => p.ts_ns,
                _ => continue,
            };
            let linktype = rd.interfaces().first().map_or(1, |i| i.linktype);
            sources.push(Source {
                path: path.clone(),
                index: Err(Unusable::Missing),
                first_ts,
                linktype,
                growing: Some(size),
            });
        }
        let indexes = if q.use_index {
            prepare_shared(q, &done)?
        } else {
            done.iter().map(|_| Err(Unusable::Missing)).collect()
        };
        for (path, index) in done.into_iter().zip(indexes) {
            add_source(path, index, &mut sources, &mut st, &mut spare)?;
        }
    }
    sources.sort_by(|a, b| (a.first_ts, &a.path).cmp(&(b.first_ts, &b.path)));
    let mut budget = RUNS_AHEAD;
    for s in &sources {
        if let Ok(p) = &s.index {
            hint_runs(
                &s.path,
                p.runs.iter().map(|r| (r.from, r.read_end())),
                &mut budget,
            );
        }
    }
    // Reading threads read the runs of the files ahead (`query/fetch.rs`)
    // while this one answers the files in order.
    let jobs = match q.readers {
        0 => Vec::new(),
        _ => sources.iter().map(|s| fetch::job(q, s)).collect(),
    };
    let ahead = Ahead::new(jobs, q.stop);
    ahead.with_readers(q.readers, || {
        for (k, s) in sources.iter().enumerate() {
            read_source(q, s, taker, &mut st, &mut spare, log, || ahead.take(k))?;
        }
        Ok::<(), QueryError>(())
    })?;
    st.first_linktype = sources.first().map_or(1, |s| s.linktype);
    Ok(st)
}

/// A file cut short (in its header or a record): a copy in progress,
/// another writer's crash. Not a file that is no capture at all (a usage
/// error when named).
fn torn(e: &ringcap_format::FormatError) -> bool {
    matches!(e.kind, ringcap_format::FormatErrorKind::Truncated { .. })
}

impl QueryStats {
    /// Notes a file that ends in damage (the first [`DAMAGE_SAID`] are said).
    fn damage(&mut self, path: &Path, e: &ringcap_format::FormatError) {
        if self.damaged.len() < DAMAGE_SAID {
            self.damaged.push(format!("{}: {e}", path.display()));
        }
    }
}

/// Adds a file not being written to `sources`, with its prepared index or
/// why it has none. A file whose header or first record is damaged (cut
/// short: a copy in progress) holds no packet to read: it is said in the
/// stats and passed over, as the damage later in a file is
/// ([`Reading::Whole`]).
fn add_source(
    path: &Path,
    index: Result<Prepared, Unusable>,
    sources: &mut Vec<Source>,
    st: &mut QueryStats,
    spare: &mut Vec<u8>,
) -> Result<(), QueryError> {
    let f = File::open(path).map_err(|e| file_err(path, e))?;
    let (mut rd, end) = match reader_in(f, std::mem::take(spare)) {
        Ok(r) => r,
        Err(e) if torn(&e) && index.is_err() => {
            st.damage(path, &e);
            return Ok(());
        }
        Err(e) => return Err(file_err(path, e)),
    };
    let first_ts = match &index {
        Ok(idx) => idx.summary.first_ts,
        Err(_) => {
            end.set(u64::MAX);
            match rd.next_packet() {
                Ok(p) => p.map_or(0, |p| p.ts_ns),
                Err(e) if torn(&e) => {
                    st.damage(path, &e);
                    return Ok(());
                }
                Err(e) => return Err(file_err(path, e)),
            }
        }
    };
    let linktype = rd.interfaces().first().map_or(1, |i| i.linktype);
    *spare = rd.into_buffer();
    sources.push(Source {
        path: path.to_path_buf(),
        index,
        first_ts,
        linktype,
        growing: None,
    });
    Ok(())
}

/// Reads the packets of `s` the query wants: up to the size it had of a
/// file being written, through its index (`got`: what a reading thread
/// read of it), or the whole file.
fn read_source(
    q: &Query,
    s: &Source,
    taker: &mut dyn Taker,
    st: &mut QueryStats,
    spare: &mut Vec<u8>,
    log: &mut dyn FnMut(String),
    got: impl FnOnce() -> Option<(File, Held)>,
) -> Result<(), QueryError> {
    stop_point(q, taker)?;
    st.files += 1;
    st.file_bytes += std::fs::metadata(&s.path).map_or(0, |m| m.len());
    if let Some(size) = s.growing {
        st.scanned += 1;
        let Ok((mut rd, end)) = open(&s.path) else {
            return Ok(());
        };
        end.set(size);
        read_until(q, &s.path, &mut rd, size, Reading::Growing, taker, st)?;
        st.bytes_read += rd.offset();
        return Ok(());
    }
    match &s.index {
        Ok(idx) => query_indexed(q, s, idx, taker, st, spare, got()),
        Err(why) => {
            if q.use_index {
                log(format!("{}: {why}; scanning it", s.path.display()));
            }
            st.scanned += 1;
            let (mut rd, end) = open(&s.path)?;
            end.set(u64::MAX);
            read_until(q, &s.path, &mut rd, u64::MAX, Reading::Whole, taker, st)?;
            st.bytes_read += rd.offset();
            Ok(())
        }
    }
}

/// Reads the candidate runs of `s`, some of whose bytes a reading thread
/// may have read already (`got`: the file it opened and what it read).
fn query_indexed(
    q: &Query,
    s: &Source,
    idx: &Prepared,
    taker: &mut dyn Taker,
    st: &mut QueryStats,
    spare: &mut Vec<u8>,
    got: Option<(File, Held)>,
) -> Result<(), QueryError> {
    let n = idx.groups;
    st.groups += n as u64;
    st.key_blocks += idx.key_blocks as u64;
    if idx.passed_over(&q.window) {
        st.skipped += 1;
        return Ok(());
    }
    st.indexed += 1;
    let runs = &idx.runs;
    // Hints for the runs, unless a reading thread has read them.
    let (f, held, mut ahead) = match got {
        Some((f, held)) => (f, held, ReadAhead::new(None)),
        None => {
            let f = File::open(&s.path).map_err(|e| file_err(&s.path, e))?;
            let ahead = ReadAhead::new(f.try_clone().ok());
            (f, Held::default(), ahead)
        }
    };
    let (mut rd, end) =
        reader_held(f, std::mem::take(spare), held).map_err(|e| file_err(&s.path, e))?;
    // The reader's own buffer while it reads a run's held bytes where they
    // are (a copy of each held byte into it was ~14 % of a warm port
    // query's thread: `perf`, 2026-11-29).
    let mut own: Option<Vec<u8>> = None;
    for (i, r) in runs.iter().enumerate() {
        let Run {
            first,
            end: last,
            from,
            to,
            exact,
        } = *r;
        ahead.advise(i, runs.len(), |j| (runs[j].from, runs[j].read_end()));
        st.groups_read += (last - first) as u64;
        let ep = epoch_of(&idx.epochs, first);
        let state = |rd: &Reader<Bounded>| (rd.sections() as u32, rd.interfaces().len() as u32);
        if state(&rd) != (ep.sections, ep.interfaces) {
            // Read up to the run (discarding) to meet its interface blocks,
            // from where the reader stands (a seek there clears an end of
            // data met at the previous run's bound).
            end.set(from);
            let here = rd.offset();
            resume(&mut rd, here, false, &mut own).map_err(|e| file_err(&s.path, e))?;
            while rd.offset() < from && state(&rd) != (ep.sections, ep.interfaces) {
                match rd.next_packet() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => return Err(file_err(&s.path, e)),
                }
            }
        }
        match exact {
            true => end.set_stretch(r.read_end()),
            false => end.set(to),
        }
        // Only a run of whole groups is read where it is held: it ends where
        // its bytes do, where an exact run's last packet may be longer than
        // the guess and would grow the buffer.
        resume(&mut rd, from, !exact, &mut own).map_err(|e| file_err(&s.path, e))?;
        let read = st.read;
        read_until(q, &s.path, &mut rd, to, Reading::Run, taker, st)?;
        st.bytes_read += rd.offset() - from;
        if exact {
            st.by_position += st.read - read;
        }
    }
    *spare = own.unwrap_or_else(|| rd.into_buffer());
    Ok(())
}

/// Reads packets until the reader's offset reaches `to` or the data ends,
/// writing those in the window the filter accepts; `how`: see [`Reading`].
fn read_until(
    q: &Query,
    path: &Path,
    rd: &mut Reader<Bounded>,
    to: u64,
    how: Reading,
    taker: &mut dyn Taker,
    st: &mut QueryStats,
) -> Result<(), QueryError> {
    let growing = how == Reading::Growing;
    // Per interface: its link type if the taker admits its packets.
    let admitted = |rd: &Reader<Bounded>, taker: &mut dyn Taker| -> Vec<Option<u32>> {
        let ifaces = rd.interfaces().iter().enumerate();
        ifaces
            .map(|(i, f)| taker.admits(i, f).then_some(f.linktype))
            .collect()
    };
    let mut linktypes = admitted(rd, taker);
    let mut scratch = Vec::new();
    while rd.offset() < to {
        st.read += 1;
        if st.read.is_multiple_of(TICK) {
            stop_point(q, taker)?;
        }
        let known = linktypes.len();
        let (lt, ts, wire) = {
            let p = match rd.next_packet() {
                Ok(Some(p)) if growing && p.wire_len == 0 && p.data.is_empty() => break,
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(_) if growing => break,
                Err(e) if how == Reading::Whole => {
                    st.damage(path, &e);
                    break;
                }
                Err(e) => return Err(file_err(path, annotate(e))),
            };
            if !q.window.contains(p.ts_ns) {
                continue;
            }
            let lt = linktypes.get(p.interface).copied();
            let (ts, wire) = (p.ts_ns, p.wire_len);
            match lt {
                Some(Some(lt)) => {
                    st.examined += 1;
                    if taker.packet_of(p.interface, lt, ts, wire, p.data)? {
                        st.taken += 1;
                    }
                    continue;
                }
                // An interface the taker does not admit.
                Some(None) => continue,
                None => {
                    scratch.clear();
                    scratch.extend_from_slice(p.data);
                    (p.interface, ts, wire)
                }
            }
        };
        // A packet of an interface announced by a block just read.
        if rd.interfaces().len() > known {
            linktypes = admitted(rd, taker);
        }
        let iface = lt;
        let lt = match linktypes.get(iface) {
            Some(Some(lt)) => *lt,
            Some(None) => continue,
            None => return Err(file_err(path, "a packet of an undeclared interface")),
        };
        st.examined += 1;
        if taker.packet_of(iface, lt, ts, wire, &scratch)? {
            st.taken += 1;
        }
    }
    Ok(())
}

fn annotate(e: FormatError) -> String {
    format!("{e} (if the file changed, rebuild its index with `ringcap index --force`)")
}
