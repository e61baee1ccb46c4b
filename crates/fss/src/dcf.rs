//! Distributed comparison function with vector payloads (BCG+21; docs/design/fss-building-blocks.md §5).
//!
//! `f^<_{α,β}(x) = β if x < α else 0` — a strict, unsigned `n`-bit comparison — with
//! `β ∈ Z_{2^ℓ}^K`. The two keys' evaluations are additive shares of `f(x)` mod `2^ℓ`,
//! word by word. For `≤` deal at `α + 1`.
//!
//! Value words: with `K = 1`, the child `c` of seed `s` yields `H_{2+c}(s)`, the `Value(s, c)`
//! of §2.2, so the scalar DCF matches the published known answers. With `K > 1` it yields
//! `B = ⌈K / ⌊128/ℓ⌋⌉` blocks `H_2(s ⊕ (c·B + j))`, `j < B` (§2.2 leaves vector payloads
//! free), each holding `⌊128/ℓ⌋` words of `ℓ` bits from the least significant end: one AES
//! key for both directions, so an evaluation hashes only the direction it takes (the
//! encoding marks this construction as variant 1). The leaf conversion is the low `ℓ` bits
//! of the seed for `K = 1`, and the blocks `H_2(s ⊕ j)` of the leaf seeds otherwise (leaf
//! seeds are hashed nowhere else).
//!
//! Key: `λ + n(λ + Kℓ + 2) + Kℓ` bits. Eval: `n(1 + B)` AES (plus `B` for `K > 1`).

use crate::codec::{self, BitReader, BitWriter, Header, KeyKind};
use crate::error::{DecodeError, FssError};
use crate::prg::{AesBlock, HashKey, Prg, pad};
use crate::ring::mask;
use crate::rng::{CryptoRng, random_roots};
use crate::share::{AddShare, Party};
use crate::tree::{DealerTrees, ROOT_BITS, TreeKeys, check_keys, path_bit};
use crate::walk::{self, Walk};

/// Shape of a DCF: input width `n`, output width `ℓ`, payload words `K`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DcfParams {
    domain_bits: u32,
    out_bits: u32,
    payload_words: u32,
}

impl DcfParams {
    /// A DCF on `n` input bits with payload `β ∈ Z_{2^ℓ}^K`.
    ///
    /// # Errors
    /// [`FssError::InvalidWidth`] unless `1 ≤ n, ℓ ≤ 64`; [`FssError::InvalidParams`] unless
    /// `1 ≤ K ≤ 65535`.
    pub fn new(domain_bits: u32, out_bits: u32, payload_words: u32) -> Result<DcfParams, FssError> {
        for b in [domain_bits, out_bits] {
            if !(1..=64).contains(&b) {
                return Err(FssError::InvalidWidth(b));
            }
        }
        if !(1..=u16::MAX as u32).contains(&payload_words) {
            return Err(FssError::InvalidParams("payload words must be in 1..=65535"));
        }
        Ok(DcfParams { domain_bits, out_bits, payload_words })
    }

    /// Input width `n`.
    pub fn domain_bits(self) -> u32 {
        self.domain_bits
    }

    /// Output width `ℓ`.
    pub fn out_bits(self) -> u32 {
        self.out_bits
    }

    /// Payload words `K`.
    pub fn payload_words(self) -> u32 {
        self.payload_words
    }

    fn words(self) -> usize {
        self.payload_words as usize
    }

    fn words_per_block(self) -> usize {
        (128 / self.out_bits) as usize
    }

    /// The encoding's variant byte: the value-hash construction (0: `K = 1`, 1: the tweaked
    /// blocks of `K > 1`; keys of an earlier vector construction are refused).
    fn variant(self) -> u8 {
        u8::from(self.payload_words > 1)
    }

    /// `B`: value blocks per tree node.
    pub fn value_blocks(self) -> usize {
        self.words().div_ceil(self.words_per_block())
    }

    /// One party's key material per key, in bits: `λ + n(λ + Kℓ + 2) + Kℓ`.
    pub fn key_bits(self) -> u64 {
        let kl = self.payload_words as u64 * self.out_bits as u64;
        TreeKeys::key_bits(self.domain_bits) + (self.domain_bits as u64 + 1) * kl
    }

    /// AES blocks per point evaluation.
    pub fn aes_per_eval(self) -> u64 {
        let b = self.value_blocks() as u64;
        self.domain_bits as u64 * (1 + b) + if self.payload_words > 1 { b } else { 0 }
    }

    /// Split value blocks into `K` words (bits above `ℓ` are left in place: every use is a
    /// sum mod `2^ℓ`, which they cannot affect).
    fn unpack(self, blocks: &[u128], words: &mut [u64]) {
        let wpb = self.words_per_block();
        for (j, w) in words.iter_mut().enumerate() {
            *w = (blocks[j / wpb] >> ((j % wpb) as u32 * self.out_bits)) as u64;
        }
    }
}

/// One party's keys for a batch of DCFs of one shape. `Debug` shows only the shape; the
/// material is zeroized on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct DcfKeys {
    params: DcfParams,
    party: Party,
    tree: TreeKeys,
    /// Value correction words: `vcw[(i·K + j)·len + k]` is word `j` of level `i`, key `k`
    /// (contiguous over keys, for the walk).
    vcw: Vec<u64>,
    /// Final correction words: `fcw[k·K + j]`.
    fcw: Vec<u64>,
}

crate::wipe_on_drop!(DcfKeys { wipe: [vcw, fcw], zeroize: [tree] });

impl std::fmt::Debug for DcfKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcfKeys")
            .field("params", &self.params)
            .field("party", &self.party)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// Deal both parties' keys for `f^<_{α_i, β_i}`; `betas[i·K..(i+1)·K]` is `β_i`. All levels
/// of all keys in lockstep.
///
/// # Errors
/// [`FssError::LengthMismatch`], [`FssError::PointOutOfDomain`] or
/// [`FssError::ValueOutOfRange`].
pub fn keygen<R: CryptoRng + ?Sized>(
    params: DcfParams,
    alphas: &[u64],
    betas: &[u64],
    rng: &mut R,
) -> Result<(DcfKeys, DcfKeys), FssError> {
    let roots = random_roots(rng, alphas.len());
    keygen_with_roots(params, alphas, betas, roots)
}

/// [`keygen`] with caller-chosen root seeds (`roots[2i + b]`).
///
/// Only for known-answer tests: real roots must be fresh uniform randomness.
///
/// # Errors
/// As [`keygen`]; [`FssError::LengthMismatch`] if `roots.len() != 2·alphas.len()`.
pub fn keygen_with_roots(
    params: DcfParams,
    alphas: &[u64],
    betas: &[u64],
    roots: Vec<u128>,
) -> Result<(DcfKeys, DcfKeys), FssError> {
    let m = alphas.len();
    let kw = params.words();
    walk::check_len(m * kw, betas.len())?;
    walk::check_len(2 * m, roots.len())?;
    walk::check_points(alphas, params.domain_bits)?;
    let ell = mask(params.out_bits);
    if let Some(&b) = betas.iter().find(|&&b| b & !ell != 0) {
        return Err(FssError::ValueOutOfRange { value: b, bits: params.out_bits });
    }
    let (n, nb) = (params.domain_bits, params.value_blocks());
    let prg = Prg::global();
    let mut trees = DealerTrees::new(roots, n);
    let mut vcw = vec![0u64; n as usize * kw * m];
    let mut acc_v = vec![0u64; m * kw];
    // Keys whose words fit one value block per child hash them with the children, from one
    // `σ` of each seed (`one_lo`, `one_hi`: a one-word key takes the low halves of `H_{VL}`
    // and `H_{VR}`, a longer one its tweaked blocks `H_{VL}(s ⊕ c)`); keys of more blocks
    // hash their tweaked blocks on their own (`vals`).
    let fused = kw == 1 || nb == 1;
    let value_keys = if kw == 1 {
        [(HashKey::ValueLeft, 0), (HashKey::ValueRight, 0)]
    } else {
        [(HashKey::ValueLeft, value_tweak(0, 0, nb)), (HashKey::ValueLeft, value_tweak(1, 0, nb))]
    };
    let wide = if fused { 0 } else { 2 * m * nb };
    let mut vin = vec![0u128; wide];
    let mut vals = [vec![0u128; wide], vec![0u128; wide]];
    let one = if fused { 2 * m } else { 0 };
    let (mut one_lo, mut one_hi) = ([vec![0u64; one], vec![0u64; one]], [vec![0u64; one], vec![0u64; one]]);
    let wpb = params.words_per_block();
    for i in 0..n {
        if fused {
            let ([l0, l1], [h0, h1]) = (&mut one_lo, &mut one_hi);
            trees.expand_with_values(prg, value_keys, [(l0, h0), (l1, h1)]);
        } else {
            trees.expand(prg);
            for (c, v) in vals.iter_mut().enumerate() {
                for lane in 0..2 * m {
                    let s = trees.seed(lane);
                    for j in 0..nb {
                        vin[lane * nb + j] = s ^ value_tweak(c, j, nb) as u128;
                    }
                }
                prg.hash_many(HashKey::ValueLeft, &vin, v);
            }
        }
        for j in 0..kw {
            // Word `j` of a node's value blocks.
            let (blk, shift) = (j / wpb, (j % wpb) as u32 * params.out_bits);
            let row = (i as usize * kw + j) * m;
            let (row, acc) = (&mut vcw[row..row + m], &mut acc_v[j * m..(j + 1) * m]);
            let point = Points { alphas, betas, n, i, kw, j };
            // (One call per source of the words, so that each gather is a plain loop.)
            match (kw, fused) {
                (1, _) => value_step(
                    row,
                    acc,
                    |c, r, o| deinterleave(&one_lo[c][2 * r.start..2 * r.end], o),
                    &trees.t,
                    ell,
                    point,
                ),
                (_, true) => value_step(
                    row,
                    acc,
                    |c, r, o| {
                        let lanes = 2 * r.start..2 * r.end;
                        deinterleave_shifted(&one_lo[c][lanes.clone()], &one_hi[c][lanes], shift, o)
                    },
                    &trees.t,
                    ell,
                    point,
                ),
                _ => value_step(
                    row,
                    acc,
                    |c, r, [o0, o1]| {
                        for (q, k) in r.enumerate() {
                            o0[q] = (vals[c][2 * k * nb + blk] >> shift) as u64;
                            o1[q] = (vals[c][(2 * k + 1) * nb + blk] >> shift) as u64;
                        }
                    },
                    &trees.t,
                    ell,
                    point,
                ),
            }
        }
        trees.step(i, |k| path_bit(alphas[k], n, i));
    }
    // (The level's hashes are the parties' secrets: wiped as the trees are.)
    crate::wipe::wipe(&mut vin);
    vals.iter_mut().for_each(crate::wipe::wipe);
    one_lo.iter_mut().chain(&mut one_hi).for_each(crate::wipe::wipe);
    let mut seeds = trees.seeds();
    let conv = leaf_words(params, &seeds);
    crate::wipe::wipe(&mut seeds);
    let fcw: Vec<u64> = (0..m * kw)
        .map(|kj| {
            let (k, j) = (kj / kw, kj % kw);
            let d =
                conv[(2 * k + 1) * kw + j].wrapping_sub(conv[2 * k * kw + j]).wrapping_sub(acc_v[j * m + k]);
            (if trees.t[2 * k + 1] == 1 { d.wrapping_neg() } else { d }) & ell
        })
        .collect();
    let (t0, t1) = trees.into_keys();
    // (Party 1's key takes the dealt words themselves: one copy, and nothing left unwiped.)
    let k0 = DcfKeys { params, party: Party::P0, tree: t0, vcw: vcw.clone(), fcw: fcw.clone() };
    Ok((k0, DcfKeys { params, party: Party::P1, tree: t1, vcw, fcw }))
}

/// Keys of a level's value step at a time ([`value_step`]).
const CHUNK: usize = 64;

/// The keys' points at level `i`: the path bit of `alphas[k]` and payload word `j` of key `k`.
struct Points<'a> {
    alphas: &'a [u64],
    betas: &'a [u64],
    n: u32,
    i: u32,
    kw: usize,
    j: usize,
}

/// One value word's correction words at one level, branch-free: key `k`, with path bit
/// `a` and payload word `β` from `point`, gets `row[k]`, and its running sum `acc[k]` moves
/// to the kept child. `words(c, keys, [w0, w1])` writes party `b`'s value word of child `c`
/// (0 left, 1 right) of each of `keys` into `w_b`; `t[2k + 1]` is party 1's control bit
/// before the level's update, which negates the correction.
///
/// A chunk of keys at a time: their words, bits and payloads gathered into arrays by plain
/// loops, then one loop of arithmetic over the chunk. One loop reading the parties'
/// interleaved lanes through closures, a 128-bit shift per word, stayed scalar: criterion
/// `keygen/dcf_n25_l37_k2` 733–744 → 442–475 µs per 1024 keys.
#[inline(always)]
fn value_step(
    row: &mut [u64],
    acc: &mut [u64],
    words: impl Fn(usize, std::ops::Range<usize>, [&mut [u64]; 2]),
    t: &[u8],
    ell: u64,
    point: Points<'_>,
) {
    let m = row.len();
    let (acc, t) = (&mut acc[..m], &t[..2 * m]);
    let [mut l0, mut l1, mut r0, mut r1, mut am, mut beta, mut neg, mut v, mut cw] = [[0u64; CHUNK]; 9];
    for k0 in (0..m).step_by(CHUNK) {
        let c = CHUNK.min(m - k0);
        words(0, k0..k0 + c, [&mut l0[..c], &mut l1[..c]]);
        words(1, k0..k0 + c, [&mut r0[..c], &mut r1[..c]]);
        let Points { alphas, betas, n, i, kw, j } = point;
        for (a, &x) in am[..c].iter_mut().zip(&alphas[k0..k0 + c]) {
            *a = path_bit(x, n, i).wrapping_neg();
        }
        for (b, x) in beta[..c].iter_mut().zip(betas[k0 * kw..(k0 + c) * kw].chunks_exact(kw)) {
            *b = x[j];
        }
        for (g, x) in neg[..c].iter_mut().zip(t[2 * k0..2 * (k0 + c)].chunks_exact(2)) {
            *g = (x[1] as u64 & 1).wrapping_neg();
        }
        v[..c].copy_from_slice(&acc[k0..k0 + c]);
        for q in 0..CHUNK {
            let sign = |x: u64| (x ^ neg[q]).wrapping_sub(neg[q]);
            // The child off the path (right for a 0 bit) and the kept one.
            let (lose0, lose1) = (r0[q] ^ ((l0[q] ^ r0[q]) & am[q]), r1[q] ^ ((l1[q] ^ r1[q]) & am[q]));
            let (keep0, keep1) = (l0[q] ^ r0[q] ^ lose0, l1[q] ^ r1[q] ^ lose1);
            // Below a 1 bit the left subtree lies below α: it adds β.
            cw[q] =
                sign(lose1.wrapping_sub(lose0).wrapping_sub(v[q])).wrapping_add(sign(beta[q]) & am[q]) & ell;
            v[q] = v[q].wrapping_sub(keep1).wrapping_add(keep0).wrapping_add(sign(cw[q]));
        }
        row[k0..k0 + c].copy_from_slice(&cw[..c]);
        acc[k0..k0 + c].copy_from_slice(&v[..c]);
    }
    // (The children's words, the sums and the points are the dealer's secrets.)
    for a in [&mut l0, &mut l1, &mut r0, &mut r1, &mut v, &mut am, &mut beta, &mut neg] {
        zeroize::Zeroize::zeroize(a);
    }
}

/// Lanes `2k`, `2k + 1` of `lanes` into `w0[k]`, `w1[k]`.
#[inline(always)]
fn deinterleave(lanes: &[u64], [w0, w1]: [&mut [u64]; 2]) {
    for ((x0, x1), p) in w0.iter_mut().zip(w1.iter_mut()).zip(lanes.chunks_exact(2)) {
        (*x0, *x1) = (p[0], p[1]);
    }
}

/// [`deinterleave`] of the 64 bits from bit `shift` of each lane's 128-bit block `hi‖lo`.
#[inline(always)]
fn deinterleave_shifted(lo: &[u64], hi: &[u64], shift: u32, [w0, w1]: [&mut [u64]; 2]) {
    let pairs = w0.iter_mut().zip(w1.iter_mut()).zip(lo.chunks_exact(2).zip(hi.chunks_exact(2)));
    match shift {
        0 => deinterleave(lo, [w0, w1]),
        1..64 => pairs.for_each(|((x0, x1), (l, h))| {
            (*x0, *x1) = (l[0] >> shift | h[0] << (64 - shift), l[1] >> shift | h[1] << (64 - shift))
        }),
        _ => pairs.for_each(|((x0, x1), (_, h))| (*x0, *x1) = (h[0] >> (shift - 64), h[1] >> (shift - 64))),
    }
}

/// The tweak of value block `j` of child `c` for `K > 1`: the blocks are
/// `H_2(s ⊕ (c·B + j))`, one AES key for both directions, so that the walk hashes only the
/// direction it takes.
#[inline(always)]
fn value_tweak(c: usize, j: usize, nb: usize) -> u64 {
    (c * nb + j) as u64
}

/// `acc[k] += words[k] + (vcw[key(k)] & t[k])` over a chunk (vectorises).
#[inline(always)]
fn add_words(acc: &mut [u64], words: &[u64], vcw: &[u64], t: &[u64], key: impl Fn(usize) -> usize) {
    let m = acc.len();
    let (words, t) = (&words[..m], &t[..m]);
    for k in 0..m {
        acc[k] = acc[k].wrapping_add(words[k]).wrapping_add(vcw[key(k)] & t[k]);
    }
}

/// The leaf conversion of every seed: `K` words each.
fn leaf_words(params: DcfParams, seeds: &[u128]) -> Vec<u64> {
    let kw = params.words();
    if kw == 1 {
        return seeds.iter().map(|&s| s as u64).collect();
    }
    let nb = params.value_blocks();
    let vin: Vec<u128> = seeds.iter().flat_map(|&s| (0..nb).map(move |j| s ^ j as u128)).collect();
    let mut blocks = vec![0u128; vin.len()];
    Prg::global().hash_many(HashKey::ValueLeft, &vin, &mut blocks);
    let mut words = vec![0u64; seeds.len() * kw];
    for (lane, w) in words.chunks_mut(kw).enumerate() {
        params.unpack(&blocks[lane * nb..(lane + 1) * nb], w);
    }
    words
}

impl DcfKeys {
    /// The keys' shape.
    pub fn params(&self) -> DcfParams {
        self.params
    }

    /// The party these keys belong to.
    pub fn party(&self) -> Party {
        self.party
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys `start..end` as a batch of their own.
    ///
    /// # Panics
    /// If the range is out of bounds (a caller bug).
    pub fn slice(&self, start: usize, end: usize) -> DcfKeys {
        let (len, kw) = (self.len(), self.params.words());
        let mut vcw = Vec::with_capacity(self.params.domain_bits as usize * (end - start) * kw);
        for row in 0..self.params.domain_bits as usize * kw {
            vcw.extend_from_slice(&self.vcw[row * len + start..row * len + end]);
        }
        DcfKeys {
            params: self.params,
            party: self.party,
            tree: self.tree.slice(start, end),
            vcw,
            fcw: self.fcw[start * kw..end * kw].to_vec(),
        }
    }

    /// Evaluate key `i` at `points[i]` for every key: `out[i·K..(i+1)·K]` is this party's
    /// share of `f_i(x_i)`. Level by level; split across the rayon pool above
    /// [`walk::CHUNK`] keys.
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`] or [`FssError::PointOutOfDomain`].
    pub fn eval(&self, points: &[u64], out: &mut [AddShare]) -> Result<(), FssError> {
        walk::check_len(self.len(), points.len())?;
        self.eval_lanes(None, points, out)
    }

    /// Evaluate key `keys[j]` at `points[j]` for every lane `j`.
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`], [`FssError::PointOutOfDomain`] or
    /// [`FssError::InvalidParams`] for a key index out of range.
    pub fn eval_indexed(&self, keys: &[u32], points: &[u64], out: &mut [AddShare]) -> Result<(), FssError> {
        walk::check_len(keys.len(), points.len())?;
        walk::check_indices(keys, self.len())?;
        self.eval_lanes(Some(keys), points, out)
    }

    /// Evaluate key `i` at one point: `K` shares (slow path).
    ///
    /// # Errors
    /// As [`DcfKeys::eval_indexed`].
    pub fn eval_one(&self, i: usize, x: u64) -> Result<Vec<AddShare>, FssError> {
        let mut out = vec![AddShare::default(); self.params.words()];
        self.eval_indexed(&[walk::index(i, self.len())?], &[x], &mut out)?;
        Ok(out)
    }

    fn eval_lanes(&self, keys: Option<&[u32]>, points: &[u64], out: &mut [AddShare]) -> Result<(), FssError> {
        let kw = self.params.words();
        walk::check_len(points.len() * kw, out.len())?;
        walk::check_points(points, self.params.domain_bits)?;
        walk::run_chunks(keys, points, out, kw, |map, pts, o| match map {
            walk::KeyMap::Offset(off) => self.eval_chunk(|k| off + k, pts, o),
            walk::KeyMap::Indexed(ix) => self.eval_chunk(|k| ix[k] as usize, pts, o),
        });
        Ok(())
    }

    fn eval_chunk(&self, key: impl Fn(usize) -> usize + Copy, points: &[u64], out: &mut [AddShare]) {
        let kw = self.params.words();
        let m = points.len();
        let mut t = vec![self.party.bit(); m];
        let mut acc = vec![0u64; m * kw];
        let leaf = if kw == 1 {
            self.walk_scalar(key, points, &mut t, &mut acc)
        } else {
            self.walk_vector(key, points, &mut t, &mut acc)
        };
        let conv = leaf_words(self.params, &leaf);
        let ell = mask(self.params.out_bits);
        for k in 0..m {
            let kk = key(k);
            let tmask = (t[k] as u64).wrapping_neg();
            for j in 0..kw {
                let y =
                    acc[j * m + k].wrapping_add(conv[k * kw + j]).wrapping_add(self.fcw[kk * kw + j] & tmask);
                out[k * kw + j] = AddShare(self.party.signed(y) & ell);
            }
        }
    }

    /// The walk for one payload word: the value is `H_{2+c}(s)` itself. Returns the leaf
    /// seeds; `acc` collects the per-level value words (unreduced).
    #[inline(never)]
    fn walk_scalar(
        &self,
        key: impl Fn(usize) -> usize,
        points: &[u64],
        t: &mut [u8],
        acc: &mut [u64],
    ) -> Vec<u128> {
        let n = self.params.domain_bits;
        let (m, len) = (points.len(), self.len());
        let prg = Prg::global();
        let mut w = Walk::new(m, |k| self.tree.roots[key(k)], self.party.bit());
        let mut enc = w.buffers();
        let mut venc = w.buffers();
        // Lanes that evaluate consecutive keys read their correction words as slices.
        let first = (m > 0 && (0..m).all(|k| key(k) == key(0) + k)).then(|| key(0));
        for i in 0..n {
            let shift = n - 1 - i;
            w.encrypt(prg, [HashKey::Left, HashKey::Right], &mut enc);
            w.encrypt(prg, [HashKey::ValueLeft, HashKey::ValueRight], &mut venc);
            let vcw = &self.vcw[i as usize * len..(i as usize + 1) * len];
            // Two simple loops vectorise where one fused loop does not.
            let (lo, hi, tm) = w.view(m);
            let (v0, v1, acc) = (&venc[0][..m], &venc[1][..m], &mut acc[..m]);
            let add = |acc: &mut [u64], vcw: &[u64], key: &dyn Fn(usize) -> usize| {
                for k in 0..m {
                    let sel = ((points[k] >> shift) & 1).wrapping_neg();
                    let v = walk::select_hash(&v0[k], &v1[k], sel, lo[k], hi[k]).0;
                    acc[k] = acc[k].wrapping_add(v).wrapping_add(vcw[key(k)] & tm[k]);
                }
            };
            match first {
                Some(f) => add(acc, &vcw[f..f + m], &|k| k),
                None => add(acc, vcw, &key),
            }
            w.descend_all::<false>(&enc, &self.tree, i, &key, points, shift);
        }
        for (tk, &mask) in t.iter_mut().zip(&w.t) {
            *tk = (mask & 1) as u8;
        }
        (0..m).map(|k| w.seed(k)).collect()
    }

    /// The walk for `K > 1` payload words: the `B` value blocks `H_2(s ⊕ (c·B + j))` of the
    /// direction `c` taken, from the inputs `σ(s ⊕ τ) = σ(s) ⊕ σ(τ)`. `acc` is word-major:
    /// `acc[j·m + k]`.
    #[inline(never)]
    fn walk_vector(
        &self,
        key: impl Fn(usize) -> usize,
        points: &[u64],
        t: &mut [u8],
        acc: &mut [u64],
    ) -> Vec<u128> {
        let p = self.params;
        let (n, kw, nb, wpb, ell) =
            (p.domain_bits, p.words(), p.value_blocks(), p.words_per_block(), p.out_bits);
        let (m, len) = (points.len(), self.len());
        let mp = pad(m);
        let prg = Prg::global();
        let mut w = Walk::new(m, |k| self.tree.roots[key(k)], self.party.bit());
        let mut enc = w.buffers();
        // Value inputs block-major: block b of lane k at b·mp + k.
        let mut vsig = vec![AesBlock::default(); nb * mp];
        let mut venc = vec![AesBlock::default(); nb * mp];
        let (mut vl, mut vh) = (vec![0u64; m], vec![0u64; m]);
        // Lanes that evaluate consecutive keys read their correction words as slices.
        let first = (m > 0 && (0..m).all(|k| key(k) == key(0) + k)).then(|| key(0));
        let mut gathered = Vec::with_capacity(m);
        for i in 0..n {
            let shift = n - 1 - i;
            w.encrypt(prg, [HashKey::Left, HashKey::Right], &mut enc);
            let (lo, hi, tm) = w.view(m);
            // Only the direction taken is hashed: σ(s ⊕ τ) = σ(s) ⊕ (τ << 64) for the tweak
            // τ = value_tweak(c, b, B) = c·B + b.
            let pts = &points[..m];
            for b in 0..nb {
                let row = &mut vsig[b * mp..b * mp + m];
                for k in 0..m {
                    let tweak = value_tweak(((pts[k] >> shift) & 1) as usize, b, nb);
                    row[k] = walk::block(hi[k], hi[k] ^ lo[k] ^ tweak);
                }
            }
            prg.encrypt(HashKey::ValueLeft, &vsig, &mut venc);
            for b in 0..nb {
                let (v, row) = (&venc[b * mp..b * mp + m], &vsig[b * mp..b * mp + m]);
                let (vl, vh) = (&mut vl[..m], &mut vh[..m]);
                for k in 0..m {
                    let (el, eh) = walk::halves(&v[k]);
                    let (sl, sh) = walk::halves(&row[k]);
                    (vl[k], vh[k]) = (el ^ sl, eh ^ sh);
                }
                for j in b * wpb..((b + 1) * wpb).min(kw) {
                    let sh = (j - b * wpb) as u32 * ell;
                    let row = (i as usize * kw + j) * len;
                    // The chunk's correction words as one slice (no per-lane index checks).
                    let vcw = match first {
                        Some(f) => &self.vcw[row + f..row + f + m],
                        None => {
                            gathered.clear();
                            gathered.extend((0..m).map(|k| self.vcw[row + key(k)]));
                            &gathered[..]
                        }
                    };
                    let accj = &mut acc[j * m..(j + 1) * m];
                    // One loop per shift class, each simple enough to vectorise.
                    let add = |accj: &mut [u64], word: &dyn Fn(usize) -> u64| {
                        for k in 0..m {
                            accj[k] = accj[k].wrapping_add(word(k)).wrapping_add(vcw[k] & tm[k]);
                        }
                    };
                    match sh {
                        0 => add_words(accj, vl, vcw, tm, |k| k),
                        64 => add_words(accj, vh, vcw, tm, |k| k),
                        1..64 => add(accj, &|k| (vl[k] >> sh) | (vh[k] << (64 - sh))),
                        _ => add(accj, &|k| vh[k] >> (sh - 64)),
                    }
                }
            }
            w.descend_all::<false>(&enc, &self.tree, i, &key, points, shift);
        }
        for (tk, &mask) in t.iter_mut().zip(&w.t) {
            *tk = (mask & 1) as u8;
        }
        (0..m).map(|k| w.seed(k)).collect()
    }

    /// One party's key material per key, in bytes (rounded up).
    pub fn key_bytes(&self) -> usize {
        self.params.key_bits().div_ceil(8) as usize
    }

    /// Append the raw material of the batch (no envelope) to a bit stream.
    pub fn write_material(&self, w: &mut BitWriter) {
        // No share words here: a recording pass skips it.
        if w.keeps_only_shares() {
            return;
        }
        self.tree.write(w);
        let (v, f) = (&self.vcw, &self.fcw);
        w.put_run(
            self.params.out_bits,
            v.len() + f.len(),
            |i| if i < v.len() { v[i] } else { f[i - v.len()] },
        );
    }

    /// Read `count` keys written by [`DcfKeys::write_material`].
    ///
    /// # Errors
    /// [`DecodeError`] if the stream is short or a field is invalid.
    pub fn read_material(
        params: DcfParams,
        party: Party,
        count: usize,
        r: &mut BitReader<'_>,
    ) -> Result<DcfKeys, DecodeError> {
        check_keys(r, count, params.key_bits(), ROOT_BITS)?;
        let tree = TreeKeys::read(r, params.domain_bits, count)?;
        let kw = params.words();
        let mut vcw = Vec::new();
        r.get_run(params.out_bits, params.domain_bits as usize * count * kw, &mut vcw)?;
        let mut fcw = Vec::new();
        r.get_run(params.out_bits, count * kw, &mut fcw)?;
        Ok(DcfKeys { params, party, tree, vcw, fcw })
    }

    /// The standalone, versioned, checksummed encoding (see [`crate::codec`]).
    ///
    /// # Panics
    /// If the batch holds more than `u32::MAX` keys.
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            kind: KeyKind::Dcf,
            party: self.party,
            domain_bits: self.params.domain_bits as u8,
            out_bits: self.params.out_bits as u8,
            payload_words: self.params.payload_words as u16,
            variant: self.params.variant(),
            count: u32::try_from(self.len()).expect("at most u32::MAX keys per encoding"),
        };
        codec::seal(header, |w| self.write_material(w))
    }

    /// Decode [`DcfKeys::encode`]'s output.
    ///
    /// # Errors
    /// [`DecodeError`] for truncated, corrupted, wrong-version or wrong-kind input.
    pub fn decode(bytes: &[u8]) -> Result<DcfKeys, DecodeError> {
        let (h, material) = codec::open(bytes, KeyKind::Dcf)?;
        let params = DcfParams::new(h.domain_bits as u32, h.out_bits as u32, h.payload_words as u32)
            .map_err(|_| DecodeError::InvalidField("DCF shape"))?;
        if h.variant != params.variant() {
            return Err(DecodeError::InvalidField("DCF variant: 0 for one payload word, 1 for more"));
        }
        let count = h.count as usize;
        codec::expect_material_len(material, count as u64 * params.key_bits())?;
        let mut r = BitReader::new(material);
        let keys = DcfKeys::read_material(params, h.party, count, &mut r)?;
        r.finish()?;
        Ok(keys)
    }
}
