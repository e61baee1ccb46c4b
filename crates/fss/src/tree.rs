//! The GGM trees shared by the DPF, the 1-bit DPF and the DCF (BGI16 §3, BCG+21 §3):
//! per key a root seed and, per level, a seed correction word and the left/right
//! control-bit corrections; plus the dealer's level step.
//!
//! Keys are stored as a batch, level-major: the correction words of level `i` of all keys are
//! contiguous, so a level-synchronous walk over a batch streams through memory.
//!
//! Seeds are 128-bit with the least significant bit cleared; the control bit travels next
//! to the seed (docs/design/fss-building-blocks.md §2.2, pitfalls 7–8). Tree level `i` consumes bit
//! `n − 1 − i` of the point (MSB first).

use crate::codec::{BitReader, BitWriter};
use crate::error::DecodeError;
use crate::prg::{HashKey, Prg};
use crate::words::Words;

/// All bits but the control bit.
pub(crate) const SEED_MASK: u128 = !1u128;

/// Bits of a key's root seed (a seeded encoding leaves them out: `BitWriter::put_roots`).
pub(crate) const ROOT_BITS: u64 = 128;

/// One party's tree material for a batch of keys with `levels` levels each.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct TreeKeys {
    pub levels: u32,
    pub roots: Vec<u128>,
    /// Seed correction words, low and high halves: index `i · len + k` is level `i` of key
    /// `k`. (Halves in separate arrays let the walk vectorise; in a bundle they are read in
    /// place, [`crate::words`].)
    pub scw_lo: Words,
    pub scw_hi: Words,
    /// Bit `i` of `tcw_left[k]` / `tcw_right[k]`: level `i` of key `k`.
    pub tcw_left: Vec<u64>,
    pub tcw_right: Vec<u64>,
}

crate::wipe_on_drop!(TreeKeys { wipe: [roots, tcw_left, tcw_right], zeroize: [scw_lo, scw_hi] });

impl TreeKeys {
    /// An empty batch of trees with `levels` levels.
    pub fn with_capacity(levels: u32, keys: usize) -> TreeKeys {
        TreeKeys {
            levels,
            roots: Vec::with_capacity(keys),
            scw_lo: Words::recycled(keys * levels as usize),
            scw_hi: Words::recycled(keys * levels as usize),
            tcw_left: Vec::with_capacity(keys),
            tcw_right: Vec::with_capacity(keys),
        }
    }

    /// Number of keys.
    #[inline]
    pub fn len(&self) -> usize {
        self.roots.len()
    }

    /// Key material per key in bits: `λ + levels·(λ + 2)`.
    pub const fn key_bits(levels: u32) -> u64 {
        ROOT_BITS + 130 * levels as u64
    }

    /// Level `i`'s seed correction word of key `k`.
    #[inline(always)]
    pub fn scw(&self, i: u32, k: usize) -> u128 {
        let j = i as usize * self.len() + k;
        self.scw_lo[j] as u128 | (self.scw_hi[j] as u128) << 64
    }

    /// Level `i`'s seed correction words of all keys (low and high halves).
    #[inline(always)]
    pub fn scw_level(&self, i: u32) -> (&[u64], &[u64]) {
        let r = i as usize * self.len()..(i as usize + 1) * self.len();
        (&self.scw_lo[r.clone()], &self.scw_hi[r])
    }

    /// Level `i`'s control-bit correction of key `k` for direction `bit`, as 0/1.
    #[inline(always)]
    pub fn tcw(&self, i: u32, k: usize, bit: u64) -> u8 {
        let (l, r) = (self.tcw_left[k], self.tcw_right[k]);
        let word = l ^ ((l ^ r) & bit.wrapping_neg());
        ((word >> i) & 1) as u8
    }

    /// Keys `start..end` as a batch of their own.
    pub fn slice(&self, start: usize, end: usize) -> TreeKeys {
        let len = self.len();
        let mut out = TreeKeys::with_capacity(self.levels, end - start);
        out.roots.extend_from_slice(&self.roots[start..end]);
        for i in 0..self.levels as usize {
            out.scw_lo.extend_from_slice(&self.scw_lo[i * len + start..i * len + end]);
            out.scw_hi.extend_from_slice(&self.scw_hi[i * len + start..i * len + end]);
        }
        out.tcw_left.extend_from_slice(&self.tcw_left[start..end]);
        out.tcw_right.extend_from_slice(&self.tcw_right[start..end]);
        out
    }

    pub fn write(&self, w: &mut BitWriter) {
        // No share words here: a recording pass skips it.
        if w.keeps_only_shares() {
            return;
        }
        w.put_roots(&self.roots);
        // The low halves, then the high ones (a bundle's reader takes both in place).
        let (lo, hi): (&[u64], &[u64]) = (&self.scw_lo, &self.scw_hi);
        let n = lo.len().min(hi.len());
        w.put_side_words(&lo[..n]);
        w.put_side_words(&hi[..n]);
        let (l, r) = (&self.tcw_left, &self.tcw_right);
        w.put_run(self.levels, 2 * l.len().min(r.len()), |i| if i % 2 == 0 { l[i / 2] } else { r[i / 2] });
    }

    pub fn read(r: &mut BitReader<'_>, levels: u32, keys: usize) -> Result<TreeKeys, DecodeError> {
        // (No room for the seed corrections: they are read in place, or copied whole.)
        let mut t = TreeKeys {
            levels,
            roots: Vec::with_capacity(keys),
            scw_lo: Words::default(),
            scw_hi: Words::default(),
            tcw_left: Vec::with_capacity(keys),
            tcw_right: Vec::with_capacity(keys),
        };
        r.get_roots(keys, &mut t.roots)?;
        // (The roots may come from the party's root stream: the rest is in the data.)
        check_keys(r, keys, TreeKeys::key_bits(levels), ROOT_BITS)?;
        if t.roots.iter().any(|root| root & 1 != 0) {
            return Err(DecodeError::InvalidField("root seed has its control bit set"));
        }
        let n = keys * levels as usize;
        (t.scw_lo, t.scw_hi) = (r.get_side_words(n)?, r.get_side_words(n)?);
        if t.scw_lo.iter().fold(0, |a, &w| a | w) & 1 != 0 {
            return Err(DecodeError::InvalidField("seed correction word has bit 0 set"));
        }
        let mut tcw = Vec::with_capacity(2 * keys);
        r.get_run(levels, 2 * keys, &mut tcw)?;
        for pair in tcw.chunks_exact(2) {
            t.tcw_left.push(pair[0]);
            t.tcw_right.push(pair[1]);
        }
        Ok(t)
    }
}

/// Fail early (before allocating) if the stream cannot hold the material of `count` keys of
/// `key_bits` bits each, of which `root_bits` may come from the party's root stream instead
/// ([`BitReader::get_roots`]).
pub(crate) fn check_keys(
    r: &BitReader<'_>,
    count: usize,
    key_bits: u64,
    root_bits: u64,
) -> Result<(), DecodeError> {
    // (Correction words may lie in the reader's side region: both count.)
    let bits = count as u64 * (key_bits - root_bits);
    let available = r.remaining_bits() + r.remaining_side_bits();
    if available < bits {
        return Err(DecodeError::Truncated {
            needed: bits.div_ceil(8) as usize,
            available: (available / 8) as usize,
        });
    }
    Ok(())
}

/// Apply a level's correction to a freshly hashed child `a = H_c(s)` of a node with control
/// bit `t`: returns the child's seed and control bit.
#[inline(always)]
pub(crate) fn correct(a: u128, t: u8, scw: u128, tcw: u8) -> (u128, u8) {
    let tmask = (t as u128).wrapping_neg();
    ((a & SEED_MASK) ^ (scw & tmask), ((a as u8) & 1) ^ (t & tcw))
}

/// The dealer's side of a batch of trees, walked level by level in lockstep. Lane `2k + b`
/// holds party `b`'s seed for key `k`.
pub(crate) struct DealerTrees {
    /// Both parties' seeds, lane `2k + b` party `b`'s of key `k`: low and high halves (as
    /// separate arrays, so that the level step runs on plain 64-bit lanes).
    seed_lo: Vec<u64>,
    seed_hi: Vec<u64>,
    pub t: Vec<u8>,
    /// `H_0(seed)` of every lane after [`DealerTrees::expand`] (halves).
    left_lo: Vec<u64>,
    left_hi: Vec<u64>,
    /// `H_1(seed)` of every lane after [`DealerTrees::expand`] (halves).
    right_lo: Vec<u64>,
    right_hi: Vec<u64>,
    /// The correction words dealt so far (party 0's roots).
    pub keys: TreeKeys,
    roots1: Vec<u128>,
}

// Both parties' seeds at every level: wiped like the keys they are dealt into.
crate::wipe_on_drop!(DealerTrees {
    wipe: [seed_lo, seed_hi, t, left_lo, left_hi, right_lo, right_hi, roots1],
    zeroize: [keys],
});

impl DealerTrees {
    /// Start from root seeds `roots[2k + b]` (their control bits are cleared here), for
    /// trees of `levels` levels.
    pub fn new(mut roots: Vec<u128>, levels: u32) -> DealerTrees {
        for r in roots.iter_mut() {
            *r &= SEED_MASK;
        }
        let lanes = roots.len();
        let mut keys = TreeKeys::with_capacity(levels, lanes / 2);
        keys.roots.extend(roots.iter().step_by(2));
        let roots1 = roots.iter().skip(1).step_by(2).copied().collect();
        keys.tcw_left.resize(lanes / 2, 0);
        keys.tcw_right.resize(lanes / 2, 0);
        let trees = DealerTrees {
            seed_lo: roots.iter().map(|&r| r as u64).collect(),
            seed_hi: roots.iter().map(|&r| (r >> 64) as u64).collect(),
            t: (0..lanes).map(|i| (i & 1) as u8).collect(),
            left_lo: vec![0; lanes],
            left_hi: vec![0; lanes],
            right_lo: vec![0; lanes],
            right_hi: vec![0; lanes],
            keys,
            roots1,
        };
        crate::wipe::wipe(&mut roots);
        trees
    }

    /// Lane `lane`'s seed.
    #[inline]
    pub fn seed(&self, lane: usize) -> u128 {
        self.seed_lo[lane] as u128 | (self.seed_hi[lane] as u128) << 64
    }

    /// Every lane's seed (secret: the caller wipes it).
    pub fn seeds(&self) -> Vec<u128> {
        (0..self.seed_lo.len()).map(|j| self.seed(j)).collect()
    }

    /// Per key `k`, after [`DealerTrees::expand`], the words `[L.lo, L.hi, R.lo, R.hi]` of
    /// its two parties' children XORed (`L` left, `R` right): a DPF's last-level blocks.
    pub fn children_xor(&self) -> Vec<u64> {
        let m = self.seed_lo.len() / 2;
        let halves = [&self.left_lo, &self.left_hi, &self.right_lo, &self.right_hi];
        let mut out = crate::recycle::take_words(4 * m);
        out.resize(4 * m, 0);
        for (j, h) in halves.into_iter().enumerate() {
            for (o, p) in out.chunks_exact_mut(4).zip(h[..2 * m].chunks_exact(2)) {
                o[j] = p[0] ^ p[1];
            }
        }
        out
    }

    /// Both parties' tree material: the correction words are common (both keys read one
    /// allocation of the seed corrections, [`Words::into_pair`]), the roots differ.
    pub fn into_keys(mut self) -> (TreeKeys, TreeKeys) {
        let mut t0 = std::mem::replace(&mut self.keys, TreeKeys::with_capacity(0, 0));
        let (lo0, lo1) = std::mem::take(&mut t0.scw_lo).into_pair();
        let (hi0, hi1) = std::mem::take(&mut t0.scw_hi).into_pair();
        (t0.scw_lo, t0.scw_hi) = (lo0, hi0);
        let t1 = TreeKeys {
            levels: t0.levels,
            roots: std::mem::take(&mut self.roots1),
            scw_lo: lo1,
            scw_hi: hi1,
            tcw_left: t0.tcw_left.clone(),
            tcw_right: t0.tcw_right.clone(),
        };
        (t0, t1)
    }

    /// Hash every seed into both children (`4` AES per key per level).
    pub fn expand(&mut self, prg: &Prg) {
        hash_halves(
            prg,
            [(HashKey::Left, 0), (HashKey::Right, 0)],
            (&self.seed_lo, &self.seed_hi),
            [(&mut self.left_lo, &mut self.left_hi), (&mut self.right_lo, &mut self.right_hi)],
        );
    }

    /// [`DealerTrees::expand`], and two value blocks of every seed into `values` (halves):
    /// `H_k(s ⊕ τ)` for `value_keys[c] = (k, τ)` (a DCF's level: `H_{VL}(s)` and `H_{VR}(s)`
    /// for one word, tweaked blocks for more): four hashes from one `σ` of each seed.
    pub fn expand_with_values(
        &mut self,
        prg: &Prg,
        value_keys: [(HashKey, u64); 2],
        values: [(&mut [u64], &mut [u64]); 2],
    ) {
        let [vl, vr] = values;
        hash_halves(
            prg,
            [(HashKey::Left, 0), (HashKey::Right, 0), value_keys[0], value_keys[1]],
            (&self.seed_lo, &self.seed_hi),
            [(&mut self.left_lo, &mut self.left_hi), (&mut self.right_lo, &mut self.right_hi), vl, vr],
        );
    }

    /// BGI16 level step `i` for every key, whose point has bit `bits(k)` at this level:
    /// computes the correction words from the expanded children, records them, and moves both
    /// parties to the kept child.
    pub fn step(&mut self, i: u32, bits: impl Fn(usize) -> u64) {
        // Branch-free on 64-bit halves: the point bits are random (a branch per key was
        // mispredicted about every other key).
        let m = self.seed_lo.len() / 2;
        let (slo, shi, t) = (&mut self.seed_lo[..2 * m], &mut self.seed_hi[..2 * m], &mut self.t[..2 * m]);
        let (llo, lhi) = (&self.left_lo[..2 * m], &self.left_hi[..2 * m]);
        let (rlo, rhi) = (&self.right_lo[..2 * m], &self.right_hi[..2 * m]);
        let (tcw_l, tcw_r) = (&mut self.keys.tcw_left[..m], &mut self.keys.tcw_right[..m]);
        // This level's correction words: a row of every key's, filled in place.
        let (scw_lo, scw_hi) = (new_row(&mut self.keys.scw_lo, m), new_row(&mut self.keys.scw_hi, m));
        for k in 0..m {
            let a = bits(k) & 1;
            let am = a.wrapping_neg();
            let (j0, j1) = (2 * k, 2 * k + 1);
            // The kept child is the point's; the other is corrected to agree.
            let pick = |l: u64, r: u64| l ^ ((l ^ r) & am);
            let (k0l, k0h) = (pick(llo[j0], rlo[j0]), pick(lhi[j0], rhi[j0]));
            let (k1l, k1h) = (pick(llo[j1], rlo[j1]), pick(lhi[j1], rhi[j1]));
            // The lost children are the others: `l ⊕ r ⊕ kept`.
            let cl = (llo[j0] ^ rlo[j0] ^ k0l) ^ (llo[j1] ^ rlo[j1] ^ k1l);
            let ch = (lhi[j0] ^ rhi[j0] ^ k0h) ^ (lhi[j1] ^ rhi[j1] ^ k1h);
            let cl = cl & !1;
            let tl = ((llo[j0] ^ llo[j1]) & 1) ^ a ^ 1;
            let tr = ((rlo[j0] ^ rlo[j1]) & 1) ^ a;
            let tkeep = tl ^ ((tl ^ tr) & a);
            // `correct`: the kept seed, XORed with the correction where the control bit is 1.
            let (t0, t1) = (t[j0] as u64, t[j1] as u64);
            let (m0, m1) = (t0.wrapping_neg(), t1.wrapping_neg());
            (slo[j0], shi[j0]) = ((k0l & !1) ^ (cl & m0), k0h ^ (ch & m0));
            (slo[j1], shi[j1]) = ((k1l & !1) ^ (cl & m1), k1h ^ (ch & m1));
            t[j0] = ((k0l & 1) ^ (t0 & tkeep)) as u8;
            t[j1] = ((k1l & 1) ^ (t1 & tkeep)) as u8;
            scw_lo[k] = cl;
            scw_hi[k] = ch;
            tcw_l[k] |= tl << i;
            tcw_r[k] |= tr << i;
        }
    }
}

/// The dealer's hashes of every seed ([`Prg::hash_halves_tweaked`]): with VAES in registers
/// ([`crate::vaes::hash_halves`]), else over block arrays.
fn hash_halves<const K: usize>(
    prg: &Prg,
    keys: [(HashKey, u64); K],
    seeds: (&[u64], &[u64]),
    mut outs: [(&mut [u64], &mut [u64]); K],
) {
    if !crate::vaes::hash_halves(keys, seeds, &mut outs) {
        prg.hash_halves_tweaked(keys, seeds, outs);
    }
}

/// `m` more (zero) words at the end of `w`, as a slice to fill.
fn new_row(w: &mut Words, m: usize) -> &mut [u64] {
    let v = w.owned_mut();
    let at = v.len();
    v.resize(at + m, 0);
    &mut v[at..]
}

/// Bit `i` (MSB first) of an `n`-bit point.
#[inline(always)]
pub(crate) fn path_bit(x: u64, n: u32, i: u32) -> u64 {
    (x >> (n - 1 - i)) & 1
}
