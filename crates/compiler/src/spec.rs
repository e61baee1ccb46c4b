//! Operator specifications: what a compiled gate computes (docs/design/paper.md §2).
//!
//! A spec is data: it reads from and writes to JSON, so that a user can define an operator
//! without recompiling. Its meaning is [`OperatorSpec::eval`], the plaintext fixed-point
//! reference every compiled gate must match bit for bit.
//!
//! * The input `x` is an `in_bits`-bit ring element; `boundaries` cut `[0, 2^in_bits)` into
//!   intervals (unsigned order), one [`Piece`] per interval.
//! * A piece holds polynomials in `X`, the input lifted into the output ring `Z_{2^out_bits}`
//!   (as a signed or unsigned value, per `signed`), constants, and Boolean formulas over the
//!   spec's [`Atom`]s.
//! * An optional post-processing circuit [`Phi`] combines them; without it the outputs are the
//!   polynomials and constants (arithmetic) followed by the Boolean formulas.
//!
//! ```
//! use compiler::spec::OperatorSpec;
//! // ReLU on 8 bits: 0 below zero, x above.
//! let spec: OperatorSpec = serde_json::from_str(r#"{
//!     "name": "relu8", "in_bits": 8, "out_bits": 8, "signed": true,
//!     "boundaries": [0, 128],
//!     "pieces": [ {"polys": [[0, 1]]}, {"polys": [[0]]} ]
//! }"#).unwrap();
//! spec.validate().unwrap();
//! assert_eq!(spec.eval(5).arith, vec![5]);
//! assert_eq!(spec.eval(200).arith, vec![0]);
//! ```

use serde::{Deserialize, Serialize};
use thiserror::Error;

use fss::ring::mask;

/// Largest polynomial degree a piece may use.
pub const MAX_DEGREE: usize = 4;
/// Most intervals a spec may have.
pub const MAX_PIECES: usize = 1 << 17;
/// Most arithmetic or Boolean outputs a piece may have.
pub const MAX_OUTPUTS: usize = 16;
/// Most nodes a post-processing circuit may have.
pub const MAX_PHI_NODES: usize = 4096;

/// A scalar operator over an `in_bits`-bit masked input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorSpec {
    /// A name for messages and benchmarks.
    pub name: String,
    /// Input width `n` (1..=64): the gate reads `x̂ mod 2^n`.
    pub in_bits: u32,
    /// Width `ℓ` (1..=64) of the ring the arithmetic outputs live in.
    pub out_bits: u32,
    /// How `X` lifts the input into `Z_{2^ℓ}`: two's complement (true) or unsigned.
    #[serde(default)]
    pub signed: bool,
    /// A signed input with slack: every input the gate is meant for satisfies
    /// `−2^{n−2} ≤ x < 2^{n−2}` (a value truncated with slack does, [`OperatorSpec::slack_holds`]).
    /// The compiler then reads `u = x + 2^{n−2}`, which never reaches `2^{n−1}`, so the wrap
    /// of `u` is `msb(r)·¬msb(û)` instead of a comparison: a function that steps at 0 and
    /// is continued across the ends of the ring (a ReLU part) reads all its thresholds from
    /// around 0. The output equals [`OperatorSpec::eval`] for those inputs only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slack: bool,
    /// Fixed-point scale of the input (metadata for fitting and error reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<u32>,
    /// Fixed-point scale of the arithmetic outputs when it differs from the input's (a
    /// polynomial of degree `d` in a scale-`f` input has outputs at `(d + 1)·f`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_scale: Option<u32>,
    /// Interval starts, strictly increasing, the first 0; the last interval ends at `2^n`.
    pub boundaries: Vec<u64>,
    /// One piece per interval.
    pub pieces: Vec<Piece>,
    /// Predicates the Boolean formulas and `Φ` refer to by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub atoms: Vec<Atom>,
    /// Constants that the dealer secret-shares (`κ`), in `Z_{2^ℓ}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kappa: Vec<i128>,
    /// Post-processing circuit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phi: Option<Phi>,
}

/// What an operator computes on one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Piece {
    /// Polynomials in `X`, coefficients low degree first, in `Z_{2^ℓ}` (negative values wrap).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub polys: Vec<Vec<i128>>,
    /// Per-interval constants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consts: Vec<i128>,
    /// Boolean outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bools: Vec<BoolExpr>,
}

/// A predicate on the input `x` (unsigned, `n` bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Atom {
    /// `1[x < beta]`, `0 ≤ beta ≤ 2^n`.
    Lt {
        /// The threshold.
        beta: u64,
    },
    /// `1[(x mod 2^bits) < gamma]`, `1 ≤ bits < n`, `gamma ≤ 2^bits`.
    LtLow {
        /// Low-bit width.
        bits: u32,
        /// The threshold.
        gamma: u64,
    },
    /// `1[x ≥ 2^{n−1}]`: the sign of a two's-complement input.
    Msb,
    /// The MSB of `(x + offset) mod 2^n`.
    MsbAdd {
        /// The offset.
        offset: u64,
    },
}

/// A Boolean formula over atoms.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoolExpr {
    /// A constant.
    Const(bool),
    /// Atom number `i` of the spec.
    Atom(usize),
    /// Negation.
    Not(Box<BoolExpr>),
    /// Exclusive or of all operands.
    Xor(Vec<BoolExpr>),
    /// Conjunction of all operands.
    And(Vec<BoolExpr>),
    /// Disjunction of all operands.
    Or(Vec<BoolExpr>),
}

/// The post-processing circuit `Φ`: nodes in topological order (a node refers only to
/// earlier ones), and the nodes that are outputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phi {
    /// The nodes.
    pub nodes: Vec<Node>,
    /// The outputs, in order.
    pub outputs: Vec<Output>,
}

/// An output of `Φ`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Output {
    /// An arithmetic node, revealed masked in `Z_{2^ℓ}`.
    Arith(usize),
    /// A Boolean node, revealed as a masked bit.
    Bool(usize),
}

/// A node of `Φ`. Arithmetic nodes are in `Z_{2^ℓ}`; Boolean nodes are bits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Node {
    /// Arithmetic constant.
    Const {
        /// The value (negative values wrap).
        #[serde(deserialize_with = "integer")]
        value: i128,
    },
    /// The lifted input `X`.
    X,
    /// Polynomial output `index` of the active piece.
    Poly {
        /// Which polynomial.
        index: usize,
    },
    /// Constant `index` of the active piece.
    Aux {
        /// Which constant.
        index: usize,
    },
    /// Secret-shared constant `κ[index]`.
    Kappa {
        /// Which constant.
        index: usize,
    },
    /// `a + b`.
    Add {
        /// Left operand.
        a: usize,
        /// Right operand.
        b: usize,
    },
    /// `a − b`.
    Sub {
        /// Left operand.
        a: usize,
        /// Right operand.
        b: usize,
    },
    /// `by · a` for a public constant.
    Scale {
        /// Operand.
        a: usize,
        /// Factor (negative values wrap).
        #[serde(deserialize_with = "integer")]
        by: i128,
    },
    /// `a · b` (a Beaver multiplication unless the compiler can do it locally).
    Mul {
        /// Left operand.
        a: usize,
        /// Right operand.
        b: usize,
    },
    /// The bit `a` as a ring element.
    B2a {
        /// Boolean operand.
        a: usize,
    },
    /// `bit ? a : b`.
    Select {
        /// Boolean condition.
        bit: usize,
        /// Value if set.
        a: usize,
        /// Value if clear.
        b: usize,
    },
    /// `⌊X / 2^bits⌋`, the exact arithmetic (signed spec) or logical shift of the input.
    Shr {
        /// Shift, `1 ≤ bits < in_bits`.
        bits: u32,
    },
    /// `x mod 2^bits`: the input's offset in its row of `2^bits` values, in `[0, 2^bits)`
    /// (for a piece that is a polynomial in the offset within its row: an interpolated table).
    Low {
        /// Row width, `1 ≤ bits < in_bits` (at most `in_bits − 2` with slack).
        bits: u32,
    },
    /// `value − slope·(x mod 2^bits)` for the active piece's constants `value` and `slope`:
    /// a table read in rows of `2^bits` and interpolated linearly in each row. When the
    /// rows join up (each row's value is where the row before it ends, `v_k = v_{k−1} −
    /// 2^bits·s_{k−1}`, cyclically, and a row that does not start an interval has slope 0
    /// mod `2^ℓ / 2^bits`), a split comparison reads `value` without its carry.
    Interp {
        /// The constant holding the value at the row's start.
        value: usize,
        /// The constant holding the slope (per unit of `x`).
        slope: usize,
        /// Row width, `1 ≤ bits < in_bits` (at most `in_bits − 2` with slack).
        bits: u32,
    },
    /// Boolean output `index` of the active piece.
    Bool {
        /// Which formula.
        index: usize,
    },
    /// Atom `index` of the spec.
    Atom {
        /// Which atom.
        index: usize,
    },
    /// Boolean constant.
    Bit {
        /// The value.
        value: bool,
    },
    /// `¬a`.
    Not {
        /// Operand.
        a: usize,
    },
    /// `a ⊕ b`.
    Xor {
        /// Left operand.
        a: usize,
        /// Right operand.
        b: usize,
    },
    /// `a ∧ b`.
    And {
        /// Left operand.
        a: usize,
        /// Right operand.
        b: usize,
    },
    /// `a ∨ b`.
    Or {
        /// Left operand.
        a: usize,
        /// Right operand.
        b: usize,
    },
}

/// An integer of `Φ`'s nodes: any JSON integer that fits `i64` or `u64` (serde buffers the
/// fields of a tagged enum, and the buffer has no `i128`).
fn integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i128, D::Error> {
    struct Integer;
    impl serde::de::Visitor<'_> for Integer {
        type Value = i128;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an integer in -2^63..2^64")
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i128, E> {
            Ok(v as i128)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i128, E> {
            Ok(v as i128)
        }
    }
    d.deserialize_any(Integer)
}

/// Whether a value is a ring element or a bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// In `Z_{2^ℓ}`.
    Arith,
    /// A bit.
    Bool,
}

impl Node {
    /// The node's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Node::Const { .. }
            | Node::X
            | Node::Poly { .. }
            | Node::Aux { .. }
            | Node::Kappa { .. }
            | Node::Add { .. }
            | Node::Sub { .. }
            | Node::Scale { .. }
            | Node::Mul { .. }
            | Node::B2a { .. }
            | Node::Select { .. }
            | Node::Shr { .. }
            | Node::Low { .. }
            | Node::Interp { .. } => Kind::Arith,
            _ => Kind::Bool,
        }
    }

    /// The operation's name in JSON (`"op"`).
    pub fn op(&self) -> &'static str {
        match self {
            Node::Const { .. } => "const",
            Node::X => "x",
            Node::Poly { .. } => "poly",
            Node::Aux { .. } => "aux",
            Node::Kappa { .. } => "kappa",
            Node::Add { .. } => "add",
            Node::Sub { .. } => "sub",
            Node::Scale { .. } => "scale",
            Node::Mul { .. } => "mul",
            Node::B2a { .. } => "b2a",
            Node::Select { .. } => "select",
            Node::Shr { .. } => "shr",
            Node::Low { .. } => "low",
            Node::Interp { .. } => "interp",
            Node::Bool { .. } => "bool",
            Node::Atom { .. } => "atom",
            Node::Bit { .. } => "bit",
            Node::Not { .. } => "not",
            Node::Xor { .. } => "xor",
            Node::And { .. } => "and",
            Node::Or { .. } => "or",
        }
    }

    /// The operands and the kind each must have.
    pub fn operands(&self) -> Vec<(usize, Kind)> {
        use Kind::{Arith as A, Bool as B};
        match *self {
            Node::Add { a, b } | Node::Sub { a, b } | Node::Mul { a, b } => vec![(a, A), (b, A)],
            Node::Scale { a, .. } => vec![(a, A)],
            Node::B2a { a } | Node::Not { a } => vec![(a, B)],
            Node::Select { bit, a, b } => vec![(bit, B), (a, A), (b, A)],
            Node::Xor { a, b } | Node::And { a, b } | Node::Or { a, b } => vec![(a, B), (b, B)],
            _ => vec![],
        }
    }
}

/// Why a spec is not valid.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A width outside `1..=64`, or another bad width.
    #[error("{0}")]
    Width(String),
    /// The boundaries are empty, do not start at 0, are not strictly increasing or leave
    /// the domain.
    #[error("boundaries: {0}")]
    Boundaries(String),
    /// The pieces do not match the boundaries or each other.
    #[error("piece {piece}: {msg}")]
    Piece {
        /// Index of the offending piece.
        piece: usize,
        /// What is wrong.
        msg: String,
    },
    /// An atom is out of range.
    #[error("atom {atom}: {msg}")]
    Atom {
        /// Index of the offending atom.
        atom: usize,
        /// What is wrong.
        msg: String,
    },
    /// A constant does not fit the output ring.
    #[error("constant {value} does not fit {bits} bits (as a signed or unsigned value)")]
    Constant {
        /// The constant.
        value: i128,
        /// The ring width.
        bits: u32,
    },
    /// The post-processing circuit is ill-formed.
    #[error("phi node {node}: {msg}")]
    Phi {
        /// Index of the offending node (or of the output list entry).
        node: usize,
        /// What is wrong.
        msg: String,
    },
    /// The spec is valid but too large for the compiler's limits.
    #[error("too large: {0}")]
    TooLarge(String),
    /// Compiling the spec would build more than a limit of `CompileOptions::limits` allows:
    /// where, what, the estimate and the limit.
    #[error("{site}: {estimate} {measure} (estimated) exceed the limit of {limit} (CompileOptions::limits)")]
    Limit {
        /// The part of the spec being compiled.
        site: Site,
        /// What was counted.
        measure: Measure,
        /// The estimate when compilation stopped.
        estimate: u64,
        /// The limit.
        limit: u64,
    },
    /// The JSON text does not describe a spec.
    #[error("not a spec: {0}")]
    Json(String),
}

/// The part of a spec a [`SpecError::Limit`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// The pieces: their polynomials and constants through the lookup.
    Pieces,
    /// Boolean formula `index` of the pieces.
    Formula(usize),
    /// Node `index` of `Φ`, with its `op`.
    Node {
        /// The node's index.
        index: usize,
        /// Its operation, as the JSON names it.
        op: &'static str,
    },
    /// The outputs and the program assembled from them.
    Program,
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Site::Pieces => write!(f, "the pieces"),
            Site::Formula(j) => write!(f, "formula {j}"),
            Site::Node { index, op } => write!(f, "phi node {index} ({op})"),
            Site::Program => write!(f, "the program"),
        }
    }
}

/// What a [`SpecError::Limit`] counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Terms of the symbolic polynomials built while lowering (and cells evaluated).
    Terms,
    /// Dealer words of the program.
    Words,
    /// Key bytes of one party per element.
    KeyBytes,
}

impl std::fmt::Display for Measure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Measure::Terms => "symbolic terms",
            Measure::Words => "dealer words",
            Measure::KeyBytes => "key bytes per element",
        })
    }
}

/// The value of a spec on one input: its arithmetic and Boolean outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Value {
    /// Arithmetic outputs in `Z_{2^ℓ}`.
    pub arith: Vec<u64>,
    /// Boolean outputs.
    pub bools: Vec<bool>,
}

/// Reduce a signed constant into `Z_{2^bits}`.
pub fn word(v: i128, bits: u32) -> u64 {
    (v as u64) & mask(bits)
}

/// Whether `v` is a `bits`-bit value, signed or unsigned: `−2^{bits−1} ≤ v < 2^bits`.
fn fits(v: i128, bits: u32) -> bool {
    v >= -(1i128 << (bits - 1)) && v < (1i128 << bits)
}

impl OperatorSpec {
    /// A spec of intervals and pieces only: no slack, scales, atoms, `κ` or `Φ` (set them
    /// with struct update syntax). Not validated.
    pub fn of_pieces(
        name: impl Into<String>,
        in_bits: u32,
        out_bits: u32,
        signed: bool,
        boundaries: Vec<u64>,
        pieces: Vec<Piece>,
    ) -> OperatorSpec {
        OperatorSpec {
            name: name.into(),
            in_bits,
            out_bits,
            signed,
            slack: false,
            scale: None,
            out_scale: None,
            boundaries,
            pieces,
            atoms: vec![],
            kappa: vec![],
            phi: None,
        }
    }

    /// Parse and validate a JSON spec.
    ///
    /// # Errors
    /// [`SpecError::Json`] for malformed JSON, or the first validation error.
    pub fn from_json(text: &str) -> Result<OperatorSpec, SpecError> {
        let spec: OperatorSpec = serde_json::from_str(text).map_err(|e| SpecError::Json(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// The spec as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a spec always serialises")
    }

    /// Number of arithmetic polynomial outputs per piece.
    pub fn poly_count(&self) -> usize {
        self.pieces.first().map_or(0, |p| p.polys.len())
    }

    /// Number of constants per piece.
    pub fn const_count(&self) -> usize {
        self.pieces.first().map_or(0, |p| p.consts.len())
    }

    /// Number of Boolean formulas per piece.
    pub fn bool_count(&self) -> usize {
        self.pieces.first().map_or(0, |p| p.bools.len())
    }

    /// The largest polynomial degree used.
    pub fn degree(&self) -> usize {
        self.pieces.iter().flat_map(|p| p.polys.iter().map(|c| c.len().saturating_sub(1))).max().unwrap_or(0)
    }

    /// The outputs' kinds, in order.
    pub fn output_kinds(&self) -> Vec<Kind> {
        match &self.phi {
            Some(phi) => phi
                .outputs
                .iter()
                .map(|o| match o {
                    Output::Arith(_) => Kind::Arith,
                    Output::Bool(_) => Kind::Bool,
                })
                .collect(),
            None => {
                let mut k = vec![Kind::Arith; self.poly_count() + self.const_count()];
                k.extend(std::iter::repeat_n(Kind::Bool, self.bool_count()));
                k
            }
        }
    }

    /// Check every rule of the format; the compiler and [`OperatorSpec::eval`] assume them.
    ///
    /// # Errors
    /// The first [`SpecError`] found.
    pub fn validate(&self) -> Result<(), SpecError> {
        let (n, l) = (self.in_bits, self.out_bits);
        if !(1..=64).contains(&n) {
            return Err(SpecError::Width(format!("in_bits = {n}, need 1..=64")));
        }
        if !(1..=64).contains(&l) {
            return Err(SpecError::Width(format!("out_bits = {l}, need 1..=64")));
        }
        if self.scale.is_some_and(|s| s >= 63) || self.out_scale.is_some_and(|s| s >= 63) {
            return Err(SpecError::Width(format!(
                "scales {:?}/{:?} are too large",
                self.scale, self.out_scale
            )));
        }
        self.validate_boundaries()?;
        self.validate_pieces()?;
        if self.slack {
            let bad = |msg: &str| Err(SpecError::Width(format!("slack: {msg}")));
            if !self.signed || !(3..64).contains(&n) {
                return bad("needs a signed input of 3 to 63 bits");
            }
            if !self.atoms.is_empty() || self.bool_count() > 0 {
                return bad("Boolean outputs and atoms are not supported");
            }
            // (A shift reads `u = x + 2^{n−2}`, whose wrap is local; it must leave the
            // slack range's bits: `bits ≤ n − 2`.)
            if self.phi.as_ref().is_some_and(|p| {
                p.nodes.iter().any(|v| {
                    matches!(*v, Node::Shr { bits } | Node::Low { bits } | Node::Interp { bits, .. }
                            if bits > n - 2)
                })
            }) {
                return bad("a shift or row offset of more than n − 2 bits");
            }
        }
        for (i, a) in self.atoms.iter().enumerate() {
            let bad = |msg: String| Err(SpecError::Atom { atom: i, msg });
            match *a {
                Atom::Lt { beta } if n < 64 && beta > 1u64 << n => {
                    return bad(format!("beta {beta} exceeds 2^{n}"));
                }
                Atom::LtLow { bits, gamma } => {
                    if bits == 0 || bits >= n {
                        return bad(format!("low-bit width {bits} must be in 1..{n}"));
                    }
                    if gamma > 1u64 << bits {
                        return bad(format!("gamma {gamma} exceeds 2^{bits}"));
                    }
                }
                Atom::MsbAdd { offset } if offset & !mask(n) != 0 => {
                    return bad(format!("offset {offset} does not fit {n} bits"));
                }
                _ => {}
            }
        }
        for &k in &self.kappa {
            self.check_constant(k)?;
        }
        if let Some(phi) = &self.phi {
            self.validate_phi(phi)?;
        }
        Ok(())
    }

    fn check_constant(&self, v: i128) -> Result<(), SpecError> {
        if !fits(v, self.out_bits) {
            return Err(SpecError::Constant { value: v, bits: self.out_bits });
        }
        Ok(())
    }

    fn validate_boundaries(&self) -> Result<(), SpecError> {
        let b = &self.boundaries;
        let bad = |m: String| Err(SpecError::Boundaries(m));
        if b.is_empty() {
            return bad("no intervals".into());
        }
        if b.len() > MAX_PIECES {
            return Err(SpecError::TooLarge(format!("{} intervals (at most {MAX_PIECES})", b.len())));
        }
        if b[0] != 0 {
            return bad(format!("the first interval must start at 0, not {}", b[0]));
        }
        if let Some(w) = b.windows(2).position(|w| w[0] >= w[1]) {
            return bad(format!("not strictly increasing at index {}: {} then {}", w + 1, b[w], b[w + 1]));
        }
        let last = *b.last().expect("non-empty");
        if last & !mask(self.in_bits) != 0 {
            return bad(format!("start {last} is outside the {}-bit domain", self.in_bits));
        }
        if b.len() != self.pieces.len() {
            return bad(format!("{} intervals but {} pieces", b.len(), self.pieces.len()));
        }
        Ok(())
    }

    fn validate_pieces(&self) -> Result<(), SpecError> {
        let (np, nc, nb) = (self.poly_count(), self.const_count(), self.bool_count());
        if np > MAX_OUTPUTS || nc > MAX_OUTPUTS || nb > MAX_OUTPUTS {
            return Err(SpecError::TooLarge(format!(
                "{np} polynomials, {nc} constants, {nb} formulas per piece"
            )));
        }
        for (i, p) in self.pieces.iter().enumerate() {
            let bad = |msg: String| Err(SpecError::Piece { piece: i, msg });
            if (p.polys.len(), p.consts.len(), p.bools.len()) != (np, nc, nb) {
                return bad(format!(
                    "arity ({} polynomials, {} constants, {} formulas) differs from piece 0's ({np}, {nc}, {nb})",
                    p.polys.len(),
                    p.consts.len(),
                    p.bools.len()
                ));
            }
            for (j, c) in p.polys.iter().enumerate() {
                if c.is_empty() {
                    return bad(format!("polynomial {j} has no coefficients"));
                }
                if c.len() > MAX_DEGREE + 1 {
                    return bad(format!("polynomial {j} has degree {} (at most {MAX_DEGREE})", c.len() - 1));
                }
            }
            for &v in p.polys.iter().flatten().chain(&p.consts) {
                self.check_constant(v)?;
            }
            for e in &p.bools {
                self.check_bool(e).or_else(&bad)?;
            }
        }
        Ok(())
    }

    fn check_bool(&self, e: &BoolExpr) -> Result<(), String> {
        match e {
            BoolExpr::Const(_) => Ok(()),
            BoolExpr::Atom(i) if *i < self.atoms.len() => Ok(()),
            BoolExpr::Atom(i) => Err(format!("atom {i} does not exist ({} atoms)", self.atoms.len())),
            BoolExpr::Not(a) => self.check_bool(a),
            BoolExpr::Xor(v) | BoolExpr::And(v) | BoolExpr::Or(v) => {
                if v.is_empty() {
                    return Err("an empty xor/and/or".into());
                }
                v.iter().try_for_each(|a| self.check_bool(a))
            }
        }
    }

    fn validate_phi(&self, phi: &Phi) -> Result<(), SpecError> {
        if phi.nodes.len() > MAX_PHI_NODES {
            return Err(SpecError::TooLarge(format!(
                "{} phi nodes (at most {MAX_PHI_NODES})",
                phi.nodes.len()
            )));
        }
        if phi.outputs.is_empty() {
            return Err(SpecError::Phi { node: 0, msg: "no outputs".into() });
        }
        for (i, node) in phi.nodes.iter().enumerate() {
            let bad = |msg: String| Err(SpecError::Phi { node: i, msg });
            for (op, kind) in node.operands() {
                if op >= i {
                    return bad(format!("operand {op} is not an earlier node"));
                }
                if phi.nodes[op].kind() != kind {
                    return bad(format!("operand {op} should be {kind:?}"));
                }
            }
            match *node {
                Node::Const { value } | Node::Scale { by: value, .. } => self.check_constant(value)?,
                Node::Poly { index } if index >= self.poly_count() => {
                    return bad(format!("polynomial {index} does not exist"));
                }
                Node::Aux { index } if index >= self.const_count() => {
                    return bad(format!("constant {index} does not exist"));
                }
                Node::Kappa { index } if index >= self.kappa.len() => {
                    return bad(format!("kappa {index} does not exist"));
                }
                Node::Bool { index } if index >= self.bool_count() => {
                    return bad(format!("formula {index} does not exist"));
                }
                Node::Atom { index } if index >= self.atoms.len() => {
                    return bad(format!("atom {index} does not exist"));
                }
                Node::Shr { bits } if bits == 0 || bits >= self.in_bits => {
                    return bad(format!("shift {bits} must be in 1..{}", self.in_bits));
                }
                Node::Low { bits } | Node::Interp { bits, .. } if bits == 0 || bits >= self.in_bits => {
                    return bad(format!("row width {bits} must be in 1..{}", self.in_bits));
                }
                Node::Interp { value, slope, .. } if value.max(slope) >= self.const_count() => {
                    return bad(format!("constant {} does not exist", value.max(slope)));
                }
                _ => {}
            }
        }
        for (j, o) in phi.outputs.iter().enumerate() {
            let (i, kind) = match *o {
                Output::Arith(i) => (i, Kind::Arith),
                Output::Bool(i) => (i, Kind::Bool),
            };
            if i >= phi.nodes.len() || phi.nodes[i].kind() != kind {
                return Err(SpecError::Phi { node: j, msg: format!("output {j} is not a {kind:?} node") });
            }
        }
        Ok(())
    }

    /// Index of the piece whose interval holds `x` (reduced to `in_bits`).
    pub fn piece_of(&self, x: u64) -> usize {
        let x = x & mask(self.in_bits);
        self.boundaries.partition_point(|&b| b <= x) - 1
    }

    /// Whether input `x` is one the gate is meant for: always, unless the spec has
    /// [`OperatorSpec::slack`], which asks for `−2^{n−2} ≤ x < 2^{n−2}`.
    pub fn slack_holds(&self, x: u64) -> bool {
        let n = self.in_bits;
        !self.slack || (x & mask(n)).wrapping_add(1u64 << (n - 2)) & mask(n) < 1u64 << (n - 1)
    }

    /// `X`: the input lifted into `Z_{2^ℓ}`.
    pub fn lift(&self, x: u64) -> u64 {
        let (n, x) = (self.in_bits, x & mask(self.in_bits));
        let v = if self.signed && n < 64 && x >> (n - 1) == 1 { x | !mask(n) } else { x };
        v & mask(self.out_bits)
    }

    /// The value of an atom at `x`.
    pub fn atom(&self, a: Atom, x: u64) -> bool {
        let (n, x) = (self.in_bits, x & mask(self.in_bits));
        match a {
            Atom::Lt { beta } => x < beta,
            Atom::LtLow { bits, gamma } => x & mask(bits) < gamma,
            Atom::Msb => x >> (n - 1) == 1,
            Atom::MsbAdd { offset } => (x.wrapping_add(offset) & mask(n)) >> (n - 1) == 1,
        }
    }

    /// Evaluate a formula at `x`.
    pub fn eval_bool(&self, e: &BoolExpr, x: u64) -> bool {
        match e {
            BoolExpr::Const(b) => *b,
            BoolExpr::Atom(i) => self.atom(self.atoms[*i], x),
            BoolExpr::Not(a) => !self.eval_bool(a, x),
            BoolExpr::Xor(v) => v.iter().fold(false, |s, a| s ^ self.eval_bool(a, x)),
            BoolExpr::And(v) => v.iter().all(|a| self.eval_bool(a, x)),
            BoolExpr::Or(v) => v.iter().any(|a| self.eval_bool(a, x)),
        }
    }

    /// Polynomial `j` of piece `i` at the lifted input `lx`.
    pub fn poly(&self, i: usize, j: usize, lx: u64) -> u64 {
        let l = self.out_bits;
        self.pieces[i].polys[j]
            .iter()
            .rev()
            .fold(0u64, |acc, &c| acc.wrapping_mul(lx).wrapping_add(word(c, l)))
            & mask(l)
    }

    /// `⌊X / 2^bits⌋` in `Z_{2^ℓ}`: arithmetic for a signed spec, logical otherwise.
    pub fn shr(&self, x: u64, bits: u32) -> u64 {
        let (n, x) = (self.in_bits, x & mask(self.in_bits));
        let v = if self.signed { (((x << (64 - n)) as i64) >> (64 - n)) >> bits } else { (x >> bits) as i64 };
        v as u64 & mask(self.out_bits)
    }

    /// The exact result on input `x`: the plaintext reference of every compiled gate.
    ///
    /// # Panics
    /// If the spec is not valid (call [`OperatorSpec::validate`] first).
    pub fn eval(&self, x: u64) -> Value {
        let i = self.piece_of(x);
        let lx = self.lift(x);
        let l = self.out_bits;
        let piece = &self.pieces[i];
        let polys: Vec<u64> = (0..piece.polys.len()).map(|j| self.poly(i, j, lx)).collect();
        let consts: Vec<u64> = piece.consts.iter().map(|&c| word(c, l)).collect();
        let bools: Vec<bool> = piece.bools.iter().map(|e| self.eval_bool(e, x)).collect();
        let Some(phi) = &self.phi else {
            let mut arith = polys;
            arith.extend(consts);
            return Value { arith, bools };
        };
        #[derive(Clone, Copy)]
        enum V {
            A(u64),
            B(bool),
        }
        let mut vals: Vec<V> = Vec::with_capacity(phi.nodes.len());
        let a = |vals: &[V], k: usize| match vals[k] {
            V::A(v) => v,
            V::B(_) => unreachable!("validated"),
        };
        let b = |vals: &[V], k: usize| match vals[k] {
            V::B(v) => v,
            V::A(_) => unreachable!("validated"),
        };
        let m = mask(l);
        for node in &phi.nodes {
            let v = match *node {
                Node::Const { value } => V::A(word(value, l)),
                Node::X => V::A(lx),
                Node::Poly { index } => V::A(polys[index]),
                Node::Aux { index } => V::A(consts[index]),
                Node::Kappa { index } => V::A(word(self.kappa[index], l)),
                Node::Add { a: p, b: q } => V::A(a(&vals, p).wrapping_add(a(&vals, q)) & m),
                Node::Sub { a: p, b: q } => V::A(a(&vals, p).wrapping_sub(a(&vals, q)) & m),
                Node::Scale { a: p, by } => V::A(a(&vals, p).wrapping_mul(word(by, l)) & m),
                Node::Mul { a: p, b: q } => V::A(a(&vals, p).wrapping_mul(a(&vals, q)) & m),
                Node::B2a { a: p } => V::A(b(&vals, p) as u64),
                Node::Select { bit, a: p, b: q } => {
                    V::A(if b(&vals, bit) { a(&vals, p) } else { a(&vals, q) })
                }
                Node::Shr { bits } => V::A(self.shr(x, bits)),
                Node::Low { bits } => V::A(x & mask(bits) & m),
                Node::Interp { value, slope, bits } => {
                    V::A(consts[value].wrapping_sub(consts[slope].wrapping_mul(x & mask(bits))) & m)
                }
                Node::Bool { index } => V::B(bools[index]),
                Node::Atom { index } => V::B(self.atom(self.atoms[index], x)),
                Node::Bit { value } => V::B(value),
                Node::Not { a: p } => V::B(!b(&vals, p)),
                Node::Xor { a: p, b: q } => V::B(b(&vals, p) ^ b(&vals, q)),
                Node::And { a: p, b: q } => V::B(b(&vals, p) & b(&vals, q)),
                Node::Or { a: p, b: q } => V::B(b(&vals, p) | b(&vals, q)),
            };
            vals.push(v);
        }
        let mut out = Value::default();
        for o in &phi.outputs {
            match *o {
                Output::Arith(k) => out.arith.push(a(&vals, k)),
                Output::Bool(k) => out.bools.push(b(&vals, k)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relu() -> OperatorSpec {
        OperatorSpec::of_pieces(
            "relu",
            8,
            8,
            true,
            vec![0, 128],
            vec![
                Piece { polys: vec![vec![0, 1]], ..Piece::default() },
                Piece { polys: vec![vec![0]], ..Piece::default() },
            ],
        )
    }

    #[test]
    fn json_round_trip() {
        let s = relu();
        let back = OperatorSpec::from_json(&s.to_json()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn phi_constants_round_trip_across_their_range() {
        let mut s = relu();
        s.out_bits = 64;
        for v in [0i128, 3, -1, i64::MIN as i128, u64::MAX as i128] {
            s.phi = Some(Phi {
                nodes: vec![Node::Const { value: v }, Node::Scale { a: 0, by: v }],
                outputs: vec![Output::Arith(1)],
            });
            assert_eq!(OperatorSpec::from_json(&s.to_json()).unwrap(), s, "{v}");
        }
        let big = r#"{"name":"c","in_bits":4,"out_bits":8,"boundaries":[0],"pieces":[{}],
            "phi":{"nodes":[{"op":"const","value":18446744073709551616}],"outputs":[{"arith":0}]}}"#;
        assert!(matches!(OperatorSpec::from_json(big), Err(SpecError::Json(_))));
    }

    #[test]
    fn rejects_bad_specs() {
        let mut s = relu();
        s.boundaries = vec![1, 128];
        assert!(matches!(s.validate(), Err(SpecError::Boundaries(_))));
        let mut s = relu();
        s.boundaries = vec![0, 128, 128];
        s.pieces.push(Piece::default());
        assert!(matches!(s.validate(), Err(SpecError::Boundaries(_))));
        let mut s = relu();
        s.boundaries = vec![0, 256];
        assert!(matches!(s.validate(), Err(SpecError::Boundaries(_))));
        let mut s = relu();
        s.pieces[1].polys.push(vec![1]);
        assert!(matches!(s.validate(), Err(SpecError::Piece { piece: 1, .. })));
        let mut s = relu();
        s.pieces[0].polys[0] = vec![0; MAX_DEGREE + 2];
        assert!(matches!(s.validate(), Err(SpecError::Piece { piece: 0, .. })));
        let mut s = relu();
        s.pieces[0].polys[0] = vec![1 << 9];
        assert!(matches!(s.validate(), Err(SpecError::Constant { .. })));
        let mut s = relu();
        s.atoms = vec![Atom::LtLow { bits: 8, gamma: 1 }];
        assert!(matches!(s.validate(), Err(SpecError::Atom { atom: 0, .. })));
        let mut s = relu();
        s.phi = Some(Phi { nodes: vec![Node::Add { a: 0, b: 0 }], outputs: vec![Output::Arith(0)] });
        assert!(matches!(s.validate(), Err(SpecError::Phi { node: 0, .. })));
        let mut s = relu();
        s.phi = Some(Phi { nodes: vec![Node::X, Node::Not { a: 0 }], outputs: vec![Output::Bool(1)] });
        assert!(matches!(s.validate(), Err(SpecError::Phi { node: 1, .. })));
        let mut s = relu();
        s.phi = Some(Phi { nodes: vec![Node::X], outputs: vec![Output::Bool(0)] });
        assert!(matches!(s.validate(), Err(SpecError::Phi { .. })));
        assert!(matches!(OperatorSpec::from_json("{\"name\": 3}"), Err(SpecError::Json(_))));
        // Rows of an interpolated table: widths in 1..n, constants that exist, slack room.
        for node in
            [Node::Low { bits: 0 }, Node::Low { bits: 8 }, Node::Interp { value: 0, slope: 0, bits: 9 }]
        {
            let mut s = relu();
            s.pieces.iter_mut().for_each(|p| p.consts = vec![1]);
            s.phi = Some(Phi { nodes: vec![node.clone()], outputs: vec![Output::Arith(0)] });
            assert!(matches!(s.validate(), Err(SpecError::Phi { node: 0, .. })), "{node:?}");
        }
        let mut s = relu();
        s.pieces.iter_mut().for_each(|p| p.consts = vec![1]);
        s.phi = Some(Phi {
            nodes: vec![Node::Interp { value: 0, slope: 1, bits: 3 }],
            outputs: vec![Output::Arith(0)],
        });
        assert!(matches!(s.validate(), Err(SpecError::Phi { node: 0, .. })));
        let mut s = relu();
        s.slack = true;
        s.phi = Some(Phi { nodes: vec![Node::Low { bits: 7 }], outputs: vec![Output::Arith(0)] });
        assert!(matches!(s.validate(), Err(SpecError::Width(_))));
    }

    /// `low` and `interp` read from JSON, and mean the offset in the row and the row's line.
    #[test]
    fn rows_interpolated_in_json() {
        let text = r#"{"name": "lines", "in_bits": 6, "out_bits": 10, "boundaries": [0, 8, 16],
            "pieces": [{"consts": [40, 2]}, {"consts": [24, 0]}, {"consts": [24, -3]}],
            "phi": {"nodes": [{"op": "interp", "value": 0, "slope": 1, "bits": 3}, {"op": "low", "bits": 3}],
                    "outputs": [{"arith": 0}, {"arith": 1}]}}"#;
        let s = OperatorSpec::from_json(text).unwrap();
        s.validate().unwrap();
        assert_eq!(OperatorSpec::from_json(&s.to_json()).unwrap(), s);
        assert_eq!(s.eval(5).arith, vec![30, 5]);
        assert_eq!(s.eval(12).arith, vec![24, 4]);
        assert_eq!(s.eval(63).arith, vec![24 + 3 * 7, 7]);
    }

    #[test]
    fn eval_relu_and_shift() {
        let mut s = relu();
        assert_eq!(s.eval(127).arith, vec![127]);
        assert_eq!(s.eval(128).arith, vec![0]);
        s.phi = Some(Phi { nodes: vec![Node::Shr { bits: 3 }], outputs: vec![Output::Arith(0)] });
        s.validate().unwrap();
        // −20 / 8 floors to −3.
        assert_eq!(s.eval(256 - 20).arith, vec![256 - 3]);
    }
}
