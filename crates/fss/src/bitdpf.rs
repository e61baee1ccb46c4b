//! The 1-bit DPF with early termination and the comparisons read from it by prefix parity
//! (SIGMA's layout; docs/design/fss-building-blocks.md §3.3 and §4).
//!
//! A key at point `α` on `n` bits gives XOR shares of `1{y = α}`, `1{y < α}` and `1{y > α}`
//! for any public `y`, all from one walk down the tree. The tree stops `ν = 7` levels early:
//! one 128-bit leaf block holds 128 outputs, so a walk costs `n − 7` AES.
//!
//! Layout for `n > 7` (`L = n − 7`): root seed, `L − 1` levels of (seed CW, `tL`, `tR`) and
//! two 128-bit leaf CWs: `λ + (L − 1)(λ + 2) + 2λ` bits (the `130n − 656` of §8). For
//! `n ≤ 7` the key is XOR shares of the truth table of `j ↦ 1{j = α}` (`2^n` bits).
//!
//! Leaf bit order: output `y` sits at bit `y mod 128` of its leaf block, counted from the
//! least significant bit (as in `docs/design/models/fss_reference_model.py`).

use crate::codec::{self, BitReader, BitWriter, Header, KeyKind};
use crate::dpf::{MAX_FULL_DOMAIN_BITS, SCRATCH, expand_full};
use crate::error::{DecodeError, FssError};
use crate::prg::{AesBlock, HashKey, Prg, from_block, pad, sigma, to_block};
use crate::ring::mask;
use crate::rng::{CryptoRng, random_block, random_seed};
use crate::share::{Party, XorBit};
use crate::tree::{DealerTrees, TreeKeys, correct, path_bit};
use crate::walk::{self, Walk};

/// `ν`: outputs per leaf block are `2^ν = 128`.
pub const LEAF_BITS: u32 = 7;

/// Shape of a 1-bit DPF: the input width `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BitDpfParams {
    domain_bits: u32,
}

impl BitDpfParams {
    /// A 1-bit DPF on `n = domain_bits` input bits.
    ///
    /// # Errors
    /// [`FssError::InvalidWidth`] unless `1 ≤ n ≤ 64`.
    pub fn new(domain_bits: u32) -> Result<BitDpfParams, FssError> {
        if !(1..=64).contains(&domain_bits) {
            return Err(FssError::InvalidWidth(domain_bits));
        }
        Ok(BitDpfParams { domain_bits })
    }

    /// Input width `n`.
    pub fn domain_bits(self) -> u32 {
        self.domain_bits
    }

    /// Tree depth `L = n − 7` (0 for a truth-table key).
    pub fn levels(self) -> u32 {
        self.domain_bits.saturating_sub(LEAF_BITS)
    }

    fn is_table(self) -> bool {
        self.domain_bits <= LEAF_BITS
    }

    /// One party's key material per key, in bits: `λ + (L−1)(λ+2) + 2λ`, or `2^n` for
    /// `n ≤ 7`.
    pub fn key_bits(self) -> u64 {
        if self.is_table() { 1 << self.domain_bits } else { TreeKeys::key_bits(self.levels() - 1) + 256 }
    }

    /// AES blocks for one point evaluation (`n − 7`, or 0 for a table).
    pub fn aes_per_eval(self) -> u64 {
        self.levels() as u64
    }
}

/// One party's keys for a batch of 1-bit DPFs of one shape. `Debug` shows only the shape;
/// the material is zeroized on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct BitDpfKeys {
    params: BitDpfParams,
    party: Party,
    /// Roots and the first `L − 1` levels (no levels for table keys).
    tree: TreeKeys,
    /// Per key, the two leaf correction blocks; for a table key `[table share, 0]`.
    leaf_cw: Vec<[u128; 2]>,
}

crate::wipe_on_drop!(BitDpfKeys { wipe: [leaf_cw], zeroize: [tree] });

impl std::fmt::Debug for BitDpfKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BitDpfKeys")
            .field("params", &self.params)
            .field("party", &self.party)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// The shares one evaluation yields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmpShares {
    /// Share of `1{y < α}`.
    pub lt: XorBit,
    /// Share of `1{y = α}`.
    pub eq: XorBit,
}

impl CmpShares {
    /// Share of `1{y > α} = 1 ⊕ 1{y < α} ⊕ 1{y = α}` (the two are exclusive); party 0 adds
    /// the constant.
    pub fn gt(self, party: Party) -> XorBit {
        XorBit(self.lt.0 ^ self.eq.0 ^ (party == Party::P0))
    }
}

/// Deal both parties' keys at the points `α_i`, all levels in lockstep.
///
/// # Errors
/// [`FssError::PointOutOfDomain`] if some `α ≥ 2^n`.
pub fn keygen<R: CryptoRng + ?Sized>(
    params: BitDpfParams,
    alphas: &[u64],
    rng: &mut R,
) -> Result<(BitDpfKeys, BitDpfKeys), FssError> {
    walk::check_points(alphas, params.domain_bits)?;
    let m = alphas.len();
    let key = |party, tree, leaf_cw| BitDpfKeys { params, party, tree, leaf_cw };
    if params.is_table() {
        let (t0, t1) = (TreeKeys::with_capacity(0, 0), TreeKeys::with_capacity(0, 0));
        let mut shares = (Vec::with_capacity(m), Vec::with_capacity(m));
        for &a in alphas {
            let s0 = random_block(rng) & table_mask(params.domain_bits);
            shares.0.push([s0, 0]);
            shares.1.push([s0 ^ (1u128 << a), 0]);
        }
        return Ok((key(Party::P0, t0, shares.0), key(Party::P1, t1, shares.1)));
    }
    let (n, levels) = (params.domain_bits, params.levels());
    let prg = Prg::global();
    let roots: Vec<u128> = (0..2 * m).map(|_| random_seed(rng)).collect();
    let mut trees = DealerTrees::new(roots, levels - 1);
    for i in 0..levels - 1 {
        trees.expand(prg);
        trees.step(i, |k| path_bit(alphas[k], n, i));
    }
    // Last level: the full hash outputs are the leaf blocks (§3.3).
    trees.expand(prg);
    let leaf_cw = (0..m)
        .map(|k| {
            let a = path_bit(alphas[k], n, levels - 1) as usize;
            let mut cw =
                [trees.left[2 * k] ^ trees.left[2 * k + 1], trees.right[2 * k] ^ trees.right[2 * k + 1]];
            cw[a] ^= 1u128 << (alphas[k] & 127);
            cw
        })
        .collect::<Vec<_>>();
    let (t0, t1) = trees.split_keys();
    Ok((key(Party::P0, t0, leaf_cw.clone()), key(Party::P1, t1, leaf_cw)))
}

impl BitDpfKeys {
    /// The keys' shape.
    pub fn params(&self) -> BitDpfParams {
        self.params
    }

    /// The party these keys belong to.
    pub fn party(&self) -> Party {
        self.party
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.leaf_cw.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys `start..end` as a batch of their own.
    ///
    /// # Panics
    /// If the range is out of bounds (a caller bug).
    pub fn slice(&self, start: usize, end: usize) -> BitDpfKeys {
        let tree = if self.params.is_table() { self.tree.clone() } else { self.tree.slice(start, end) };
        BitDpfKeys {
            params: self.params,
            party: self.party,
            tree,
            leaf_cw: self.leaf_cw[start..end].to_vec(),
        }
    }

    /// Evaluate key `i` at `points[i]` for every key: shares of `1{y < α_i}` and
    /// `1{y = α_i}`. Level by level; split across the rayon pool above [`walk::CHUNK`] keys.
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`] or [`FssError::PointOutOfDomain`].
    pub fn eval(&self, points: &[u64], out: &mut [CmpShares]) -> Result<(), FssError> {
        walk::check_len(self.len(), points.len())?;
        self.eval_lanes(None, points, out)
    }

    /// Evaluate key `keys[j]` at `points[j]` for every lane `j`.
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`], [`FssError::PointOutOfDomain`] or
    /// [`FssError::InvalidParams`] for a key index out of range.
    pub fn eval_indexed(&self, keys: &[u32], points: &[u64], out: &mut [CmpShares]) -> Result<(), FssError> {
        walk::check_len(keys.len(), points.len())?;
        walk::check_indices(keys, self.len())?;
        self.eval_lanes(Some(keys), points, out)
    }

    /// Evaluate key `i` at one point (slow path).
    ///
    /// # Errors
    /// As [`BitDpfKeys::eval_indexed`].
    pub fn eval_one(&self, i: usize, y: u64) -> Result<CmpShares, FssError> {
        let mut out = [CmpShares::default()];
        self.eval_indexed(&[walk::index(i, self.len())?], &[y], &mut out)?;
        Ok(out[0])
    }

    fn eval_lanes(
        &self,
        keys: Option<&[u32]>,
        points: &[u64],
        out: &mut [CmpShares],
    ) -> Result<(), FssError> {
        walk::check_len(points.len(), out.len())?;
        walk::check_points(points, self.params.domain_bits)?;
        walk::run_chunks(keys, points, out, 1, |map, pts, o| match map {
            walk::KeyMap::Offset(off) => self.eval_chunk(|k| off + k, pts, o),
            walk::KeyMap::Indexed(ix) => self.eval_chunk(|k| ix[k] as usize, pts, o),
        });
        Ok(())
    }

    fn eval_chunk(&self, key: impl Fn(usize) -> usize, points: &[u64], out: &mut [CmpShares]) {
        if self.params.is_table() {
            for k in 0..points.len() {
                out[k] = self.finish(points[k], self.leaf_cw[key(k)][0], 0, 0);
            }
            return;
        }
        self.walk_chunk(key, points, |k, leaf| {
            let (lt, eq) = leaf.answer((points[k] & 127) as u32);
            out[k] = CmpShares { lt: XorBit(lt), eq: XorBit(eq) };
        });
    }

    /// Walk `w`'s lanes (lane `k` on key `key(k)`) down `levels` of a walk that stops at
    /// depth `top`, towards `points` (their top `top` bits), with prefix parity if asked.
    fn walk_levels(
        &self,
        w: &mut Walk,
        levels: std::ops::Range<u32>,
        top: u32,
        points: &[u64],
        key: impl Fn(usize) -> usize + Copy,
        parity: bool,
    ) {
        let prg = Prg::global();
        let mut enc = w.buffers();
        for i in levels {
            w.encrypt(prg, [HashKey::Left, HashKey::Right], &mut enc);
            if parity {
                w.descend_all::<true>(&enc, &self.tree, i, key, points, top - 1 - i);
            } else {
                w.descend_all::<false>(&enc, &self.tree, i, key, points, top - 1 - i);
            }
        }
    }

    /// The leaf blocks of keys `first..` at `points` (a walk of its own: inlined into a
    /// caller's closure, the walk's loop spilled registers and ran ~2× slower).
    #[inline(never)]
    fn leaves_chunk(&self, first: usize, points: &[u64], out: &mut [LaneLeaf]) {
        self.walk_chunk(|k| first + k, points, |k, leaf| out[k] = leaf);
    }

    /// Walk lane `k` (key `key(k)`) to the leaf block of `points[k]` for every lane, and hand
    /// each lane's block to `at_leaf` (not for table keys).
    #[inline(always)]
    fn walk_chunk(
        &self,
        key: impl Fn(usize) -> usize,
        points: &[u64],
        mut at_leaf: impl FnMut(usize, LaneLeaf),
    ) {
        let m = points.len();
        let (n, levels) = (self.params.domain_bits, self.params.levels());
        let prg = Prg::global();
        let mut w = Walk::new(m, |k| self.tree.roots[key(k)], self.party.bit());
        let mut enc = w.buffers();
        for i in 0..levels - 1 {
            let shift = n - 1 - i;
            w.encrypt(prg, [HashKey::Left, HashKey::Right], &mut enc);
            // Prefix parity (§4): XOR in t where the path turns.
            w.descend_all::<true>(&enc, &self.tree, i, &key, points, shift);
        }
        // Last level: the hash output, corrected, is the leaf block.
        let shift = n - levels;
        w.encrypt(prg, [HashKey::Left, HashKey::Right], &mut enc);
        let (lo, hi, tm) = w.view(m);
        let (acc, prev) = (&w.acc[..m], &w.prev[..m]);
        let (e0, e1) = (&enc[0][..m], &enc[1][..m]);
        let party = self.party.bit() as u64;
        for k in 0..m {
            let kk = key(k);
            let sel = ((points[k] >> shift) & 1).wrapping_neg();
            let t = tm[k];
            let acc = acc[k] ^ (t & (sel ^ prev[k]));
            let (al, ah) = walk::select_hash(&e0[k], &e1[k], sel, lo[k], hi[k]);
            let [c0, c1] = self.leaf_cw[kk];
            let cw = c0 ^ ((c0 ^ c1) & ((sel as u128) << 64 | sel as u128));
            let (bl, bh) = (al ^ (cw as u64 & t), ah ^ ((cw >> 64) as u64 & t));
            at_leaf(k, LaneLeaf { bl, bh, sel, flip: (acc ^ party) & 1 });
        }
    }

    /// Evaluate key `i` at `(points[i] − d) mod 2^n` for every `d` of `deltas`, into
    /// `out[i·D + j]` for `deltas[j]` (`D = deltas.len()`). One walk per key reaches the leaf
    /// block of `points[i]`; every point in that block is answered from it (a split
    /// comparison's thresholds come as `β` and `β + 1`), the others take walks of their own.
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`] or [`FssError::PointOutOfDomain`].
    pub fn eval_near(&self, points: &[u64], deltas: &[u64], out: &mut [CmpShares]) -> Result<(), FssError> {
        self.eval_near_of(0..self.len(), points, deltas, out)
    }

    /// [`BitDpfKeys::eval_near`] for the keys in `keys` (`points[j]` for key
    /// `keys.start + j`), without copying them out of the batch.
    ///
    /// # Errors
    /// As [`BitDpfKeys::eval_near`], and [`FssError::InvalidParams`] for a range outside the
    /// batch.
    pub fn eval_near_of(
        &self,
        keys: std::ops::Range<usize>,
        points: &[u64],
        deltas: &[u64],
        out: &mut [CmpShares],
    ) -> Result<(), FssError> {
        let n = self.params.domain_bits;
        walk::check_range(&keys, self.len())?;
        walk::check_len(keys.len(), points.len())?;
        walk::check_len(points.len() * deltas.len(), out.len())?;
        walk::check_points(points, n)?;
        let (d, m, base) = (deltas.len(), mask(n), keys.start);
        if d == 0 {
            return Ok(());
        }
        if self.params.is_table() {
            let idx: Vec<u32> = keys.clone().map(|k| k as u32).collect();
            let mut pts = vec![0u64; points.len()];
            let mut one = vec![CmpShares::default(); points.len()];
            for (j, &dj) in deltas.iter().enumerate() {
                pts.iter_mut().zip(points).for_each(|(p, &y)| *p = y.wrapping_sub(dj) & m);
                self.eval_lanes(Some(&idx), &pts, &mut one)?;
                out.iter_mut().skip(j).step_by(d).zip(&one).for_each(|(o, c)| *o = *c);
            }
            return Ok(());
        }
        let (mut far_keys, mut far_pts, mut far_at) = (vec![], vec![], vec![]);
        walk::run_chunks(None, points, out, d, |map, pts, o| {
            let walk::KeyMap::Offset(off) = map else { unreachable!("offset keys") };
            let mut leaves = [LaneLeaf::default(); walk::CHUNK];
            self.leaves_chunk(base + off, pts, &mut leaves[..pts.len()]);
            for (k, (leaf, &y)) in leaves.iter().zip(pts).enumerate() {
                for (j, &dj) in deltas.iter().enumerate() {
                    let z = y.wrapping_sub(dj) & m;
                    if z >> LEAF_BITS == y >> LEAF_BITS {
                        let (lt, eq) = leaf.answer((z & 127) as u32);
                        o[k * d + j] = CmpShares { lt: XorBit(lt), eq: XorBit(eq) };
                    }
                }
            }
        });
        for (i, &y) in points.iter().enumerate() {
            for (j, &dj) in deltas.iter().enumerate() {
                let z = y.wrapping_sub(dj) & m;
                if z >> LEAF_BITS != y >> LEAF_BITS {
                    far_keys.push((base + i) as u32);
                    far_pts.push(z);
                    far_at.push(i * d + j);
                }
            }
        }
        if !far_keys.is_empty() {
            let mut far = vec![CmpShares::default(); far_keys.len()];
            self.eval_indexed(&far_keys, &far_pts, &mut far)?;
            far_at.iter().zip(&far).for_each(|(&at, c)| out[at] = *c);
        }
        Ok(())
    }

    /// The comparison shares at `y` from the leaf block reached by a walk.
    #[inline(always)]
    fn finish(&self, y: u64, blk: u128, prev: u64, acc: u8) -> CmpShares {
        let pos = (y & 127) as u32;
        let eq = (blk >> pos) & 1 == 1;
        if self.params.is_table() {
            // XOR of the table shares above y: one of them is α exactly when y < α.
            return CmpShares { lt: XorBit(parity(above(blk, pos))), eq: XorBit(eq) };
        }
        let leaf = if prev == 1 { above(blk, pos) } else { blk & upto(pos) };
        let lt = acc ^ parity(leaf) as u8 ^ self.party.bit();
        CmpShares { lt: XorBit(lt == 1), eq: XorBit(eq) }
    }

    /// Evaluate key `g` at the sorted points `points[offsets[g]..offsets[g+1]]`
    /// (non-decreasing) for every key, sharing the walk of common prefixes; `out` is filled in
    /// the same positions.
    ///
    /// With `T` points packed in a range of width `R`, a walk costs about
    /// `(n − 7 − log2 R) + 2R/128` AES instead of `T(n − 7)` (docs/design/compiled-gates.md §2.1).
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`] if `offsets` does not partition `points` among the keys,
    /// [`FssError::Unsorted`] or [`FssError::PointOutOfDomain`].
    pub fn eval_sorted(
        &self,
        points: &[u64],
        offsets: &[usize],
        out: &mut [CmpShares],
    ) -> Result<(), FssError> {
        walk::check_len(points.len(), out.len())?;
        let words = sorted_words(offsets);
        let (mut lt, mut eq) = (vec![0u64; words], vec![0u64; words]);
        self.eval_sorted_bits(points, offsets, &mut lt, Some(&mut eq))?;
        let mut w0 = 0;
        for g in 0..self.len() {
            for (i, o) in out[offsets[g]..offsets[g + 1]].iter_mut().enumerate() {
                let bit = |v: &[u64]| (v[w0 + i / 64] >> (i % 64)) & 1 == 1;
                *o = CmpShares { lt: XorBit(bit(&lt)), eq: XorBit(bit(&eq)) };
            }
            w0 += (offsets[g + 1] - offsets[g]).div_ceil(64);
        }
        Ok(())
    }

    /// [`BitDpfKeys::eval_sorted`] with bit-packed outputs: the share of `LT` at key `g`'s
    /// `j`-th point is bit `j` of the words from `Σ_{h<g} ⌈T_h/64⌉` on (each key starts on a
    /// fresh word; [`sorted_words`] is the total), `EQ` likewise when `eq` is given.
    ///
    /// # Errors
    /// As [`BitDpfKeys::eval_sorted`], and [`FssError::LengthMismatch`] for output buffers of
    /// the wrong size.
    pub fn eval_sorted_bits(
        &self,
        points: &[u64],
        offsets: &[usize],
        lt: &mut [u64],
        eq: Option<&mut [u64]>,
    ) -> Result<(), FssError> {
        self.eval_sorted_bits_of(0..self.len(), points, offsets, lt, eq)
    }

    /// [`BitDpfKeys::eval_sorted_bits`] for the keys in `keys` (group `g` of `offsets` for
    /// key `keys.start + g`), without copying them out of the batch.
    ///
    /// # Errors
    /// As [`BitDpfKeys::eval_sorted_bits`], and [`FssError::InvalidParams`] for a range
    /// outside the batch.
    pub fn eval_sorted_bits_of(
        &self,
        keys: std::ops::Range<usize>,
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

    /// Shares of `1{start_i + u = α_i}` (mod `2^n`) for `u < width`, for every key `i`: bit
    /// `u` of the `⌈width/64⌉` words from `i·⌈width/64⌉` on. The tree is expanded only over
    /// the leaf blocks the window touches, all keys level by level: about
    /// `2·width/128 + 2(n − 7)` AES per key.
    ///
    /// A dense set of thresholds inside a window is cheaper to answer from these shares than
    /// point by point: `LT(p) = LT(e) ⊕ ⨁_{p < q ≤ e} EQ(q)` for `p ≤ e`.
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`] for a wrong number of starts or a wrong output size,
    /// [`FssError::PointOutOfDomain`] for a start outside the domain, and
    /// [`FssError::InvalidParams`] for a window wider than the domain.
    pub fn eval_window_bits(&self, starts: &[u64], width: usize, out: &mut [u64]) -> Result<(), FssError> {
        self.eval_window_bits_of(0..self.len(), starts, width, out)
    }

    /// [`BitDpfKeys::eval_window_bits`] for the keys in `keys` (`starts[j]` for key
    /// `keys.start + j`), without copying them out of the batch.
    ///
    /// # Errors
    /// As [`BitDpfKeys::eval_window_bits`], and [`FssError::InvalidParams`] for a range
    /// outside the batch.
    pub fn eval_window_bits_of(
        &self,
        keys: std::ops::Range<usize>,
        starts: &[u64],
        width: usize,
        out: &mut [u64],
    ) -> Result<(), FssError> {
        self.window(keys, starts, width, out, None)
    }

    /// [`BitDpfKeys::eval_window_bits_of`], and the comparison shares at each window's last
    /// point `starts[j] + width − 1` into `end[j]`: that point's path is the window's own
    /// last path, so its prefix parity is carried down with the window's nodes and its `LT`
    /// read from the window's last block (the `LT` a dense run is anchored on, without a walk
    /// of its own).
    ///
    /// # Errors
    /// As [`BitDpfKeys::eval_window_bits_of`], and [`FssError::LengthMismatch`] for `end` of
    /// the wrong length.
    pub fn eval_window_end_of(
        &self,
        keys: std::ops::Range<usize>,
        starts: &[u64],
        width: usize,
        out: &mut [u64],
        end: &mut [CmpShares],
    ) -> Result<(), FssError> {
        walk::check_len(starts.len(), end.len())?;
        self.window(keys, starts, width, out, Some(end))
    }

    fn window(
        &self,
        keys: std::ops::Range<usize>,
        starts: &[u64],
        width: usize,
        out: &mut [u64],
        end: Option<&mut [CmpShares]>,
    ) -> Result<(), FssError> {
        let n = self.params.domain_bits;
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

    /// [`BitDpfKeys::eval_window_bits`] for starts `k0..k0 + out.len()/words`, of keys
    /// `base + k0..`.
    fn window_chunk(
        &self,
        base: usize,
        k0: usize,
        starts: &[u64],
        width: usize,
        out: &mut [u64],
        mut end: Option<&mut [CmpShares]>,
    ) {
        let n = self.params.domain_bits;
        // Each window's last point.
        let last = |k: usize| starts[k0 + k].wrapping_add(width as u64 - 1) & mask(n);
        let words = width.div_ceil(64);
        let count = out.len() / words;
        if self.params.is_table() {
            let size = 1usize << n;
            for k in 0..count {
                let table = self.leaf_cw[base + k0 + k][0];
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
                put_window(&mut out[k * words..(k + 1) * words], &blocks, 0, width, &mut Vec::new());
                if let Some(e) = end.as_deref_mut() {
                    e[k] = self.finish(last(k), table, 0, 0);
                }
            }
            return;
        }
        let levels = self.params.levels();
        let (_, d) = window_span(width);
        if d <= WINDOW_WHOLE_LEVELS && levels >= d + 2 {
            return self.window_whole(base, k0, starts, width, out, end, d);
        }
        let lmask = if levels >= 64 { u64::MAX } else { (1u64 << levels) - 1 };
        // Per key: its window's leaf blocks, as non-wrapping ranges of block indices. A task's
        // nodes at each depth are a contiguous range of prefixes, stored contiguously.
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
        let mut tasks = vec![];
        let mut nblocks = vec![0usize; count];
        for (k, nb) in nblocks.iter_mut().enumerate() {
            let s = starts[k0 + k];
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
        WINDOW_SCRATCH.with_borrow_mut(|ws| {
            let WindowScratch { blocks, lo, hi, tm, nlo, nhi, ntm, ctm, sig, el, er, halves } = ws;
            // Each key's blocks, one after the other.
            let mut block_at = Vec::with_capacity(count + 1);
            block_at.push(0usize);
            for &b in &nblocks {
                block_at.push(block_at.last().expect("non-empty") + b);
            }
            // (Every block is written at the last level: no clearing.)
            blocks.resize(block_at[count], 0);
            // Nodes, structure of arrays: seed halves and the control bit as a mask.
            let prg = Prg::global();
            // Above depth `top`, a task's range lies under at most two nodes (those of its
            // first and last block): walk those two paths as vectorised lanes (one per key,
            // in key order) instead of expanding the task level by level.
            let span = tasks.iter().map(|t| t.hi - t.lo + 1).max().unwrap_or(1);
            // (The last level's children are leaf blocks: the walk stops above it.)
            let top = levels.saturating_sub(64 - (span - 1).leading_zeros()).min(levels - 1);
            // One or two levels are not worth a separate walk.
            let top = if top >= 2 { top } else { 0 };
            lo.clear();
            hi.clear();
            tm.clear();
            // Per task, the prefix parity `(acc, prev)` of the path to its last block, carried
            // down the subtree with the nodes: a key's last task holds its window's last point,
            // whose `LT` is read from that block at the end (no walk of its own).
            let mut ends = vec![(0u64, 0u64); if end.is_some() { tasks.len() } else { 0 }];
            if top > 0 {
                let below = levels - top;
                // The first and the last block's paths share all but their last few levels
                // for most tasks: the last path resumes the first's state
                // `WINDOW_SHARED_LEVELS` above `top`; the tasks whose paths part higher walk
                // theirs from the root. (With prefix parity when the last point is asked for.)
                let parity = end.is_some();
                let key = |k: usize| base + k0 + tasks[k].key;
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
            } else {
                let root = |t: &Task| self.tree.roots[base + k0 + t.key];
                lo.extend(tasks.iter().map(|t| root(t) as u64));
                hi.extend(tasks.iter().map(|t| (root(t) >> 64) as u64));
                tm.resize(tasks.len(), (self.party.bit() as u64).wrapping_neg());
            }
            for i in top..levels {
                let below = levels - 1 - i;
                // The AES inputs σ(s) of every task's nodes, packed; `ctm` their control masks.
                // A task's nodes move to `n0..n0 + m` of the packed arrays.
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
                sig.resize(pad(nodes), AesBlock::default());
                el.resize(sig.len(), AesBlock::default());
                er.resize(sig.len(), AesBlock::default());
                prg.encrypt(HashKey::Left, sig, el);
                prg.encrypt(HashKey::Right, sig, er);
                let (sig, el, er, ctm) = (&sig[..nodes], &el[..nodes], &er[..nodes], &ctm[..nodes]);
                if below == 0 {
                    // Children are leaf blocks: keep those in the task's block range.
                    for (ti, t) in tasks.iter().enumerate() {
                        let g = base + k0 + t.key;
                        let cw = self.leaf_cw[g];
                        let (clo, chi) = (t.lo.max(2 * t.p0), t.hi.min(2 * (t.p0 + t.m as u64 - 1) + 1));
                        let at = block_at[t.key] + t.at + (clo - t.lo) as usize;
                        let out = &mut blocks[at..at + (chi - clo + 1) as usize];
                        for (q, o) in out.iter_mut().enumerate() {
                            let cp = clo + q as u64;
                            let (j, c) = (t.n0 + ((cp >> 1) - t.p0) as usize, (cp & 1) as usize);
                            let (sl, sh) = walk::halves(&sig[j]);
                            let (al, ah) = walk::halves(if c == 0 { &el[j] } else { &er[j] });
                            let mask = ctm[j] as u128 | (ctm[j] as u128) << 64;
                            *o = (((al ^ sl) as u128) | ((ah ^ sh) as u128) << 64) ^ (cw[c] & mask);
                        }
                        if let Some(par) = ends.get_mut(ti) {
                            // The last turn, into the last block.
                            let c = t.hi & 1;
                            par.0 ^= ctm[t.n0 + t.m - 1] & 1 & (c ^ par.1);
                            par.1 = c;
                        }
                    }
                    break;
                }
                // Both children of every packed node, interleaved (node j's at 2j and 2j + 1);
                // each task then keeps the contiguous range of children its blocks lie under.
                nlo.resize(2 * nodes, 0);
                nhi.resize(2 * nodes, 0);
                ntm.resize(2 * nodes, 0);
                let (scw_lo, scw_hi) = self.tree.scw_level(i);
                for (ti, t) in tasks.iter_mut().enumerate() {
                    if let Some(par) = ends.get_mut(ti) {
                        // The last path turns towards the task's last block.
                        let c = (t.hi >> below) & 1;
                        par.0 ^= ctm[t.n0 + t.m - 1] & 1 & (c ^ par.1);
                        par.1 = c;
                    }
                    let g = base + k0 + t.key;
                    let (cl, ch) = (scw_lo[g], scw_hi[g]);
                    let tcw = [(self.tree.tcw_left[g] >> i) & 1, (self.tree.tcw_right[g] >> i) & 1];
                    let r = t.n0..t.n0 + t.m;
                    let (cr, ncr) = (r.clone(), 2 * r.start..2 * r.end);
                    let (nl, nh, nt) = (&mut nlo[ncr.clone()], &mut nhi[ncr.clone()], &mut ntm[ncr]);
                    for (d, ((s, (e0, e1)), &tj)) in sig[cr.clone()]
                        .iter()
                        .zip(el[cr.clone()].iter().zip(&er[cr.clone()]))
                        .zip(&ctm[cr])
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
                    let blk = blocks[block_at[t.key] + t.at + (t.hi - t.lo) as usize];
                    e[t.key] = self.finish(last(t.key), blk, prev, acc as u8);
                }
            }
            for k in 0..count {
                let off = (starts[k0 + k] & 127) as usize;
                put_window(
                    &mut out[k * words..(k + 1) * words],
                    &blocks[block_at[k]..block_at[k + 1]],
                    off,
                    width,
                    halves,
                );
            }
        });
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
    /// per-task bookkeeping. Per key, one thread, against the general window code: 19-bit
    /// keys, 514 wide 206 → 154 ns, 258 wide → 115 ns; 23-bit keys, 2,309 wide 355 → 264 ns.
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
        end: Option<&mut [CmpShares]>,
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
            let WindowScratch { blocks, lo, hi, tm, nlo, nhi, ntm, ctm: sel, sig, el, er, halves } = ws;
            // Slot q of key k at `q·count + k`: at depth `top`, the two paths' nodes.
            lo.clear();
            hi.clear();
            tm.clear();
            for w in [&a, &b] {
                lo.extend_from_slice(&w.lo[..count]);
                hi.extend_from_slice(&w.hi[..count]);
                tm.extend_from_slice(&w.t[..count]);
            }
            let prg = Prg::global();
            for j in 0..d {
                let i = top + j;
                let (p, below) = (slots(j), d - j);
                let nodes = p * count;
                sig.clear();
                sig.extend(lo[..nodes].iter().zip(&hi[..nodes]).map(|(&l, &h)| walk::block(h, h ^ l)));
                sig.resize(pad(nodes), AesBlock::default());
                el.resize(sig.len(), AesBlock::default());
                er.resize(sig.len(), AesBlock::default());
                prg.encrypt(HashKey::Left, sig, el);
                prg.encrypt(HashKey::Right, sig, er);
                // The last point's path turns at this level (slot: its node less the first).
                for (k, par) in ends.iter_mut().enumerate() {
                    let q = ((end_blk[k] >> below) - (rel[k] >> below)) as usize;
                    let c = (end_blk[k] >> (below - 1)) & 1;
                    par.0 ^= tm[q * count + k] & 1 & (c ^ par.1);
                    par.1 = c;
                }
                let leaves = below == 1;
                // Children of every slot, in order (slot q's at 2q and 2q + 1).
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
                let leaf_cw = &self.leaf_cw[g0..g0 + count];
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
                                let cw = leaf_cw[k][c] & (t[k] as u128 | (t[k] as u128) << 64);
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
                if !leaves {
                    // The next level's slots: each key's children from its first needed one
                    // (child 0 or 1 of its first slot).
                    sel.clear();
                    sel.extend(rel.iter().map(|&r| ((r >> (below - 1)) & 1).wrapping_neg()));
                    let next = slots(j + 1);
                    lo.resize(next * count, 0);
                    hi.resize(next * count, 0);
                    tm.resize(next * count, 0);
                    let sel = &sel[..count];
                    for q in 0..next {
                        let (r0, r1) = (q * count..(q + 1) * count, (q + 1) * count..(q + 2) * count);
                        for (dst, src) in [(&mut *lo, &*nlo), (&mut *hi, &*nhi), (&mut *tm, &*ntm)] {
                            let (a, b) = (&src[r0.clone()], &src[r1.clone()]);
                            for (o, ((&a, &b), &m)) in
                                dst[r0.clone()].iter_mut().zip(a.iter().zip(b).zip(sel))
                            {
                                *o = a ^ ((a ^ b) & m);
                            }
                        }
                    }
                }
            }
            // Each key's window: its blocks from the first one on. The last level's children
            // start at the first block's sibling pair.
            let per = 2 * slots(d - 1);
            let mut end = end;
            for k in 0..count {
                let first = k * per + (rel[k] & 1) as usize;
                let nb = (end_blk[k] - rel[k]) as usize + 1;
                let own = &blocks[first..first + nb];
                let off = (starts[k] & 127) as usize;
                put_window(&mut out[k * words..(k + 1) * words], own, off, width, halves);
                if let Some(e) = end.as_deref_mut() {
                    let (acc, prev) = ends[k];
                    e[k] = self.finish(last[k], own[nb - 1], prev, acc as u8);
                }
            }
        });
    }

    /// The trie walk of [`BitDpfKeys::eval_sorted_bits`] for the keys in `groups`.
    ///
    /// The frontier is kept in point order. A node splits at level `i` exactly where two
    /// neighbouring points first differ in bit `n − 1 − i`; those pairs are bucketed by that
    /// bit once (a counting sort), so each level is a merge of the frontier with its bucket.
    /// At a leaf, one prefix-XOR of the block answers every point in it.
    fn sorted_chunk(
        &self,
        base: usize,
        groups: std::ops::Range<usize>,
        points: &[u64],
        offsets: &[usize],
        lt: &mut [u64],
        mut eq: Option<&mut [u64]>,
    ) {
        // Word offset of each key's bits within this job.
        let mut word_of = Vec::with_capacity(groups.len());
        let mut w = 0usize;
        for g in groups.clone() {
            word_of.push(w);
            w += (offsets[g + 1] - offsets[g]).div_ceil(64);
        }
        let g_first = groups.start;
        let party = self.party.bit();
        let mut leaf =
            |g: usize, range: std::ops::Range<usize>, blk: u128, prev: u8, acc: u8, table: bool| {
                let px = prefix_xor(blk);
                // LT = acc ⊕ party ⊕ (parity of bits 0..=pos, or of the bits above pos).
                let flip = if table {
                    (blk.count_ones() & 1) as u64
                } else {
                    ((acc ^ party) as u64) ^ if prev == 1 { (blk.count_ones() & 1) as u64 } else { 0 }
                };
                let (base, w0) = (offsets[g], word_of[g - g_first]);
                let (mut word, mut lt_acc, mut eq_acc) = (usize::MAX, 0u64, 0u64);
                for p in range {
                    let pos = (points[p] & 127) as u32;
                    let (i, sh) = (w0 + (p - base) / 64, (p - base) % 64);
                    if i != word {
                        if word != usize::MAX {
                            lt[word] |= lt_acc;
                            if let Some(e) = eq.as_deref_mut() {
                                e[word] |= eq_acc;
                            }
                        }
                        (word, lt_acc, eq_acc) = (i, 0, 0);
                    }
                    lt_acc |= ((((px >> pos) as u64) & 1) ^ flip) << sh;
                    eq_acc |= (((blk >> pos) as u64) & 1) << sh;
                }
                if word != usize::MAX {
                    lt[word] |= lt_acc;
                    if let Some(e) = eq.as_deref_mut() {
                        e[word] |= eq_acc;
                    }
                }
            };
        if self.params.is_table() {
            for g in groups {
                leaf(g, offsets[g]..offsets[g + 1], self.leaf_cw[base + g][0], 0, 0, true);
            }
            return;
        }
        let (n, levels) = (self.params.domain_bits, self.params.levels());
        let prg = Prg::global();
        // Answers of nodes finished by the lane walk: (key, point, LT, EQ), in a reused buffer.
        let mut lone = SORTED_SCRATCH.with_borrow_mut(|sc| std::mem::take(&mut sc.lone));
        lone.clear();
        SORTED_SCRATCH.with_borrow_mut(|sc| {
            // Pairs of neighbouring points (within a key) by the highest bit they differ in:
            // split[start[b]..start[b+1]] holds the second points `j` of bit b's pairs, ascending.
            let (lo_all, hi_all) = (offsets[groups.start], offsets[groups.end]);
            let mut count = [0u32; 65];
            // Pairs in one leaf block (differing below bit 7) never split.
            let diff_bit = |j: usize| -> Option<usize> {
                let d = points[j - 1] ^ points[j];
                (d >> LEAF_BITS != 0).then(|| 63 - d.leading_zeros() as usize)
            };
            // A key's first point pairs with nothing.
            let first_of = &mut sc.first_of;
            first_of.clear();
            first_of.resize(hi_all - lo_all, false);
            for g in groups.clone() {
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
            let split = &mut sc.split;
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
            let frontier = &mut sc.frontier;
            frontier.clear();
            frontier.extend(groups.filter(|&g| offsets[g] < offsets[g + 1]).map(|g| Node {
                key: g as u32,
                lo: offsets[g] as u32,
                hi: offsets[g + 1] as u32,
                s: self.tree.roots[base + g],
                t: self.party.bit(),
                prev: 0,
                acc: 0,
            }));
            // Children in point order, with their direction and slot in that direction's batch.
            let SortedScratch { children, pending, sig, enc, .. } = sc;
            pending.clear();
            for i in 0..levels {
                let shift = n - 1 - i;
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
                for c in 0..2 {
                    let len = sig[c].len();
                    sig[c].resize(pad(len), AesBlock::default());
                    enc[c].resize(sig[c].len(), AesBlock::default());
                    let key = if c == 0 { HashKey::Left } else { HashKey::Right };
                    prg.encrypt(key, &sig[c], &mut enc[c]);
                }
                let last = i == levels - 1;
                frontier.clear();
                for &(node, c, slot) in children.iter() {
                    // (Group g of this call is key base + g of the batch.)
                    let (g, kg) = (node.key as usize, base + node.key as usize);
                    let (cu, k) = (c as usize, slot as usize);
                    let a = from_block(&enc[cu][k]) ^ from_block(&sig[cu][k]);
                    let acc = node.acc ^ (node.t & (c != node.prev) as u8);
                    if last {
                        let blk = a ^ (self.leaf_cw[kg][cu] & (node.t as u128).wrapping_neg());
                        leaf(g, node.lo as usize..node.hi as usize, blk, c, acc, false);
                    } else {
                        let (s, t) = correct(a, node.t, self.tree.scw(i, kg), self.tree.tcw(i, kg, c as u64));
                        let child = Node { s, t, prev: c, acc, ..node };
                        let (first, last) = (points[child.lo as usize], points[child.hi as usize - 1]);
                        if levels - i <= RESUME_LEVELS {
                            frontier.push(child);
                        } else if first >> LEAF_BITS == last >> LEAF_BITS {
                            // Its points share one leaf block (often a lone point): finish
                            // its path with the vectorised lane walk.
                            pending.push((i + 1, child));
                        } else if child.hi - child.lo <= LANE_POINTS {
                            // A few points: one lane per leaf block from here (the lanes
                            // repeat the walk the blocks would share, cheaper than trie nodes).
                            let mut lo = child.lo;
                            for p in child.lo + 1..=child.hi {
                                if p == child.hi
                                    || points[p as usize] >> LEAF_BITS != points[lo as usize] >> LEAF_BITS
                                {
                                    pending.push((i + 1, Node { lo, hi: p, ..child }));
                                    lo = p;
                                }
                            }
                        } else {
                            frontier.push(child);
                        }
                    }
                }
            }
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
        });
        for &(g, p, l, e) in &lone {
            let (i, sh) = (word_of[g - g_first] + (p - offsets[g]) / 64, (p - offsets[g]) % 64);
            lt[i] |= (l as u64) << sh;
            if let Some(q) = eq.as_deref_mut() {
                q[i] |= (e as u64) << sh;
            }
        }
        SORTED_SCRATCH.with_borrow_mut(|sc| sc.lone = lone);
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
                let [c0, c1] = self.leaf_cw[keys[k]];
                let cw = c0 ^ ((c0 ^ c1) & ((sel as u128) << 64 | sel as u128));
                let (bl, bh) = (al ^ (cw as u64 & t), ah ^ ((cw >> 64) as u64 & t));
                LaneLeaf { bl, bh, sel, flip: (acc ^ party) & 1 }
            })
            .collect()
    }

    /// Shares of `1{j = α_i}` for every `j` of the domain of every key `i` in `keys`: key
    /// `i`'s table is the `2^{n−7}` blocks from `(i − keys.start)·2^{n−7}`, bit `j mod 128` of
    /// its block `j / 128`. Keys with `n ≤ 7` have one block each, of which the low `2^n`
    /// bits are meaningful. `2^{n−6} − 2` AES per key, the keys expanded together.
    ///
    /// # Errors
    /// [`FssError::DomainTooLarge`] if `n > MAX_FULL_DOMAIN_BITS`, [`FssError::InvalidParams`]
    /// if the range is out of bounds.
    pub fn full_domain(&self, keys: std::ops::Range<usize>) -> Result<Vec<u128>, FssError> {
        let n = self.params.domain_bits;
        if n > MAX_FULL_DOMAIN_BITS {
            return Err(FssError::DomainTooLarge { bits: n, max: MAX_FULL_DOMAIN_BITS });
        }
        walk::check_range(&keys, self.len())?;
        if self.params.is_table() {
            return Ok(self.leaf_cw[keys].iter().map(|cw| cw[0]).collect());
        }
        let levels = self.params.levels();
        let mut out = vec![0u128; keys.len() << levels];
        let per_chunk = walk::full_domain_chunk(n);
        walk::par_chunks(&mut out, per_chunk << levels, |c, o| {
            let start = keys.start + c * per_chunk;
            let count = o.len() >> levels;
            SCRATCH.with_borrow_mut(|scratch| {
                let leaves = expand_full(scratch, &self.tree, start..start + count, self.party, levels - 1);
                let seeds: Vec<u128> =
                    leaves.lo.iter().zip(&leaves.hi).map(|(&l, &h)| l as u128 | (h as u128) << 64).collect();
                let mut enc = vec![0u128; seeds.len()];
                for (ch, hk) in [(0usize, HashKey::Left), (1, HashKey::Right)] {
                    Prg::global().hash_many(hk, &seeds, &mut enc);
                    for j in 0..seeds.len() {
                        let cw = self.leaf_cw[start + (j >> (levels - 1))][ch];
                        o[2 * j + ch] = enc[j] ^ (cw & ((leaves.t[j] as u128) | (leaves.t[j] as u128) << 64));
                    }
                }
            })
        });
        Ok(out)
    }

    /// One party's key material per key, in bytes (rounded up).
    pub fn key_bytes(&self) -> usize {
        self.params.key_bits().div_ceil(8) as usize
    }

    /// Append the raw material of the batch (no envelope) to a bit stream.
    pub fn write_material(&self, w: &mut BitWriter) {
        if self.params.is_table() {
            let bits = 1u32 << self.params.domain_bits;
            for cw in &self.leaf_cw {
                w.put(cw[0] as u64, bits.min(64));
                if bits > 64 {
                    w.put((cw[0] >> 64) as u64, bits - 64);
                }
            }
            return;
        }
        self.tree.write(w);
        for cw in &self.leaf_cw {
            w.put_u128(cw[0]);
            w.put_u128(cw[1]);
        }
    }

    /// Read `count` keys written by [`BitDpfKeys::write_material`].
    ///
    /// # Errors
    /// [`DecodeError`] if the stream is short or a field is invalid.
    pub fn read_material(
        params: BitDpfParams,
        party: Party,
        count: usize,
        r: &mut BitReader<'_>,
    ) -> Result<BitDpfKeys, DecodeError> {
        walk::check_remaining(r, count as u64 * params.key_bits())?;
        if params.is_table() {
            let bits = 1u32 << params.domain_bits;
            let mut leaf_cw = Vec::with_capacity(count);
            for _ in 0..count {
                let mut table = r.get(bits.min(64))? as u128;
                if bits > 64 {
                    table |= (r.get(bits - 64)? as u128) << 64;
                }
                leaf_cw.push([table, 0]);
            }
            return Ok(BitDpfKeys { params, party, tree: TreeKeys::with_capacity(0, 0), leaf_cw });
        }
        let tree = TreeKeys::read(r, params.levels() - 1, count)?;
        let leaf_cw =
            (0..count).map(|_| Ok([r.get_u128()?, r.get_u128()?])).collect::<Result<_, DecodeError>>()?;
        Ok(BitDpfKeys { params, party, tree, leaf_cw })
    }

    /// The standalone, versioned, checksummed encoding (see [`crate::codec`]).
    ///
    /// # Panics
    /// If the batch holds more than `u32::MAX` keys.
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            kind: KeyKind::BitDpf,
            party: self.party,
            domain_bits: self.params.domain_bits as u8,
            out_bits: 1,
            payload_words: 1,
            variant: 0,
            count: u32::try_from(self.len()).expect("at most u32::MAX keys per encoding"),
        };
        codec::seal(header, |w| self.write_material(w))
    }

    /// Decode [`BitDpfKeys::encode`]'s output.
    ///
    /// # Errors
    /// [`DecodeError`] for truncated, corrupted, wrong-version or wrong-kind input.
    pub fn decode(bytes: &[u8]) -> Result<BitDpfKeys, DecodeError> {
        let (h, material) = codec::open(bytes, KeyKind::BitDpf)?;
        let params = BitDpfParams::new(h.domain_bits as u32)
            .map_err(|_| DecodeError::InvalidField("1-bit DPF width"))?;
        if h.out_bits != 1 || h.payload_words != 1 || h.variant != 0 {
            return Err(DecodeError::InvalidField("1-bit DPF output shape"));
        }
        let count = h.count as usize;
        codec::expect_material_len(material, count as u64 * params.key_bits())?;
        let mut r = BitReader::new(material);
        let keys = BitDpfKeys::read_material(params, h.party, count, &mut r)?;
        r.finish()?;
        Ok(keys)
    }
}

/// A trie node holding one point leaves the trie for the lane walk when more than this many
/// levels remain.
const RESUME_LEVELS: u32 = 3;

/// A trie node with at most this many points leaves the trie as one lane per leaf block.
/// (LayerNorm at n = 37, rows of 32, `bench ops --ops layernorm`, median of 9: 8 → 2.66–2.86,
/// 16 → 2.12–2.52, 32 → 2.19–2.39 µs per element; the 7-bit rsqrt row at n = 50 unchanged.)
const LANE_POINTS: u32 = 16;

/// Buffers of [`BitDpfKeys::eval_window_bits`], kept per thread (fresh large allocations
/// would cost page faults on every call).
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
    halves: Vec<u64>,
}

/// Windows of at most `2^WINDOW_WHOLE_LEVELS` leaf blocks (up to 3,969 positions) are read
/// with a fixed number of nodes per level ([`BitDpfKeys::window_whole`]); wider ones with
/// the nodes each needs. (At 6, 4,000-wide windows were 7 % slower than the general code.)
const WINDOW_WHOLE_LEVELS: u32 = 5;

/// The most leaf blocks a window of `width` positions touches (`span`), and the depth `d`
/// (at least 1) of the nodes of which two neighbours hold any such window (`2^d ≥ span`).
fn window_span(width: usize) -> (usize, u32) {
    let block = 1usize << LEAF_BITS;
    let span = (block - 1 + width).div_ceil(block);
    (span, (usize::BITS - (span - 1).leading_zeros()).max(1))
}

/// Window bits `0..width` of a key into `o`: bit `u` is bit `u + off` of `blocks` (the key's
/// blocks from the window's first on), and the bits past the window are cleared.
fn put_window(o: &mut [u64], blocks: &[u128], off: usize, width: usize, halves: &mut Vec<u64>) {
    let words = o.len();
    let (i0, sh) = (off / 64, off % 64);
    // The key's 64-bit words from word i0 on, zero-padded to one past the window.
    halves.clear();
    halves.extend(blocks.iter().flat_map(|&b| [b as u64, (b >> 64) as u64]));
    halves.resize(halves.len().max(i0 + words + 1), 0);
    let src = &halves[i0..i0 + words + 1];
    if sh == 0 {
        o.copy_from_slice(&src[..words]);
    } else {
        for (word, pair) in o.iter_mut().zip(src.windows(2)) {
            *word = (pair[0] >> sh) | (pair[1] << (64 - sh));
        }
    }
    let tail = width % 64;
    if tail != 0 {
        o[words - 1] &= (1u64 << tail) - 1;
    }
}

/// Levels above the bottom of a window's top paths that its last path walks apart from its
/// first (the paths to blocks a few apart part only near the bottom).
const WINDOW_SHARED_LEVELS: u32 = 3;

/// Buffers of the trie walk of [`BitDpfKeys::eval_sorted_bits`], kept per thread.
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
    static WINDOW_SCRATCH: std::cell::RefCell<WindowScratch> = std::cell::RefCell::default();
    static SORTED_SCRATCH: std::cell::RefCell<SortedScratch> = std::cell::RefCell::default();
}

/// Words of the bit-packed output of [`BitDpfKeys::eval_sorted_bits`] for these offsets:
/// `Σ_g ⌈T_g/64⌉`.
pub fn sorted_words(offsets: &[usize]) -> usize {
    offsets.windows(2).map(|w| (w[1] - w[0]).div_ceil(64)).sum()
}

/// Bit `i` of the result is the XOR of bits `0..=i` of `x`.
#[inline(always)]
fn prefix_xor(mut x: u128) -> u128 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x ^= x << 64;
    x
}

/// One job of a window evaluation: its first start, its output words, its end shares.
type WindowJob<'a> = (usize, &'a mut [u64], Option<&'a mut [CmpShares]>);

/// A lane walk's leaf block (halves), its last direction as a mask, and the LT flip.
#[derive(Clone, Copy, Default)]
struct LaneLeaf {
    bl: u64,
    bh: u64,
    sel: u64,
    flip: u64,
}

impl LaneLeaf {
    /// (LT, EQ) shares of the point at block position `pos`.
    #[inline(always)]
    fn answer(&self, pos: u32) -> (bool, bool) {
        let (ml, mh) = upto_halves(pos);
        let (ml, mh) = (ml ^ self.sel, mh ^ self.sel);
        let parity = ((self.bl & ml).count_ones() + (self.bh & mh).count_ones()) as u64 & 1;
        let eq = if pos < 64 { self.bl >> pos } else { self.bh >> (pos - 64) } & 1;
        ((self.flip ^ parity) == 1, eq == 1)
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

/// Bits strictly above position `pos` of a block.
#[inline(always)]
fn above(blk: u128, pos: u32) -> u128 {
    blk.checked_shr(pos + 1).unwrap_or(0)
}

/// Mask of positions `0..=pos` as (low, high) halves.
#[inline(always)]
fn upto_halves(pos: u32) -> (u64, u64) {
    let lo = if pos >= 63 { u64::MAX } else { (2u64 << pos) - 1 };
    let hi = if pos < 64 {
        0
    } else if pos >= 127 {
        u64::MAX
    } else {
        (2u64 << (pos - 64)) - 1
    };
    (lo, hi)
}

/// Mask of positions `0..=pos`.
#[inline(always)]
fn upto(pos: u32) -> u128 {
    if pos >= 127 { u128::MAX } else { (1u128 << (pos + 1)) - 1 }
}

#[inline(always)]
fn parity(x: u128) -> bool {
    x.count_ones() & 1 == 1
}

fn table_mask(n: u32) -> u128 {
    if n >= LEAF_BITS { u128::MAX } else { (1u128 << (1u32 << n)) - 1 }
}
