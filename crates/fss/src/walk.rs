//! The level-synchronous walk shared by the batched evaluators.
//!
//! A chunk of lanes (a key and a point each) descends the trees together. At every level
//! each lane needs `H_c(s)` for its own direction `c`. Level by level
//! (`Walk::descend_all`), the walk computes *both* children of every lane with two
//! whole-chunk AES calls and selects with masks: twice the AES of a level, but every loop is
//! sequential over plain `u64` arrays, which the compiler vectorises (partitioning lanes by
//! direction instead cost more in bookkeeping than the AES it saves: measured for a DPF at
//! n = 50, about twice the time per lane and level; CHANGELOG.md). With VAES, a run of
//! levels goes through `Walk::descend_levels` instead: batches of lanes kept in registers
//! through all the levels, each hashing only the child it takes (`fused`).
//!
//! Seeds are kept as two `u64` halves; `σ(hi‖lo) = (hi ⊕ lo)‖hi` is the block whose low 8
//! bytes are `hi` and high 8 bytes `hi ⊕ lo`.

use std::ops::Range;

use rayon::prelude::*;

use crate::error::FssError;
use crate::prg::{AesBlock, HashKey, Prg, pad};
use crate::ring::mask;
use crate::tree::TreeKeys;

/// Lanes evaluated together by one thread: keeps a level's buffers in L1/L2 and AES calls
/// long enough to run at full speed.
pub const CHUNK: usize = 256;

pub(crate) use crate::prg::{block, halves};

pub(crate) mod fused;

/// A chunk of lanes walking down their trees: seed halves and control bits (as masks).
pub(crate) struct Walk {
    /// Seed bits 0..64 (bit 0 is always 0).
    pub lo: Vec<u64>,
    /// Seed bits 64..128.
    pub hi: Vec<u64>,
    /// Control bit as a mask: 0 or `u64::MAX`.
    pub t: Vec<u64>,
    /// Prefix parity (docs/design/fss-building-blocks.md §4), as masks: the XOR of `t` at every level
    /// where the path turns, and the last direction taken. Kept by
    /// `descend_all::<true>` only.
    pub acc: Vec<u64>,
    pub prev: Vec<u64>,
    /// `σ(s)` of every lane (padded to [`PAR`](crate::prg::PAR)).
    sig: Vec<AesBlock>,
}

impl Walk {
    /// `m` lanes starting at `roots(k)` with control bit `t0` (the party's index).
    pub fn new(m: usize, roots: impl Fn(usize) -> u128, t0: u8) -> Walk {
        let lo: Vec<u64> = (0..m).map(|k| roots(k) as u64).collect();
        let hi: Vec<u64> = (0..m).map(|k| (roots(k) >> 64) as u64).collect();
        let mut sig = vec![AesBlock::default(); pad(m)];
        for k in 0..m {
            sig[k] = block(hi[k], hi[k] ^ lo[k]);
        }
        Walk { lo, hi, t: vec![(t0 as u64).wrapping_neg(); m], acc: vec![0; m], prev: vec![0; m], sig }
    }

    /// Lanes resuming mid-tree: seeds, control masks and prefix-parity state (masks).
    pub fn resume(seeds: &[u128], t: &[u64], acc: &[u64], prev: &[u64]) -> Walk {
        let mut w = Walk::new(seeds.len(), |k| seeds[k], 0);
        w.t.copy_from_slice(t);
        w.acc.copy_from_slice(acc);
        w.prev.copy_from_slice(prev);
        w
    }

    /// `out[c] = AES_{keys[c]}(σ(s))` for every lane, `c ∈ {0, 1}` (`σ(s)` is kept up to date
    /// by [`Walk::descend_all`]).
    #[inline]
    pub fn encrypt(&self, prg: &Prg, keys: [HashKey; 2], out: &mut [Vec<AesBlock>; 2]) {
        let len = self.sig.len();
        for (c, o) in out.iter_mut().enumerate() {
            prg.encrypt(keys[c], &self.sig, &mut o[..len]);
        }
    }

    /// Levels `levels` of the descent: at level `i`, lane `k` evaluates key `key(k)` of
    /// `tree` and goes in the direction of bit `s0 − 1 − i` of `points[k]`; with `PARITY`,
    /// the prefix parity is kept. Fused per lane with VAES ([`fused`]: one AES per lane and
    /// level), else [`Walk::descend_levels_batched`].
    #[inline]
    pub fn descend_levels<const PARITY: bool>(
        &mut self,
        tree: &TreeKeys,
        levels: Range<u32>,
        key: impl Fn(usize) -> usize,
        points: &[u64],
        s0: u32,
    ) {
        fused::descend::<PARITY>(self, tree, levels, key, points, s0);
    }

    /// [`Walk::descend_levels`] level by level: both children's hashes of every lane, then
    /// [`Walk::descend_all`]. (The fallback without VAES, and the fused walk's test oracle.)
    #[cfg_attr(not(test), allow(dead_code))] // (built with VAES, only the tests call it)
    pub fn descend_levels_batched<const PARITY: bool>(
        &mut self,
        tree: &TreeKeys,
        levels: Range<u32>,
        key: impl Fn(usize) -> usize,
        points: &[u64],
        s0: u32,
    ) {
        let prg = Prg::global();
        let mut enc = self.buffers();
        for i in levels {
            self.encrypt(prg, [HashKey::Left, HashKey::Right], &mut enc);
            self.descend_all::<PARITY>(&enc, tree, i, &key, points, s0 - 1 - i);
        }
    }

    /// The first `m` lanes' seed halves and control masks, as slices of length `m` (so that
    /// loops over them need no bounds checks and vectorise).
    #[inline(always)]
    pub fn view(&self, m: usize) -> (&[u64], &[u64], &[u64]) {
        (&self.lo[..m], &self.hi[..m], &self.t[..m])
    }

    /// Move every lane one level down: lane `k` evaluates key `key(k)` of `tree` and goes in
    /// the direction of bit `shift` of `points[k]`; `enc` holds both children's hashes. With
    /// `PARITY`, also fold the level into the prefix parity (before moving).
    ///
    /// Everything is sliced to the lane count first so that the loop has no bounds checks
    /// left but the key lookups, and vectorises.
    #[inline(always)]
    pub fn descend_all<const PARITY: bool>(
        &mut self,
        enc: &[Vec<AesBlock>; 2],
        tree: &TreeKeys,
        i: u32,
        key: impl Fn(usize) -> usize,
        points: &[u64],
        shift: u32,
    ) {
        let m = points.len();
        let (sl, sh) = tree.scw_level(i);
        let (tl, tr) = (&tree.tcw_left[..], &tree.tcw_right[..]);
        // Consecutive keys (always, for an offset map: the test folds away) read their
        // correction words as slices, without per-lane index checks.
        if m > 0 && (0..m).all(|k| key(k) == key(0) + k) {
            let f = key(0);
            let cw = (&sl[f..f + m], &sh[f..f + m], &tl[f..f + m], &tr[f..f + m]);
            self.descend_with::<PARITY>(enc, cw, i, |k| k, 0, points, shift);
        } else if m <= CHUNK {
            // Other keys: their correction words gathered first, so that the descent reads
            // slices and vectorises (the lookups inside the loop kept it scalar; bench
            // `eval/dpf_lt_indexed`, CHANGELOG.md). All four in one pass, in place: through
            // `gather_tcw` and `descend_gathered` (a second consecutiveness test and the
            // gathered corrections returned by value, every level) `bench ops --ops nexp`
            // took 1.34× as long.
            let [mut l, mut h, mut a, mut b] = [[0u64; CHUNK]; 4];
            let lanes = l.iter_mut().zip(&mut h).zip(a.iter_mut().zip(&mut b)).take(m);
            for (k, ((l, h), (a, b))) in lanes.enumerate() {
                let g = key(k);
                (*l, *h, *a, *b) = (sl[g], sh[g], tl[g], tr[g]);
            }
            let cw = (&l[..m], &h[..m], &a[..m], &b[..m]);
            self.descend_with::<PARITY>(enc, cw, i, |k| k, 0, points, shift);
        } else {
            self.descend_with::<PARITY>(enc, (sl, sh, tl, tr), i, key, 0, points, shift);
        }
    }

    /// [`Walk::descend_all`] for lanes `at..at + points.len()`, which all evaluate key `g`:
    /// the correction words are constants of the loop, which then vectorises (lone points of
    /// one key resuming together, as in a row's comparison at thousands of thresholds).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn descend_one_key<const PARITY: bool>(
        &mut self,
        enc: &[Vec<AesBlock>; 2],
        tree: &TreeKeys,
        i: u32,
        g: usize,
        at: usize,
        points: &[u64],
        shift: u32,
    ) {
        let (sl, sh) = tree.scw_level(i);
        let cw = (&sl[g..=g], &sh[g..=g], &tree.tcw_left[g..=g], &tree.tcw_right[g..=g]);
        self.descend_with::<PARITY>(enc, cw, i, |_| 0, at, points, shift);
    }

    /// [`Walk::descend_all`] for lanes `at..at + points.len()` with the level's seed and
    /// control correction words given.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn descend_with<const PARITY: bool>(
        &mut self,
        enc: &[Vec<AesBlock>; 2],
        (sl, sh, tl, tr): (&[u64], &[u64], &[u64], &[u64]),
        i: u32,
        key: impl Fn(usize) -> usize,
        at: usize,
        points: &[u64],
        shift: u32,
    ) {
        let m = points.len();
        let r = at..at + m;
        let (e0, e1) = (&enc[0][r.clone()], &enc[1][r.clone()]);
        let (lo, hi, t) = (&mut self.lo[r.clone()], &mut self.hi[r.clone()], &mut self.t[r.clone()]);
        let (acc, prev, sig) = (&mut self.acc[r.clone()], &mut self.prev[r.clone()], &mut self.sig[r]);
        for k in 0..m {
            let kk = key(k);
            let sel = ((points[k] >> shift) & 1).wrapping_neg();
            let (al, ah) = select_hash(&e0[k], &e1[k], sel, lo[k], hi[k]);
            let tcw = (tl[kk] ^ ((tl[kk] ^ tr[kk]) & sel)) >> i;
            let tk = t[k];
            if PARITY {
                acc[k] ^= tk & (sel ^ prev[k]);
                prev[k] = sel;
            }
            let (nl, nh) = ((al & !1) ^ (sl[kk] & tk), ah ^ (sh[kk] & tk));
            lo[k] = nl;
            hi[k] = nh;
            t[k] = ((al ^ (tk & tcw)) & 1).wrapping_neg();
            sig[k] = block(nh, nh ^ nl);
        }
    }

    /// Lane `k`'s seed.
    #[inline(always)]
    pub fn seed(&self, k: usize) -> u128 {
        self.lo[k] as u128 | (self.hi[k] as u128) << 64
    }

    /// Output buffers for [`Walk::encrypt`].
    pub fn buffers(&self) -> [Vec<AesBlock>; 2] {
        [vec![AesBlock::default(); self.sig.len()], vec![AesBlock::default(); self.sig.len()]]
    }
}

/// `H_c(s) = AES_{K_c}(σ(s)) ⊕ σ(s)` from both children's AES outputs, with `sel` = 0 for
/// `c = 0` and `u64::MAX` for `c = 1`, for the seed with halves `(lo, hi)`.
#[inline(always)]
pub(crate) fn select_hash(e0: &AesBlock, e1: &AesBlock, sel: u64, lo: u64, hi: u64) -> (u64, u64) {
    let (l0, h0) = halves(e0);
    let (l1, h1) = halves(e1);
    ((l0 ^ ((l0 ^ l1) & sel)) ^ hi, (h0 ^ ((h0 ^ h1) & sel)) ^ hi ^ lo)
}

/// Which key each lane of a chunk evaluates.
#[derive(Clone, Copy)]
pub(crate) enum KeyMap<'a> {
    /// Lane `k` evaluates key `offset + k`.
    Offset(usize),
    /// Lane `k` evaluates key `indices[k]`.
    Indexed(&'a [u32]),
}

/// Run `f` over chunks of at most [`CHUNK`] lanes, on the rayon pool when there is more
/// than one; `out` holds `per_lane` outputs per lane.
pub(crate) fn run_chunks<T: Send>(
    keys: Option<&[u32]>,
    points: &[u64],
    out: &mut [T],
    per_lane: usize,
    f: impl Fn(KeyMap<'_>, &[u64], &mut [T]) + Sync,
) {
    let m = points.len();
    let job = |c: usize, o: &mut [T]| {
        let start = c * CHUNK;
        let end = (start + CHUNK).min(m);
        let map = match keys {
            None => KeyMap::Offset(start),
            Some(ix) => KeyMap::Indexed(&ix[start..end]),
        };
        f(map, &points[start..end], o)
    };
    if m == 0 {
    } else if m <= CHUNK {
        job(0, out)
    } else {
        out.par_chunks_mut(CHUNK * per_lane).enumerate().for_each(|(c, o)| job(c, o));
    }
}

pub(crate) fn check_len(expected: usize, actual: usize) -> Result<(), FssError> {
    if expected != actual {
        return Err(FssError::LengthMismatch { expected, actual });
    }
    Ok(())
}

/// Every point must fit the `bits`-bit domain.
pub(crate) fn check_points(points: &[u64], bits: u32) -> Result<(), FssError> {
    match points.iter().find(|&&x| x & !mask(bits) != 0) {
        Some(&point) => Err(FssError::PointOutOfDomain { point, bits }),
        None => Ok(()),
    }
}

/// Every key index must be below `len`.
pub(crate) fn check_indices(keys: &[u32], len: usize) -> Result<(), FssError> {
    match keys.iter().find(|&&k| k as usize >= len) {
        Some(_) => Err(FssError::InvalidParams("key index out of range")),
        None => Ok(()),
    }
}

/// A key range must lie within a batch of `len` keys.
pub(crate) fn check_range(keys: &std::ops::Range<usize>, len: usize) -> Result<(), FssError> {
    if keys.start > keys.end || keys.end > len {
        return Err(FssError::InvalidParams("key range out of bounds"));
    }
    Ok(())
}

/// Keys expanded together by one full-domain job: about 2^16 leaves.
pub(crate) fn full_domain_chunk(levels: u32) -> usize {
    (1usize << 16 >> levels.min(16)).max(1)
}

/// Run `f(chunk index, chunk)` over chunks of `out` of `size` elements, on the rayon pool
/// when there is more than one.
pub(crate) fn par_chunks<T: Send>(out: &mut [T], size: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if out.len() <= size {
        if !out.is_empty() {
            f(0, out);
        }
    } else {
        out.par_chunks_mut(size).enumerate().for_each(|(c, o)| f(c, o));
    }
}

/// `i` as a key index of a batch of `len` keys.
pub(crate) fn index(i: usize, len: usize) -> Result<u32, FssError> {
    if i >= len || i > u32::MAX as usize {
        return Err(FssError::InvalidParams("key index out of range"));
    }
    Ok(i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prg::{from_block, sigma, to_block};

    #[test]
    fn block_halves_match_the_u128_convention() {
        let x = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128;
        assert_eq!(halves(&to_block(x)), (x as u64, (x >> 64) as u64));
        assert_eq!(from_block(&block(x as u64, (x >> 64) as u64)), x);
        let w = Walk::new(1, |_| x & !1, 0);
        assert_eq!(from_block(&w.sig[0]), sigma(x & !1));
    }
}
