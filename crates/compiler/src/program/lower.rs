//! The lowering of one spec with fixed backend choices: its comparisons as leaves of the
//! packed comparison, its pieces through the chosen lookup, `Φ` as symbolic polynomials,
//! and the exchanges they need, assembled into a [`Program`].

use std::cell::Cell;
use std::collections::HashMap;

use fss::ring::mask;

use super::bexpr::{BExpr, Val};
use super::budget::{Budget, Work};
use super::cells::{Cells, Cover, Reads, StepFn, formula_at};
use super::ir::{
    CmpBackend, DcfPlan, Exchange, LeafMux, Limits, LookupBackend, LookupPlan, MAX_TABLE_BITS, Program,
    TablePlan,
};
use super::prep::{alignment_runs, coefficient, constant, half_rows, poly_len, rows_join};
use super::words::Builder;
use crate::predicate::{
    Families, FullWidth, LinBit, SplitBit, low_step_bit, renumber, step_bits, step_bits_high,
};
use crate::spec::{Atom, BoolExpr, Kind, Node, OperatorSpec, Output, Site, SpecError, word};
use crate::sym::{PVar, SVar, Sym};

/// The lowering of one spec with fixed backend choices.
pub(super) struct Lower<'a> {
    pub(super) orig: &'a OperatorSpec,
    pub(super) spec: &'a OperatorSpec,
    cmp: CmpBackend,
    backend: LookupBackend,
    fams: Families,
    /// Leaves by content, and their order.
    leaf_ids: HashMap<LinBit, u32>,
    leaves: Vec<LinBit>,
    /// Leaves that read another leaf by a public bit ([`LeafMux`]).
    muxes: Vec<LeafMux>,
    /// Opened bits: leaf → bit index.
    open_ids: HashMap<u32, u32>,
    opened: Vec<u32>,
    /// Locals beyond the leaves: (availability exchange).
    extra_locals: Vec<u32>,
    /// Beaver products: (a − U, b − V, exchange).
    beavers: Vec<(Sym, Sym, u32)>,
    lookup: LookupPlan,
    /// Lowered polynomial outputs, constants and formulas of the active piece.
    pub(super) polys: Vec<Sym>,
    pub(super) consts: Vec<Sym>,
    /// Constants not lowered yet (read only as an [`Node::Interp`]'s value, which a split
    /// may read without its carry; [`Lower::const_sym`] lowers one when asked).
    deferred: Vec<bool>,
    pub(super) bools: Vec<BExpr>,
    /// Work done so far against the limits.
    pub(super) budget: Budget<'a>,
}

impl<'a> Lower<'a> {
    pub(super) fn new(
        orig: &'a OperatorSpec,
        spec: &'a OperatorSpec,
        cmp: CmpBackend,
        backend: LookupBackend,
        mode: FullWidth,
        limits: Limits,
        spent: &'a Cell<u64>,
    ) -> Result<Lower<'a>, SpecError> {
        Ok(Lower {
            orig,
            spec,
            cmp,
            backend,
            fams: Families::new(spec.in_bits, mode),
            leaf_ids: HashMap::new(),
            leaves: vec![],
            muxes: vec![],
            open_ids: HashMap::new(),
            opened: vec![],
            extra_locals: vec![],
            beavers: vec![],
            lookup: LookupPlan::None,
            polys: vec![],
            consts: vec![],
            deferred: vec![],
            bools: vec![],
            budget: Budget::new(limits, spent),
        })
    }

    pub(super) fn l(&self) -> u32 {
        self.spec.out_bits
    }

    fn n(&self) -> u32 {
        self.spec.in_bits
    }

    fn unsupported(&self, msg: impl Into<String>) -> SpecError {
        SpecError::Phi { node: 0, msg: format!("{:?} lookup: {}", self.backend, msg.into()) }
    }

    fn leaf(&mut self, b: &LinBit) -> u32 {
        if let Some(&i) = self.leaf_ids.get(b) {
            return i;
        }
        let i = self.leaves.len() as u32;
        self.leaves.push(b.clone());
        self.leaf_ids.insert(b.clone(), i);
        i
    }

    /// A leaf of its own that is `low` where `x̂ mod 2^bits < beta` and `high` elsewhere.
    fn mux_leaf(&mut self, low: &LinBit, high: &LinBit, bits: u32, beta: u64) -> u32 {
        let alt = self.leaf(high);
        let leaf = self.leaves.len() as u32;
        self.leaves.push(low.clone());
        self.muxes.push(LeafMux { leaf, alt, bits, beta });
        leaf
    }

    fn open(&mut self, b: &LinBit) -> u32 {
        let leaf = self.leaf(b);
        self.open_local(leaf)
    }

    /// Open local `id` (a leaf, or a lookup local from `LOCAL_BASE`).
    fn open_local(&mut self, id: u32) -> u32 {
        if let Some(&j) = self.open_ids.get(&id) {
            return j;
        }
        let j = self.opened.len() as u32;
        self.opened.push(id);
        self.open_ids.insert(id, j);
        j
    }

    /// The exchange after which `s` can be evaluated.
    fn ready(&self, s: &Sym) -> u32 {
        let mut r = 0;
        for v in s.public_vars() {
            r = r.max(match v {
                PVar::Open(_) => 1,
                PVar::Beaver(i) => self.beavers[(i / 2) as usize].2,
                _ => 0,
            });
        }
        for v in s.secret_vars() {
            if let SVar::Local(j) = v
                && j >= LOCAL_BASE
            {
                r = r.max(self.extra_locals[(j - LOCAL_BASE) as usize]);
            }
        }
        r
    }

    fn split(&self, b: SplitBit, carry: Option<&LinBit>) -> BExpr {
        match (b.q.as_constant(), carry) {
            (Some(false), _) => BExpr::Leaf(b.a),
            (_, Some(c)) => {
                BExpr::xor(BExpr::Leaf(b.a), BExpr::and(BExpr::Leaf(b.q), BExpr::Leaf(c.clone())))
            }
            (_, None) => unreachable!("split bits only exist in split mode"),
        }
    }

    fn carry(&mut self) -> Option<LinBit> {
        self.fams.mode().shift().map(|f| self.fams.carry(f))
    }

    fn sb(&mut self, b: SplitBit) -> BExpr {
        let c = self.carry();
        self.split(b, c.as_ref())
    }

    /// The bit as a ring element.
    pub(super) fn arith(&mut self, e: &BExpr) -> Sym {
        let l = self.l();
        match e {
            BExpr::Leaf(b) => match b.as_constant() {
                Some(v) => Sym::constant(l, v as u64),
                None => {
                    let j = self.open(b);
                    Sym::opened_bit(l, j)
                }
            },
            BExpr::Loc(id) => {
                let j = self.open_local(*id);
                Sym::opened_bit(l, j)
            }
            BExpr::Not(a) => Sym::constant(l, 1).sub(&self.arith(a)),
            BExpr::And(v) => {
                let mut acc = Sym::constant(l, 1);
                for a in v {
                    acc = acc.mul(&self.arith(a)).expect("bits are dealer-known");
                }
                acc
            }
            BExpr::Xor(v) => {
                let mut acc = Sym::zero(l);
                for a in v {
                    let b = self.arith(a);
                    let ab = acc.mul(&b).expect("bits are dealer-known");
                    acc = acc.add(&b).sub(&ab.scale(2));
                }
                acc
            }
            BExpr::Sum(v) => {
                let mut acc = Sym::zero(l);
                for a in v {
                    acc.add_assign(&self.arith(a));
                }
                acc
            }
        }
    }

    /// The bit as XOR shares (`bits = 1`): linear leaves stay local, factors of products are
    /// opened.
    pub(super) fn gf2(&mut self, e: &BExpr, under: bool) -> Sym {
        match e {
            BExpr::Leaf(b) => match b.as_constant() {
                Some(v) => Sym::constant(1, v as u64),
                None if under => {
                    let j = self.open(b);
                    Sym::opened_bit(1, j)
                }
                None => Sym::secret(1, SVar::Local(self.leaf(b))),
            },
            BExpr::Loc(id) if under => {
                let j = self.open_local(*id);
                Sym::opened_bit(1, j)
            }
            BExpr::Loc(id) => Sym::secret(1, SVar::Local(*id)),
            BExpr::Not(a) => Sym::constant(1, 1).add(&self.gf2(a, under)),
            BExpr::Xor(v) | BExpr::Sum(v) => {
                let mut acc = Sym::zero(1);
                for a in v {
                    acc.add_assign(&self.gf2(a, under));
                }
                acc
            }
            BExpr::And(v) => {
                let mut acc = Sym::constant(1, 1);
                for a in v {
                    acc = acc.mul(&self.gf2(a, true)).expect("opened bits are dealer-known");
                }
                acc
            }
        }
    }

    pub(super) fn atom(&mut self, a: Atom) -> BExpr {
        let n = self.n();
        let b = match a {
            Atom::Lt { beta } => self.fams.below(n, beta),
            Atom::LtLow { bits, gamma } => self.fams.below(bits, gamma),
            Atom::Msb => self.fams.below(n, 1u64 << (n - 1)).not(),
            Atom::MsbAdd { offset } => {
                // msb(x + c) ⟺ x ∈ [H − c, N − c) (mod N).
                let nn = 1u128 << n;
                let (h, c) = ((nn / 2), offset as u128);
                let lo = ((h + nn - c) % nn) as u64;
                let hi = (nn - c) % nn;
                let hi_bit =
                    // (x < 2^n always holds: a constant, also at n = 64.)
                    if hi == 0 { SplitBit::lin(LinBit::constant(true)) } else { self.fams.below(n, hi as u64) };
                let lo_bit = self.fams.below(n, lo);
                if hi == 0 || (lo as u128) < hi { hi_bit.xor(&lo_bit) } else { hi_bit.xor(&lo_bit.not()) }
            }
        };
        self.sb(b)
    }

    /// The unsigned lift `X_u = x̂ − r + 2^n·1[x̂ < r]` in `Z_{2^ℓ}`.
    fn lift_unsigned(&mut self) -> Sym {
        let (n, l) = (self.n(), self.l());
        let x = Sym::public(l, PVar::XHat).sub(&Sym::secret(l, SVar::R));
        if l <= n {
            return x;
        }
        let w = if self.spec.slack {
            self.slack_wrap()
        } else {
            let w = self.fams.wrap(0);
            let w = self.sb(w);
            self.arith(&w)
        };
        x.add(&w.scale(1u64 << n))
    }

    /// For a slack spec (`u < 2^{n−1}`): the wrap `1[û < r] = msb(r)·¬msb(û)` of `u = û − r`,
    /// a public bit times a dealer bit. It is also the wrap `1[ĥ < r_h]` of the high part
    /// `h₀ = ĥ − r_h` of a split (`h₀ = h + c ≤ 2^{n−f−1}`, and the same two MSBs).
    fn slack_wrap(&self) -> Sym {
        let (n, l) = (self.n(), self.l());
        let below = Sym::public(l, PVar::XHatBelow(1u64 << (n - 1)));
        below.mul(&Sym::secret(l, SVar::RShr(n - 1))).expect("public times dealer-known")
    }

    /// `X` as the spec defines it (signed or unsigned lift).
    pub(super) fn lift(&mut self) -> Sym {
        let (n, l) = (self.n(), self.l());
        let x = self.lift_unsigned();
        if self.spec.slack {
            // The gate reads u = x + 2^{n−2} < 2^{n−1}: X = u − 2^{n−2}, signed.
            return x.sub(&Sym::constant(l, (1u64 << (n - 2)) & mask(l)));
        }
        if !self.spec.signed || l <= n {
            return x;
        }
        let msb = self.atom(Atom::Msb);
        let msb = self.arith(&msb);
        x.sub(&msb.scale(1u64 << n))
    }

    /// `C(X_u)·X_u` for a slope `C` that is `K` on a prefix `[0, B)` of the unsigned input
    /// and 0 above (a ReLU part), when the comparisons are split and `X_u` needs its wrap
    /// bit `w = 1[x̂ < r]`: with `g = 1[X_u < B]`, `C·X_u = K·g·(x̂ − r) + K·2^n·(g ∧ w)`, and
    /// `g ∧ w = 1[x̂ < B]·1[(x̂ − B) mod 2^n < r]` (`X_u = x̂ − r + 2^n < B` iff
    /// `x̂ + 2^n − B < r`): one split comparison times a public bit, where `g·X_u` would
    /// multiply two split bits (products of up to five mask bits).
    fn prefix_times_lift(&mut self, vals: &[u64]) -> Result<Option<Sym>, SpecError> {
        let (n, l) = (self.n(), self.l());
        // (A slack spec's lift has no comparison in it.)
        if l <= n || self.fams.mode().shift().is_none() || self.spec.slack {
            return Ok(None);
        }
        let k = vals[0];
        let Some(i) = vals.iter().position(|&v| v != k) else { return Ok(None) };
        if k == 0 || vals[i..].iter().any(|&v| v != 0) {
            return Ok(None);
        }
        let b = self.spec.boundaries[i];
        let g: Vec<u64> = vals.iter().map(|&v| (v != 0) as u64).collect();
        let g = self.step_sym(&g)?;
        let xr = Sym::public(l, PVar::XHat).sub(&Sym::secret(l, SVar::R));
        let gw = self.fams.wrap(b);
        let gw = self.sb(gw);
        let gw = Sym::public(l, PVar::XHatBelow(b)).mul(&self.arith(&gw)).expect("public");
        Ok(Some(g.mul(&xr).expect("dealer-known").scale(k).add(&gw.scale(k.wrapping_mul(1u64 << n)))))
    }

    /// `⌊X / 2^f⌋` by the fused identity (docs/design/compiled-gates.md §4.1, docs/design/paper.md §3.6).
    pub(super) fn shr(&mut self, f: u32) -> Sym {
        let (n, l) = (self.n(), self.l());
        let m = n - f;
        let offset = if self.spec.signed { 1u64 << (n - 1) } else { 0 };
        let c = self.fams.carry(f);
        let c = self.arith(&BExpr::Leaf(c));
        // The wrap term is a multiple of 2^m: it vanishes when the output ring is that narrow.
        let w = if m >= l {
            Sym::zero(l)
        } else if self.spec.slack {
            // A slack spec reads `u = x + 2^{n−2} < 2^{n−1}`: its wrap is local.
            self.slack_wrap()
        } else {
            match self.fams.mode() {
                FullWidth::Split(_) | FullWidth::Grouped(..) => {
                    // w = L + E·c: L and E come from one point, so they are exclusive.
                    let (lt, eq) = self.fams.high(f, offset);
                    let lt = self.arith(&BExpr::Leaf(lt));
                    let eq = self.arith(&BExpr::Leaf(eq));
                    lt.add(&eq.mul(&c).expect("bits"))
                }
                FullWidth::Whole => {
                    let w = self.fams.wrap(offset.wrapping_neg() & mask(n));
                    let w = self.sb(w);
                    self.arith(&w)
                }
            }
        };
        let a = Sym::public(l, PVar::XHatShr { offset, shift: f });
        let mut y = a.sub(&Sym::secret(l, SVar::RShr(f))).sub(&c);
        if m < l {
            y = y.add(&w.scale(1u64 << m));
        }
        if self.spec.signed {
            y = y.sub(&Sym::constant(l, 1u64 << (m - 1)));
        }
        if self.spec.slack {
            // `⌊x / 2^f⌋ = ⌊u / 2^f⌋ − 2^{n−2−f}` (`2^{n−2}` is a multiple of `2^f`).
            y = y.sub(&Sym::constant(l, (1u64 << (n - 2 - f)) & mask(l)));
        }
        y
    }

    /// `x mod 2^f`, the input's offset in its row: `(x̂ mod 2^f) − (r mod 2^f) + 2^f·c` with
    /// the carry `c = 1[x̂ mod 2^f < r mod 2^f]` that a split at `f` reads anyway, so no wrap
    /// and no other comparison (a slack spec's `û` has the offsets of `x`: `2^{n−2}` is a
    /// multiple of `2^f`).
    pub(super) fn low(&mut self, f: u32) -> Sym {
        let c = self.fams.carry(f);
        let c = self.arith(&BExpr::Leaf(c));
        self.low_before_carry(f).add(&c.scale((1u64 << f) & mask(self.l())))
    }

    /// `λ = (x̂ mod 2^f) − (r mod 2^f)`: the offset in the row before the carry's `2^f·c`.
    fn low_before_carry(&self, f: u32) -> Sym {
        let l = self.l();
        let r = Sym::secret(l, SVar::R).sub(&Sym::secret(l, SVar::RShr(f)).scale((1u64 << f) & mask(l)));
        Sym::public(l, PVar::XHatLow(f)).sub(&r)
    }

    /// Constant `j` of the active piece, lowered now if it was deferred.
    pub(super) fn const_sym(&mut self, j: usize) -> Result<Sym, SpecError> {
        if self.deferred.get(j).copied().unwrap_or(false) {
            self.consts[j] = self.step_sym(&constant(self.spec, j))?;
            self.deferred[j] = false;
        }
        Ok(self.consts[j].clone())
    }

    /// `v − s·(x mod 2^f)` for the constants `v = value` and `s = slope` ([`Node::Interp`]).
    /// With the comparisons split at `f` and rows that join up ([`rows_join`]), the row's
    /// value is read at `h₀`, before the carry: with `x mod 2^f = λ + 2^f·c` (`λ = x̂_l −
    /// r_l`), a borrow (`c = 1`) reads row `h₀ − 1` at `λ + 2^f`, which is where row `h₀`
    /// starts, at `λ`. So the value is `V(h₀) − S(h₀ − c)·λ`: the value's bits with no jump
    /// bits, and no carry in the product.
    pub(super) fn interp(&mut self, value: usize, slope: usize, f: u32) -> Result<Sym, SpecError> {
        let (s, l, n) = (self.spec, self.l(), self.n());
        let (v, sl) = (constant(s, value), constant(s, slope));
        let fast = self.backend == LookupBackend::StepBits
            && self.fams.mode() == FullWidth::Split(f)
            && rows_join(&s.boundaries, &v, &sl, n, f, l, s.slack);
        let slope_sym = self.const_sym(slope)?;
        if !fast {
            let v = self.const_sym(value)?;
            let low = self.low(f);
            let p = self.mul(&slope_sym, &low)?;
            return self.add(&v, &p, true);
        }
        let at_h0 = self.step_value(&s.boundaries, &v, Some(f))?;
        let p = self.mul(&slope_sym, &self.low_before_carry(f))?;
        self.add(&at_h0, &p, true)
    }

    /// `a · b`: expanded symbolically, with no interaction, when both are dealer-known (no
    /// lookup share) and the expansion stays within [`SYMBOLIC_PRODUCT_TERMS`] terms and
    /// [`MAX_EXPONENT`]; otherwise through a Beaver round, whose result has four terms.
    ///
    /// # Errors
    /// [`SpecError::Limit`] past the budget.
    pub(super) fn mul(&mut self, a: &Sym, b: &Sym) -> Result<Sym, SpecError> {
        let terms = (a.len() as u64).saturating_mul(b.len() as u64);
        if terms <= SYMBOLIC_PRODUCT_TERMS && a.max_exponent() + b.max_exponent() <= MAX_EXPONENT {
            self.budget.charge(Work::Products(terms))?;
            if let Ok(p) = a.mul(b) {
                return Ok(p);
            }
        }
        self.budget.charge(Work::Terms((a.len() + b.len()) as u64))?;
        Ok(self.beaver(a, b))
    }

    /// `a · b` through a Beaver round: `a − U` and `b − V` are opened once both are ready.
    fn beaver(&mut self, a: &Sym, b: &Sym) -> Sym {
        let l = self.l();
        let i = self.beavers.len() as u32;
        let (u, v) = (Sym::secret(l, SVar::Beaver(2 * i)), Sym::secret(l, SVar::Beaver(2 * i + 1)));
        let round = self.ready(a).max(self.ready(b)) + 1;
        self.beavers.push((a.sub(&u), b.sub(&v), round));
        let (d, e) = (Sym::public(l, PVar::Beaver(2 * i)), Sym::public(l, PVar::Beaver(2 * i + 1)));
        // ab = (d + u)(e + v) = de + dv + eu + uv
        d.mul(&e)
            .expect("public")
            .add(&d.mul(&v).expect("dealer"))
            .add(&e.mul(&u).expect("dealer"))
            .add(&u.mul(&v).expect("dealer"))
    }

    /// Lower the pieces through the chosen lookup: into the active piece's polynomial
    /// outputs, constants and formulas (`polys`, `consts`, `bools`), and the lookup plan.
    fn pieces(&mut self) -> Result<(), SpecError> {
        match self.backend {
            LookupBackend::StepBits => self.step_bits_pieces(),
            LookupBackend::IndexLut => self.index_lut_pieces(),
            LookupBackend::ReducedView { shift } => self.reduced_view_pieces(shift),
            LookupBackend::Dcf => self.dcf_pieces(),
        }
    }

    /// [`LookupBackend::StepBits`]: every coefficient a step function of the interval, read
    /// out of the comparison bits.
    fn step_bits_pieces(&mut self) -> Result<(), SpecError> {
        let s = self.spec;
        let (l, np, nc) = (self.l(), s.poly_count(), s.const_count());
        let mut x: Option<Sym> = None;
        for j in 0..np {
            let deg = poly_len(s, j);
            let mut p = Sym::zero(l);
            let mut xk = Sym::constant(l, 1);
            for k in 0..deg {
                let vals = coefficient(s, j, k);
                if k == 1
                    && deg == 2
                    && let Some(t) = self.prefix_times_lift(&vals)?
                {
                    p = p.add(&t);
                    continue;
                }
                let c = self.step_sym(&vals)?;
                self.budget.charge(Work::Products((c.len() * xk.len()) as u64))?;
                p = p.add(&c.mul(&xk).expect("dealer-known"));
                if k + 1 < deg {
                    let x = x.get_or_insert_with(|| self.lift_unsigned()).clone();
                    xk = xk.mul(&x).expect("dealer-known");
                }
            }
            self.polys.push(p);
        }
        for j in 0..nc {
            let later = interp_value_only(s, j);
            let c = if later { Sym::zero(l) } else { self.step_sym(&constant(s, j))? };
            self.consts.push(c);
            self.deferred.push(later);
        }
        self.piece_bools(true)?;
        Ok(())
    }

    /// [`LookupBackend::IndexLut`]: the interval's class of identical rows, opened, and
    /// looked up in a table.
    fn index_lut_pieces(&mut self) -> Result<(), SpecError> {
        let s = self.spec;
        let (l, np, nc) = (self.l(), s.poly_count(), s.const_count());
        if s.degree() > 0 {
            return Err(self.unsupported("needs degree-0 pieces"));
        }
        self.budget.charge(Work::Words(s.pieces.len() as u64 * (np + nc) as u64))?;
        // Classes of identical rows.
        let rows: Vec<Vec<u64>> = s
            .pieces
            .iter()
            .map(|p| {
                p.polys.iter().map(|c| word(c[0], l)).chain(p.consts.iter().map(|&c| word(c, l))).collect()
            })
            .collect();
        let mut class_of = HashMap::new();
        let mut classes: Vec<Vec<u64>> = vec![];
        let idx: Vec<u64> = rows
            .iter()
            .map(|r| {
                *class_of.entry(r.clone()).or_insert_with(|| {
                    classes.push(r.clone());
                    classes.len() as u64 - 1
                })
            })
            .collect();
        let bits = (usize::BITS - (classes.len() - 1).leading_zeros()).max(1);
        if bits > MAX_TABLE_BITS {
            return Err(self.unsupported(format!("{} classes need a {bits}-bit table", classes.len())));
        }
        let words = np + nc;
        if words == 0 {
            return Err(self.unsupported("nothing to look up"));
        }
        let index_bits = step_bits(&mut self.fams, &s.boundaries, &idx, bits);
        let mut opened = vec![];
        for b in index_bits {
            if b.q.as_constant() != Some(false) {
                return Err(self.unsupported("index bits must be linear"));
            }
            opened.push(self.open(&b.a));
        }
        let mut table = vec![0u64; (1usize << bits) * words];
        for (c, row) in classes.iter().enumerate() {
            table[c * words..(c + 1) * words].copy_from_slice(row);
        }
        let first = self.new_locals(words, 1);
        self.lookup = LookupPlan::Table(TablePlan {
            domain_bits: bits,
            table,
            words,
            first_local: first,
            opened,
            shift: 0,
        });
        self.table_outputs(first, np, nc);
        self.piece_bools(true)?;
        Ok(())
    }

    /// [`LookupBackend::ReducedView`]: a table of rows of `2^shift`, read at the opened
    /// carry and the high bits.
    fn reduced_view_pieces(&mut self, shift: u32) -> Result<(), SpecError> {
        let s = self.spec;
        let (l, np, nc) = (self.l(), s.poly_count(), s.const_count());
        if s.degree() > 0 || s.bool_count() > 0 {
            return Err(self.unsupported("needs degree-0 pieces and no formulas"));
        }
        let n = self.n();
        if shift == 0 || shift >= n || n - shift > MAX_TABLE_BITS {
            return Err(self.unsupported(format!("row shift {shift} on {n} bits")));
        }
        if s.boundaries.iter().any(|b| b & mask(shift) != 0) {
            return Err(self.unsupported(format!("boundaries are not multiples of 2^{shift}")));
        }
        let k = n - shift;
        let words = np + nc;
        if words == 0 {
            return Err(self.unsupported("nothing to look up"));
        }
        self.budget.charge(Work::Words((1u64 << k) * words as u64))?;
        let mut table = vec![0u64; (1usize << k) * words];
        for v in 0..1u64 << k {
            let p = &s.pieces[s.piece_of(v << shift)];
            let row: Vec<u64> =
                p.polys.iter().map(|c| word(c[0], l)).chain(p.consts.iter().map(|&c| word(c, l))).collect();
            table[v as usize * words..(v as usize + 1) * words].copy_from_slice(&row);
        }
        let c = self.fams.carry(shift);
        let carry = self.open(&c);
        let first = self.new_locals(words, 1);
        self.lookup = LookupPlan::Table(TablePlan {
            domain_bits: k + 1,
            table,
            words,
            first_local: first,
            opened: vec![carry],
            shift,
        });
        self.table_outputs(first, np, nc);
        Ok(())
    }

    /// [`LookupBackend::Dcf`]: the coefficients, constants and (constant) formulas as DCF
    /// payloads, read as lookup locals.
    fn dcf_pieces(&mut self) -> Result<(), SpecError> {
        let s = self.spec;
        let (l, np, nc) = (self.l(), s.poly_count(), s.const_count());
        let constant_bools = s.pieces.iter().all(|p| p.bools.iter().all(|e| matches!(e, BoolExpr::Const(_))));
        if !constant_bools {
            return Err(self.unsupported("Boolean formulas must be constant per interval"));
        }
        let degree = s.degree();
        let words = np * (degree + 1) + nc + s.bool_count();
        if words == 0 {
            return Err(self.unsupported("nothing to look up"));
        }
        let first = self.new_locals(words, 0);
        self.lookup = LookupPlan::Dcf(DcfPlan { words, degree, first_local: first });
        for j in 0..np {
            let mut p = Sym::zero(l);
            let mut xk = Sym::constant(l, 1);
            for k in 0..=degree {
                let q = Sym::secret(l, SVar::Local(first + (j * (degree + 1) + k) as u32));
                p = p.add(&q.mul(&xk).expect("public"));
                xk = xk.mul(&Sym::public(l, PVar::XHat)).expect("public");
            }
            self.polys.push(p);
        }
        let base = first + (np * (degree + 1)) as u32;
        for j in 0..nc {
            self.consts.push(Sym::secret(l, SVar::Local(base + j as u32)));
        }
        let base = base + nc as u32;
        for j in 0..s.bool_count() {
            self.bools.push(BExpr::Loc(base + j as u32));
        }
        Ok(())
    }

    fn new_locals(&mut self, count: usize, avail: u32) -> u32 {
        let first = LOCAL_BASE + self.extra_locals.len() as u32;
        self.extra_locals.extend(std::iter::repeat_n(avail, count));
        first
    }

    fn table_outputs(&mut self, first: u32, np: usize, nc: usize) {
        let l = self.l();
        for j in 0..np {
            self.polys.push(Sym::secret(l, SVar::Local(first + j as u32)));
        }
        for j in 0..nc {
            self.consts.push(Sym::secret(l, SVar::Local(first + (np + j) as u32)));
        }
    }

    /// Per-piece formulas: each a function of the input, lowered over the cells of what it
    /// reads ([`Lower::by_cells`]).
    fn piece_bools(&mut self, thermometer: bool) -> Result<(), SpecError> {
        let s = self.spec;
        if !thermometer && s.bool_count() > 0 {
            return Err(self.unsupported("formulas need the comparison"));
        }
        let orig = self.orig;
        for j in 0..s.bool_count() {
            self.budget.at(Site::Formula(j));
            let e = self.by_cells(&Reads::formula(orig, j), &mut |x| formula_at(orig, j, x))?;
            self.bools.push(e);
        }
        self.budget.at(Site::Pieces);
        Ok(())
    }

    /// A Boolean function `g` of the input that reads `reads`, over its cells
    /// ([`super::cells`]): step functions, opened in round 1, and products of two of them.
    ///
    /// # Errors
    /// [`SpecError::Limit`] if its cells are past the budget.
    pub(super) fn by_cells(
        &mut self,
        reads: &Reads,
        g: &mut dyn FnMut(u64) -> bool,
    ) -> Result<BExpr, SpecError> {
        let cells = Cells::of(self.orig, reads, self.budget.remaining()).map_err(|c| self.budget.over(c))?;
        self.budget.charge(Work::Evals(cells.count().saturating_mul(reads.size.max(1))))?;
        let cover = cells.cover(g);
        let flips =
            cover.products.iter().flat_map(|(a, b)| [a, b]).chain([&cover.whole]).map(|f| f.starts.len());
        self.budget.charge(Work::Flips(flips.sum::<usize>() as u64))?;
        Ok(self.cover_expr(&cover))
    }

    fn cover_expr(&mut self, c: &Cover) -> BExpr {
        let mut terms = vec![];
        if !(c.whole.is_constant() && c.whole.vals[0] == 0) {
            terms.push(self.step_fn(&c.whole));
        }
        for (a, b) in &c.products {
            let (a, b) = (self.step_fn(a), self.step_fn(b));
            terms.push(BExpr::and(a, b));
        }
        BExpr::sum(terms)
    }

    /// A one-bit step function of the input or of its low bits.
    fn step_fn(&mut self, s: &StepFn) -> BExpr {
        if s.is_constant() {
            return BExpr::constant(s.vals[0] == 1);
        }
        if s.bits == self.n() {
            let b = step_bits(&mut self.fams, &s.starts, &s.vals, 1).remove(0);
            self.sb(b)
        } else {
            BExpr::Leaf(low_step_bit(&mut self.fams, s.bits, &s.starts, &s.vals))
        }
    }

    /// A step function of the interval as a ring element: a base plus opened bits.
    fn step_sym(&mut self, vals: &[u64]) -> Result<Sym, SpecError> {
        let l = self.l();
        if vals.iter().all(|&v| v == vals[0]) {
            return Ok(Sym::constant(l, vals[0]));
        }
        let aligned = |f: u32| self.spec.boundaries.iter().all(|&b| b & mask(f) == 0);
        match self.fams.mode() {
            FullWidth::Split(f) if aligned(f) => {
                let starts = self.spec.boundaries.clone();
                return self.step_sym_split(f, &starts, vals);
            }
            FullWidth::Split(f) => {
                if let Some(h) = half_rows(self.n(), f, &self.spec.boundaries, vals, l) {
                    let mut out = if h.vals.len() == 1 {
                        Sym::constant(l, h.vals[0])
                    } else {
                        self.step_sym_split(f, &h.starts, &h.vals)?
                    };
                    for (k, &w) in (h.first_row..).zip(&h.weights) {
                        if w != 0 {
                            let row = self.half_row(f, k);
                            out = out.add(&row.scale(w));
                        }
                    }
                    return Ok(out);
                }
            }
            FullWidth::Grouped(f, w) if aligned(f) => return self.step_sym_grouped(w, vals),
            _ => {}
        }
        let spec = self.spec;
        self.step_value(&spec.boundaries, vals, None)
    }

    /// A step function as a sum of step functions, one per run of boundaries from
    /// [`alignment_runs`], each split at its run's alignment `g`: run `i` starts at 0 with
    /// 0 (run 0 with `v_0`) and steps to `v_k − v_{first−1}` at each of its boundaries, so
    /// the sum telescopes to `v_k` on interval `k`. Each run pays its own `(n − g)`-bit high
    /// key and `g`-bit carry, and reads its boundaries as one window of high positions.
    fn step_sym_grouped(&mut self, window_bits: u32, vals: &[u64]) -> Result<Sym, SpecError> {
        let m = mask(self.l());
        let starts = self.spec.boundaries.clone();
        let mut out = Sym::zero(self.l());
        for (g, run) in alignment_runs(self.n(), &starts, 1u64 << window_bits.min(63)) {
            let before = if run.start == 0 { 0 } else { vals[run.start - 1] };
            let (mut s, mut v) = (vec![0u64], vec![if run.start == 0 { vals[0] } else { 0 }]);
            for k in run.start.max(1)..run.end {
                s.push(starts[k]);
                v.push(vals[k].wrapping_sub(before) & m);
            }
            out = out.add(&self.step_sym_split(g, &s, &v)?);
        }
        Ok(out)
    }

    /// A step function whose starts are all multiples of `2^f`, with the comparisons split
    /// at `f`. With `h₀ = x̂_h − r_h` and the carry `c`, the high part of `x` is `h₀ − c`,
    /// so `V(x) = V(h₀) − c·(V(h₀) − V(h₀ − 1))`: two step functions of `h₀` (no equality
    /// shares) and one product of opened bits. Per value bit this opens one bit and costs
    /// one or two words, where splitting each bit as `a ⊕ q∧c` costs two bits and seven
    /// words.
    fn step_sym_split(&mut self, f: u32, starts: &[u64], vals: &[u64]) -> Result<Sym, SpecError> {
        let (l, n) = (self.l(), self.n());
        let m = mask(l);
        let t = starts.len();
        // V(h) − V(h − 1): the jump into interval k on its first row, 0 on its other rows.
        let (mut ds, mut dv) = (vec![], vec![]);
        for k in 0..t {
            ds.push(starts[k]);
            // With slack, `c = 1` only where `h₀ ≥ 1`: the jump at 0 is never read, and 0
            // keeps its thresholds (at 0 and 1) out of the bits.
            let wraps = k == 0 && self.spec.slack;
            dv.push(if wraps { 0 } else { vals[k].wrapping_sub(vals[(k + t - 1) % t]) & m });
            let end = starts[k] as u128 + (1u128 << f);
            let next = starts.get(k + 1).map_or(1u128 << n, |&b| b as u128);
            if end < next {
                ds.push(end as u64);
                dv.push(0);
            }
        }
        let v0 = self.step_value(starts, vals, Some(f))?;
        let jump = self.step_value(&ds, &dv, Some(f))?;
        if jump.is_empty() {
            // (A constant run, say the lone start at 0 of a grouped split: no carry.)
            return Ok(v0);
        }
        let c = self.fams.carry(f);
        let c = self.arith(&BExpr::Leaf(c));
        Ok(v0.sub(&c.mul(&jump).expect("opened bits")))
    }

    /// `1[(u + d) >> f = k]` for `d = 2^{f−1}`: whether the input is in row `k` of the input
    /// shifted by half a row ([`half_rows`]). The shifted input `û + d` has the same mask, so
    /// with its carry `c' = 1[(x̂ + d) mod 2^f < r mod 2^f]` (the carry key read at one more
    /// point) its row is `h₀' − c'`, where its high part `h₀' = h₀ + b` moves by the public
    /// `b = 1[x̂ mod 2^f ≥ d]`. So the row is `k` iff `E'(k + c') = 1` with `E'(j) = E(j − b)`
    /// and `E(j) = 1[h₀ = j]` read from the split's own high key at `j` and `j + 1`, inside its
    /// window ([`Families::eq_high`]): two leaves that each read one of two such bits by `b`
    /// ([`LeafMux`]), opened, and `c'` picks one.
    fn half_row(&mut self, f: u32, k: u64) -> Sym {
        let n = self.n();
        let (d, hm) = (1u64 << (f - 1), mask(n - f));
        let c = self.fams.carry_at(f, d);
        let c = self.arith(&BExpr::Leaf(c));
        let e: Vec<LinBit> =
            (0..3u64).map(|i| self.fams.eq_high(f, k.wrapping_add(i).wrapping_sub(1) & hm)).collect();
        // E'(k) = b ? E(k − 1) : E(k), and E'(k + 1) = b ? E(k) : E(k + 1).
        let at = self.mux_leaf(&e[1], &e[0], f, d);
        let above = self.mux_leaf(&e[2], &e[1], f, d);
        let at = self.arith(&BExpr::Loc(at));
        let above = self.arith(&BExpr::Loc(above));
        at.add(&c.mul(&above.sub(&at)).expect("opened bits"))
    }

    /// A step function with `vals` on the intervals from `starts`: over the whole input, or
    /// (`high = Some(f)`) over the high part `h₀` of a split at `f`.
    fn step_value(&mut self, starts: &[u64], vals: &[u64], high: Option<u32>) -> Result<Sym, SpecError> {
        let l = self.l();
        if vals.iter().all(|&v| v == vals[0]) {
            return Ok(Sym::constant(l, vals[0]));
        }
        // Base: the value just after the largest cyclic gap, so the offsets are small.
        let mut sorted: Vec<u64> = vals.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let m = mask(l);
        let mut base = sorted[0];
        let mut gap = sorted[0].wrapping_sub(sorted[sorted.len() - 1]) & m;
        for w in sorted.windows(2) {
            if w[1] - w[0] > gap {
                gap = w[1] - w[0];
                base = w[1];
            }
        }
        let offs: Vec<u64> = vals.iter().map(|&v| v.wrapping_sub(base) & m).collect();
        let top = offs.iter().copied().max().unwrap_or(0);
        let width = 64 - top.leading_zeros();
        let flips: u64 = offs.windows(2).map(|w| (w[0] ^ w[1]).count_ones() as u64).sum();
        self.budget.charge(Work::Flips(flips + width as u64))?;
        let bits: Vec<(BExpr, bool)> = match high {
            Some(f) => step_bits_high(&mut self.fams, f, starts, &offs, width, self.spec.slack)
                .into_iter()
                .map(|(b, w)| (BExpr::Leaf(b), w))
                .collect(),
            None => step_bits(&mut self.fams, starts, &offs, width)
                .into_iter()
                .map(|b| (self.sb(b), false))
                .collect(),
        };
        let mut out = Sym::constant(l, base);
        for (t, (e, wraps)) in bits.into_iter().enumerate() {
            let mut a = self.arith(&e);
            if wraps {
                // a ⊕ w = a + w − 2·a·w.
                let w = self.slack_wrap();
                let aw = a.mul(&w).expect("dealer-known");
                a = a.add(&w).sub(&aw.scale(2));
            }
            out = out.add(&a.scale(1u64 << t));
        }
        Ok(out)
    }

    pub(super) fn run(mut self) -> Result<Program, SpecError> {
        let s = self.spec;
        self.pieces()?;
        // Each output with the site it comes from.
        let mut outs: Vec<(Val, Site)> = vec![];
        if let Some(phi) = &s.phi {
            let vals = self.phi(phi)?;
            for o in &phi.outputs {
                let (Output::Arith(k) | Output::Bool(k)) = *o;
                outs.push((vals[k].clone(), Site::Node { index: k, op: phi.nodes[k].op() }));
            }
        } else {
            outs.extend(self.polys.iter().cloned().map(|p| (Val::A(p), Site::Pieces)));
            outs.extend(self.consts.iter().cloned().map(|c| (Val::A(c), Site::Pieces)));
            outs.extend(self.bools.iter().cloned().enumerate().map(|(j, e)| (Val::B(e), Site::Formula(j))));
        }
        let mut out_syms = vec![];
        let mut kinds = vec![];
        for (v, site) in outs {
            self.budget.at(site);
            match v {
                Val::A(x) => {
                    out_syms.push(x);
                    kinds.push(Kind::Arith);
                }
                Val::B(e) => {
                    self.budget.charge(Work::Products(e.terms()))?;
                    out_syms.push(self.gf2(&e, false));
                    kinds.push(Kind::Bool);
                }
            }
        }
        self.budget.at(Site::Program);
        let terms: usize =
            out_syms.iter().chain(self.beavers.iter().flat_map(|(a, b, _)| [a, b])).map(Sym::len).sum();
        self.budget.charge(Work::Terms(terms as u64))?;
        self.assemble(out_syms, kinds)
    }

    fn assemble(self, out_syms: Vec<Sym>, kinds: Vec<Kind>) -> Result<Program, SpecError> {
        let l = self.l();
        let nleaves = self.leaves.len() as u32;
        // The opened leaves first, in the order they are opened, then the others (a mux's
        // alternatives): a first exchange that opens leaf `i` as bit `i` is opened packed
        // without a gather (`gate::form::open_masked_bits`).
        let mut order: Vec<u32> = self.opened.iter().copied().filter(|&j| j < LOCAL_BASE).collect();
        let mut seen = vec![false; nleaves as usize];
        order.iter().for_each(|&j| seen[j as usize] = true);
        order.extend((0..nleaves).filter(|&j| !seen[j as usize]));
        let mut perm = vec![0u32; nleaves as usize];
        for (new, &old) in order.iter().enumerate() {
            perm[old as usize] = new as u32;
        }
        // Lookup locals come after the leaves.
        let local = |j: u32| if j >= LOCAL_BASE { nleaves + (j - LOCAL_BASE) } else { perm[j as usize] };
        let fix = |s: &Sym| s.map_locals(local);
        let mut last = out_syms.iter().map(|s| self.ready(s)).max().unwrap_or(0);
        if !self.opened.is_empty() {
            last = last.max(1);
        }
        for (_, _, r) in &self.beavers {
            last = last.max(*r);
        }
        let rounds = last as usize + 1;
        let mut b = Builder::new();
        let mut exchanges: Vec<Exchange> = (0..rounds).map(|_| Exchange::default()).collect();
        for (j, &id) in self.opened.iter().enumerate() {
            // Each party sends its share of the bit ⊕ its share of z_j.
            let s = Sym::secret(1, SVar::Local(local(id))).add(&Sym::secret(1, SVar::Z(j as u32)));
            exchanges[0].bits.push(b.form(&s, None));
        }
        for (i, (da, db, r)) in self.beavers.iter().enumerate() {
            let e = &mut exchanges[*r as usize - 1].beaver;
            e.push((2 * i as u32, b.form(&fix(da), None)));
            e.push((2 * i as u32 + 1, b.form(&fix(db), None)));
        }
        for (o, s) in out_syms.iter().enumerate() {
            let f = b.form(&fix(s), Some(o));
            exchanges[rounds - 1].outputs.push(f);
        }
        b.combine_by_pmono(&mut exchanges);
        b.share_mask_bits(&mut exchanges);
        let full_width = self.fams.mode();
        let (families, maps) = self.fams.finish();
        let leaves: Vec<LinBit> = order.iter().map(|&j| renumber(&self.leaves[j as usize], &maps)).collect();
        let muxes =
            self.muxes.iter().map(|m| LeafMux { leaf: local(m.leaf), alt: local(m.alt), ..*m }).collect();
        let mut lookup = self.lookup.clone();
        match &mut lookup {
            LookupPlan::Table(t) => t.first_local = local(t.first_local),
            LookupPlan::Dcf(d) => d.first_local = local(d.first_local),
            LookupPlan::None => {}
        }
        let _ = l;
        let mut budget = self.budget;
        let program = Program {
            spec: self.orig.clone(),
            norm: self.spec.clone(),
            cmp: self.cmp,
            lookup_backend: self.backend,
            full_width,
            families,
            leaves,
            muxes,
            pvars: b.pvars,
            pmonos: b.pmonos,
            words: b.words,
            exchanges,
            opened: self.opened.iter().map(|&j| local(j)).collect(),
            beaver_round: self.beavers.iter().flat_map(|(_, _, r)| [*r, *r]).collect(),
            lookup,
            outputs: kinds,
            locals: nleaves + self.extra_locals.len() as u32,
        };
        budget.check_program(&program)?;
        Ok(program)
    }
}

/// Whether the spec's `Φ` reads constant `j` only as an [`Node::Interp`]'s value.
fn interp_value_only(spec: &OperatorSpec, j: usize) -> bool {
    let Some(phi) = &spec.phi else { return false };
    let mut as_value = false;
    for node in &phi.nodes {
        match *node {
            Node::Aux { index } if index == j => return false,
            Node::Interp { slope, .. } if slope == j => return false,
            Node::Interp { value, .. } if value == j => as_value = true,
            _ => {}
        }
    }
    as_value
}

/// Lookup locals are numbered from here during lowering (renumbered after the leaves).
const LOCAL_BASE: u32 = 1 << 24;

/// Most terms a product of dealer-known values may expand to; a larger one takes a Beaver
/// round (a round more, two ring elements opened, and a bounded number of words).
pub(super) const SYMBOLIC_PRODUCT_TERMS: u64 = 1 << 10;

/// Highest power of one variable a symbolic product may make (exponents are small integers).
pub(super) const MAX_EXPONENT: u32 = 16;
