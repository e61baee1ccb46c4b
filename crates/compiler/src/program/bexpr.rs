//! Boolean values while a spec is lowered: XOR-linear bits of the comparison, local shares,
//! and their combinations, with a bound on what expanding them into symbolic polynomials
//! costs; and the value of a `Φ` node (arithmetic or Boolean).

use crate::predicate::LinBit;
use crate::sym::Sym;

/// A value of `Φ`.
#[derive(Clone, Debug)]
pub(super) enum Val {
    /// An arithmetic value.
    A(Sym),
    /// A Boolean value.
    B(BExpr),
}

/// A Boolean value during lowering.
#[derive(Clone, Debug)]
pub(super) enum BExpr {
    /// An XOR-linear bit of the comparison shares.
    Leaf(LinBit),
    /// A local XOR share that is not a comparison bit (a lookup output's low bit).
    Loc(u32),
    /// Conjunction.
    And(Vec<BExpr>),
    /// Exclusive or.
    Xor(Vec<BExpr>),
    /// Negation.
    Not(Box<BExpr>),
    /// Exclusive or of operands of which at most one is 1 for any input, so also their sum
    /// as ring elements (the terms of a value written over the cells of a view).
    Sum(Vec<BExpr>),
}

/// Terms of an opened bit as a ring element: `ô + z − 2ôz`.
const OPENED_TERMS: u64 = 3;

impl BExpr {
    pub(super) fn constant(b: bool) -> BExpr {
        BExpr::Leaf(LinBit::constant(b))
    }

    pub(super) fn xor(a: BExpr, b: BExpr) -> BExpr {
        match (a, b) {
            (BExpr::Leaf(x), BExpr::Leaf(y)) => BExpr::Leaf(x.xor(&y)),
            (a, b) => BExpr::Xor(vec![a, b]),
        }
    }

    pub(super) fn not(a: BExpr) -> BExpr {
        match a {
            BExpr::Leaf(x) => BExpr::Leaf(x.not()),
            a => BExpr::Not(Box::new(a)),
        }
    }

    pub(super) fn and(a: BExpr, b: BExpr) -> BExpr {
        match (a, b) {
            (BExpr::Leaf(x), _) if x.as_constant() == Some(false) => BExpr::constant(false),
            (_, BExpr::Leaf(y)) if y.as_constant() == Some(false) => BExpr::constant(false),
            (BExpr::Leaf(x), b) if x.as_constant() == Some(true) => b,
            (a, BExpr::Leaf(y)) if y.as_constant() == Some(true) => a,
            (a, b) => BExpr::And(vec![a, b]),
        }
    }

    pub(super) fn or(a: BExpr, b: BExpr) -> BExpr {
        // a ∨ b = ¬(¬a ∧ ¬b)
        BExpr::not(BExpr::and(BExpr::not(a), BExpr::not(b)))
    }

    /// The sum of exclusive operands (the constant 0 for none, the operand for one).
    pub(super) fn sum(mut v: Vec<BExpr>) -> BExpr {
        match v.len() {
            0 => BExpr::constant(false),
            1 => v.remove(0),
            _ => BExpr::Sum(v),
        }
    }

    /// An upper bound on the terms of the value expanded as a ring element over its opened
    /// bits (each `ô + z − 2ôz`), which also bounds its expansion over `GF(2)`: products
    /// multiply the operands' counts, and an exclusive or `a ⊕ b = a + b − 2ab` adds their
    /// product, so nesting grows the count exponentially. Saturates.
    pub(super) fn terms(&self) -> u64 {
        match self {
            BExpr::Leaf(b) if b.as_constant().is_some() => 1,
            BExpr::Leaf(_) | BExpr::Loc(_) => OPENED_TERMS,
            BExpr::Not(a) => a.terms().saturating_add(1),
            BExpr::And(v) => v.iter().fold(1u64, |acc, a| acc.saturating_mul(a.terms())),
            BExpr::Xor(v) => v.iter().fold(0u64, |acc, a| {
                let b = a.terms();
                acc.saturating_add(b).saturating_add(acc.saturating_mul(b))
            }),
            BExpr::Sum(v) => v.iter().fold(0u64, |acc, a| acc.saturating_add(a.terms())),
        }
    }
}
