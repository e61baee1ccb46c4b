//! What a lowering has built so far, against [`Limits`]: work is charged before it is done,
//! so a spec past a limit is refused before the work that would take long.

use std::cell::Cell;

use super::ir::{Limits, Program};
use crate::spec::{Measure, Site, SpecError};

/// Work of lowering, converted by [`Work::units`] into budget units of about one symbolic
/// term each (a term added to or multiplied into a polynomial, a fraction of a microsecond).
#[derive(Clone, Copy, Debug)]
pub(super) enum Work {
    /// Terms of symbolic polynomials added or copied.
    Terms(u64),
    /// Terms of symbolic products: each a new monomial, merged and ordered.
    Products(u64),
    /// Changes of step-function bits: each a comparison point and terms in a leaf.
    Flips(u64),
    /// Operators evaluated to tabulate a Boolean value over cells.
    Evals(u64),
    /// Table words hashed or written.
    Words(u64),
}

impl Work {
    /// Budget units.
    pub(super) fn units(self) -> u64 {
        match self {
            Work::Terms(n) => n,
            Work::Products(n) => n.saturating_mul(4),
            Work::Flips(n) => n.saturating_mul(3),
            Work::Evals(n) => n.div_ceil(16),
            Work::Words(n) => n.div_ceil(4),
        }
    }
}

/// Terms charged so far, shared by every backend choice one compilation tries, and the part
/// of the spec being lowered.
#[derive(Debug)]
pub(super) struct Budget<'a> {
    limits: Limits,
    used: &'a Cell<u64>,
    site: Site,
}

impl<'a> Budget<'a> {
    pub(super) fn new(limits: Limits, used: &'a Cell<u64>) -> Budget<'a> {
        Budget { limits, used, site: Site::Pieces }
    }

    /// Where what is charged next is spent.
    pub(super) fn at(&mut self, site: Site) {
        self.site = site;
    }

    /// Charge `work` (saturating).
    ///
    /// # Errors
    /// [`SpecError::Limit`] once the total passes [`Limits::terms`].
    pub(super) fn charge(&mut self, work: Work) -> Result<(), SpecError> {
        let used = self.used.get().saturating_add(work.units());
        self.used.set(used);
        if used > self.limits.terms {
            return Err(self.error(Measure::Terms, used, self.limits.terms));
        }
        Ok(())
    }

    /// Terms left before the limit.
    pub(super) fn remaining(&self) -> u64 {
        self.limits.terms.saturating_sub(self.used.get())
    }

    /// The error for work of `terms` more that does not fit what is left.
    pub(super) fn over(&self, terms: u64) -> SpecError {
        self.error(Measure::Terms, self.used.get().saturating_add(terms), self.limits.terms)
    }

    /// The program's dealer words and key bytes against their limits.
    ///
    /// # Errors
    /// [`SpecError::Limit`] at [`Site::Program`] for the first one past its limit.
    pub(super) fn check_program(&mut self, p: &Program) -> Result<(), SpecError> {
        self.at(Site::Program);
        let words = p.words.len() as u64;
        if words > self.limits.words {
            return Err(self.error(Measure::Words, words, self.limits.words));
        }
        let bytes = p.cost().key_bits.div_ceil(8);
        if bytes > self.limits.key_bytes {
            return Err(self.error(Measure::KeyBytes, bytes, self.limits.key_bytes));
        }
        Ok(())
    }

    fn error(&self, measure: Measure, estimate: u64, limit: u64) -> SpecError {
        SpecError::Limit { site: self.site, measure, estimate, limit }
    }
}
