//! A compiled operator as a masked-wire gate: the dealer's key generation and the parties'
//! online evaluation of a [`Program`], side by side with its reference ([`OperatorSpec::eval`]).
//!
//! [`CompiledGate`] is a façade over phases, free functions over the program, its plan and
//! the keys; each file is one phase, and each imports only those above it in this list:
//!
//! | module | what |
//! |---|---|
//! | `words` | the dealer words as sums over their distinct monomials, a chunk of elements at a time |
//! | `plan` | the evaluation plan a program's gates share (dense runs, parity tables), cached per program |
//! | `key` | [`CompiledKey`] and [`CompiledShape`]: a party's key, its parts and its encoding |
//! | `deal` | the dealer: comparison keys, dealer words, lookup keys |
//! | `compare` | the packed comparison: every leaf's XOR share (few points, sorted walk, dense windows) |
//! | `lookup` | the DCF lookup before any exchange, the table lookup after the first |
//! | `form` | the output forms' shares, the first exchange's masked bits opened packed |
//! | `run` | a party's evaluation: comparison, lookups, then exchange by exchange |
//!
//! The reference, [`CompiledGate::plain`], is here beside the façade.
//!
//! [`OperatorSpec::eval`]: crate::spec::OperatorSpec::eval

use std::sync::Arc;

use fss::rng::SplitRng;
use gates::{Ctx, Gate, GateError};

use crate::program::Program;
use crate::spec::{Kind, SpecError};

mod compare;
mod deal;
mod form;
mod key;
mod lookup;
mod plan;
mod run;
mod words;

pub use key::{CompiledKey, CompiledShape};
use plan::{EvalPlan, GateRef, plan_of};

/// `len` elements of one compiled operator.
#[derive(Clone, Debug)]
pub struct CompiledGate {
    program: Arc<Program>,
    plan: Arc<EvalPlan>,
    len: usize,
}

impl CompiledGate {
    /// `len` elements of `program`.
    pub fn new(program: Arc<Program>, len: usize) -> CompiledGate {
        let plan = plan_of(&program);
        CompiledGate { program, plan, len }
    }

    /// The program.
    pub fn program(&self) -> &Arc<Program> {
        &self.program
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the gate has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn at(&self) -> GateRef<'_> {
        GateRef { p: &self.program, plan: &self.plan, len: self.len }
    }

    /// Deal keys for input masks `r` and output masks `rout` (output-major, as
    /// [`Gate::output_wires`] lists them). Only the low `in_bits` bits of each mask are used:
    /// the gate reads that much of a possibly wider wire.
    ///
    /// # Errors
    /// [`GateError`] on bad lengths or masks out of range.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(CompiledKey, CompiledKey), GateError> {
        deal::deal(self.at(), r, rout, rng)
    }

    /// The masked outputs.
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &CompiledKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        run::run(self.at(), ctx, key, xh).await
    }

    /// The reference outputs of input `x`, output-major.
    pub fn plain(&self, x: &[u64]) -> Vec<u64> {
        let p = &*self.program;
        let vals: Vec<_> = x.iter().map(|&v| p.spec.eval(v)).collect();
        let mut out = Vec::with_capacity(x.len() * p.outputs.len());
        let (mut a, mut b) = (0, 0);
        for k in &p.outputs {
            match k {
                Kind::Arith => {
                    out.extend(vals.iter().map(|v| v.arith[a]));
                    a += 1;
                }
                Kind::Bool => {
                    out.extend(vals.iter().map(|v| v.bools[b] as u64));
                    b += 1;
                }
            }
        }
        out
    }
}

impl Gate for CompiledGate {
    type Key = CompiledKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.program.in_bits()]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.len]
    }

    fn output_bits(&self) -> u32 {
        self.program.output_width(0)
    }

    fn output_len(&self) -> usize {
        self.len * self.program.outputs.len()
    }

    fn output_wires(&self) -> Vec<(u32, usize)> {
        (0..self.program.outputs.len()).map(|o| (self.program.output_width(o), self.len)).collect()
    }

    fn key_shape(&self) -> CompiledShape {
        CompiledShape { program: self.program.clone(), len: self.len }
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(CompiledKey, CompiledKey), GateError> {
        check("input wires", 1, masks_in.len())?;
        self.deal(masks_in[0], mask_out, rng)
    }

    async fn eval(&self, ctx: &Ctx, key: &CompiledKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check("input wires", 1, inputs.len())?;
        self.run(ctx, key, inputs[0]).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        self.plain(inputs[0])
    }
}

/// Compile errors surface as gate parameter errors.
impl From<SpecError> for GateError {
    fn from(e: SpecError) -> GateError {
        GateError::Params(e.to_string())
    }
}

/// `actual` must be `expected` (a length of `what`).
fn check(what: &'static str, expected: usize, actual: usize) -> Result<(), GateError> {
    if expected != actual {
        return Err(GateError::Length { what, expected, actual });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
