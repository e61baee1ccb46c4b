//! The program: the public, mask-independent description of a compiled gate (the
//! backends, the comparison's families and leaves, the exchanges' linear forms, the dealer
//! words and the lookup), and what it costs.

use crate::predicate::{Family, FullWidth, LinBit};
use crate::spec::{Kind, OperatorSpec};
use crate::sym::{Mono, PVar, SVar};

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
    /// How large a program compilation may build before it refuses the spec.
    pub limits: Limits,
}

/// Bounds on one compilation: past one, [`crate::compile`] stops with
/// [`crate::SpecError::Limit`], naming the part of the spec it was lowering and the
/// estimate. The defaults refuse a spec within about a second and admit every library
/// operator with room to spare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Symbolic terms one choice of backends may build: terms of the polynomials products
    /// and sums make, step-function bits, and cells a Boolean value is evaluated on.
    pub terms: u64,
    /// Dealer words of the program.
    pub words: u64,
    /// Key bytes of one party per element.
    pub key_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { terms: DEFAULT_TERMS, words: 1 << 16, key_bytes: 1 << 20 }
    }
}

/// The default of [`Limits::terms`].
const DEFAULT_TERMS: u64 = 1 << 20;

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

/// Leaf `leaf` takes leaf `alt`'s share on the elements where `x̂ mod 2^bits ≥ beta`
/// (a public bit): `alt` is a plain leaf, `leaf` one of its own (never shared by content).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafMux {
    /// The leaf that is replaced.
    pub leaf: u32,
    /// The leaf it reads instead.
    pub alt: u32,
    /// Low bits of `x̂` the selector reads.
    pub bits: u32,
    /// The selector's threshold.
    pub beta: u64,
}

impl LeafMux {
    /// Whether the element with masked input `xh` reads `alt`.
    pub fn selects(&self, xh: u64) -> bool {
        xh & fss::ring::mask(self.bits) >= self.beta
    }
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
    /// Leaves that read another leaf where a public bit of `x̂` says so, applied in order
    /// after the comparison (a half row's shifted reads, `Lower::half_row`).
    pub muxes: Vec<LeafMux>,
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
