//! The decoder of one block's records, one at a time: rebuilds each packet
//! from its reference's context, the coded fields and the byte runs, and
//! refuses (with the offset) whatever no encoder would have written.

use super::context::Contexts;
use super::fields::Fields;
use super::model::{
    get_small, same_ctx, uint, Kinds, Models, K_LITERAL, K_NUMBERED, K_OPEN, M_ACK, M_CAPLEN,
    M_FRAG, M_GAP, M_IPCSUM, M_IPID, M_L4CSUM, M_LIT_CAPLEN, M_LIT_WIRE, M_RUNLEN, M_RUNS, M_SEQ,
    M_TSECR, M_TSVAL, M_WIN, M_WIRE,
};
use super::predict::{id_choice, predict, predict_wire, put_fields};
use super::{
    allowed, F_ACK, F_CAPLEN, F_DIFF, F_FRAG, F_IPCSUM, F_IPID, F_KNOWN, F_L4CSUM, F_NEW, F_SEQ,
    F_TSECR, F_TSVAL, F_WIN, F_WIRE,
};
use crate::layout::{self, put16, MAXH};
use crate::rc;
use crate::varint::{self, Cursor};
use crate::{DecodeError, ErrorKind, Record, MAX_CAPLEN};

/// Where a decoder is in a block: the range decoder's state and the raw
/// bytes' position (offsets in the payload).
#[derive(Clone, Copy, Default)]
struct Pos {
    rc: rc::State,
    rc_end: usize,
    raw: usize,
}

/// Decodes one block's records, one at a time.
pub(crate) struct BlockDecoder {
    linktype: u32,
    /// Blocks of format version 2 (see the crate documentation).
    v2: bool,
    /// Blocks of format version 4 or later (runs of new contexts modelled).
    v4: bool,
    ctx: Contexts,
    m: Box<Models>,
    pos: Pos,
    kinds: Kinds,
    prev_same: bool,
    prev_ts: u64,
    rec: Vec<u8>,
}

const RC_AT: usize = 4;

impl BlockDecoder {
    /// A decoder of blocks of format `version` (one the crate reads).
    pub fn new(linktype: u32, version: u16) -> Self {
        BlockDecoder {
            linktype,
            v2: version == 2,
            v4: version >= 4,
            ctx: Contexts::new(),
            m: Models::new(),
            pos: Pos::default(),
            kinds: Kinds::default(),
            prev_same: false,
            prev_ts: 0,
            rec: Vec::new(),
        }
    }

    /// Starts decoding the block with payload `p` (at file offset `base`).
    pub fn reset(&mut self, p: &[u8], base: u64, base_ts: u64) -> Result<(), DecodeError> {
        self.ctx.reset();
        self.m.reset();
        self.prev_ts = base_ts;
        self.kinds = Kinds::default();
        self.prev_same = false;
        let err = |offset, kind| DecodeError { offset, kind };
        let h = p
            .get(..RC_AT)
            .ok_or(err(base + p.len() as u64, ErrorKind::Truncated))?;
        let n = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if n > p.len() - RC_AT {
            return Err(err(base, ErrorKind::BadLength));
        }
        let rc_end = RC_AT + n;
        let d = rc::Decoder::new(&p[RC_AT..rc_end], self.v2);
        self.pos = Pos {
            rc: d.state(),
            rc_end,
            raw: rc_end,
        };
        Ok(())
    }

    /// After the last record: every byte of the payload `p` was used.
    pub fn finished(&self, p: &[u8], base: u64) -> Result<(), DecodeError> {
        let at = RC_AT + self.pos.rc.pos;
        if at != self.pos.rc_end || self.pos.raw != p.len() {
            return Err(DecodeError {
                offset: base + at.min(self.pos.raw) as u64,
                kind: ErrorKind::TrailingBytes,
            });
        }
        Ok(())
    }

    /// The captured bytes of the record decoded last.
    pub fn data(&self) -> &[u8] {
        &self.rec
    }

    /// Decodes the next record of payload `p` (at file offset `base`).
    pub fn next(&mut self, p: &[u8], base: u64) -> Result<Record<'_>, DecodeError> {
        let pos = self.pos;
        let rcbuf = p.get(RC_AT..pos.rc_end).unwrap_or_default();
        let mut d = rc::Decoder::resume(rcbuf, pos.rc);
        let mut raw = Cursor {
            buf: p,
            pos: pos.raw,
            base,
        };
        let at = base + (RC_AT + pos.rc.pos) as u64;
        let r = self.record(&mut d, &mut raw, at);
        if d.over > 0 {
            return Err(DecodeError {
                offset: base + pos.rc_end as u64,
                kind: ErrorKind::Truncated,
            });
        }
        self.pos.rc = d.state();
        self.pos.raw = raw.pos;
        let (ts, wire) = r?;
        Ok(Record {
            ts,
            wire_len: wire,
            data: &self.rec,
        })
    }

    fn record(
        &mut self,
        d: &mut rc::Decoder<'_>,
        raw: &mut Cursor<'_>,
        at: u64,
    ) -> Result<(u64, u32), DecodeError> {
        let err = |kind| DecodeError { offset: at, kind };
        let m = &mut *self.m;
        let kind = self.kinds.get(d, m);
        if kind > K_OPEN {
            return Err(err(ErrorKind::BadTag(kind as u8)));
        }
        if kind >= K_LITERAL {
            let dts = uint(d, &mut m.dts[2], at)?;
            let wire = u32::try_from(uint(d, &mut m.field[M_LIT_WIRE], at)?)
                .map_err(|_| err(ErrorKind::BadLength))?;
            let caplen = uint(d, &mut m.field[M_LIT_CAPLEN], at)?;
            if caplen > MAX_CAPLEN as u64 {
                return Err(err(ErrorKind::BadLength));
            }
            if d.over > 0 {
                return Err(err(ErrorKind::Truncated));
            }
            let bytes = raw.bytes(caplen as usize)?;
            self.rec.clear();
            self.rec.extend_from_slice(bytes);
            if kind == K_OPEN {
                let Some(l) = layout::parse(self.linktype, &self.rec) else {
                    return Err(err(ErrorKind::NoLayout));
                };
                let s = self.ctx.alloc();
                let v = Fields::read(&l, &self.rec);
                self.ctx.store(s, true, 0, l, &self.rec, wire, &v);
                self.ctx.slots[s as usize].last_flags = 0;
                self.ctx.slots[s as usize].host_id = false;
                self.ctx.host_update(s);
            }
            let ts = self.prev_ts.wrapping_add(varint::unzigzag(dts) as u64);
            self.prev_ts = ts;
            return Ok((ts, wire));
        }
        let r = if kind == K_NUMBERED {
            (d.tree(&mut m.slot) << 8 | d.direct(8)) as u16
        } else {
            self.ctx.mru[kind as usize]
        };
        if !self.ctx.valid(r) {
            return Err(err(ErrorKind::EmptyContext));
        }
        let rs = &self.ctx.slots[r as usize];
        let l = rs.layout;
        let last_flags = rs.last_flags as u32;
        let mut flags = last_flags;
        let differ =
            d.bit(&mut m.same_flags[same_ctx(kind, self.prev_same, last_flags & F_NEW != 0)]);
        self.prev_same = !differ;
        if differ {
            flags = 0;
            let mut a = if self.v2 { F_KNOWN } else { allowed(&l) };
            while a != 0 {
                let k = a.trailing_zeros() as usize;
                a &= a - 1;
                if d.bit(&mut m.flag[k][(last_flags >> k) as usize & 1]) {
                    flags |= 1 << k;
                }
            }
        }
        if flags & !(F_KNOWN & allowed(&l)) != 0 {
            return Err(err(ErrorKind::BadFlags(flags)));
        }
        let continues = flags & F_NEW == 0;
        let dts = varint::unzigzag(uint(d, &mut m.dts[!continues as usize], at)?);
        let ts = self.prev_ts.wrapping_add(dts as u64);
        let old = rs.f;
        let su = |b: u32, v: u64| b.wrapping_add(varint::unzigzag(v) as i32 as u32);
        let su16 = |b: u16, v: u64| b.wrapping_add(varint::unzigzag(v) as i16 as u16);
        let mut v = Fields {
            win: old.win,
            tsval: old.tsval,
            tsecr: old.tsecr,
            ..Fields::default()
        };
        let f = &mut m.field;
        // The change of the checksum's prediction, or the checksum.
        let l4csum_d = if flags & F_L4CSUM != 0 {
            if d.bit(&mut m.csum_small[continues as usize]) {
                Some(Err(d.direct(16) as u16))
            } else {
                Some(Ok(uint(d, &mut f[M_L4CSUM], at)?))
            }
        } else {
            None
        };
        let ack_d = if flags & F_ACK != 0 {
            uint(d, &mut f[M_ACK], at)?
        } else {
            0
        };
        if flags & F_TSVAL != 0 {
            v.tsval = su(old.tsval, uint(d, &mut f[M_TSVAL], at)?);
        }
        if flags & F_TSECR != 0 {
            v.tsecr = su(old.tsecr, uint(d, &mut f[M_TSECR], at)?);
        }
        let wire_pred = predict_wire(rs);
        let wire = if flags & F_WIRE != 0 {
            let w = (wire_pred as i64).checked_add(varint::unzigzag(uint(d, &mut f[M_WIRE], at)?));
            w.and_then(|w| u32::try_from(w).ok())
                .ok_or(err(ErrorKind::BadLength))?
        } else {
            wire_pred
        };
        let pr = predict(rs, wire);
        v.l4csum = match l4csum_d {
            Some(Ok(x)) => su16(pr.l4csum, x),
            Some(Err(c)) => c,
            None => pr.l4csum,
        };
        let mut id_pred = pr.ipid;
        let mut use_host = false;
        if let Some(h) = id_choice(&self.ctx, &l, rs, &pr, continues) {
            use_host = d.bit(&mut m.host[rs.host_id as usize]);
            if use_host {
                id_pred = h;
            }
        }
        let f = &mut m.field;
        v.ipid = id_pred;
        if flags & F_IPID != 0 {
            v.ipid = su16(id_pred, uint(d, &mut f[M_IPID], at)?);
        }
        v.frag = pr.frag;
        if flags & F_FRAG != 0 {
            v.frag = uint(d, &mut f[M_FRAG], at)? as u16;
        }
        v.seq = pr.seq;
        if flags & F_SEQ != 0 {
            v.seq = su(pr.seq, uint(d, &mut f[M_SEQ], at)?);
        }
        v.ack = su(pr.ack, ack_d);
        if flags & F_WIN != 0 {
            v.win = su16(old.win, uint(d, &mut f[M_WIN], at)?);
        }
        let caplen = if flags & F_CAPLEN != 0 {
            uint(d, &mut f[M_CAPLEN], at)?
        } else {
            pr.caplen as u64
        };
        if caplen < l.hdr_len as u64 || caplen > MAX_CAPLEN as u64 {
            return Err(err(ErrorKind::BadLength));
        }
        let caplen = caplen as usize;
        let hl = caplen.min(rs.stored);
        self.rec.clear();
        self.rec.extend_from_slice(&rs.hdr[..hl]);
        let p = &mut self.rec[..hl];
        put_fields(p, &l, &pr, &v);
        if flags & F_DIFF != 0 {
            let n = uint(d, &mut m.field[M_RUNS], at)?;
            if n > MAXH as u64 {
                return Err(err(ErrorKind::BadRun));
            }
            let mut last = 0u64;
            let modelled = self.v4 && !continues;
            for _ in 0..n {
                let (gap, len) = if modelled {
                    (
                        get_small(d, &mut m.new_gap, &mut m.field[M_GAP], at)?,
                        get_small(d, &mut m.new_len, &mut m.field[M_RUNLEN], at)?,
                    )
                } else {
                    (
                        uint(d, &mut m.field[M_GAP], at)?,
                        uint(d, &mut m.field[M_RUNLEN], at)?,
                    )
                };
                let start = last.saturating_add(gap);
                let end = start.saturating_add(len).saturating_add(1);
                if end > hl as u64 {
                    return Err(err(ErrorKind::BadRun));
                }
                for (i, b) in p[start as usize..end as usize].iter_mut().enumerate() {
                    *b = if self.v2 {
                        d.tree(&mut m.byte)
                    } else if modelled {
                        d.tree(&mut m.new_byte[(start as usize + i) & 15])
                    } else {
                        d.direct(8)
                    } as u8;
                }
                last = end;
            }
        }
        if l.v4() {
            let l3 = l.l3 as usize;
            let sum = if flags & F_IPCSUM != 0 {
                uint(d, &mut m.field[M_IPCSUM], at)? as u16
            } else {
                layout::ipv4_checksum(&p[l3..l.l4 as usize])
            };
            put16(p, l3 + 10, sum);
        }
        if d.over > 0 {
            return Err(err(ErrorKind::Truncated));
        }
        let rest = raw.bytes(caplen - hl)?;
        self.rec.extend_from_slice(rest);
        // The rebuilt packet opens or continues the context; one whose
        // headers no longer parse (only from input no encoder wrote) is an
        // error, so the contexts stay what an encoder would have.
        match layout::parse(self.linktype, &self.rec) {
            Some(nl) if nl == l => {
                let s = if continues { r } else { self.ctx.alloc() };
                let v = Fields::read(&nl, &self.rec);
                self.ctx.store(s, !continues, 0, nl, &self.rec, wire, &v);
                let sl = &mut self.ctx.slots[s as usize];
                sl.last_flags = flags as u16;
                sl.host_id = use_host;
                self.ctx.host_update(s);
            }
            _ => return Err(err(ErrorKind::NoLayout)),
        }
        self.prev_ts = ts;
        Ok((ts, wire))
    }
}
