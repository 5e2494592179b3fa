//! A query's first pass over its files: each index is opened, its key
//! blocks looked up and its pages of groups read, leaving the runs of
//! candidate groups to read from the capture file. Files are taken in
//! batches and every read of a batch is first asked for with a hint
//! (`posix_fadvise`), step by step (heads, then key blocks, then pages), so
//! that a cold query's small reads reach the disk together: one after
//! another they were ~6 reads a file in a row, most of a cold query's
//! time over the 40 files of the retrieval bench.

use std::path::PathBuf;

use crate::build::{load_index_into, Unusable};
use crate::file::{Epoch, Index, IndexError, Summary};
use crate::keys::{Key, Kind};
use crate::plan::Expr;
use crate::readahead::hint_heads;

use super::{Query, QueryError, Window};

/// What a query keeps of a file's index: the runs of candidate groups (the
/// key blocks and pages of groups are read and let go batch by batch: a
/// query over a day of files holds the indexes of one batch at a time).
pub(super) struct Prepared {
    pub summary: Summary,
    pub epochs: Vec<Epoch>,
    /// Groups in the file.
    pub groups: usize,
    pub runs: Vec<Run>,
    /// Key blocks looked up in its index.
    pub key_blocks: usize,
}

/// A run of consecutive candidate groups: the first, the one after the
/// last, and where they start and end in the capture file. Or, `exact`,
/// packets whose positions the index lists (`file/exact.rs`): `from` the
/// first one's, `to` one past the last one's start (its end is not known:
/// [`Run::read_end`]), and no groups.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    pub first: usize,
    pub end: usize,
    pub from: u64,
    pub to: u64,
    pub exact: bool,
}

/// Bytes read for the last packet of a run of positions before the reader
/// asks for more (`query/bounded.rs`): most packets are whole in them.
const PACKET_GUESS: u64 = 2048;

/// Packets listed by position this close together are read in one run
/// (with what lies between them): one read instead of two.
const NEAR: u64 = 4096;

impl Prepared {
    /// True if the file holds no group, or none in `w`: it is passed over.
    pub fn passed_over(&self, w: &Window) -> bool {
        self.groups == 0 || !w.overlaps(self.summary.min_ts, self.summary.max_ts)
    }
}

impl Run {
    /// Where reading the run may stop: its end, or a guess past its last
    /// packet's start.
    pub fn read_end(&self) -> u64 {
        if self.exact {
            self.to.saturating_add(PACKET_GUESS)
        } else {
            self.to
        }
    }
}

/// The runs of groups of `idx` that are candidates (`None`: every group)
/// and overlap `window`. Reads only the pages of groups holding some.
fn runs_of(idx: &Index, cands: Option<&[bool]>, window: &Window) -> Result<Vec<Run>, IndexError> {
    let mut runs = Vec::new();
    let mut open: Option<(usize, u64)> = None;
    let mut groups = Vec::new();
    for p in 0..idx.pages() {
        let page = idx.page(p);
        if !page_wanted(idx, p, cands, window) {
            if let Some((first, from)) = open.take() {
                runs.push(Run {
                    first,
                    end: page.groups.start,
                    from,
                    to: page.offset,
                    exact: false,
                });
            }
            continue;
        }
        idx.read_page(p, &mut groups)?;
        for (g, grp) in page.groups.clone().zip(&groups) {
            let want = cands.is_none_or(|c| c[g]) && window.overlaps(grp.min_ts, grp.max_ts);
            match (want, open) {
                (true, None) => open = Some((g, grp.offset)),
                (false, Some((first, from))) => {
                    runs.push(Run {
                        first,
                        end: g,
                        from,
                        to: grp.offset,
                        exact: false,
                    });
                    open = None;
                }
                _ => {}
            }
        }
    }
    if let Some((first, from)) = open {
        runs.push(Run {
            first,
            end: idx.group_count(),
            from,
            to: idx.summary.capture_len,
            exact: false,
        });
    }
    Ok(runs)
}

/// The packets' positions the index lists for `e` (`file/exact.rs`): a
/// superset of the packets matching `e` that the index describes, or
/// `None` where it lists none for some term that decides (packets it
/// cannot describe, in [`Kind::Any`]'s groups, are not in it: see
/// [`exact_runs`]). One key, not a range: a range's keys without positions
/// are not known without reading its blocks.
fn positions_of(e: &Expr, idx: &Index) -> Result<Option<Vec<u64>>, IndexError> {
    Ok(match e {
        Expr::All | Expr::Not(_) => None,
        Expr::Key { kind, lo, hi } => {
            let mut v = Vec::new();
            let key = Key {
                kind: *kind,
                value: *lo,
            };
            (lo == hi && idx.positions(key, &mut v)?).then_some(v)
        }
        Expr::And(a, b) => match (positions_of(a, idx)?, positions_of(b, idx)?) {
            (None, x) | (x, None) => x,
            (Some(mut x), Some(y)) => {
                x.retain(|p| y.binary_search(p).is_ok());
                Some(x)
            }
        },
        Expr::Or(a, b) => match positions_of(a, idx)? {
            None => None,
            Some(mut x) => positions_of(b, idx)?.map(|y| {
                x.extend(y);
                x.sort_unstable();
                x.dedup();
                x
            }),
        },
    })
}

/// The runs of a query answered by packet positions `at` (sorted): the
/// packets, near ones together, then those outside the candidate groups'
/// runs `groups` (the window's, the other terms') dropped, and the groups
/// holding packets the index cannot describe (`any`) read whole.
fn exact_runs(at: &[u64], groups: Option<&[Run]>, any: &[Run]) -> Vec<Run> {
    let inside = |runs: &[Run], p: u64| {
        let i = runs.partition_point(|r| r.to <= p);
        runs.get(i).is_some_and(|r| r.from <= p)
    };
    // A run read whole starts between `a` and `b`: packets on either side
    // of it are not read together (its packets would be read twice).
    let crosses = |a: u64, b: u64| {
        let i = any.partition_point(|r| r.from <= a);
        any.get(i).is_some_and(|r| r.from < b)
    };
    let mut out: Vec<Run> = Vec::new();
    for &p in at {
        if groups.is_some_and(|g| !inside(g, p)) || inside(any, p) {
            continue;
        }
        match out.last_mut() {
            Some(r) if p - (r.to - 1) < NEAR && !crosses(r.to - 1, p) => r.to = p + 1,
            _ => out.push(Run {
                first: 0,
                end: 0,
                from: p,
                to: p + 1,
                exact: true,
            }),
        }
    }
    out.extend_from_slice(any);
    out.sort_by_key(|r| r.from);
    out
}

/// The packets' positions a query reads `idx` through: those the index
/// lists for its filter `e` ([`positions_of`]), if they are fewer than
/// twice the candidate groups `cands` (a group read holds up to 32
/// packets; a term that narrows the groups far more, `port P and host H`,
/// is read by groups). Files of one epoch only (see `file/exact.rs`).
fn positions_for(
    e: &Expr,
    idx: &Index,
    cands: Option<&[bool]>,
) -> Result<Option<Vec<u64>>, IndexError> {
    if idx.epochs.len() != 1 {
        return Ok(None);
    }
    let ncand = cands.map_or(idx.group_count(), |c| c.iter().filter(|&&x| x).count());
    Ok(positions_of(e, idx)?.filter(|a| a.len() <= 2 * ncand))
}

/// True if every packet of `idx` is inside `window`.
fn whole(idx: &Index, window: &Window) -> bool {
    window.after.is_none_or(|a| a <= idx.summary.min_ts)
        && window.before.is_none_or(|b| b > idx.summary.max_ts)
}

/// The runs to read of `idx` for the query: through the packet positions
/// `at` ([`positions_for`]) if there are, else by candidate groups
/// ([`runs_of`]).
fn plan_runs(
    idx: &Index,
    at: Option<Vec<u64>>,
    cands: Option<&[bool]>,
    window: &Window,
) -> Result<Vec<Run>, IndexError> {
    let Some(at) = at else {
        return runs_of(idx, cands, window);
    };
    let mut any = vec![false; idx.group_count()];
    idx.mark(Kind::Any, 0, 0, &mut any)?;
    let any = match any.contains(&true) {
        true => runs_of(idx, Some(&any), window)?,
        false => Vec::new(),
    };
    // The window cuts the file: only the positions inside the candidate
    // groups in the window (the pages of groups are read for that alone).
    let groups = match whole(idx, window) {
        true => None,
        false => Some(runs_of(idx, cands, window)?),
    };
    Ok(exact_runs(&at, groups.as_deref(), &any))
}

/// Key blocks a query may decode in one file's index, over all of its
/// terms: 256 keys each, ~0.5 ms of CPU all told. A term whose range
/// spans more than what is left (`net 0.0.0.0/0`: every block of the
/// addresses) counts as matching every group instead, so a filter of many
/// wide terms (256 copies of `net 0.0.0.0/0 or`, from a client of ringcapd
/// or `ringcap serve`) costs a scan of the file, which the query's deadline
/// bounds, not 256 walks of the whole key table before any packet is read.
/// Narrow terms (a host, a port, a flow) take a block or two each.
const BLOCK_BUDGET: usize = 1024;

/// Takes from `budget` the key blocks a lookup of `kind` in `lo..=hi`
/// reads (and those of the undescribable packets'); false, leaving it, if
/// they are more than it holds.
fn spend(idx: &Index, kind: Kind, lo: u128, hi: u128, budget: &mut usize) -> bool {
    let cost = idx.blocks_in(kind, lo, hi) + idx.blocks_in(Kind::Any, 0, 0);
    let ok = cost <= *budget;
    if ok {
        *budget -= cost;
    }
    ok
}

/// Candidate groups of `idx` for `e`: `None` means all of them. `budget`:
/// key blocks still allowed (see [`BLOCK_BUDGET`]).
fn candidates(e: &Expr, idx: &Index, budget: &mut usize) -> Result<Option<Vec<bool>>, IndexError> {
    let n = idx.group_count();
    Ok(match e {
        Expr::All | Expr::Not(_) => None,
        Expr::Key { kind, lo, hi } => {
            if !spend(idx, *kind, *lo, *hi, budget) {
                return Ok(None);
            }
            let mut v = vec![false; n];
            idx.mark(*kind, *lo, *hi, &mut v)?;
            idx.mark(Kind::Any, 0, 0, &mut v)?;
            Some(v)
        }
        Expr::And(a, b) => match (candidates(a, idx, budget)?, candidates(b, idx, budget)?) {
            (None, x) | (x, None) => x,
            (Some(mut x), Some(y)) => {
                x.iter_mut().zip(y).for_each(|(a, b)| *a &= b);
                Some(x)
            }
        },
        // Every group already: the other side is not looked up.
        Expr::Or(a, b) => match candidates(a, idx, budget)? {
            None => None,
            Some(mut x) => match candidates(b, idx, budget)? {
                None => None,
                Some(y) => {
                    x.iter_mut().zip(y).for_each(|(a, b)| *a |= b);
                    Some(x)
                }
            },
        },
    })
}

/// Asks the kernel to read the key blocks [`candidates`] of the same
/// arguments will read (a hint), within the same budget.
fn will_need(e: &Expr, idx: &Index) {
    fn keys(e: &Expr, idx: &Index, budget: &mut usize) {
        match e {
            Expr::All | Expr::Not(_) => {}
            Expr::Key { kind, lo, hi } => {
                if spend(idx, *kind, *lo, *hi, budget) {
                    idx.will_need_keys(*kind, *lo, *hi);
                }
            }
            Expr::And(a, b) | Expr::Or(a, b) => {
                keys(a, idx, budget);
                keys(b, idx, budget);
            }
        }
    }
    if !matches!(e, Expr::All | Expr::Not(_)) {
        let mut budget = BLOCK_BUDGET;
        keys(e, idx, &mut budget);
        idx.will_need_keys(Kind::Any, 0, 0);
    }
}

/// True if page `p` of `idx` may hold a group to read: a candidate
/// (`None`: all are) in a page whose time range meets the window.
fn page_wanted(idx: &Index, p: usize, cands: Option<&[bool]>, window: &Window) -> bool {
    let page = idx.page(p);
    cands.is_none_or(|c| c[page.groups].contains(&true))
        && window.overlaps(page.min_ts, page.max_ts)
}

/// [`prepare`] on `1 + q.readers` threads (the query's and as many as it
/// may read with), each a share of `paths` in order, each hinting its
/// share's reads: opening the bench's 40 indexes on one thread was ~9 ms
/// of a 95 ms warm port query.
pub(super) fn prepare_shared(
    q: &Query,
    paths: &[&PathBuf],
) -> Result<Vec<Result<Prepared, Unusable>>, QueryError> {
    let parts = q
        .readers
        .saturating_add(1)
        .min(paths.len().div_ceil(PER_THREAD))
        .max(1);
    if parts == 1 {
        return prepare(q, paths);
    }
    let share = paths.len().div_ceil(parts);
    let chunks: Vec<&[&PathBuf]> = paths.chunks(share).collect();
    std::thread::scope(|scope| {
        // The first share is this thread's; a share whose thread could not
        // be started is prepared here too, in its turn.
        let others: Vec<_> = chunks[1..]
            .iter()
            .map(|&c| {
                std::thread::Builder::new()
                    .name("ringcap-prepare".into())
                    .spawn_scoped(scope, move || prepare(q, c))
                    .ok()
            })
            .collect();
        let mut out = prepare(q, chunks[0])?;
        for (c, h) in chunks[1..].iter().zip(others) {
            let part = match h {
                Some(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                None => prepare(q, c),
            };
            out.extend(part?);
        }
        Ok(out)
    })
}

/// Indexes a preparing thread opens at least.
const PER_THREAD: usize = 8;

/// The indexes of `paths` (none of them a file being written), prepared
/// for `q`: for each, what [`runs_of`] leaves, or why its index is not
/// used. All of their reads are hinted first (see the module docs).
pub(super) fn prepare(
    q: &Query,
    paths: &[&PathBuf],
) -> Result<Vec<Result<Prepared, Unusable>>, QueryError> {
    let owned: Vec<PathBuf> = paths.iter().map(|p| (*p).clone()).collect();
    hint_heads(&owned);
    let opened: Vec<Result<Index, Unusable>> = paths
        .iter()
        .map(|p| load_index_into(p, Vec::new()))
        .collect();
    let live =
        |i: &Index| i.group_count() > 0 && q.window.overlaps(i.summary.min_ts, i.summary.max_ts);
    for idx in opened.iter().flatten().filter(|i| live(i)) {
        will_need(&q.plan, idx);
    }
    // A block of an index found damaged (its checksum) makes that index
    // unusable, as a damaged head does: the file is scanned, the query
    // goes on.
    let damaged = |path: &PathBuf, e: IndexError| {
        Unusable::Bad(format!(
            "{}: {e}",
            ringcap_format::sidecar::index_path(path).display()
        ))
    };
    let mut cands = Vec::with_capacity(paths.len());
    for (path, idx) in paths.iter().zip(&opened) {
        cands.push(match idx {
            Ok(idx) if live(idx) => {
                let mut budget = BLOCK_BUDGET;
                let found = candidates(&q.plan, idx, &mut budget).and_then(|c| {
                    let at = positions_for(&q.plan, idx, c.as_deref())?;
                    // Read by positions in a file wholly in the window: its
                    // pages of groups are not read (3,300 hints of pages for
                    // nothing, in the query's thread, over the bench's 40 files).
                    if at.is_none() || !whole(idx, &q.window) {
                        for p in 0..idx.pages() {
                            if page_wanted(idx, p, c.as_deref(), &q.window) {
                                idx.will_need_page(p);
                            }
                        }
                    }
                    Ok((c, at))
                });
                match found {
                    Ok((c, at)) => Ok((c, at, BLOCK_BUDGET - budget)),
                    Err(e) => Err(damaged(path, e)),
                }
            }
            _ => Ok((None, None, 0)),
        });
    }
    let mut out = Vec::with_capacity(paths.len());
    for ((path, idx), cand) in paths.iter().zip(opened).zip(cands) {
        out.push(match (idx, cand) {
            (Ok(idx), Ok((c, at, key_blocks))) => {
                let runs = if live(&idx) {
                    plan_runs(&idx, at, c.as_deref(), &q.window)
                } else {
                    Ok(Vec::new())
                };
                runs.map_err(|e| damaged(path, e)).map(|runs| Prepared {
                    summary: idx.summary.clone(),
                    epochs: idx.epochs.clone(),
                    groups: idx.group_count(),
                    runs,
                    key_blocks,
                })
            }
            (Ok(_), Err(e)) | (Err(e), _) => Err(e),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(from: u64, to: u64) -> Run {
        Run {
            first: 0,
            end: 1,
            from,
            to,
            exact: false,
        }
    }

    /// Near positions are read together, but never across a group read
    /// whole (its packets would come twice), never inside one, and never
    /// outside the candidate groups when those are given.
    #[test]
    fn runs_of_positions() {
        let spans = |runs: &[Run]| -> Vec<(u64, u64, bool)> {
            runs.iter().map(|r| (r.from, r.to, r.exact)).collect()
        };
        let any = [group(1000, 2000)];
        let at = [100, 500, 1500, 3000, 3100, 9000, 20_000];
        assert_eq!(
            spans(&exact_runs(&at, None, &any)),
            [
                (100, 501, true),
                (1000, 2000, false),
                (3000, 3101, true),
                (9000, 9001, true),
                (20_000, 20_001, true)
            ]
        );
        let groups = [group(0, 600), group(1000, 2000), group(8000, 10_000)];
        assert_eq!(
            spans(&exact_runs(&at, Some(&groups), &any)),
            [(100, 501, true), (1000, 2000, false), (9000, 9001, true)]
        );
        assert_eq!(spans(&exact_runs(&at, Some(&[]), &[])), []);
    }
}
