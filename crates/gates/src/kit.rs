//! The gate kit: the small helpers every leaf gate file shares, kept here so that no gate
//! file imports another for them.
//!
//! - [`check_inputs`] and [`check_party`]: the argument checks at the top of `keygen` and
//!   `eval`;
//! - [`party_term`]: who adds the public terms of a share;
//! - `unary!`: the [`Gate`](crate::gate::Gate) plumbing of a one-input gate.

use fss::Party;

use crate::error::{GateError, check_len};
use crate::online::Ctx;

/// Every input must have its expected length.
pub(crate) fn check_inputs(inputs: &[&[u64]], lens: &[usize]) -> Result<(), GateError> {
    check_len("input wires", lens.len(), inputs.len())?;
    for (v, &l) in inputs.iter().zip(lens) {
        check_len("input elements", l, v.len())?;
    }
    Ok(())
}

/// The key must be this party's.
pub(crate) fn check_party(ctx: &Ctx, key_party: Party) -> Result<(), GateError> {
    if ctx.party() != key_party {
        return Err(GateError::KeyMismatch("the key belongs to the other party"));
    }
    Ok(())
}

/// 1 for party 0 (who adds public terms), 0 for party 1.
pub(crate) fn party_term(p: Party) -> u64 {
    (p == Party::P0) as u64
}

/// Implements the [`Gate`](crate::gate::Gate) plumbing for a one-input gate with `in_bits()`, `out_bits()`,
/// `deal`, `run` and `plain` (`plain(x)`, or `plain(x, i)` with the element's index `i`
/// after `by_index`).
macro_rules! unary {
    ($shape:ty, $key:ty) => {
        unary!(@gate $shape, $key, |s: &$shape, x: &[u64]| x.iter().map(|&x| s.plain(x)).collect());
    };
    ($shape:ty, $key:ty, by_index) => {
        unary!(@gate $shape, $key, |s: &$shape, x: &[u64]| {
            x.iter().enumerate().map(|(i, &x)| s.plain(x, i)).collect()
        });
    };
    (@gate $shape:ty, $key:ty, $reference:expr) => {
        impl Gate for $shape {
            type Key = $key;

            fn input_bits(&self) -> Vec<u32> {
                vec![self.input_width()]
            }

            fn input_lens(&self) -> Vec<usize> {
                vec![self.len]
            }

            fn output_bits(&self) -> u32 {
                self.output_width()
            }

            fn output_len(&self) -> usize {
                self.len
            }

            fn key_shape(&self) -> $shape {
                self.clone()
            }

            fn keygen<R: SplitRng + ?Sized>(
                &self,
                masks_in: &[&[u64]],
                mask_out: &[u64],
                rng: &mut R,
            ) -> Result<($key, $key), GateError> {
                check_inputs(masks_in, &self.input_lens())?;
                check_len("output mask", self.len, mask_out.len())?;
                self.deal(masks_in[0], mask_out, rng)
            }

            async fn eval(&self, ctx: &Ctx, key: &$key, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
                check_inputs(inputs, &self.input_lens())?;
                check_party(ctx, key.party)?;
                self.run(ctx, key, inputs[0]).await
            }

            fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
                ($reference)(self, inputs[0])
            }
        }
    };
}
pub(crate) use unary;
