//! Running a group of packets at once along the paths earlier packets took
//! through a program ([`Decoded::run_group`]): the paths, how they are
//! recorded and how a group follows one. Apart from the one-packet
//! interpreter (the parent) because it is an optimization of its own over
//! it: it runs each instruction with the parent's [`exec`], and gives the
//! same answers as [`Decoded::run`].

use super::{exec, Decoded, Op, Record, Regs, Step};

impl Decoded {
    /// Runs the program on a group of up to [`LANES`] packets (`data[i]`,
    /// `wire_len[i]`), writing each one's answer to `out[i]`: the same
    /// answers as [`run`](Self::run) on each.
    ///
    /// Why: an interpreter dispatches on every instruction, and the
    /// processor mispredicts where that jump goes when the next packet's
    /// instructions differ from the last one's (another program, another
    /// path). Here the group runs through `paths`, paths that earlier
    /// packets took through the program, one instruction at a time across
    /// every packet still on the path: the dispatch jumps to the same place
    /// for the whole group, and a conditional jump only checks that the
    /// packet goes the way the path went. Packets that leave a path try the
    /// next one; what is left runs alone, the first of them recording a new
    /// path.
    pub fn run_group(&self, paths: &mut Paths, data: &[&[u8]], wire_len: &[u32], out: &mut [u32]) {
        let n = data.len().min(wire_len.len()).min(out.len()).min(LANES);
        if !self.traceable {
            for i in 0..n {
                out[i] = self.run(data[i], wire_len[i]);
            }
            return;
        }
        let mut todo = if n == LANES {
            u64::MAX
        } else {
            (1u64 << n) - 1
        };
        for path in &mut paths.paths {
            if todo == 0 {
                return;
            }
            let left = path.run(todo, data, wire_len, out);
            path.used += u64::from((todo & !left).count_ones());
            todo = left;
        }
        let mut recorded = false;
        while todo != 0 {
            let i = todo.trailing_zeros() as usize;
            todo &= todo - 1;
            out[i] = if recorded {
                self.run(data[i], wire_len[i])
            } else {
                recorded = true;
                paths.record(self, data[i], wire_len[i])
            };
        }
    }
}

impl Record for Vec<PathStep> {
    #[inline(always)]
    fn op(&mut self, op: Op, taken: bool) {
        self.push(PathStep { op, taken });
    }
}

/// Packets [`Decoded::run_group`] takes at once (one bit each of a `u64`).
pub const LANES: usize = 64;

/// Paths one program keeps (the ones the most packets took are kept).
const MAX_PATHS: usize = 4;

#[derive(Debug, Clone, Copy)]
struct PathStep {
    op: Op,
    /// For a conditional jump: the way the recorded packet went.
    taken: bool,
}

/// One path through a program: the operations a packet executed, in order,
/// ending with a return; none of them a store to scratch memory.
#[derive(Debug, Clone, Default)]
struct Path {
    steps: Vec<PathStep>,
    /// Packets that took it (to choose which one a new path replaces).
    used: u64,
}

impl Path {
    /// Runs the packets of `lanes` along the path, setting `out` for those
    /// that stay on it (or stop early: a load beyond the packet, a division
    /// by zero); returns the lanes that left it. The usual instructions
    /// (loads, tests, returns) have a loop of their own over the lanes, the
    /// rest go through [`exec`] lane by lane.
    fn run(&self, lanes: u64, data: &[&[u8]], wire_len: &[u32], out: &mut [u32]) -> u64 {
        let n = data.len().min(wire_len.len()).min(out.len()).min(LANES);
        // Fixed-size local copies: lane indexes below LANES need no bounds
        // checks. Made once per path run, not once per group: passing one
        // shared copy by reference was ~20% slower in hub_speed.
        let mut d: [&[u8]; LANES] = [&[]; LANES];
        let mut len = [0u32; LANES];
        for i in 0..n {
            d[i] = &data[i][..data[i].len().min(u32::MAX as usize)];
            len[i] = wire_len[i];
        }
        let mut res = [0u32; LANES];
        let mut ra = [0u32; LANES];
        let mut rx = [0u32; LANES];
        // Never written: paths have no stores, and a load from scratch memory
        // that was not stored to reads 0 in `run` too.
        let mut mem = [0u32; 16];
        let in_range = if n == LANES {
            u64::MAX
        } else {
            (1u64 << n) - 1
        };
        let (mut alive, mut left, mut done) = (lanes & in_range, 0u64, 0u64);
        // Loops over the lanes still on the path.
        macro_rules! lanes {
            (|$i:ident| $body:expr) => {{
                if alive == in_range {
                    // Every lane still on the path (the usual case): a
                    // plain loop, no bit scanning.
                    for $i in 0..n {
                        $body
                    }
                } else {
                    let mut m = alive;
                    while m != 0 {
                        let $i = m.trailing_zeros() as usize % LANES;
                        m &= m - 1;
                        $body
                    }
                }
            }};
        }
        // A load of `$w` bytes at `$off` into A of lane `$i`, then `$test`
        // on it checked against the path's way; a load beyond the packet
        // ends the lane with 0.
        macro_rules! load_test {
            ($i:ident, $off:expr, $w:literal, $taken:expr, |$a:ident| $test:expr) => {{
                match load(d[$i], $off, $w) {
                    Some($a) => {
                        ra[$i] = $a;
                        if ($test) != $taken {
                            alive &= !(1 << $i);
                            left |= 1 << $i;
                        }
                    }
                    None => {
                        alive &= !(1 << $i);
                        done |= 1 << $i;
                    }
                }
            }};
        }
        // A load into A; a load beyond the packet ends the lane with 0.
        macro_rules! load_a {
            ($i:ident, $off:expr, $w:literal) => {{
                match load(d[$i], $off, $w) {
                    Some(a) => ra[$i] = a,
                    None => {
                        alive &= !(1 << $i);
                        done |= 1 << $i;
                    }
                }
            }};
        }
        for s in &self.steps {
            if alive == 0 {
                break;
            }
            let taken = s.taken;
            match s.op {
                Op::LdHJeq(k, v, _, _) => {
                    lanes!(|i| load_test!(i, k as usize, 2, taken, |a| a == v))
                }
                Op::LdBJeq(k, v, _, _) => {
                    lanes!(|i| load_test!(i, k as usize, 1, taken, |a| a == v))
                }
                Op::LdWJeq(k, v, _, _) => {
                    lanes!(|i| load_test!(i, k as usize, 4, taken, |a| a == v))
                }
                Op::LdHJset(k, v, _, _) => {
                    lanes!(|i| load_test!(i, k as usize, 2, taken, |a| a & v != 0))
                }
                Op::LdBJset(k, v, _, _) => {
                    lanes!(|i| load_test!(i, k as usize, 1, taken, |a| a & v != 0))
                }
                Op::LdHJgt(k, v, _, _) => {
                    lanes!(|i| load_test!(i, k as usize, 2, taken, |a| a > v))
                }
                Op::LdHJge(k, v, _, _) => {
                    lanes!(|i| load_test!(i, k as usize, 2, taken, |a| a >= v))
                }
                Op::LdHIndJeq(k, v, _, _) => {
                    lanes!(|i| load_test!(i, rx[i] as usize + k as usize, 2, taken, |a| a == v))
                }
                Op::LdBIndJeq(k, v, _, _) => {
                    lanes!(|i| load_test!(i, rx[i] as usize + k as usize, 1, taken, |a| a == v))
                }
                Op::LdxMsh(k) => lanes!(|i| match load(d[i], k as usize, 1) {
                    Some(b) => rx[i] = (b & 0xf) << 2,
                    None => {
                        alive &= !(1 << i);
                        done |= 1 << i;
                    }
                }),
                Op::LdW(k) => lanes!(|i| load_a!(i, k as usize, 4)),
                Op::LdH(k) => lanes!(|i| load_a!(i, k as usize, 2)),
                Op::LdB(k) => lanes!(|i| load_a!(i, k as usize, 1)),
                Op::AndK(k) => lanes!(|i| ra[i] &= k),
                Op::JgtK(k, _, _) => lanes!(|i| {
                    if (ra[i] > k) != taken {
                        alive &= !(1 << i);
                        left |= 1 << i;
                    }
                }),
                Op::JgeK(k, _, _) => lanes!(|i| {
                    if (ra[i] >= k) != taken {
                        alive &= !(1 << i);
                        left |= 1 << i;
                    }
                }),
                Op::JeqK(k, _, _) => lanes!(|i| {
                    if (ra[i] == k) != taken {
                        alive &= !(1 << i);
                        left |= 1 << i;
                    }
                }),
                Op::JsetK(k, _, _) => lanes!(|i| {
                    if (ra[i] & k != 0) != taken {
                        alive &= !(1 << i);
                        left |= 1 << i;
                    }
                }),
                Op::RetK(k) => {
                    lanes!(|i| res[i] = k);
                    done |= alive;
                    alive = 0;
                }
                Op::RetA => {
                    lanes!(|i| res[i] = ra[i]);
                    done |= alive;
                    alive = 0;
                }
                op => lanes!(|i| {
                    let mut r = Regs { a: ra[i], x: rx[i] };
                    match exec(op, &mut r, &mut mem, d[i], len[i]) {
                        Step::Next | Step::Jump(_) => {}
                        Step::Branch(t, _, _) => {
                            if t != taken {
                                alive &= !(1 << i);
                                left |= 1 << i;
                            }
                        }
                        Step::Return(v) => {
                            res[i] = v;
                            alive &= !(1 << i);
                            done |= 1 << i;
                        }
                    }
                    ra[i] = r.a;
                    rx[i] = r.x;
                }),
            }
        }
        let mut m = done;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(o) = out.get_mut(i) {
                *o = res[i % LANES];
            }
        }
        // Only a path that does not end with a return leaves lanes alive
        // here; none is kept, but they must not go unanswered.
        left | alive
    }
}

/// The `w`-byte big-endian load at `off`, if it lies inside `d`.
#[inline(always)]
fn load(d: &[u8], off: usize, w: usize) -> Option<u32> {
    let b = d.get(off..off.checked_add(w)?)?;
    Some(b.iter().fold(0u32, |v, &x| (v << 8) | u32::from(x)))
}

/// The paths packets took through one program, for
/// [`Decoded::run_group`]; empty at first. Use one per program.
#[derive(Debug, Clone, Default)]
pub struct Paths {
    paths: Vec<Path>,
    recording: Vec<PathStep>,
}

impl Paths {
    /// Runs `d` on one packet and keeps the path it took, if that path ends
    /// with a return instruction and stores nothing, in place of the least
    /// used one when all places are taken.
    #[cold]
    #[inline(never)]
    fn record(&mut self, d: &Decoded, data: &[u8], wire_len: u32) -> u32 {
        let mut steps = std::mem::take(&mut self.recording);
        steps.clear();
        let v = d.run_from(
            0,
            &mut Regs::default(),
            &mut [0; 16],
            data,
            wire_len,
            &mut steps,
        );
        let complete = matches!(
            steps.last(),
            Some(PathStep {
                op: Op::RetK(_) | Op::RetA,
                ..
            })
        );
        let stores = steps.iter().any(|s| matches!(s.op, Op::St(_) | Op::Stx(_)));
        if !complete || stores {
            self.recording = steps;
            return v;
        }
        let path = Path { steps, used: 1 };
        if self.paths.len() < MAX_PATHS {
            self.paths.push(path);
        } else if let Some(least) = self.paths.iter_mut().min_by_key(|p| p.used) {
            self.recording = std::mem::replace(least, path).steps;
        }
        // The most used first: most packets are done after one pass.
        self.paths.sort_by_key(|p| std::cmp::Reverse(p.used));
        v
    }
}
