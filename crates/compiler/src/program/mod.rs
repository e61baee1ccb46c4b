//! Compilation of a spec into a [`Program`]: the public, mask-independent description of a
//! gate that every instance reuses (docs/design/paper.md §3.8, "program reuse").
//!
//! Online, per element, a program
//! 1. evaluates the **packed comparison**: one key per family on views of `x̂` (or, with
//!    [`CmpBackend::PerThreshold`], one key per query as in the paper's artifact) and
//!    combines the shares into XOR-linear bits ([`crate::predicate`]);
//! 2. in exchange 1 opens the masked bits the rest needs (interval index, coefficient bits,
//!    carries), together with Beaver differences that are ready;
//! 3. evaluates the **interval lookup** (per [`LookupBackend`]);
//! 4. evaluates `Φ` as public linear combinations of dealer-shared monomials
//!    ([`crate::sym`]), with further exchanges only for products of lookup outputs;
//! 5. reveals the masked outputs in the last exchange.
//!
//! | module | what |
//! |---|---|
//! | `ir` | the [`Program`] and its parts: backends, forms, dealer words, exchanges, lookup plans, [`Cost`] |
//! | `prep` | the spec made ready for lowering (unsigned lift, slack rotation) and its shift and alignment choices |
//! | `words` | the word builder: symbolic polynomials into linear forms over public monomials and dealer words |
//! | `lower` | the lowering of one spec with fixed backends: comparison bits, lookup, `Φ`, exchanges |
//!
//! [`compile`] lowers a spec under each candidate choice of backends and keeps the smallest
//! key.

mod bexpr;
mod budget;
mod cells;
mod ir;
mod lower;
mod phi;
mod prep;
mod words;

pub use ir::{
    CmpBackend, CompileOptions, Cost, DcfPlan, Exchange, FTerm, Form, LeafMux, Limits, LookupBackend,
    LookupPlan, MAX_TABLE_BITS, Program, Src, TABLE_ET_LEVELS, TablePlan, WordDef, table_params,
};
use lower::Lower;
use prep::{aligned_shift, half_row_shift, normalise, shift_amount};
pub use prep::{alignment_runs, reduced_view_shift, shift_poly};

use crate::predicate::FullWidth;
use std::cell::Cell;

use crate::spec::{Measure, OperatorSpec, SpecError};

/// Compile `spec` with `options`.
///
/// # Errors
/// [`SpecError`] if the spec is invalid or the chosen backends cannot express it.
pub fn compile(spec: &OperatorSpec, options: CompileOptions) -> Result<Program, SpecError> {
    spec.validate()?;
    let orig = spec;
    let spec = normalise(spec);
    let splits: Vec<bool> = match options.split {
        Some(s) => vec![s],
        None => vec![false, true],
    };
    // A spec with nothing per interval (a pure Φ, like a shift) needs no lookup.
    let nothing = spec.poly_count() + spec.const_count() + spec.bool_count() == 0;
    if spec.slack && options.lookup.is_some_and(|l| l != LookupBackend::StepBits) {
        return Err(SpecError::Width("slack: only the step-bits lookup reads a slack input".into()));
    }
    let lookups: Vec<LookupBackend> = match options.lookup {
        _ if nothing || spec.slack => vec![LookupBackend::StepBits],
        Some(l) => vec![l],
        None => candidates(&spec),
    };
    let mut best: Option<(Program, u64)> = None;
    let mut first_err = None;
    // One budget for every choice: once it is spent, the best program so far is the result.
    let spent = Cell::new(0u64);
    // A split one bit coarser that reads a few boundaries as half rows (not in grouped runs).
    let half_rows = if options.grouped.is_none() { half_row_shift(&spec) } else { None };
    'choices: for &split in &splits {
        for &lookup in &lookups {
            let shift = shift_amount(&spec).or(half_rows).or_else(|| aligned_shift(&spec));
            let mode = match (split, shift) {
                (true, Some(f)) if let Some(w) = options.grouped => FullWidth::Grouped(f, w),
                (true, Some(f)) => FullWidth::Split(f),
                (true, None) if options.split == Some(true) => {
                    return Err(SpecError::Phi { node: 0, msg: "a split needs exactly one shift".into() });
                }
                (true, None) => continue,
                (false, _) => FullWidth::Whole,
            };
            match Lower::new(orig, &spec, options.cmp, lookup, mode, options.limits, &spent)
                .and_then(Lower::run)
            {
                Ok(p) => {
                    let score = p.cost().key_bits;
                    if best.as_ref().is_none_or(|(_, s)| score < *s) {
                        best = Some((p, score));
                    }
                }
                Err(SpecError::Limit { measure: Measure::Terms, .. }) if best.is_some() => break 'choices,
                Err(e) => keep_first(&mut first_err, e),
            }
        }
    }
    best.map(|(p, _)| p).ok_or_else(|| {
        first_err.unwrap_or_else(|| SpecError::Phi { node: 0, msg: "no backend applies".into() })
    })
}

/// Keep the first error, or the first limit error: a limit says more than a backend that
/// does not apply.
fn keep_first(first: &mut Option<SpecError>, e: SpecError) {
    let limit = |e: &SpecError| matches!(e, SpecError::Limit { .. });
    if first.as_ref().is_none_or(|f| limit(&e) && !limit(f)) {
        *first = Some(e);
    }
}

/// The lookup backends worth trying for `spec`.
fn candidates(spec: &OperatorSpec) -> Vec<LookupBackend> {
    let mut c = vec![LookupBackend::StepBits];
    if spec.degree() == 0 {
        c.push(LookupBackend::IndexLut);
        if let Some(s) = reduced_view_shift(spec) {
            c.push(LookupBackend::ReducedView { shift: s });
        }
    }
    // DCF keys grow with the interval count; the paper's backend is tried for small specs.
    if spec.pieces.len() <= 16 {
        c.push(LookupBackend::Dcf);
    }
    c
}

#[cfg(test)]
mod tests;
