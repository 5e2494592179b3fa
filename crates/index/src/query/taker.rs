//! What a query does with the packets it reads: a [`Taker`] decides on
//! each and takes the ones it keeps. [`FilterTaker`], `run`'s, runs the
//! query's tcpdump filter compiled by libpcap and writes matches out.

use ringcap_format::read::Interface;
use ringcap_stages::compile;
use ringcap_stages::filter::{dlt_of_linktype, Target};
use ringcap_stages::CheckedProgram;

use super::{Query, QueryError};
use crate::out::Output;

/// Decides on each packet a query reads (in the window) and takes the ones
/// it keeps: [`run`] compiles the query's filter with libpcap and writes
/// matches to an [`Output`]; a caller that must not compile text (ringcapd,
/// whose filters are programs checked against a grant) brings its own.
pub trait Taker {
    /// One packet of link type `linktype` in the window: true if it was
    /// taken. An error ends the query.
    fn packet(
        &mut self,
        linktype: u32,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
    ) -> Result<bool, QueryError>;

    /// [`Taker::packet`] of a packet of interface `i` of the file being
    /// read (the `i` of [`Taker::admits`]): for a taker that keeps
    /// interfaces apart. By default the interface is not looked at.
    fn packet_of(
        &mut self,
        i: usize,
        linktype: u32,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
    ) -> Result<bool, QueryError> {
        let _ = i;
        self.packet(linktype, ts_ns, wire_len, data)
    }

    /// Whether the packets of interface `i` of a file (`iface`: its link
    /// type, its `if_name` if it has one) are handed to [`Taker::packet`];
    /// the others are passed over. Asked once per interface of each file
    /// read. By default all are.
    fn admits(&mut self, i: usize, iface: &Interface) -> bool {
        let _ = (i, iface);
        true
    }

    /// Called before each file and every [`TICK`] records read, in the
    /// window or not (a query whose window or filter keeps nothing still
    /// reads): an error ends the query (a deadline, a client gone).
    fn tick(&mut self) -> Result<(), QueryError> {
        Ok(())
    }
}

/// Records read between two [`Taker::tick`]s.
pub const TICK: u64 = 512;

/// [`run`]'s taker: the query's filter compiled per link type.
pub(super) struct FilterTaker<'a, 'q> {
    pub q: &'a Query<'q>,
    /// The names of the interfaces of the file being read, by index (as
    /// [`Taker::admits`] told them), for pcapng output.
    pub names: Vec<Option<String>>,
    /// Compiled per link type (a handful at most: a list, searched per
    /// packet more cheaply than a hash map is hashed).
    pub programs: Vec<(u32, CheckedProgram)>,
    pub out: &'a mut Output,
}

impl Taker for FilterTaker<'_, '_> {
    fn packet(&mut self, lt: u32, ts: u64, wire: u32, data: &[u8]) -> Result<bool, QueryError> {
        self.take(None, lt, ts, wire, data)
    }

    fn packet_of(
        &mut self,
        i: usize,
        lt: u32,
        ts: u64,
        wire: u32,
        data: &[u8],
    ) -> Result<bool, QueryError> {
        let name = self.names.get(i).cloned().flatten();
        self.take(name.as_deref(), lt, ts, wire, data)
    }

    fn admits(&mut self, i: usize, iface: &Interface) -> bool {
        if self.names.len() <= i {
            self.names.resize(i + 1, None);
        }
        self.names[i] = iface.name.clone();
        true
    }
}

impl FilterTaker<'_, '_> {
    fn take(
        &mut self,
        name: Option<&str>,
        lt: u32,
        ts: u64,
        wire: u32,
        data: &[u8],
    ) -> Result<bool, QueryError> {
        let prog = program_for(self.q, &mut self.programs, lt)?;
        if prog.run(data, wire) == 0 {
            return Ok(false);
        }
        self.out
            .packet_of(name, lt, ts, wire, data)
            .map_err(QueryError::Output)?;
        Ok(true)
    }
}

fn program_for<'p>(
    q: &Query,
    programs: &'p mut Vec<(u32, CheckedProgram)>,
    linktype: u32,
) -> Result<&'p CheckedProgram, QueryError> {
    let i = match programs.iter().position(|(lt, _)| *lt == linktype) {
        Some(i) => i,
        None => {
            let dlt = dlt_of_linktype(linktype as i32);
            let p = compile(q.filter, dlt, 262_144, Target::Offline)
                .map_err(|e| QueryError::Filter(format!("{e} (link type {linktype})")))?;
            // Checked once (libpcap's bpf_validate), not per packet.
            let p = CheckedProgram::new(p).ok_or_else(|| {
                QueryError::Filter(format!(
                    "libpcap's program for link type {linktype} fails its check"
                ))
            })?;
            programs.push((linktype, p));
            programs.len() - 1
        }
    };
    Ok(&programs[i].1)
}
