//! Distributed point function with `ℓ`-bit output (BGI16; docs/design/fss-building-blocks.md §3).
//!
//! `f_{α,β}(x) = β if x = α else 0`, `α ∈ {0,1}^n`, `β ∈ Z_{2^ℓ}`. The two keys'
//! evaluations are additive shares of `f(x)` mod `2^ℓ`.
//!
//! Key: root seed, `n` levels of (seed CW, two control-bit CWs), final CW:
//! `λ + n(λ + 2) + ℓ` bits. Eval: `n` AES; Gen: `4n` AES; full domain: `2(2^n − 1)` AES.
//!
//! The leaf conversion turns the last seed into an output word. Seeds have bit 0 cleared (it
//! is the control bit), so the reference model's "low `ℓ` bits of the seed" makes the final
//! correction word reveal `β mod 2`. The default [`Conversion::Shifted`] reads bits `1..=ℓ`
//! instead, which are all uniform; [`Conversion::LowBits`] reproduces `fss-kat.txt` and is
//! only for public `β`.

use crate::codec::{self, BitReader, BitWriter, Header, KeyKind};
use crate::error::{DecodeError, FssError};
use crate::prg::{AesBlock, HashKey, Prg, pad};
use crate::ring::mask;
use crate::rng::{CryptoRng, random_roots};
use crate::share::{AddShare, Party};
use crate::tree::{DealerTrees, ROOT_BITS, TreeKeys, check_keys, path_bit};
use crate::walk::{self, Walk};

/// Largest domain [`DpfKeys::full_domain`] expands (`2^24` outputs).
pub const MAX_FULL_DOMAIN_BITS: u32 = 24;

/// How a leaf seed becomes an `ℓ`-bit output word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Conversion {
    /// Bits `1..=ℓ` of the seed: uniformly random, hides every bit of `β` (the default).
    #[default]
    Shifted,
    /// Bits `0..ℓ` of the seed, the convention of docs/design/fss-building-blocks.md §2.2 and its known
    /// answers. Bit 0 is always 0, so the key reveals `β mod 2`: use only when `β` is public.
    LowBits,
}

impl Conversion {
    #[inline(always)]
    fn apply(self, seed: u128) -> u64 {
        match self {
            Conversion::Shifted => (seed >> 1) as u64,
            Conversion::LowBits => seed as u64,
        }
    }
}

/// Shape of a DPF: input width `n`, output width `ℓ` and the leaf conversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DpfParams {
    domain_bits: u32,
    out_bits: u32,
    conversion: Conversion,
}

impl DpfParams {
    /// A DPF on `n = domain_bits` input bits with output in `Z_{2^ℓ}`, `ℓ = out_bits`.
    ///
    /// # Errors
    /// [`FssError::InvalidWidth`] unless both widths are in `1..=64`.
    pub fn new(domain_bits: u32, out_bits: u32) -> Result<DpfParams, FssError> {
        for b in [domain_bits, out_bits] {
            if !(1..=64).contains(&b) {
                return Err(FssError::InvalidWidth(b));
            }
        }
        Ok(DpfParams { domain_bits, out_bits, conversion: Conversion::default() })
    }

    /// The same shape with another leaf conversion.
    pub fn with_conversion(self, conversion: Conversion) -> DpfParams {
        DpfParams { conversion, ..self }
    }

    /// The leaf conversion.
    pub fn conversion(self) -> Conversion {
        self.conversion
    }

    /// Input width `n`.
    pub fn domain_bits(self) -> u32 {
        self.domain_bits
    }

    /// Output width `ℓ`.
    pub fn out_bits(self) -> u32 {
        self.out_bits
    }

    /// One party's key material per key, in bits: `λ + n(λ + 2) + ℓ`.
    pub fn key_bits(self) -> u64 {
        TreeKeys::key_bits(self.domain_bits) + self.out_bits as u64
    }

    /// AES blocks per point evaluation (`n`).
    pub fn aes_per_eval(self) -> u64 {
        self.domain_bits as u64
    }
}

/// One party's keys for a batch of point functions of one shape. `Debug` shows only the
/// shape; the material is zeroized on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct DpfKeys {
    params: DpfParams,
    party: Party,
    tree: TreeKeys,
    fcw: Vec<u64>,
}

crate::wipe_on_drop!(DpfKeys { wipe: [fcw], zeroize: [tree] });

impl std::fmt::Debug for DpfKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpfKeys")
            .field("params", &self.params)
            .field("party", &self.party)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// Deal both parties' keys for `f_{α_i, β_i}`, all levels of all keys in lockstep (AES on
/// `2·len` blocks per call).
///
/// # Errors
/// [`FssError::LengthMismatch`] if the slices differ in length, [`FssError::PointOutOfDomain`]
/// or [`FssError::ValueOutOfRange`] if some `α` or `β` does not fit.
pub fn keygen<R: CryptoRng + ?Sized>(
    params: DpfParams,
    alphas: &[u64],
    betas: &[u64],
    rng: &mut R,
) -> Result<(DpfKeys, DpfKeys), FssError> {
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
    params: DpfParams,
    alphas: &[u64],
    betas: &[u64],
    roots: Vec<u128>,
) -> Result<(DpfKeys, DpfKeys), FssError> {
    let m = alphas.len();
    walk::check_len(m, betas.len())?;
    walk::check_len(2 * m, roots.len())?;
    walk::check_points(alphas, params.domain_bits)?;
    if let Some(&b) = betas.iter().find(|&&b| b & !mask(params.out_bits) != 0) {
        return Err(FssError::ValueOutOfRange { value: b, bits: params.out_bits });
    }
    let n = params.domain_bits;
    let prg = Prg::global();
    let mut trees = DealerTrees::new(roots, n);
    for i in 0..n {
        trees.expand(prg);
        trees.step(i, |k| path_bit(alphas[k], n, i));
    }
    let conv = |s| params.conversion.apply(s);
    let fcw: Vec<u64> = (0..m)
        .map(|k| {
            let (s0, s1) = (trees.seed(2 * k), trees.seed(2 * k + 1));
            let diff = betas[k].wrapping_sub(conv(s0)).wrapping_add(conv(s1));
            (if trees.t[2 * k + 1] == 1 { diff.wrapping_neg() } else { diff }) & mask(params.out_bits)
        })
        .collect();
    let (t0, t1) = trees.into_keys();
    let key = |party, tree| DpfKeys { params, party, tree, fcw: fcw.clone() };
    Ok((key(Party::P0, t0), key(Party::P1, t1)))
}

impl DpfKeys {
    /// The keys' shape.
    pub fn params(&self) -> DpfParams {
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
    pub fn slice(&self, start: usize, end: usize) -> DpfKeys {
        DpfKeys {
            params: self.params,
            party: self.party,
            tree: self.tree.slice(start, end),
            fcw: self.fcw[start..end].to_vec(),
        }
    }

    /// Evaluate key `i` at `points[i]`, for every key: this party's shares of `f_i(x_i)`.
    /// Level by level over the batch; split across the rayon pool above
    /// [`walk::CHUNK`] keys.
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`] or [`FssError::PointOutOfDomain`].
    pub fn eval(&self, points: &[u64], out: &mut [AddShare]) -> Result<(), FssError> {
        walk::check_len(self.len(), points.len())?;
        self.eval_lanes(None, points, out)
    }

    /// Evaluate key `keys[j]` at `points[j]` for every lane `j` (a key may appear in many
    /// lanes: one key at many points).
    ///
    /// # Errors
    /// [`FssError::LengthMismatch`], [`FssError::PointOutOfDomain`], or
    /// [`FssError::InvalidParams`] for a key index out of range.
    pub fn eval_indexed(&self, keys: &[u32], points: &[u64], out: &mut [AddShare]) -> Result<(), FssError> {
        walk::check_len(keys.len(), points.len())?;
        walk::check_indices(keys, self.len())?;
        self.eval_lanes(Some(keys), points, out)
    }

    /// Evaluate key `i` at one point (slow path; batch with [`DpfKeys::eval_indexed`]).
    ///
    /// # Errors
    /// As [`DpfKeys::eval_indexed`].
    pub fn eval_one(&self, i: usize, x: u64) -> Result<AddShare, FssError> {
        let mut out = [AddShare::default()];
        self.eval_indexed(&[walk::index(i, self.len())?], &[x], &mut out)?;
        Ok(out[0])
    }

    fn eval_lanes(&self, keys: Option<&[u32]>, points: &[u64], out: &mut [AddShare]) -> Result<(), FssError> {
        walk::check_len(points.len(), out.len())?;
        walk::check_points(points, self.params.domain_bits)?;
        walk::run_chunks(keys, points, out, 1, |map, pts, o| match map {
            walk::KeyMap::Offset(off) => self.eval_chunk(|k| off + k, pts, o),
            walk::KeyMap::Indexed(ix) => self.eval_chunk(|k| ix[k] as usize, pts, o),
        });
        Ok(())
    }

    fn eval_chunk(&self, key: impl Fn(usize) -> usize, points: &[u64], out: &mut [AddShare]) {
        let n = self.params.domain_bits;
        let m = points.len();
        let mut w = Walk::new(m, |k| self.tree.roots[key(k)], self.party.bit());
        w.descend_levels::<false>(&self.tree, 0..n, &key, points, n);
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.output(key(k), w.seed(k), (w.t[k] & 1) as u8);
        }
    }

    /// The output share from a leaf seed and control bit.
    #[inline(always)]
    fn output(&self, k: usize, seed: u128, t: u8) -> AddShare {
        let y = self.params.conversion.apply(seed).wrapping_add(self.fcw[k] & (t as u64).wrapping_neg());
        AddShare(self.party.signed(y) & mask(self.params.out_bits))
    }

    /// Evaluate keys `keys` at every point of the domain: `out[(i − keys.start)·2^n + x]` is
    /// this party's share of `f_i(x)`. `2(2^n − 1)` AES per key, the keys expanded together
    /// level by level (and in chunks on the rayon pool).
    ///
    /// # Errors
    /// [`FssError::DomainTooLarge`] if `n > MAX_FULL_DOMAIN_BITS`, [`FssError::InvalidParams`]
    /// if the range is out of bounds.
    pub fn full_domain(&self, keys: std::ops::Range<usize>) -> Result<Vec<AddShare>, FssError> {
        let n = self.params.domain_bits;
        if n > MAX_FULL_DOMAIN_BITS {
            return Err(FssError::DomainTooLarge { bits: n, max: MAX_FULL_DOMAIN_BITS });
        }
        walk::check_range(&keys, self.len())?;
        let mut out = vec![AddShare::default(); keys.len() << n];
        let per_chunk = walk::full_domain_chunk(n);
        walk::par_chunks(&mut out, per_chunk << n, |c, o| {
            let start = keys.start + c * per_chunk;
            SCRATCH.with_borrow_mut(|scratch| {
                let leaves = expand_full(scratch, &self.tree, start..start + (o.len() >> n), self.party, n);
                let ell = mask(self.params.out_bits);
                let shifted = self.params.conversion == Conversion::Shifted;
                let rows = o.chunks_mut(1 << n).zip(leaves.lo.chunks(1 << n).zip(leaves.hi.chunks(1 << n)));
                for (g, (row, (lo, hi))) in rows.enumerate() {
                    let fcw = self.fcw[start + g];
                    let t = &leaves.t[g << n..(g + 1) << n];
                    for (((y, &l), &h), &tm) in row.iter_mut().zip(lo).zip(hi).zip(t) {
                        let conv = if shifted { (l >> 1) | (h << 63) } else { l };
                        *y = AddShare(self.party.signed(conv.wrapping_add(fcw & tm)) & ell);
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

    /// Append the raw material of the batch (no envelope) to a bit stream, for containers
    /// that carry their own header and checksum.
    pub fn write_material(&self, w: &mut BitWriter) {
        self.tree.write(w);
        for &f in &self.fcw {
            w.put(f, self.params.out_bits);
        }
    }

    /// Read `count` keys written by [`DpfKeys::write_material`].
    ///
    /// # Errors
    /// [`DecodeError`] if the stream is short or a field is invalid.
    pub fn read_material(
        params: DpfParams,
        party: Party,
        count: usize,
        r: &mut BitReader<'_>,
    ) -> Result<DpfKeys, DecodeError> {
        check_keys(r, count, params.key_bits(), ROOT_BITS)?;
        let tree = TreeKeys::read(r, params.domain_bits, count)?;
        let mut fcw = Vec::new();
        r.get_run(params.out_bits, count, &mut fcw)?;
        Ok(DpfKeys { params, party, tree, fcw })
    }

    /// The standalone, versioned, checksummed encoding (see [`crate::codec`]).
    ///
    /// # Panics
    /// If the batch holds more than `u32::MAX` keys.
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            kind: KeyKind::Dpf,
            party: self.party,
            domain_bits: self.params.domain_bits as u8,
            out_bits: self.params.out_bits as u8,
            payload_words: 1,
            variant: match self.params.conversion {
                Conversion::Shifted => 0,
                Conversion::LowBits => 1,
            },
            count: u32::try_from(self.len()).expect("at most u32::MAX keys per encoding"),
        };
        codec::seal(header, |w| self.write_material(w))
    }

    /// Decode [`DpfKeys::encode`]'s output.
    ///
    /// # Errors
    /// [`DecodeError`] for truncated, corrupted, wrong-version or wrong-kind input.
    pub fn decode(bytes: &[u8]) -> Result<DpfKeys, DecodeError> {
        let (h, material) = codec::open(bytes, KeyKind::Dpf)?;
        let conversion = match h.variant {
            0 => Conversion::Shifted,
            1 => Conversion::LowBits,
            _ => return Err(DecodeError::InvalidField("DPF leaf conversion")),
        };
        let params = DpfParams::new(h.domain_bits as u32, h.out_bits as u32)
            .map_err(|_| DecodeError::InvalidField("DPF widths"))?
            .with_conversion(conversion);
        if h.payload_words != 1 {
            return Err(DecodeError::InvalidField("DPF payload words must be 1"));
        }
        let count = h.count as usize;
        codec::expect_material_len(material, count as u64 * params.key_bits())?;
        let mut r = BitReader::new(material);
        let keys = DpfKeys::read_material(params, h.party, count, &mut r)?;
        r.finish()?;
        Ok(keys)
    }
}

/// Node arrays of a level: seed halves and control masks.
#[derive(Default)]
pub(crate) struct Nodes {
    pub lo: Vec<u64>,
    pub hi: Vec<u64>,
    pub t: Vec<u64>,
}

impl Nodes {
    fn resize(&mut self, len: usize) {
        self.lo.resize(len, 0);
        self.hi.resize(len, 0);
        self.t.resize(len, 0);
    }
}

/// Buffers of a full-domain expansion, kept per thread: fresh multi-megabyte allocations
/// would cost more in page faults than the AES (measured ~15 ns per leaf at n = 16).
#[derive(Default)]
pub(crate) struct ExpandScratch {
    cur: Nodes,
    next: Nodes,
    child: [Nodes; 2],
    sig: Vec<AesBlock>,
    enc: [Vec<AesBlock>; 2],
}

thread_local! {
    pub(crate) static SCRATCH: std::cell::RefCell<ExpandScratch> = std::cell::RefCell::default();
}

/// `out[2j] = a[j]`, `out[2j + 1] = b[j]`.
#[inline(always)]
fn interleave(out: &mut [u64], a: &[u64], b: &[u64]) {
    for ((d, &x), &y) in out.chunks_exact_mut(2).zip(a).zip(b) {
        d[0] = x;
        d[1] = y;
    }
}

/// One direction's children of a run of nodes of one key: `e` holds `AES_{K_c}(σ(s))`,
/// `cw` the level's `(scw_lo, scw_hi, tcw_c)`.
#[inline(never)]
fn children(
    e: &[AesBlock],
    (lo, hi, t): (&[u64], &[u64], &[u64]),
    (scl, sch, tcw): (u64, u64, u64),
    (clo, chi, ct): (&mut [u64], &mut [u64], &mut [u64]),
) {
    let m = e.len();
    let (lo, hi, t, clo, chi, ct) = (&lo[..m], &hi[..m], &t[..m], &mut clo[..m], &mut chi[..m], &mut ct[..m]);
    for j in 0..m {
        let (el, eh) = walk::halves(&e[j]);
        let (al, ah) = (el ^ hi[j], eh ^ hi[j] ^ lo[j]);
        clo[j] = (al & !1) ^ (scl & t[j]);
        chi[j] = ah ^ (sch & t[j]);
        ct[j] = ((al ^ (t[j] & tcw)) & 1).wrapping_neg();
    }
}

/// Expand the trees of keys `keys` over their whole domain of `levels` levels, all keys
/// together level by level (so even small trees fill whole AES batches). Node `J` of a level
/// belongs to key `keys.start + (J >> i)` and has children `2J` and `2J + 1`. Returns the
/// leaves, key-major, in point order.
pub(crate) fn expand_full<'s>(
    scratch: &'s mut ExpandScratch,
    tree: &TreeKeys,
    keys: std::ops::Range<usize>,
    party: Party,
    levels: u32,
) -> &'s Nodes {
    let prg = Prg::global();
    let total = keys.len() << levels;
    let half = pad(total / 2).max(pad(keys.len()));
    let ExpandScratch { cur, next, child, sig, enc } = scratch;
    for v in [&mut *cur, &mut *next] {
        v.resize(total);
    }
    for v in child.iter_mut() {
        v.resize(half);
    }
    sig.resize(half, AesBlock::default());
    for e in enc.iter_mut() {
        e.resize(half, AesBlock::default());
    }
    for (j, &r) in tree.roots[keys.clone()].iter().enumerate() {
        (cur.lo[j], cur.hi[j], cur.t[j]) = (r as u64, (r >> 64) as u64, (party.bit() as u64).wrapping_neg());
    }
    for i in 0..levels {
        let width = keys.len() << i;
        let (lo, hi, t) = (&cur.lo[..width], &cur.hi[..width], &cur.t[..width]);
        for ((s, &l), &h) in sig[..width].iter_mut().zip(lo).zip(hi) {
            *s = walk::block(h, h ^ l);
        }
        let padded = pad(width);
        prg.encrypt(HashKey::Left, &sig[..padded], &mut enc[0][..padded]);
        prg.encrypt(HashKey::Right, &sig[..padded], &mut enc[1][..padded]);
        // Children by direction, then interleaved: simple loops that vectorise.
        let (sl, sh) = tree.scw_level(i);
        let per_key = 1usize << i;
        for (c, ch) in child.iter_mut().enumerate() {
            for (gi, g) in keys.clone().enumerate() {
                let (scl, sch) = (sl[g], sh[g]);
                let tcw = ([tree.tcw_left[g], tree.tcw_right[g]][c] >> i) & 1;
                let r = gi * per_key..(gi + 1) * per_key;
                let parent = (&lo[r.clone()], &hi[r.clone()], &t[r.clone()]);
                let out = (&mut ch.lo[r.clone()], &mut ch.hi[r.clone()], &mut ch.t[r.clone()]);
                children(&enc[c][r], parent, (scl, sch, tcw), out);
            }
        }
        let [c0, c1] = &*child;
        interleave(&mut next.lo[..2 * width], &c0.lo[..width], &c1.lo[..width]);
        interleave(&mut next.hi[..2 * width], &c0.hi[..width], &c1.hi[..width]);
        interleave(&mut next.t[..2 * width], &c0.t[..width], &c1.t[..width]);
        std::mem::swap(cur, next);
    }
    cur
}
