//! SIGMA's softmax (`Softmax`, `SoftmaxTriangular`): row max by a tournament, `e^{−(max − x)}`,
//! row sum, reciprocal, product and truncation. For `cols = 128`: 14 + 10 + 3 + 1 + 2 =
//! **30 rounds**. With a causal mask, row `i` only has entries `0..=i`; the others are the
//! constant 0.

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party};
use zeroize::Zeroize;

use crate::arith::{Mul, MulKey};
use crate::carry_table::{ArsSlackTable, ArsSlackTableKey};
use crate::cmp::{MaxTree, MaxTreeKey};
use crate::dealer::{random_words, share};
use crate::error::{GateError, check_len};
use crate::gate::{Gate, KeyPair};
use crate::keyio::{GateKey, get_words, put_words};
use crate::kit::{check_inputs, check_party};
use crate::online::{Ctx, join};
use crate::shift::{ArsSlack, ArsSlackKey};
use crate::unary::{KeyOf, SigmaNExp, SigmaReciprocal, UnaryFamily};

/// Row-wise softmax of a `rows × cols` matrix at scale `scale` in `Z_{2^bits}`. Inputs must
/// fit `cmp_bits − 1` bits as signed values (so that row differences fit `cmp_bits`).
///
/// `e^{−x}` and the reciprocal come from the families `E` and `R`: SIGMA's protocols by
/// default ([`Softmax::sigma`]), compiled specs in the FuseFSS composite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Softmax<E = SigmaNExp, Q = SigmaReciprocal> {
    /// Ring width.
    pub bits: u32,
    /// Width of the max tree's comparisons (SIGMA's mode 1: `bits − scale + 1`).
    pub cmp_bits: u32,
    /// Fixed-point scale.
    pub scale: u32,
    /// Rows.
    pub rows: usize,
    /// Columns (at most 1023: the reciprocal assumes a row sum below `2^{scale+10}`).
    pub cols: usize,
    /// Causal mask: row `i` attends to columns `0..=(i mod cols)` (requires `cols` to divide
    /// `rows`: several heads' score matrices stacked).
    pub causal: bool,
    /// `e^{−x}` for `x ≥ 0` that fits `cmp_bits + 1` bits, output at `scale`.
    pub exp: E,
    /// `1/S` for a row sum `1 ≤ S ≤ cols` at `scale`.
    pub recip: Q,
    /// Ring of the max tree (`bits` for SIGMA). Only `x − max` on `cmp_bits + 1` bits is
    /// used, so the tree may run in `Z_{2^{cmp_bits + 1}}` (smaller one-round keys).
    pub max_bits: u32,
    /// Levels of the max tree that take one round ([`MaxTree::dcf_levels`]; 0 for SIGMA).
    pub max_dcf_levels: usize,
    /// Ring of `e^{−x}`, the row sums, `1/S` and their product (`bits` for SIGMA). Those
    /// values stay at most `2^{2·scale}` (`e^{−x} ≤ 1`, `S ≥ 1`), so `2·scale + 3` bits hold
    /// them with the product truncation's slack; only the truncation's output is in
    /// `Z_{2^bits}`.
    pub prob_bits: u32,
    /// Fractional bits of `e^{−x}` beyond `scale` (0 for SIGMA): the row sums carry them
    /// too, `1/S` reads its sum at `scale + exp_extra` and returns it at `scale`, and the
    /// product is truncated by `scale + exp_extra`.
    pub exp_extra: u32,
    /// The product's truncation reads its carry from truth tables ([`ArsSlackTable`],
    /// FuseFSS: a shift of at most 19 bits) instead of a DPF ([`ArsSlack`], SIGMA).
    pub table_carry: bool,
}

impl Softmax {
    /// SIGMA's softmax.
    pub fn sigma(bits: u32, cmp_bits: u32, scale: u32, rows: usize, cols: usize, causal: bool) -> Softmax {
        let exp = SigmaNExp { bits, cmp_bits: (cmp_bits + 1).min(bits), scale };
        let recip = SigmaReciprocal { bits, scale };
        Softmax {
            bits,
            cmp_bits,
            scale,
            rows,
            cols,
            causal,
            exp,
            recip,
            max_bits: bits,
            max_dcf_levels: 0,
            prob_bits: bits,
            exp_extra: 0,
            table_carry: false,
        }
    }
}

/// A party's key of the softmax's final truncation ([`Softmax::table_carry`]).
enum ProductTruncKey {
    Dcf(ArsSlackKey),
    Table(ArsSlackTableKey),
}

/// A party's [`Softmax`] key (its parts zeroize themselves).
pub struct SoftmaxKey<E: UnaryFamily, Q: UnaryFamily> {
    party: Party,
    bits: u32,
    max: MaxTreeKey,
    exp: KeyOf<E>,
    recip: KeyOf<Q>,
    mul: MulKey,
    ars: ProductTruncKey,
    /// Shares of the output masks of the masked-out (constant 0) entries.
    zeros: Vec<u64>,
}

impl<E: UnaryFamily, Q: UnaryFamily> Drop for SoftmaxKey<E, Q> {
    fn drop(&mut self) {
        self.zeros.zeroize();
    }
}

impl<E: UnaryFamily, Q: UnaryFamily> std::fmt::Debug for SoftmaxKey<E, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftmaxKey").field("party", &self.party).finish_non_exhaustive()
    }
}

impl<E: UnaryFamily, Q: UnaryFamily> GateKey for SoftmaxKey<E, Q> {
    type Shape = Softmax<E, Q>;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.max.write(w);
        self.exp.write(w);
        self.recip.write(w);
        self.mul.write(w);
        match &self.ars {
            ProductTruncKey::Dcf(k) => k.write(w),
            ProductTruncKey::Table(k) => k.write(w),
        }
        put_words(w, &self.zeros, self.bits);
    }

    fn read(s: &Softmax<E, Q>, party: Party, r: &mut BitReader<'_>) -> Result<SoftmaxKey<E, Q>, DecodeError> {
        let bad = |_| DecodeError::InvalidField("softmax shape");
        let v = s.valid().len();
        Ok(SoftmaxKey {
            party,
            bits: s.bits,
            max: MaxTreeKey::read(&s.tree(), party, r)?,
            exp: KeyOf::<E>::read(&s.nexp(v).map_err(bad)?.key_shape(), party, r)?,
            recip: KeyOf::<Q>::read(&s.recip().map_err(bad)?.key_shape(), party, r)?,
            mul: MulKey::read(&s.mul(v), party, r)?,
            ars: match s.table_carry {
                false => ProductTruncKey::Dcf(ArsSlackKey::read(&s.ars(v), party, r)?),
                true => ProductTruncKey::Table(ArsSlackTableKey::read(&s.ars_table(v), party, r)?),
            },
            zeros: get_words(r, s.rows * s.cols - v, s.bits)?,
        })
    }
}

impl<E: UnaryFamily, Q: UnaryFamily> Softmax<E, Q> {
    fn check(&self) -> Result<(), GateError> {
        if (self.causal && !self.rows.is_multiple_of(self.cols.max(1)))
            || self.cols == 0
            || self.cols > 1023
            || self.cmp_bits > self.bits
            || self.max_bits > self.bits
            || (self.max_bits < self.bits && self.max_bits <= self.cmp_bits)
            || self.prob_bits > self.bits
            || (self.prob_bits < self.bits && self.prob_bits < 2 * self.scale + 3 + self.exp_extra)
            || self.scale + self.exp_extra + 2 > self.prob_bits
            || (self.table_carry && !ArsSlackTable::supports(self.scale + self.exp_extra))
        {
            return Err(GateError::Params(format!("softmax shape {self:?}")));
        }
        Ok(())
    }

    fn row_lens(&self) -> Vec<usize> {
        (0..self.rows).map(|i| if self.causal { i % self.cols + 1 } else { self.cols }).collect()
    }

    /// Flat indices of the computed entries, row after row.
    fn valid(&self) -> Vec<usize> {
        (0..self.rows).flat_map(|i| (0..self.row_lens()[i]).map(move |j| i * self.cols + j)).collect()
    }

    /// The row of every computed entry.
    fn rows_of_valid(&self) -> Vec<usize> {
        self.row_lens().iter().enumerate().flat_map(|(i, &w)| std::iter::repeat_n(i, w)).collect()
    }

    fn invalid(&self) -> Vec<usize> {
        let valid = self.valid();
        let mut is_valid = vec![false; self.rows * self.cols];
        for v in valid {
            is_valid[v] = true;
        }
        (0..self.rows * self.cols).filter(|&i| !is_valid[i]).collect()
    }

    fn tree(&self) -> MaxTree {
        MaxTree {
            bits: self.max_bits,
            cmp_bits: self.cmp_bits,
            row_lens: self.row_lens(),
            dcf_levels: self.max_dcf_levels,
        }
    }

    fn nexp(&self, len: usize) -> Result<E::Gate, GateError> {
        self.exp.gate(len)
    }

    fn recip(&self) -> Result<Q::Gate, GateError> {
        self.recip.gate(self.rows)
    }

    fn mul(&self, len: usize) -> Mul {
        Mul { bits: self.prob_bits, len }
    }

    fn ars(&self, len: usize) -> ArsSlack {
        ArsSlack { bits: self.prob_bits, shift: self.scale + self.exp_extra, out_bits: self.bits, len }
    }

    fn ars_table(&self, len: usize) -> ArsSlackTable {
        let ArsSlack { bits, shift, out_bits, len } = self.ars(len);
        ArsSlackTable { bits, shift, out_bits, len }
    }

    fn row_sums(&self, v: &[u64], rows_of: &[usize]) -> Vec<u64> {
        let mut s = vec![0u64; self.rows];
        for (&x, &row) in v.iter().zip(rows_of) {
            s[row] = s[row].wrapping_add(x);
        }
        s.iter().map(|&x| x & mask(self.prob_bits)).collect()
    }

    /// Deal keys for input masks `r` and output masks `rout` (both `rows × cols`).
    ///
    /// # Errors
    /// [`GateError`] on bad parameters or lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<KeyPair<SoftmaxKey<E, Q>>, GateError> {
        self.check()?;
        check_len("softmax masks", self.rows * self.cols, r.len())?;
        check_len("softmax output masks", self.rows * self.cols, rout.len())?;
        let (valid, rows_of, b) = (self.valid(), self.rows_of_valid(), self.bits);
        let m = mask(b);
        let rv: Vec<u64> = valid.iter().map(|&i| r[i]).collect();
        let (x0, x1, rmax) = self.tree().deal(&rv, None, rng)?;
        let rt: Vec<u64> = rv.iter().zip(&rows_of).map(|(&x, &row)| rmax[row].wrapping_sub(x) & m).collect();
        let (p, re) = (self.prob_bits, random_words(rng, valid.len(), self.prob_bits));
        let (e0, e1) = self.nexp(valid.len())?.keygen(&[&rt], &re, rng)?;
        let rinv = random_words(rng, self.rows, p);
        let (i0, i1) = self.recip()?.keygen(&[&self.row_sums(&re, &rows_of)], &rinv, rng)?;
        let rib: Vec<u64> = rows_of.iter().map(|&row| rinv[row]).collect();
        let rz = random_words(rng, valid.len(), p);
        let (m0, m1) = self.mul(valid.len()).keygen(&[&rib, &re], &rz, rng)?;
        let ro: Vec<u64> = valid.iter().map(|&i| rout[i]).collect();
        let (a0, a1) = if self.table_carry {
            let (a0, a1) = self.ars_table(valid.len()).deal(&rz, &ro, rng)?;
            (ProductTruncKey::Table(a0), ProductTruncKey::Table(a1))
        } else {
            let (a0, a1) = self.ars(valid.len()).deal(&rz, &ro, rng)?;
            (ProductTruncKey::Dcf(a0), ProductTruncKey::Dcf(a1))
        };
        let zm: Vec<u64> = self.invalid().iter().map(|&i| rout[i]).collect();
        let (z0, z1) = share(rng, &zm, b);
        Ok((
            SoftmaxKey {
                party: Party::P0,
                bits: b,
                max: x0,
                exp: e0,
                recip: i0,
                mul: m0,
                ars: a0,
                zeros: z0,
            },
            SoftmaxKey {
                party: Party::P1,
                bits: b,
                max: x1,
                exp: e1,
                recip: i1,
                mul: m1,
                ars: a1,
                zeros: z1,
            },
        ))
    }

    /// The masked output.
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &SoftmaxKey<E, Q>, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.check()?;
        let (valid, rows_of, b) = (self.valid(), self.rows_of_valid(), self.bits);
        let m = mask(b);
        let xv: Vec<u64> = valid.iter().map(|&i| xh[i]).collect();
        let mx = self.tree().run(ctx, &key.max, &xv).await?;
        let t: Vec<u64> = xv.iter().zip(&rows_of).map(|(&x, &row)| mx[row].wrapping_sub(x) & m).collect();
        let e = self.nexp(valid.len())?.eval(ctx, &key.exp, &[&t]).await?;
        let inv = self.recip()?.eval(ctx, &key.recip, &[&self.row_sums(&e, &rows_of)]).await?;
        let ib: Vec<u64> = rows_of.iter().map(|&row| inv[row]).collect();
        let z = self.mul(valid.len()).eval(ctx, &key.mul, &[&ib, &e]).await?;
        // The constant entries are opened alongside the truncation's first round.
        let n = valid.len();
        let trunc = async {
            match &key.ars {
                ProductTruncKey::Dcf(k) if !self.table_carry => self.ars(n).run(ctx, k, &z).await,
                ProductTruncKey::Table(k) if self.table_carry => self.ars_table(n).run(ctx, k, &z).await,
                _ => Err(GateError::KeyMismatch("softmax truncation key of the other kind")),
            }
        };
        let (y, zeros) = join(trunc, ctx.open(&key.zeros, b)).await;
        let mut out = vec![0u64; self.rows * self.cols];
        for (&i, &v) in valid.iter().zip(&y?) {
            out[i] = v;
        }
        for (&i, &v) in self.invalid().iter().zip(&zeros?) {
            out[i] = v;
        }
        Ok(out)
    }

    /// The plaintext result.
    ///
    /// # Panics
    /// If the shape is invalid (checked by `keygen` and `eval` first).
    pub fn plain(&self, x: &[u64]) -> Vec<u64> {
        let (valid, rows_of, m) = (self.valid(), self.rows_of_valid(), mask(self.bits));
        let xv: Vec<u64> = valid.iter().map(|&i| x[i]).collect();
        let mx = self.tree().plain(&xv);
        let t: Vec<u64> = xv.iter().zip(&rows_of).map(|(&x, &row)| mx[row].wrapping_sub(x) & m).collect();
        let e = self.nexp(t.len()).expect("checked shape").reference(&[&t]);
        let inv = self.recip().expect("checked shape").reference(&[&self.row_sums(&e, &rows_of)]);
        let ars = self.ars(1);
        let mut out = vec![0u64; self.rows * self.cols];
        for (k, &i) in valid.iter().enumerate() {
            let z = inv[rows_of[k]].wrapping_mul(e[k]) & mask(self.prob_bits);
            out[i] = ars.reference(&[&[z]])[0];
        }
        out
    }
}

impl<E: UnaryFamily, Q: UnaryFamily> Gate for Softmax<E, Q> {
    type Key = SoftmaxKey<E, Q>;

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

    fn key_shape(&self) -> Softmax<E, Q> {
        self.clone()
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<KeyPair<SoftmaxKey<E, Q>>, GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        self.deal(masks_in[0], mask_out, rng)
    }

    async fn eval(
        &self,
        ctx: &Ctx,
        key: &SoftmaxKey<E, Q>,
        inputs: &[&[u64]],
    ) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        self.run(ctx, key, inputs[0]).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        self.plain(inputs[0])
    }
}
