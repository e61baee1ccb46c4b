//! Arithmetic DPF with early termination and vector payloads, for lookup tables over small
//! domains (docs/design/compiled-gates.md §2.4, generalised to `e` levels and `K` words).
//!
//! `f_{α,β}(x) = β if x = α else 0` on `d ≤ 24` input bits, with `β ∈ Z_{2^ℓ}^K`. The two
//! keys' evaluations are additive shares of `f(x)` mod `2^ℓ`, word by word.
//!
//! The BGI16 tree (docs/design/fss-building-blocks.md §3) has `L = d − e` levels and walks the top `L`
//! bits of the point, MSB first. A leaf seed `s` then covers the `2^e` points that share
//! those bits: it is converted into `S = 2^e·K` words, word `w` being the 64-bit half
//! `w mod 2` of block `⌊w/2⌋` of the blocks `H_2(s ⊕ j)`, `j < ⌈S/2⌉`, reduced mod `2^ℓ`
//! (the hash and block index of the vector payloads of [`crate::dcf`], but one word per
//! 64-bit half whatever `ℓ`). The point with low bits `v` reads word `k` of its value at
//! slot `v·K + k`. Hash outputs are uniform, so no output word depends on the seed's
//! control bit. The final correction word has `S` words; party 1 negates:
//! `y_b(x) = (−1)^b·(conv(s_b)[slot] + t_b·FCW[slot])`.
//!
//! Key: root seed, `L` levels of (seed CW, `tL`, `tR`), `S` final words:
//! `λ + (d − e)(λ + 2) + 2^e·K·ℓ` bits. Eval: `d − e + ⌈K/2⌉` AES. Full domain:
//! `2^{d−e+1} − 2 + 2^{d−e}·⌈2^e·K/2⌉` AES per key.
//!
//! [`AdpfKeys::full_domain`] is the hot path of table lookups. It expands the top levels of
//! a chunk of keys together (so that small trees fill whole AES batches), then each key's
//! subtrees depth-first in tiles of [`TILE`] nodes, a few levels at a time, so that every
//! level's nodes stay in the first-level caches; each tile of leaves is converted and
//! written out as soon as it exists.

use crate::codec::{self, BitReader, BitWriter, Header, KeyKind};
use crate::dpf::MAX_FULL_DOMAIN_BITS;
use crate::error::{DecodeError, FssError};
use crate::prg::{AesBlock, HashKey, Prg, pad};
use crate::ring::mask;
use crate::rng::{CryptoRng, random_roots};
use crate::share::Party;
use crate::tree::{DealerTrees, ROOT_BITS, TreeKeys, check_keys, path_bit};
use crate::walk::{self, Walk};

/// Largest payload `K` (words per point).
pub const MAX_PAYLOAD_WORDS: u32 = 8;

/// Largest number of early-terminated levels `e` (a leaf holds at most `2^6·K` words).
pub const MAX_ET_LEVELS: u32 = 6;

/// Nodes of one key that [`AdpfKeys::full_domain`] expands together below the top levels
/// (a multiple of the AES batch).
pub const TILE: usize = 64;
/// `log2(TILE)`: the top levels expanded for all keys of a chunk at once.
const TILE_BITS: u32 = TILE.trailing_zeros();
/// Levels a tile is expanded by before its nodes are split into tiles again: `TILE·2^STAGE`
/// nodes (~12 KB of seeds) stay in L1.
const STAGE: u32 = 3;
/// AES blocks per leaf-conversion call.
const CONV_BLOCKS: usize = 512;

/// Shape of an arithmetic DPF: input width `d`, output width `ℓ`, payload words `K` and
/// early-terminated levels `e`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AdpfParams {
    domain_bits: u32,
    out_bits: u32,
    payload_words: u32,
    et_levels: u32,
}

impl AdpfParams {
    /// A DPF on `d = domain_bits` input bits with payload `β ∈ Z_{2^ℓ}^K` (`ℓ = out_bits`,
    /// `K = payload_words`) whose tree stops `e = et_levels` levels early.
    ///
    /// # Errors
    /// [`FssError::InvalidWidth`] unless `1 ≤ d` and `1 ≤ ℓ ≤ 64`,
    /// [`FssError::DomainTooLarge`] if `d > MAX_FULL_DOMAIN_BITS`, [`FssError::InvalidParams`]
    /// unless `1 ≤ K ≤ 8` and `e ≤ min(d, 6)`.
    pub fn new(
        domain_bits: u32,
        out_bits: u32,
        payload_words: u32,
        et_levels: u32,
    ) -> Result<AdpfParams, FssError> {
        for b in [domain_bits, out_bits] {
            if !(1..=64).contains(&b) {
                return Err(FssError::InvalidWidth(b));
            }
        }
        if domain_bits > MAX_FULL_DOMAIN_BITS {
            return Err(FssError::DomainTooLarge { bits: domain_bits, max: MAX_FULL_DOMAIN_BITS });
        }
        if !(1..=MAX_PAYLOAD_WORDS).contains(&payload_words) {
            return Err(FssError::InvalidParams("payload words must be in 1..=8"));
        }
        if et_levels > domain_bits.min(MAX_ET_LEVELS) {
            return Err(FssError::InvalidParams("early-terminated levels must be at most min(d, 6)"));
        }
        Ok(AdpfParams { domain_bits, out_bits, payload_words, et_levels })
    }

    /// Input width `d`.
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

    /// Early-terminated levels `e`.
    pub fn et_levels(self) -> u32 {
        self.et_levels
    }

    /// Tree levels `d − e`.
    pub fn levels(self) -> u32 {
        self.domain_bits - self.et_levels
    }

    /// Words a leaf seed is converted into: `S = 2^e·K`.
    pub fn leaf_words(self) -> usize {
        (self.payload_words as usize) << self.et_levels
    }

    /// AES blocks a leaf seed is converted from: `⌈S/2⌉`.
    pub fn leaf_blocks(self) -> usize {
        self.leaf_words().div_ceil(2)
    }

    fn words(self) -> usize {
        self.payload_words as usize
    }

    /// One party's key material per key, in bits: `λ + (d − e)(λ + 2) + 2^e·K·ℓ`.
    pub fn key_bits(self) -> u64 {
        TreeKeys::key_bits(self.levels()) + self.leaf_words() as u64 * self.out_bits as u64
    }

    /// One party's key material per key, in bytes (rounded up).
    pub fn key_bytes(self) -> usize {
        self.key_bits().div_ceil(8) as usize
    }

    /// AES blocks per point evaluation: `d − e + ⌈K/2⌉`.
    pub fn aes_per_eval(self) -> u64 {
        self.levels() as u64 + self.payload_words.div_ceil(2) as u64
    }

    /// AES blocks per key of a full-domain evaluation: the tree expansion,
    /// `2^{d−e+1} − 2`, plus the leaf conversions, `2^{d−e}·⌈2^e·K/2⌉`.
    pub fn aes_full_domain(self) -> u64 {
        let leaves = 1u64 << self.levels();
        2 * leaves - 2 + leaves * self.leaf_blocks() as u64
    }
}

/// One party's keys for a batch of arithmetic DPFs of one shape. `Debug` shows only the
/// shape; the material is zeroized on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct AdpfKeys {
    params: AdpfParams,
    party: Party,
    tree: TreeKeys,
    /// Final correction words: `fcw[k·S + w]` is slot `w` of key `k`.
    fcw: Vec<u64>,
}

crate::wipe_on_drop!(AdpfKeys { wipe: [fcw], zeroize: [tree] });

impl std::fmt::Debug for AdpfKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdpfKeys")
            .field("params", &self.params)
            .field("party", &self.party)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// Deal both parties' keys for `f_{α_i, β_i}`; `betas[i·K..(i+1)·K]` is `β_i`. All levels
/// of all keys in lockstep.
///
/// # Errors
/// [`FssError::LengthMismatch`] if `betas.len() != K·alphas.len()`,
/// [`FssError::PointOutOfDomain`] or [`FssError::ValueOutOfRange`] if some `α` or a word of
/// some `β` does not fit.
pub fn keygen<R: CryptoRng + ?Sized>(
    params: AdpfParams,
    alphas: &[u64],
    betas: &[u64],
    rng: &mut R,
) -> Result<(AdpfKeys, AdpfKeys), FssError> {
    let roots = random_roots(rng, alphas.len());
    keygen_with_roots(params, alphas, betas, roots)
}

/// [`keygen`] with caller-chosen root seeds (`roots[2i + b]` for key `i`, party `b`).
///
/// Only for known-answer tests: real roots must be fresh uniform randomness. The control
/// bit (bit 0) of every root is cleared.
///
/// # Errors
/// As [`keygen`]; [`FssError::LengthMismatch`] if `roots.len() != 2·alphas.len()`.
pub fn keygen_with_roots(
    params: AdpfParams,
    alphas: &[u64],
    betas: &[u64],
    roots: Vec<u128>,
) -> Result<(AdpfKeys, AdpfKeys), FssError> {
    let m = alphas.len();
    let kw = params.words();
    walk::check_len(m * kw, betas.len())?;
    walk::check_len(2 * m, roots.len())?;
    walk::check_points(alphas, params.domain_bits)?;
    let ell = mask(params.out_bits);
    if let Some(&b) = betas.iter().find(|&&b| b & !ell != 0) {
        return Err(FssError::ValueOutOfRange { value: b, bits: params.out_bits });
    }
    let (d, levels, s) = (params.domain_bits, params.levels(), params.leaf_words());
    let prg = Prg::global();
    let mut trees = DealerTrees::new(roots, levels);
    for i in 0..levels {
        trees.expand(prg);
        trees.step(i, |k| path_bit(alphas[k], d, i));
    }
    let mut seeds = trees.seeds();
    let conv = leaf_words(params, &seeds);
    crate::wipe::wipe(&mut seeds);
    let low = mask(params.et_levels);
    let mut fcw = vec![0u64; m * s];
    for (k, f) in fcw.chunks_mut(s).enumerate() {
        let v = (alphas[k] & low) as usize;
        let neg = trees.t[2 * k + 1] == 1;
        let (c0, c1) = (&conv[2 * k * s..(2 * k + 1) * s], &conv[(2 * k + 1) * s..(2 * k + 2) * s]);
        for (w, f) in f.iter_mut().enumerate() {
            let target = if w / kw == v { betas[k * kw + w % kw] } else { 0 };
            let diff = target.wrapping_sub(c0[w]).wrapping_add(c1[w]);
            *f = (if neg { diff.wrapping_neg() } else { diff }) & ell;
        }
    }
    let (t0, t1) = trees.into_keys();
    let key = |party, tree| AdpfKeys { params, party, tree, fcw: fcw.clone() };
    Ok((key(Party::P0, t0), key(Party::P1, t1)))
}

/// The leaf conversion of every seed: `S` words each (unreduced), seed-major.
fn leaf_words(params: AdpfParams, seeds: &[u128]) -> Vec<u64> {
    let (s, nb) = (params.leaf_words(), params.leaf_blocks());
    let vin: Vec<u128> = seeds.iter().flat_map(|&x| (0..nb).map(move |j| x ^ j as u128)).collect();
    let mut blocks = vec![0u128; vin.len()];
    Prg::global().hash_many(HashKey::ValueLeft, &vin, &mut blocks);
    let mut words = vec![0u64; seeds.len() * s];
    for (lane, w) in words.chunks_mut(s).enumerate() {
        for (j, word) in w.iter_mut().enumerate() {
            *word = (blocks[lane * nb + j / 2] >> (64 * (j % 2))) as u64;
        }
    }
    words
}

/// The corrections of one key at one level, as the expansion kernel uses them.
#[derive(Clone, Copy)]
struct LevelCw {
    scw_lo: u64,
    scw_hi: u64,
    /// Control-bit corrections of the left and right child, 0 or 1.
    tcw: [u64; 2],
}

/// A level of nodes: `σ(s)` (the AES input) and the control bit as a mask.
#[derive(Default)]
struct Nodes {
    sig: Vec<AesBlock>,
    t: Vec<u64>,
}

impl Nodes {
    /// Room for `n` nodes (the seeds padded to a whole AES batch).
    fn reserve(&mut self, n: usize) {
        if self.t.len() < n {
            self.sig.resize(pad(n), AesBlock::default());
            self.t.resize(n, 0);
        }
    }
}

/// Buffers of a full-domain expansion, kept per thread (fresh allocations per call would
/// cost page faults).
#[derive(Default)]
struct FullScratch {
    /// The top levels of all keys of a chunk (ping-pong).
    top: [Nodes; 2],
    /// Per stage of the per-key descent, its levels (ping-pong).
    stages: Vec<[Nodes; 2]>,
    /// AES outputs of a level, left and right.
    enc: [Vec<AesBlock>; 2],
    /// Leaf conversion inputs and outputs.
    conv_in: Vec<AesBlock>,
    conv_out: Vec<AesBlock>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<FullScratch> = std::cell::RefCell::default();
}

/// Both children of a run of nodes of one key, at `2j` (left) and `2j + 1` (right) of the
/// next level; `enc[c]` holds `AES_{K_c}(σ(s))`.
#[inline(never)]
fn children(
    enc: [&[AesBlock]; 2],
    sig: &[AesBlock],
    t: &[u64],
    cw: LevelCw,
    nsig: &mut [AesBlock],
    nt: &mut [u64],
) {
    let m = t.len();
    let (e0, e1, sig) = (&enc[0][..m], &enc[1][..m], &sig[..m]);
    let (nsig, nt) = (&mut nsig[..2 * m], &mut nt[..2 * m]);
    for j in 0..m {
        let (xl, xh) = walk::halves(&sig[j]);
        let tj = t[j];
        let (cl, ch) = (cw.scw_lo & tj, cw.scw_hi & tj);
        for (c, e) in [e0, e1].into_iter().enumerate() {
            let (el, eh) = walk::halves(&e[j]);
            // H_c(s) = AES(σ(s)) ⊕ σ(s), corrected; the child is stored as σ(child).
            let (al, ah) = (el ^ xl, eh ^ xh);
            let (lo, hi) = ((al & !1) ^ cl, ah ^ ch);
            nsig[2 * j + c] = walk::block(hi, hi ^ lo);
            nt[2 * j + c] = ((al ^ (tj & cw.tcw[c])) & 1).wrapping_neg();
        }
    }
}

/// Word `w` of a little-endian byte stream.
#[inline(always)]
fn word_at(bytes: &[u8], w: usize) -> u64 {
    u64::from_le_bytes(bytes[8 * w..8 * w + 8].try_into().expect("8 bytes"))
}

/// Words [`finish64`] handles per call.
const FINISH_WORDS: usize = 64;

/// The output words of `64 / S` leaves (`S` even, dividing 8; see [`finish_leaves`]), for
/// party 1 if `P1` (then `fcw8` holds the negated corrections). Out of line and unrolled by
/// hand into eight groups of 8 words, so that the compiler turns each group into one vector
/// operation instead of vectorising across leaves with gathers.
#[inline(never)]
fn finish64<const S: usize, const P1: bool>(
    (enc, inp): (&[u8], &[u8]),
    t: &[u64],
    fcw8: &[u64; 8],
    ell: u64,
    out: &mut [u64],
) {
    #[inline(always)]
    fn group<const S: usize, const P1: bool>(
        (enc, inp): (&[u8], &[u8]),
        t: &[u64],
        fcw8: &[u64; 8],
        ell: u64,
        out: &mut [u64],
    ) {
        let (enc, inp, t, out) = (&enc[..64], &inp[..64], &t[..8 / S], &mut out[..8]);
        for u in 0..8 {
            let (w, f) = (word_at(enc, u) ^ word_at(inp, u), fcw8[u] & t[u / S]);
            out[u] = if P1 { f.wrapping_sub(w) } else { f.wrapping_add(w) } & ell;
        }
    }
    let (enc, inp, t, out) = (&enc[..512], &inp[..512], &t[..64 / S], &mut out[..64]);
    // Eight straight-line calls (a loop here would be vectorised across groups).
    macro_rules! groups {
        ($($g:literal)*) => {$(
            group::<S, P1>(
                (&enc[64 * $g..64 * $g + 64], &inp[64 * $g..64 * $g + 64]),
                &t[8 / S * $g..8 / S * ($g + 1)],
                fcw8,
                ell,
                &mut out[8 * $g..8 * $g + 8],
            );
        )*};
    }
    groups!(0 1 2 3 4 5 6 7);
}

/// `out[q·s + w] = (−1)^b·(word w of leaf q + t_q·fcw[w]) mod 2^ℓ` for a run of leaves of one
/// key, from their conversion blocks as bytes (`enc ⊕ inp`, `⌈s/2⌉` blocks per leaf).
/// Inlined into callers with a constant `s`, so that the inner loops unroll.
#[inline(always)]
fn finish_leaves(
    s: usize,
    (enc, inp): (&[u8], &[u8]),
    t: &[u64],
    fcw: &[u64],
    (neg, ell): (u64, u64),
    out: &mut [u64],
) {
    let fcw = &fcw[..s];
    let word = |e: &[u8], i: &[u8], w: usize, tq: u64, f: u64| {
        let y = (word_at(e, w) ^ word_at(i, w)).wrapping_add(f & tq);
        ((y ^ neg).wrapping_sub(neg)) & ell
    };
    let mut done = 0;
    if s.is_multiple_of(2) && 8usize.is_multiple_of(s) {
        // Even `s` dividing 8: the words are the blocks' halves in order, processed
        // FINISH_WORDS at a time with `fcw` (negated for party 1) repeated to 8 words.
        let per = FINISH_WORDS / s;
        let fcw8: [u64; 8] = std::array::from_fn(|u| (fcw[u % s] ^ neg).wrapping_sub(neg));
        let bytes = 8 * FINISH_WORDS;
        let groups =
            out.chunks_exact_mut(FINISH_WORDS).zip(enc.chunks_exact(bytes)).zip(inp.chunks_exact(bytes));
        for (((o, e), i), tg) in groups.zip(t.chunks_exact(per)) {
            let ei = (e, i);
            match (s, neg != 0) {
                (2, false) => finish64::<2, false>(ei, tg, &fcw8, ell, o),
                (2, true) => finish64::<2, true>(ei, tg, &fcw8, ell, o),
                (4, false) => finish64::<4, false>(ei, tg, &fcw8, ell, o),
                (4, true) => finish64::<4, true>(ei, tg, &fcw8, ell, o),
                (_, false) => finish64::<8, false>(ei, tg, &fcw8, ell, o),
                (_, true) => finish64::<8, true>(ei, tg, &fcw8, ell, o),
            }
        }
        done = t.len() / per * per;
    }
    let stride = 16 * s.div_ceil(2);
    let (enc, inp) = (&enc[done * stride..], &inp[done * stride..]);
    let leaves =
        out[done * s..].chunks_exact_mut(s).zip(enc.chunks_exact(stride)).zip(inp.chunks_exact(stride));
    for (((o, e), i), &tq) in leaves.zip(&t[done..]) {
        for w in 0..s {
            o[w] = word(e, i, w, tq, fcw[w]);
        }
    }
}

impl AdpfKeys {
    /// The keys' shape.
    pub fn params(&self) -> AdpfParams {
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
    pub fn slice(&self, start: usize, end: usize) -> AdpfKeys {
        let s = self.params.leaf_words();
        AdpfKeys {
            params: self.params,
            party: self.party,
            tree: self.tree.slice(start, end),
            fcw: self.fcw[start * s..end * s].to_vec(),
        }
    }

    /// Evaluate key `i` at `points[i]` for every key: `out[i·K..(i+1)·K]` is this party's
    /// share of `f_i(x_i)`, each word mod `2^ℓ`. Level by level over the batch; split across
    /// the rayon pool above [`walk::CHUNK`] keys.
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`] or [`FssError::PointOutOfDomain`].
    pub fn eval(&self, points: &[u64], out: &mut [u64]) -> Result<(), FssError> {
        walk::check_len(self.len(), points.len())?;
        self.eval_lanes(None, points, out)
    }

    /// Evaluate key `keys[j]` at `points[j]` for every lane `j` (`K` words per lane).
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`], [`FssError::PointOutOfDomain`] or
    /// [`FssError::InvalidParams`] for a key index out of range.
    pub fn eval_indexed(&self, keys: &[u32], points: &[u64], out: &mut [u64]) -> Result<(), FssError> {
        walk::check_len(keys.len(), points.len())?;
        walk::check_indices(keys, self.len())?;
        self.eval_lanes(Some(keys), points, out)
    }

    /// Evaluate key `i` at one point: `K` words (slow path; batch with
    /// [`AdpfKeys::eval_indexed`]).
    ///
    /// # Errors
    /// As [`AdpfKeys::eval_indexed`].
    pub fn eval_one(&self, i: usize, x: u64) -> Result<Vec<u64>, FssError> {
        let mut out = vec![0u64; self.params.words()];
        self.eval_indexed(&[walk::index(i, self.len())?], &[x], &mut out)?;
        Ok(out)
    }

    fn eval_lanes(&self, keys: Option<&[u32]>, points: &[u64], out: &mut [u64]) -> Result<(), FssError> {
        let kw = self.params.words();
        walk::check_len(points.len() * kw, out.len())?;
        walk::check_points(points, self.params.domain_bits)?;
        walk::run_chunks(keys, points, out, kw, |map, pts, o| match map {
            walk::KeyMap::Offset(off) => self.eval_chunk(|k| off + k, pts, o),
            walk::KeyMap::Indexed(ix) => self.eval_chunk(|k| ix[k] as usize, pts, o),
        });
        Ok(())
    }

    fn eval_chunk(&self, key: impl Fn(usize) -> usize, points: &[u64], out: &mut [u64]) {
        let p = self.params;
        let (d, levels, kw, s) = (p.domain_bits, p.levels(), p.words(), p.leaf_words());
        let m = points.len();
        let prg = Prg::global();
        let mut w = Walk::new(m, |k| self.tree.roots[key(k)], self.party.bit());
        w.descend_levels::<false>(&self.tree, 0..levels, &key, points, d);
        // The ⌈K/2⌉ conversion blocks from ⌊v·K/2⌋ hold the point's K words; block-major.
        let (nb, mp) = (kw.div_ceil(2), pad(m));
        let low = mask(p.et_levels);
        let first = |k: usize| (points[k] & low) as usize * kw;
        let mut sig = vec![AesBlock::default(); nb * mp];
        let mut venc = vec![AesBlock::default(); nb * mp];
        let (lo, hi, tm) = w.view(m);
        for b in 0..nb {
            for k in 0..m {
                let j = (first(k) / 2 + b) as u64;
                sig[b * mp + k] = walk::block(hi[k], hi[k] ^ lo[k] ^ j);
            }
        }
        prg.encrypt(HashKey::ValueLeft, &sig, &mut venc);
        let (neg, ell) = (self.party_mask(), mask(p.out_bits));
        for k in 0..m {
            let (kk, w0) = (key(k), first(k));
            for j in 0..kw {
                let w = w0 + j;
                let blk = (w / 2 - w0 / 2) * mp + k;
                let (el, eh) = walk::halves(&venc[blk]);
                let (il, ih) = walk::halves(&sig[blk]);
                let word = if w % 2 == 0 { el ^ il } else { eh ^ ih };
                let y = word.wrapping_add(self.fcw[kk * s + w] & tm[k]);
                out[k * kw + j] = ((y ^ neg).wrapping_sub(neg)) & ell;
            }
        }
    }

    /// `u64::MAX` for party 1 (which negates its outputs), 0 for party 0.
    fn party_mask(&self) -> u64 {
        (self.party.bit() as u64).wrapping_neg()
    }

    /// Evaluate keys `keys` at every point of the domain: `out[(i − keys.start)·2^d·K + x·K
    /// + k]` is this party's share of word `k` of `f_i(x)`, mod `2^ℓ`.
    /// [`AdpfParams::aes_full_domain`] AES per key; see [`AdpfKeys::full_domain_into`].
    ///
    /// # Errors
    /// [`FssError::InvalidParams`] if the range is out of bounds or the output would not fit
    /// in memory.
    pub fn full_domain(&self, keys: std::ops::Range<usize>) -> Result<Vec<u64>, FssError> {
        walk::check_range(&keys, self.len())?;
        let len = keys
            .len()
            .checked_mul(self.params.words() << self.params.domain_bits)
            .ok_or(FssError::InvalidParams("full-domain output too large"))?;
        let mut out = vec![0u64; len];
        self.full_domain_into(keys, &mut out)?;
        Ok(out)
    }

    /// [`AdpfKeys::full_domain`] into a caller's buffer of `keys.len()·2^d·K` words (reuse
    /// it across calls: a fresh multi-megabyte buffer costs page faults).
    ///
    /// The keys are expanded in chunks of about `2^16` leaves, on the rayon pool when there
    /// is more than one chunk. Within a chunk, the top levels of all keys (down to at least
    /// [`TILE`] nodes per key) are expanded together, then each tile's subtree depth-first,
    /// three levels at a time; every AES call covers at least 64 blocks.
    ///
    /// # Errors
    /// [`FssError::InvalidParams`] if the range is out of bounds,
    /// [`FssError::LengthMismatch`] if `out` has the wrong length.
    pub fn full_domain_into(&self, keys: std::ops::Range<usize>, out: &mut [u64]) -> Result<(), FssError> {
        walk::check_range(&keys, self.len())?;
        let per_key = self.params.words() << self.params.domain_bits;
        let len =
            keys.len().checked_mul(per_key).ok_or(FssError::InvalidParams("full-domain output too large"))?;
        walk::check_len(len, out.len())?;
        let per_chunk = walk::full_domain_chunk(self.params.levels());
        walk::par_chunks(out, per_chunk * per_key, |c, o| {
            let start = keys.start + c * per_chunk;
            SCRATCH.with_borrow_mut(|scratch| self.expand_keys(scratch, start..start + o.len() / per_key, o));
        });
        Ok(())
    }

    /// The corrections of key `g` at level `i`.
    #[inline]
    fn level_cw(&self, i: u32, g: usize) -> LevelCw {
        let (sl, sh) = self.tree.scw_level(i);
        let tcw = [(self.tree.tcw_left[g] >> i) & 1, (self.tree.tcw_right[g] >> i) & 1];
        LevelCw { scw_lo: sl[g], scw_hi: sh[g], tcw }
    }

    /// Expand `width` nodes at level `i` (node `j` of key `first + j / run`) one level down:
    /// two AES calls over the whole level, then the children key run by key run.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        i: u32,
        (first, run): (usize, usize),
        (sig, t): (&[AesBlock], &[u64]),
        width: usize,
        (nsig, nt): (&mut [AesBlock], &mut [u64]),
        enc: &mut [Vec<AesBlock>; 2],
    ) {
        let prg = Prg::global();
        let padded = pad(width);
        for (e, hk) in enc.iter_mut().zip([HashKey::Left, HashKey::Right]) {
            if e.len() < padded {
                e.resize(padded, AesBlock::default());
            }
            prg.encrypt(hk, &sig[..padded], &mut e[..padded]);
        }
        for r in 0..width / run {
            let cw = self.level_cw(i, first + r);
            let (a, b) = (r * run, (r + 1) * run);
            children(
                [&enc[0][a..b], &enc[1][a..b]],
                &sig[a..b],
                &t[a..b],
                cw,
                &mut nsig[2 * a..2 * b],
                &mut nt[2 * a..2 * b],
            );
        }
    }

    /// Full-domain expansion of keys `keys` (one chunk) into `out`.
    fn expand_keys(&self, scratch: &mut FullScratch, keys: std::ops::Range<usize>, out: &mut [u64]) {
        let levels = self.params.levels();
        let (g0, nk) = (keys.start, keys.len());
        // The top levels, for all keys at once: down to tiles of TILE nodes, and further by the
        // levels that do not fill a whole stage, so that every stage below ends at the leaves
        // with its widest AES calls.
        let top = if levels <= TILE_BITS { levels } else { TILE_BITS + (levels - TILE_BITS) % STAGE };
        let FullScratch { top: [a, b], stages, enc, conv_in, conv_out } = scratch;
        a.reserve(nk << top);
        b.reserve(nk << top);
        let tm = self.party_mask();
        for (j, g) in keys.enumerate() {
            let r = self.tree.roots[g];
            let (lo, hi) = (r as u64, (r >> 64) as u64);
            a.sig[j] = walk::block(hi, hi ^ lo);
            a.t[j] = tm;
        }
        let (mut cur, mut next) = (a, b);
        for i in 0..top {
            let (sig, t) = (&cur.sig[..], &cur.t[..]);
            self.step(i, (g0, 1 << i), (sig, t), nk << i, (&mut next.sig, &mut next.t), enc);
            std::mem::swap(&mut cur, &mut next);
        }
        let conv = (&mut *conv_in, &mut *conv_out);
        if top == levels {
            let n = nk << levels;
            self.convert((g0, 1 << levels), (&cur.sig, &cur.t[..n]), conv, out);
            return;
        }
        let depth = ((levels - top) / STAGE) as usize;
        if stages.len() < depth {
            stages.resize_with(depth, Default::default);
        }
        // Tile `q` of the top level belongs to key `q >> (top − TILE_BITS)`.
        let span = (TILE << (levels - top)) * self.params.leaf_words();
        for (q, o) in out.chunks_mut(span).enumerate() {
            let (g, src) =
                (g0 + (q >> (top - TILE_BITS)), (&cur.sig[q * TILE..], &cur.t[q * TILE..(q + 1) * TILE]));
            self.descend(g, top, src, &mut stages[..depth], enc, (&mut *conv_in, &mut *conv_out), o);
        }
    }

    /// Expand a tile of nodes of key `g` at level `i` by [`STAGE`] levels, then recurse
    /// into each tile of the result, or convert it if it is the leaf level. `out` receives
    /// the tile's subtree, in point order.
    #[allow(clippy::too_many_arguments)]
    fn descend(
        &self,
        g: usize,
        i: u32,
        src: (&[AesBlock], &[u64]),
        stages: &mut [[Nodes; 2]],
        enc: &mut [Vec<AesBlock>; 2],
        conv: (&mut Vec<AesBlock>, &mut Vec<AesBlock>),
        out: &mut [u64],
    ) {
        let levels = self.params.levels();
        let Some(([a, b], deeper)) = stages.split_first_mut() else { return };
        let width = src.1.len();
        a.reserve(width << STAGE);
        b.reserve(width << STAGE);
        self.step(i, (g, width), src, width, (&mut a.sig, &mut a.t), enc);
        let (mut cur, mut next) = (a, b);
        for k in 1..STAGE {
            let w = width << k;
            self.step(i + k, (g, w), (&cur.sig, &cur.t), w, (&mut next.sig, &mut next.t), enc);
            std::mem::swap(&mut cur, &mut next);
        }
        let n = width << STAGE;
        if i + STAGE == levels {
            self.convert((g, n), (&cur.sig, &cur.t[..n]), conv, out);
            return;
        }
        let span = (TILE << (levels - i - STAGE)) * self.params.leaf_words();
        for (q, o) in out.chunks_mut(span).enumerate() {
            let sub = (&cur.sig[q * TILE..], &cur.t[q * TILE..(q + 1) * TILE]);
            self.descend(g, i + STAGE, sub, deeper, enc, (&mut *conv.0, &mut *conv.1), o);
        }
    }

    /// Convert leaves (leaf `q` of key `first + q / run`) into their output words,
    /// `out[q·S..(q+1)·S]`, in AES calls of about [`CONV_BLOCKS`] blocks.
    fn convert(
        &self,
        keys: (usize, usize),
        leaves: (&[AesBlock], &[u64]),
        conv: (&mut Vec<AesBlock>, &mut Vec<AesBlock>),
        out: &mut [u64],
    ) {
        // The common leaf widths get loops specialised to a constant `S`.
        match self.params.leaf_words() {
            1 => self.convert_with(1, keys, leaves, conv, out),
            2 => self.convert_with(2, keys, leaves, conv, out),
            4 => self.convert_with(4, keys, leaves, conv, out),
            8 => self.convert_with(8, keys, leaves, conv, out),
            s => self.convert_with(s, keys, leaves, conv, out),
        }
    }

    #[inline(always)]
    fn convert_with(
        &self,
        s: usize,
        (first, run): (usize, usize),
        (sig, t): (&[AesBlock], &[u64]),
        (cin, cout): (&mut Vec<AesBlock>, &mut Vec<AesBlock>),
        out: &mut [u64],
    ) {
        let nb = s.div_ceil(2);
        let per_call = (CONV_BLOCKS / nb).max(1);
        let room = pad(per_call * nb);
        if cin.len() < room {
            cin.resize(room, AesBlock::default());
            cout.resize(room, AesBlock::default());
        }
        let (neg, ell) = (self.party_mask(), mask(self.params.out_bits));
        let prg = Prg::global();
        let n = t.len();
        for c0 in (0..n).step_by(per_call) {
            let c1 = (c0 + per_call).min(n);
            let inputs = AesBlock::slice_as_flattened_mut(&mut cin[..(c1 - c0) * nb]);
            for (dst, x) in inputs.chunks_exact_mut(16 * nb).zip(&sig[c0..c1]) {
                let (lo, hi) = walk::halves(x);
                for j in 0..nb {
                    // σ(s ⊕ j) = σ(s) ⊕ (j << 64).
                    dst[16 * j..16 * j + 8].copy_from_slice(&lo.to_le_bytes());
                    dst[16 * j + 8..16 * j + 16].copy_from_slice(&(hi ^ j as u64).to_le_bytes());
                }
            }
            let blocks = pad((c1 - c0) * nb);
            prg.encrypt(HashKey::ValueLeft, &cin[..blocks], &mut cout[..blocks]);
            let (ci, co) = (AesBlock::slice_as_flattened(&cin[..]), AesBlock::slice_as_flattened(&cout[..]));
            let mut q = c0;
            while q < c1 {
                let g = first + q / run;
                let end = (q - q % run + run).min(c1);
                let bytes = (q - c0) * 16 * nb..(end - c0) * 16 * nb;
                let fcw = &self.fcw[g * s..(g + 1) * s];
                let (tq, o) = (&t[q..end], &mut out[q * s..end * s]);
                finish_leaves(s, (&co[bytes.clone()], &ci[bytes]), tq, fcw, (neg, ell), o);
                q = end;
            }
        }
    }

    /// One party's key material per key, in bytes (rounded up).
    pub fn key_bytes(&self) -> usize {
        self.params.key_bytes()
    }

    /// Append the raw material of the batch (no envelope) to a bit stream: the tree
    /// (roots, level correction words), then the final words at `ℓ` bits.
    pub fn write_material(&self, w: &mut BitWriter) {
        self.tree.write(w);
        for &f in &self.fcw {
            w.put(f, self.params.out_bits);
        }
    }

    /// Read `count` keys written by [`AdpfKeys::write_material`].
    ///
    /// # Errors
    /// [`DecodeError`] if the stream is short or a field is invalid.
    pub fn read_material(
        params: AdpfParams,
        party: Party,
        count: usize,
        r: &mut BitReader<'_>,
    ) -> Result<AdpfKeys, DecodeError> {
        check_keys(r, count, params.key_bits(), ROOT_BITS)?;
        let tree = TreeKeys::read(r, params.levels(), count)?;
        let fcw = {
            let mut v = Vec::new();
            r.get_run(params.out_bits, count * params.leaf_words(), &mut v)?;
            v
        };
        Ok(AdpfKeys { params, party, tree, fcw })
    }

    /// The standalone, versioned, checksummed encoding (see [`crate::codec`]); the variant
    /// byte holds `e`.
    ///
    /// # Panics
    /// If the batch holds more than `u32::MAX` keys.
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            kind: KeyKind::Adpf,
            party: self.party,
            domain_bits: self.params.domain_bits as u8,
            out_bits: self.params.out_bits as u8,
            payload_words: self.params.payload_words as u16,
            variant: self.params.et_levels as u8,
            count: u32::try_from(self.len()).expect("at most u32::MAX keys per encoding"),
        };
        codec::seal(header, |w| self.write_material(w))
    }

    /// Decode [`AdpfKeys::encode`]'s output.
    ///
    /// # Errors
    /// [`DecodeError`] for truncated, corrupted, wrong-version or wrong-kind input.
    pub fn decode(bytes: &[u8]) -> Result<AdpfKeys, DecodeError> {
        let (h, material) = codec::open(bytes, KeyKind::Adpf)?;
        let params = AdpfParams::new(
            h.domain_bits as u32,
            h.out_bits as u32,
            h.payload_words as u32,
            h.variant as u32,
        )
        .map_err(|_| DecodeError::InvalidField("arithmetic DPF shape"))?;
        let count = h.count as usize;
        codec::expect_material_len(material, count as u64 * params.key_bits())?;
        let mut r = BitReader::new(material);
        let keys = AdpfKeys::read_material(params, h.party, count, &mut r)?;
        r.finish()?;
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{DealerRng, SeedableRng};

    /// The leaf conversion is the `H_2(s ⊕ j)` blocks of the DCF convention, word `w` the
    /// half `w mod 2` of block `⌊w/2⌋`.
    #[test]
    fn leaf_words_follow_the_block_convention() {
        let p = AdpfParams::new(5, 64, 3, 1).unwrap();
        let seed = 0x0f0e_0d0c_0b0a_0908_0706_0504_0302_0100u128;
        let words = leaf_words(p, &[seed]);
        assert_eq!(words.len(), 6);
        let prg = Prg::global();
        for (w, &word) in words.iter().enumerate() {
            let blk = prg.hash(HashKey::ValueLeft, seed ^ (w / 2) as u128);
            assert_eq!(word, (blk >> (64 * (w % 2))) as u64, "word {w}");
        }
    }

    /// The tiled full-domain expansion agrees with point evaluation for tree depths that
    /// exercise every split into top levels and stages: the tiles must cover the subtrees
    /// exactly once, in point order.
    #[test]
    fn tiled_full_domain_matches_point_evaluation() {
        let mut r = DealerRng::seed_from_u64(5);
        let shapes =
            [(13, 0, 1), (12, 2, 3), (17, 1, 2), (11, 6, 1), (9, 0, 1), (14, 3, 1), (15, 0, 2), (16, 2, 1)];
        for (d, e, kw) in shapes {
            let p = AdpfParams::new(d, 64, kw, e).unwrap();
            let alphas = [0, mask(d), 12345 & mask(d)];
            let betas: Vec<u64> = (0..3 * kw as u64).map(|i| i + 1).collect();
            let (k0, _) = keygen(p, &alphas, &betas, &mut r).unwrap();
            let full = k0.full_domain(0..3).unwrap();
            let xs: Vec<u64> = (0..1u64 << d).step_by(97).chain([mask(d)]).collect();
            let kwu = kw as usize;
            for g in 0..3 {
                let idx = vec![g as u32; xs.len()];
                let mut y = vec![0u64; xs.len() * kwu];
                k0.eval_indexed(&idx, &xs, &mut y).unwrap();
                for (j, &x) in xs.iter().enumerate() {
                    let at = (g << d) * kwu + x as usize * kwu;
                    assert_eq!(&full[at..at + kwu], &y[j * kwu..(j + 1) * kwu], "d={d} e={e} g={g} x={x}");
                }
            }
        }
    }
}
