//! LayerNorm's first steps, the row mean's shift and the centred rows' sums of squares, in
//! one round (FuseFSS; paper §4, fused operators).
//!
//! Separately, the mean `μ = ⌊f·S/2^k⌋` of a row sum `S` is a one-round truncation with
//! slack ([`crate::nonlinear::ArsSlackDcf`]: its DCF gives shares of the carry `c`, then
//! `μ + r_μ` is opened), and the sum of squares of `x − μ` another round
//! ([`crate::norm::SumSq`]). Here both open in the same message: with `μ = P + G − c`
//! (`P` public, `G = −⌊ρ/2^k⌋ + t·msb(ρ)·2^{n−k}` for the public slack bit `t` and the
//! mean's input mask `ρ`), the centred sum of squares is
//! `Σ_j (x_j − μ)² = Σ_j x_j² − 2μ·S + d·μ²`, and `μ·S` and `μ²` are sums of public values
//! times words the dealer shares: `S = Ŝ − R` with `R` the row's mask sum, and the carry's
//! products `c·R`, `c·⌊ρ/2^k⌋`, `c·msb(ρ)·2^{n−k}` come from the same DCF as `c` (its payload
//! is the vector `(1, R, ⌊ρ/2^k⌋, msb(ρ)·2^{n−k})`). One round against two, for a payload of
//! four words and ten dealer words per *row*.

use fss::codec::{BitReader, BitWriter};
use fss::dcf::{self, DcfKeys, DcfParams};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::share::AddShare;
use fss::{DecodeError, Party};
use zeroize::Zeroize;

use crate::dealer::share;
use crate::error::{GateError, check_len};
use crate::keyio::{get_words, key_debug, put_words};
use crate::kit::party_term;
use crate::online::Ctx;

/// Rows `x_i` of `cols` values in `Z_{2^bits}`: `μ_i = ⌊factor·Σ_j x_ij / 2^shift⌋` (signed,
/// `|factor·Σ_j x_ij| < 2^{bits−2}`) and `V_i = Σ_j (x_ij − μ_i)² mod 2^bits`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CentredSumSq {
    /// Ring width `n`.
    pub bits: u32,
    /// The mean's shift `k` (`1 ≤ k ≤ n − 2`).
    pub shift: u32,
    /// The row sum's factor before the shift.
    pub factor: u64,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
}

/// Per-row dealer words of a [`CentredSumSqKey`], in order.
const ROW_WORDS: usize = 10;

/// A party's [`CentredSumSq`] key: the carry DCF with its vector payload, shares of every
/// input mask, and per row shares of `R, E, W, E·R, W·R, E², E·W, W², Σ_j r_j² + r_v` and
/// `r_μ − E` (`E = ⌊ρ/2^k⌋`, `W = msb(ρ)·2^{n−k}`).
#[derive(Clone, PartialEq, Eq)]
pub struct CentredSumSqKey {
    party: Party,
    bits: u32,
    dcf: DcfKeys,
    r: Vec<u64>,
    rows: [Vec<u64>; ROW_WORDS],
}
fss::wipe_on_drop!(CentredSumSqKey { wipe: [r, rows], zeroize: [dcf] });

key_debug!(CentredSumSqKey);

impl CentredSumSq {
    fn params(&self) -> Result<DcfParams, GateError> {
        if self.bits < 4 || self.bits > 64 || self.shift == 0 || self.shift > self.bits - 2 || self.cols == 0
        {
            return Err(GateError::Params(format!(
                "centred sum of squares: shift {} of rows of {} on {} bits",
                self.shift, self.cols, self.bits
            )));
        }
        Ok(DcfParams::new(self.shift, self.bits, 4)?)
    }

    fn offset(&self) -> u64 {
        1u64 << (self.bits - 2)
    }

    /// Deal keys for input masks `r`, and per row the masks `r_mu` of the opened mean and
    /// `r_v` of the opened sum of squares.
    ///
    /// # Errors
    /// [`GateError`] on bad parameters or lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        r_mu: &[u64],
        r_v: &[u64],
        rng: &mut R,
    ) -> Result<(CentredSumSqKey, CentredSumSqKey), GateError> {
        let params = self.params()?;
        check_len("masks", self.rows * self.cols, r.len())?;
        check_len("mean masks", self.rows, r_mu.len())?;
        check_len("sum-of-squares masks", self.rows, r_v.len())?;
        let (n, k) = (self.bits, self.shift);
        let m = mask(n);
        let mut sums: Vec<u64> =
            r.chunks(self.cols).map(|row| row.iter().fold(0u64, |s, &v| s.wrapping_add(v)) & m).collect();
        let mut alphas = Vec::with_capacity(self.rows);
        let mut betas = Vec::with_capacity(4 * self.rows);
        let mut words: [Vec<u64>; ROW_WORDS] = std::array::from_fn(|_| Vec::with_capacity(self.rows));
        for (i, row) in r.chunks(self.cols).enumerate() {
            let big_r = sums[i];
            let rho = big_r.wrapping_mul(self.factor) & m;
            let e = rho >> k;
            let w = ((rho >> (n - 1)) << (n - k)) & m;
            let q = row.iter().fold(r_v[i], |s, &v| s.wrapping_add(v.wrapping_mul(v)));
            alphas.push(rho & mask(k));
            betas.extend([1, big_r, e, w]);
            let row_words = [
                big_r,
                e,
                w,
                e.wrapping_mul(big_r),
                w.wrapping_mul(big_r),
                e.wrapping_mul(e),
                e.wrapping_mul(w),
                w.wrapping_mul(w),
                q,
                r_mu[i].wrapping_sub(e),
            ];
            for (v, x) in words.iter_mut().zip(row_words) {
                v.push(x & m);
            }
        }
        let (d0, d1) = dcf::keygen(params, &alphas, &betas, rng)?;
        let (r0, r1) = share(rng, r, n);
        let mut shares: [(Vec<u64>, Vec<u64>); ROW_WORDS] = std::array::from_fn(|j| share(rng, &words[j], n));
        sums.zeroize();
        alphas.zeroize();
        betas.zeroize();
        words.iter_mut().for_each(Zeroize::zeroize);
        let rows0: [Vec<u64>; ROW_WORDS] = std::array::from_fn(|j| std::mem::take(&mut shares[j].0));
        let rows1: [Vec<u64>; ROW_WORDS] = std::array::from_fn(|j| std::mem::take(&mut shares[j].1));
        Ok((
            CentredSumSqKey { party: Party::P0, bits: n, dcf: d0, r: r0, rows: rows0 },
            CentredSumSqKey { party: Party::P1, bits: n, dcf: d1, r: r1, rows: rows1 },
        ))
    }

    /// The masked means `μ + r_μ` and sums of squares `V + r_v`, one per row (one round).
    ///
    /// # Errors
    /// [`GateError`] on bad lengths or a peer's bad message.
    pub async fn run(
        &self,
        ctx: &Ctx,
        key: &CentredSumSqKey,
        xh: &[u64],
    ) -> Result<(Vec<u64>, Vec<u64>), GateError> {
        self.params()?;
        check_len("masked inputs", self.rows * self.cols, xh.len())?;
        let (n, k) = (self.bits, self.shift);
        let m = mask(n);
        let sums: Vec<u64> =
            xh.chunks(self.cols).map(|row| row.iter().fold(0u64, |s, &v| s.wrapping_add(v)) & m).collect();
        let uh: Vec<u64> =
            sums.iter().map(|&s| s.wrapping_mul(self.factor).wrapping_add(self.offset()) & m).collect();
        let lows: Vec<u64> = uh.iter().map(|&u| u & mask(k)).collect();
        let mut carry = vec![AddShare::default(); 4 * self.rows];
        key.dcf.eval(&lows, &mut carry)?;
        let own = party_term(ctx.party());
        let d = self.cols as u64;
        let w = |j: usize, i: usize| key.rows[j][i];
        let (mut mu, mut v) = (Vec::with_capacity(self.rows), Vec::with_capacity(self.rows));
        for i in 0..self.rows {
            let (p, sh) = ((uh[i] >> k).wrapping_sub(self.offset() >> k), sums[i]);
            let t = 1 - (uh[i] >> (n - 1));
            let [c, c_r, c_e, c_w] = [0, 1, 2, 3].map(|j| carry[4 * i + j].0);
            let (big_r, e, ww, er, wr, e2, ew, w2, q, dm) =
                (w(0, i), w(1, i), w(2, i), w(3, i), w(4, i), w(5, i), w(6, i), w(7, i), w(8, i), w(9, i));
            let g = t.wrapping_mul(ww).wrapping_sub(e);
            let gr = t.wrapping_mul(wr).wrapping_sub(er);
            let g2 = e2.wrapping_sub(t.wrapping_mul(2).wrapping_mul(ew)).wrapping_add(t.wrapping_mul(w2));
            let gc = t.wrapping_mul(c_w).wrapping_sub(c_e);
            let mu_s = (own * p.wrapping_mul(sh))
                .wrapping_sub(p.wrapping_mul(big_r))
                .wrapping_add(sh.wrapping_mul(g))
                .wrapping_sub(gr)
                .wrapping_sub(sh.wrapping_mul(c))
                .wrapping_add(c_r);
            let mu2 = (own * p.wrapping_mul(p))
                .wrapping_add(g2)
                .wrapping_add(c)
                .wrapping_add(p.wrapping_mul(2).wrapping_mul(g))
                .wrapping_sub(p.wrapping_mul(2).wrapping_mul(c))
                .wrapping_sub(gc.wrapping_mul(2));
            let row = &xh[i * self.cols..(i + 1) * self.cols];
            let rr = &key.r[i * self.cols..(i + 1) * self.cols];
            let sq = row.iter().zip(rr).fold(q, |s, (&x, &r)| {
                s.wrapping_add(own * x.wrapping_mul(x)).wrapping_sub(x.wrapping_mul(r).wrapping_mul(2))
            });
            v.push(sq.wrapping_sub(mu_s.wrapping_mul(2)).wrapping_add(d.wrapping_mul(mu2)) & m);
            mu.push((own * p).wrapping_add(dm).wrapping_add(t.wrapping_mul(ww)).wrapping_sub(c) & m);
        }
        let mut opened = ctx.open_many(&[(&mu, n), (&v, n)]).await?;
        let vh = opened.pop().expect("two parts");
        let muh = opened.pop().expect("two parts");
        Ok((muh, vh))
    }

    pub(crate) fn read(&self, party: Party, r: &mut BitReader<'_>) -> Result<CentredSumSqKey, DecodeError> {
        let params = self.params().map_err(|_| DecodeError::InvalidField("centred sum-of-squares widths"))?;
        let dcf = DcfKeys::read_material(params, party, self.rows, r)?;
        let rr = get_words(r, self.rows * self.cols, self.bits)?;
        let mut rows: [Vec<u64>; ROW_WORDS] = Default::default();
        for v in &mut rows {
            *v = get_words(r, self.rows, self.bits)?;
        }
        Ok(CentredSumSqKey { party, bits: self.bits, dcf, r: rr, rows })
    }
}

impl CentredSumSqKey {
    pub(crate) fn write(&self, w: &mut BitWriter) {
        let bits = self.bits;
        self.dcf.write_material(w);
        put_words(w, &self.r, bits);
        for v in &self.rows {
            put_words(w, v, bits);
        }
    }
}
