//! A masked bit times a masked ring element, and bit-to-arithmetic conversion
//! (docs/design/fss-building-blocks.md §6.6).
//!
//! With `b = b̂ ⊕ r_b = b̂ + r_b − 2·b̂·r_b` and `y = ŷ − r_y`:
//!
//! ```text
//! b·y = b̂·ŷ − b̂·r_y + (1 − 2b̂)·(r_b·ŷ − r_b·r_y)
//! ```
//!
//! so a key needs shares of `r_y`, `r_b`, `r_b·r_y` and the output mask: four ring words,
//! one fewer than SIGMA's select key. One round.

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party};

use crate::dealer::share;
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_words, key_debug, put_words};
use crate::kit::{check_inputs, check_party};
use crate::online::Ctx;

/// `z = b·y` for a masked bit `b` (input 0) and a masked value `y ∈ Z_{2^bits}` (input 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Select {
    /// Ring width of `y` and `z`.
    pub bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`Select`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct SelectKey {
    party: Party,
    bits: u32,
    ry: Vec<u64>,
    rb: Vec<u64>,
    rbry: Vec<u64>,
    rout: Vec<u64>,
}
fss::wipe_on_drop!(SelectKey { wipe: [ry, rb, rbry, rout], zeroize: [] });
key_debug!(SelectKey);

impl GateKey for SelectKey {
    type Shape = Select;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        for v in [&self.ry, &self.rb, &self.rbry, &self.rout] {
            put_words(w, v, self.bits);
        }
    }

    fn read(s: &Select, party: Party, r: &mut BitReader<'_>) -> Result<SelectKey, DecodeError> {
        let mut f = || get_words(r, s.len, s.bits);
        Ok(SelectKey { party, bits: s.bits, ry: f()?, rb: f()?, rbry: f()?, rout: f()? })
    }
}

impl Select {
    /// Deal keys for bit masks `rb` (0/1), value masks `ry` and output masks `rout`.
    ///
    /// # Errors
    /// [`GateError::Length`] on mismatched lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        rb: &[u64],
        ry: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(SelectKey, SelectKey), GateError> {
        for v in [rb, ry, rout] {
            check_len("select masks", self.len, v.len())?;
        }
        let m = mask(self.bits);
        let rb: Vec<u64> = rb.iter().map(|&b| b & 1).collect();
        let rbry: Vec<u64> = rb.iter().zip(ry).map(|(&b, &y)| b.wrapping_mul(y) & m).collect();
        let (ry0, ry1) = share(rng, ry, self.bits);
        let (rb0, rb1) = share(rng, &rb, self.bits);
        let (p0, p1) = share(rng, &rbry, self.bits);
        let (o0, o1) = share(rng, rout, self.bits);
        let bits = self.bits;
        Ok((
            SelectKey { party: Party::P0, bits, ry: ry0, rb: rb0, rbry: p0, rout: o0 },
            SelectKey { party: Party::P1, bits, ry: ry1, rb: rb1, rbry: p1, rout: o1 },
        ))
    }

    /// This party's share of `b·y + r_out` (before opening).
    pub fn share(&self, party: Party, key: &SelectKey, bh: &[u64], yh: &[u64]) -> Vec<u64> {
        let m = mask(self.bits);
        (0..self.len)
            .map(|i| {
                let (b, y) = (bh[i] & 1, yh[i]);
                let own = if party == Party::P0 { b.wrapping_mul(y) } else { 0 };
                let signed = key.rb[i].wrapping_mul(y).wrapping_sub(key.rbry[i]);
                let signed = if b == 1 { signed.wrapping_neg() } else { signed };
                own.wrapping_sub(b.wrapping_mul(key.ry[i])).wrapping_add(signed).wrapping_add(key.rout[i]) & m
            })
            .collect()
    }
}

impl Gate for Select {
    type Key = SelectKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![1, self.bits]
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

    fn key_shape(&self) -> Select {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(SelectKey, SelectKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        self.deal(masks_in[0], masks_in[1], mask_out, rng)
    }

    async fn eval(&self, ctx: &Ctx, key: &SelectKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        ctx.open(&self.share(ctx.party(), key, inputs[0], inputs[1]), self.bits).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        inputs[0]
            .iter()
            .zip(inputs[1])
            .map(|(&b, &y)| if b & 1 == 1 { y & mask(self.bits) } else { 0 })
            .collect()
    }
}

/// A masked bit to a masked ring element: `z = b ∈ {0, 1} ⊂ Z_{2^bits}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct B2A {
    /// Ring width of the output.
    pub bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`B2A`] key: shares of the bit mask (in the ring) and of the output mask.
#[derive(Clone, PartialEq, Eq)]
pub struct B2AKey {
    party: Party,
    bits: u32,
    rb: Vec<u64>,
    rout: Vec<u64>,
}
fss::wipe_on_drop!(B2AKey { wipe: [rb, rout], zeroize: [] });
key_debug!(B2AKey);

impl GateKey for B2AKey {
    type Shape = B2A;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        put_words(w, &self.rb, self.bits);
        put_words(w, &self.rout, self.bits);
    }

    fn read(s: &B2A, party: Party, r: &mut BitReader<'_>) -> Result<B2AKey, DecodeError> {
        let rb = get_words(r, s.len, s.bits)?;
        let rout = get_words(r, s.len, s.bits)?;
        Ok(B2AKey { party, bits: s.bits, rb, rout })
    }
}

impl B2A {
    /// This party's share of `b + r_out`: `b = b̂ + (1 − 2b̂)·r_b`.
    pub fn share(&self, party: Party, key: &B2AKey, bh: &[u64]) -> Vec<u64> {
        (0..self.len)
            .map(|i| {
                let b = bh[i] & 1;
                let own = if party == Party::P0 { b } else { 0 };
                let r = if b == 1 { key.rb[i].wrapping_neg() } else { key.rb[i] };
                own.wrapping_add(r).wrapping_add(key.rout[i]) & mask(self.bits)
            })
            .collect()
    }
}

impl Gate for B2A {
    type Key = B2AKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![1]
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

    fn key_shape(&self) -> B2A {
        *self
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(B2AKey, B2AKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        check_len("output mask", self.len, mask_out.len())?;
        let rb: Vec<u64> = masks_in[0].iter().map(|&b| b & 1).collect();
        let (rb0, rb1) = share(rng, &rb, self.bits);
        let (o0, o1) = share(rng, mask_out, self.bits);
        let bits = self.bits;
        Ok((
            B2AKey { party: Party::P0, bits, rb: rb0, rout: o0 },
            B2AKey { party: Party::P1, bits, rb: rb1, rout: o1 },
        ))
    }

    async fn eval(&self, ctx: &Ctx, key: &B2AKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        ctx.open(&self.share(ctx.party(), key, inputs[0]), self.bits).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        inputs[0].iter().map(|&b| b & 1).collect()
    }
}
