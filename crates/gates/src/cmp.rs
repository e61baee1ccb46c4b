//! Comparisons (SIGMA; docs/design/fss-building-blocks.md §6.2–6.3): DReLU, ReLU, interval tests and the
//! row-max tree. The comparison keys are the early-terminated 1-bit DPF of `fss::bitdpf`,
//! except the one-round ReLU ([`ReluDcf`]), whose sign comes from a DCF.

use fss::bitdpf::{self, BitDpfKeys, BitDpfParams, CmpShares};
use fss::codec::{BitReader, BitWriter};
use fss::dcf::{self, DcfKeys, DcfParams};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{AddShare, DecodeError, Party, XorBit, compare};
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::dealer::{random_words, share, share_bits};
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_bits, get_words, key_debug, put_bits, put_words};
use crate::kit::{check_inputs, check_party, unary};
use crate::online::Ctx;
use crate::select::{Select, SelectKey};

/// `DReLU(x) = 1{x ≥ 0}` for signed `x ∈ Z_{2^bits}`, as a masked bit (SIGMA, §6.2a).
///
/// The sign is `MSB(x̂) ⊕ MSB(−r) ⊕ carry` with `carry = 1{(−x̂ − 1) mod 2^{n−1} < (−r) mod
/// 2^{n−1}}`: one 1-bit DPF on `n − 1` bits at `(−r) mod 2^{n−1}`. One round, one bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drelu {
    /// Ring width `n ≥ 2`.
    pub bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`Drelu`] key: the comparison key and a share of the output correction bit.
#[derive(Clone, PartialEq, Eq)]
pub struct DreluKey {
    party: Party,
    cmp: BitDpfKeys,
    corr: Vec<bool>,
}
fss::wipe_on_drop!(DreluKey { wipe: [corr], zeroize: [cmp] });
key_debug!(DreluKey);

impl GateKey for DreluKey {
    type Shape = Drelu;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.cmp.write_material(w);
        put_bits(w, &self.corr);
    }

    fn read(s: &Drelu, party: Party, r: &mut BitReader<'_>) -> Result<DreluKey, DecodeError> {
        let params = s.cmp_params().map_err(|_| DecodeError::InvalidField("DReLU width"))?;
        let cmp = BitDpfKeys::read_material(params, party, s.len, r)?;
        Ok(DreluKey { party, cmp, corr: get_bits(r, s.len)? })
    }
}

impl Drelu {
    fn cmp_params(&self) -> Result<BitDpfParams, GateError> {
        if self.bits < 2 {
            return Err(GateError::Params(format!("DReLU needs at least 2 bits, got {}", self.bits)));
        }
        Ok(BitDpfParams::new(self.bits - 1)?)
    }

    /// Deal keys for input masks `r` and output bit masks `rout`.
    ///
    /// # Errors
    /// [`GateError`] on mismatched lengths or a width below 2.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(DreluKey, DreluKey), GateError> {
        check_len("DReLU masks", self.len, r.len())?;
        check_len("DReLU output masks", self.len, rout.len())?;
        let (n, h) = (self.bits, mask(self.bits - 1));
        let alphas: Vec<u64> = r.iter().map(|&r| r.wrapping_neg() & h).collect();
        let (k0, k1) = bitdpf::keygen(self.cmp_params()?, &alphas, rng)?;
        let corr: Vec<bool> = r
            .iter()
            .zip(rout)
            .map(|(&r, &o)| ((r.wrapping_neg() >> (n - 1)) & 1 == 0) ^ (o & 1 == 1))
            .collect();
        let (c0, c1) = share_bits(rng, &corr);
        Ok((
            DreluKey { party: Party::P0, cmp: k0, corr: c0 },
            DreluKey { party: Party::P1, cmp: k1, corr: c1 },
        ))
    }

    /// This party's XOR share of the masked output bit (before opening).
    ///
    /// # Errors
    /// [`GateError`] if the masked inputs do not fit the ring.
    pub fn share(&self, party: Party, key: &DreluKey, xh: &[u64]) -> Result<Vec<bool>, GateError> {
        let (n, h) = (self.bits, mask(self.bits - 1));
        let ys: Vec<u64> = xh.iter().map(|&x| x.wrapping_neg().wrapping_sub(1) & h).collect();
        let mut lt = vec![CmpShares::default(); self.len];
        key.cmp.eval(&ys, &mut lt)?;
        Ok((0..self.len)
            .map(|i| {
                let msb = party == Party::P1 && (xh[i] >> (n - 1)) & 1 == 1;
                lt[i].lt.0 ^ key.corr[i] ^ msb
            })
            .collect())
    }
}

impl Gate for Drelu {
    type Key = DreluKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.bits]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.len]
    }

    fn output_bits(&self) -> u32 {
        1
    }

    fn output_len(&self) -> usize {
        self.len
    }

    fn key_shape(&self) -> Drelu {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(DreluKey, DreluKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        self.deal(masks_in[0], mask_out, rng)
    }

    async fn eval(&self, ctx: &Ctx, key: &DreluKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        let s = self.share(ctx.party(), key, inputs[0])?;
        Ok(ctx.open_bits(&s).await?.into_iter().map(u64::from).collect())
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        inputs[0].iter().map(|&x| 1 - ((x >> (self.bits - 1)) & 1)).collect()
    }
}

/// `ReLU(x) = max(x, 0)` for signed `x`: DReLU, then select (SIGMA). Two rounds. The sign
/// is read from the low `cmp_bits` bits (the caller guarantees `x` fits them as a signed
/// value); the select runs in the full ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relu {
    /// Ring width.
    pub bits: u32,
    /// Width of the sign test, `2 ≤ cmp_bits ≤ bits`.
    pub cmp_bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`Relu`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct ReluKey {
    party: Party,
    drelu: DreluKey,
    select: SelectKey,
}
fss::wipe_on_drop!(ReluKey { wipe: [], zeroize: [drelu, select] });
key_debug!(ReluKey);

impl GateKey for ReluKey {
    type Shape = Relu;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.drelu.write(w);
        self.select.write(w);
    }

    fn read(s: &Relu, party: Party, r: &mut BitReader<'_>) -> Result<ReluKey, DecodeError> {
        let drelu = DreluKey::read(&s.drelu(), party, r)?;
        let select = SelectKey::read(&s.select(), party, r)?;
        Ok(ReluKey { party, drelu, select })
    }
}

impl Relu {
    /// A ReLU that tests the sign on all `bits` bits.
    pub fn new(bits: u32, len: usize) -> Relu {
        Relu { bits, cmp_bits: bits, len }
    }

    fn drelu(&self) -> Drelu {
        Drelu { bits: self.cmp_bits, len: self.len }
    }

    fn low(&self, v: &[u64]) -> Vec<u64> {
        v.iter().map(|&x| x & mask(self.cmp_bits)).collect()
    }

    fn select(&self) -> Select {
        Select { bits: self.bits, len: self.len }
    }

    /// Deal keys for input masks `r` and output masks `rout`.
    ///
    /// # Errors
    /// [`GateError`] on mismatched lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(ReluKey, ReluKey), GateError> {
        if self.cmp_bits > self.bits {
            return Err(GateError::Params("ReLU sign width above the ring width".into()));
        }
        let rd = random_words(rng, self.len, 1);
        let (d0, d1) = self.drelu().deal(&self.low(r), &rd, rng)?;
        let (s0, s1) = self.select().deal(&rd, r, rout, rng)?;
        Ok((
            ReluKey { party: Party::P0, drelu: d0, select: s0 },
            ReluKey { party: Party::P1, drelu: d1, select: s1 },
        ))
    }

    /// The masked DReLU bits (round 1) — shared with gates that also need the sign.
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn sign(&self, ctx: &Ctx, key: &ReluKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.drelu().eval(ctx, &key.drelu, &[&self.low(xh)]).await
    }

    /// This party's share of `ReLU(x) + r_out` given the opened masked sign bits.
    pub fn share(&self, party: Party, key: &ReluKey, sign: &[u64], xh: &[u64]) -> Vec<u64> {
        self.select().share(party, &key.select, sign, xh)
    }
}

impl Gate for Relu {
    type Key = ReluKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.bits]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.len]
    }

    fn output_bits(&self) -> u32 {
        self.bits
    }

    fn output_len(&self) -> usize {
        self.len
    }

    fn key_shape(&self) -> Relu {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(ReluKey, ReluKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        self.deal(masks_in[0], mask_out, rng)
    }

    async fn eval(&self, ctx: &Ctx, key: &ReluKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        let d = self.sign(ctx, key, inputs[0]).await?;
        ctx.open(&self.share(ctx.party(), key, &d, inputs[0]), self.bits).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        inputs[0].iter().map(|&x| if (x >> (self.cmp_bits - 1)) & 1 == 1 { 0 } else { x }).collect()
    }
}

/// [`Relu`] in one round: the sign comes as additive shares from one DCF instead of a masked
/// bit and a select. With `c` = `cmp_bits`, `x̂ mod 2^c = m̂·2^{c−1} + D` and
/// `r mod 2^c = m·2^{c−1} + R`, the sign bit of the `c`-bit difference is `m̂ ⊕ m ⊕ b` with
/// the borrow `b = 1{D < R}`, i.e. `m̂ + (1 − 2m̂)·(m + (1 − 2m)·b)`: one DCF on `c − 1`
/// bits at `R` with payload `((1 − 2m), (1 − 2m)·r)`, read once at `D`, gives shares of
/// `(1 − 2m)·b` and `(1 − 2m)·b·r`; with shares of `m` and `m·r` that makes the sign `s`
/// and `s·r` linear, and `ReLU(x) = s·x̂ − s·r`. Key: the DCF (`c − 1` bits, two words of
/// `bits`) and four words; one opening of `bits` bits. (Read at `D − 2^{c−1}` and `D` instead,
/// a `c`-bit DCF gives the sign without `m`, for two walks.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReluDcf {
    /// Ring width.
    pub bits: u32,
    /// Width of the sign test, `2 ≤ cmp_bits ≤ bits`.
    pub cmp_bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`ReluDcf`] key: the DCF, shares of the input mask `r`, of its sign-test bit
/// `m`, of `m·r`, and of the output mask.
#[derive(Clone, PartialEq, Eq)]
pub struct ReluDcfKey {
    party: Party,
    bits: u32,
    dcf: DcfKeys,
    r: Vec<u64>,
    m: Vec<u64>,
    mr: Vec<u64>,
    rout: Vec<u64>,
}
fss::wipe_on_drop!(ReluDcfKey { wipe: [r, m, mr, rout], zeroize: [dcf] });
key_debug!(ReluDcfKey);

impl GateKey for ReluDcfKey {
    type Shape = ReluDcf;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.dcf.write_material(w);
        for v in [&self.r, &self.m, &self.mr, &self.rout] {
            put_words(w, v, self.bits);
        }
    }

    fn read(s: &ReluDcf, party: Party, r: &mut BitReader<'_>) -> Result<ReluDcfKey, DecodeError> {
        let params = s.params().map_err(|_| DecodeError::InvalidField("ReLU widths"))?;
        let dcf = DcfKeys::read_material(params, party, s.len, r)?;
        let rs = get_words(r, s.len, s.bits)?;
        let m = get_words(r, s.len, s.bits)?;
        let mr = get_words(r, s.len, s.bits)?;
        let rout = get_words(r, s.len, s.bits)?;
        Ok(ReluDcfKey { party, bits: s.bits, dcf, r: rs, m, mr, rout })
    }
}

impl ReluDcf {
    fn input_width(&self) -> u32 {
        self.bits
    }

    fn output_width(&self) -> u32 {
        self.bits
    }

    fn params(&self) -> Result<DcfParams, GateError> {
        if self.cmp_bits < 2 || self.cmp_bits > self.bits {
            return Err(GateError::Params(format!("ReLU sign on {} of {} bits", self.cmp_bits, self.bits)));
        }
        Ok(DcfParams::new(self.cmp_bits - 1, self.bits, 2)?)
    }

    /// Deal keys for input masks `r` and output masks `rout`.
    ///
    /// # Errors
    /// [`GateError`] on bad widths or lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(ReluDcfKey, ReluDcfKey), GateError> {
        let params = self.params()?;
        check_len("masks", self.len, r.len())?;
        check_len("output masks", self.len, rout.len())?;
        let (m, c) = (mask(self.bits), self.cmp_bits);
        let top = |v: u64| (v >> (c - 1)) & 1;
        let alphas: Vec<u64> = r.iter().map(|&v| v & mask(c - 1)).collect();
        // (1 − 2m, (1 − 2m)·r) mod 2^bits.
        let betas: Vec<u64> = r
            .iter()
            .flat_map(|&v| {
                let sign = 1u64.wrapping_sub(2 * top(v));
                [sign & m, sign.wrapping_mul(v) & m]
            })
            .collect();
        let (k0, k1) = dcf::keygen(params, &alphas, &betas, rng)?;
        let rm: Vec<u64> = r.iter().map(|&v| v & m).collect();
        let tops: Vec<u64> = r.iter().map(|&v| top(v)).collect();
        let tops_r: Vec<u64> = r.iter().map(|&v| top(v).wrapping_mul(v) & m).collect();
        let (r0, r1) = share(rng, &rm, self.bits);
        let (m0, m1) = share(rng, &tops, self.bits);
        let (mr0, mr1) = share(rng, &tops_r, self.bits);
        let (o0, o1) = share(rng, rout, self.bits);
        Ok((
            ReluDcfKey { party: Party::P0, bits: self.bits, dcf: k0, r: r0, m: m0, mr: mr0, rout: o0 },
            ReluDcfKey { party: Party::P1, bits: self.bits, dcf: k1, r: r1, m: m1, mr: mr1, rout: o1 },
        ))
    }

    /// The masked output (one round).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ReluDcfKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.params()?;
        let (m, c) = (mask(self.bits), self.cmp_bits);
        let pts: Vec<u64> = xh.iter().map(|&x| x & mask(c - 1)).collect();
        let mut out = vec![AddShare::default(); 2 * self.len];
        key.dcf.eval(&pts, &mut out)?;
        let p0 = ctx.party() == Party::P0;
        let y: Vec<u64> = (0..self.len)
            .map(|i| {
                let x = xh[i] & m;
                // m̂ and 1 − 2m̂.
                let top = (x >> (c - 1)) & 1;
                let sign = 1u64.wrapping_sub(2 * top);
                // s = (1 − m̂) − (1 − 2m̂)·(m + (1 − 2m)·b), and s·r likewise.
                let mut s = sign.wrapping_mul(key.m[i].wrapping_add(out[2 * i].0)).wrapping_neg();
                let sr = (1 - top)
                    .wrapping_mul(key.r[i])
                    .wrapping_sub(sign.wrapping_mul(key.mr[i].wrapping_add(out[2 * i + 1].0)));
                if p0 {
                    s = s.wrapping_add(1 - top);
                }
                s.wrapping_mul(x).wrapping_sub(sr).wrapping_add(key.rout[i]) & m
            })
            .collect();
        ctx.open(&y, self.bits).await
    }

    /// The plaintext result, as [`Relu`]'s.
    pub fn plain(&self, x: u64) -> u64 {
        if (x >> (self.cmp_bits - 1)) & 1 == 1 { 0 } else { x & mask(self.bits) }
    }
}

unary!(ReluDcf, ReluDcfKey);

/// `1{lo ≤ x ≤ hi}` as a masked bit, for public bounds in unsigned `n`-bit order (add
/// `2^{n−1}` to both the input offset and the bounds for signed order): one 1-bit DPF at the
/// mask, read at two thresholds (§6.1 rule 1, §6.3). One round, one bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// Ring width.
    pub bits: u32,
    /// Elements.
    pub len: usize,
    /// Lower bound (inclusive).
    pub lo: u64,
    /// Upper bound (inclusive), `lo ≤ hi < 2^bits`.
    pub hi: u64,
}

/// A party's [`Interval`] key: the comparison key at the mask and a share of the output mask.
#[derive(Clone, PartialEq, Eq)]
pub struct IntervalKey {
    party: Party,
    cmp: BitDpfKeys,
    rout: Vec<bool>,
}
fss::wipe_on_drop!(IntervalKey { wipe: [rout], zeroize: [cmp] });
key_debug!(IntervalKey);

impl GateKey for IntervalKey {
    type Shape = Interval;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.cmp.write_material(w);
        put_bits(w, &self.rout);
    }

    fn read(s: &Interval, party: Party, r: &mut BitReader<'_>) -> Result<IntervalKey, DecodeError> {
        let params = BitDpfParams::new(s.bits).map_err(|_| DecodeError::InvalidField("interval width"))?;
        let cmp = BitDpfKeys::read_material(params, party, s.len, r)?;
        Ok(IntervalKey { party, cmp, rout: get_bits(r, s.len)? })
    }
}

impl Interval {
    fn check(&self) -> Result<(), GateError> {
        if self.lo > self.hi || self.hi > mask(self.bits) {
            return Err(GateError::Params(format!(
                "bad interval [{}, {}] on {} bits",
                self.lo, self.hi, self.bits
            )));
        }
        Ok(())
    }

    /// This party's XOR share of the masked output bit.
    ///
    /// # Errors
    /// [`GateError`] if the masked inputs do not fit the ring.
    pub fn share(&self, party: Party, key: &IntervalKey, xh: &[u64]) -> Result<Vec<bool>, GateError> {
        // 1{lo ≤ x ≤ hi} = 1{x < hi + 1} ⊕ 1{x < lo}; `x < 2^n` is always true.
        let top = self.hi == mask(self.bits);
        let thresholds = if top { vec![self.lo] } else { vec![self.lo, self.hi + 1] };
        let mut lt = vec![XorBit::default(); self.len * thresholds.len()];
        compare::less_than_public(&key.cmp, xh, &thresholds, &mut lt)?;
        let t = thresholds.len();
        Ok((0..self.len)
            .map(|i| {
                let upper = if top { party == Party::P0 } else { lt[i * t + 1].0 };
                upper ^ lt[i * t].0 ^ key.rout[i]
            })
            .collect())
    }
}

impl Gate for Interval {
    type Key = IntervalKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.bits]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.len]
    }

    fn output_bits(&self) -> u32 {
        1
    }

    fn output_len(&self) -> usize {
        self.len
    }

    fn key_shape(&self) -> Interval {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(IntervalKey, IntervalKey), GateError> {
        self.check()?;
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output mask", self.len, mask_out.len())?;
        let (k0, k1) = bitdpf::keygen(BitDpfParams::new(self.bits)?, masks_in[0], rng)?;
        let rout: Vec<bool> = mask_out.iter().map(|&b| b & 1 == 1).collect();
        let (o0, o1) = share_bits(rng, &rout);
        Ok((
            IntervalKey { party: Party::P0, cmp: k0, rout: o0 },
            IntervalKey { party: Party::P1, cmp: k1, rout: o1 },
        ))
    }

    async fn eval(&self, ctx: &Ctx, key: &IntervalKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        self.check()?;
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        let s = self.share(ctx.party(), key, inputs[0])?;
        Ok(ctx.open_bits(&s).await?.into_iter().map(u64::from).collect())
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        inputs[0].iter().map(|&x| (self.lo <= x && x <= self.hi) as u64).collect()
    }
}

/// The maxima of rows of different lengths (flattened row after row), by a tournament of
/// `max(a, b) = b + ReLU(a − b)` (SIGMA's `SlothMaxpool`; its triangular variant for causal
/// rows). Each level pairs entries `2j, 2j + 1` of every row still longer than one; an odd
/// last entry waits for the next level. Two rounds per level with [`Relu`]; the last
/// `dcf_levels` levels (the narrowest) take one with [`ReluDcf`] and a larger key.
/// Requires every compared difference to fit `cmp_bits` bits as a signed value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaxTree {
    /// Ring width.
    pub bits: u32,
    /// Width of the comparisons.
    pub cmp_bits: u32,
    /// Length of every row (each at least 1).
    pub row_lens: Vec<usize>,
    /// How many of the last levels run in one round (0 for SIGMA's tree).
    pub dcf_levels: usize,
}

/// One level's ReLU key.
#[derive(Clone, PartialEq, Eq, Zeroize, ZeroizeOnDrop)]
enum LevelKey {
    Two(ReluKey),
    One(ReluDcfKey),
}

/// A party's [`MaxTree`] key: one ReLU key per level.
#[derive(Clone, PartialEq, Eq)]
pub struct MaxTreeKey {
    party: Party,
    levels: Vec<LevelKey>,
}
fss::wipe_on_drop!(MaxTreeKey { wipe: [], zeroize: [levels] });
key_debug!(MaxTreeKey);

impl GateKey for MaxTreeKey {
    type Shape = MaxTree;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        for k in &self.levels {
            match k {
                LevelKey::Two(k) => k.write(w),
                LevelKey::One(k) => k.write(w),
            }
        }
    }

    fn read(s: &MaxTree, party: Party, r: &mut BitReader<'_>) -> Result<MaxTreeKey, DecodeError> {
        let levels = s.levels();
        let first_one = levels.len().saturating_sub(s.dcf_levels);
        let levels = levels
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let len = MaxTree::pair_count(w);
                Ok(if i >= first_one {
                    LevelKey::One(ReluDcfKey::read(&s.relu_dcf(len), party, r)?)
                } else {
                    LevelKey::Two(ReluKey::read(&s.relu(len), party, r)?)
                })
            })
            .collect::<Result<_, DecodeError>>()?;
        Ok(MaxTreeKey { party, levels })
    }
}

impl MaxTree {
    /// The row widths at the start of every level.
    fn levels(&self) -> Vec<Vec<usize>> {
        let mut w = self.row_lens.clone();
        let mut out = vec![];
        while w.iter().any(|&x| x > 1) {
            out.push(w.clone());
            w = w.iter().map(|&x| x.div_ceil(2)).collect();
        }
        out
    }

    fn pair_count(widths: &[usize]) -> usize {
        widths.iter().map(|w| w / 2).sum()
    }

    fn relu(&self, len: usize) -> Relu {
        Relu { bits: self.bits, cmp_bits: self.cmp_bits, len }
    }

    fn relu_dcf(&self, len: usize) -> ReluDcf {
        ReluDcf { bits: self.bits, cmp_bits: self.cmp_bits, len }
    }

    /// Whether level `i` of `count` runs in one round.
    fn one_round(&self, i: usize, count: usize) -> bool {
        i + self.dcf_levels >= count
    }

    /// A level's pairs `(a, b)`, row after row.
    fn pairs(widths: &[usize], v: &[u64]) -> (Vec<u64>, Vec<u64>) {
        let (mut a, mut b, mut at) = (vec![], vec![], 0);
        for &w in widths {
            for j in 0..w / 2 {
                a.push(v[at + 2 * j]);
                b.push(v[at + 2 * j + 1]);
            }
            at += w;
        }
        (a, b)
    }

    /// The next level: each row's pair maxima, then its unpaired last entry.
    fn next(widths: &[usize], v: &[u64], pairmax: &[u64]) -> Vec<u64> {
        let (mut out, mut at, mut p) = (vec![], 0, 0);
        for &w in widths {
            out.extend_from_slice(&pairmax[p..p + w / 2]);
            if w % 2 == 1 {
                out.push(v[at + w - 1]);
            }
            at += w;
            p += w / 2;
        }
        out
    }

    /// Deal keys for input masks `r`; a row's final mask is `target[row]` when given (rows of
    /// one entry keep their input mask), else random. Returns the keys and the output masks.
    ///
    /// # Errors
    /// [`GateError`] on bad lengths, an empty row, or a target for a one-entry row that
    /// differs from its input mask.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        target: Option<&[u64]>,
        rng: &mut R,
    ) -> Result<(MaxTreeKey, MaxTreeKey, Vec<u64>), GateError> {
        check_len("max tree masks", self.row_lens.iter().sum(), r.len())?;
        if self.row_lens.contains(&0) {
            return Err(GateError::Params("max of an empty row".into()));
        }
        let m = mask(self.bits);
        let mut r: Vec<u64> = r.iter().map(|&v| v & m).collect();
        let (mut k0, mut k1) = (vec![], vec![]);
        let levels = self.levels();
        let count = levels.len();
        for (i, widths) in levels.into_iter().enumerate() {
            let (ra, rb) = Self::pairs(&widths, &r);
            let diff: Vec<u64> = ra.iter().zip(&rb).map(|(&a, &b)| a.wrapping_sub(b) & m).collect();
            // A row whose width is 2 finishes here: aim its ReLU mask at the row's target.
            let mut out = random_words(rng, rb.len(), self.bits);
            if let Some(t) = target {
                let mut p = 0;
                for (row, &w) in widths.iter().enumerate() {
                    if w == 2 {
                        out[p] = t[row].wrapping_sub(rb[p]) & m;
                    }
                    p += w / 2;
                }
            }
            let len = Self::pair_count(&widths);
            if self.one_round(i, count) {
                let (a0, a1) = self.relu_dcf(len).deal(&diff, &out, rng)?;
                k0.push(LevelKey::One(a0));
                k1.push(LevelKey::One(a1));
            } else {
                let (a0, a1) = self.relu(len).deal(&diff, &out, rng)?;
                k0.push(LevelKey::Two(a0));
                k1.push(LevelKey::Two(a1));
            }
            let pairmax: Vec<u64> = rb.iter().zip(&out).map(|(&b, &o)| b.wrapping_add(o) & m).collect();
            r = Self::next(&widths, &r, &pairmax);
        }
        if target.is_some_and(|t| r != t) {
            return Err(GateError::Params("max of a one-entry row keeps its input mask".into()));
        }
        Ok((MaxTreeKey { party: Party::P0, levels: k0 }, MaxTreeKey { party: Party::P1, levels: k1 }, r))
    }

    /// The masked row maxima.
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &MaxTreeKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        check_party(ctx, key.party)?;
        let m = mask(self.bits);
        let levels = self.levels();
        if key.levels.len() != levels.len() {
            return Err(GateError::KeyMismatch("max tree levels"));
        }
        let mut v: Vec<u64> = xh.iter().map(|&x| x & m).collect();
        for (widths, k) in levels.into_iter().zip(&key.levels) {
            let (a, b) = Self::pairs(&widths, &v);
            let diff: Vec<u64> = a.iter().zip(&b).map(|(&a, &b)| a.wrapping_sub(b) & m).collect();
            let len = Self::pair_count(&widths);
            let relu = match k {
                LevelKey::Two(k) => self.relu(len).eval(ctx, k, &[&diff]).await?,
                LevelKey::One(k) => self.relu_dcf(len).eval(ctx, k, &[&diff]).await?,
            };
            let pairmax: Vec<u64> = b.iter().zip(&relu).map(|(&b, &o)| b.wrapping_add(o) & m).collect();
            v = Self::next(&widths, &v, &pairmax);
        }
        Ok(v)
    }

    /// The plaintext row maxima (signed order; SIGMA's ties keep the first entry).
    pub fn plain(&self, x: &[u64]) -> Vec<u64> {
        let ring = fss::Ring::new(self.bits).expect("valid width");
        let mut at = 0;
        self.row_lens
            .iter()
            .map(|&w| {
                let row = &x[at..at + w];
                at += w;
                ring.from_signed(row.iter().map(|&v| ring.to_signed(v)).max().expect("non-empty row"))
            })
            .collect()
    }
}

/// The maximum of each row of a `rows × cols` matrix of signed values: a [`MaxTree`] over
/// equal rows. `2⌈log2 cols⌉` rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowMax {
    /// Ring width.
    pub bits: u32,
    /// Width of the comparisons (differences must fit it as signed values).
    pub cmp_bits: u32,
    /// Rows.
    pub rows: usize,
    /// Columns (at least 2: a single column is its own maximum).
    pub cols: usize,
}

impl RowMax {
    fn tree(&self) -> MaxTree {
        MaxTree {
            bits: self.bits,
            cmp_bits: self.cmp_bits,
            row_lens: vec![self.cols; self.rows],
            dcf_levels: 0,
        }
    }
}

impl Gate for RowMax {
    type Key = MaxTreeKey;

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

    fn key_shape(&self) -> MaxTree {
        self.tree()
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(MaxTreeKey, MaxTreeKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output mask", self.rows, mask_out.len())?;
        let (k0, k1, _) = self.tree().deal(masks_in[0], Some(mask_out), rng)?;
        Ok((k0, k1))
    }

    async fn eval(&self, ctx: &Ctx, key: &MaxTreeKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        self.tree().run(ctx, key, inputs[0]).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        self.tree().plain(inputs[0])
    }
}
