//! The sorted walk: each key's points, sorted, answered by one walk of the trie of their
//! common prefixes; nodes whose points share a leaf block finish as lanes of the per-point
//! walk.

use std::ops::Range;

use super::bits::{LaneLeaf, prefix_xor};
use super::keys::{BitDpfKeys, CmpShares, LEAF_BITS};
use crate::error::FssError;
use crate::prg::{AesBlock, HashKey, Prg, from_block, pad, sigma, to_block};
use crate::share::XorBit;
use crate::tree::correct;
use crate::walk::{self, Walk};

impl BitDpfKeys {
    /// Evaluate key `keys.start + g` at the sorted points `points[offsets[g]..offsets[g+1]]`
    /// (non-decreasing) for every `g`, sharing the walk of common prefixes, with bit-packed
    /// outputs: the share of `LT` at group `g`'s `j`-th point is bit `j` of the words from
    /// `Σ_{h<g} ⌈T_h/64⌉` on (each group starts on a fresh word; [`sorted_words`] is the
    /// total), `EQ` likewise when `eq` is given.
    ///
    /// With `T` points packed in a range of width `R`, a walk costs about
    /// `(n − 7 − log2 R) + 2R/128` AES instead of `T(n − 7)` (docs/design/compiled-gates.md §2.1).
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`] if `offsets` does not partition `points` among the keys
    /// or for output buffers of the wrong size, [`FssError::Unsorted`],
    /// [`FssError::PointOutOfDomain`], or [`FssError::InvalidParams`] for a range outside
    /// the batch.
    pub fn eval_sorted(
        &self,
        keys: Range<usize>,
        points: &[u64],
        offsets: &[usize],
        lt: &mut [u64],
        mut eq: Option<&mut [u64]>,
    ) -> Result<(), FssError> {
        walk::check_range(&keys, self.len())?;
        let (base, count) = (keys.start, keys.len());
        walk::check_len(count + 1, offsets.len())?;
        if offsets[0] != 0 || offsets[count] != points.len() || offsets.windows(2).any(|w| w[0] > w[1]) {
            return Err(FssError::LengthMismatch { expected: points.len(), actual: offsets[count] });
        }
        let words = sorted_words(offsets);
        walk::check_len(words, lt.len())?;
        if let Some(e) = &eq {
            walk::check_len(words, e.len())?;
        }
        for g in 0..count {
            let pts = &points[offsets[g]..offsets[g + 1]];
            if pts.windows(2).any(|w| w[0] > w[1]) {
                return Err(FssError::Unsorted);
            }
        }
        walk::check_points(points, self.params.domain_bits)?;
        lt.fill(0);
        if let Some(e) = eq.as_deref_mut() {
            e.fill(0);
        }
        // Independent jobs of whole keys: at least CHUNK points and, so that the top levels
        // (one node per key) still fill AES batches, at least PAR keys.
        let mut jobs = Vec::new();
        let (mut rest_lt, mut rest_eq) = (lt, eq);
        let mut g0 = 0;
        while g0 < count {
            let mut g1 = g0 + 1;
            while g1 < count && (offsets[g1] - offsets[g0] < walk::CHUNK || g1 - g0 < crate::prg::PAR) {
                g1 += 1;
            }
            let w = sorted_words(&offsets[g0..=g1]);
            let (head, tail) = std::mem::take(&mut rest_lt).split_at_mut(w);
            rest_lt = tail;
            let head_eq = match rest_eq.take() {
                Some(e) => {
                    let (h, t) = e.split_at_mut(w);
                    rest_eq = Some(t);
                    Some(h)
                }
                None => None,
            };
            jobs.push((g0, g1, head, head_eq));
            g0 = g1;
        }
        let run = |(g0, g1, l, e): (usize, usize, &mut [u64], Option<&mut [u64]>)| {
            self.sorted_chunk(base, g0..g1, points, offsets, l, e)
        };
        if jobs.len() == 1 {
            jobs.into_iter().for_each(run);
        } else {
            use rayon::prelude::*;
            jobs.into_par_iter().for_each(run);
        }
        Ok(())
    }

    /// [`BitDpfKeys::eval_sorted`] for every key of the batch, unpacked: `out` holds the
    /// shares in the points' positions.
    pub(crate) fn eval_sorted_shares(
        &self,
        points: &[u64],
        offsets: &[usize],
        out: &mut [CmpShares],
    ) -> Result<(), FssError> {
        walk::check_len(points.len(), out.len())?;
        let words = sorted_words(offsets);
        let (mut lt, mut eq) = (vec![0u64; words], vec![0u64; words]);
        self.eval_sorted(0..self.len(), points, offsets, &mut lt, Some(&mut eq))?;
        unpack_sorted(offsets, &lt, &eq, out);
        Ok(())
    }

    /// The trie walk of [`BitDpfKeys::eval_sorted`] for the keys in `groups`.
    ///
    /// The frontier is kept in point order. A node splits at level `i` exactly where two
    /// neighbouring points first differ in bit `n − 1 − i`; those pairs are bucketed by that
    /// bit once (a counting sort, [`bucket_pairs`]), so each level is a merge of the frontier
    /// with its bucket. At a leaf, one prefix-XOR of the block answers every point in it.
    fn sorted_chunk(
        &self,
        base: usize,
        groups: Range<usize>,
        points: &[u64],
        offsets: &[usize],
        lt: &mut [u64],
        eq: Option<&mut [u64]>,
    ) {
        let mut out = PackedOut::new(groups.clone(), points, offsets, self.party.bit(), lt, eq);
        if self.params.is_table() {
            for g in groups {
                out.put_block(g, offsets[g]..offsets[g + 1], self.leaf(base + g)[0], 0, 0, true);
            }
            return;
        }
        // Answers of nodes finished by the lane walk: (key, point, LT, EQ), in a reused buffer.
        let mut lone = SORTED_SCRATCH.with_borrow_mut(|sc| std::mem::take(&mut sc.lone));
        lone.clear();
        SORTED_SCRATCH.with_borrow_mut(|sc| {
            let count = bucket_pairs(points, offsets, groups.clone(), &mut sc.first_of, &mut sc.split);
            sc.frontier.clear();
            sc.frontier.extend(groups.filter(|&g| offsets[g] < offsets[g + 1]).map(|g| Node {
                key: g as u32,
                lo: offsets[g] as u32,
                hi: offsets[g + 1] as u32,
                s: self.tree.roots[base + g],
                t: self.party.bit(),
                prev: 0,
                acc: 0,
            }));
            sc.pending.clear();
            for i in 0..self.params.levels() {
                self.trie_children(i, &count, points, sc);
                self.trie_descend(base, i, points, sc, &mut out);
            }
            self.finish_lanes(base, points, &mut sc.pending, &mut lone);
        });
        for &(g, p, l, e) in &lone {
            out.put_bit(g, p, l, e);
        }
        SORTED_SCRATCH.with_borrow_mut(|sc| sc.lone = lone);
    }

    /// Level `i` of the trie walk, first half: every frontier node's children in point order
    /// (two where the node's bucket pair splits it, else the one its points go to), with
    /// their direction and slot in that direction's AES batch, and both batches hashed.
    fn trie_children(&self, i: u32, count: &[u32; 65], points: &[u64], sc: &mut SortedScratch) {
        let SortedScratch { split, frontier, children, sig, enc, .. } = sc;
        let shift = self.params.domain_bits - 1 - i;
        let bucket = &split[count[shift as usize] as usize..count[shift as usize + 1] as usize];
        children.clear();
        sig[0].clear();
        sig[1].clear();
        let mut sp = 0;
        for node in frontier.iter() {
            while sp < bucket.len() && bucket[sp] <= node.lo {
                sp += 1;
            }
            let block = to_block(sigma(node.s));
            let mut push = |child: Node, c: u8| {
                let slot = sig[c as usize].len() as u32;
                sig[c as usize].push(block);
                children.push((child, c, slot));
            };
            if sp < bucket.len() && bucket[sp] < node.hi {
                let j = bucket[sp];
                sp += 1;
                push(Node { hi: j, ..*node }, 0);
                push(Node { lo: j, ..*node }, 1);
            } else {
                push(*node, ((points[node.lo as usize] >> shift) & 1) as u8);
            }
        }
        let prg = Prg::global();
        for c in 0..2 {
            let len = sig[c].len();
            sig[c].resize(pad(len), AesBlock::default());
            enc[c].resize(sig[c].len(), AesBlock::default());
            let key = if c == 0 { HashKey::Left } else { HashKey::Right };
            prg.encrypt(key, &sig[c], &mut enc[c]);
        }
    }

    /// Level `i` of the trie walk, second half: each child corrected into the next
    /// frontier, or (at the last level) its leaf block answered into `out`; a child whose
    /// points share one leaf block, or that holds a few points, leaves the trie for the lane
    /// walk (`pending`, with the level it left at).
    fn trie_descend(
        &self,
        base: usize,
        i: u32,
        points: &[u64],
        sc: &mut SortedScratch,
        out: &mut PackedOut<'_>,
    ) {
        let SortedScratch { frontier, children, pending, sig, enc, .. } = sc;
        let levels = self.params.levels();
        let last = i == levels - 1;
        frontier.clear();
        for &(node, c, slot) in children.iter() {
            // (Group g of this call is key base + g of the batch.)
            let (g, kg) = (node.key as usize, base + node.key as usize);
            let (cu, k) = (c as usize, slot as usize);
            let a = from_block(&enc[cu][k]) ^ from_block(&sig[cu][k]);
            let acc = node.acc ^ (node.t & (c != node.prev) as u8);
            if last {
                let blk = a ^ (self.leaf(kg)[cu] & (node.t as u128).wrapping_neg());
                out.put_block(g, node.lo as usize..node.hi as usize, blk, c, acc, false);
                continue;
            }
            let (s, t) = correct(a, node.t, self.tree.scw(i, kg), self.tree.tcw(i, kg, c as u64));
            let child = Node { s, t, prev: c, acc, ..node };
            let (first, last) = (points[child.lo as usize], points[child.hi as usize - 1]);
            if levels - i <= RESUME_LEVELS {
                frontier.push(child);
            } else if first >> LEAF_BITS == last >> LEAF_BITS {
                // Its points share one leaf block (often a lone point): finish its path with
                // the vectorised lane walk.
                pending.push((i + 1, child));
            } else if child.hi - child.lo <= LANE_POINTS {
                // A few points: one lane per leaf block from here (the lanes repeat the walk
                // the blocks would share, cheaper than trie nodes).
                let mut lo = child.lo;
                for p in child.lo + 1..=child.hi {
                    if p == child.hi || points[p as usize] >> LEAF_BITS != points[lo as usize] >> LEAF_BITS {
                        pending.push((i + 1, Node { lo, hi: p, ..child }));
                        lo = p;
                    }
                }
            } else {
                frontier.push(child);
            }
        }
    }

    /// The nodes that left the trie (`pending`), finished by the lane walk in batches of
    /// one starting level: each point's answer into `lone` as (key, point, LT, EQ).
    fn finish_lanes(
        &self,
        base: usize,
        points: &[u64],
        pending: &mut [(u32, Node)],
        lone: &mut Vec<(usize, usize, bool, bool)>,
    ) {
        // Lone points, by the level they left the trie at.
        pending.sort_by_key(|(l, _)| *l);
        for batch in pending.chunk_by(|a, b| a.0 == b.0) {
            for part in batch.chunks(walk::CHUNK) {
                let from = part[0].0;
                let res = self.resume_lanes(base, from, part.iter().map(|(_, nd)| nd), points);
                for ((_, nd), r) in part.iter().zip(res) {
                    let range = nd.lo as usize..nd.hi as usize;
                    for (p, &y) in range.clone().zip(&points[range]) {
                        let (l, e) = r.answer((y & 127) as u32);
                        lone.push((nd.key as usize, p, l, e));
                    }
                }
            }
        }
    }

    /// Finish the walks of nodes that left the trie before level `from` (each node's points
    /// lie in one leaf block): the leaf block of each, in order.
    fn resume_lanes<'a>(
        &self,
        base: usize,
        from: u32,
        nodes: impl Iterator<Item = &'a Node>,
        points: &[u64],
    ) -> Vec<LaneLeaf> {
        let nodes: Vec<&Node> = nodes.collect();
        let m = nodes.len();
        let (n, levels) = (self.params.domain_bits, self.params.levels());
        let seeds: Vec<u128> = nodes.iter().map(|nd| nd.s).collect();
        let bit = |b: u8| (b as u64).wrapping_neg();
        let t: Vec<u64> = nodes.iter().map(|nd| bit(nd.t)).collect();
        let acc: Vec<u64> = nodes.iter().map(|nd| bit(nd.acc)).collect();
        let prev: Vec<u64> = nodes.iter().map(|nd| bit(nd.prev)).collect();
        let pts: Vec<u64> = nodes.iter().map(|nd| points[nd.lo as usize]).collect();
        let keys: Vec<usize> = nodes.iter().map(|nd| base + nd.key as usize).collect();
        let key = |k: usize| keys[k];
        let prg = Prg::global();
        let mut w = Walk::resume(&seeds, &t, &acc, &prev);
        let mut enc = w.buffers();
        // Lanes of one key come together: runs of them descend with constant correction words.
        let runs: Vec<(usize, usize)> = keys
            .chunk_by(|a, b| a == b)
            .scan(0, |at, run| {
                let r = (*at, run.len());
                *at += run.len();
                Some(r)
            })
            .collect();
        let by_runs = runs.len() * 8 <= m;
        for i in from..levels - 1 {
            w.encrypt(prg, [HashKey::Left, HashKey::Right], &mut enc);
            if by_runs {
                for &(a, len) in &runs {
                    w.descend_one_key::<true>(&enc, &self.tree, i, keys[a], a, &pts[a..a + len], n - 1 - i);
                }
            } else {
                w.descend_all::<true>(&enc, &self.tree, i, key, &pts, n - 1 - i);
            }
        }
        let shift = n - levels;
        w.encrypt(prg, [HashKey::Left, HashKey::Right], &mut enc);
        let (lo, hi, tm) = w.view(m);
        let (acc, prev) = (&w.acc[..m], &w.prev[..m]);
        let (e0, e1) = (&enc[0][..m], &enc[1][..m]);
        let party = self.party.bit() as u64;
        (0..m)
            .map(|k| {
                let y = pts[k];
                let sel = ((y >> shift) & 1).wrapping_neg();
                let t = tm[k];
                let acc = acc[k] ^ (t & (sel ^ prev[k]));
                let (al, ah) = walk::select_hash(&e0[k], &e1[k], sel, lo[k], hi[k]);
                let [c0, c1] = self.leaf(keys[k]);
                let cw = c0 ^ ((c0 ^ c1) & ((sel as u128) << 64 | sel as u128));
                let (bl, bh) = (al ^ (cw as u64 & t), ah ^ ((cw >> 64) as u64 & t));
                LaneLeaf { bl, bh, sel, flip: (acc ^ party) & 1 }
            })
            .collect()
    }
}

/// Where a sorted-walk job's answers go: the share at group `g`'s point `p` is bit
/// `p − offsets[g]` of the group's words, which start at `word_of[g − g_first]`.
struct PackedOut<'a> {
    points: &'a [u64],
    offsets: &'a [usize],
    party: u8,
    word_of: Vec<usize>,
    g_first: usize,
    lt: &'a mut [u64],
    eq: Option<&'a mut [u64]>,
}

impl<'a> PackedOut<'a> {
    fn new(
        groups: Range<usize>,
        points: &'a [u64],
        offsets: &'a [usize],
        party: u8,
        lt: &'a mut [u64],
        eq: Option<&'a mut [u64]>,
    ) -> PackedOut<'a> {
        // Word offset of each key's bits within this job.
        let mut word_of = Vec::with_capacity(groups.len());
        let mut w = 0usize;
        for g in groups.clone() {
            word_of.push(w);
            w += (offsets[g + 1] - offsets[g]).div_ceil(64);
        }
        PackedOut { points, offsets, party, word_of, g_first: groups.start, lt, eq }
    }

    /// The answers at group `g`'s points `range` (all in leaf block `blk`, reached with last
    /// direction `prev` and prefix parity `acc`; for a table key, `blk` is its table).
    fn put_block(&mut self, g: usize, range: Range<usize>, blk: u128, prev: u8, acc: u8, table: bool) {
        let px = prefix_xor(blk);
        // LT = acc ⊕ party ⊕ (parity of bits 0..=pos, or of the bits above pos).
        let flip = if table {
            (blk.count_ones() & 1) as u64
        } else {
            ((acc ^ self.party) as u64) ^ if prev == 1 { (blk.count_ones() & 1) as u64 } else { 0 }
        };
        let (base, w0) = (self.offsets[g], self.word_of[g - self.g_first]);
        let (mut word, mut lt_acc, mut eq_acc) = (usize::MAX, 0u64, 0u64);
        for p in range {
            let pos = (self.points[p] & 127) as u32;
            let (i, sh) = (w0 + (p - base) / 64, (p - base) % 64);
            if i != word {
                if word != usize::MAX {
                    self.lt[word] |= lt_acc;
                    if let Some(e) = self.eq.as_deref_mut() {
                        e[word] |= eq_acc;
                    }
                }
                (word, lt_acc, eq_acc) = (i, 0, 0);
            }
            lt_acc |= ((((px >> pos) as u64) & 1) ^ flip) << sh;
            eq_acc |= (((blk >> pos) as u64) & 1) << sh;
        }
        if word != usize::MAX {
            self.lt[word] |= lt_acc;
            if let Some(e) = self.eq.as_deref_mut() {
                e[word] |= eq_acc;
            }
        }
    }

    /// The answer (`l`, `e`) at group `g`'s point `p`.
    fn put_bit(&mut self, g: usize, p: usize, l: bool, e: bool) {
        let (i, sh) =
            (self.word_of[g - self.g_first] + (p - self.offsets[g]) / 64, (p - self.offsets[g]) % 64);
        self.lt[i] |= (l as u64) << sh;
        if let Some(q) = self.eq.as_deref_mut() {
            q[i] |= (e as u64) << sh;
        }
    }
}

/// Pairs of neighbouring points (within a key of `groups`) by the highest bit they differ
/// in: `split[start[b]..start[b+1]]` holds the second points `j` of bit `b`'s pairs,
/// ascending, with `start` the returned counts. (Pairs in one leaf block, differing below
/// bit 7, never split.)
fn bucket_pairs(
    points: &[u64],
    offsets: &[usize],
    groups: Range<usize>,
    first_of: &mut Vec<bool>,
    split: &mut Vec<u32>,
) -> [u32; 65] {
    let (lo_all, hi_all) = (offsets[groups.start], offsets[groups.end]);
    let mut count = [0u32; 65];
    let diff_bit = |j: usize| -> Option<usize> {
        let d = points[j - 1] ^ points[j];
        (d >> LEAF_BITS != 0).then(|| 63 - d.leading_zeros() as usize)
    };
    // A key's first point pairs with nothing.
    first_of.clear();
    first_of.resize(hi_all - lo_all, false);
    for g in groups {
        if offsets[g] < hi_all {
            first_of[offsets[g] - lo_all] = true;
        }
    }
    for j in lo_all + 1..hi_all {
        if !first_of[j - lo_all]
            && let Some(b) = diff_bit(j)
        {
            count[b + 1] += 1;
        }
    }
    for b in 0..64 {
        count[b + 1] += count[b];
    }
    let mut fill = count;
    split.clear();
    split.resize(count[64] as usize, 0);
    for j in lo_all + 1..hi_all {
        if !first_of[j - lo_all]
            && let Some(b) = diff_bit(j)
        {
            split[fill[b] as usize] = j as u32;
            fill[b] += 1;
        }
    }
    count
}

/// A trie node holding one point leaves the trie for the lane walk when more than this many
/// levels remain.
const RESUME_LEVELS: u32 = 3;

/// A trie node with at most this many points leaves the trie as one lane per leaf block
/// (chosen on LayerNorm's rows against 8 and 32).
const LANE_POINTS: u32 = 16;

/// Buffers of the trie walk of [`BitDpfKeys::eval_sorted`], kept per thread.
#[derive(Default)]
struct SortedScratch {
    first_of: Vec<bool>,
    split: Vec<u32>,
    frontier: Vec<Node>,
    children: Vec<(Node, u8, u32)>,
    pending: Vec<(u32, Node)>,
    sig: [Vec<AesBlock>; 2],
    enc: [Vec<AesBlock>; 2],
    lone: Vec<(usize, usize, bool, bool)>,
}

thread_local! {
    static SORTED_SCRATCH: std::cell::RefCell<SortedScratch> = std::cell::RefCell::default();
}

/// Words of the bit-packed output of [`BitDpfKeys::eval_sorted`] for these offsets:
/// `Σ_g ⌈T_g/64⌉`.
pub fn sorted_words(offsets: &[usize]) -> usize {
    offsets.windows(2).map(|w| (w[1] - w[0]).div_ceil(64)).sum()
}

/// The bit-packed shares of [`BitDpfKeys::eval_sorted`] (`lt`, `eq`) unpacked to the
/// points' positions: group `g`'s `j`-th point into `out[offsets[g] + j]`.
///
/// # Panics
/// If `lt` or `eq` holds fewer than [`sorted_words`] words, or `out` fewer than
/// `offsets`' last entry.
pub fn unpack_sorted(offsets: &[usize], lt: &[u64], eq: &[u64], out: &mut [CmpShares]) {
    let mut w0 = 0;
    for g in offsets.windows(2) {
        for (i, o) in out[g[0]..g[1]].iter_mut().enumerate() {
            let bit = |v: &[u64]| (v[w0 + i / 64] >> (i % 64)) & 1 == 1;
            *o = CmpShares { lt: XorBit(bit(lt)), eq: XorBit(bit(eq)) };
        }
        w0 += (g[1] - g[0]).div_ceil(64);
    }
}

/// A trie node: all points in `lo..hi` share the path so far.
#[derive(Clone, Copy)]
struct Node {
    key: u32,
    lo: u32,
    hi: u32,
    s: u128,
    t: u8,
    prev: u8,
    acc: u8,
}
