//! One query's work, on a blocking thread: the filter compiled once per
//! link type for the whole request (the count and the stream share the
//! programs), and the filter's size bounded before libpcap sees it.
//!
//! libpcap's compiler (its optimizer) grows much faster than linearly with
//! the number of primitives: a client's text must not be able to hold a
//! thread for long. So the text is measured in Rust first ([`check_size`]),
//! and compiled only after the query's slot is taken, on the query's own
//! blocking thread, never on the async runtime's workers.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use hyper::StatusCode;
use ringcap_index::query::Window;
use ringcap_index::{load_index, plan, run_with, OutFormat, Output, Query, QueryError, Taker};
use ringcap_stages::filter::{dlt_of_linktype, Target};
use ringcap_stages::CheckedProgram;

/// Most primitives (terms joined by `and`/`or`) a filter may have here.
///
/// pcap_compile time measured on this kind of machine (tcpdump -d, libpcap
/// 1.10, 2026-11-27): `host A or host B or ...` takes 35 ms at 64 terms,
/// 0.2 s at 128, 1.9 s at 256 and 39 s at 700; the worst shape found at 64
/// terms, `portrange A-B or ...`, takes 0.5 s (`port N or ...` 0.14 s).
/// 64 keeps every request's compile under a second while leaving room for
/// any query a person writes (the planner itself stops at
/// [`ringcap_index::plan::MAX_TERMS`] = 256).
pub const MAX_PRIMITIVES: usize = 64;

/// Refuses a filter larger than this server compiles: more than
/// [`MAX_PRIMITIVES`] primitives, or nesting (parentheses, `not`) deeper
/// than the planner follows ([`ringcap_index::plan::MAX_DEPTH`]).
///
/// Counted on bytes, without parsing: every `and`, `or`, `&&` and `||`
/// joins one more primitive (a bare value after `or`, `host a or b`, is
/// one too), so the count is never lower than libpcap's.
pub fn check_size(filter: &str) -> Result<(), String> {
    let max_depth = ringcap_index::plan::MAX_DEPTH;
    let b = filter.as_bytes();
    let word_byte = |c: u8| c.is_ascii_alphanumeric() || b"._-:/\\".contains(&c);
    let (mut joins, mut nots, mut depth, mut deepest) = (0usize, 0usize, 0usize, 0usize);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let two = b.get(i..i + 2);
        if two == Some(b"&&") || two == Some(b"||") {
            joins += 1;
            i += 2;
        } else if c == b'!' && b.get(i + 1) != Some(&b'=') {
            nots += 1;
            i += 1;
        } else if c == b'(' {
            depth += 1;
            deepest = deepest.max(depth);
            i += 1;
        } else if c == b')' {
            depth = depth.saturating_sub(1);
            i += 1;
        } else if word_byte(c) {
            let n = b[i..].iter().take_while(|&&c| word_byte(c)).count();
            let w = &b[i..i + n];
            if w.eq_ignore_ascii_case(b"and") || w.eq_ignore_ascii_case(b"or") {
                joins += 1;
            } else if w.eq_ignore_ascii_case(b"not") {
                nots += 1;
            }
            i += n;
        } else {
            i += 1;
        }
    }
    let primitives = joins + 1;
    if primitives > MAX_PRIMITIVES {
        return Err(format!(
            "the filter has {primitives} terms joined by and/or; this server compiles at most \
             {MAX_PRIMITIVES} per query (libpcap's compile time grows steeply with more): \
             split it into several queries"
        ));
    }
    if deepest > max_depth || nots > max_depth {
        return Err(format!(
            "the filter nests deeper than {max_depth} parentheses or has more than \
             {max_depth} 'not's"
        ));
    }
    Ok(())
}

/// The query's filter, compiled by libpcap once per link type met.
pub struct Programs {
    filter: String,
    /// A handful at most: a list, searched per packet more cheaply than a
    /// hash map is hashed.
    compiled: Vec<(u32, CheckedProgram)>,
    /// pcap_compile calls made (logged: one per link type per request).
    pub compiles: u32,
}

impl Programs {
    /// Compiles `filter` for Ethernet (the link type of nearly every
    /// capture): its error is the client's (400) before anything is read.
    pub fn new(filter: &str) -> Result<Programs, String> {
        let mut p = Programs {
            filter: filter.to_string(),
            compiled: Vec::new(),
            compiles: 0,
        };
        p.get(1).map_err(|e| e.to_string())?;
        Ok(p)
    }

    fn get(&mut self, linktype: u32) -> Result<&CheckedProgram, QueryError> {
        if let Some(i) = self.compiled.iter().position(|(lt, _)| *lt == linktype) {
            return Ok(&self.compiled[i].1);
        }
        self.compiles += 1;
        let dlt = dlt_of_linktype(linktype as i32);
        let p = ringcap_stages::compile(&self.filter, dlt, 262_144, Target::Offline)
            .map_err(|e| QueryError::Filter(format!("filter: {e} (link type {linktype})")))?;
        // Checked once (libpcap's bpf_validate), not per packet.
        let p = CheckedProgram::new(p).ok_or_else(|| {
            QueryError::Filter(format!(
                "libpcap's program for link type {linktype} fails its check"
            ))
        })?;
        self.compiled.push((linktype, p));
        Ok(&self.compiled[self.compiled.len() - 1].1)
    }
}

/// Each packet in the window through the compiled filter, matches out.
struct Matcher<'a> {
    programs: &'a mut Programs,
    out: &'a mut Output,
}

impl Taker for Matcher<'_> {
    fn packet(&mut self, lt: u32, ts: u64, wire: u32, data: &[u8]) -> Result<bool, QueryError> {
        if self.programs.get(lt)?.run(data, wire) == 0 {
            return Ok(false);
        }
        self.out
            .packet(lt, ts, wire, data)
            .map_err(QueryError::Output)?;
        Ok(true)
    }
}

/// A refusal: the status and what to tell the client.
pub struct Refusal(pub StatusCode, pub String);

/// One query's work, run on a blocking thread.
pub struct Job {
    /// Directories of capture files.
    pub dirs: Vec<PathBuf>,
    /// The tcpdump filter (already within [`check_size`]).
    pub filter: String,
    /// The time window.
    pub window: Window,
    /// Set when the query's time is up.
    pub stop: Arc<AtomicBool>,
}

impl Job {
    fn files(&self) -> Result<Vec<PathBuf>, String> {
        ringcap_index::dir::capture_files_ahead(&self.dirs, &mut |_| {})
    }

    fn query(
        &self,
        programs: &mut Programs,
        out: &mut Output,
        files: &[PathBuf],
    ) -> Result<Vec<String>, QueryError> {
        let q = Query {
            filter: &self.filter,
            plan: plan(&self.filter),
            window: self.window,
            use_index: true,
            stop: Some(&self.stop),
            readers: ringcap_index::readers_here(),
        };
        let st = run_with(&q, files, &mut Matcher { programs, out }, &mut |_| {})?;
        out.finish(st.first_linktype).map_err(QueryError::Output)?;
        Ok(st.damaged)
    }

    /// Refuses (413) an answer larger than `max` bytes; counts only when
    /// the files in the window hold more than that.
    pub fn count(&self, programs: &mut Programs, max: u64) -> Result<(), Refusal> {
        let files = self
            .files()
            .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, e))?;
        // An answer's pcap records are never larger than the files'.
        let bound: u64 = files
            .iter()
            .map(|f| match load_index(f) {
                Ok(i) if !self.window.overlaps(i.summary.min_ts, i.summary.max_ts) => 0,
                _ => std::fs::metadata(f).map_or(0, |m| m.len()),
            })
            .sum();
        if bound <= max {
            return Ok(());
        }
        let mut out = Output::new(Box::new(io::sink()), OutFormat::Pcap);
        out.limit(None, Some(max));
        match self.query(programs, &mut out, &files) {
            Ok(_) => Ok(()),
            Err(_) if out.limited => Err(Refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the answer is larger than {max} bytes (this server's limit); \
                     narrow the query (a host, a port, before/after)"
                ),
            )),
            Err(QueryError::Stopped) => Err(Refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "the query takes longer than this server allows; narrow it".into(),
            )),
            Err(QueryError::Filter(e)) => Err(Refusal(StatusCode::BAD_REQUEST, e)),
            Err(e) => Err(Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        }
    }

    /// Streams the answer; the client's own limits (stenographer's
    /// `Steno-Limit-Packets`/`-Bytes`) end it early but whole.
    pub fn stream(
        &self,
        programs: &mut Programs,
        w: Box<dyn io::Write>,
        (packets, bytes): (Option<u64>, Option<u64>),
    ) -> Result<Streamed, String> {
        let files = self.files()?;
        let mut out = Output::new(w, OutFormat::Pcap);
        out.limit(packets, bytes);
        let damaged = match self.query(programs, &mut out, &files) {
            Ok(d) => d,
            Err(_) if out.limited => Vec::new(),
            Err(e) => return Err(e.to_string()),
        };
        out.finish(1).map_err(|e| e.to_string())?;
        Ok(Streamed {
            packets: out.packets,
            bytes: out.bytes,
            damaged,
        })
    }
}

/// What [`Job::stream`] sent.
pub struct Streamed {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
    /// Files read in part: they end in damage (see
    /// `ringcap_index::QueryStats::damaged`), for the log.
    pub damaged: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(n: usize, join: &str) -> String {
        (0..n)
            .map(|i| format!("host 198.18.{}.{}", i / 250, i % 250))
            .collect::<Vec<_>>()
            .join(join)
    }

    #[test]
    fn sizes() {
        assert!(check_size("").is_ok());
        assert!(check_size(&terms(64, " or ")).is_ok());
        assert!(check_size(&terms(64, "||")).is_ok());
        for bad in [
            terms(65, " or "),
            terms(65, " AND "),
            terms(65, "&&"),
            terms(700, " or "),
            format!("host 198.18.0.1 or {}", vec!["198.18.0.2"; 64].join(" or ")),
        ] {
            let e = check_size(&bad).unwrap_err();
            assert!(e.contains("at most 64"), "{e}");
        }
        let deep = "(".repeat(65) + "tcp" + &")".repeat(65);
        assert!(check_size(&deep).is_err());
        assert!(check_size(&("not ".repeat(65) + "tcp")).is_err());
        assert!(check_size(&("! ".repeat(65) + "tcp")).is_err());
        // Comparisons are not 'not's; words containing and/or are not joins.
        assert!(check_size(&vec!["ip[0] != 1"; 64].join(" and ")).is_ok());
        assert!(check_size("host android.example or host origin.example").is_ok());
    }

    #[test]
    fn one_compile_per_link_type() {
        let mut p = Programs::new("tcp or udp").unwrap();
        assert_eq!(p.compiles, 1);
        p.get(1).unwrap();
        p.get(1).unwrap();
        assert_eq!(p.compiles, 1);
        p.get(101).unwrap();
        p.get(101).unwrap();
        assert_eq!(p.compiles, 2);
        assert!(Programs::new("tcp and and").is_err());
    }
}
