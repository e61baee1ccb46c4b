//! `Φ` lowered node by node: arithmetic nodes as symbolic polynomials ([`crate::sym`]),
//! Boolean nodes as [`BExpr`]s. A Boolean node keeps the form its operands give while that
//! form expands to at most [`KEEP_TERMS`] terms; past that (an `and`, `or` or `xor` over
//! values that are themselves products) it is lowered as the function of the input it is,
//! over the cells of what it reads ([`super::cells`]), so its size no longer depends on how
//! its formula nests. Every node is charged to the budget before it is built.

use super::bexpr::{BExpr, Val};
use super::budget::Work;
use super::cells::{Reads, node_at, node_cone};
use super::lower::Lower;
use crate::spec::{Node, Phi, Site, SpecError, word};
use crate::sym::{SVar, Sym};

/// Most terms a Boolean node's expansion over its operands may have before the node is
/// lowered over its cells instead (a product of three opened bits has 27).
const KEEP_TERMS: u64 = 64;

fn arith_of(vals: &[Val], k: usize) -> &Sym {
    match &vals[k] {
        Val::A(x) => x,
        Val::B(_) => unreachable!("validated: operand {k} is arithmetic"),
    }
}

fn bool_of(vals: &[Val], k: usize) -> &BExpr {
    match &vals[k] {
        Val::B(x) => x,
        Val::A(_) => unreachable!("validated: operand {k} is Boolean"),
    }
}

impl Lower<'_> {
    /// Every node of `phi`, in order.
    ///
    /// # Errors
    /// [`SpecError::Limit`] naming the node where the budget ran out.
    pub(super) fn phi(&mut self, phi: &Phi) -> Result<Vec<Val>, SpecError> {
        let mut vals = Vec::with_capacity(phi.nodes.len());
        for (i, node) in phi.nodes.iter().enumerate() {
            self.budget.at(Site::Node { index: i, op: node.op() });
            let v = self.phi_node(phi, i, &vals)?;
            vals.push(v);
        }
        Ok(vals)
    }

    fn phi_node(&mut self, phi: &Phi, i: usize, vals: &[Val]) -> Result<Val, SpecError> {
        let l = self.l();
        let a = |k| arith_of(vals, k);
        let b = |k| bool_of(vals, k).clone();
        Ok(match phi.nodes[i] {
            Node::Const { value } => Val::A(Sym::constant(l, word(value, l))),
            Node::X => Val::A(self.lift()),
            Node::Poly { index } => Val::A(self.polys[index].clone()),
            Node::Aux { index } => Val::A(self.const_sym(index)?),
            Node::Kappa { index } => Val::A(Sym::secret(l, SVar::Kappa(index as u32))),
            Node::Add { a: p, b: q } => Val::A(self.add(a(p), a(q), false)?),
            Node::Sub { a: p, b: q } => Val::A(self.add(a(p), a(q), true)?),
            Node::Scale { a: p, by } => {
                self.budget.charge(Work::Terms(a(p).len() as u64))?;
                Val::A(a(p).scale(word(by, l)))
            }
            Node::Mul { a: p, b: q } => Val::A(self.mul(a(p), a(q))?),
            Node::B2a { a: p } => Val::A(self.ring(&b(p))?),
            Node::Select { bit, a: p, b: q } => {
                // y + c·(x − y)
                let c = self.ring(&b(bit))?;
                let d = self.add(a(p), a(q), true)?;
                let cd = self.mul(&c, &d)?;
                Val::A(self.add(a(q), &cd, false)?)
            }
            Node::Shr { bits } => Val::A(self.shr(bits)),
            Node::Low { bits } => Val::A(self.low(bits)),
            Node::Interp { value, slope, bits } => Val::A(self.interp(value, slope, bits)?),
            Node::Bool { index } => Val::B(self.bools[index].clone()),
            Node::Atom { index } => {
                let atom = self.spec.atoms[index];
                Val::B(self.atom(atom))
            }
            Node::Bit { value } => Val::B(BExpr::constant(value)),
            Node::Not { a: p } => Val::B(BExpr::not(b(p))),
            Node::Xor { a: p, b: q } => Val::B(self.boolean(phi, i, BExpr::xor(b(p), b(q)))?),
            Node::And { a: p, b: q } => Val::B(self.boolean(phi, i, BExpr::and(b(p), b(q)))?),
            Node::Or { a: p, b: q } => Val::B(self.boolean(phi, i, BExpr::or(b(p), b(q)))?),
        })
    }

    /// `x + y`, or `x − y`.
    pub(super) fn add(&mut self, x: &Sym, y: &Sym, minus: bool) -> Result<Sym, SpecError> {
        self.budget.charge(Work::Terms((x.len() + y.len()) as u64))?;
        Ok(if minus { x.sub(y) } else { x.add(y) })
    }

    /// The bit `e` as a ring element.
    fn ring(&mut self, e: &BExpr) -> Result<Sym, SpecError> {
        self.budget.charge(Work::Products(e.terms()))?;
        Ok(self.arith(e))
    }

    /// Boolean node `i`, whose operands combine into `e`: `e` while it expands to at most
    /// [`KEEP_TERMS`] terms, else the node as a function of the input over its cells.
    fn boolean(&mut self, phi: &Phi, i: usize, e: BExpr) -> Result<BExpr, SpecError> {
        if e.terms() <= KEEP_TERMS {
            return Ok(e);
        }
        let orig = self.orig;
        let reads = Reads::node(orig, phi, i);
        let cone = node_cone(phi, i);
        let mut scratch = vec![false; i + 1];
        self.by_cells(&reads, &mut |x| node_at(orig, phi, &cone, x, &mut scratch))
    }
}
