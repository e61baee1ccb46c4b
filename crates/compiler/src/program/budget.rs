//! What a lowering has built so far, against [`Limits`]: work is charged before it is done,
//! so a spec past a limit is refused before the work that would take long.

use super::ir::{Limits, Program};
use crate::spec::{Measure, Site, SpecError};

/// Terms charged so far and the part of the spec being lowered.
#[derive(Debug)]
pub(super) struct Budget {
    limits: Limits,
    used: u64,
    site: Site,
}

impl Budget {
    pub(super) fn new(limits: Limits) -> Budget {
        Budget { limits, used: 0, site: Site::Pieces }
    }

    /// Where what is charged next is spent.
    pub(super) fn at(&mut self, site: Site) {
        self.site = site;
    }

    /// Charge `terms` (saturating).
    ///
    /// # Errors
    /// [`SpecError::Limit`] once the total passes [`Limits::terms`].
    pub(super) fn charge(&mut self, terms: u64) -> Result<(), SpecError> {
        self.used = self.used.saturating_add(terms);
        if self.used > self.limits.terms {
            return Err(self.error(Measure::Terms, self.used, self.limits.terms));
        }
        Ok(())
    }

    /// Terms left before the limit.
    pub(super) fn remaining(&self) -> u64 {
        self.limits.terms.saturating_sub(self.used)
    }

    /// The error for work of `terms` more that does not fit what is left.
    pub(super) fn over(&self, terms: u64) -> SpecError {
        self.error(Measure::Terms, self.used.saturating_add(terms), self.limits.terms)
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
