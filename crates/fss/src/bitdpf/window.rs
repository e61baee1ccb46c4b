//! The window walk: equality shares of every key over a window of consecutive points,
//! expanding the tree only over the leaf blocks the window touches, all keys level by
//! level; and, on request, the comparison at each window's last point from the same walk.

use std::ops::Range;

use super::keys::{BitDpfKeys, CmpShares, LEAF_BITS};
use crate::error::FssError;
use crate::prg::{AesBlock, HashKey, Prg, pad};
use crate::ring::mask;
use crate::walk::{self, Walk};

impl BitDpfKeys {
    /// Shares of `1{start_j + u = α_i}` (mod `2^n`, key `i = keys.start + j`) for `u <
    /// width`, for every start `j`: bit `u` of the `⌈width/64⌉` words from `j·⌈width/64⌉` on.
    /// The tree is expanded only over the leaf blocks the window touches, all keys level by
    /// level: about `2·width/128 + 2(n − 7)` AES per key.
    ///
    /// A dense set of thresholds inside a window is cheaper to answer from these shares than
    /// point by point: `LT(p) = LT(e) ⊕ ⨁_{p < q ≤ e} EQ(q)` for `p ≤ e`.
    ///
    /// With `end`, also the comparison shares at each window's last point
    /// `starts[j] + width − 1` into `end[j]`: that point's path is the window's own last
    /// path, so its prefix parity is carried down with the window's nodes and its `LT` read
    /// from the window's last block (the `LT` a dense run is anchored on, without a walk of
    /// its own).
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`] for a wrong number of starts, a wrong output size or
    /// `end` of the wrong length, [`FssError::PointOutOfDomain`] for a start outside the
    /// domain, and [`FssError::InvalidParams`] for a window wider than the domain or a range
    /// outside the batch.
    pub fn eval_window(
        &self,
        keys: Range<usize>,
        starts: &[u64],
        width: usize,
        out: &mut [u64],
        end: Option<&mut [CmpShares]>,
    ) -> Result<(), FssError> {
        let n = self.params.domain_bits;
        if let Some(e) = &end {
            walk::check_len(starts.len(), e.len())?;
        }
        walk::check_range(&keys, self.len())?;
        walk::check_len(keys.len(), starts.len())?;
        let words = width.div_ceil(64);
        walk::check_len(keys.len() * words, out.len())?;
        walk::check_points(starts, n)?;
        if width == 0 || (n < 64 && width as u64 > 1u64 << n) {
            return Err(FssError::InvalidParams("window wider than the domain"));
        }
        // (Every word of `out` is written below: no clearing first.)
        if words == 0 {
            return Ok(());
        }
        let per_job = walk::CHUNK.max(walk::CHUNK * 512 / width.max(128));
        let mut ends: Vec<Option<&mut [CmpShares]>> = match end {
            Some(e) => e.chunks_mut(per_job).map(Some).collect(),
            None => vec![],
        };
        ends.resize_with(out.len().div_ceil(per_job * words), || None);
        let jobs: Vec<WindowJob<'_>> = out
            .chunks_mut(per_job * words)
            .zip(ends)
            .enumerate()
            .map(|(j, (o, e))| (j * per_job, o, e))
            .collect();
        let base = keys.start;
        let run = |(k0, o, e): WindowJob<'_>| self.window_chunk(base, k0, starts, width, o, e);
        if jobs.len() == 1 {
            jobs.into_iter().for_each(run);
        } else {
            use rayon::prelude::*;
            jobs.into_par_iter().for_each(run);
        }
        Ok(())
    }

    /// [`BitDpfKeys::eval_window`] for starts `k0..k0 + out.len()/words`, of keys
    /// `base + k0..`: table keys read their tables; windows of at most
    /// `2^WINDOW_WHOLE_LEVELS` blocks go to [`BitDpfKeys::window_whole`]; the others expand
    /// per key the nodes above the window's blocks (its tasks: non-wrapping ranges of
    /// blocks), walking the two paths above them as lanes first.
    fn window_chunk(
        &self,
        base: usize,
        k0: usize,
        starts: &[u64],
        width: usize,
        out: &mut [u64],
        end: Option<&mut [CmpShares]>,
    ) {
        if self.params.is_table() {
            return self.window_table(base, k0, starts, width, out, end);
        }
        let n = self.params.domain_bits;
        // Each window's last point.
        let last = |k: usize| starts[k0 + k].wrapping_add(width as u64 - 1) & mask(n);
        let words = width.div_ceil(64);
        let count = out.len() / words;
        let levels = self.params.levels();
        let (_, d) = window_span(width);
        if d <= WINDOW_WHOLE_LEVELS && levels >= d + 2 {
            return self.window_whole(base, k0, starts, width, out, end, d);
        }
        let g0 = base + k0;
        let (mut tasks, nblocks) = window_tasks(&starts[k0..k0 + count], width, levels);
        WINDOW_SCRATCH.with_borrow_mut(|ws| {
            // Each key's blocks, one after the other.
            let mut block_at = Vec::with_capacity(count + 1);
            block_at.push(0usize);
            for &b in &nblocks {
                block_at.push(block_at.last().expect("non-empty") + b);
            }
            // (Every block is written at the last level: no clearing.)
            ws.blocks.resize(block_at[count], 0);
            // Per task, the prefix parity `(acc, prev)` of the path to its last block, carried
            // down the subtree with the nodes: a key's last task holds its window's last point,
            // whose `LT` is read from that block at the end (no walk of its own).
            let mut ends = vec![(0u64, 0u64); if end.is_some() { tasks.len() } else { 0 }];
            let top = self.task_tops(g0, &mut tasks, ws, end.is_some(), &mut ends);
            for i in top..levels {
                // The AES inputs σ(s) of every task's nodes, packed; `ctm` their control masks.
                // A task's nodes move to `n0..n0 + m` of the packed arrays.
                let WindowScratch { blocks, lo, hi, tm, nlo, nhi, ntm, ctm, sig, el, er, .. } = ws;
                sig.clear();
                ctm.clear();
                for t in tasks.iter_mut() {
                    let r = t.n0..t.n0 + t.m;
                    let at = sig.len();
                    sig.extend(
                        lo[r.clone()].iter().zip(&hi[r.clone()]).map(|(&l, &h)| walk::block(h, h ^ l)),
                    );
                    ctm.extend_from_slice(&tm[r]);
                    t.n0 = at;
                }
                let nodes = sig.len();
                hash_level(sig, el, er);
                let h = Hashed { sig: &sig[..nodes], el: &el[..nodes], er: &er[..nodes], ctm: &ctm[..nodes] };
                if i == levels - 1 {
                    // Children are leaf blocks.
                    self.task_blocks(g0, &tasks, &h, blocks, &block_at, &mut ends);
                    break;
                }
                self.task_children(g0, i, &mut tasks, &h, (&mut *nlo, &mut *nhi, &mut *ntm), &mut ends);
                std::mem::swap(lo, nlo);
                std::mem::swap(hi, nhi);
                std::mem::swap(tm, ntm);
            }
            if let Some(e) = end {
                // A key's last task ends at its window's last block.
                for (t, &(acc, prev)) in tasks.iter().zip(&ends) {
                    if t.at + (t.hi - t.lo) as usize + 1 != nblocks[t.key] {
                        continue;
                    }
                    let blk = ws.blocks[block_at[t.key] + t.at + (t.hi - t.lo) as usize];
                    e[t.key] = self.finish(last(t.key), blk, prev, acc as u8);
                }
            }
            for k in 0..count {
                let off = (starts[k0 + k] & 127) as usize;
                put_window(
                    &mut out[k * words..(k + 1) * words],
                    &ws.blocks[block_at[k]..block_at[k + 1]],
                    off,
                    width,
                );
            }
        });
    }

    /// [`BitDpfKeys::window_chunk`] for table keys: each window read from the table
    /// cyclically, one 128-bit block at a time.
    fn window_table(
        &self,
        base: usize,
        k0: usize,
        starts: &[u64],
        width: usize,
        out: &mut [u64],
        mut end: Option<&mut [CmpShares]>,
    ) {
        let n = self.params.domain_bits;
        let words = width.div_ceil(64);
        let size = 1usize << n;
        for k in 0..out.len() / words {
            let table = self.leaf(base + k0 + k)[0];
            let start = starts[k0 + k] as usize;
            // The window may wrap: read the table cyclically, one 128-bit block at a time.
            let blocks: Vec<u128> = (0..width.div_ceil(128))
                .map(|b| {
                    (0..128.min(width - 128 * b)).fold(0u128, |acc, j| {
                        let pos = (start + 128 * b + j) % size;
                        acc | ((table >> pos) & 1) << j
                    })
                })
                .collect();
            put_window(&mut out[k * words..(k + 1) * words], &blocks, 0, width);
            if let Some(e) = end.as_deref_mut() {
                let last = starts[k0 + k].wrapping_add(width as u64 - 1) & mask(n);
                e[k] = self.finish(last, table, 0, 0);
            }
        }
    }

    /// The tasks' nodes at depth `top` (returned) into `ws`'s `lo`, `hi`, `tm`: above `top`,
    /// a task's range lies under at most two nodes (those of its first and last block),
    /// walked to as vectorised lanes (one per task, in key order) instead of expanding the
    /// task level by level; or, when that is not worth a walk, the roots (`top = 0`). With
    /// `parity`, each task's last path's prefix parity into `ends`.
    fn task_tops(
        &self,
        g0: usize,
        tasks: &mut [Task],
        ws: &mut WindowScratch,
        parity: bool,
        ends: &mut [(u64, u64)],
    ) -> u32 {
        let levels = self.params.levels();
        let span = tasks.iter().map(|t| t.hi - t.lo + 1).max().unwrap_or(1);
        // (The last level's children are leaf blocks: the walk stops above it.)
        let top = levels.saturating_sub(64 - (span - 1).leading_zeros()).min(levels - 1);
        // One or two levels are not worth a separate walk.
        let top = if top >= 2 { top } else { 0 };
        let WindowScratch { lo, hi, tm, .. } = ws;
        lo.clear();
        hi.clear();
        tm.clear();
        if top == 0 {
            let root = |t: &Task| self.tree.roots[g0 + t.key];
            lo.extend(tasks.iter().map(|t| root(t) as u64));
            hi.extend(tasks.iter().map(|t| (root(t) >> 64) as u64));
            tm.resize(tasks.len(), (self.party.bit() as u64).wrapping_neg());
            return 0;
        }
        let below = levels - top;
        // The first and the last block's paths share all but their last few levels for most
        // tasks: the last path resumes the first's state `WINDOW_SHARED_LEVELS` above `top`;
        // the tasks whose paths part higher walk theirs from the root.
        let key = |k: usize| g0 + tasks[k].key;
        let pts = |first: bool| -> Vec<u64> {
            tasks.iter().map(|t| if first { t.lo } else { t.hi } >> below).collect()
        };
        let (a, b) = self.window_paths(top, &pts(true), &pts(false), key, parity);
        // The last path's prefix parity (its last turn and the XOR so far).
        for (k, par) in ends.iter_mut().enumerate() {
            *par = (b.acc[k] & 1, b.prev[k] & 1);
        }
        for (k, t) in tasks.iter_mut().enumerate() {
            let (pa, pb) = (t.lo >> below, t.hi >> below);
            (t.n0, t.m, t.p0) = (lo.len(), (pb - pa + 1) as usize, pa);
            let both = [&a, &b];
            for w in &both[..t.m] {
                lo.push(w.lo[k]);
                hi.push(w.hi[k]);
                tm.push(w.t[k]);
            }
        }
        top
    }

    /// The last level of the tasks' walk: the children of their packed nodes `h` are leaf
    /// blocks; each task keeps those in its block range, into `blocks` (key `k`'s from
    /// `block_at[k]`), and turns its last path into its last block (`ends`).
    fn task_blocks(
        &self,
        g0: usize,
        tasks: &[Task],
        h: &Hashed<'_>,
        blocks: &mut [u128],
        block_at: &[usize],
        ends: &mut [(u64, u64)],
    ) {
        for (ti, t) in tasks.iter().enumerate() {
            let cw = self.leaf(g0 + t.key);
            let (clo, chi) = (t.lo.max(2 * t.p0), t.hi.min(2 * (t.p0 + t.m as u64 - 1) + 1));
            let at = block_at[t.key] + t.at + (clo - t.lo) as usize;
            let out = &mut blocks[at..at + (chi - clo + 1) as usize];
            for (q, o) in out.iter_mut().enumerate() {
                let cp = clo + q as u64;
                let (j, c) = (t.n0 + ((cp >> 1) - t.p0) as usize, (cp & 1) as usize);
                let (sl, sh) = walk::halves(&h.sig[j]);
                let (al, ah) = walk::halves(if c == 0 { &h.el[j] } else { &h.er[j] });
                let mask = h.ctm[j] as u128 | (h.ctm[j] as u128) << 64;
                *o = (((al ^ sl) as u128) | ((ah ^ sh) as u128) << 64) ^ (cw[c] & mask);
            }
            if let Some(par) = ends.get_mut(ti) {
                // The last turn, into the last block.
                let c = t.hi & 1;
                par.0 ^= h.ctm[t.n0 + t.m - 1] & 1 & (c ^ par.1);
                par.1 = c;
            }
        }
    }

    /// Level `i` of the tasks' walk above the leaf blocks: both children of every packed
    /// node `h`, interleaved (node `j`'s at `2j` and `2j + 1`) into `next` (seed halves and
    /// control masks); each task then keeps the contiguous range of children its blocks lie
    /// under, and turns its last path towards its last block (`ends`).
    fn task_children(
        &self,
        g0: usize,
        i: u32,
        tasks: &mut [Task],
        h: &Hashed<'_>,
        next: (&mut Vec<u64>, &mut Vec<u64>, &mut Vec<u64>),
        ends: &mut [(u64, u64)],
    ) {
        let below = self.params.levels() - 1 - i;
        let (nlo, nhi, ntm) = next;
        let nodes = h.sig.len();
        nlo.resize(2 * nodes, 0);
        nhi.resize(2 * nodes, 0);
        ntm.resize(2 * nodes, 0);
        let (scw_lo, scw_hi) = self.tree.scw_level(i);
        for (ti, t) in tasks.iter_mut().enumerate() {
            if let Some(par) = ends.get_mut(ti) {
                // The last path turns towards the task's last block.
                let c = (t.hi >> below) & 1;
                par.0 ^= h.ctm[t.n0 + t.m - 1] & 1 & (c ^ par.1);
                par.1 = c;
            }
            let g = g0 + t.key;
            let (cl, ch) = (scw_lo[g], scw_hi[g]);
            let tcw = [(self.tree.tcw_left[g] >> i) & 1, (self.tree.tcw_right[g] >> i) & 1];
            let r = t.n0..t.n0 + t.m;
            let (cr, ncr) = (r.clone(), 2 * r.start..2 * r.end);
            let (nl, nh, nt) = (&mut nlo[ncr.clone()], &mut nhi[ncr.clone()], &mut ntm[ncr]);
            for (d, ((s, (e0, e1)), &tj)) in h.sig[cr.clone()]
                .iter()
                .zip(h.el[cr.clone()].iter().zip(&h.er[cr.clone()]))
                .zip(&h.ctm[cr])
                .enumerate()
            {
                let (sl, sh) = walk::halves(s);
                for (c, e) in [e0, e1].into_iter().enumerate() {
                    let (al, ah) = walk::halves(e);
                    let (al, ah) = (al ^ sl, ah ^ sh);
                    nl[2 * d + c] = (al & !1) ^ (cl & tj);
                    nh[2 * d + c] = ah ^ (ch & tj);
                    nt[2 * d + c] = ((al ^ (tj & tcw[c])) & 1).wrapping_neg();
                }
            }
            let (clo, chi) =
                ((t.lo >> below).max(2 * t.p0), (t.hi >> below).min(2 * (t.p0 + t.m as u64 - 1) + 1));
            (t.n0, t.m, t.p0) = (2 * t.n0 + (clo - 2 * t.p0) as usize, (chi - clo + 1) as usize, clo);
        }
    }

    /// Lanes `k` (key `key(k)`) walked down to depth `top`, to node `pa[k]` (the first walk)
    /// and to node `pb[k]` (the second). The second resumes the first's state
    /// [`WINDOW_SHARED_LEVELS`] above `top`; the lanes whose paths part higher walk theirs
    /// from the root. With `parity`, both keep their prefix parity.
    fn window_paths(
        &self,
        top: u32,
        pa: &[u64],
        pb: &[u64],
        key: impl Fn(usize) -> usize + Copy,
        parity: bool,
    ) -> (Walk, Walk) {
        let m = pa.len();
        let split = top.saturating_sub(WINDOW_SHARED_LEVELS);
        let mut a = Walk::new(m, |k| self.tree.roots[key(k)], self.party.bit());
        self.walk_levels(&mut a, 0..split, top, pa, key, parity);
        let seeds: Vec<u128> = (0..m).map(|k| a.seed(k)).collect();
        let mut b = Walk::resume(&seeds, &a.t, &a.acc, &a.prev);
        self.walk_levels(&mut a, split..top, top, pa, key, parity);
        self.walk_levels(&mut b, split..top, top, pb, key, parity);
        let shared = top - split;
        let apart: Vec<usize> = (0..m).filter(|&k| pa[k] >> shared != pb[k] >> shared).collect();
        if !apart.is_empty() {
            let far_pts: Vec<u64> = apart.iter().map(|&k| pb[k]).collect();
            let far_key = |q: usize| key(apart[q]);
            let mut f = Walk::new(apart.len(), |q| self.tree.roots[far_key(q)], self.party.bit());
            self.walk_levels(&mut f, 0..top, top, &far_pts, far_key, parity);
            for (q, &k) in apart.iter().enumerate() {
                (b.lo[k], b.hi[k], b.t[k]) = (f.lo[q], f.hi[q], f.t[q]);
                (b.acc[k], b.prev[k]) = (f.acc[q], f.prev[q]);
            }
        }
        (a, b)
    }

    /// [`BitDpfKeys::window_chunk`] for windows of at most `2^d` leaf blocks (`d ≤`
    /// [`WINDOW_WHOLE_LEVELS`]): such a window lies under two neighbouring nodes at depth
    /// `levels − d`, those of its first and its last block. Both are walked to as lanes;
    /// below them, level `j` keeps a fixed number of nodes per key, `P_j = ⌊(span − 1) /
    /// 2^{d−j}⌋ + 2` from the first one above the window's first block (enough for any
    /// window of `span` blocks), stored node-major across the chunk's keys. Every key has
    /// the same shape, so a level is a few loops over consecutive keys (their correction
    /// words read as slices) and a select of each key's children by one bit, with no
    /// per-task bookkeeping: faster than the general window code for such windows.
    ///
    /// The window's last point reads its `LT` from its own block, with the second path's
    /// prefix parity carried down to it.
    #[allow(clippy::too_many_arguments)]
    fn window_whole(
        &self,
        base: usize,
        k0: usize,
        starts: &[u64],
        width: usize,
        out: &mut [u64],
        mut end: Option<&mut [CmpShares]>,
        d: u32,
    ) {
        let n = self.params.domain_bits;
        let levels = self.params.levels();
        let top = levels - d;
        let words = width.div_ceil(64);
        let count = out.len() / words;
        let starts = &starts[k0..k0 + count];
        let (span, _) = window_span(width);
        let slots = |j: u32| ((span - 1) >> (d - j)) + 2;
        // Leaf blocks are numbered from the first path's subtree on (the second's follow):
        // a window covers blocks `rel..=end` of that numbering.
        let rel: Vec<u64> = starts.iter().map(|&s| (s >> LEAF_BITS) & ((1u64 << d) - 1)).collect();
        let end_blk: Vec<u64> = starts
            .iter()
            .zip(&rel)
            .map(|(&s, &r)| r + (((s & 127) as usize + width).div_ceil(128) - 1) as u64)
            .collect();
        let last: Vec<u64> = starts.iter().map(|&s| s.wrapping_add(width as u64 - 1) & mask(n)).collect();
        let pa: Vec<u64> = starts.iter().map(|&s| s >> LEAF_BITS >> d).collect();
        let pb: Vec<u64> = last.iter().map(|&p| p >> LEAF_BITS >> d).collect();
        let g0 = base + k0;
        let parity = end.is_some();
        let (a, b) = self.window_paths(top, &pa, &pb, |k| g0 + k, parity);
        let mut ends: Vec<(u64, u64)> =
            if parity { (0..count).map(|k| (b.acc[k] & 1, b.prev[k] & 1)).collect() } else { vec![] };
        WINDOW_SCRATCH.with_borrow_mut(|ws| {
            // Slot q of key k at `q·count + k`: at depth `top`, the two paths' nodes.
            ws.lo.clear();
            ws.hi.clear();
            ws.tm.clear();
            for w in [&a, &b] {
                ws.lo.extend_from_slice(&w.lo[..count]);
                ws.hi.extend_from_slice(&w.hi[..count]);
                ws.tm.extend_from_slice(&w.t[..count]);
            }
            for j in 0..d {
                let i = top + j;
                let (p, below) = (slots(j), d - j);
                let nodes = p * count;
                let tm = &ws.tm;
                // The last point's path turns at this level (slot: its node less the first).
                for (k, par) in ends.iter_mut().enumerate() {
                    let q = ((end_blk[k] >> below) - (rel[k] >> below)) as usize;
                    let c = (end_blk[k] >> (below - 1)) & 1;
                    par.0 ^= tm[q * count + k] & 1 & (c ^ par.1);
                    par.1 = c;
                }
                let leaves = below == 1;
                if self.whole_level_fused(g0, i, count, &rel, below, (p, slots(j + 1), span), ws) {
                    continue;
                }
                let WindowScratch { lo, hi, sig, el, er, .. } = &mut *ws;
                sig.clear();
                sig.extend(lo[..nodes].iter().zip(&hi[..nodes]).map(|(&l, &h)| walk::block(h, h ^ l)));
                hash_level(sig, el, er);
                self.whole_children(g0, i, count, p, leaves, ws);
                if !leaves {
                    whole_select(&rel, below, slots(j + 1), count, ws);
                }
            }
            // Each key's window: its blocks from the first one on. The last level's children
            // start at the first block's sibling pair.
            let per = 2 * slots(d - 1);
            for k in 0..count {
                let first = k * per + (rel[k] & 1) as usize;
                let nb = (end_blk[k] - rel[k]) as usize + 1;
                let own = &ws.blocks[first..first + nb];
                let off = (starts[k] & 127) as usize;
                put_window(&mut out[k * words..(k + 1) * words], own, off, width);
                if let Some(e) = end.as_deref_mut() {
                    let (acc, prev) = ends[k];
                    e[k] = self.finish(last[k], own[nb - 1], prev, acc as u8);
                }
            }
        });
    }

    /// Level `i` of [`BitDpfKeys::window_whole`] with only the needed children hashed
    /// ([`walk::fused::window_level`]): each key's `next` slots of the next level or, at the
    /// leaves (`below == 1`), its `span` blocks from its first, each at its child's place in
    /// `ws.blocks`. `false` where the build has no VAES.
    #[allow(clippy::too_many_arguments)]
    fn whole_level_fused(
        &self,
        g0: usize,
        i: u32,
        count: usize,
        rel: &[u64],
        below: u32,
        (p, next, span): (usize, usize, usize),
        ws: &mut WindowScratch,
    ) -> bool {
        #[cfg(test)]
        if tests::LEVEL_BY_LEVEL.get() {
            return false;
        }
        let WindowScratch { blocks, lo, hi, tm, nlo, nhi, ntm, ctm: rb, .. } = ws;
        rb.clear();
        rb.extend(rel.iter().map(|&r| (r >> (below - 1)) & 1));
        let cur = (&lo[..p * count], &hi[..p * count], &tm[..p * count]);
        if below == 1 {
            blocks.resize(2 * p * count, 0);
            let leaf_cw = &self.leaf_cw[4 * g0..4 * (g0 + count)];
            let out = walk::fused::WindowOut::Leaves { blocks, stride: 2 * p, leaf_cw };
            return walk::fused::window_level(&self.tree, i, g0, rb, cur, span, out);
        }
        nlo.resize(next * count, 0);
        nhi.resize(next * count, 0);
        ntm.resize(next * count, 0);
        let out = walk::fused::WindowOut::Nodes(&mut nlo[..], &mut nhi[..], &mut ntm[..]);
        if !walk::fused::window_level(&self.tree, i, g0, rb, cur, next, out) {
            return false;
        }
        std::mem::swap(lo, nlo);
        std::mem::swap(hi, nhi);
        std::mem::swap(tm, ntm);
        true
    }

    /// Level `i` of [`BitDpfKeys::window_whole`]: the children of each of the `p` slots of
    /// the `count` keys (slot `q`'s at `2q` and `2q + 1`), from the hashed level in `ws`:
    /// leaf blocks key-major into `ws.blocks` when `leaves`, else nodes slot-major into
    /// `ws.nlo`, `ws.nhi`, `ws.ntm`.
    fn whole_children(
        &self,
        g0: usize,
        i: u32,
        count: usize,
        p: usize,
        leaves: bool,
        ws: &mut WindowScratch,
    ) {
        let WindowScratch { blocks, lo, hi, tm, nlo, nhi, ntm, el, er, .. } = ws;
        let nodes = p * count;
        if leaves {
            blocks.resize(2 * nodes, 0);
        } else {
            nlo.resize(2 * nodes, 0);
            nhi.resize(2 * nodes, 0);
            ntm.resize(2 * nodes, 0);
        }
        // (The last level's correction words are the leaf blocks'.)
        let cws = if leaves {
            (&[][..], &[][..])
        } else {
            let (scw_lo, scw_hi) = self.tree.scw_level(i);
            (&scw_lo[g0..g0 + count], &scw_hi[g0..g0 + count])
        };
        let tcws = [&self.tree.tcw_left[g0..g0 + count], &self.tree.tcw_right[g0..g0 + count]];
        let leaf_cw: &[u64] = &self.leaf_cw[4 * g0..4 * (g0 + count)];
        for q in 0..p {
            let r = q * count..(q + 1) * count;
            let (l, h, t) = (&lo[r.clone()], &hi[r.clone()], &tm[r.clone()]);
            for (c, e) in [&el[r.clone()], &er[r.clone()]].into_iter().enumerate() {
                let o = (2 * q + c) * count..(2 * q + c + 1) * count;
                if leaves {
                    // Key-major: each key's blocks end up contiguous.
                    let at = 2 * q + c;
                    for (k, out) in blocks.chunks_exact_mut(2 * p).enumerate() {
                        let (al, ah) = walk::halves(&e[k]);
                        let (al, ah) = (al ^ h[k], ah ^ h[k] ^ l[k]);
                        let cw = super::keys::leaf_at(leaf_cw, k)[c] & (t[k] as u128 | (t[k] as u128) << 64);
                        out[at] = (al as u128 | (ah as u128) << 64) ^ cw;
                    }
                } else {
                    let (cl, ch, tc) = (cws.0, cws.1, tcws[c]);
                    let (nl, nh, nt) = (&mut nlo[o.clone()], &mut nhi[o.clone()], &mut ntm[o]);
                    for k in 0..count {
                        let (al, ah) = walk::halves(&e[k]);
                        let (al, ah) = (al ^ h[k], ah ^ h[k] ^ l[k]);
                        nl[k] = (al & !1) ^ (cl[k] & t[k]);
                        nh[k] = ah ^ (ch[k] & t[k]);
                        nt[k] = ((al ^ (t[k] & (tc[k] >> i))) & 1).wrapping_neg();
                    }
                }
            }
        }
    }
}

/// The next level's `next` slots of [`BitDpfKeys::window_whole`] (nodes `below` levels
/// above the leaf blocks' parents): each key's children from its first needed one (child 0
/// or 1 of its first slot, by its first block `rel`), from `ws.nlo`, `ws.nhi`, `ws.ntm` into
/// `ws.lo`, `ws.hi`, `ws.tm`.
fn whole_select(rel: &[u64], below: u32, next: usize, count: usize, ws: &mut WindowScratch) {
    let WindowScratch { lo, hi, tm, nlo, nhi, ntm, ctm: sel, .. } = ws;
    sel.clear();
    sel.extend(rel.iter().map(|&r| ((r >> (below - 1)) & 1).wrapping_neg()));
    lo.resize(next * count, 0);
    hi.resize(next * count, 0);
    tm.resize(next * count, 0);
    let sel = &sel[..count];
    for q in 0..next {
        let (r0, r1) = (q * count..(q + 1) * count, (q + 1) * count..(q + 2) * count);
        for (dst, src) in [(&mut *lo, &*nlo), (&mut *hi, &*nhi), (&mut *tm, &*ntm)] {
            let (a, b) = (&src[r0.clone()], &src[r1.clone()]);
            for (o, ((&a, &b), &m)) in dst[r0.clone()].iter_mut().zip(a.iter().zip(b).zip(sel)) {
                *o = a ^ ((a ^ b) & m);
            }
        }
    }
}

/// Both children's hashes of every node of a level: `σ` inputs `sig` padded to a whole AES
/// batch, `H_L` into `el` and `H_R` into `er`.
fn hash_level(sig: &mut Vec<AesBlock>, el: &mut Vec<AesBlock>, er: &mut Vec<AesBlock>) {
    let prg = Prg::global();
    sig.resize(pad(sig.len()), AesBlock::default());
    el.resize(sig.len(), AesBlock::default());
    er.resize(sig.len(), AesBlock::default());
    prg.encrypt(HashKey::Left, sig, el);
    prg.encrypt(HashKey::Right, sig, er);
}

/// A level's packed nodes, hashed: their `σ` inputs, both children's hash outputs and their
/// control masks.
struct Hashed<'a> {
    sig: &'a [AesBlock],
    el: &'a [AesBlock],
    er: &'a [AesBlock],
    ctm: &'a [u64],
}

/// Per key, its window's leaf blocks as tasks (non-wrapping ranges of block indices of at
/// most `2^levels`), in key order, and the number of blocks of each key's window.
fn window_tasks(starts: &[u64], width: usize, levels: u32) -> (Vec<Task>, Vec<usize>) {
    let lmask = if levels >= 64 { u64::MAX } else { (1u64 << levels) - 1 };
    let mut tasks = vec![];
    let mut nblocks = vec![0usize; starts.len()];
    for (k, (nb, &s)) in nblocks.iter_mut().zip(starts).enumerate() {
        let first = s >> LEAF_BITS;
        let b = ((s & 127) as usize + width).div_ceil(128);
        *nb = b;
        // Walk the blocks from the first, wrapping at the end of the domain (a window as
        // wide as the domain can touch its first block twice).
        let (mut at, mut cur) = (0usize, first);
        while at < b {
            let hi = lmask.min(cur + (b - at) as u64 - 1);
            let n0 = tasks.len();
            tasks.push(Task { key: k, lo: cur, hi, at, n0, m: 1, p0: 0 });
            at += (hi - cur + 1) as usize;
            cur = 0;
        }
    }
    (tasks, nblocks)
}

/// A range of one key's window blocks, expanded by [`BitDpfKeys::window_chunk`]. A task's
/// nodes at each depth are a contiguous range of prefixes, stored contiguously.
struct Task {
    key: usize,
    /// Block range of the task and where its blocks go in the key's window.
    lo: u64,
    hi: u64,
    at: usize,
    /// Its nodes: `m` of them from index `n0`, the first with prefix `p0`.
    n0: usize,
    m: usize,
    p0: u64,
}

/// Buffers of [`BitDpfKeys::eval_window`], kept per thread (fresh large allocations would
/// cost page faults on every call).
#[derive(Default)]
struct WindowScratch {
    blocks: Vec<u128>,
    lo: Vec<u64>,
    hi: Vec<u64>,
    tm: Vec<u64>,
    nlo: Vec<u64>,
    nhi: Vec<u64>,
    ntm: Vec<u64>,
    ctm: Vec<u64>,
    sig: Vec<AesBlock>,
    el: Vec<AesBlock>,
    er: Vec<AesBlock>,
}

thread_local! {
    static WINDOW_SCRATCH: std::cell::RefCell<WindowScratch> = std::cell::RefCell::default();
}

/// Windows of at most `2^WINDOW_WHOLE_LEVELS` leaf blocks (up to 3,969 positions) are read
/// with a fixed number of nodes per level ([`BitDpfKeys::window_whole`]); wider ones with
/// the nodes each needs. (At 6, the widest windows were slower than the general code.)
const WINDOW_WHOLE_LEVELS: u32 = 5;

/// Levels above the bottom of a window's top paths that its last path walks apart from its
/// first (the paths to blocks a few apart part only near the bottom).
const WINDOW_SHARED_LEVELS: u32 = 3;

/// One job of a window evaluation: its first start, its output words, its end shares.
type WindowJob<'a> = (usize, &'a mut [u64], Option<&'a mut [CmpShares]>);

/// The most leaf blocks a window of `width` positions touches (`span`), and the depth `d`
/// (at least 1) of the nodes of which two neighbours hold any such window (`2^d ≥ span`).
fn window_span(width: usize) -> (usize, u32) {
    let block = 1usize << LEAF_BITS;
    let span = (block - 1 + width).div_ceil(block);
    (span, (usize::BITS - (span - 1).leading_zeros()).max(1))
}

/// Window bits `0..width` of a key into `o`: bit `u` is bit `u + off` of `blocks` (the key's
/// blocks from the window's first on), and the bits past the window are cleared.
fn put_window(o: &mut [u64], blocks: &[u128], off: usize, width: usize) {
    let (i0, sh) = (off / 64, off % 64);
    // The key's 64-bit word `j` (zero past its blocks).
    let word = |j: usize| blocks.get(j / 2).map_or(0, |&b| (b >> (64 * (j % 2))) as u64);
    let mut cur = word(i0);
    for (j, w) in o.iter_mut().enumerate() {
        let next = word(i0 + j + 1);
        // (`sh` is below 64; at 0 the next word adds nothing.)
        *w = (cur >> sh) | (next << (63 - sh) << 1);
        cur = next;
    }
    let tail = width % 64;
    if tail != 0 {
        let last = o.len() - 1;
        o[last] &= (1u64 << tail) - 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitdpf::{BitDpfParams, keygen};
    use crate::rng::{DealerRng, Rng, SeedableRng};

    thread_local! {
        /// Makes [`BitDpfKeys::window_whole`] hash both children of every slot (the build's
        /// fallback without VAES), for the test below.
        pub(super) static LEVEL_BY_LEVEL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// The subtree levels that hash only the needed children give the words and end shares
    /// that hashing every child gives, for windows of one to 32 leaf blocks, key counts that
    /// fill eight-key groups or not, and ranges of the batch.
    #[test]
    fn fused_subtree_levels_equal_hashing_every_child() {
        let mut r = DealerRng::seed_from_u64(5);
        for (n, keys) in [(19u32, 70usize), (30, 17), (37, 8), (37, 1)] {
            let alphas: Vec<u64> = (0..keys).map(|_| r.next_u64() & mask(n)).collect();
            let (k0, _) = keygen(BitDpfParams::new(n).unwrap(), &alphas, &mut r).unwrap();
            for width in [1usize, 100, 129, 258, 700, 1921, 3969] {
                let starts: Vec<u64> = (0..keys)
                    .map(|i| if i % 3 == 0 { alphas[i].wrapping_sub(width as u64 / 2) } else { r.next_u64() } & mask(n))
                    .collect();
                let words = width.div_ceil(64);
                let run = |fallback: bool| {
                    LEVEL_BY_LEVEL.set(fallback);
                    let mut out = vec![0u64; keys * words];
                    let mut ends = vec![CmpShares::default(); keys];
                    k0.eval_window(0..keys, &starts, width, &mut out, Some(&mut ends)).unwrap();
                    LEVEL_BY_LEVEL.set(false);
                    (out, ends)
                };
                assert!(run(false) == run(true), "n {n} keys {keys} width {width}");
            }
        }
    }
}
