//! The packed comparison: every leaf's XOR share for every element, from one comparison
//! key per element and family ([`CmpBackend::OneKey`]) or one per element and threshold
//! ([`CmpBackend::PerThreshold`]).
//!
//! Elements go in chunks. Per chunk and family, one of three strategies answers the
//! points still compared one by one ([`few_points`] for a handful per element, else
//! [`sorted_walk`]), and [`dense_windows`] answers the dense runs from equality shares over
//! a window. [`fold_leaves`] then turns the family bits into leaves through the plan's
//! parity tables.

use std::ops::Range;

use fss::Party;
use fss::bitdpf::{BitDpfKeys, CmpShares};
use fss::ring::mask;
use gates::GateError;

use super::key::CompiledKey;
use super::plan::{FamilyPlan, GateRef};
use crate::parity::words_for;
use crate::predicate::Family;
use crate::program::{CmpBackend, LeafMux};

/// Up to this many points per element are evaluated lane by lane rather than by a trie walk.
const FEW_POINTS: usize = 8;

/// Party `key.party`'s comparison: fills the leaves' XOR shares into `locals`, or packed
/// into `packed` (`lw` words per element) with [`EvalPlan::packed_leaves`](super::plan::EvalPlan).
pub(super) fn comparison(
    g: GateRef<'_>,
    key: &CompiledKey,
    xh: &[u64],
    locals: &mut [u64],
    packed: &mut [u64],
) -> Result<(), GateError> {
    // Buffers kept per thread (MBs for a row's thousands of thresholds): fresh ones would
    // be faulted in again by every gate.
    let mut sc = CMP_SCRATCH.with_borrow_mut(|pool| pool.pop()).unwrap_or_default();
    let out = comparison_in(g, key, xh, locals, packed, &mut sc);
    CMP_SCRATCH.with_borrow_mut(|pool| {
        if pool.len() < 2 {
            pool.push(sc);
        }
    });
    out
}

/// [`comparison`] with its buffers.
fn comparison_in(
    g: GateRef<'_>,
    key: &CompiledKey,
    xh: &[u64],
    locals: &mut [u64],
    packed: &mut [u64],
    cs: &mut CmpScratch,
) -> Result<(), GateError> {
    let p = g.p;
    let total: usize = p.families.iter().map(|f| f.points.len()).sum::<usize>().max(1);
    let chunk = ((1 << 17) / total).clamp(64, 4096);
    let CmpScratch { scratch, bits } = cs;
    bits.lt.resize_with(p.families.len(), Vec::new);
    bits.eq.resize_with(p.families.len(), Vec::new);
    bits.windows.resize_with(p.families.len(), Vec::new);
    for (w, f) in bits.windows.iter_mut().zip(&g.plan.families) {
        w.resize_with(f.runs.len(), Window::default);
    }
    let lw = words_for(p.leaves.len()).max(1);
    for e0 in (0..g.len).step_by(chunk) {
        let e1 = (e0 + chunk).min(g.len);
        for fi in 0..p.families.len() {
            compare_family(g, key, fi, e0..e1, xh, scratch, bits)?;
        }
        let mut own = vec![];
        let accs = if g.plan.packed_leaves {
            let a = &mut packed[e0 * lw..e1 * lw];
            a.fill(0);
            a
        } else {
            own.resize((e1 - e0) * lw, 0u64);
            &mut own[..]
        };
        fold_leaves(g, key.party == Party::P0, &xh[e0..e1], bits, accs);
        apply_muxes(&p.muxes, &xh[e0..e1], accs, lw);
        if g.plan.packed_leaves {
            continue;
        }
        // Column by column: each local's run of elements is written in order.
        for li in 0..p.leaves.len() {
            let col = &mut locals[li * g.len + e0..li * g.len + e1];
            for (o, acc) in col.iter_mut().zip(accs.chunks_exact(lw)) {
                *o = (acc[li / 64] >> (li % 64)) & 1;
            }
        }
    }
    Ok(())
}

/// The leaves that read another leaf by a public bit of `x̂` ([`LeafMux`]), in order, on
/// packed leaves (`lw` words per element).
fn apply_muxes(muxes: &[LeafMux], xh: &[u64], accs: &mut [u64], lw: usize) {
    for m in muxes {
        let (leaf, alt) = (m.leaf as usize, m.alt as usize);
        let (w, b) = (leaf / 64, leaf % 64);
        for (acc, &x) in accs.chunks_exact_mut(lw).zip(xh) {
            // (Without a branch: the selector is a coin flip per element.)
            let sel = m.selects(x) as u64;
            let diff = ((acc[w] >> b) ^ (acc[alt / 64] >> (alt % 64))) & sel;
            acc[w] ^= diff << b;
        }
    }
}

/// Family `fi`'s `LT`/`EQ` bits (and its dense runs' windows) for the elements `range`.
fn compare_family(
    g: GateRef<'_>,
    key: &CompiledKey,
    fi: usize,
    range: Range<usize>,
    xh: &[u64],
    s: &mut Scratch,
    bits: &mut ChunkBits,
) -> Result<(), GateError> {
    let f = &g.p.families[fi];
    let (count, w) = (range.len(), words_for(f.points.len()));
    let ChunkBits { lt, eq, windows } = bits;
    let (lt, eq) = (&mut lt[fi], &mut eq[fi]);
    lt.clear();
    lt.resize(count * w, 0);
    eq.clear();
    eq.resize(if f.eq { count * w } else { 0 }, 0);
    let xh = &xh[range.clone()];
    let mut c = FamilyChunk { f, n: g.n(), keys: &key.cmp[fi], range, xh, w, lt, eq };
    match g.p.cmp {
        CmpBackend::OneKey => {
            let plan = &g.plan.families[fi];
            if plan.sparse.len() <= FEW_POINTS {
                few_points(&mut c, plan, s)?;
            } else {
                sorted_walk(&mut c, plan, s)?;
            }
            dense_windows(&mut c, plan, s, &mut windows[fi])?;
        }
        CmpBackend::PerThreshold => per_threshold(&mut c, &key.carries[fi], key.party == Party::P0)?,
    }
    Ok(())
}

/// One family's comparison over a chunk of elements: its keys, the chunk's masked inputs,
/// and the `LT`/`EQ` bits the strategies fill (`w` words per element, in point order; `eq`
/// is empty when the family needs no equalities).
struct FamilyChunk<'a> {
    f: &'a Family,
    n: u32,
    keys: &'a BitDpfKeys,
    /// The chunk's elements.
    range: Range<usize>,
    /// Their masked inputs.
    xh: &'a [u64],
    w: usize,
    lt: &'a mut [u64],
    eq: &'a mut [u64],
}

impl FamilyChunk<'_> {
    /// Sets point `k`'s bits of element `e` (of the chunk) from its shares.
    #[inline(always)]
    fn put(&mut self, e: usize, k: usize, sh: CmpShares) {
        self.lt[e * self.w + k / 64] |= (sh.lt.0 as u64) << (k % 64);
        if self.f.eq {
            self.eq[e * self.w + k / 64] |= (sh.eq.0 as u64) << (k % 64);
        }
    }
}

/// The one-by-one points when there are a few per element: one lane per element and
/// cluster of points within a leaf block of each other, no trie. Lane `e` evaluates key
/// `e`: consecutive keys, whose walk reads correction words as slices and vectorises.
///
/// Sets the `LT`/`EQ` bits of every point in `plan.clusters` for every element.
fn few_points(c: &mut FamilyChunk<'_>, plan: &FamilyPlan, s: &mut Scratch) -> Result<(), GateError> {
    let (f, n) = (c.f, c.n);
    let m = mask(f.bits);
    for cl in &plan.clusters {
        let (off, b) = f.points[cl[0].0];
        s.pts.clear();
        s.pts.extend(c.xh.iter().map(|&x| f.view(n, x, off).wrapping_sub(b) & m));
        s.deltas.clear();
        s.deltas.extend(cl.iter().map(|&(_, d)| d));
        s.cmp.clear();
        s.cmp.resize(s.pts.len() * cl.len(), CmpShares::default());
        c.keys.eval_near(c.range.clone(), &s.pts, &s.deltas, &mut s.cmp)?;
        for (e, shares) in s.cmp.chunks_exact(cl.len()).enumerate() {
            for (&(k, _), &sh) in cl.iter().zip(shares) {
                c.put(e, k, sh);
            }
        }
    }
    Ok(())
}

/// The one-by-one points when there are many per element: each element's points sorted
/// ([`sorted_points`]) and answered by one walk of the shared-prefix trie, then put back
/// in point order — by [`unsort`] when the family has one group of points (the whole
/// family, or the plan's subset of it, spread to point order), else through the sorted
/// points' indices.
///
/// Sets the `LT`/`EQ` bits of every point in `plan.sparse` for every element.
fn sorted_walk(c: &mut FamilyChunk<'_>, plan: &FamilyPlan, s: &mut Scratch) -> Result<(), GateError> {
    let (f, w) = (c.f, c.w);
    let (t, sub) = (f.points.len(), plan.sparse.len());
    s.pts.clear();
    s.idx.clear();
    s.split.clear();
    s.offsets.clear();
    s.offsets.push(0);
    for &x in c.xh {
        let a = sorted_points(f, plan, c.n, x, &mut s.pts, &mut s.idx);
        s.split.push(a);
        s.offsets.push(s.pts.len());
    }
    let ws = words_for(sub);
    let count = c.xh.len();
    s.lt.clear();
    s.lt.resize(count * ws, 0);
    s.eq.clear();
    s.eq.resize(if f.eq { count * ws } else { 0 }, 0);
    let eqs = if f.eq { Some(&mut s.eq[..]) } else { None };
    c.keys.eval_sorted(c.range.clone(), &s.pts, &s.offsets, &mut s.lt, eqs)?;
    let full = sub == t;
    for e in 0..count {
        let (rs, rf) = (e * ws..(e + 1) * ws, e * w..(e + 1) * w);
        match s.split[e] {
            // One group: point order is the sorted order reversed and rotated.
            Some(a) if full => {
                unsort(&s.lt[rs.clone()], sub, a, &mut c.lt[rf.clone()], &mut s.tmp);
                if f.eq {
                    unsort(&s.eq[rs], sub, a, &mut c.eq[rf], &mut s.tmp);
                }
            }
            Some(a) => {
                // A subset: unsort within it, then spread to point order.
                s.sub.clear();
                s.sub.resize(ws, 0);
                for (src, dst) in [(&s.lt, &mut *c.lt), (&s.eq, &mut *c.eq)] {
                    if dst.is_empty() {
                        continue;
                    }
                    unsort(&src[rs.clone()], sub, a, &mut s.sub, &mut s.tmp);
                    for (j, &k) in plan.sparse.iter().enumerate() {
                        dst[e * w + k / 64] |= ((s.sub[j / 64] >> (j % 64)) & 1) << (k % 64);
                    }
                }
            }
            None => {
                for j in 0..sub {
                    let k = s.idx[s.offsets[e] + j] as usize;
                    let bit = |v: &[u64]| ((v[e * ws + j / 64] >> (j % 64)) & 1) << (k % 64);
                    c.lt[e * w + k / 64] |= bit(&s.lt);
                    if f.eq {
                        c.eq[e * w + k / 64] |= bit(&s.eq);
                    }
                }
            }
        }
    }
    Ok(())
}

/// The dense runs: per run, equality shares of every element over the run's window (into
/// `windows[run]`, with where the window wraps over `2^bits` and the parity of its bits
/// from there on), and the `LT`/`EQ` bits of the run's anchor, its first point, at the
/// window's last position.
fn dense_windows(
    c: &mut FamilyChunk<'_>,
    plan: &FamilyPlan,
    s: &mut Scratch,
    windows: &mut [Window],
) -> Result<(), GateError> {
    let (f, n) = (c.f, c.n);
    let m = mask(f.bits);
    let off = plan.groups.first().map_or(0, |g| g.0);
    for (r, win) in plan.runs.iter().zip(windows) {
        let (ba, bb) = (f.points[r.a].1, f.points[r.b].1);
        let starts: Vec<u64> = c.xh.iter().map(|&x| f.view(n, x, off).wrapping_sub(bb) & m).collect();
        let rw = words_for(r.width);
        // (The window walk writes every word.)
        win.bits.resize(c.xh.len() * rw, 0);
        s.cmp.clear();
        s.cmp.resize(starts.len(), CmpShares::default());
        c.keys.eval_window(c.range.clone(), &starts, r.width, &mut win.bits, Some(&mut s.cmp))?;
        for (e, &sh) in s.cmp.iter().enumerate() {
            c.put(e, r.a, sh);
        }
        win.wrap.clear();
        win.suffix.clear();
        for (e, &start) in starts.iter().enumerate() {
            let end = f.view(n, c.xh[e], off).wrapping_sub(ba) & m;
            // The window wraps over 2^bits at u_wrap = 2^bits − start.
            let u = if start > end { (m - start + 1) as usize } else { 0 };
            let bits = &win.bits[e * rw..(e + 1) * rw];
            let suffix = u != 0 && parity_from(bits, u);
            win.wrap.push(u);
            win.suffix.push(suffix);
        }
    }
    Ok(())
}

/// Per-threshold keying: one key per element and point, evaluated at the point's view;
/// `LT(v − β) = 1[v < r + β] ⊕ carry ⊕ 1[v < β]` (party 0 adds the public term).
///
/// Sets the `LT`/`EQ` bits of every point for every element.
fn per_threshold(c: &mut FamilyChunk<'_>, carries: &[bool], party0: bool) -> Result<(), GateError> {
    let (f, n) = (c.f, c.n);
    let t = f.points.len();
    let (e0, e1) = (c.range.start, c.range.end);
    let mut pts = Vec::with_capacity((e1 - e0) * t);
    for &x in c.xh {
        pts.extend(f.points.iter().map(|&(off, _)| f.view(n, x, off)));
    }
    let mut out = vec![CmpShares::default(); pts.len()];
    c.keys.slice(e0 * t, e1 * t).eval(&pts, &mut out)?;
    for e in 0..e1 - e0 {
        for (k, &(_, beta)) in f.points.iter().enumerate() {
            let j = e * t + k;
            let public = party0 && pts[j] < beta;
            let v = out[j].lt.0 ^ carries[(e0 + e) * t + k] ^ public;
            c.lt[e * c.w + k / 64] |= (v as u64) << (k % 64);
            if f.eq {
                c.eq[e * c.w + k / 64] |= (out[j].eq.0 as u64) << (k % 64);
            }
        }
    }
    Ok(())
}

/// The leaves of a chunk of elements from its family bits, a bit per leaf in each
/// element's `lw` words of `accs` (parity tables, docs/design/paper.md §3.5): the constants
/// and the public `1[v < β]` terms (party 0's), the families' `LT`/`EQ` tables, and the
/// dense runs' windows with their wrap corrections.
fn fold_leaves(g: GateRef<'_>, party0: bool, xh: &[u64], bits: &ChunkBits, accs: &mut [u64]) {
    let (p, plan) = (g.p, g.plan);
    let lw = words_for(p.leaves.len()).max(1);
    let ChunkBits { lt, eq, windows } = bits;
    // Table by table over the chunk's elements (the XORs commute): each pass reads one
    // table, and the per-table decisions are taken once per chunk.
    for acc in accs.chunks_exact_mut(lw) {
        acc.iter_mut().zip(&plan.konst).for_each(|(a, &k)| *a = if party0 { k } else { 0 });
    }
    for (fi, f) in p.families.iter().enumerate() {
        let w = words_for(f.points.len());
        for (table, v) in [(&plan.lt_tables[fi], &lt[fi]), (&plan.eq_tables[fi], &eq[fi])] {
            if !table.is_empty() {
                for (e, acc) in accs.chunks_exact_mut(lw).enumerate() {
                    table.apply(&v[e * w..(e + 1) * w], acc);
                }
            }
        }
        for (ri, (run, t)) in plan.families[fi].runs.iter().zip(&plan.run_tables[fi]).enumerate() {
            if !t.used {
                continue;
            }
            let win = &windows[fi][ri];
            let rw = words_for(run.width);
            for (e, acc) in accs.chunks_exact_mut(lw).enumerate() {
                t.window.apply(&win.bits[e * rw..(e + 1) * rw], acc);
                // Points past the wrap end at 2^bits − 1 (LT = 0), the others at the
                // run's first point: its LT share, weighted by the LT terms after u.
                let u = win.wrap[e];
                let lt_a = (lt[fi][e * w + run.a / 64] >> (run.a % 64)) & 1 == 1;
                let suffix = win.suffix[e];
                for (k, a) in acc.iter_mut().enumerate() {
                    let cw = if u > 0 { t.at[u * lw + k] } else { 0 };
                    *a ^= (if lt_a { t.total[k] ^ cw } else { 0 }) ^ (if suffix { cw } else { 0 });
                }
            }
        }
    }
    if party0 {
        for g in &plan.below {
            for (acc, &x) in accs.chunks_exact_mut(lw).zip(xh) {
                let i = g.count_upto(x & mask(g.bits));
                acc.iter_mut().zip(&g.suffix[i * lw..(i + 1) * lw]).for_each(|(a, s)| *a ^= s);
            }
        }
    }
}

/// A dense run's equality shares for a chunk of elements, where each window wraps, and the
/// parity of its bits from there on.
#[derive(Clone, Default)]
struct Window {
    bits: Vec<u64>,
    wrap: Vec<usize>,
    suffix: Vec<bool>,
}

/// Parity of bits `from..` of `bits`.
fn parity_from(bits: &[u64], from: usize) -> bool {
    let (i, sh) = (from / 64, from % 64);
    let first = bits.get(i).map_or(0, |&x| x >> sh);
    (bits.iter().skip(i + 1).fold(first, |acc, &x| acc ^ x).count_ones() & 1) == 1
}

/// [`comparison`]'s buffers, kept per thread: the walks' scratch, and a chunk's bits.
#[derive(Default)]
struct CmpScratch {
    scratch: Scratch,
    bits: ChunkBits,
}

/// Per family, a chunk's `LT`/`EQ` bitsets (point order, `[element][word]`) and its dense
/// runs' windows.
#[derive(Default)]
struct ChunkBits {
    lt: Vec<Vec<u64>>,
    eq: Vec<Vec<u64>>,
    windows: Vec<Vec<Window>>,
}

thread_local! {
    static CMP_SCRATCH: std::cell::RefCell<Vec<CmpScratch>> = std::cell::RefCell::default();
}

/// Buffers reused across chunks of the comparison.
#[derive(Default)]
struct Scratch {
    cmp: Vec<CmpShares>,
    deltas: Vec<u64>,
    sub: Vec<u64>,
    pts: Vec<u64>,
    idx: Vec<u32>,
    offsets: Vec<usize>,
    split: Vec<Option<usize>>,
    lt: Vec<u64>,
    eq: Vec<u64>,
    tmp: Vec<u64>,
}

/// Family `f`'s points (its plan's one-by-one subset) for masked input `x`, sorted. With one
/// group of points (one offset), the sorted order is the subset's order reversed and
/// rotated: returns the rotation, and pushes no indices. Otherwise pushes each sorted point's
/// index and returns `None`.
fn sorted_points(
    f: &Family,
    plan: &FamilyPlan,
    n: u32,
    x: u64,
    pts: &mut Vec<u64>,
    idx: &mut Vec<u32>,
) -> Option<usize> {
    let m = mask(f.bits);
    if let [(off, _)] = plan.groups.as_slice() {
        let v = f.view(n, x, *off);
        let sub = &plan.sparse;
        // β ≤ v gives v − β (descending in β), β > v wraps above v: each part reversed.
        let q = sub.partition_point(|&k| f.points[k].1 <= v);
        pts.extend(sub[..q].iter().rev().map(|&k| v.wrapping_sub(f.points[k].1) & m));
        pts.extend(sub[q..].iter().rev().map(|&k| v.wrapping_sub(f.points[k].1) & m));
        return Some(q);
    }
    let start = pts.len();
    for (off, range) in &plan.groups {
        let v = f.view(n, x, *off);
        for k in range.clone() {
            pts.push(v.wrapping_sub(f.points[k].1) & m);
            idx.push(k as u32);
        }
    }
    let mut pairs: Vec<(u64, u32)> = pts[start..].iter().copied().zip(idx[start..].iter().copied()).collect();
    pairs.sort_unstable();
    for (j, (pt, k)) in pairs.into_iter().enumerate() {
        pts[start + j] = pt;
        idx[start + j] = k;
    }
    None
}

/// 64 bits of `src` from bit `start` (zeros beyond the end).
#[inline(always)]
fn bits_at(src: &[u64], start: usize) -> u64 {
    let (i, sh) = (start / 64, start % 64);
    let lo = src.get(i).copied().unwrap_or(0) >> sh;
    let hi = if sh == 0 { 0 } else { src.get(i + 1).copied().unwrap_or(0) << (64 - sh) };
    lo | hi
}

/// Point-order bits from sorted-order bits `s` (`t` bits, `a` points at or below the view):
/// sorted position `j` holds point `a − 1 − j` for `j < a`, else `a + t − 1 − j`. That is
/// `out_i = r_{(i − a) mod t}` with `r` the reversal of `s`.
fn unsort(s: &[u64], t: usize, a: usize, out: &mut [u64], tmp: &mut Vec<u64>) {
    let w = words_for(t);
    let pad = 64 * w - t;
    // rev: the 64w-bit reversal of s; r_i = rev_{i + pad}; rr = r ‖ r (2t bits).
    tmp.clear();
    tmp.resize(4 * w + 2, 0);
    let (rev, rest) = tmp.split_at_mut(w);
    let (r, rr) = rest.split_at_mut(w);
    for j in 0..w {
        rev[j] = s[w - 1 - j].reverse_bits();
    }
    for (j, rj) in r.iter_mut().enumerate() {
        *rj = bits_at(rev, pad + 64 * j);
    }
    if !t.is_multiple_of(64) {
        r[w - 1] &= (1u64 << (t % 64)) - 1;
    }
    rr[..w].copy_from_slice(r);
    for (j, &v) in r.iter().enumerate() {
        let (i, sh) = ((t + 64 * j) / 64, (t + 64 * j) % 64);
        rr[i] |= v << sh;
        if sh != 0 {
            rr[i + 1] |= v >> (64 - sh);
        }
    }
    for (j, o) in out.iter_mut().enumerate() {
        *o = bits_at(rr, t - a + 64 * j);
    }
    if !t.is_multiple_of(64) {
        out[w - 1] &= (1u64 << (t % 64)) - 1;
    }
}
