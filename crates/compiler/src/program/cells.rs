//! Boolean values as functions of the input, written over the cells of what they read.
//!
//! A piece formula, or a Boolean node of `Φ`, is a function of the input `x` alone. It reads
//! `x` through two views: its full-width comparisons (`lt`, `msb`, `msb_add`) and the piece
//! boundaries where a formula changes cut `[0, 2^n)` into cells, and its low-bit
//! comparisons (`lt_low`, all widths merged into the widest, `F`) cut `[0, 2^F)` into cells
//! of `x mod 2^F`. On a cell of each view the value is constant, so
//!
//! ```text
//! g(x) = W(x) + Σ_t L_t(x)·S_t(x)        (at most one term is 1)
//! ```
//!
//! over the cells `t` of one view (the outer one): `L_t` is the cell's indicator, `S_t` a step
//! function of the other view, and `W` the step function of the outer view that is 1 on the
//! cells where `S_t` is 1 throughout (cells where it is 0 drop out). Each step function is
//! XOR-linear in the comparison shares (one opened bit each, [`crate::predicate::step_bits`]),
//! so `g` costs one opened bit plus two per product, whatever its formula: expanding it over
//! its atoms instead costs a product per `and` and grows exponentially with their nesting.
//! The outer view is the one that leaves fewer products; without low-bit comparisons `g` is
//! one step function.

use crate::spec::{Atom, BoolExpr, Node, OperatorSpec, Phi};

/// What a Boolean value reads, and what evaluating it once costs.
#[derive(Clone, Debug, Default)]
pub(super) struct Reads {
    atoms: Vec<usize>,
    formulas: Vec<usize>,
    /// Operators visited to evaluate the value at one input.
    pub(super) size: u64,
}

impl Reads {
    /// What piece formula `j` reads.
    pub(super) fn formula(spec: &OperatorSpec, j: usize) -> Reads {
        let mut r = Reads::default();
        r.add_formula(spec, j);
        r
    }

    /// What Boolean node `i` of `phi` reads (through the Boolean nodes before it).
    pub(super) fn node(spec: &OperatorSpec, phi: &Phi, i: usize) -> Reads {
        let mut r = Reads::default();
        for k in cone(phi, i) {
            r.size += 1;
            match phi.nodes[k] {
                Node::Atom { index } => r.atoms.push(index),
                Node::Bool { index } => r.add_formula(spec, index),
                _ => {}
            }
        }
        r.atoms.sort_unstable();
        r.atoms.dedup();
        r
    }

    fn add_formula(&mut self, spec: &OperatorSpec, j: usize) {
        if self.formulas.contains(&j) {
            return;
        }
        self.formulas.push(j);
        let mut largest = 0;
        for p in &spec.pieces {
            largest = largest.max(formula_atoms(&p.bools[j], &mut self.atoms));
        }
        self.size += largest;
        self.atoms.sort_unstable();
        self.atoms.dedup();
    }
}

/// Push the atoms `e` reads; returns its operator count.
fn formula_atoms(e: &BoolExpr, atoms: &mut Vec<usize>) -> u64 {
    match e {
        BoolExpr::Const(_) => 1,
        BoolExpr::Atom(i) => {
            atoms.push(*i);
            1
        }
        BoolExpr::Not(a) => 1 + formula_atoms(a, atoms),
        BoolExpr::Xor(v) | BoolExpr::And(v) | BoolExpr::Or(v) => {
            1 + v.iter().map(|a| formula_atoms(a, atoms)).sum::<u64>()
        }
    }
}

/// The Boolean nodes node `i` of `phi` depends on, `i` included, ascending.
fn cone(phi: &Phi, i: usize) -> Vec<usize> {
    let mut seen = vec![false; i + 1];
    let mut stack = vec![i];
    seen[i] = true;
    while let Some(k) = stack.pop() {
        for (op, _) in phi.nodes[k].operands() {
            if !seen[op] {
                seen[op] = true;
                stack.push(op);
            }
        }
    }
    (0..=i).filter(|&k| seen[k]).collect()
}

/// Boolean node `i` of `phi` at input `x`, evaluating only its cone (`scratch` holds the
/// values, by node).
pub(super) fn node_at(spec: &OperatorSpec, phi: &Phi, cone: &[usize], x: u64, scratch: &mut [bool]) -> bool {
    for &k in cone {
        scratch[k] = match phi.nodes[k] {
            Node::Bool { index } => formula_at(spec, index, x),
            Node::Atom { index } => spec.atom(spec.atoms[index], x),
            Node::Bit { value } => value,
            Node::Not { a } => !scratch[a],
            Node::Xor { a, b } => scratch[a] ^ scratch[b],
            Node::And { a, b } => scratch[a] & scratch[b],
            Node::Or { a, b } => scratch[a] | scratch[b],
            // Boolean nodes read only Boolean nodes.
            _ => false,
        };
    }
    cone.last().is_some_and(|&k| scratch[k])
}

/// Piece formula `j` at input `x`.
pub(super) fn formula_at(spec: &OperatorSpec, j: usize, x: u64) -> bool {
    spec.eval_bool(&spec.pieces[spec.piece_of(x)].bools[j], x)
}

/// A Boolean node's cone, for [`node_at`].
pub(super) fn node_cone(phi: &Phi, i: usize) -> Vec<usize> {
    cone(phi, i)
}

/// A step function of one view: `vals[k]` (0 or 1) from `starts[k]` on (`starts[0] = 0`),
/// over `x` (`bits = n`) or over `x mod 2^bits`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StepFn {
    /// Width of the view.
    pub(super) bits: u32,
    /// Where the value changes, 0 first.
    pub(super) starts: Vec<u64>,
    /// The value from each start on.
    pub(super) vals: Vec<u64>,
}

impl StepFn {
    /// From a value per cell, keeping only the starts where it changes.
    fn of(bits: u32, starts: &[u64], vals: impl IntoIterator<Item = bool>) -> StepFn {
        let mut s = StepFn { bits, starts: vec![], vals: vec![] };
        for (&b, v) in starts.iter().zip(vals) {
            if s.vals.last() != Some(&(v as u64)) {
                s.starts.push(b);
                s.vals.push(v as u64);
            }
        }
        s
    }

    /// The indicator of cell `t`.
    fn cell(bits: u32, starts: &[u64], t: usize) -> StepFn {
        let mut s = if t == 0 {
            StepFn { bits, starts: vec![0], vals: vec![1] }
        } else {
            StepFn { bits, starts: vec![0, starts[t]], vals: vec![0, 1] }
        };
        if let Some(&end) = starts.get(t + 1) {
            s.starts.push(end);
            s.vals.push(0);
        }
        s
    }

    /// Whether it is the constant `v`.
    pub(super) fn is_constant(&self) -> bool {
        self.vals.len() <= 1
    }
}

/// `g = whole + Σ a·b` with exclusive terms (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Cover {
    /// The cells where the value is 1 whatever the other view.
    pub(super) whole: StepFn,
    /// Cell indicator of the outer view, step function of the inner view.
    pub(super) products: Vec<(StepFn, StepFn)>,
}

/// The cells of both views of a Boolean value.
#[derive(Clone, Debug)]
pub(super) struct Cells {
    n: u32,
    full: Vec<u64>,
    low: Option<(u32, Vec<u64>)>,
}

impl Cells {
    /// The cells of what `reads` reads; `Err(count)` if the low view would have more than
    /// `max_low` cells.
    pub(super) fn of(spec: &OperatorSpec, reads: &Reads, max_low: u64) -> Result<Cells, u64> {
        Ok(Cells { n: spec.in_bits, full: full_starts(spec, reads), low: low_starts(spec, reads, max_low)? })
    }

    /// Cell pairs: how many times the value is evaluated.
    pub(super) fn count(&self) -> u64 {
        let k = self.low.as_ref().map_or(1, |(_, s)| s.len() as u64);
        (self.full.len() as u64).saturating_mul(k)
    }

    /// The value `g` over the cells.
    pub(super) fn cover(&self, g: &mut dyn FnMut(u64) -> bool) -> Cover {
        let Some((f, low)) = &self.low else {
            let vals: Vec<bool> = self.full.iter().map(|&x| g(x)).collect();
            return Cover { whole: StepFn::of(self.n, &self.full, vals), products: vec![] };
        };
        let mut table = vec![vec![None; low.len()]; self.full.len()];
        for (i, row) in table.iter_mut().enumerate() {
            for (t, v) in row.iter_mut().enumerate() {
                *v = self.meet(i, *f, low, t).map(&mut *g);
            }
        }
        let by_low = outer((self.n, &self.full), (*f, low), |i, t| table[i][t]);
        let by_full = outer((*f, low), (self.n, &self.full), |t, i| table[i][t]);
        if by_full.products.len() < by_low.products.len() { by_full } else { by_low }
    }

    /// The least input in full cell `i` whose low `f` bits are in low cell `t`, if any.
    fn meet(&self, i: usize, f: u32, low: &[u64], t: usize) -> Option<u64> {
        let end = |s: &[u64], k: usize, bits: u32| s.get(k + 1).map_or(1u128 << bits, |&b| b as u128);
        let (a, b) = (self.full[i] as u128, end(&self.full, i, self.n));
        let (c, d) = (low[t] as u128, end(low, t, f));
        let period = 1u128 << f;
        let (base, lo) = (a - a % period, a % period);
        let x = if lo.max(c) < d { base + lo.max(c) } else { base + period + c };
        (x < b).then_some(x as u64)
    }
}

/// The cover with the cells of `outer` outside: per outer cell `t`, the value over the
/// `inner` cells (`at(inner cell, outer cell)`, `None` where the two cells do not meet).
fn outer(inner: (u32, &[u64]), outer: (u32, &[u64]), at: impl Fn(usize, usize) -> Option<bool>) -> Cover {
    let (ib, is) = inner;
    let (ob, os) = outer;
    let mut whole = vec![false; os.len()];
    let mut products = vec![];
    for (t, w) in whole.iter_mut().enumerate() {
        let s = fill((0..is.len()).map(|i| at(i, t)));
        if s.iter().all(|&v| v) {
            *w = true;
        } else if s.iter().any(|&v| v) {
            products.push((StepFn::cell(ob, os, t), StepFn::of(ib, is, s)));
        }
    }
    Cover { whole: StepFn::of(ob, os, whole), products }
}

/// Values where defined, and where not (the cells do not meet, so any value is right) the
/// value before, to change as rarely as possible.
fn fill(v: impl Iterator<Item = Option<bool>>) -> Vec<bool> {
    let v: Vec<Option<bool>> = v.collect();
    let mut last = v.iter().flatten().next().copied().unwrap_or(false);
    v.into_iter()
        .map(|x| {
            last = x.unwrap_or(last);
            last
        })
        .collect()
}

/// 0 and every full-width threshold the value may change at, ascending.
fn full_starts(spec: &OperatorSpec, reads: &Reads) -> Vec<u64> {
    let top = 1u128 << spec.in_bits;
    let mut t = vec![0u64];
    let mut push = |v: u128| {
        if v > 0 && v < top {
            t.push(v as u64);
        }
    };
    for &a in &reads.atoms {
        match spec.atoms[a] {
            Atom::Lt { beta } => push(beta as u128),
            Atom::Msb => push(top / 2),
            Atom::MsbAdd { offset } => {
                // msb(x + c) changes where x + c crosses 2^{n−1} and where it wraps.
                let c = offset as u128 % top;
                push((top / 2 + top - c) % top);
                push((top - c) % top);
            }
            Atom::LtLow { .. } => {}
        }
    }
    for &j in &reads.formulas {
        for (k, w) in spec.pieces.windows(2).enumerate() {
            if w[0].bools[j] != w[1].bools[j] {
                push(spec.boundaries[k + 1] as u128);
            }
        }
    }
    t.sort_unstable();
    t.dedup();
    t
}

/// The low view: the widest low-bit width `F` and the cell starts of `x mod 2^F` (0 first);
/// `None` without low-bit comparisons that vary. `Err(count)` past `max` cells.
fn low_starts(spec: &OperatorSpec, reads: &Reads, max: u64) -> Result<Option<(u32, Vec<u64>)>, u64> {
    let lows: Vec<(u32, u64)> = reads
        .atoms
        .iter()
        .filter_map(|&a| match spec.atoms[a] {
            Atom::LtLow { bits, gamma } if gamma > 0 && gamma < 1u64 << bits => Some((bits, gamma)),
            _ => None,
        })
        .collect();
    let Some(f) = lows.iter().map(|l| l.0).max() else { return Ok(None) };
    // A narrower comparison repeats every 2^bits: at its threshold and where it wraps.
    let count = lows.iter().fold(1u64, |acc, &(b, _)| acc.saturating_add(2u64.saturating_pow(f - b + 1)));
    if count > max {
        return Err(count);
    }
    let mut t = vec![0u64];
    for &(b, gamma) in &lows {
        for k in 0..1u64 << (f - b) {
            t.extend([k << b, k << b | gamma]);
        }
    }
    t.sort_unstable();
    t.dedup();
    Ok(Some((f, t)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Output, Piece};

    fn spec(n: u32, atoms: Vec<Atom>, phi: Vec<Node>) -> OperatorSpec {
        let out = phi.len() - 1;
        OperatorSpec {
            name: "cells".into(),
            in_bits: n,
            out_bits: 4,
            signed: false,
            slack: false,
            scale: None,
            out_scale: None,
            boundaries: vec![0],
            pieces: vec![Piece::default()],
            atoms,
            kappa: vec![],
            phi: Some(Phi { nodes: phi, outputs: vec![Output::Bool(out)] }),
        }
    }

    /// The value a cover describes at `x`.
    fn cover_at(c: &Cover, x: u64) -> bool {
        let step = |s: &StepFn| {
            let v = x & fss::ring::mask(s.bits);
            s.vals[s.starts.partition_point(|&b| b <= v) - 1] == 1
        };
        step(&c.whole) || c.products.iter().any(|(a, b)| step(a) && step(b))
    }

    #[test]
    fn covers_equal_the_value_on_every_input() {
        let atoms = vec![
            Atom::LtLow { bits: 3, gamma: 5 },
            Atom::Lt { beta: 40 },
            Atom::MsbAdd { offset: 9 },
            Atom::LtLow { bits: 2, gamma: 1 },
            Atom::Msb,
        ];
        let nodes = vec![
            Node::Atom { index: 0 },
            Node::Atom { index: 1 },
            Node::And { a: 0, b: 1 },
            Node::Atom { index: 2 },
            Node::Xor { a: 2, b: 3 },
            Node::Atom { index: 3 },
            Node::Or { a: 4, b: 5 },
            Node::Atom { index: 4 },
            Node::And { a: 6, b: 7 },
        ];
        for last in [2usize, 4, 6, 8] {
            let s = spec(6, atoms.clone(), nodes[..=last].to_vec());
            let phi = s.phi.as_ref().unwrap();
            let cells = Cells::of(&s, &Reads::node(&s, phi, last), 1 << 10).unwrap();
            let cone = node_cone(phi, last);
            let mut scratch = vec![false; last + 1];
            let cover = cells.cover(&mut |x| node_at(&s, phi, &cone, x, &mut scratch));
            for x in 0..64 {
                let want = node_at(&s, phi, &cone, x, &mut scratch);
                assert_eq!(cover_at(&cover, x), want, "node {last}, x = {x}");
            }
        }
    }

    #[test]
    fn low_views_are_bounded() {
        let s = spec(
            20,
            vec![Atom::LtLow { bits: 1, gamma: 1 }, Atom::LtLow { bits: 19, gamma: 3 }],
            vec![Node::Atom { index: 0 }, Node::Atom { index: 1 }, Node::And { a: 0, b: 1 }],
        );
        let phi = s.phi.as_ref().unwrap();
        assert!(Cells::of(&s, &Reads::node(&s, phi, 2), 1 << 12).is_err());
        assert!(Cells::of(&s, &Reads::node(&s, phi, 1), 1 << 12).is_ok());
    }
}
