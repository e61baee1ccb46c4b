//! The gate interface shared by the harness, the tests and the benchmarks.

use fss::rng::SplitRng;

use crate::error::GateError;
use crate::keyio::GateKey;
use crate::online::Ctx;

/// Both parties' keys, party 0's first.
pub type KeyPair<K> = (K, K);

/// A gate over vectors of elements in the masked-wire model: inputs `x̂_i = x_i + r_i`
/// (mod `2^{input_bits[i]}`), output `ŷ = y + r_out` (mod `2^{output_bits}`). A 1-bit wire is
/// a masked bit (`⊕` = `+` mod 2).
#[allow(async_fn_in_trait)]
pub trait Gate {
    /// Both parties' key type.
    type Key: GateKey;

    /// Width of each input wire.
    fn input_bits(&self) -> Vec<u32>;

    /// Number of elements of each input wire.
    fn input_lens(&self) -> Vec<usize>;

    /// Width of the output wire.
    fn output_bits(&self) -> u32;

    /// Number of output elements.
    fn output_len(&self) -> usize;

    /// Width and length of every output wire, in the order the outputs, output masks and
    /// reference values are concatenated. One wire of [`Gate::output_bits`] ×
    /// [`Gate::output_len`] unless a gate has several outputs.
    fn output_wires(&self) -> Vec<(u32, usize)> {
        vec![(self.output_bits(), self.output_len())]
    }

    /// The public shape of the key (what [`GateKey::read`] needs).
    fn key_shape(&self) -> <Self::Key as GateKey>::Shape;

    /// Dealer: both parties' keys for input masks `masks_in` and output mask `mask_out`.
    ///
    /// # Errors
    /// [`GateError`] if the masks do not fit the gate's shape.
    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(Self::Key, Self::Key), GateError>;

    /// Party: the masked output from the masked inputs, opening through `ctx`.
    ///
    /// # Errors
    /// [`GateError`] for inputs of the wrong shape, a key of the other party, or a failed
    /// exchange.
    async fn eval(&self, ctx: &Ctx, key: &Self::Key, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError>;

    /// The exact plaintext fixed-point result on unmasked inputs.
    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64>;
}
