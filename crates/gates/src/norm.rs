//! SIGMA's normalisations (`SlothLayerNorm`, `SlothRMSNorm`) with public gain and bias, and
//! the row sum of squares they use.
//!
//! LayerNorm: mean by an exact shift (4 rounds), sum of squares (1), reciprocal square root
//! (5), product and truncation (1 + 2), gain and bias (local, public) and truncation (2):
//! **15 rounds** (SIGMA's CPU build multiplies by a secret-shared gain, one round more).
//! RMSNorm: the same without the mean: **11 rounds**.

use std::sync::Arc;

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party};

use crate::arith::{Mul, MulKey};
use crate::centre::{CentredSumSq, CentredSumSqKey};
use crate::dealer::{random_words, share};
use crate::error::{GateError, check_len};
use crate::gain::{DeferredGain, DeferredGainKey};
use crate::gate::{Gate, KeyPair};
use crate::keyio::{GateKey, get_words, key_debug, put_words};
use crate::kit::{check_inputs, check_party, party_term};
use crate::online::Ctx;
use crate::shift::{ArsSlack, ArsSlackKey};
use crate::unary::{KeyOf, SigmaRsqrt, SigmaShift, UnaryFamily};

/// `V_i = Σ_j x_ij²` over the rows of a `rows × cols` matrix: each party sums its shares of
/// the squares before the one opening per row. One round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SumSq {
    /// Ring width.
    pub bits: u32,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
}

/// A party's [`SumSq`] key: shares of every input mask and of `Σ_j r_j² + r_out` per row.
#[derive(Clone, PartialEq, Eq)]
pub struct SumSqKey {
    party: Party,
    bits: u32,
    r: Vec<u64>,
    c: Vec<u64>,
}
fss::wipe_on_drop!(SumSqKey { wipe: [r, c], zeroize: [] });
key_debug!(SumSqKey);

impl GateKey for SumSqKey {
    type Shape = SumSq;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        put_words(w, &self.r, self.bits);
        put_words(w, &self.c, self.bits);
    }

    fn read(s: &SumSq, party: Party, r: &mut BitReader<'_>) -> Result<SumSqKey, DecodeError> {
        let rr = get_words(r, s.rows * s.cols, s.bits)?;
        let c = get_words(r, s.rows, s.bits)?;
        Ok(SumSqKey { party, bits: s.bits, r: rr, c })
    }
}

impl SumSq {
    /// Deal keys for input masks `r` and output masks `rout` (one per row).
    ///
    /// # Errors
    /// [`GateError::Length`] on bad lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(SumSqKey, SumSqKey), GateError> {
        check_len("sum-of-squares masks", self.rows * self.cols, r.len())?;
        check_len("sum-of-squares output masks", self.rows, rout.len())?;
        let c: Vec<u64> = r
            .chunks(self.cols.max(1))
            .zip(rout)
            .map(|(row, &o)| row.iter().fold(o, |s, &v| s.wrapping_add(v.wrapping_mul(v))) & mask(self.bits))
            .collect();
        let (r0, r1) = share(rng, r, self.bits);
        let (c0, c1) = share(rng, &c, self.bits);
        let bits = self.bits;
        Ok((
            SumSqKey { party: Party::P0, bits, r: r0, c: c0 },
            SumSqKey { party: Party::P1, bits, r: r1, c: c1 },
        ))
    }

    /// The masked row sums (one round).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &SumSqKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let own = party_term(ctx.party());
        let shares: Vec<u64> = (0..self.rows)
            .map(|i| {
                let row = i * self.cols..(i + 1) * self.cols;
                let s = xh[row.clone()].iter().zip(&key.r[row]).fold(key.c[i], |s, (&x, &r)| {
                    s.wrapping_add(own * x.wrapping_mul(x)).wrapping_sub(x.wrapping_mul(r).wrapping_mul(2))
                });
                s & mask(self.bits)
            })
            .collect();
        ctx.open(&shares, self.bits).await
    }
}

impl Gate for SumSq {
    type Key = SumSqKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.bits]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.rows * self.cols]
    }

    fn output_bits(&self) -> u32 {
        self.bits
    }

    fn output_len(&self) -> usize {
        self.rows
    }

    fn key_shape(&self) -> SumSq {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(SumSqKey, SumSqKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        self.deal(masks_in[0], mask_out, rng)
    }

    async fn eval(&self, ctx: &Ctx, key: &SumSqKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        self.run(ctx, key, inputs[0]).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        inputs[0]
            .chunks(self.cols.max(1))
            .map(|row| row.iter().fold(0u64, |s, &v| s.wrapping_add(v.wrapping_mul(v))) & mask(self.bits))
            .collect()
    }
}

/// Row-wise LayerNorm (`normalize` = true) or RMSNorm (false) of a `rows × cols` matrix at
/// scale `s`, with a public gain `γ` (scale `s`) and, for LayerNorm, bias `β` (scale `2s`):
/// `y = ⌊(γ·⌊(x − μ)·ρ / 2^s⌋ + β) / 2^s⌋`, `ρ ≈ 2^s / σ`.
///
/// The mean's exact shift and the reciprocal square root come from the families `M` and
/// `Q`: SIGMA's protocols by default, compiled specs in the FuseFSS composite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Norm<M = SigmaShift, Q = SigmaRsqrt> {
    /// Ring width.
    pub bits: u32,
    /// Fixed-point scale.
    pub scale: u32,
    /// Rows.
    pub rows: usize,
    /// Columns (the normalised dimension).
    pub cols: usize,
    /// Subtract the row mean (LayerNorm) or not (RMSNorm).
    pub normalize: bool,
    /// Gain, `cols` words at scale `s`.
    pub gamma: Arc<[u64]>,
    /// Bias, `cols` words at scale `2s` (ignored for RMSNorm).
    pub beta: Arc<[u64]>,
    /// `⌊x / 2^k⌋` of a signed row sum, `k` = [`Norm::mean_shift`].
    pub mean: M,
    /// `2^{s+e}/√(v/cols)` for a sum of squares `v` at scale `2s`, `e` =
    /// [`Norm::rsqrt_extra`].
    pub rsqrt: Q,
    /// Extra fractional bits of the reciprocal square root (0 for SIGMA): the product
    /// `x·(1/σ)` is truncated by `s + e`. A row with one very large channel (an LLM's
    /// attention sink, `σ ≈ 10^3`) has `1/σ` of only a few ulps at scale `s`.
    pub rsqrt_extra: u32,
    /// Run the gain between the two truncations with the first's carry deferred
    /// ([`DeferredGain`], FuseFSS: one round and one opening less; SIGMA: false).
    pub defer_gain: bool,
    /// Open the mean and the centred rows' sums of squares in one round ([`CentredSumSq`],
    /// FuseFSS LayerNorm; SIGMA: false; RMSNorm has no mean).
    pub centred_sum_sq: bool,
    /// Ring of the product `x·(1/σ)` as it is opened: `bits`, or fewer where the reciprocal
    /// square root bounds it ([`Norm::with_product_bits`]).
    pub product_bits: u32,
}

/// A party's [`Norm`] key (its parts zeroize themselves).
pub struct NormKey<M: UnaryFamily, Q: UnaryFamily> {
    party: Party,
    front: NormFront<M>,
    tail: NormTailKey<Q>,
}

/// The keys of a normalisation up to its sum of squares: the mean's shift (LayerNorm) and
/// the sum of squares, separate or in one round ([`Norm::centred_sum_sq`]).
enum NormFront<M: UnaryFamily> {
    Separate { mean: Option<KeyOf<M>>, sumsq: SumSqKey },
    Centred(Box<CentredSumSqKey>),
}

/// The keys of a normalisation after its sum of squares: `1/σ`, the product `x·(1/σ)` and
/// the two truncations around the gain ([`Norm::deal_tail`]).
pub struct NormTailKey<Q: UnaryFamily> {
    rsqrt: KeyOf<Q>,
    mul: MulKey,
    gain: GainKey,
}

/// The keys of the two truncations around the gain: separate, or with the first's carry
/// deferred ([`Norm::defer_gain`]).
enum GainKey {
    Separate(ArsSlackKey, ArsSlackKey),
    Deferred(DeferredGainKey),
}

impl<M: UnaryFamily, Q: UnaryFamily> std::fmt::Debug for NormKey<M, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NormKey").field("party", &self.party).finish_non_exhaustive()
    }
}

impl<Q: UnaryFamily> NormTailKey<Q> {
    pub(crate) fn write(&self, w: &mut BitWriter) {
        self.rsqrt.write(w);
        self.mul.write(w);
        match &self.gain {
            GainKey::Separate(a, b) => {
                a.write(w);
                b.write(w);
            }
            GainKey::Deferred(k) => k.write(w),
        }
    }

    pub(crate) fn read<M: UnaryFamily>(
        s: &Norm<M, Q>,
        party: Party,
        r: &mut BitReader<'_>,
    ) -> Result<NormTailKey<Q>, DecodeError> {
        let bad = |_| DecodeError::InvalidField("norm shape");
        Ok(NormTailKey {
            rsqrt: KeyOf::<Q>::read(&s.rsqrt_gate().map_err(bad)?.key_shape(), party, r)?,
            mul: MulKey::read(&s.mul(), party, r)?,
            gain: if s.defer_gain {
                GainKey::Deferred(DeferredGainKey::read(&s.gain(), party, r)?)
            } else {
                GainKey::Separate(
                    ArsSlackKey::read(&s.ars1(), party, r)?,
                    ArsSlackKey::read(&s.ars(), party, r)?,
                )
            },
        })
    }
}

impl<M: UnaryFamily, Q: UnaryFamily> GateKey for NormKey<M, Q> {
    type Shape = Norm<M, Q>;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        match &self.front {
            NormFront::Separate { mean, sumsq } => {
                if let Some(m) = mean {
                    m.write(w);
                }
                sumsq.write(w);
            }
            NormFront::Centred(k) => k.write(w),
        }
        self.tail.write(w);
    }

    fn read(s: &Norm<M, Q>, party: Party, r: &mut BitReader<'_>) -> Result<NormKey<M, Q>, DecodeError> {
        let bad = |_| DecodeError::InvalidField("norm shape");
        let front = if s.fused_front() {
            NormFront::Centred(Box::new(s.centred().read(party, r)?))
        } else {
            let mean = if s.normalize {
                Some(KeyOf::<M>::read(&s.mean_gate().map_err(bad)?.key_shape(), party, r)?)
            } else {
                None
            };
            NormFront::Separate { mean, sumsq: SumSqKey::read(&s.sumsq(), party, r)? }
        };
        Ok(NormKey { party, front, tail: NormTailKey::read(s, party, r)? })
    }
}

impl Norm {
    /// SIGMA's LayerNorm with public `gamma` (scale s) and `beta` (scale 2s).
    ///
    /// # Errors
    /// [`GateError::Params`] if the parameter vectors do not have `cols` entries.
    pub fn layer_norm(
        bits: u32,
        scale: u32,
        rows: usize,
        cols: usize,
        gamma: Arc<[u64]>,
        beta: Arc<[u64]>,
    ) -> Result<Norm, GateError> {
        let mean = SigmaShift { bits, shift: Norm::mean_shift(scale, cols) };
        let rsqrt = SigmaRsqrt { bits, scale, d: cols as u64 };
        Norm::with(bits, scale, rows, cols, true, gamma, beta, mean, rsqrt)
    }

    /// SIGMA's RMSNorm with public `gamma` (scale s).
    ///
    /// # Errors
    /// [`GateError::Params`] if `gamma` does not have `cols` entries.
    pub fn rms_norm(
        bits: u32,
        scale: u32,
        rows: usize,
        cols: usize,
        gamma: Arc<[u64]>,
    ) -> Result<Norm, GateError> {
        let beta: Arc<[u64]> = vec![0; cols].into();
        let mean = SigmaShift { bits, shift: Norm::mean_shift(scale, cols) };
        let rsqrt = SigmaRsqrt { bits, scale, d: cols as u64 };
        Norm::with(bits, scale, rows, cols, false, gamma, beta, mean, rsqrt)
    }

    /// The shift of the row mean: `log2 cols` for a power of two, else `scale` (the sum is
    /// first multiplied by `⌊2^scale / cols⌋`); at least 1.
    pub fn mean_shift(scale: u32, cols: usize) -> u32 {
        let k = if cols.is_power_of_two() { cols.trailing_zeros() } else { scale };
        k.max(1)
    }
}

impl<M: UnaryFamily, Q: UnaryFamily> Norm<M, Q> {
    /// A normalisation with the given mean shift and reciprocal square root.
    ///
    /// # Errors
    /// [`GateError::Params`] if the parameter vectors do not have `cols` entries.
    #[allow(clippy::too_many_arguments)]
    pub fn with(
        bits: u32,
        scale: u32,
        rows: usize,
        cols: usize,
        normalize: bool,
        gamma: Arc<[u64]>,
        beta: Arc<[u64]>,
        mean: M,
        rsqrt: Q,
    ) -> Result<Norm<M, Q>, GateError> {
        let n = Norm {
            bits,
            scale,
            rows,
            cols,
            normalize,
            gamma,
            beta,
            mean,
            rsqrt,
            rsqrt_extra: 0,
            defer_gain: false,
            centred_sum_sq: false,
            product_bits: bits,
        };
        n.check()?;
        Ok(n)
    }

    /// The same with a reciprocal square root that has `extra` more fractional bits (it
    /// must compute `2^{s+extra}/√(v/cols)`).
    pub fn with_rsqrt_extra(self, extra: u32) -> Norm<M, Q> {
        Norm { rsqrt_extra: extra, ..self }
    }

    /// The same with LayerNorm's mean and sum of squares as one [`CentredSumSq`] (or not;
    /// RMSNorm has no mean and ignores it).
    pub fn with_centred_sum_sq(self, on: bool) -> Norm<M, Q> {
        Norm { centred_sum_sq: on, ..self }
    }

    fn fused_front(&self) -> bool {
        self.centred_sum_sq && self.normalize
    }

    /// The mean's shift and the centred sum of squares in one round.
    fn centred(&self) -> CentredSumSq {
        let (f, k) = self.mean_factor();
        let doubled = if k == 0 { 2 } else { 1 };
        CentredSumSq {
            bits: self.bits,
            shift: Norm::mean_shift(self.scale, self.cols),
            factor: f * doubled,
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// The same with the gain's truncations as one [`DeferredGain`] (or not).
    ///
    /// # Errors
    /// [`GateError::Params`] if the widths do not allow it (`n − s − e < s`).
    pub fn with_deferred_gain(self, on: bool) -> Result<Norm<M, Q>, GateError> {
        let n = Norm { defer_gain: on, ..self };
        n.check()?;
        Ok(n)
    }

    /// The same with the product `x·(1/σ)` opened in `Z_{2^k}` (FuseFSS): the deferred gain
    /// reads it there and lifts it back, exact as long as `|x·(1/σ)| < 2^{k−2}`. The
    /// caller vouches for that bound (`composite::norm_product_bits` reads it off a compiled
    /// `1/σ` grid: `|x_j| ≤ √v` for a row's sum of squares `v`); `k` = `bits` is the default.
    ///
    /// # Errors
    /// [`GateError::Params`] without the deferred gain or for widths it does not hold at.
    pub fn with_product_bits(self, k: u32) -> Result<Norm<M, Q>, GateError> {
        if k != self.bits && !self.defer_gain {
            return Err(GateError::Params("a narrow product needs the deferred gain".into()));
        }
        let n = Norm { product_bits: k, ..self };
        n.check()?;
        Ok(n)
    }

    fn check(&self) -> Result<(), GateError> {
        if self.product_bits > self.bits || (self.product_bits != self.bits && !self.defer_gain) {
            return Err(GateError::Params(format!(
                "norm product on {} of {} bits",
                self.product_bits, self.bits
            )));
        }
        check_len("gamma", self.cols, self.gamma.len())?;
        check_len("beta", self.cols, self.beta.len())?;
        if self.cols == 0 || self.bits < 2 * self.scale + 4 {
            return Err(GateError::Params(format!("norm over {} columns on {} bits", self.cols, self.bits)));
        }
        if self.defer_gain {
            self.gain().check()?;
        }
        Ok(())
    }

    /// The mean is `⌊S / 2^{log2 cols}⌋` for a power of two, else `⌊S·⌊2^s/cols⌋ / 2^s⌋`.
    fn mean_factor(&self) -> (u64, u32) {
        if self.cols.is_power_of_two() {
            (1, self.cols.trailing_zeros())
        } else {
            ((1u64 << self.scale) / self.cols as u64, self.scale)
        }
    }

    fn mean_gate(&self) -> Result<M::Gate, GateError> {
        self.mean.gate(self.rows)
    }

    fn sumsq(&self) -> SumSq {
        SumSq { bits: self.bits, rows: self.rows, cols: self.cols }
    }

    fn rsqrt_gate(&self) -> Result<Q::Gate, GateError> {
        self.rsqrt.gate(self.rows)
    }

    fn mul(&self) -> Mul {
        Mul { bits: self.product_bits, len: self.rows * self.cols }
    }

    /// Both truncations around the gain, the first's carry deferred.
    fn gain(&self) -> DeferredGain {
        let beta = if self.normalize { self.beta.clone() } else { vec![0; self.cols].into() };
        DeferredGain {
            bits: self.bits,
            in_bits: self.product_bits,
            s1: self.scale + self.rsqrt_extra,
            s2: self.scale,
            len: self.rows * self.cols,
            gamma: self.gamma.clone(),
            beta,
        }
    }

    /// The truncation of `x·(1/σ)`.
    fn ars1(&self) -> ArsSlack {
        ArsSlack { shift: self.scale + self.rsqrt_extra, ..self.ars() }
    }

    fn ars(&self) -> ArsSlack {
        ArsSlack { bits: self.bits, shift: self.scale, out_bits: self.bits, len: self.rows * self.cols }
    }

    fn row_sums(&self, v: &[u64]) -> Vec<u64> {
        let (f, _) = self.mean_factor();
        // A one-column "mean" shift by 0 is done as a shift by 1 of the doubled sum.
        let scale = if self.mean_factor().1 == 0 { 2 } else { 1 };
        v.chunks(self.cols)
            .map(|row| {
                row.iter().fold(0u64, |s, &x| s.wrapping_add(x)).wrapping_mul(f * scale) & mask(self.bits)
            })
            .collect()
    }

    fn centre(&self, x: &[u64], mu: &[u64]) -> Vec<u64> {
        x.iter().enumerate().map(|(i, &v)| v.wrapping_sub(mu[i / self.cols]) & mask(self.bits)).collect()
    }

    fn broadcast(&self, rows: &[u64]) -> Vec<u64> {
        (0..self.rows * self.cols).map(|i| rows[i / self.cols]).collect()
    }

    fn affine(&self, u: &[u64], with_bias: bool) -> Vec<u64> {
        u.iter()
            .enumerate()
            .map(|(i, &v)| {
                let j = i % self.cols;
                let b = if with_bias && self.normalize { self.beta[j] } else { 0 };
                v.wrapping_mul(self.gamma[j]).wrapping_add(b) & mask(self.bits)
            })
            .collect()
    }

    /// Deal keys for input masks `r` and output masks `rout`.
    ///
    /// # Errors
    /// [`GateError`] on bad parameters or lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<KeyPair<NormKey<M, Q>>, GateError> {
        self.check()?;
        let (b, rows) = (self.bits, self.rows);
        if self.fused_front() {
            let rmu = random_words(rng, rows, b);
            let rv = random_words(rng, rows, b);
            let (f0, f1) = self.centred().deal(r, &rmu, &rv, rng)?;
            let rt = self.centre(r, &rmu);
            let (t0, t1) = self.deal_tail(&rt, &rv, rout, rng)?;
            return Ok((
                NormKey { party: Party::P0, front: NormFront::Centred(Box::new(f0)), tail: t0 },
                NormKey { party: Party::P1, front: NormFront::Centred(Box::new(f1)), tail: t1 },
            ));
        }
        let (mean, rt) = if self.normalize {
            let rmu = random_words(rng, rows, b);
            let (m0, m1) = self.mean_gate()?.keygen(&[&self.row_sums(r)], &rmu, rng)?;
            (Some((m0, m1)), self.centre(r, &rmu))
        } else {
            (None, r.to_vec())
        };
        let rv = random_words(rng, rows, b);
        let (s0, s1) = self.sumsq().deal(&rt, &rv, rng)?;
        let (t0, t1) = self.deal_tail(&rt, &rv, rout, rng)?;
        let (mean0, mean1) = match mean {
            Some((m0, m1)) => (Some(m0), Some(m1)),
            None => (None, None),
        };
        Ok((
            NormKey { party: Party::P0, front: NormFront::Separate { mean: mean0, sumsq: s0 }, tail: t0 },
            NormKey { party: Party::P1, front: NormFront::Separate { mean: mean1, sumsq: s1 }, tail: t1 },
        ))
    }

    /// Deal the keys after the sum of squares, for the (centred) input's masks `rt`, the
    /// masks `rv` of the opened row sums of squares and the output masks `rout`.
    ///
    /// # Errors
    /// [`GateError`] on bad parameters or lengths.
    pub(crate) fn deal_tail<R: SplitRng + ?Sized>(
        &self,
        rt: &[u64],
        rv: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<KeyPair<NormTailKey<Q>>, GateError> {
        let (b, rows) = (self.bits, self.rows);
        let rrho = random_words(rng, rows, b);
        let (q0, q1) = self.rsqrt_gate()?.keygen(&[rv], &rrho, rng)?;
        let rz = random_words(rng, rows * self.cols, self.product_bits);
        let (p0, p1) = self.mul().keygen(&[rt, &self.broadcast(&rrho)], &rz, rng)?;
        let (g0, g1) = if self.defer_gain {
            let (g0, g1) = self.gain().deal(&rz, rout, rng)?;
            (GainKey::Deferred(g0), GainKey::Deferred(g1))
        } else {
            let ru = random_words(rng, rows * self.cols, b);
            let (a0, a1) = self.ars1().deal(&rz, &ru, rng)?;
            let (c0, c1) = self.ars().deal(&self.affine(&ru, false), rout, rng)?;
            (GainKey::Separate(a0, c0), GainKey::Separate(a1, c1))
        };
        Ok((NormTailKey { rsqrt: q0, mul: p0, gain: g0 }, NormTailKey { rsqrt: q1, mul: p1, gain: g1 }))
    }

    /// The masked output.
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &NormKey<M, Q>, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.check()?;
        let (t, v) = match (&key.front, self.fused_front()) {
            (NormFront::Centred(k), true) => {
                let (mu, v) = self.centred().run(ctx, k, xh).await?;
                (self.centre(xh, &mu), v)
            }
            (NormFront::Separate { mean, sumsq }, false) => {
                let t = match mean {
                    Some(k) => {
                        let mu = self.mean_gate()?.eval(ctx, k, &[&self.row_sums(xh)]).await?;
                        self.centre(xh, &mu)
                    }
                    None => xh.to_vec(),
                };
                let v = self.sumsq().run(ctx, sumsq, &t).await?;
                (t, v)
            }
            _ => return Err(GateError::KeyMismatch("a normalisation key for the other mean protocol")),
        };
        self.run_tail(ctx, &key.tail, &t, &v).await
    }

    /// The masked output from the (centred) masked input `t` and the masked row sums of
    /// squares `v`.
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub(crate) async fn run_tail(
        &self,
        ctx: &Ctx,
        key: &NormTailKey<Q>,
        t: &[u64],
        v: &[u64],
    ) -> Result<Vec<u64>, GateError> {
        let rho = self.rsqrt_gate()?.eval(ctx, &key.rsqrt, &[v]).await?;
        let z = self.mul().eval(ctx, &key.mul, &[t, &self.broadcast(&rho)]).await?;
        if matches!(key.gain, GainKey::Deferred(_)) != self.defer_gain {
            return Err(GateError::KeyMismatch("a normalisation key for the other gain protocol"));
        }
        match &key.gain {
            GainKey::Separate(a, c) => {
                let u = self.ars1().run(ctx, a, &z).await?;
                self.ars().run(ctx, c, &self.affine(&u, true)).await
            }
            GainKey::Deferred(k) => self.gain().run(ctx, k, &z).await,
        }
    }

    /// The plaintext result.
    ///
    /// # Panics
    /// If the shape is invalid (checked by `keygen` and `eval` first).
    pub fn plain(&self, x: &[u64]) -> Vec<u64> {
        let t = if self.normalize {
            let mu = self.mean_gate().expect("checked shape").reference(&[&self.row_sums(x)]);
            self.centre(x, &mu)
        } else {
            x.to_vec()
        };
        let v = self.sumsq().reference(&[&t]);
        let rho = self.rsqrt_gate().expect("checked shape").reference(&[&v]);
        let z: Vec<u64> =
            t.iter().zip(self.broadcast(&rho)).map(|(&a, b)| a.wrapping_mul(b) & mask(self.bits)).collect();
        let ars1 = ArsSlack { len: 1, ..self.ars1() };
        let ars = ArsSlack { len: 1, ..self.ars() };
        let u: Vec<u64> = z.iter().map(|&v| ars1.reference(&[&[v]])[0]).collect();
        self.affine(&u, true).iter().map(|&v| ars.reference(&[&[v]])[0]).collect()
    }
}

impl<M: UnaryFamily, Q: UnaryFamily> Gate for Norm<M, Q> {
    type Key = NormKey<M, Q>;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.bits]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.rows * self.cols]
    }

    fn output_bits(&self) -> u32 {
        self.bits
    }

    fn output_len(&self) -> usize {
        self.rows * self.cols
    }

    fn key_shape(&self) -> Norm<M, Q> {
        self.clone()
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<KeyPair<NormKey<M, Q>>, GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output mask", self.rows * self.cols, mask_out.len())?;
        self.deal(masks_in[0], mask_out, rng)
    }

    async fn eval(&self, ctx: &Ctx, key: &NormKey<M, Q>, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        self.run(ctx, key, inputs[0]).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        self.plain(inputs[0])
    }
}
