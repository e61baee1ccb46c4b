//! Products of masked wires (docs/design/fss-building-blocks.md §6.0): elementwise multiplication,
//! square, and the masked × masked matrix product used by attention, alone or in a batch
//! ([`BatchedMatMul`]). One round each, the output opened in the input ring. Products with
//! *public* weights need no gate: `x̂·W` is the masked value of `x·W` under the mask `r·W`
//! (see [`public_matmul_mask`]).

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party};

use crate::dealer::share;
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_words, key_debug, put_words};
use crate::kit::{check_inputs, check_party};
use crate::linalg::{matmul, matmul_mod};
use crate::online::Ctx;

/// The output mask of `x̂·W` for a public `W` (`k × n`) and input mask `r` (`m × k`): `r·W`.
pub fn public_matmul_mask(r: &[u64], w: &[u64], m: usize, k: usize, n: usize, bits: u32) -> Vec<u64> {
    matmul_mod(r, w, m, k, n, bits)
}

/// `z = x·y` elementwise in `Z_{2^bits}` (no truncation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mul {
    /// Ring width.
    pub bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`Mul`] key: shares of `r_x`, `r_y` and `r_x·r_y + r_z`.
#[derive(Clone, PartialEq, Eq)]
pub struct MulKey {
    party: Party,
    bits: u32,
    rx: Vec<u64>,
    ry: Vec<u64>,
    c: Vec<u64>,
}
fss::wipe_on_drop!(MulKey { wipe: [rx, ry, c], zeroize: [] });
key_debug!(MulKey);

impl GateKey for MulKey {
    type Shape = Mul;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        for v in [&self.rx, &self.ry, &self.c] {
            put_words(w, v, self.bits);
        }
    }

    fn read(s: &Mul, party: Party, r: &mut BitReader<'_>) -> Result<MulKey, DecodeError> {
        let rx = get_words(r, s.len, s.bits)?;
        let ry = get_words(r, s.len, s.bits)?;
        let c = get_words(r, s.len, s.bits)?;
        Ok(MulKey { party, bits: s.bits, rx, ry, c })
    }
}

impl Mul {
    /// This party's additive share of `z + r_z` (before opening), for gates that fuse it.
    pub fn share(&self, party: Party, key: &MulKey, xh: &[u64], yh: &[u64]) -> Vec<u64> {
        let m = mask(self.bits);
        (0..self.len)
            .map(|i| {
                let own = if party == Party::P0 { xh[i].wrapping_mul(yh[i]) } else { 0 };
                own.wrapping_sub(xh[i].wrapping_mul(key.ry[i]))
                    .wrapping_sub(yh[i].wrapping_mul(key.rx[i]))
                    .wrapping_add(key.c[i])
                    & m
            })
            .collect()
    }
}

impl Gate for Mul {
    type Key = MulKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.bits, self.bits]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.len, self.len]
    }

    fn output_bits(&self) -> u32 {
        self.bits
    }

    fn output_len(&self) -> usize {
        self.len
    }

    fn key_shape(&self) -> Mul {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(MulKey, MulKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output mask", self.len, mask_out.len())?;
        let (rx, ry) = (masks_in[0], masks_in[1]);
        let c: Vec<u64> = (0..self.len)
            .map(|i| rx[i].wrapping_mul(ry[i]).wrapping_add(mask_out[i]) & mask(self.bits))
            .collect();
        let (rx0, rx1) = share(rng, rx, self.bits);
        let (ry0, ry1) = share(rng, ry, self.bits);
        let (c0, c1) = share(rng, &c, self.bits);
        let bits = self.bits;
        Ok((
            MulKey { party: Party::P0, bits, rx: rx0, ry: ry0, c: c0 },
            MulKey { party: Party::P1, bits, rx: rx1, ry: ry1, c: c1 },
        ))
    }

    async fn eval(&self, ctx: &Ctx, key: &MulKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        ctx.open(&self.share(ctx.party(), key, inputs[0], inputs[1]), self.bits).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        inputs[0].iter().zip(inputs[1]).map(|(&x, &y)| x.wrapping_mul(y) & mask(self.bits)).collect()
    }
}

/// `z = x²` elementwise in `Z_{2^bits}` (SIGMA's square for LayerNorm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Square {
    /// Ring width.
    pub bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`Square`] key: shares of `r` and `r² + r_z`.
#[derive(Clone, PartialEq, Eq)]
pub struct SquareKey {
    party: Party,
    bits: u32,
    r: Vec<u64>,
    c: Vec<u64>,
}
fss::wipe_on_drop!(SquareKey { wipe: [r, c], zeroize: [] });
key_debug!(SquareKey);

impl GateKey for SquareKey {
    type Shape = Square;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        put_words(w, &self.r, self.bits);
        put_words(w, &self.c, self.bits);
    }

    fn read(s: &Square, party: Party, r: &mut BitReader<'_>) -> Result<SquareKey, DecodeError> {
        let rr = get_words(r, s.len, s.bits)?;
        let c = get_words(r, s.len, s.bits)?;
        Ok(SquareKey { party, bits: s.bits, r: rr, c })
    }
}

impl Square {
    /// This party's additive share of `x² + r_z` (before opening).
    pub fn share(&self, party: Party, key: &SquareKey, xh: &[u64]) -> Vec<u64> {
        let m = mask(self.bits);
        (0..self.len)
            .map(|i| {
                let own = if party == Party::P0 { xh[i].wrapping_mul(xh[i]) } else { 0 };
                own.wrapping_sub(xh[i].wrapping_mul(key.r[i]).wrapping_mul(2)).wrapping_add(key.c[i]) & m
            })
            .collect()
    }
}

impl Gate for Square {
    type Key = SquareKey;

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

    fn key_shape(&self) -> Square {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(SquareKey, SquareKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output mask", self.len, mask_out.len())?;
        let r = masks_in[0];
        let c: Vec<u64> = (0..self.len)
            .map(|i| r[i].wrapping_mul(r[i]).wrapping_add(mask_out[i]) & mask(self.bits))
            .collect();
        let (r0, r1) = share(rng, r, self.bits);
        let (c0, c1) = share(rng, &c, self.bits);
        let bits = self.bits;
        Ok((
            SquareKey { party: Party::P0, bits, r: r0, c: c0 },
            SquareKey { party: Party::P1, bits, r: r1, c: c1 },
        ))
    }

    async fn eval(&self, ctx: &Ctx, key: &SquareKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        ctx.open(&self.share(ctx.party(), key, inputs[0]), self.bits).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        inputs[0].iter().map(|&x| x.wrapping_mul(x) & mask(self.bits)).collect()
    }
}

/// `C = A·B` for masked `A` (`m × k`) and `B` (`k × n`), row-major, in `Z_{2^bits}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatMul {
    /// Ring width.
    pub bits: u32,
    /// Rows of `A`.
    pub m: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
    /// Columns of `B`.
    pub n: usize,
}

/// A party's [`MatMul`] key: shares of `R_A`, `R_B` and `R_A·R_B + R_C`.
#[derive(Clone, PartialEq, Eq)]
pub struct MatMulKey {
    party: Party,
    bits: u32,
    ra: Vec<u64>,
    rb: Vec<u64>,
    c: Vec<u64>,
}
fss::wipe_on_drop!(MatMulKey { wipe: [ra, rb, c], zeroize: [] });
key_debug!(MatMulKey);

impl GateKey for MatMulKey {
    type Shape = MatMul;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        for v in [&self.ra, &self.rb, &self.c] {
            put_words(w, v, self.bits);
        }
    }

    fn read(s: &MatMul, party: Party, r: &mut BitReader<'_>) -> Result<MatMulKey, DecodeError> {
        let ra = get_words(r, s.m * s.k, s.bits)?;
        let rb = get_words(r, s.k * s.n, s.bits)?;
        let c = get_words(r, s.m * s.n, s.bits)?;
        Ok(MatMulKey { party, bits: s.bits, ra, rb, c })
    }
}

impl MatMul {
    /// This party's additive share of `C + R_C` (before opening).
    pub fn share(&self, party: Party, key: &MatMulKey, ah: &[u64], bh: &[u64]) -> Vec<u64> {
        let (m, k, n) = (self.m, self.k, self.n);
        let bits = self.bits;
        let mut out = if party == Party::P0 { matmul_mod(ah, bh, m, k, n, bits) } else { vec![0; m * n] };
        let x = matmul_mod(ah, &key.rb, m, k, n, bits);
        let y = matmul_mod(&key.ra, bh, m, k, n, bits);
        for i in 0..m * n {
            out[i] = out[i].wrapping_sub(x[i]).wrapping_sub(y[i]).wrapping_add(key.c[i]) & mask(self.bits);
        }
        out
    }
}

impl Gate for MatMul {
    type Key = MatMulKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.bits, self.bits]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.m * self.k, self.k * self.n]
    }

    fn output_bits(&self) -> u32 {
        self.bits
    }

    fn output_len(&self) -> usize {
        self.m * self.n
    }

    fn key_shape(&self) -> MatMul {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(MatMulKey, MatMulKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output mask", self.output_len(), mask_out.len())?;
        let (ra, rb) = (masks_in[0], masks_in[1]);
        let rr = matmul(ra, rb, self.m, self.k, self.n);
        let c: Vec<u64> =
            rr.iter().zip(mask_out).map(|(&p, &z)| p.wrapping_add(z) & mask(self.bits)).collect();
        let (a0, a1) = share(rng, ra, self.bits);
        let (b0, b1) = share(rng, rb, self.bits);
        let (c0, c1) = share(rng, &c, self.bits);
        let bits = self.bits;
        Ok((
            MatMulKey { party: Party::P0, bits, ra: a0, rb: b0, c: c0 },
            MatMulKey { party: Party::P1, bits, ra: a1, rb: b1, c: c1 },
        ))
    }

    async fn eval(&self, ctx: &Ctx, key: &MatMulKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        ctx.open(&self.share(ctx.party(), key, inputs[0], inputs[1]), self.bits).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        matmul(inputs[0], inputs[1], self.m, self.k, self.n)
            .into_iter()
            .map(|v| v & mask(self.bits))
            .collect()
    }
}

/// `count` masked × masked matrix products opened in one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchedMatMul {
    /// Ring width.
    pub bits: u32,
    /// Products.
    pub count: usize,
    /// Rows of each left operand.
    pub m: usize,
    /// Inner dimension.
    pub k: usize,
    /// Columns of each right operand.
    pub n: usize,
}

/// A party's [`BatchedMatMul`] key (its parts zeroize themselves).
pub struct BatchedMatMulKey {
    party: Party,
    keys: Vec<MatMulKey>,
}

impl std::fmt::Debug for BatchedMatMulKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchedMatMulKey").field("party", &self.party).finish_non_exhaustive()
    }
}

impl BatchedMatMul {
    fn one(&self) -> MatMul {
        MatMul { bits: self.bits, m: self.m, k: self.k, n: self.n }
    }
}

impl GateKey for BatchedMatMulKey {
    type Shape = BatchedMatMul;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.keys.iter().for_each(|k| k.write(w));
    }

    fn read(s: &BatchedMatMul, party: Party, r: &mut BitReader<'_>) -> Result<BatchedMatMulKey, DecodeError> {
        let keys = (0..s.count).map(|_| MatMulKey::read(&s.one(), party, r)).collect::<Result<_, _>>()?;
        Ok(BatchedMatMulKey { party, keys })
    }
}

impl Gate for BatchedMatMul {
    type Key = BatchedMatMulKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.bits, self.bits]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.count * self.m * self.k, self.count * self.k * self.n]
    }

    fn output_bits(&self) -> u32 {
        self.bits
    }

    fn output_len(&self) -> usize {
        self.count * self.m * self.n
    }

    fn key_shape(&self) -> BatchedMatMul {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(BatchedMatMulKey, BatchedMatMulKey), GateError> {
        check_operands(self.input_lens(), masks_in)?;
        let (one, (a, b, c)) = (self.one(), (self.m * self.k, self.k * self.n, self.m * self.n));
        let (mut k0, mut k1) = (vec![], vec![]);
        for i in 0..self.count {
            let ins = [&masks_in[0][i * a..(i + 1) * a], &masks_in[1][i * b..(i + 1) * b]];
            let (x, y) = one.keygen(&ins, &mask_out[i * c..(i + 1) * c], rng)?;
            k0.push(x);
            k1.push(y);
        }
        Ok((BatchedMatMulKey { party: Party::P0, keys: k0 }, BatchedMatMulKey { party: Party::P1, keys: k1 }))
    }

    async fn eval(
        &self,
        ctx: &Ctx,
        key: &BatchedMatMulKey,
        inputs: &[&[u64]],
    ) -> Result<Vec<u64>, GateError> {
        check_operands(self.input_lens(), inputs)?;
        if key.party != ctx.party() {
            return Err(GateError::KeyMismatch("the key belongs to the other party"));
        }
        let (one, (a, b)) = (self.one(), (self.m * self.k, self.k * self.n));
        let shares: Vec<u64> = (0..self.count)
            .flat_map(|i| {
                one.share(
                    ctx.party(),
                    &key.keys[i],
                    &inputs[0][i * a..(i + 1) * a],
                    &inputs[1][i * b..(i + 1) * b],
                )
            })
            .collect();
        ctx.open(&shares, self.bits).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        let (one, (a, b)) = (self.one(), (self.m * self.k, self.k * self.n));
        (0..self.count)
            .flat_map(|i| one.reference(&[&inputs[0][i * a..(i + 1) * a], &inputs[1][i * b..(i + 1) * b]]))
            .collect()
    }
}

fn check_operands(lens: Vec<usize>, inputs: &[&[u64]]) -> Result<(), GateError> {
    if lens.len() != inputs.len() || lens.iter().zip(inputs).any(|(&l, v)| l != v.len()) {
        return Err(GateError::Length {
            what: "matrix product operands",
            expected: lens.iter().sum(),
            actual: inputs.iter().map(|v| v.len()).sum(),
        });
    }
    Ok(())
}
