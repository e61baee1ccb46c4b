//! A block's output added to the residual stream, then RMSNorm of the sum (a pre-norm
//! transformer's seam, Llama's): `x = h + ⌊y / 2^s⌋` for a block output `y` at scale `2s`,
//! output `[RMSNorm(x); x]` stacked (the normalised rows, then the new residual stream).
//!
//! - [`ResidualNorm`] (SIGMA): the truncation with slack ([`ArsSlack`], 2 rounds), the local
//!   sum, then [`Norm`] (RMSNorm: 11 rounds) — SIGMA's separate gates.
//! - [`DeferredResidualNorm`] (FuseFSS): the truncation's carry `c` is opened as a masked bit
//!   `ĉ = c ⊕ z` (one round, one bit per element) and never converted to a word. Then
//!   `x = X̂ − K` with `X̂` public and a mask `K = D + ĉ·B + μ·C` that depends on public bits
//!   (`ĉ`, and `μ` from the slack identity). The sum of squares, a product, absorbs that
//!   mask: the dealer gives shares of `D`, `B`, `C` and of the cross terms of `K²`, and the
//!   parties open the row sums of squares and the re-masked residual `x + r_x` in one round.
//!   The truncation costs its masked bit: the rounds of a one-round truncation with the key
//!   of a two-round one less its correction words (FuseFSS paper §4, truncations fused into
//!   their consumers).

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party};
use zeroize::Zeroize;

use crate::dealer::{random_words, share};
use crate::error::{GateError, check_len};
use crate::gate::{Gate, KeyPair};
use crate::keyio::{GateKey, get_words, put_words};
use crate::kit::{check_inputs, check_party, party_term};
use crate::norm::{Norm, NormKey, NormTailKey};
use crate::online::Ctx;
use crate::shift::{ArsSlack, ArsSlackKey, MaskedBitKey, deal_masked_bits, slack_lift};
use crate::unary::{SigmaRsqrt, SigmaShift, UnaryFamily};

/// `x = h + ⌊y / 2^shift⌋` (`|y| < 2^{n−2}`), output `[norm(x); x]`, SIGMA's way: a
/// truncation with slack, then the normalisation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResidualNorm<M = SigmaShift, Q = SigmaRsqrt> {
    /// The truncation of the block output.
    pub shift: u32,
    /// The normalisation of the sum (its rows and columns are the inputs').
    pub norm: Norm<M, Q>,
}

/// A party's [`ResidualNorm`] key.
pub struct ResidualNormKey<M: UnaryFamily, Q: UnaryFamily> {
    party: Party,
    ars: ArsSlackKey,
    norm: NormKey<M, Q>,
}

impl<M: UnaryFamily, Q: UnaryFamily> std::fmt::Debug for ResidualNormKey<M, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResidualNormKey").field("party", &self.party).finish_non_exhaustive()
    }
}

impl<M: UnaryFamily, Q: UnaryFamily> GateKey for ResidualNormKey<M, Q> {
    type Shape = ResidualNorm<M, Q>;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.ars.write(w);
        self.norm.write(w);
    }

    fn read(s: &ResidualNorm<M, Q>, party: Party, r: &mut BitReader<'_>) -> Result<Self, DecodeError> {
        let ars = ArsSlackKey::read(&s.ars(), party, r)?;
        Ok(ResidualNormKey { party, ars, norm: NormKey::read(&s.norm, party, r)? })
    }
}

/// The wires of a seam, both implementations: two inputs of `rows × cols` ring elements (the
/// residual, the block output), the normalised rows and the sum stacked as the output.
macro_rules! seam_wires {
    ($shape:ident) => {
        fn input_bits(&self) -> Vec<u32> {
            vec![self.norm.bits; 2]
        }

        fn input_lens(&self) -> Vec<usize> {
            vec![len_of(&self.norm); 2]
        }

        fn output_bits(&self) -> u32 {
            self.norm.bits
        }

        fn output_len(&self) -> usize {
            2 * len_of(&self.norm)
        }

        fn key_shape(&self) -> $shape<M, Q> {
            self.clone()
        }
    };
}

/// Elements of each input.
fn len_of<M, Q>(norm: &Norm<M, Q>) -> usize {
    norm.rows * norm.cols
}

fn check_shift(bits: u32, shift: u32) -> Result<(), GateError> {
    if shift == 0 || shift + 2 > bits || 2 * shift > bits {
        return Err(GateError::Params(format!("residual truncation by {shift} on {bits} bits")));
    }
    Ok(())
}

/// `[norm(h + ⌊y/2^s⌋); h + ⌊y/2^s⌋]` in the clear.
fn plain<M: UnaryFamily, Q: UnaryFamily>(norm: &Norm<M, Q>, shift: u32, h: &[u64], y: &[u64]) -> Vec<u64> {
    let ars = ArsSlack { bits: norm.bits, shift, out_bits: norm.bits, len: 1 };
    let x: Vec<u64> =
        h.iter().zip(y).map(|(&h, &y)| h.wrapping_add(ars.reference(&[&[y]])[0]) & mask(norm.bits)).collect();
    let mut out = norm.plain(&x);
    out.extend_from_slice(&x);
    out
}

impl<M: UnaryFamily, Q: UnaryFamily> ResidualNorm<M, Q> {
    fn ars(&self) -> ArsSlack {
        ArsSlack {
            bits: self.norm.bits,
            shift: self.shift,
            out_bits: self.norm.bits,
            len: len_of(&self.norm),
        }
    }
}

impl<M: UnaryFamily, Q: UnaryFamily> Gate for ResidualNorm<M, Q> {
    type Key = ResidualNormKey<M, Q>;

    seam_wires!(ResidualNorm);

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<KeyPair<Self::Key>, GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output masks", self.output_len(), mask_out.len())?;
        check_shift(self.norm.bits, self.shift)?;
        let (rn, rx) = mask_out.split_at(len_of(&self.norm));
        // The truncation's output mask makes `ĥ + t̂` the sum masked by `r_x`.
        let m = mask(self.norm.bits);
        let rt: Vec<u64> = rx.iter().zip(masks_in[0]).map(|(&x, &h)| x.wrapping_sub(h) & m).collect();
        let (a0, a1) = self.ars().deal(masks_in[1], &rt, rng)?;
        let (n0, n1) = self.norm.deal(rx, rn, rng)?;
        Ok((
            ResidualNormKey { party: Party::P0, ars: a0, norm: n0 },
            ResidualNormKey { party: Party::P1, ars: a1, norm: n1 },
        ))
    }

    async fn eval(&self, ctx: &Ctx, key: &Self::Key, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        check_shift(self.norm.bits, self.shift)?;
        let t = self.ars().run(ctx, &key.ars, inputs[1]).await?;
        let m = mask(self.norm.bits);
        let x: Vec<u64> = inputs[0].iter().zip(&t).map(|(&h, &t)| h.wrapping_add(t) & m).collect();
        let mut out = self.norm.run(ctx, &key.norm, &x).await?;
        out.extend_from_slice(&x);
        Ok(out)
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        plain(&self.norm, self.shift, inputs[0], inputs[1])
    }
}

/// [`ResidualNorm`] with the truncation's carry deferred into the sum of squares (FuseFSS;
/// module docs): one round for the truncation, and an RMSNorm (`norm.normalize` false).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeferredResidualNorm<M, Q> {
    /// The truncation of the block output.
    pub shift: u32,
    /// The RMSNorm of the sum.
    pub norm: Norm<M, Q>,
}

/// A party's [`DeferredResidualNorm`] key. Per element: the masked carry bit, shares of
/// `r_x − D`, `D`, `B` and `E1 = 2DB + B²` (ring words) and of `C`, `E2 = 2DC + C²` and
/// `E3 = 2BC` divided by `2^{n−s}` (`s`-bit words: `C` is a multiple of `2^{n−s}`); per row,
/// shares of `Σ D² + r_v`; then the normalisation after its sum of squares.
pub struct DeferredResidualNormKey<M: UnaryFamily, Q: UnaryFamily> {
    party: Party,
    bits: u32,
    shift: u32,
    carry: MaskedBitKey,
    words: [Vec<u64>; 4],
    high: [Vec<u64>; 3],
    rows: Vec<u64>,
    tail: NormTailKey<Q>,
    _mean: std::marker::PhantomData<M>,
}

impl<M: UnaryFamily, Q: UnaryFamily> Drop for DeferredResidualNormKey<M, Q> {
    fn drop(&mut self) {
        self.words.iter_mut().for_each(Zeroize::zeroize);
        self.high.iter_mut().for_each(Zeroize::zeroize);
        self.rows.zeroize();
    }
}

impl<M: UnaryFamily, Q: UnaryFamily> std::fmt::Debug for DeferredResidualNormKey<M, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredResidualNormKey").field("party", &self.party).finish_non_exhaustive()
    }
}

impl<M: UnaryFamily, Q: UnaryFamily> GateKey for DeferredResidualNormKey<M, Q> {
    type Shape = DeferredResidualNorm<M, Q>;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        let (n, s) = (self.bits, self.shift);
        self.carry.write(w);
        self.words.iter().for_each(|v| put_words(w, v, n));
        self.high.iter().for_each(|v| put_words(w, v, s));
        put_words(w, &self.rows, n);
        self.tail.write(w);
    }

    fn read(
        s: &DeferredResidualNorm<M, Q>,
        party: Party,
        r: &mut BitReader<'_>,
    ) -> Result<Self, DecodeError> {
        let (n, len) = (s.norm.bits, len_of(&s.norm));
        let carry = MaskedBitKey::read(s.shift, party, len, r)?;
        let mut word = || get_words(r, len, n);
        let words = [word()?, word()?, word()?, word()?];
        let mut high = || get_words(r, len, s.shift);
        let high = [high()?, high()?, high()?];
        let rows = get_words(r, s.norm.rows, n)?;
        let tail = NormTailKey::read(&s.norm, party, r)?;
        Ok(DeferredResidualNormKey {
            party,
            bits: n,
            shift: s.shift,
            carry,
            words,
            high,
            rows,
            tail,
            _mean: std::marker::PhantomData,
        })
    }
}

impl<M: UnaryFamily, Q: UnaryFamily> DeferredResidualNorm<M, Q> {
    /// A deferred residual normalisation: `norm` must be an RMSNorm (the sum of squares
    /// comes first; LayerNorm's mean shift needs a fixed mask).
    ///
    /// # Errors
    /// [`GateError::Params`] for a LayerNorm or a shift that does not fit.
    pub fn new(shift: u32, norm: Norm<M, Q>) -> Result<DeferredResidualNorm<M, Q>, GateError> {
        let g = DeferredResidualNorm { shift, norm };
        g.check()?;
        Ok(g)
    }

    fn check(&self) -> Result<(), GateError> {
        if self.norm.normalize {
            return Err(GateError::Params("a deferred residual carry needs an RMSNorm".into()));
        }
        check_shift(self.norm.bits, self.shift)
    }
}

impl<M: UnaryFamily, Q: UnaryFamily> Gate for DeferredResidualNorm<M, Q> {
    type Key = DeferredResidualNormKey<M, Q>;

    seam_wires!(DeferredResidualNorm);

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<KeyPair<Self::Key>, GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output masks", self.output_len(), mask_out.len())?;
        self.check()?;
        let (n, s, cols) = (self.norm.bits, self.shift, self.norm.cols);
        let (m, ms) = (mask(n), mask(s));
        let (rh, ry) = (masks_in[0], masks_in[1]);
        let (rn, rx) = mask_out.split_at(len_of(&self.norm));
        // The carry 1{x̂1_l < r_l} of the truncation with slack (x1 = y + 2^{n−2}, same mask).
        let lows: Vec<u64> = ry.iter().map(|&r| r & ms).collect();
        let (k0, k1, z) = deal_masked_bits(s, &lows, rng)?;
        // K = D + ĉ·B + μ·C: D = r_h + r_y >> s + z, B = 1 − 2z, C = −msb(r_y)·2^{n−s}.
        let len = len_of(&self.norm);
        let (mut d, mut b, mut e1) =
            (Vec::with_capacity(len), Vec::with_capacity(len), Vec::with_capacity(len));
        let (mut c, mut e2, mut e3) =
            (Vec::with_capacity(len), Vec::with_capacity(len), Vec::with_capacity(len));
        for i in 0..len {
            let (zi, msb) = (z[i] as u64, (ry[i] >> (n - 1)) & 1);
            let di = rh[i].wrapping_add(ry[i] >> s).wrapping_add(zi) & m;
            let bi = 1u64.wrapping_sub(2 * zi) & m;
            d.push(di);
            b.push(bi);
            e1.push(di.wrapping_mul(bi).wrapping_mul(2).wrapping_add(1) & m);
            // C/2^{n−s}, (2DC + C²)/2^{n−s} and 2BC/2^{n−s}, mod 2^s.
            c.push(msb.wrapping_neg() & ms);
            let c2 = msb << (n - s);
            e2.push(di.wrapping_mul(2).wrapping_mul(msb).wrapping_neg().wrapping_add(c2) & ms);
            e3.push(bi.wrapping_mul(2).wrapping_mul(msb).wrapping_neg() & ms);
        }
        let rv = random_words(rng, self.norm.rows, n);
        let mut g: Vec<u64> = d
            .chunks(cols)
            .zip(&rv)
            .map(|(row, &v)| row.iter().fold(v, |a, &x| a.wrapping_add(x.wrapping_mul(x))) & m)
            .collect();
        let mut rxd: Vec<u64> = rx.iter().zip(&d).map(|(&x, &d)| x.wrapping_sub(d) & m).collect();
        let mut sh = |v: &[u64], bits: u32| share(rng, v, bits);
        let [(w0, w1), (d0, d1), (b0, b1), (f0, f1)] = [&rxd, &d, &b, &e1].map(|v| sh(v, n));
        let [(c0, c1), (g0, g1), (h0, h1)] = [&c, &e2, &e3].map(|v| sh(v, s));
        let (r0, r1) = sh(&g, n);
        for v in [&mut rxd, &mut d, &mut b, &mut e1, &mut c, &mut e2, &mut e3, &mut g] {
            v.zeroize();
        }
        let (t0, t1) = self.norm.deal_tail(rx, &rv, rn, rng)?;
        let key = |party, carry, words, high, rows, tail| DeferredResidualNormKey {
            party,
            bits: n,
            shift: s,
            carry,
            words,
            high,
            rows,
            tail,
            _mean: std::marker::PhantomData,
        };
        Ok((
            key(Party::P0, k0, [w0, d0, b0, f0], [c0, g0, h0], r0, t0),
            key(Party::P1, k1, [w1, d1, b1, f1], [c1, g1, h1], r1, t1),
        ))
    }

    async fn eval(&self, ctx: &Ctx, key: &Self::Key, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        self.check()?;
        let (n, s, cols) = (self.norm.bits, self.shift, self.norm.cols);
        let (m, up) = (mask(n), n - s);
        let (hh, yh) = (inputs[0], inputs[1]);
        let x1: Vec<u64> = yh.iter().map(|&y| slack_lift(y, n)).collect();
        let lows: Vec<u64> = x1.iter().map(|&x| x & mask(s)).collect();
        // Round 1: the masked carries.
        let chat = key.carry.open(ctx, &lows).await?;
        let own = party_term(ctx.party());
        let [rxd, d, b, e1] = &key.words;
        let [c, e2, e3] = &key.high;
        let len = len_of(&self.norm);
        let mut shares = Vec::with_capacity(len + self.norm.rows);
        let mut sums = key.rows.clone();
        for i in 0..len {
            // X̂ = ĥ + (x1 >> s) − 2^{n−s−2}; μ = 1 − msb(x1).
            let xh = hh[i].wrapping_add(x1[i] >> s).wrapping_sub(1 << (n - s - 2)) & m;
            let (cb, mu) = (chat[i], 1 - (x1[i] >> (n - 1)));
            let ci = c[i] << up;
            let k = d[i].wrapping_add(cb.wrapping_mul(b[i])).wrapping_add(mu.wrapping_mul(ci));
            shares.push((own * xh).wrapping_add(rxd[i]).wrapping_sub(k.wrapping_sub(d[i])) & m);
            let sq = (own * xh.wrapping_mul(xh))
                .wrapping_sub(xh.wrapping_mul(k).wrapping_mul(2))
                .wrapping_add(cb.wrapping_mul(e1[i]))
                .wrapping_add(mu.wrapping_mul(e2[i] << up))
                .wrapping_add((cb & mu).wrapping_mul(e3[i] << up));
            sums[i / cols] = sums[i / cols].wrapping_add(sq);
        }
        shares.extend(sums.iter().map(|&v| v & m));
        // Round 2: the re-masked residual and the row sums of squares.
        let opened = ctx.open(&shares, n).await?;
        let (x, v) = opened.split_at(len);
        let mut out = self.norm.run_tail(ctx, &key.tail, x, v).await?;
        out.extend_from_slice(x);
        Ok(out)
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        plain(&self.norm, self.shift, inputs[0], inputs[1])
    }
}
