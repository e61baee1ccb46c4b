//! SIGMA's nonlinear operators as implemented by its CPU build (`Sloth*`): clip, the
//! DCF-based truncate-reduce, GeLU and SiLU (ReLU minus a clipped residual table), `e^{−x}`
//! (two byte tables) and the softmax reciprocal (a 16-bit table). They are the baseline the
//! FuseFSS compiler is measured against, composed from the gates of this crate with SIGMA's
//! round structure.

use std::sync::Arc;

use fss::codec::{BitReader, BitWriter};
use fss::dcf::{self, DcfKeys, DcfParams};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{AddShare, DecodeError, Party, Ring};

use crate::arith::{Mul, MulKey};
use crate::cmp::{Drelu, DreluKey};
use crate::dealer::{random_words, share};
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_words, key_debug, put_words};
use crate::kit::{check_inputs, check_party, party_term, unary};
use crate::lut::{Lut, LutKey};
use crate::online::Ctx;
use crate::select::{Select, SelectKey};
use crate::shift::{ArsSlack, ArsSlackKey, TruncReduce, TruncReduceKey};

/// A table of `2^in_bits` words `⌊f(i)⌋` (non-negative), reduced to `out_bits`.
pub fn floor_table(in_bits: u32, out_bits: u32, f: impl Fn(u64) -> f64) -> Arc<[u64]> {
    (0..1u64 << in_bits).map(|i| (f(i).floor() as u64) & mask(out_bits)).collect()
}

fn reduce(v: &[u64], bits: u32) -> Vec<u64> {
    v.iter().map(|&x| x & mask(bits)).collect()
}

/// `y = min(x, 2^k − 1)` for `x ≥ 0` (SIGMA's `SlothClip`), output in `Z_{2^out_bits}`:
/// `d' = 1{x < 2^k}` by a DReLU of `x − 2^k` on `cmp_bits` bits, then
/// `y = d'·(x − 2^k + 1) + 2^k − 1` by a select. Two rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clip {
    /// Width of the input ring.
    pub in_bits: u32,
    /// Width of the sign test (`x − 2^k` must fit it as a signed value).
    pub cmp_bits: u32,
    /// `k`: the output is below `2^k`.
    pub max_bits: u32,
    /// Width of the output ring (`k ≤ out_bits ≤ in_bits`).
    pub out_bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`Clip`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClipKey {
    party: Party,
    drelu: DreluKey,
    select: SelectKey,
}
fss::wipe_on_drop!(ClipKey { wipe: [], zeroize: [drelu, select] });
key_debug!(ClipKey);

impl GateKey for ClipKey {
    type Shape = Clip;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.drelu.write(w);
        self.select.write(w);
    }

    fn read(s: &Clip, party: Party, r: &mut BitReader<'_>) -> Result<ClipKey, DecodeError> {
        Ok(ClipKey {
            party,
            drelu: DreluKey::read(&s.drelu(), party, r)?,
            select: SelectKey::read(&s.select(), party, r)?,
        })
    }
}

impl Clip {
    fn drelu(&self) -> Drelu {
        Drelu { bits: self.cmp_bits, len: self.len }
    }

    fn select(&self) -> Select {
        Select { bits: self.out_bits, len: self.len }
    }

    fn check(&self) -> Result<(), GateError> {
        let ok = self.max_bits < self.cmp_bits
            && self.cmp_bits <= self.in_bits
            && self.max_bits <= self.out_bits
            && self.out_bits <= self.in_bits;
        if !ok {
            return Err(GateError::Params(format!("clip widths {self:?}")));
        }
        Ok(())
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
    ) -> Result<(ClipKey, ClipKey), GateError> {
        self.check()?;
        check_len("masks", self.len, r.len())?;
        let rd = random_words(rng, self.len, 1);
        let (d0, d1) = self.drelu().deal(&reduce(r, self.cmp_bits), &rd, rng)?;
        let (s0, s1) = self.select().deal(&rd, &reduce(r, self.out_bits), rout, rng)?;
        Ok((
            ClipKey { party: Party::P0, drelu: d0, select: s0 },
            ClipKey { party: Party::P1, drelu: d1, select: s1 },
        ))
    }

    /// The masked output (two rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ClipKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.check()?;
        let k = 1u64 << self.max_bits;
        let t: Vec<u64> = xh.iter().map(|&x| x.wrapping_sub(k)).collect();
        let d = self.drelu().eval(ctx, &key.drelu, &[&reduce(&t, self.cmp_bits)]).await?;
        // d' = 1{x < 2^k} is the flipped public bit under the same mask; t' = t + 1.
        let dn: Vec<u64> = d.iter().map(|&b| b ^ 1).collect();
        let t1: Vec<u64> = t.iter().map(|&v| v.wrapping_add(1) & mask(self.out_bits)).collect();
        let u = ctx.open(&self.select().share(ctx.party(), &key.select, &dn, &t1), self.out_bits).await?;
        Ok(u.iter().map(|&v| v.wrapping_add(k - 1) & mask(self.out_bits)).collect())
    }

    /// The plaintext result.
    pub fn plain(&self, x: u64) -> u64 {
        let k = 1u64 << self.max_bits;
        let t = x.wrapping_sub(k) & mask(self.cmp_bits);
        let below = (t >> (self.cmp_bits - 1)) & 1 == 1;
        let u = if below { x.wrapping_sub(k).wrapping_add(1) } else { 0 };
        u.wrapping_add(k - 1) & mask(self.out_bits)
    }
}

impl Clip {
    fn input_width(&self) -> u32 {
        self.in_bits
    }

    fn output_width(&self) -> u32 {
        self.out_bits
    }
}
unary!(Clip, ClipKey);

/// Truncate-reduce with a DCF (LLAMA's, used by SIGMA's nExp and reciprocal): `x >> s` from
/// `Z_{2^n}` into `Z_{2^{n−s}}` in one round, `x̂_h − r_h − DCF_{r_l}(x̂_l)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruncReduceDcf {
    /// Input ring width `n`.
    pub bits: u32,
    /// Shift `s`, `1 ≤ s < n`.
    pub shift: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`TruncReduceDcf`] key: a DCF on the low bits and a share of `r_out − r_h`.
#[derive(Clone, PartialEq, Eq)]
pub struct TruncReduceDcfKey {
    party: Party,
    out_bits: u32,
    dcf: DcfKeys,
    corr: Vec<u64>,
}
fss::wipe_on_drop!(TruncReduceDcfKey { wipe: [corr], zeroize: [dcf] });
key_debug!(TruncReduceDcfKey);

impl GateKey for TruncReduceDcfKey {
    type Shape = TruncReduceDcf;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.dcf.write_material(w);
        put_words(w, &self.corr, self.out_bits);
    }

    fn read(
        s: &TruncReduceDcf,
        party: Party,
        r: &mut BitReader<'_>,
    ) -> Result<TruncReduceDcfKey, DecodeError> {
        let params = s.dcf_params().map_err(|_| DecodeError::InvalidField("truncation widths"))?;
        let dcf = DcfKeys::read_material(params, party, s.len, r)?;
        let corr = get_words(r, s.len, s.bits - s.shift)?;
        Ok(TruncReduceDcfKey { party, out_bits: s.bits - s.shift, dcf, corr })
    }
}

impl TruncReduceDcf {
    fn input_width(&self) -> u32 {
        self.bits
    }

    fn output_width(&self) -> u32 {
        self.bits - self.shift
    }

    fn dcf_params(&self) -> Result<DcfParams, GateError> {
        if self.shift == 0 || self.shift >= self.bits {
            return Err(GateError::Params(format!("shift {} on {} bits", self.shift, self.bits)));
        }
        Ok(DcfParams::new(self.shift, self.bits - self.shift, 1)?)
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
    ) -> Result<(TruncReduceDcfKey, TruncReduceDcfKey), GateError> {
        let params = self.dcf_params()?;
        check_len("masks", self.len, r.len())?;
        let (s, ob) = (self.shift, self.bits - self.shift);
        let lows: Vec<u64> = r.iter().map(|&r| r & mask(s)).collect();
        let (k0, k1) = dcf::keygen(params, &lows, &vec![1; self.len], rng)?;
        let corr: Vec<u64> = r
            .iter()
            .zip(rout)
            .map(|(&r, &o)| o.wrapping_sub((r & mask(self.bits)) >> s) & mask(ob))
            .collect();
        let (c0, c1) = share(rng, &corr, ob);
        Ok((
            TruncReduceDcfKey { party: Party::P0, out_bits: ob, dcf: k0, corr: c0 },
            TruncReduceDcfKey { party: Party::P1, out_bits: ob, dcf: k1, corr: c1 },
        ))
    }

    /// The masked output (one round).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &TruncReduceDcfKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.dcf_params()?;
        let (s, ob) = (self.shift, self.bits - self.shift);
        let lows: Vec<u64> = xh.iter().map(|&x| x & mask(s)).collect();
        let mut carry = vec![AddShare::default(); self.len];
        key.dcf.eval(&lows, &mut carry)?;
        let own = party_term(ctx.party());
        let y: Vec<u64> = (0..self.len)
            .map(|i| {
                (own * ((xh[i] & mask(self.bits)) >> s)).wrapping_sub(carry[i].0).wrapping_add(key.corr[i])
                    & mask(ob)
            })
            .collect();
        ctx.open(&y, ob).await
    }

    /// The plaintext result.
    pub fn plain(&self, x: u64) -> u64 {
        ((x & mask(self.bits)) >> self.shift) & mask(self.bits - self.shift)
    }
}
unary!(TruncReduceDcf, TruncReduceDcfKey);

/// Arithmetic shift with slack in one round: `⌊x / 2^s⌋` in `Z_{2^n}` for a signed `x` with
/// `|x| < 2^{n−2}` — the identity of [`ArsSlack`] (the wrap of `x + 2^{n−2} + r` is
/// `msb(r)·(1 − msb(x̂ + 2^{n−2}))`), with the carry `1{û_l < r_l}` as additive shares from a
/// DCF instead of a masked bit, so the output opens in the first round. Key: the DCF (`s`
/// bits, payload in `Z_{2^n}`) and two words, about twice [`ArsSlack`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArsSlackDcf {
    /// Ring width `n` (at least 3).
    pub bits: u32,
    /// Shift `s`, `1 ≤ s ≤ n − 2`.
    pub shift: u32,
    /// Width of the output ring, `n − s ≤ out_bits ≤ n`: the result mod `2^out_bits`, for
    /// consumers that read no more bits of it (the DCF's payload and the words are that wide).
    pub out_bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`ArsSlackDcf`] key: the carry DCF, shares of `r_out − r_h` and of
/// `2^{n−s}·msb(r)`.
#[derive(Clone, PartialEq, Eq)]
pub struct ArsSlackDcfKey {
    party: Party,
    bits: u32,
    dcf: DcfKeys,
    corr: Vec<u64>,
    wrap: Vec<u64>,
}
fss::wipe_on_drop!(ArsSlackDcfKey { wipe: [corr, wrap], zeroize: [dcf] });
key_debug!(ArsSlackDcfKey);

impl GateKey for ArsSlackDcfKey {
    type Shape = ArsSlackDcf;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.dcf.write_material(w);
        put_words(w, &self.corr, self.bits);
        put_words(w, &self.wrap, self.bits);
    }

    fn read(s: &ArsSlackDcf, party: Party, r: &mut BitReader<'_>) -> Result<ArsSlackDcfKey, DecodeError> {
        let params = s.dcf_params().map_err(|_| DecodeError::InvalidField("shift widths"))?;
        let dcf = DcfKeys::read_material(params, party, s.len, r)?;
        let corr = get_words(r, s.len, s.out_bits)?;
        let wrap = get_words(r, s.len, s.out_bits)?;
        Ok(ArsSlackDcfKey { party, bits: s.out_bits, dcf, corr, wrap })
    }
}

impl ArsSlackDcf {
    fn input_width(&self) -> u32 {
        self.bits
    }

    fn output_width(&self) -> u32 {
        self.out_bits
    }

    pub(crate) fn dcf_params(&self) -> Result<DcfParams, GateError> {
        if self.bits < 3 || self.bits > 64 || self.shift == 0 || self.shift > self.bits - 2 {
            return Err(GateError::Params(format!("shift {} with slack on {} bits", self.shift, self.bits)));
        }
        if self.out_bits < self.bits - self.shift || self.out_bits > self.bits {
            return Err(GateError::Params(format!(
                "output width {} outside {}..={}",
                self.out_bits,
                self.bits - self.shift,
                self.bits
            )));
        }
        Ok(DcfParams::new(self.shift, self.out_bits, 1)?)
    }

    /// `2^{n−2}`, the offset that makes a contracted input non-negative.
    fn offset(&self) -> u64 {
        1u64 << (self.bits - 2)
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
    ) -> Result<(ArsSlackDcfKey, ArsSlackDcfKey), GateError> {
        let params = self.dcf_params()?;
        check_len("masks", self.len, r.len())?;
        let (n, s, ob) = (self.bits, self.shift, self.out_bits);
        let (mn, m) = (mask(n), mask(ob));
        let lows: Vec<u64> = r.iter().map(|&r| r & mask(s)).collect();
        let (k0, k1) = dcf::keygen(params, &lows, &vec![1; self.len], rng)?;
        let corr: Vec<u64> = r.iter().zip(rout).map(|(&r, &o)| o.wrapping_sub((r & mn) >> s) & m).collect();
        let wrap: Vec<u64> = r.iter().map(|&r| (((r & mn) >> (n - 1)) << (n - s)) & m).collect();
        let (c0, c1) = share(rng, &corr, ob);
        let (w0, w1) = share(rng, &wrap, ob);
        Ok((
            ArsSlackDcfKey { party: Party::P0, bits: ob, dcf: k0, corr: c0, wrap: w0 },
            ArsSlackDcfKey { party: Party::P1, bits: ob, dcf: k1, corr: c1, wrap: w1 },
        ))
    }

    /// The masked output (one round).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ArsSlackDcfKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.dcf_params()?;
        let (n, s, m) = (self.bits, self.shift, mask(self.out_bits));
        let uh: Vec<u64> = xh.iter().map(|&x| x.wrapping_add(self.offset()) & mask(n)).collect();
        let lows: Vec<u64> = uh.iter().map(|&u| u & mask(s)).collect();
        let mut carry = vec![AddShare::default(); self.len];
        key.dcf.eval(&lows, &mut carry)?;
        let own = party_term(ctx.party());
        let public = |u: u64| (u >> s).wrapping_sub(self.offset() >> s);
        let y: Vec<u64> = (0..self.len)
            .map(|i| {
                let top_clear = 1 - (uh[i] >> (n - 1));
                (own * public(uh[i]))
                    .wrapping_sub(carry[i].0)
                    .wrapping_add(key.corr[i])
                    .wrapping_add(key.wrap[i] * top_clear)
                    & m
            })
            .collect();
        ctx.open(&y, self.out_bits).await
    }

    /// The plaintext result: `⌊x / 2^s⌋` of the signed `x`, mod `2^out_bits` (exact when
    /// `|x| < 2^{n−2}`, which the caller guarantees; the secure result equals it then).
    pub fn plain(&self, x: u64) -> u64 {
        Ring::new(self.bits).map_or(0, |ring| ring.from_signed(ring.to_signed(x) >> self.shift))
            & mask(self.out_bits)
    }
}
unary!(ArsSlackDcf, ArsSlackDcfKey);

/// Which activation a [`ReluResidual`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `x·Φ(x)` (erf form): residual table of 2^8 entries.
    Gelu,
    /// `x·σ(x)`: residual table of 2^10 entries.
    Silu,
}

impl Activation {
    /// The f64 function.
    pub fn f64(self, x: f64) -> f64 {
        match self {
            Activation::Gelu => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
            Activation::Silu => x / (1.0 + (-x).exp()),
        }
    }

    /// Width of the clipped table index (SIGMA: 8 for GeLU, 10 for SiLU).
    pub fn table_bits(self) -> u32 {
        match self {
            Activation::Gelu => 8,
            Activation::Silu => 10,
        }
    }
}

/// SIGMA's GeLU / SiLU (`SlothGelu`, `SlothSilu`): `ReLU(x) − T[min(|⌊x/64⌋|, 2^L − 1)]`
/// with `T[i] = ⌊(ReLU − f)(i/64)·2^12⌋`, for `x` at scale 12 that fits `in_bits` bits as a
/// signed value (mode 0: `in_bits = bits`; mode 1, after a truncation: `bits − 12`).
///
/// Steps and rounds: truncate-reduce by 6 (2), DReLU (1), select → `|y|` (1), clip (2),
/// table round 1 (1), then `ReLU(x) − δ` opened once (1): **8 rounds**.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReluResidual {
    /// Which activation.
    pub act: Activation,
    /// Ring width of input and output.
    pub bits: u32,
    /// Meaningful input width (mode 0: `bits`, mode 1: `bits − 12`).
    pub in_bits: u32,
    /// Elements.
    pub len: usize,
    /// The residual table, `2^L` words (from [`ReluResidual::new`]).
    pub table: Arc<[u64]>,
}

/// Scale of the activations' fixed point (SIGMA asserts 12).
pub const SCALE: u32 = 12;

/// A party's [`ReluResidual`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct ReluResidualKey {
    party: Party,
    tr: TruncReduceKey,
    drelu: DreluKey,
    abs: SelectKey,
    clip: ClipKey,
    lut: LutKey,
    relu: SelectKey,
}
fss::wipe_on_drop!(ReluResidualKey { wipe: [], zeroize: [tr, drelu, abs, clip, lut, relu] });
key_debug!(ReluResidualKey);

impl GateKey for ReluResidualKey {
    type Shape = ReluResidual;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.tr.write(w);
        self.drelu.write(w);
        self.abs.write(w);
        self.clip.write(w);
        self.lut.write(w);
        self.relu.write(w);
    }

    fn read(s: &ReluResidual, party: Party, r: &mut BitReader<'_>) -> Result<ReluResidualKey, DecodeError> {
        Ok(ReluResidualKey {
            party,
            tr: TruncReduceKey::read(&s.tr(), party, r)?,
            drelu: DreluKey::read(&s.drelu(), party, r)?,
            abs: SelectKey::read(&s.abs(), party, r)?,
            clip: ClipKey::read(&s.clip(), party, r)?,
            lut: LutKey::read(&s.lut(), party, r)?,
            relu: SelectKey::read(&s.relu(), party, r)?,
        })
    }
}

impl ReluResidual {
    /// The gate with its residual table.
    ///
    /// # Errors
    /// [`GateError::Params`] unless `in_bits ≤ bits` and `in_bits > L + 7`.
    pub fn new(act: Activation, bits: u32, in_bits: u32, len: usize) -> Result<ReluResidual, GateError> {
        let l = act.table_bits();
        if in_bits > bits || in_bits < l + 8 || bits > 64 {
            return Err(GateError::Params(format!("activation widths {in_bits}/{bits}")));
        }
        let table = floor_table(l, bits, |i| {
            let x = i as f64 / 64.0;
            (x.max(0.0) - act.f64(x)) * (1u64 << SCALE) as f64
        });
        Ok(ReluResidual { act, bits, in_bits, len, table })
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn output_width(&self) -> u32 {
        self.bits
    }

    fn y_bits(&self) -> u32 {
        self.in_bits - 6
    }

    fn tr(&self) -> TruncReduce {
        TruncReduce { bits: self.in_bits, shift: 6, len: self.len }
    }

    fn drelu(&self) -> Drelu {
        Drelu { bits: self.y_bits(), len: self.len }
    }

    fn abs(&self) -> Select {
        Select { bits: self.y_bits(), len: self.len }
    }

    fn clip(&self) -> Clip {
        let l = self.act.table_bits();
        Clip { in_bits: self.y_bits(), cmp_bits: self.y_bits(), max_bits: l, out_bits: l, len: self.len }
    }

    fn lut(&self) -> Lut {
        Lut { in_bits: self.act.table_bits(), out_bits: self.bits, len: self.len, table: self.table.clone() }
    }

    fn relu(&self) -> Select {
        Select { bits: self.bits, len: self.len }
    }

    /// Deal keys for input masks `r` and output masks `rout`.
    ///
    /// # Errors
    /// [`GateError`] on bad lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(ReluResidualKey, ReluResidualKey), GateError> {
        let (yb, l, n) = (self.y_bits(), self.act.table_bits(), self.len);
        let ry = random_words(rng, n, yb);
        let (tr0, tr1) = self.tr().deal(&reduce(r, self.in_bits), &ry, rng)?;
        let rd = random_words(rng, n, 1);
        let (d0, d1) = self.drelu().deal(&ry, &rd, rng)?;
        let rp = random_words(rng, n, yb);
        let (a0, a1) = self.abs().deal(&rd, &ry, &rp, rng)?;
        let ra: Vec<u64> =
            rp.iter().zip(&ry).map(|(&p, &y)| p.wrapping_mul(2).wrapping_sub(y) & mask(yb)).collect();
        let rc = random_words(rng, n, l);
        let (c0, c1) = self.clip().deal(&ra, &rc, rng)?;
        // out = ReLU(x) − δ: the two unopened parts' masks must differ by `rout`.
        let rl = random_words(rng, n, self.bits);
        let (l0, l1) = self.lut().deal(&rc, &rl, rng)?;
        let rs: Vec<u64> = rout.iter().zip(&rl).map(|(&o, &l)| o.wrapping_add(l) & mask(self.bits)).collect();
        let (s0, s1) = self.relu().deal(&rd, r, &rs, rng)?;
        Ok((
            ReluResidualKey { party: Party::P0, tr: tr0, drelu: d0, abs: a0, clip: c0, lut: l0, relu: s0 },
            ReluResidualKey { party: Party::P1, tr: tr1, drelu: d1, abs: a1, clip: c1, lut: l1, relu: s1 },
        ))
    }

    /// The masked output (eight rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ReluResidualKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let yb = self.y_bits();
        let y = self.tr().run(ctx, &key.tr, &reduce(xh, self.in_bits)).await?;
        let d = self.drelu().eval(ctx, &key.drelu, &[&y]).await?;
        let p = ctx.open(&self.abs().share(ctx.party(), &key.abs, &d, &y), yb).await?;
        let a: Vec<u64> =
            p.iter().zip(&y).map(|(&p, &y)| p.wrapping_mul(2).wrapping_sub(y) & mask(yb)).collect();
        let c = self.clip().run(ctx, &key.clip, &a).await?;
        let (wh, vh) = self.lut().first(ctx, &key.lut, &c).await?;
        let delta = self.lut().second_share(ctx.party(), &key.lut, &wh, &vh);
        let relu = self.relu().share(ctx.party(), &key.relu, &d, xh);
        let out: Vec<u64> =
            relu.iter().zip(&delta).map(|(&a, &b)| a.wrapping_sub(b) & mask(self.bits)).collect();
        ctx.open(&out, self.bits).await
    }

    /// The plaintext result (the composition of the steps' references).
    pub fn plain(&self, x: u64) -> u64 {
        let (yb, bits) = (self.y_bits(), self.bits);
        let y = self.tr().reference(&[&[x & mask(self.in_bits)]])[0];
        let positive = (y >> (yb - 1)) & 1 == 0;
        let p = if positive { y } else { 0 };
        let a = p.wrapping_mul(2).wrapping_sub(y) & mask(yb);
        let c = self.clip().plain(a);
        let relu = if positive { x & mask(bits) } else { 0 };
        relu.wrapping_sub(self.table[c as usize]) & mask(bits)
    }
}
unary!(ReluResidual, ReluResidualKey);

/// SIGMA's `e^{−x}` for `x ≥ 0` at scale `s` (`nExp`): clip to `2^16 − 1`, split into bytes,
/// `⌊T_hi[hi]·T_lo[lo] / 2^s⌋` with `T_lo[i] = ⌊e^{−i/2^s}·2^s⌋` and
/// `T_hi[i] = ⌊e^{−256i/2^s}·2^s⌋`. Clip (2), DCF truncate-reduce (1), two tables (2 + 2),
/// product (1), truncation with slack (2): **10 rounds**, as SIGMA's CPU build runs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NExp {
    /// Ring width of input and output.
    pub bits: u32,
    /// Width of the clip's sign test (the input fits it as a signed value).
    pub cmp_bits: u32,
    /// Fixed-point scale `s` (at least 8).
    pub scale: u32,
    /// Elements.
    pub len: usize,
    lo: Arc<[u64]>,
    hi: Arc<[u64]>,
}

/// A party's [`NExp`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct NExpKey {
    party: Party,
    clip: ClipKey,
    tr: TruncReduceDcfKey,
    lo: LutKey,
    hi: LutKey,
    mul: MulKey,
    ars: ArsSlackKey,
}
fss::wipe_on_drop!(NExpKey { wipe: [], zeroize: [clip, tr, lo, hi, mul, ars] });
key_debug!(NExpKey);

impl GateKey for NExpKey {
    type Shape = NExp;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.clip.write(w);
        self.tr.write(w);
        self.lo.write(w);
        self.hi.write(w);
        self.mul.write(w);
        self.ars.write(w);
    }

    fn read(s: &NExp, party: Party, r: &mut BitReader<'_>) -> Result<NExpKey, DecodeError> {
        Ok(NExpKey {
            party,
            clip: ClipKey::read(&s.clip(), party, r)?,
            tr: TruncReduceDcfKey::read(&s.tr(), party, r)?,
            lo: LutKey::read(&s.lut(true), party, r)?,
            hi: LutKey::read(&s.lut(false), party, r)?,
            mul: MulKey::read(&s.mul(), party, r)?,
            ars: ArsSlackKey::read(&s.ars(), party, r)?,
        })
    }
}

impl NExp {
    /// The gate with its two byte tables.
    ///
    /// # Errors
    /// [`GateError::Params`] for unsupported widths.
    pub fn new(bits: u32, cmp_bits: u32, scale: u32, len: usize) -> Result<NExp, GateError> {
        if scale < 8 || cmp_bits <= 16 || cmp_bits > bits || bits < 2 * scale + 3 || bits > 64 {
            return Err(GateError::Params(format!("nExp widths {bits}/{cmp_bits}, scale {scale}")));
        }
        let one = (1u64 << scale) as f64;
        let lo = floor_table(8, bits, |i| (-(i as f64) / one).exp() * one);
        let hi = floor_table(8, bits, |i| (-(i as f64) * 256.0 / one).exp() * one);
        Ok(NExp { bits, cmp_bits, scale, len, lo, hi })
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn output_width(&self) -> u32 {
        self.bits
    }

    fn clip(&self) -> Clip {
        Clip { in_bits: self.bits, cmp_bits: self.cmp_bits, max_bits: 16, out_bits: self.bits, len: self.len }
    }

    fn tr(&self) -> TruncReduceDcf {
        TruncReduceDcf { bits: 16, shift: 8, len: self.len }
    }

    fn lut(&self, low: bool) -> Lut {
        let table = if low { self.lo.clone() } else { self.hi.clone() };
        Lut { in_bits: 8, out_bits: self.bits, len: self.len, table }
    }

    fn mul(&self) -> Mul {
        Mul { bits: self.bits, len: self.len }
    }

    fn ars(&self) -> ArsSlack {
        ArsSlack { bits: self.bits, shift: self.scale, out_bits: self.bits, len: self.len }
    }

    /// Deal keys for input masks `r` and output masks `rout`.
    ///
    /// # Errors
    /// [`GateError`] on bad lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(NExpKey, NExpKey), GateError> {
        let (n, b) = (self.len, self.bits);
        let rc = random_words(rng, n, b);
        let (c0, c1) = self.clip().deal(r, &rc, rng)?;
        let rh = random_words(rng, n, 8);
        let (t0, t1) = self.tr().deal(&reduce(&rc, 16), &rh, rng)?;
        let (rl_out, rh_out) = (random_words(rng, n, b), random_words(rng, n, b));
        let (lo0, lo1) = self.lut(true).deal(&reduce(&rc, 8), &rl_out, rng)?;
        let (hi0, hi1) = self.lut(false).deal(&rh, &rh_out, rng)?;
        let rz = random_words(rng, n, b);
        let (m0, m1) = self.mul().keygen(&[&rh_out, &rl_out], &rz, rng)?;
        let (a0, a1) = self.ars().deal(&rz, rout, rng)?;
        Ok((
            NExpKey { party: Party::P0, clip: c0, tr: t0, lo: lo0, hi: hi0, mul: m0, ars: a0 },
            NExpKey { party: Party::P1, clip: c1, tr: t1, lo: lo1, hi: hi1, mul: m1, ars: a1 },
        ))
    }

    /// The masked output (ten rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &NExpKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let c = self.clip().run(ctx, &key.clip, xh).await?;
        let hi = self.tr().run(ctx, &key.tr, &reduce(&c, 16)).await?;
        let l = self.lut(true).run(ctx, &key.lo, &reduce(&c, 8)).await?;
        let h = self.lut(false).run(ctx, &key.hi, &hi).await?;
        let z = self.mul().eval(ctx, &key.mul, &[&h, &l]).await?;
        self.ars().run(ctx, &key.ars, &z).await
    }

    /// The plaintext result.
    pub fn plain(&self, x: u64) -> u64 {
        let c = self.clip().plain(x);
        let z = self.hi[((c >> 8) & 255) as usize].wrapping_mul(self.lo[(c & 255) as usize]);
        self.ars().reference(&[&[z & mask(self.bits)]])[0]
    }
}
unary!(NExp, NExpKey);

/// SIGMA's softmax reciprocal (`InverseLUT`): `D` at scale `s` with `0 < D < 2^{s+10}`,
/// truncated by the DCF truncate-reduce to 16 bits at scale 6, then a 2^16-entry table
/// `T[i] = ⌊2^{s+6}/i⌋` (`T[0] = 0`). Output at scale `s`. **3 rounds.**
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reciprocal {
    /// Ring width of input and output.
    pub bits: u32,
    /// Fixed-point scale `s` (at least 6).
    pub scale: u32,
    /// Elements.
    pub len: usize,
    table: Arc<[u64]>,
}

/// A party's [`Reciprocal`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct ReciprocalKey {
    party: Party,
    tr: TruncReduceDcfKey,
    lut: LutKey,
}
fss::wipe_on_drop!(ReciprocalKey { wipe: [], zeroize: [tr, lut] });
key_debug!(ReciprocalKey);

impl GateKey for ReciprocalKey {
    type Shape = Reciprocal;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.tr.write(w);
        self.lut.write(w);
    }

    fn read(s: &Reciprocal, party: Party, r: &mut BitReader<'_>) -> Result<ReciprocalKey, DecodeError> {
        Ok(ReciprocalKey {
            party,
            tr: TruncReduceDcfKey::read(&s.tr(), party, r)?,
            lut: LutKey::read(&s.lut(), party, r)?,
        })
    }
}

impl Reciprocal {
    /// The gate with its table.
    ///
    /// # Errors
    /// [`GateError::Params`] for unsupported widths.
    pub fn new(bits: u32, scale: u32, len: usize) -> Result<Reciprocal, GateError> {
        if scale < 7 || bits < scale + 10 || bits > 64 {
            return Err(GateError::Params(format!("reciprocal widths {bits}, scale {scale}")));
        }
        let num = 1u64 << (scale + 6);
        let table = floor_table(16, bits, |i| num.checked_div(i).unwrap_or(0) as f64);
        Ok(Reciprocal { bits, scale, len, table })
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn output_width(&self) -> u32 {
        self.bits
    }

    fn tr(&self) -> TruncReduceDcf {
        TruncReduceDcf { bits: self.scale + 10, shift: self.scale - 6, len: self.len }
    }

    fn lut(&self) -> Lut {
        Lut { in_bits: 16, out_bits: self.bits, len: self.len, table: self.table.clone() }
    }

    /// Deal keys for input masks `r` and output masks `rout`.
    ///
    /// # Errors
    /// [`GateError`] on bad lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(ReciprocalKey, ReciprocalKey), GateError> {
        let ri = random_words(rng, self.len, 16);
        let (t0, t1) = self.tr().deal(&reduce(r, self.scale + 10), &ri, rng)?;
        let (l0, l1) = self.lut().deal(&ri, rout, rng)?;
        Ok((
            ReciprocalKey { party: Party::P0, tr: t0, lut: l0 },
            ReciprocalKey { party: Party::P1, tr: t1, lut: l1 },
        ))
    }

    /// The masked output (three rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ReciprocalKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let i = self.tr().run(ctx, &key.tr, &reduce(xh, self.scale + 10)).await?;
        self.lut().run(ctx, &key.lut, &i).await
    }

    /// The plaintext result.
    pub fn plain(&self, x: u64) -> u64 {
        let i = self.tr().plain(x & mask(self.scale + 10));
        self.table[i as usize]
    }
}
unary!(Reciprocal, ReciprocalKey);

/// `2^s`-scaled value of a signed ring element (for error measurement).
pub fn decode(x: u64, bits: u32, scale: u32) -> f64 {
    Ring::new(bits).expect("valid width").to_signed(x) as f64 / (1u64 << scale) as f64
}
