//! Shifts (SIGMA; docs/design/fss-building-blocks.md §6.5): truncate-reduce, truncate-with-slack (SIGMA's
//! default ARS), sign and zero extension, and the exact ARS and LRS built from them.
//!
//! Each is "one comparison bit, opened masked, then a correction picked by it": the bit
//! `c = 1{y < α}` comes from a 1-bit DPF at the mask; the parties open `ĉ = c ⊕ z` (one bit)
//! and add the dealer's correction word for `ĉ` (both candidates are in the key, in `ĉ`
//! order). Two rounds, `1 + out_bits` bits each way.

use fss::bitdpf::{self, BitDpfKeys, BitDpfParams, CmpShares};
use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party, Ring};

use crate::dealer::{random_bits, random_words, share, share_bits};
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_bits, get_words, key_debug, put_bits, put_words};
use crate::kit::{check_inputs, check_party, party_term, unary};
use crate::online::Ctx;

/// A masked comparison bit `c = 1{y < α}` opened as `ĉ = c ⊕ z` (one round, one bit per
/// element): the 1-bit DPF at the points and each party's share of the bits `z`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct MaskedBitKey {
    cmp: BitDpfKeys,
    z: Vec<bool>,
}
fss::wipe_on_drop!(MaskedBitKey { wipe: [z], zeroize: [cmp] });

/// Deal a [`MaskedBitKey`] pair for the points `alpha` (`cmp_bits` wide): the keys and the
/// bits `z` that mask the opened comparisons.
pub(crate) fn deal_masked_bits<R: SplitRng + ?Sized>(
    cmp_bits: u32,
    alpha: &[u64],
    rng: &mut R,
) -> Result<(MaskedBitKey, MaskedBitKey, Vec<bool>), GateError> {
    let (k0, k1) = bitdpf::keygen(BitDpfParams::new(cmp_bits)?, alpha, rng)?;
    let z = random_bits(rng, alpha.len());
    let (z0, z1) = share_bits(rng, &z);
    Ok((MaskedBitKey { cmp: k0, z: z0 }, MaskedBitKey { cmp: k1, z: z1 }, z))
}

impl MaskedBitKey {
    /// Open `ĉ = 1{y < α} ⊕ z` at the points `y` (one round), as words 0 or 1.
    pub async fn open(&self, ctx: &Ctx, y: &[u64]) -> Result<Vec<u64>, GateError> {
        ctx.open(&self.shares(y)?, 1).await
    }

    /// This party's XOR shares of `ĉ = 1{y < α} ⊕ z` at the points `y` (to open with
    /// others), as words 0 or 1.
    pub fn shares(&self, y: &[u64]) -> Result<Vec<u64>, GateError> {
        let mut lt = vec![CmpShares::default(); y.len()];
        self.cmp.eval(y, &mut lt)?;
        Ok(lt.iter().zip(&self.z).map(|(s, &z)| (s.lt.0 ^ z) as u64).collect())
    }

    pub fn read(cmp_bits: u32, party: Party, len: usize, r: &mut BitReader<'_>) -> Result<Self, DecodeError> {
        let params =
            BitDpfParams::new(cmp_bits).map_err(|_| DecodeError::InvalidField("comparison width"))?;
        let cmp = BitDpfKeys::read_material(params, party, len, r)?;
        let z = get_bits(r, len)?;
        Ok(MaskedBitKey { cmp, z })
    }

    pub fn write(&self, w: &mut BitWriter) {
        self.cmp.write_material(w);
        put_bits(w, &self.z);
    }
}

/// Shape of a [`CarryKey`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Carry {
    /// Width of the comparison.
    pub cmp_bits: u32,
    /// Width of the correction words.
    pub out_bits: u32,
    pub len: usize,
}

/// A masked comparison bit and the correction words `corr[ĉ]` it selects.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct CarryKey {
    shape: Carry,
    bit: MaskedBitKey,
    corr: [Vec<u64>; 2],
}
fss::wipe_on_drop!(CarryKey { wipe: [corr], zeroize: [bit] });

impl Carry {
    /// Deal: `alpha` the comparison points, `v[c]` the correction when the bit is `c`.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        alpha: &[u64],
        v: [&[u64]; 2],
        rng: &mut R,
    ) -> Result<(CarryKey, CarryKey), GateError> {
        let (k0, k1, z) = deal_masked_bits(self.cmp_bits, alpha, rng)?;
        let pick = |j: usize| -> Vec<u64> { (0..self.len).map(|i| v[j ^ z[i] as usize][i]).collect() };
        let (a0, a1) = share(rng, &pick(0), self.out_bits);
        let (b0, b1) = share(rng, &pick(1), self.out_bits);
        let shape = *self;
        Ok((CarryKey { shape, bit: k0, corr: [a0, b0] }, CarryKey { shape, bit: k1, corr: [a1, b1] }))
    }

    /// Open the masked bits at the points `y` (round 1) and return the selected corrections.
    pub async fn run(&self, ctx: &Ctx, key: &CarryKey, y: &[u64]) -> Result<Vec<u64>, GateError> {
        let opened = key.bit.open(ctx, y).await?;
        Ok(opened
            .iter()
            .zip(key.corr[0].iter().zip(&key.corr[1]))
            .map(|(&c, (&a, &b))| pick(c, a, b))
            .collect())
    }

    pub fn read(&self, party: Party, r: &mut BitReader<'_>) -> Result<CarryKey, DecodeError> {
        let bit = MaskedBitKey::read(self.cmp_bits, party, self.len, r)?;
        let a = get_words(r, self.len, self.out_bits)?;
        let b = get_words(r, self.len, self.out_bits)?;
        Ok(CarryKey { shape: *self, bit, corr: [a, b] })
    }
}

/// `b` if the opened bit `c` (0 or 1) is set, else `a`, without a branch (the bits are coin
/// flips).
#[inline(always)]
fn pick(c: u64, a: u64, b: u64) -> u64 {
    a ^ ((a ^ b) & c.wrapping_neg())
}

impl CarryKey {
    pub fn write(&self, w: &mut BitWriter) {
        self.bit.write(w);
        put_words(w, &self.corr[0], self.shape.out_bits);
        put_words(w, &self.corr[1], self.shape.out_bits);
    }
}

/// Implements [`GateKey`] for a key that is `party` plus one [`CarryKey`] field `carry`, read
/// with the shape's `carry()`.
macro_rules! carry_gate_key {
    ($key:ident, $shape:ty) => {
        impl GateKey for $key {
            type Shape = $shape;

            fn party(&self) -> Party {
                self.party
            }

            fn write(&self, w: &mut BitWriter) {
                self.carry.write(w);
            }

            fn read(s: &$shape, party: Party, r: &mut BitReader<'_>) -> Result<$key, DecodeError> {
                Ok($key { party, carry: s.carry().read(party, r)? })
            }
        }
    };
}

fn check_shift(bits: u32, shift: u32, max: u32) -> Result<(), GateError> {
    if shift == 0 || shift > max || bits > 64 {
        return Err(GateError::Params(format!("shift {shift} on {bits} bits")));
    }
    Ok(())
}

/// Truncate-reduce (SIGMA): `y = x >> s` (logical) from `Z_{2^n}` into `Z_{2^{n−s}}`:
/// `y = x̂_h − r_h − 1{x̂_l < r_l}` (no wrap term: the output ring drops it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruncReduce {
    /// Input ring width `n`.
    pub bits: u32,
    /// Shift `s`, `1 ≤ s < n`.
    pub shift: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`TruncReduce`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct TruncReduceKey {
    party: Party,
    carry: CarryKey,
}
fss::wipe_on_drop!(TruncReduceKey { wipe: [], zeroize: [carry] });
key_debug!(TruncReduceKey);
carry_gate_key!(TruncReduceKey, TruncReduce);

impl TruncReduce {
    fn output_width(&self) -> u32 {
        self.bits - self.shift
    }

    /// The plaintext result for one input.
    fn plain(&self, x: u64) -> u64 {
        (x >> self.shift) & mask(self.bits - self.shift)
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn carry(&self) -> Carry {
        Carry { cmp_bits: self.shift, out_bits: self.bits - self.shift, len: self.len }
    }

    /// Deal keys for input masks `r` (n bits) and output masks `rout` (n − s bits).
    ///
    /// # Errors
    /// [`GateError`] on bad parameters or lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(TruncReduceKey, TruncReduceKey), GateError> {
        check_shift(self.bits, self.shift, self.bits - 1)?;
        check_len("masks", self.len, r.len())?;
        check_len("output masks", self.len, rout.len())?;
        let (s, m) = (self.shift, mask(self.bits - self.shift));
        let v0: Vec<u64> = r.iter().zip(rout).map(|(&r, &o)| o.wrapping_sub(r >> s) & m).collect();
        let v1: Vec<u64> = v0.iter().map(|&v| v.wrapping_sub(1) & m).collect();
        let lows: Vec<u64> = r.iter().map(|&r| r & mask(s)).collect();
        let (c0, c1) = self.carry().deal(&lows, [&v0, &v1], rng)?;
        Ok((TruncReduceKey { party: Party::P0, carry: c0 }, TruncReduceKey { party: Party::P1, carry: c1 }))
    }

    /// The masked output (two rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &TruncReduceKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let s = self.shift;
        let lows: Vec<u64> = xh.iter().map(|&x| x & mask(s)).collect();
        let corr = self.carry().run(ctx, &key.carry, &lows).await?;
        let (m, own) = (mask(self.bits - s), party_term(ctx.party()));
        let y: Vec<u64> = xh.iter().zip(&corr).map(|(&x, &k)| (own * (x >> s)).wrapping_add(k) & m).collect();
        ctx.open(&y, self.bits - s).await
    }
}

unary!(TruncReduce, TruncReduceKey);

/// Truncate-with-slack (SIGMA's ARS, `TrWithSlack`): `y = ⌊x / 2^s⌋` for signed `x` with
/// `|x| < 2^{n−2}`, output in `Z_{2^out_bits}`. With `x1 = x̂ + 2^{n−2}`:
/// `y = (x1 >> s) − 2^{n−s−2} − r_h − 1{x1_l < r_l} + MSB(r)·2^{n−s}·(1 − MSB(x1))`.
/// Only an `s`-bit comparison; the slack replaces the `n`-bit wrap test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArsSlack {
    /// Input ring width `n`.
    pub bits: u32,
    /// Shift `s ≤ n − 2`.
    pub shift: u32,
    /// Output ring width (usually `n`).
    pub out_bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`ArsSlack`] key: the carry key and a share of `MSB(r)·2^{n−s}`.
#[derive(Clone, PartialEq, Eq)]
pub struct ArsSlackKey {
    party: Party,
    out_bits: u32,
    carry: CarryKey,
    wrap: Vec<u64>,
}
fss::wipe_on_drop!(ArsSlackKey { wipe: [wrap], zeroize: [carry] });
key_debug!(ArsSlackKey);

impl GateKey for ArsSlackKey {
    type Shape = ArsSlack;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.carry.write(w);
        put_words(w, &self.wrap, self.out_bits);
    }

    fn read(s: &ArsSlack, party: Party, r: &mut BitReader<'_>) -> Result<ArsSlackKey, DecodeError> {
        let carry = s.carry().read(party, r)?;
        let wrap = get_words(r, s.len, s.out_bits)?;
        Ok(ArsSlackKey { party, out_bits: s.out_bits, carry, wrap })
    }
}

/// `x + 2^{n−2} mod 2^n`: the slack identity's shift, which makes a value below `2^{n−2}`
/// in magnitude non-negative and below `2^{n−1}` (the truncations with slack read their
/// carry and sign from it).
#[inline]
pub(crate) fn slack_lift(x: u64, n: u32) -> u64 {
    x.wrapping_add(1 << (n - 2)) & mask(n)
}

impl ArsSlack {
    fn output_width(&self) -> u32 {
        self.out_bits
    }

    /// The plaintext result for one input.
    pub(crate) fn plain(&self, x: u64) -> u64 {
        let ring = Ring::new(self.bits).expect("valid width");
        ((ring.to_signed(x) >> self.shift) as u64) & mask(self.out_bits)
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn carry(&self) -> Carry {
        Carry { cmp_bits: self.shift, out_bits: self.out_bits, len: self.len }
    }

    pub(crate) fn check(&self) -> Result<(), GateError> {
        check_shift(self.bits, self.shift, self.bits.saturating_sub(2))?;
        if self.out_bits < self.bits - self.shift || self.out_bits > 64 {
            return Err(GateError::Params(format!("output width {} below n − s", self.out_bits)));
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
    ) -> Result<(ArsSlackKey, ArsSlackKey), GateError> {
        self.check()?;
        check_len("masks", self.len, r.len())?;
        check_len("output masks", self.len, rout.len())?;
        let (n, s, m) = (self.bits, self.shift, mask(self.out_bits));
        let v0: Vec<u64> = r.iter().zip(rout).map(|(&r, &o)| o.wrapping_sub(r >> s) & m).collect();
        let v1: Vec<u64> = v0.iter().map(|&v| v.wrapping_sub(1) & m).collect();
        let lows: Vec<u64> = r.iter().map(|&r| r & mask(s)).collect();
        let (c0, c1) = self.carry().deal(&lows, [&v0, &v1], rng)?;
        let wrap: Vec<u64> = r.iter().map(|&r| (((r >> (n - 1)) & 1) << (n - s)) & m).collect();
        let (w0, w1) = share(rng, &wrap, self.out_bits);
        let ob = self.out_bits;
        Ok((
            ArsSlackKey { party: Party::P0, out_bits: ob, carry: c0, wrap: w0 },
            ArsSlackKey { party: Party::P1, out_bits: ob, carry: c1, wrap: w1 },
        ))
    }

    /// The masked output (two rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ArsSlackKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.check()?;
        let (n, s, m) = (self.bits, self.shift, mask(self.out_bits));
        check_len("inputs", self.len, xh.len())?;
        let x1: Vec<u64> = xh.iter().map(|&x| slack_lift(x, n)).collect();
        let lows: Vec<u64> = x1.iter().map(|&x| x & mask(s)).collect();
        let opened = key.carry.bit.open(ctx, &lows).await?;
        let own = party_term(ctx.party());
        let [c0, c1] = &key.carry.corr;
        let y: Vec<u64> = x1
            .iter()
            .zip(&opened)
            .zip(c0.iter().zip(c1))
            .zip(&key.wrap)
            .map(|(((&x, &c), (&a, &b)), &w)| {
                let public = (x >> s).wrapping_sub(1 << (n - s - 2));
                let not_msb = 1 - (x >> (n - 1));
                (own * public).wrapping_add(pick(c, a, b)).wrapping_add(not_msb * w) & m
            })
            .collect();
        ctx.open(&y, self.out_bits).await
    }
}

unary!(ArsSlack, ArsSlackKey);

/// Sign or zero extension from `Z_{2^n'}` to `Z_{2^B}` (SIGMA): with `y = x̂ + off` (same
/// mask, `off = 2^{n'−1}` when signed), `x = y − r + 2^{n'}·1{y < r} − off` in `Z_{2^B}`. One
/// `n'`-bit comparison at the mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extend {
    /// Input width `n'`.
    pub bits: u32,
    /// Output width `B ≥ n'`.
    pub out_bits: u32,
    /// Two's complement (sign extension) or unsigned (zero extension).
    pub signed: bool,
    /// Elements.
    pub len: usize,
}

/// A party's [`Extend`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct ExtendKey {
    party: Party,
    carry: CarryKey,
}
fss::wipe_on_drop!(ExtendKey { wipe: [], zeroize: [carry] });
key_debug!(ExtendKey);
carry_gate_key!(ExtendKey, Extend);

impl Extend {
    fn output_width(&self) -> u32 {
        self.out_bits
    }

    /// The plaintext result for one input.
    fn plain(&self, x: u64) -> u64 {
        let v = if self.signed { Ring::new(self.bits).expect("valid width").to_signed(x) as u64 } else { x };
        v & mask(self.out_bits)
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn carry(&self) -> Carry {
        Carry { cmp_bits: self.bits, out_bits: self.out_bits, len: self.len }
    }

    fn offset(&self) -> u64 {
        if self.signed { 1 << (self.bits - 1) } else { 0 }
    }

    /// Deal keys for input masks `r` (n' bits) and output masks `rout` (B bits).
    ///
    /// # Errors
    /// [`GateError`] on bad parameters or lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(ExtendKey, ExtendKey), GateError> {
        if self.bits == 0 || self.out_bits < self.bits || self.out_bits > 64 {
            return Err(GateError::Params(format!("extension {} → {} bits", self.bits, self.out_bits)));
        }
        check_len("masks", self.len, r.len())?;
        check_len("output masks", self.len, rout.len())?;
        let m = mask(self.out_bits);
        let v0: Vec<u64> =
            r.iter().zip(rout).map(|(&r, &o)| o.wrapping_sub(r).wrapping_sub(self.offset()) & m).collect();
        let v1: Vec<u64> = v0.iter().map(|&v| v.wrapping_add(1u64.wrapping_shl(self.bits)) & m).collect();
        let (c0, c1) = self.carry().deal(r, [&v0, &v1], rng)?;
        Ok((ExtendKey { party: Party::P0, carry: c0 }, ExtendKey { party: Party::P1, carry: c1 }))
    }

    /// The masked output (two rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ExtendKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let y: Vec<u64> = xh.iter().map(|&x| x.wrapping_add(self.offset()) & mask(self.bits)).collect();
        let corr = self.carry().run(ctx, &key.carry, &y).await?;
        let own = party_term(ctx.party());
        let out: Vec<u64> =
            y.iter().zip(&corr).map(|(&y, &k)| (own * y).wrapping_add(k) & mask(self.out_bits)).collect();
        ctx.open(&out, self.out_bits).await
    }
}

unary!(Extend, ExtendKey);

/// Exact shift right by `s` of an `n`-bit value, result in `Z_{2^n}`: SIGMA's faithful ARS
/// (`TrFloor`) — truncate-reduce, then sign extension — or, unsigned, the exact LRS with a
/// zero extension. Four rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShiftExact {
    /// Ring width `n`.
    pub bits: u32,
    /// Shift `s`, `1 ≤ s < n`.
    pub shift: u32,
    /// Arithmetic (floor of the signed value) or logical.
    pub signed: bool,
    /// Elements.
    pub len: usize,
}

/// A party's [`ShiftExact`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct ShiftExactKey {
    party: Party,
    tr: TruncReduceKey,
    ext: ExtendKey,
}
fss::wipe_on_drop!(ShiftExactKey { wipe: [], zeroize: [tr, ext] });
key_debug!(ShiftExactKey);

impl GateKey for ShiftExactKey {
    type Shape = ShiftExact;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.tr.write(w);
        self.ext.write(w);
    }

    fn read(s: &ShiftExact, party: Party, r: &mut BitReader<'_>) -> Result<ShiftExactKey, DecodeError> {
        let tr = TruncReduceKey::read(&s.tr(), party, r)?;
        let ext = ExtendKey::read(&s.ext(), party, r)?;
        Ok(ShiftExactKey { party, tr, ext })
    }
}

impl ShiftExact {
    fn output_width(&self) -> u32 {
        self.bits
    }

    /// The plaintext result for one input.
    fn plain(&self, x: u64) -> u64 {
        if self.signed {
            (Ring::new(self.bits).expect("valid width").to_signed(x) >> self.shift) as u64 & mask(self.bits)
        } else {
            x >> self.shift
        }
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn tr(&self) -> TruncReduce {
        TruncReduce { bits: self.bits, shift: self.shift, len: self.len }
    }

    fn ext(&self) -> Extend {
        Extend { bits: self.bits - self.shift, out_bits: self.bits, signed: self.signed, len: self.len }
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
    ) -> Result<(ShiftExactKey, ShiftExactKey), GateError> {
        let mid = random_words(rng, self.len, self.bits - self.shift.min(self.bits));
        let (t0, t1) = self.tr().deal(r, &mid, rng)?;
        let (e0, e1) = self.ext().deal(&mid, rout, rng)?;
        Ok((
            ShiftExactKey { party: Party::P0, tr: t0, ext: e0 },
            ShiftExactKey { party: Party::P1, tr: t1, ext: e1 },
        ))
    }

    /// The masked output (four rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ShiftExactKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let t = self.tr().run(ctx, &key.tr, xh).await?;
        self.ext().run(ctx, &key.ext, &t).await
    }
}

unary!(ShiftExact, ShiftExactKey);

/// SIGMA's counterpart of an exact ARS that also yields the sign: its exact shift
/// ([`ShiftExact`]) and a DReLU on the same input, run side by side (their first rounds
/// share an exchange). Outputs: `⌊x / 2^s⌋` in `Z_{2^n}`, then the bit `1{x ≥ 0}`.
/// Four rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArsSign {
    /// Ring width `n`.
    pub bits: u32,
    /// Shift `s`, `1 ≤ s < n`.
    pub shift: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`ArsSign`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct ArsSignKey {
    party: Party,
    shift: ShiftExactKey,
    sign: crate::cmp::DreluKey,
}
fss::wipe_on_drop!(ArsSignKey { wipe: [], zeroize: [shift, sign] });
key_debug!(ArsSignKey);

impl GateKey for ArsSignKey {
    type Shape = ArsSign;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.shift.write(w);
        self.sign.write(w);
    }

    fn read(s: &ArsSign, party: Party, r: &mut BitReader<'_>) -> Result<ArsSignKey, DecodeError> {
        let shift = ShiftExactKey::read(&s.ars(), party, r)?;
        let sign = crate::cmp::DreluKey::read(&s.drelu(), party, r)?;
        Ok(ArsSignKey { party, shift, sign })
    }
}

impl ArsSign {
    fn ars(&self) -> ShiftExact {
        ShiftExact { bits: self.bits, shift: self.shift, signed: true, len: self.len }
    }

    fn drelu(&self) -> crate::cmp::Drelu {
        crate::cmp::Drelu { bits: self.bits, len: self.len }
    }
}

impl Gate for ArsSign {
    type Key = ArsSignKey;

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
        2 * self.len
    }

    fn output_wires(&self) -> Vec<(u32, usize)> {
        vec![(self.bits, self.len), (1, self.len)]
    }

    fn key_shape(&self) -> ArsSign {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(ArsSignKey, ArsSignKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output masks", 2 * self.len, mask_out.len())?;
        let (a0, a1) = self.ars().deal(masks_in[0], &mask_out[..self.len], rng)?;
        let (d0, d1) = self.drelu().deal(masks_in[0], &mask_out[self.len..], rng)?;
        Ok((
            ArsSignKey { party: Party::P0, shift: a0, sign: d0 },
            ArsSignKey { party: Party::P1, shift: a1, sign: d1 },
        ))
    }

    async fn eval(&self, ctx: &Ctx, key: &ArsSignKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        let drelu = self.drelu();
        let (y, s) = crate::online::join(
            self.ars().run(ctx, &key.shift, inputs[0]),
            drelu.eval(ctx, &key.sign, inputs),
        )
        .await;
        let mut out = y?;
        out.extend(s?);
        Ok(out)
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        let mut out = self.ars().reference(inputs);
        out.extend(self.drelu().reference(inputs));
        out
    }
}
