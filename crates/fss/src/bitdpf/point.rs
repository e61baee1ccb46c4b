//! The per-point walk: each lane walks its key's tree to the leaf block of its own point
//! (level-synchronous over a chunk of lanes), and the full-domain expansion.

use std::ops::Range;

use super::bits::{LaneLeaf, above, parity, upto};
use super::keys::{BitDpfKeys, CmpShares, LEAF_BITS};
use crate::dpf::{MAX_FULL_DOMAIN_BITS, SCRATCH, expand_full};
use crate::error::FssError;
use crate::prg::{HashKey, Prg};
use crate::ring::mask;
use crate::share::XorBit;
use crate::walk::{self, Walk};

impl BitDpfKeys {
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
                out[k] = self.finish(points[k], self.leaf(key(k))[0], 0, 0);
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
    pub(super) fn walk_levels(
        &self,
        w: &mut Walk,
        levels: Range<u32>,
        top: u32,
        points: &[u64],
        key: impl Fn(usize) -> usize + Copy,
        parity: bool,
    ) {
        if parity {
            w.descend_levels::<true>(&self.tree, levels, key, points, top);
        } else {
            w.descend_levels::<false>(&self.tree, levels, key, points, top);
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
        // Prefix parity (§4): XOR in t where the path turns.
        w.descend_levels::<true>(&self.tree, 0..levels - 1, &key, points, n);
        let mut enc = w.buffers();
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
            let [c0, c1] = self.leaf(kk);
            let cw = c0 ^ ((c0 ^ c1) & ((sel as u128) << 64 | sel as u128));
            let (bl, bh) = (al ^ (cw as u64 & t), ah ^ ((cw >> 64) as u64 & t));
            at_leaf(k, LaneLeaf { bl, bh, sel, flip: (acc ^ party) & 1 });
        }
    }

    /// Evaluate key `keys.start + i` at `(points[i] − d) mod 2^n` for every `d` of `deltas`,
    /// into `out[i·D + j]` for `deltas[j]` (`D = deltas.len()`). One walk per key reaches the
    /// leaf block of `points[i]`; every point in that block is answered from it (a split
    /// comparison's thresholds come as `β` and `β + 1`), the others take walks of their own.
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`], [`FssError::PointOutOfDomain`], or
    /// [`FssError::InvalidParams`] for a range outside the batch.
    pub fn eval_near(
        &self,
        keys: Range<usize>,
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
    pub(super) fn finish(&self, y: u64, blk: u128, prev: u64, acc: u8) -> CmpShares {
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

    /// Shares of `1{j = α_i}` for every `j` of the domain of every key `i` in `keys`: key
    /// `i`'s table is the `2^{n−7}` blocks from `(i − keys.start)·2^{n−7}`, bit `j mod 128` of
    /// its block `j / 128`. Keys with `n ≤ 7` have one block each, of which the low `2^n`
    /// bits are meaningful. `2^{n−6} − 2` AES per key, the keys expanded together.
    ///
    /// # Errors
    /// [`FssError::DomainTooLarge`] if `n > MAX_FULL_DOMAIN_BITS`, [`FssError::InvalidParams`]
    /// if the range is out of bounds.
    pub fn full_domain(&self, keys: Range<usize>) -> Result<Vec<u128>, FssError> {
        let n = self.params.domain_bits;
        if n > MAX_FULL_DOMAIN_BITS {
            return Err(FssError::DomainTooLarge { bits: n, max: MAX_FULL_DOMAIN_BITS });
        }
        walk::check_range(&keys, self.len())?;
        if self.params.is_table() {
            return Ok(keys.map(|k| self.leaf(k)[0]).collect());
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
                        let cw = self.leaf(start + (j >> (levels - 1)))[ch];
                        o[2 * j + ch] = enc[j] ^ (cw & ((leaves.t[j] as u128) | (leaves.t[j] as u128) << 64));
                    }
                }
            })
        });
        Ok(out)
    }
}
