//! SIGMA's reciprocal square root for LayerNorm (`Rsqrt` = `F2BF16` + a 13-bit table).
//!
//! `F2BF16` turns a non-negative `x < 2^{n−1}` into a 13-bit pseudo-float index
//! `64·m7 + k`: `k = ⌊log2 x⌋` and the normaliser `m = 2^{n−1−k}` come from one DCF at the
//! mask read at `x̂ − 2^i` for every `i` (`λ_i = 1{x < 2^i}`,
//! docs/design/fss-building-blocks.md §6.1 rule 1); `p = x·m` puts the leading one at bit
//! `n − 1`; `m7` are the next 7 bits (floor). The table holds
//! `⌊2^{2s} / sqrt(val / d)⌋`, `val = (128 + m7)·2^{k−7}`, so that a sum of squares at scale
//! `2s` over a row of `d` gives `1/σ` at scale `s`. Rounds: 1 (k, m) + 1 (product) + 1
//! (index) + 2 (table) = **5**.

use std::sync::Arc;

use fss::codec::{BitReader, BitWriter};
use fss::dcf::{self, DcfKeys, DcfParams};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{AddShare, DecodeError, Party};

use crate::arith::{Mul, MulKey};
use crate::dealer::{random_words, share};
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_words, key_debug, put_words};
use crate::kit::{check_inputs, check_party, party_term, unary};
use crate::lut::{Lut, LutKey};
use crate::nonlinear::floor_table;
use crate::online::Ctx;

/// Width of the pseudo-float index.
const INDEX_BITS: u32 = 13;

/// `1/sqrt(x/d)` at scale `s` for a non-negative `x < 2^{n−1}` at scale `2s`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rsqrt {
    /// Ring width `n` (at least 16).
    pub bits: u32,
    /// Output scale `s` (the input is at `2s`).
    pub scale: u32,
    /// The row length folded into the table.
    pub d: u64,
    /// Elements.
    pub len: usize,
    table: Arc<[u64]>,
}

/// A party's [`Rsqrt`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct RsqrtKey {
    party: Party,
    bits: u32,
    /// DCF at the input mask, payload 1 (the exponent tests).
    exp: DcfKeys,
    /// Shares of the masks of `k` and `m`.
    rk: Vec<u64>,
    rm: Vec<u64>,
    mul: MulKey,
    /// DCF at the low `n − 8` bits of the product's mask (the mantissa carry).
    carry: DcfKeys,
    /// Shares of `r_idx − r_k − 64·(r_p >> (n − 8))` (13 bits).
    idx: Vec<u64>,
    lut: LutKey,
}
fss::wipe_on_drop!(RsqrtKey { wipe: [rk, rm, idx], zeroize: [exp, mul, carry, lut] });
key_debug!(RsqrtKey);

impl GateKey for RsqrtKey {
    type Shape = Rsqrt;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.exp.write_material(w);
        put_words(w, &self.rk, self.bits);
        put_words(w, &self.rm, self.bits);
        self.mul.write(w);
        self.carry.write_material(w);
        put_words(w, &self.idx, INDEX_BITS);
        self.lut.write(w);
    }

    fn read(s: &Rsqrt, party: Party, r: &mut BitReader<'_>) -> Result<RsqrtKey, DecodeError> {
        let bad = |_| DecodeError::InvalidField("rsqrt widths");
        let exp = DcfKeys::read_material(s.exp_params().map_err(bad)?, party, s.len, r)?;
        let rk = get_words(r, s.len, s.bits)?;
        let rm = get_words(r, s.len, s.bits)?;
        let mul = MulKey::read(&s.mul(), party, r)?;
        let carry = DcfKeys::read_material(s.carry_params().map_err(bad)?, party, s.len, r)?;
        let idx = get_words(r, s.len, INDEX_BITS)?;
        let lut = LutKey::read(&s.lut(), party, r)?;
        Ok(RsqrtKey { party, bits: s.bits, exp, rk, rm, mul, carry, idx, lut })
    }
}

impl Rsqrt {
    /// The gate with its table.
    ///
    /// # Errors
    /// [`GateError::Params`] for unsupported widths or `d = 0`.
    pub fn new(bits: u32, scale: u32, d: u64, len: usize) -> Result<Rsqrt, GateError> {
        if !(16..=64).contains(&bits) || d == 0 || 2 * scale >= 62 {
            return Err(GateError::Params(format!("rsqrt on {bits} bits, scale {scale}, d {d}")));
        }
        let num = (1u64 << (2 * scale)) as f64;
        let table = floor_table(INDEX_BITS, bits, |idx| {
            let (m, k) = ((idx >> 6) as f64, (idx & 63) as i32);
            let val = (m + 128.0) * 2f64.powi(k - 7);
            num / (val / d as f64).sqrt()
        });
        Ok(Rsqrt { bits, scale, d, len, table })
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn output_width(&self) -> u32 {
        self.bits
    }

    fn exp_params(&self) -> Result<DcfParams, GateError> {
        Ok(DcfParams::new(self.bits, self.bits, 1)?)
    }

    fn carry_params(&self) -> Result<DcfParams, GateError> {
        Ok(DcfParams::new(self.bits - 8, 7, 1)?)
    }

    fn mul(&self) -> Mul {
        Mul { bits: self.bits, len: self.len }
    }

    fn lut(&self) -> Lut {
        Lut { in_bits: INDEX_BITS, out_bits: self.bits, len: self.len, table: self.table.clone() }
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
    ) -> Result<(RsqrtKey, RsqrtKey), GateError> {
        let (n, len) = (self.bits, self.len);
        let (e0, e1) = dcf::keygen(self.exp_params()?, r, &vec![1; len], rng)?;
        let (rk, rm) = (random_words(rng, len, n), random_words(rng, len, n));
        let (rk0, rk1) = share(rng, &rk, n);
        let (rm0, rm1) = share(rng, &rm, n);
        let rp = random_words(rng, len, n);
        let (m0, m1) = self.mul().keygen(&[r, &rm], &rp, rng)?;
        let lows: Vec<u64> = rp.iter().map(|&p| p & mask(n - 8)).collect();
        let (c0, c1) = dcf::keygen(self.carry_params()?, &lows, &vec![1; len], rng)?;
        let ridx = random_words(rng, len, INDEX_BITS);
        let idx: Vec<u64> = (0..len)
            .map(|i| ridx[i].wrapping_sub(rk[i]).wrapping_sub((rp[i] >> (n - 8)) << 6) & mask(INDEX_BITS))
            .collect();
        let (i0, i1) = share(rng, &idx, INDEX_BITS);
        let (l0, l1) = self.lut().deal(&ridx, rout, rng)?;
        Ok((
            RsqrtKey {
                party: Party::P0,
                bits: n,
                exp: e0,
                rk: rk0,
                rm: rm0,
                mul: m0,
                carry: c0,
                idx: i0,
                lut: l0,
            },
            RsqrtKey {
                party: Party::P1,
                bits: n,
                exp: e1,
                rk: rk1,
                rm: rm1,
                mul: m1,
                carry: c1,
                idx: i1,
                lut: l1,
            },
        ))
    }

    /// The masked output (five rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &RsqrtKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let (n, len) = (self.bits, self.len);
        let own = party_term(ctx.party());
        // λ_i = 1{x < 2^i} for i = 1..n−1, from DCF points x̂ (lane 0) and x̂ − 2^i (lane i).
        let lanes: Vec<u32> = (0..len as u32).flat_map(|e| std::iter::repeat_n(e, n as usize)).collect();
        let points: Vec<u64> = xh
            .iter()
            .flat_map(|&x| (0..n).map(move |i| if i == 0 { x } else { x.wrapping_sub(1 << i) & mask(n) }))
            .collect();
        let mut d = vec![AddShare::default(); points.len()];
        key.exp.eval_indexed(&lanes, &points, &mut d)?;
        let (mut ks, mut ms) = (vec![0u64; len], vec![0u64; len]);
        for e in 0..len {
            let row = &d[e * n as usize..(e + 1) * n as usize];
            let mut prev = 0u64;
            for i in 1..n as usize {
                let public = own * (xh[e] < (1u64 << i)) as u64;
                let lambda = row[i].0.wrapping_sub(row[0].0).wrapping_add(public);
                let step = lambda.wrapping_sub(prev);
                ks[e] = ks[e].wrapping_add(step.wrapping_mul(i as u64 - 1));
                ms[e] = ms[e].wrapping_add(step.wrapping_mul(1u64 << (n as usize - i)));
                prev = lambda;
            }
            ks[e] = ks[e].wrapping_add(key.rk[e]) & mask(n);
            ms[e] = ms[e].wrapping_add(key.rm[e]) & mask(n);
        }
        let opened = ctx.open_many(&[(&ks, n), (&ms, n)]).await?;
        let (kh, mh) = (&opened[0], &opened[1]);
        let ph = self.mul().eval(ctx, &key.mul, &[xh, mh]).await?;
        let lows: Vec<u64> = ph.iter().map(|&p| p & mask(n - 8)).collect();
        let mut carry = vec![AddShare::default(); len];
        key.carry.eval(&lows, &mut carry)?;
        let idx: Vec<u64> = (0..len)
            .map(|i| {
                let top = own * ((ph[i] >> (n - 8)).wrapping_sub(128) << 6).wrapping_add(own * kh[i]);
                top.wrapping_sub(carry[i].0 << 6).wrapping_add(key.idx[i]) & mask(INDEX_BITS)
            })
            .collect();
        let ih = ctx.open(&idx, INDEX_BITS).await?;
        self.lut().run(ctx, &key.lut, &ih).await
    }

    /// The pseudo-float index of `x` (what `F2BF16` computes).
    pub fn index(&self, x: u64) -> u64 {
        let n = self.bits;
        let x = x & mask(n);
        let (k, m) = if x >> (n - 1) == 1 {
            (0, 0)
        } else if x < 2 {
            (0, 1u64 << (n - 1))
        } else {
            let k = 63 - x.leading_zeros() as u64;
            (k, 1u64 << (n as u64 - 1 - k))
        };
        let top = (x.wrapping_mul(m) & mask(n)) >> (n - 8);
        (top.wrapping_sub(128) << 6).wrapping_add(k) & mask(INDEX_BITS)
    }

    /// The plaintext result.
    pub fn plain(&self, x: u64) -> u64 {
        self.table[self.index(x) as usize]
    }
}
unary!(Rsqrt, RsqrtKey);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_a_pseudo_float() {
        let g = Rsqrt::new(50, 12, 1, 1).unwrap();
        assert_eq!(g.index(0), 0);
        assert_eq!(g.index(1), 0);
        // 3 = 1.1b · 2^1: k = 1, mantissa 0.1000000b.
        assert_eq!(g.index(3), 64 * 64 + 1);
        assert_eq!(g.index(1 << 40), 40);
        assert_eq!(g.index((1 << 41) - 1), 127 * 64 + 40);
    }
}
