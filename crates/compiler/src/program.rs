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

use std::collections::HashMap;

use fss::ring::mask;

use crate::predicate::{Families, Family, FullWidth, LinBit, SplitBit, renumber, step_bits, step_bits_high};
use crate::spec::{Atom, BoolExpr, Kind, Node, OperatorSpec, Output, SpecError, word};
use crate::sym::{Mono, PVar, SVar, Sym, valuation};

/// How the packed comparison is keyed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CmpBackend {
    /// One early-terminated 1-bit DPF per family and element, read at every query point by
    /// prefix parity (docs/design/fss-building-blocks.md §4, §6.1).
    #[default]
    OneKey,
    /// One key per query at the shifted threshold `r + β`, plus XOR-shared carries
    /// (the paper's artifact; Lemma 4.3).
    PerThreshold,
}

/// How the interval lookup is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LookupBackend {
    /// Every bit of every varying coefficient read out of the thermometer code, opened
    /// masked and converted to arithmetic (docs/design/compiled-gates.md §2.2).
    StepBits,
    /// The interval's class index read out of the thermometer code, opened masked, and
    /// looked up in a public table through an arithmetic DPF keyed by the mask (§2.4).
    IndexLut,
    /// Rows of `2^shift` covering the whole domain: an `shift`-bit carry key and an
    /// arithmetic DPF over `(carry mask, row)` (§4.5).
    ReducedView {
        /// Row width `s` (log2).
        shift: u32,
    },
    /// The paper's lookup: one DCF per interval boundary with the shifted coefficients as
    /// hidden vector payloads, summed as suffix sums (docs/design/paper.md §3.4).
    Dcf,
}

/// Which backends to compile for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Comparison keying.
    pub cmp: CmpBackend,
    /// Lookup backend; `None` picks the smallest key.
    pub lookup: Option<LookupBackend>,
    /// Split full-width comparisons around a shift: `None` picks the smaller key.
    pub split: Option<bool>,
    /// With a split: cut a step function's boundaries into runs of at most `2^w` high
    /// positions, each split at its own alignment ([`FullWidth::Grouped`]). A few hundred key
    /// bytes more per element, for a grid whose cells widen octave by octave (`1/√x`) read
    /// from a few windows instead of a trie path per cell.
    pub grouped: Option<u32>,
}

/// What a party sums into a linear form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// The constant 1 (party 0 only).
    One,
    /// Its share of dealer word `j`.
    Word(u32),
    /// Its local share `j` (comparison bit or lookup output).
    Local(u32),
}

/// `coef · public monomial · source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FTerm {
    /// Constant coefficient.
    pub coef: u64,
    /// Index of the public monomial, or `None` for 1.
    pub pmono: Option<u32>,
    /// What it multiplies.
    pub src: Src,
}

/// A linear combination over `Z_{2^bits}` each party evaluates on its shares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Form {
    /// Ring width (1: XOR shares).
    pub bits: u32,
    /// The terms.
    pub terms: Vec<FTerm>,
}

/// A dealer word: `Σ coef·monomial` of dealer secrets, plus an output mask, shared mod
/// `2^width`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WordDef {
    /// Ring of the value.
    pub bits: u32,
    /// Bits stored (uses only need the word modulo `2^width`).
    pub width: u32,
    /// The value.
    pub value: Vec<(u64, Mono<SVar>)>,
    /// The output whose mask is added.
    pub out_mask: Option<usize>,
}

/// One simultaneous exchange: the forms both parties open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    /// Masked bits opened (exchange 1 only): opened bit `j` is `forms[j]`.
    pub bits: Vec<Form>,
    /// Beaver differences opened here: `(index of the difference, form)`.
    pub beaver: Vec<(u32, Form)>,
    /// Outputs revealed (the last exchange only).
    pub outputs: Vec<Form>,
}

impl Exchange {
    /// Its forms in the order they are opened: masked bits, Beaver differences, outputs.
    pub fn forms(&self) -> impl Iterator<Item = &Form> {
        self.bits.iter().chain(self.beaver.iter().map(|(_, f)| f)).chain(self.outputs.iter())
    }

    /// [`Exchange::forms`], mutably.
    pub fn forms_mut(&mut self) -> impl Iterator<Item = &mut Form> {
        self.bits.iter_mut().chain(self.beaver.iter_mut().map(|(_, f)| f)).chain(self.outputs.iter_mut())
    }
}

/// A lookup table read through an arithmetic DPF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TablePlan {
    /// DPF domain bits.
    pub domain_bits: u32,
    /// Rows × words: `table[row · words + k]`.
    pub table: Vec<u64>,
    /// Words per row.
    pub words: usize,
    /// First local index of the outputs.
    pub first_local: u32,
    /// IndexLut: the opened bits forming the index (LSB first). ReducedView: the opened
    /// carry bit.
    pub opened: Vec<u32>,
    /// ReducedView row shift (0 for IndexLut).
    pub shift: u32,
}

/// The DCF interval lookup of the paper.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DcfPlan {
    /// Payload words per interval: per polynomial `degree + 1` coefficients, then the
    /// constants, then the constant Boolean formulas (as 0/1).
    pub words: usize,
    /// Polynomial degree (uniform).
    pub degree: usize,
    /// First local index of the payload.
    pub first_local: u32,
}

/// The lookup part of a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupPlan {
    /// Nothing beyond the comparison (step bits, or no pieces to look up).
    None,
    /// An arithmetic-DPF table.
    Table(TablePlan),
    /// DCF suffix sums.
    Dcf(DcfPlan),
}

/// A compiled operator: everything public about its gates.
#[derive(Clone, PartialEq, Eq)]
pub struct Program {
    /// The spec: [`OperatorSpec::eval`] is the gate's reference.
    pub spec: OperatorSpec,
    /// The spec with polynomials in the unsigned lift `X_u` (a sign boundary added where a
    /// signed spec needs it): what the dealer and the lowering use.
    pub norm: OperatorSpec,
    /// The options it was compiled with, with `Auto` choices resolved.
    pub cmp: CmpBackend,
    /// The lookup backend chosen.
    pub lookup_backend: LookupBackend,
    /// Whether full-width comparisons are split.
    pub full_width: FullWidth,
    /// Comparison families.
    pub families: Vec<Family>,
    /// XOR-linear bits computed from the comparison (locals `0..leaves.len()`).
    pub leaves: Vec<LinBit>,
    /// Public variables (per element) and monomials over them (indices into `pvars`).
    pub pvars: Vec<PVar>,
    /// Public monomials.
    pub pmonos: Vec<Vec<(u32, u8)>>,
    /// Dealer words.
    pub words: Vec<WordDef>,
    /// Exchanges in order; the last reveals the outputs.
    pub exchanges: Vec<Exchange>,
    /// Opened bit `j` is leaf `opened[j]` (its mask is `z_j`).
    pub opened: Vec<u32>,
    /// Beaver difference `j` is opened in exchange `beaver_round[j]` (from 1).
    pub beaver_round: Vec<u32>,
    /// The lookup.
    pub lookup: LookupPlan,
    /// Output kinds.
    pub outputs: Vec<Kind>,
    /// Total locals (leaves, then lookup outputs).
    pub locals: u32,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("spec", &self.spec.name)
            .field("fingerprint", &format_args!("{:016x}", self.fingerprint()))
            .field("cmp", &self.cmp)
            .field("lookup", &self.lookup_backend)
            .field("full_width", &self.full_width)
            .finish_non_exhaustive()
    }
}

/// The public cost of one element of a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cost {
    /// Key bits of one party.
    pub key_bits: u64,
    /// Bits one party sends (it receives as many).
    pub sent_bits: u64,
    /// Exchanges.
    pub rounds: u32,
    /// Comparison queries.
    pub queries: u64,
}

impl Program {
    /// FNV-1a of the normalised spec's JSON and the backend choices: two programs with equal
    /// fingerprints read each other's keys.
    pub fn fingerprint(&self) -> u64 {
        let text = format!(
            "{}|{:?}|{:?}|{:?}",
            serde_json::to_string(&self.norm).expect("serialises"),
            self.cmp,
            self.lookup_backend,
            self.full_width
        );
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
    }

    /// Input width.
    pub fn in_bits(&self) -> u32 {
        self.spec.in_bits
    }

    /// What a gate adds to `x̂` before reading it: `2^{n−2}` for a slack spec
    /// ([`OperatorSpec::slack`]), else 0.
    pub fn input_offset(&self) -> u64 {
        if self.spec.slack { 1u64 << (self.spec.in_bits - 2) } else { 0 }
    }

    /// Output ring width.
    pub fn out_bits(&self) -> u32 {
        self.spec.out_bits
    }

    /// Width of output `o`.
    pub fn output_width(&self, o: usize) -> u32 {
        match self.outputs[o] {
            Kind::Arith => self.spec.out_bits,
            Kind::Bool => 1,
        }
    }

    /// Key bits of one family key per element.
    pub fn family_key_bits(&self, f: &Family) -> u64 {
        let params = fss::bitdpf::BitDpfParams::new(f.bits).expect("valid width");
        match self.cmp {
            CmpBackend::OneKey => params.key_bits(),
            CmpBackend::PerThreshold => f.points.len() as u64 * (params.key_bits() + 1),
        }
    }

    /// Intervals of the DCF lookup in `x̂`-space: `m + 1` (one interval wraps), at most `2^n`.
    pub fn hat_intervals(&self) -> usize {
        let (m, n) = (self.norm.pieces.len(), self.in_bits());
        if n < 64 && m as u64 >= 1u64 << n { m } else { m + 1 }
    }

    /// Key bits of the lookup per element.
    pub fn lookup_key_bits(&self) -> u64 {
        match &self.lookup {
            LookupPlan::None => 0,
            LookupPlan::Table(t) => table_params(t.domain_bits, self.out_bits()).key_bits(),
            LookupPlan::Dcf(d) => {
                let p = fss::dcf::DcfParams::new(self.in_bits(), self.out_bits(), d.words as u32)
                    .expect("valid DCF shape");
                (self.hat_intervals() as u64 - 1) * p.key_bits() + d.words as u64 * self.out_bits() as u64
            }
        }
    }

    /// Per-element cost.
    pub fn cost(&self) -> Cost {
        let cmp: u64 = self.families.iter().map(|f| self.family_key_bits(f)).sum();
        let words: u64 = self.words.iter().map(|w| w.width as u64).sum();
        let sent = self.exchanges.iter().flat_map(Exchange::forms).map(|f| f.bits as u64).sum();
        Cost {
            key_bits: cmp + words + self.lookup_key_bits(),
            sent_bits: sent,
            rounds: self.exchanges.len() as u32,
            queries: self.families.iter().map(|f| f.points.len() as u64).sum(),
        }
    }
}

/// The arithmetic DPF shape of a table lookup.
pub fn table_params(domain_bits: u32, out_bits: u32) -> fss::adpf::AdpfParams {
    let et = domain_bits.min(TABLE_ET_LEVELS);
    fss::adpf::AdpfParams::new(domain_bits, out_bits, 1, et).expect("valid table shape")
}

/// Early-termination levels of lookup-table DPFs (2 levels: 4 slots per leaf).
pub const TABLE_ET_LEVELS: u32 = 2;

/// Largest lookup-table domain.
pub const MAX_TABLE_BITS: u32 = 16;

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
    for &split in &splits {
        for &lookup in &lookups {
            let mode = match (split, shift_amount(&spec).or_else(|| aligned_shift(&spec))) {
                (true, Some(f)) if let Some(w) = options.grouped => FullWidth::Grouped(f, w),
                (true, Some(f)) => FullWidth::Split(f),
                (true, None) if options.split == Some(true) => {
                    return Err(SpecError::Phi { node: 0, msg: "a split needs exactly one shift".into() });
                }
                (true, None) => continue,
                (false, _) => FullWidth::Whole,
            };
            match Lower::new(orig, &spec, options.cmp, lookup, mode).and_then(Lower::run) {
                Ok(p) => {
                    let c = p.cost();
                    let score = c.key_bits;
                    if best.as_ref().is_none_or(|(_, s)| score < *s) {
                        best = Some((p, score));
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
    }
    best.map(|(p, _)| p).ok_or_else(|| first_err.expect("some candidate was tried"))
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

/// The row shift of a reduced view: all boundaries are multiples of `2^s` and the
/// `2^{n−s}` rows fit a table.
pub fn reduced_view_shift(spec: &OperatorSpec) -> Option<u32> {
    let n = spec.in_bits;
    let s = spec.boundaries.iter().skip(1).map(|b| b.trailing_zeros()).min().unwrap_or(n).min(n);
    (n - s <= MAX_TABLE_BITS && n > s && spec.bool_count() == 0 && spec.phi.is_none()).then_some(s)
}

/// For a spec without shifts whose boundaries are all multiples of `2^s` (`s ≥ 1`): `s`.
/// Its full-width comparisons can then be split into a key on the high `n − s` bits and
/// an `s`-bit carry key, like a shift's (docs/design/compiled-gates.md §4.1): a uniform table of rows
/// reads a few hundred high positions instead of a window over every low position.
fn aligned_shift(spec: &OperatorSpec) -> Option<u32> {
    let n = spec.in_bits;
    let s = spec.boundaries.iter().skip(1).map(|b| b.trailing_zeros()).min()?.min(n);
    (s >= 1 && s < n).then_some(s)
}

/// Cut ascending boundaries (the first is 0) of an `n`-bit input into runs of consecutive
/// boundaries `(g, range)`: greedily from the first, a run grows while its boundaries, all
/// multiples of `2^g` (`g < n` the smallest alignment among them), span at most
/// `max_window` multiples of `2^g`.
pub fn alignment_runs(n: u32, starts: &[u64], max_window: u64) -> Vec<(u32, std::ops::Range<usize>)> {
    let align = |b: u64| b.trailing_zeros().min(n - 1);
    let mut runs = vec![];
    let mut i = 0;
    while i < starts.len() {
        let mut g = align(starts[i]);
        let mut j = i + 1;
        while j < starts.len() {
            let h = g.min(align(starts[j]));
            if (starts[j] - starts[i]) >> h >= max_window {
                break;
            }
            g = h;
            j += 1;
        }
        runs.push((g, i..j));
        i = j;
    }
    runs
}

/// The shift of the spec's `Shr` nodes, if they all use one amount.
fn shift_amount(spec: &OperatorSpec) -> Option<u32> {
    let shifts: Vec<u32> = spec
        .phi
        .iter()
        .flat_map(|p| p.nodes.iter())
        .filter_map(|n| match n {
            Node::Shr { bits } => Some(*bits),
            _ => None,
        })
        .collect();
    match shifts.first() {
        Some(&f) if shifts.iter().all(|&g| g == f) => Some(f),
        _ => None,
    }
}

/// Coefficients of `P(X + d)` from those of `P(X)`, mod `2^bits`.
pub fn shift_poly(c: &[u64], d: u64, bits: u32) -> Vec<u64> {
    let m = mask(bits);
    let mut out = vec![0u64; c.len()];
    for (j, &cj) in c.iter().enumerate() {
        // cj·(X + d)^j = Σ_k cj·C(j,k)·d^{j−k}·X^k
        let mut binom = 1u64;
        for k in (0..=j).rev() {
            // k from j down: C(j, k) · d^{j−k}
            let pow = d.wrapping_pow((j - k) as u32);
            out[k] = out[k].wrapping_add(cj.wrapping_mul(binom).wrapping_mul(pow)) & m;
            binom = binom * k as u64 / (j - k + 1) as u64;
        }
    }
    out
}

/// Make the pieces' polynomials functions of the *unsigned* lift `X_u`: for a signed spec
/// whose outputs are wider than its input, the sign boundary `2^{n−1}` becomes an interval
/// boundary and the negative pieces are re-expanded at `X_u − 2^n`.
fn normalise(spec: &OperatorSpec) -> OperatorSpec {
    if spec.slack {
        return rotate_slack(spec);
    }
    let mut s = spec.clone();
    let (n, l) = (s.in_bits, s.out_bits);
    if !(s.signed && l > n && s.degree() > 0) {
        return s;
    }
    let h = 1u64 << (n - 1);
    let i = s.piece_of(h);
    if s.boundaries[i] != h {
        s.boundaries.insert(i + 1, h);
        let p = s.pieces[i].clone();
        s.pieces.insert(i + 1, p);
    }
    let shift = (1u64 << n).wrapping_neg();
    for (b, p) in s.boundaries.iter().zip(s.pieces.iter_mut()) {
        if *b >= h {
            for c in &mut p.polys {
                let w: Vec<u64> = c.iter().map(|&v| word(v, l)).collect();
                *c = shift_poly(&w, shift, l).into_iter().map(|v| v as i128).collect();
            }
        }
    }
    s
}

/// A slack spec ([`OperatorSpec::slack`]) read at `u = x + 2^{n−2} < 2^{n−1}`: unsigned,
/// with polynomials in `X_u = u` (`X = u − 2^{n−2}`), its intervals rotated by `2^{n−2}`, and
/// `[2^{n−1}, 2^n)`, which no input reaches, added to the interval below it (no boundary
/// there). It keeps `slack`, now meaning `u < 2^{n−1}`; the gate adds
/// [`Program::input_offset`] to `x̂`.
fn rotate_slack(spec: &OperatorSpec) -> OperatorSpec {
    let (n, l) = (spec.in_bits, spec.out_bits);
    let q = 1u64 << (n - 2);
    // `x = −q` as an unsigned `n`-bit value: where `u = 0` is.
    let neg_q = (1u64 << n) - q;
    let shift = q.wrapping_neg() & mask(l);
    let moved = |i: usize| {
        let mut p = spec.pieces[i].clone();
        for c in &mut p.polys {
            let w: Vec<u64> = c.iter().map(|&v| word(v, l)).collect();
            *c = shift_poly(&w, shift, l).into_iter().map(|v| v as i128).collect();
        }
        p
    };
    // `u` from 0 up: `x` from `−q` (unsigned `2^n − q`) to the top of the ring, then from 0
    // up to `q − 1`.
    let first = spec.piece_of(neg_q);
    let (mut boundaries, mut pieces) = (vec![0u64], vec![moved(first)]);
    for (i, &b) in spec.boundaries.iter().enumerate() {
        if b > neg_q {
            boundaries.push(b - neg_q);
            pieces.push(moved(i));
        }
    }
    for (i, &b) in spec.boundaries.iter().enumerate() {
        if b < q {
            boundaries.push(b + q);
            pieces.push(moved(i));
        }
    }
    OperatorSpec { signed: false, boundaries, pieces, ..spec.clone() }
}

/// A Boolean value during lowering.
#[derive(Clone, Debug)]
enum BExpr {
    Leaf(LinBit),
    /// A local XOR share that is not a comparison bit (a lookup output's low bit).
    Loc(u32),
    And(Vec<BExpr>),
    Xor(Vec<BExpr>),
    Not(Box<BExpr>),
}

impl BExpr {
    fn constant(b: bool) -> BExpr {
        BExpr::Leaf(LinBit::constant(b))
    }

    fn xor(a: BExpr, b: BExpr) -> BExpr {
        match (a, b) {
            (BExpr::Leaf(x), BExpr::Leaf(y)) => BExpr::Leaf(x.xor(&y)),
            (a, b) => BExpr::Xor(vec![a, b]),
        }
    }

    fn not(a: BExpr) -> BExpr {
        match a {
            BExpr::Leaf(x) => BExpr::Leaf(x.not()),
            a => BExpr::Not(Box::new(a)),
        }
    }

    fn and(a: BExpr, b: BExpr) -> BExpr {
        match (a, b) {
            (BExpr::Leaf(x), _) if x.as_constant() == Some(false) => BExpr::constant(false),
            (_, BExpr::Leaf(y)) if y.as_constant() == Some(false) => BExpr::constant(false),
            (BExpr::Leaf(x), b) if x.as_constant() == Some(true) => b,
            (a, BExpr::Leaf(y)) if y.as_constant() == Some(true) => a,
            (a, b) => BExpr::And(vec![a, b]),
        }
    }

    fn or(a: BExpr, b: BExpr) -> BExpr {
        // a ∨ b = ¬(¬a ∧ ¬b)
        BExpr::not(BExpr::and(BExpr::not(a), BExpr::not(b)))
    }
}

/// The lowering of one spec with fixed backend choices.
struct Lower<'a> {
    orig: &'a OperatorSpec,
    spec: &'a OperatorSpec,
    cmp: CmpBackend,
    backend: LookupBackend,
    fams: Families,
    /// Leaves by content, and their order.
    leaf_ids: HashMap<LinBit, u32>,
    leaves: Vec<LinBit>,
    /// Opened bits: leaf → bit index.
    open_ids: HashMap<u32, u32>,
    opened: Vec<u32>,
    /// Locals beyond the leaves: (availability exchange).
    extra_locals: Vec<u32>,
    /// Beaver products: (a − U, b − V, exchange).
    beavers: Vec<(Sym, Sym, u32)>,
    lookup: LookupPlan,
    /// Lowered polynomial outputs, constants and formulas of the active piece.
    polys: Vec<Sym>,
    consts: Vec<Sym>,
    bools: Vec<BExpr>,
}

impl<'a> Lower<'a> {
    fn new(
        orig: &'a OperatorSpec,
        spec: &'a OperatorSpec,
        cmp: CmpBackend,
        backend: LookupBackend,
        mode: FullWidth,
    ) -> Result<Lower<'a>, SpecError> {
        Ok(Lower {
            orig,
            spec,
            cmp,
            backend,
            fams: Families::new(spec.in_bits, mode),
            leaf_ids: HashMap::new(),
            leaves: vec![],
            open_ids: HashMap::new(),
            opened: vec![],
            extra_locals: vec![],
            beavers: vec![],
            lookup: LookupPlan::None,
            polys: vec![],
            consts: vec![],
            bools: vec![],
        })
    }

    fn l(&self) -> u32 {
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
    fn arith(&mut self, e: &BExpr) -> Sym {
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
        }
    }

    /// The bit as XOR shares (`bits = 1`): linear leaves stay local, factors of products are
    /// opened.
    fn gf2(&mut self, e: &BExpr, under: bool) -> Sym {
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
            BExpr::Xor(v) => v.iter().fold(Sym::zero(1), |acc, a| acc.add(&self.gf2(a, under))),
            BExpr::And(v) => {
                let mut acc = Sym::constant(1, 1);
                for a in v {
                    acc = acc.mul(&self.gf2(a, true)).expect("opened bits are dealer-known");
                }
                acc
            }
        }
    }

    fn atom(&mut self, a: Atom) -> BExpr {
        let n = self.n();
        let full = |n: u32| if n == 64 { u64::MAX } else { 1u64 << n };
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
                    if hi == 0 { self.fams.below(n, full(n)) } else { self.fams.below(n, hi as u64) };
                let lo_bit = self.fams.below(n, lo);
                if hi == 0 || (lo as u128) < hi { hi_bit.xor(&lo_bit) } else { hi_bit.xor(&lo_bit.not()) }
            }
        };
        self.sb(b)
    }

    fn formula(&mut self, e: &BoolExpr) -> BExpr {
        match e {
            BoolExpr::Const(b) => BExpr::constant(*b),
            BoolExpr::Atom(i) => self.atom(self.spec.atoms[*i]),
            BoolExpr::Not(a) => {
                let a = self.formula(a);
                BExpr::not(a)
            }
            BoolExpr::Xor(v) => {
                let mut acc = BExpr::constant(false);
                for a in v {
                    let a = self.formula(a);
                    acc = BExpr::xor(acc, a);
                }
                acc
            }
            BoolExpr::And(v) => {
                let mut acc = BExpr::constant(true);
                for a in v {
                    let a = self.formula(a);
                    acc = BExpr::and(acc, a);
                }
                acc
            }
            BoolExpr::Or(v) => {
                let mut acc = BExpr::constant(false);
                for a in v {
                    let a = self.formula(a);
                    acc = BExpr::or(acc, a);
                }
                acc
            }
        }
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
    fn lift(&mut self) -> Sym {
        let (n, l) = (self.n(), self.l());
        let x = self.lift_unsigned();
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
    fn prefix_times_lift(&mut self, vals: &[u64]) -> Option<Sym> {
        let (n, l) = (self.n(), self.l());
        // (A slack spec's lift has no comparison in it.)
        if l <= n || self.fams.mode().shift().is_none() || self.spec.slack {
            return None;
        }
        let k = vals[0];
        let i = vals.iter().position(|&v| v != k)?;
        if k == 0 || vals[i..].iter().any(|&v| v != 0) {
            return None;
        }
        let b = self.spec.boundaries[i];
        let g: Vec<u64> = vals.iter().map(|&v| (v != 0) as u64).collect();
        let g = self.step_sym(&g);
        let xr = Sym::public(l, PVar::XHat).sub(&Sym::secret(l, SVar::R));
        let gw = self.fams.wrap(b);
        let gw = self.sb(gw);
        let gw = Sym::public(l, PVar::XHatBelow(b)).mul(&self.arith(&gw)).expect("public");
        Some(g.mul(&xr).expect("dealer-known").scale(k).add(&gw.scale(k.wrapping_mul(1u64 << n))))
    }

    /// `⌊X / 2^f⌋` by the fused identity (docs/design/compiled-gates.md §4.1, docs/design/paper.md §3.6).
    fn shr(&mut self, f: u32) -> Sym {
        let (n, l) = (self.n(), self.l());
        let m = n - f;
        let offset = if self.spec.signed { 1u64 << (n - 1) } else { 0 };
        let c = self.fams.carry(f);
        let c = self.arith(&BExpr::Leaf(c));
        // The wrap term is a multiple of 2^m: it vanishes when the output ring is that narrow.
        let w = if m >= l {
            Sym::zero(l)
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
        y
    }

    /// `a · b`, through a Beaver round when a lookup share is involved.
    fn mul(&mut self, a: &Sym, b: &Sym) -> Sym {
        if let Ok(p) = a.mul(b) {
            return p;
        }
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

    /// Lower the pieces through the chosen lookup.
    fn pieces(&mut self) -> Result<(), SpecError> {
        let s = self.spec;
        let (l, np, nc) = (self.l(), s.poly_count(), s.const_count());
        match self.backend {
            LookupBackend::StepBits => {
                let mut x: Option<Sym> = None;
                for j in 0..np {
                    let deg = s.pieces.iter().map(|p| p.polys[j].len()).max().unwrap_or(1);
                    let mut p = Sym::zero(l);
                    let mut xk = Sym::constant(l, 1);
                    for k in 0..deg {
                        let vals: Vec<u64> = s
                            .pieces
                            .iter()
                            .map(|p| word(p.polys[j].get(k).copied().unwrap_or(0), l))
                            .collect();
                        if k == 1
                            && deg == 2
                            && let Some(t) = self.prefix_times_lift(&vals)
                        {
                            p = p.add(&t);
                            continue;
                        }
                        let c = self.step_sym(&vals);
                        p = p.add(&c.mul(&xk).expect("dealer-known"));
                        if k + 1 < deg {
                            let x = x.get_or_insert_with(|| self.lift_unsigned()).clone();
                            xk = xk.mul(&x).expect("dealer-known");
                        }
                    }
                    self.polys.push(p);
                }
                for j in 0..nc {
                    let vals: Vec<u64> = s.pieces.iter().map(|p| word(p.consts[j], l)).collect();
                    let c = self.step_sym(&vals);
                    self.consts.push(c);
                }
                self.piece_bools(true)?;
            }
            LookupBackend::IndexLut => {
                if s.degree() > 0 {
                    return Err(self.unsupported("needs degree-0 pieces"));
                }
                // Classes of identical rows.
                let rows: Vec<Vec<u64>> = s
                    .pieces
                    .iter()
                    .map(|p| {
                        p.polys
                            .iter()
                            .map(|c| word(c[0], l))
                            .chain(p.consts.iter().map(|&c| word(c, l)))
                            .collect()
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
                    return Err(
                        self.unsupported(format!("{} classes need a {bits}-bit table", classes.len()))
                    );
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
            }
            LookupBackend::ReducedView { shift } => {
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
                let mut table = vec![0u64; (1usize << k) * words];
                for v in 0..1u64 << k {
                    let p = &s.pieces[s.piece_of(v << shift)];
                    let row: Vec<u64> = p
                        .polys
                        .iter()
                        .map(|c| word(c[0], l))
                        .chain(p.consts.iter().map(|&c| word(c, l)))
                        .collect();
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
            }
            LookupBackend::Dcf => {
                let constant_bools =
                    s.pieces.iter().all(|p| p.bools.iter().all(|e| matches!(e, BoolExpr::Const(_))));
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
            }
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

    /// Per-piece formulas as `⨁_F 1[x ∈ pieces with F] ∧ F`.
    fn piece_bools(&mut self, thermometer: bool) -> Result<(), SpecError> {
        let s = self.spec;
        if !thermometer && s.bool_count() > 0 {
            return Err(self.unsupported("formulas need the comparison"));
        }
        for j in 0..s.bool_count() {
            // Constant formulas: one step function.
            let consts: Vec<u64> = s
                .pieces
                .iter()
                .map(|p| match p.bools[j] {
                    BoolExpr::Const(b) => b as u64,
                    _ => 0,
                })
                .collect();
            let mut out = self.step_bool(&consts);
            let mut formulas: Vec<&BoolExpr> =
                s.pieces.iter().map(|p| &p.bools[j]).filter(|e| !matches!(e, BoolExpr::Const(_))).collect();
            formulas.dedup();
            let mut seen: Vec<&BoolExpr> = vec![];
            for f in formulas {
                if seen.contains(&f) {
                    continue;
                }
                seen.push(f);
                let ind: Vec<u64> = s.pieces.iter().map(|p| (&p.bools[j] == f) as u64).collect();
                let ind = self.step_bool(&ind);
                let v = self.formula(f);
                out = BExpr::xor(out, BExpr::and(ind, v));
            }
            self.bools.push(out);
        }
        Ok(())
    }

    fn step_bool(&mut self, vals: &[u64]) -> BExpr {
        if vals.iter().all(|&v| v == vals[0]) {
            return BExpr::constant(vals[0] == 1);
        }
        let b = step_bits(&mut self.fams, &self.spec.boundaries, vals, 1).remove(0);
        self.sb(b)
    }

    /// A step function of the interval as a ring element: a base plus opened bits.
    fn step_sym(&mut self, vals: &[u64]) -> Sym {
        let l = self.l();
        if vals.iter().all(|&v| v == vals[0]) {
            return Sym::constant(l, vals[0]);
        }
        let aligned = |f: u32| self.spec.boundaries.iter().all(|&b| b & mask(f) == 0);
        match self.fams.mode() {
            FullWidth::Split(f) if aligned(f) => {
                let starts = self.spec.boundaries.clone();
                return self.step_sym_split(f, &starts, vals);
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
    fn step_sym_grouped(&mut self, window_bits: u32, vals: &[u64]) -> Sym {
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
            out = out.add(&self.step_sym_split(g, &s, &v));
        }
        out
    }

    /// A step function whose starts are all multiples of `2^f`, with the comparisons split
    /// at `f`. With `h₀ = x̂_h − r_h` and the carry `c`, the high part of `x` is `h₀ − c`,
    /// so `V(x) = V(h₀) − c·(V(h₀) − V(h₀ − 1))`: two step functions of `h₀` (no equality
    /// shares) and one product of opened bits. Per value bit this opens one bit and costs
    /// one or two words, where splitting each bit as `a ⊕ q∧c` costs two bits and seven
    /// words.
    fn step_sym_split(&mut self, f: u32, starts: &[u64], vals: &[u64]) -> Sym {
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
        let v0 = self.step_value(starts, vals, Some(f));
        let jump = self.step_value(&ds, &dv, Some(f));
        let c = self.fams.carry(f);
        let c = self.arith(&BExpr::Leaf(c));
        v0.sub(&c.mul(&jump).expect("opened bits"))
    }

    /// A step function with `vals` on the intervals from `starts`: over the whole input, or
    /// (`high = Some(f)`) over the high part `h₀` of a split at `f`.
    fn step_value(&mut self, starts: &[u64], vals: &[u64], high: Option<u32>) -> Sym {
        let l = self.l();
        if vals.iter().all(|&v| v == vals[0]) {
            return Sym::constant(l, vals[0]);
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
        out
    }

    fn run(mut self) -> Result<Program, SpecError> {
        let s = self.spec;
        let l = self.l();
        self.pieces()?;
        #[derive(Clone)]
        enum V {
            A(Sym),
            B(BExpr),
        }
        let mut outs: Vec<V> = vec![];
        if let Some(phi) = &s.phi {
            let mut vals: Vec<V> = Vec::with_capacity(phi.nodes.len());
            let a = |vals: &[V], k: usize| match &vals[k] {
                V::A(x) => x.clone(),
                V::B(_) => unreachable!("validated"),
            };
            let b = |vals: &[V], k: usize| match &vals[k] {
                V::B(x) => x.clone(),
                V::A(_) => unreachable!("validated"),
            };
            for node in &phi.nodes {
                let v = match *node {
                    Node::Const { value } => V::A(Sym::constant(l, word(value, l))),
                    Node::X => V::A(self.lift()),
                    Node::Poly { index } => V::A(self.polys[index].clone()),
                    Node::Aux { index } => V::A(self.consts[index].clone()),
                    Node::Kappa { index } => V::A(Sym::secret(l, SVar::Kappa(index as u32))),
                    Node::Add { a: p, b: q } => V::A(a(&vals, p).add(&a(&vals, q))),
                    Node::Sub { a: p, b: q } => V::A(a(&vals, p).sub(&a(&vals, q))),
                    Node::Scale { a: p, by } => V::A(a(&vals, p).scale(word(by, l))),
                    Node::Mul { a: p, b: q } => V::A(self.mul(&a(&vals, p), &a(&vals, q))),
                    Node::B2a { a: p } => V::A(self.arith(&b(&vals, p))),
                    Node::Select { bit, a: p, b: q } => {
                        let c = self.arith(&b(&vals, bit));
                        let (x, y) = (a(&vals, p), a(&vals, q));
                        let d = self.mul(&c, &x.sub(&y));
                        V::A(y.add(&d))
                    }
                    Node::Shr { bits } => V::A(self.shr(bits)),
                    Node::Bool { index } => V::B(self.bools[index].clone()),
                    Node::Atom { index } => V::B(self.atom(s.atoms[index])),
                    Node::Bit { value } => V::B(BExpr::constant(value)),
                    Node::Not { a: p } => V::B(BExpr::not(b(&vals, p))),
                    Node::Xor { a: p, b: q } => V::B(BExpr::xor(b(&vals, p), b(&vals, q))),
                    Node::And { a: p, b: q } => V::B(BExpr::and(b(&vals, p), b(&vals, q))),
                    Node::Or { a: p, b: q } => V::B(BExpr::or(b(&vals, p), b(&vals, q))),
                };
                vals.push(v);
            }
            for o in &phi.outputs {
                let (Output::Arith(k) | Output::Bool(k)) = *o;
                outs.push(vals[k].clone());
            }
        } else {
            outs.extend(self.polys.iter().cloned().map(V::A));
            outs.extend(self.consts.iter().cloned().map(V::A));
            outs.extend(self.bools.iter().cloned().map(V::B));
        }
        let mut out_syms = vec![];
        let mut kinds = vec![];
        for v in &outs {
            match v {
                V::A(x) => {
                    out_syms.push(x.clone());
                    kinds.push(Kind::Arith);
                }
                V::B(e) => {
                    out_syms.push(self.gf2(e, false));
                    kinds.push(Kind::Bool);
                }
            }
        }
        self.assemble(out_syms, kinds)
    }

    fn assemble(self, out_syms: Vec<Sym>, kinds: Vec<Kind>) -> Result<Program, SpecError> {
        let l = self.l();
        let nleaves = self.leaves.len() as u32;
        // Lookup locals come after the leaves.
        let local = move |j: u32| if j >= LOCAL_BASE { nleaves + (j - LOCAL_BASE) } else { j };
        let fix = |s: &Sym| -> Sym {
            let mut out = Sym::zero(s.bits());
            for (p, m, c) in s.terms() {
                let m: Mono<SVar> = m
                    .iter()
                    .map(|&(v, e)| match v {
                        SVar::Local(j) => (SVar::Local(local(j)), e),
                        other => (other, e),
                    })
                    .collect();
                out = out.add(&term_sym(s.bits(), p.clone(), m, c));
            }
            out
        };
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
        let leaves: Vec<LinBit> = self.leaves.iter().map(|x| renumber(x, &maps)).collect();
        let mut lookup = self.lookup.clone();
        match &mut lookup {
            LookupPlan::Table(t) => t.first_local = local(t.first_local),
            LookupPlan::Dcf(d) => d.first_local = local(d.first_local),
            LookupPlan::None => {}
        }
        let _ = l;
        Ok(Program {
            spec: self.orig.clone(),
            norm: self.spec.clone(),
            cmp: self.cmp,
            lookup_backend: self.backend,
            full_width,
            families,
            leaves,
            pvars: b.pvars,
            pmonos: b.pmonos,
            words: b.words,
            exchanges,
            opened: self.opened.iter().map(|&j| local(j)).collect(),
            beaver_round: self.beavers.iter().flat_map(|(_, _, r)| [*r, *r]).collect(),
            lookup,
            outputs: kinds,
            locals: nleaves + self.extra_locals.len() as u32,
        })
    }
}

/// Lookup locals are numbered from here during lowering (renumbered after the leaves).
const LOCAL_BASE: u32 = 1 << 24;

fn term_sym(bits: u32, p: Mono<PVar>, s: Mono<SVar>, c: u64) -> Sym {
    let mut out = Sym::constant(bits, c);
    for (v, e) in p {
        for _ in 0..e {
            out = out.mul(&Sym::public(bits, v)).expect("public");
        }
    }
    for (v, e) in s {
        for _ in 0..e {
            out = out.mul(&Sym::secret(bits, v)).expect("single local");
        }
    }
    out
}

/// Turns syms into forms, allocating public monomials and dealer words.
struct Builder {
    pvars: Vec<PVar>,
    pvar_ids: HashMap<PVar, u32>,
    pmonos: Vec<Vec<(u32, u8)>>,
    pmono_ids: HashMap<Vec<(u32, u8)>, u32>,
    words: Vec<WordDef>,
    word_ids: HashMap<(u32, Mono<SVar>), u32>,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            pvars: vec![],
            pvar_ids: HashMap::new(),
            pmonos: vec![],
            pmono_ids: HashMap::new(),
            words: vec![],
            word_ids: HashMap::new(),
        }
    }

    fn pmono(&mut self, m: &Mono<PVar>) -> Option<u32> {
        if m.is_empty() {
            return None;
        }
        let ids: Vec<(u32, u8)> = m
            .iter()
            .map(|&(v, e)| {
                let n = self.pvars.len() as u32;
                let id = *self.pvar_ids.entry(v).or_insert(n);
                if id == n {
                    self.pvars.push(v);
                }
                (id, e)
            })
            .collect();
        let n = self.pmonos.len() as u32;
        let id = *self.pmono_ids.entry(ids.clone()).or_insert(n);
        if id == n {
            self.pmonos.push(ids);
        }
        Some(id)
    }

    /// In every arithmetic form, the dealer terms that share a public monomial become one
    /// word: `pm·Σ_t c_t·w_t = 2^v·pm·W` with `W = Σ_t (c_t / 2^v)·w_t` (of `bits − v`
    /// bits, `v` the least valuation of the `c_t`). The dealer knows every `w_t`, so it deals
    /// `W` directly: a party then does one multiply-add per monomial instead of one per
    /// term (GeLU's output form: 163 → 72 terms). Words no form reads any more leave the
    /// key, and every word's width is recomputed from the uses left.
    fn combine_by_pmono(&mut self, exchanges: &mut [Exchange]) {
        for f in exchanges.iter_mut().flat_map(Exchange::forms_mut) {
            if f.bits == 1 {
                continue;
            }
            let bits = f.bits;
            let mut groups: Vec<(u32, Vec<usize>)> = vec![];
            for (ti, t) in f.terms.iter().enumerate() {
                let (Some(pm), Src::Word(id)) = (t.pmono, t.src) else { continue };
                if self.words[id as usize].out_mask.is_some() {
                    continue;
                }
                match groups.iter_mut().find(|(p, _)| *p == pm) {
                    Some((_, g)) => g.push(ti),
                    None => groups.push((pm, vec![ti])),
                }
            }
            let mut drop = vec![false; f.terms.len()];
            let mut added = vec![];
            for (pm, g) in groups.into_iter().filter(|(_, g)| g.len() > 1) {
                let v = g.iter().map(|&ti| valuation(f.terms[ti].coef, bits)).min().unwrap_or(bits);
                let wm = mask(bits - v);
                let mut value: Vec<(u64, Mono<SVar>)> = vec![];
                for &ti in &g {
                    drop[ti] = true;
                    let Src::Word(id) = f.terms[ti].src else { unreachable!("grouped word terms") };
                    let c = (f.terms[ti].coef & mask(bits)) >> v;
                    for (wc, mono) in &self.words[id as usize].value {
                        let add = c.wrapping_mul(*wc);
                        match value.iter_mut().find(|(_, m)| m == mono) {
                            Some((x, _)) => *x = x.wrapping_add(add) & wm,
                            None => value.push((add & wm, mono.clone())),
                        }
                    }
                }
                value.retain(|(c, _)| *c != 0);
                if value.is_empty() {
                    continue;
                }
                let id = self.words.len() as u32;
                self.words.push(WordDef { bits, width: bits - v, value, out_mask: None });
                added.push(FTerm { coef: 1u64 << v, pmono: Some(pm), src: Src::Word(id) });
            }
            if added.is_empty() {
                continue;
            }
            let mut kept: Vec<FTerm> =
                f.terms.iter().zip(&drop).filter(|(_, d)| !**d).map(|(t, _)| *t).collect();
            kept.extend(added);
            f.terms = kept;
        }
        // Widths from the uses left; unread words leave.
        let mut width = vec![0u32; self.words.len()];
        let mut read = vec![false; self.words.len()];
        for e in exchanges.iter() {
            for f in e.forms() {
                for t in &f.terms {
                    if let Src::Word(id) = t.src {
                        read[id as usize] = true;
                        width[id as usize] = width[id as usize].max(f.bits - valuation(t.coef, f.bits));
                    }
                }
            }
        }
        self.keep_words(exchanges, |i, w| {
            if read[i] && w.out_mask.is_none() {
                w.width = width[i];
            }
            read[i]
        });
    }

    /// Keep the words for which `keep(index, word)` holds (it may also adjust the word) and
    /// renumber the forms' references to them.
    fn keep_words(&mut self, exchanges: &mut [Exchange], mut keep: impl FnMut(usize, &mut WordDef) -> bool) {
        let mut new_id = vec![u32::MAX; self.words.len()];
        let mut kept = vec![];
        for (i, mut w) in std::mem::take(&mut self.words).into_iter().enumerate() {
            if keep(i, &mut w) {
                new_id[i] = kept.len() as u32;
                kept.push(w);
            }
        }
        self.words = kept;
        self.word_ids.clear();
        for e in exchanges.iter_mut() {
            for f in e.forms_mut() {
                for t in f.terms.iter_mut() {
                    if let Src::Word(id) = &mut t.src {
                        *id = new_id[*id as usize];
                    }
                }
            }
        }
    }

    /// An opened bit's form adds a one-bit word `z_j`. Where a ring word holds `z_j` too,
    /// the low bit of a party's additive share of it is an XOR share of `z_j` (bit 0 of a
    /// sum mod `2^w` is the XOR of the bits 0): the form reads that word instead and the
    /// one-bit word leaves the key.
    fn share_mask_bits(&mut self, exchanges: &mut [Exchange]) {
        let mut reads = vec![0usize; self.words.len()];
        for e in exchanges.iter() {
            for t in e.forms().flat_map(|f| f.terms.iter()) {
                if let Src::Word(id) = t.src {
                    reads[id as usize] += 1;
                }
            }
        }
        let mut drop = vec![false; self.words.len()];
        for f in exchanges.iter_mut().flat_map(|e| e.bits.iter_mut()) {
            for t in f.terms.iter_mut() {
                let Src::Word(id) = t.src else { continue };
                let w = &self.words[id as usize];
                if w.bits != 1 || w.out_mask.is_some() || t.pmono.is_some() || reads[id as usize] != 1 {
                    continue;
                }
                let [(1, m)] = w.value.as_slice() else { continue };
                let ring = self.words.iter().position(|v| {
                    v.bits > 1
                        && v.width >= 1
                        && v.out_mask.is_none()
                        && matches!(v.value.as_slice(), [(1, vm)] if vm == m)
                });
                if let Some(r) = ring {
                    drop[id as usize] = true;
                    t.src = Src::Word(r as u32);
                }
            }
        }
        if !drop.contains(&true) {
            return;
        }
        self.keep_words(exchanges, |i, _| !drop[i]);
    }

    /// The form of `s`; dealer terms with a constant public factor go into one word per form
    /// (with output `out`'s mask added).
    fn form(&mut self, s: &Sym, out: Option<usize>) -> Form {
        let bits = s.bits();
        let mut terms = vec![];
        let mut folded: Vec<(u64, Mono<SVar>)> = vec![];
        for (p, m, c) in s.terms() {
            let pm = self.pmono(p);
            let src = if m.is_empty() {
                Src::One
            } else if let [(SVar::Local(j), 1)] = m.as_slice() {
                Src::Local(*j)
            } else if pm.is_none() {
                folded.push((c, m.clone()));
                continue;
            } else {
                let n = self.words.len() as u32;
                let id = *self.word_ids.entry((bits, m.clone())).or_insert(n);
                if id == n {
                    self.words.push(WordDef { bits, width: 0, value: vec![(1, m.clone())], out_mask: None });
                }
                let w = &mut self.words[id as usize];
                w.width = w.width.max(bits - valuation(c, bits));
                Src::Word(id)
            };
            terms.push(FTerm { coef: c, pmono: pm, src });
        }
        if !folded.is_empty() || out.is_some() {
            let id = self.words.len() as u32;
            let width = if out.is_some() {
                bits
            } else {
                folded.iter().map(|(c, _)| bits - valuation(*c, bits)).max().unwrap_or(0)
            };
            self.words.push(WordDef { bits, width, value: folded, out_mask: out });
            terms.push(FTerm { coef: 1, pmono: None, src: Src::Word(id) });
        }
        Form { bits, terms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After compilation, an arithmetic form reads at most one dealer word per public
    /// monomial, and every word a form reads exists and is as wide as its uses need.
    #[test]
    fn one_dealer_word_per_public_monomial() {
        let specs = [
            crate::library::gelu_rows(25, 37, 12, crate::library::GeluForm::Erf, 7),
            crate::library::nexp_rows_nonneg(26, 37, 12, 5),
        ];
        for spec in &specs {
            let p = compile(spec, CompileOptions { split: Some(true), ..CompileOptions::default() }).unwrap();
            let mut need = vec![0u32; p.words.len()];
            for e in &p.exchanges {
                for f in e.forms() {
                    let mut seen = std::collections::HashSet::new();
                    for t in &f.terms {
                        let Src::Word(id) = t.src else { continue };
                        let id = id as usize;
                        assert!(id < p.words.len(), "{}: word {id} missing", spec.name);
                        need[id] = need[id].max(f.bits - valuation(t.coef, f.bits));
                        if f.bits > 1 && p.words[id].out_mask.is_none() && t.pmono.is_some() {
                            assert!(seen.insert(t.pmono), "{}: two words on one monomial", spec.name);
                        }
                    }
                }
            }
            for (w, &n) in p.words.iter().zip(&need) {
                assert!(n > 0, "{}: a word no form reads", spec.name);
                assert!(w.width >= n, "{}: word narrower than its uses", spec.name);
            }
        }
    }

    #[test]
    fn shifted_polynomials() {
        // (X + 3)^2 = X^2 + 6X + 9
        assert_eq!(shift_poly(&[0, 0, 1], 3, 16), vec![9, 6, 1]);
        // 2 + 5X at X − 1: 5X − 3
        assert_eq!(shift_poly(&[2, 5], u64::MAX, 8), vec![253, 5]);
    }

    #[test]
    fn alignment_runs_cover_the_boundaries_in_order() {
        // Octaves of 4 cells above 16, uniform cells of 4 below, 10-bit input.
        let mut starts: Vec<u64> = (0..4).map(|j| j * 4).collect();
        for e in 4..9 {
            starts.extend((0..4).map(|j| (1u64 << e) + (j << (e - 2))));
        }
        starts.push(512);
        for w in [2u64, 8, 16, 64, 1 << 12] {
            let runs = alignment_runs(10, &starts, w);
            assert_eq!(runs.first().map(|r| r.1.start), Some(0));
            assert_eq!(runs.last().map(|r| r.1.end), Some(starts.len()));
            for (a, b) in runs.iter().zip(runs.iter().skip(1)) {
                assert_eq!(a.1.end, b.1.start);
            }
            for (g, r) in &runs {
                let s = &starts[r.clone()];
                assert!(s.iter().all(|&b| b % (1 << g) == 0), "w {w}: {s:?} at {g}");
                assert!((s[s.len() - 1] - s[0]) >> g < w, "w {w}: {s:?} at {g}");
                assert!(*g < 10);
            }
        }
        // The whole grid in one run at its finest alignment; one run per octave at w = 8.
        assert_eq!(alignment_runs(10, &starts, 1 << 12), vec![(2, 0..starts.len())]);
        assert_eq!(alignment_runs(10, &starts, 8).len(), 5);
    }
}
