//! The lone subscriber's filter on the hub's kernel socket.
//!
//! The hub's socket normally accepts every packet and each subscriber's
//! filter runs in user space, on the hub thread's CPU (pktd's one copy for
//! all clients). With one subscriber, that filter can run in the kernel
//! instead, in softirq on the CPU that receives the packet (on veth, the
//! sender's): the hub then skips the user-space pass for blocks the kernel
//! filled under that program, and the kernel drops what the subscriber would
//! not take before copying it. This is worth it only when the kernel's
//! program decides exactly what the user-space one would, so a program is
//! put in the kernel only when that is certain:
//!
//! - it is the session's combined program (framework AND client, as the
//!   policy's admission made it: nothing is decided here), both parts run
//!   on the kernel's view of the frame (no `vlan` test on a re-tagged
//!   frame), and there is no `exclude` rule (that runs in user space only);
//! - it reads only the packet's bytes and length: no ancillary loads (the
//!   kernel would answer them, the interpreter refuses them), and every
//!   indexed load's offset provably stays below 2^31 (the kernel takes
//!   `X + k` as a signed 32-bit number and reads link- or network-layer
//!   headers for some negative ones; the interpreter refuses them); no shift
//!   by X (the kernel masks the count, the interpreter makes 0), no shift by
//!   32 or more, no division by a constant 0;
//! - it returns constants only: the kernel cuts the copy to the returned
//!   number, so every accepting return is raised to the hub's snap length
//!   (the interpreter's answer is only "kept or not" here).
//!
//! The hub then checks, per group, that every packet is whole in the ring
//! (`data.len() == wire_len`): the kernel filtered the whole packet, the
//! interpreter would see only what was copied.

use super::{Entry, Shared, HUB_SNAPLEN, NARROW_EVERY};
use crate::source::live::LiveSource;
use ringcap_stages::{Instruction, Program, SessionFilter, MAX_INSTRUCTIONS};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The kernel program that accepts every packet whole.
pub(super) fn accept_all() -> Vec<libc::sock_filter> {
    crate::capture::sock_filter(&Program::accept_all(HUB_SNAPLEN))
}

/// Puts back the filter that accepts every packet, if the kernel filter is
/// narrowed to a subscriber. Called by whoever changes the subscribers (after
/// queueing the change): packets that arrive after it returns reach the ring
/// whatever the subscriber it was narrowed to thinks of them. The epoch goes
/// up first, so the hub thread stops trusting the kernel's decisions before
/// any packet the wider filter passed can reach it.
pub(super) fn widen(shared: &Shared) {
    let mut narrowed = shared.narrowed.lock().unwrap_or_else(|e| e.into_inner());
    if narrowed.is_none() {
        return;
    }
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    match shared.filter.set(&accept_all()) {
        Ok(()) => *narrowed = None,
        Err(e) => {
            // The new subscriber would miss packets: end the capture loudly.
            *shared.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                "cannot widen the kernel filter of {}: {e}",
                shared.interface.name
            ));
        }
    }
}
/// The kernel filter narrowed to one subscriber: its packets in blocks from
/// sequence number `from` on were judged by the kernel, as long as the epoch
/// stays `epoch`.
pub(super) struct Narrow {
    pub(super) epoch: u64,
    pub(super) from: u64,
    pub(super) id: u64,
}

/// Puts the lone subscriber's filter on the hub's socket when the kernel
/// would decide exactly as user space ([`kernel`]), and says from which block
/// on the hub may trust it.
///
/// Packets are filtered in softirq on whichever CPU receives them, under
/// RCU, and the kernel swaps the program without waiting: a packet that was
/// being received under the old program can still land in the ring after
/// the swap. So the hub waits for a grace period (`rcu_barrier`): every
/// packet the old program passed is in the ring then, in a block no later
/// than the one the kernel is filling; the hub trusts only the blocks opened
/// after that (`fresh_from`) and filters the rest itself as before.
///
/// Widening goes the other way (`widen`, by whoever adds a subscriber): the
/// epoch goes up before the wider program is on, so no block with a packet
/// it passed is taken for the kernel's decision. Nothing here runs per
/// packet: a few comparisons per loop, a system call or two per change.
pub(super) fn try_narrow(
    source: &mut LiveSource,
    shared: &Shared,
    entries: &[Entry],
    settled: bool,
    narrow: &mut Option<Narrow>,
    refused: &mut Option<u64>,
    next_narrowing: &mut Instant,
) {
    let [e] = entries else { return };
    if !settled || *refused == Some(e.id) {
        return;
    }
    if narrow
        .as_ref()
        .is_some_and(|n| n.id == e.id && shared.epoch.load(Ordering::SeqCst) == n.epoch)
    {
        return;
    }
    let Some(program) = &e.kernel else {
        *refused = Some(e.id);
        return;
    };
    let now = Instant::now();
    if now < *next_narrowing {
        return;
    }
    let mut narrowed = shared.narrowed.lock().unwrap_or_else(|e| e.into_inner());
    // A subscriber being added or replaced: that comes first. (One queued
    // after this look widens the filter again once this lock is free.)
    if shared.changed.load(Ordering::SeqCst) {
        return;
    }
    *next_narrowing = now + NARROW_EVERY;
    let epoch = shared.epoch.fetch_add(1, Ordering::SeqCst) + 1;
    if shared.filter.set(program).is_err() {
        // The kernel refused it (its checks are stricter on scratch memory
        // never stored): the filter stays as it was, so does user space.
        *refused = Some(e.id);
        return;
    }
    *narrowed = Some(e.id);
    if ringcap_source::sys::rcu_barrier().is_err() {
        // The kernel filters for it; user space still does too.
        *refused = Some(e.id);
        return;
    }
    *narrow = Some(Narrow {
        epoch,
        from: source.fresh_from(),
        id: e.id,
    });
}
/// "Unknown": any 32-bit value.
const ANY: u64 = u32::MAX as u64;

/// The program to put on the hub's socket for a subscriber with `filter`
/// alone, or None when the kernel would not decide exactly as user space.
pub(crate) fn program(filter: &SessionFilter) -> Option<Vec<libc::sock_filter>> {
    if filter.framework_tagged || filter.client_tagged || filter.exclude.is_some() {
        return None;
    }
    let insns = &filter.combined.program().instructions;
    if insns.is_empty() || insns.len() > MAX_INSTRUCTIONS || !same_in_kernel(insns) {
        return None;
    }
    Some(
        insns
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: if i.code == 0x06 && i.k != 0 {
                    HUB_SNAPLEN
                } else {
                    i.k
                },
            })
            .collect(),
    )
}

/// Upper bounds of A, X and the 16 scratch words at one instruction.
#[derive(Clone, Copy)]
struct Bounds {
    a: u64,
    x: u64,
    m: [u64; 16],
}

impl Bounds {
    fn join(&mut self, o: &Bounds) {
        self.a = self.a.max(o.a);
        self.x = self.x.max(o.x);
        for (m, n) in self.m.iter_mut().zip(o.m) {
            *m = (*m).max(n);
        }
    }
}

/// A bound that may have wrapped past 32 bits is unknown.
fn cap(v: u64) -> u64 {
    if v > ANY {
        ANY
    } else {
        v
    }
}

/// Bound of `a | b` or `a ^ b`: all bits up to the highest of either.
fn bits(a: u64, b: u64) -> u64 {
    let v = a.max(b);
    if v == 0 {
        0
    } else {
        cap(u64::MAX >> v.leading_zeros())
    }
}

/// True when the kernel runs `insns` exactly as the interpreter does on a
/// whole packet (see the module doc). Jumps go forward only (libpcap's
/// check), so one pass in order sees every path into an instruction first.
fn same_in_kernel(insns: &[Instruction]) -> bool {
    let len = insns.len();
    let mut at: Vec<Option<Bounds>> = vec![None; len];
    // The kernel starts A and X at 0; scratch words are whatever was stored.
    at[0] = Some(Bounds {
        a: 0,
        x: 0,
        m: [ANY; 16],
    });
    let flow = |at: &mut Vec<Option<Bounds>>, to: usize, b: &Bounds| -> bool {
        if to >= len {
            return false;
        }
        match &mut at[to] {
            Some(t) => t.join(b),
            slot => *slot = Some(*b),
        }
        true
    };
    for pc in 0..len {
        // Unreachable: nothing to check.
        let Some(mut b) = at[pc] else { continue };
        let i = insns[pc];
        let k = u64::from(i.k);
        let neg = i.k >= 0x8000_0000;
        let mem = usize::try_from(i.k).ok().filter(|&m| m < 16);
        let size = |code: u16| match code & 0x18 {
            0x00 => ANY,
            0x08 => 0xffff,
            _ => 0xff,
        };
        match i.code {
            // ret #k
            0x06 => continue,
            0x20 | 0x28 | 0x30 => {
                if neg {
                    return false;
                }
                b.a = size(i.code);
            }
            0x40 | 0x48 | 0x50 => {
                if b.x + k >= 0x8000_0000 {
                    return false;
                }
                b.a = size(i.code);
            }
            0x80 => b.a = ANY,
            0x81 => b.x = ANY,
            0x00 => b.a = k,
            0x01 => b.x = k,
            0x60 | 0x61 | 0x02 | 0x03 => {
                let Some(m) = mem else { return false };
                match i.code {
                    0x60 => b.a = b.m[m],
                    0x61 => b.x = b.m[m],
                    0x02 => b.m[m] = b.a,
                    _ => b.m[m] = b.x,
                }
            }
            0xb1 => {
                if neg {
                    return false;
                }
                b.x = 60;
            }
            0x05 => {
                if !flow(&mut at, pc + 1 + i.k as usize, &b) {
                    return false;
                }
                continue;
            }
            0x15 | 0x25 | 0x35 | 0x45 | 0x1d | 0x2d | 0x3d | 0x4d => {
                if !flow(&mut at, pc + 1 + usize::from(i.jt), &b)
                    || !flow(&mut at, pc + 1 + usize::from(i.jf), &b)
                {
                    return false;
                }
                continue;
            }
            0x04 => b.a = cap(b.a + k),
            0x0c => b.a = cap(b.a + b.x),
            0x14 | 0x1c | 0x84 => b.a = ANY,
            0x24 => b.a = cap(b.a.saturating_mul(k)),
            0x2c => b.a = cap(b.a.saturating_mul(b.x)),
            0x34 | 0x94 if k == 0 => return false,
            0x34 => b.a /= k,
            0x94 => b.a = b.a.min(k - 1),
            // A / X and A % X are at most A (X = 0 ends the program).
            0x3c | 0x9c => {}
            0x54 => b.a = b.a.min(k),
            0x5c => b.a = b.a.min(b.x),
            0x44 | 0xa4 => b.a = bits(b.a, k),
            0x4c | 0xac => b.a = bits(b.a, b.x),
            0x64 | 0x74 if k >= 32 => return false,
            0x64 => b.a = cap(b.a << k),
            0x74 => b.a >>= k,
            0x07 => b.x = b.a,
            0x87 => b.a = b.x,
            // ret a (the kernel would cut the copy to A), shifts by X, and
            // anything else.
            _ => return false,
        }
        if !flow(&mut at, pc + 1, &b) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringcap_stages::filter::Target;
    use ringcap_stages::{CheckedProgram, Program};

    /// A session filter of `insns`, if libpcap's checks take it.
    fn checked(insns: Vec<Instruction>) -> Option<SessionFilter> {
        let p = CheckedProgram::new(Program {
            instructions: insns,
        })?;
        Some(SessionFilter::single(p, false))
    }

    fn filter(insns: Vec<Instruction>) -> SessionFilter {
        checked(insns).expect("a valid program")
    }

    fn compiled(text: &str) -> SessionFilter {
        let p = ringcap_stages::compile(text, 1, 96, Target::Offline).expect("compiles");
        filter(p.instructions)
    }

    fn insn(code: u16, k: u32) -> Instruction {
        Instruction {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    #[test]
    fn libpcap_filters_go_in_with_returns_raised() {
        for text in [
            "udp and not dst port 60000",
            "tcp[tcpflags] & tcp-syn != 0",
            "ip6 and tcp port 80",
            "greater 300",
            "ip[6:2] & 0x3fff != 0",
            "icmp or arp",
        ] {
            let f = compiled(text);
            let p = program(&f).unwrap_or_else(|| panic!("{text}: not taken"));
            let orig = &f.combined.program().instructions;
            assert_eq!(p.len(), orig.len(), "{text}");
            for (k, o) in p.iter().zip(orig) {
                assert_eq!((k.code, k.jt, k.jf), (o.code, o.jt, o.jf), "{text}");
                let want = if o.code == 0x06 && o.k != 0 {
                    HUB_SNAPLEN
                } else {
                    o.k
                };
                assert_eq!(k.k, want, "{text}");
            }
        }
    }

    #[test]
    fn programs_the_kernel_would_run_otherwise_stay_out() {
        let ret = insn(0x06, 96);
        let cases: Vec<(&str, Vec<Instruction>)> = vec![
            // An ancillary load (SKF_AD_OFF + SKF_AD_PROTOCOL).
            ("ancillary", vec![insn(0x28, 0xffff_f000), ret]),
            // ret a: the kernel would cut the copy.
            ("ret a", vec![insn(0x30, 0), insn(0x16, 0)]),
            // X from a word of the packet, then an indexed load.
            (
                "x from a word",
                vec![insn(0x20, 0), insn(0x07, 0), insn(0x50, 0), ret],
            ),
            // X from scratch memory never stored.
            ("x from memory", vec![insn(0x61, 3), insn(0x50, 0), ret]),
            // X small but k huge.
            ("k huge", vec![insn(0xb1, 14), insn(0x50, 0x7fff_fff0), ret]),
            ("shift by x", vec![insn(0x01, 3), insn(0x6c, 0), ret]),
            ("shift by 32", vec![insn(0x64, 32), ret]),
            ("div by 0", vec![insn(0x34, 0), ret]),
        ];
        for (what, insns) in cases {
            // (libpcap's checks already refuse some.)
            if let Some(f) = checked(insns) {
                assert!(program(&f).is_none(), "{what} was taken");
            }
        }
        // Bounded X through scratch memory and arithmetic is fine.
        let ok = vec![
            insn(0xb1, 14),
            insn(0x03, 2),
            insn(0x61, 2),
            insn(0x87, 0),
            insn(0x04, 20),
            insn(0x07, 0),
            insn(0x48, 0),
            ret,
        ];
        assert!(program(&filter(ok)).is_some());
        // Tagged views and exclude rules stay in user space.
        let mut f = compiled("udp");
        f.client_tagged = true;
        assert!(program(&f).is_none());
    }
}
