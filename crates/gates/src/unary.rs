//! One-input, one-output gates built for any element count: how a composite (softmax,
//! LayerNorm) takes its nonlinearities either from SIGMA's protocols or from compiled
//! FuseFSS specs, with everything else shared.

use crate::error::GateError;
use crate::gate::Gate;
use crate::keyio::GateKey;
use crate::nonlinear::{ArsSlackDcf, NExp, Reciprocal};
use crate::rsqrt::Rsqrt;
use crate::shift::ShiftExact;

/// A family of unary gates: the same operator for any number of elements.
pub trait UnaryFamily: Clone + std::fmt::Debug {
    /// The gate for a given element count.
    type Gate: Gate;

    /// The gate for `len` elements.
    ///
    /// # Errors
    /// [`GateError::Params`] if the family's parameters describe no gate.
    fn gate(&self, len: usize) -> Result<Self::Gate, GateError>;
}

/// The key type of a family's gates.
pub type KeyOf<F> = <<F as UnaryFamily>::Gate as Gate>::Key;

/// The shape of a family's gate keys.
pub type ShapeOf<F> = <KeyOf<F> as GateKey>::Shape;

/// SIGMA's `e^{−x}` ([`NExp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigmaNExp {
    /// Ring width.
    pub bits: u32,
    /// Width of the clip's sign test.
    pub cmp_bits: u32,
    /// Fixed-point scale.
    pub scale: u32,
}

impl UnaryFamily for SigmaNExp {
    type Gate = NExp;

    fn gate(&self, len: usize) -> Result<NExp, GateError> {
        NExp::new(self.bits, self.cmp_bits, self.scale, len)
    }
}

/// SIGMA's softmax reciprocal ([`Reciprocal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigmaReciprocal {
    /// Ring width.
    pub bits: u32,
    /// Fixed-point scale.
    pub scale: u32,
}

impl UnaryFamily for SigmaReciprocal {
    type Gate = Reciprocal;

    fn gate(&self, len: usize) -> Result<Reciprocal, GateError> {
        Reciprocal::new(self.bits, self.scale, len)
    }
}

/// SIGMA's reciprocal square root ([`Rsqrt`]) with the row length folded in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigmaRsqrt {
    /// Ring width.
    pub bits: u32,
    /// Output scale (the input is at twice it).
    pub scale: u32,
    /// Row length.
    pub d: u64,
}

impl UnaryFamily for SigmaRsqrt {
    type Gate = Rsqrt;

    fn gate(&self, len: usize) -> Result<Rsqrt, GateError> {
        Rsqrt::new(self.bits, self.scale, self.d, len)
    }
}

/// SIGMA's exact arithmetic shift ([`ShiftExact`], four rounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigmaShift {
    /// Ring width.
    pub bits: u32,
    /// Shift.
    pub shift: u32,
}

impl UnaryFamily for SigmaShift {
    type Gate = ShiftExact;

    fn gate(&self, len: usize) -> Result<ShiftExact, GateError> {
        if self.shift == 0 || self.shift >= self.bits {
            return Err(GateError::Params(format!("shift {} of {} bits", self.shift, self.bits)));
        }
        Ok(ShiftExact { bits: self.bits, shift: self.shift, signed: true, len })
    }
}

/// An arithmetic shift with slack in one round ([`ArsSlackDcf`]: inputs `|x| < 2^{n−2}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlackShift {
    /// Ring width.
    pub bits: u32,
    /// Shift.
    pub shift: u32,
}

impl UnaryFamily for SlackShift {
    type Gate = ArsSlackDcf;

    fn gate(&self, len: usize) -> Result<ArsSlackDcf, GateError> {
        let g = ArsSlackDcf { bits: self.bits, shift: self.shift, out_bits: self.bits, len };
        g.dcf_params()?;
        Ok(g)
    }
}
